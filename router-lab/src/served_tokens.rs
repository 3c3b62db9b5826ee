//! What a served evaluation committed, token by token: `served-tokens.jsonl` beside its
//! `items.jsonl`, one line per item with the prompt's and the answer's token ids and where each
//! answer token came from. Texts alone cannot be checked against the models (a text does not
//! say which token ids or which positions the LLM chose); these lines can (`check-served`).

use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::Context;
use edge_node::decode::TokenSource;
use serde::{Deserialize, Serialize};

/// The file's name inside a served run's output directory.
pub const FILE: &str = "served-tokens.jsonl";

/// One item's committed tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServedTokens {
    /// The item's id (as in `items.jsonl`).
    pub id: String,
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// The answer's token ids, in order.
    pub tokens: Vec<u32>,
    /// One letter per answer token: `s` the SLM's (not escalated), `c` the LLM's (its own
    /// token, or a draft token it accepted), `f` escalated but the SLM's (a fallback).
    pub sources: String,
}

/// The letter [`ServedTokens::sources`] uses for `source`.
pub fn letter(source: TokenSource) -> char {
    match source {
        TokenSource::Slm => 's',
        TokenSource::Cloud => 'c',
        TokenSource::Fallback => 'f',
    }
}

/// Append one item's line.
pub fn append(out: &mut std::fs::File, item: &ServedTokens) -> anyhow::Result<()> {
    writeln!(out, "{}", serde_json::to_string(item)?)?;
    Ok(out.flush()?)
}

/// Read every line of `path`; a line that does not parse, or whose sources do not match its
/// tokens, is an error naming its line number.
pub fn read(path: &Path) -> anyhow::Result<Vec<ServedTokens>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {} (written by `router-lab eval --gateway`)", path.display()))?;
    let mut items = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let item: ServedTokens = serde_json::from_str(&line).with_context(|| format!("{} line {}", path.display(), n + 1))?;
        anyhow::ensure!(
            item.sources.chars().count() == item.tokens.len() && item.sources.chars().all(|c| matches!(c, 's' | 'c' | 'f')),
            "{} line {}: {} sources ({:?}) for {} tokens",
            path.display(),
            n + 1,
            item.sources.chars().count(),
            item.sources,
            item.tokens.len()
        );
        items.push(item);
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_back_as_written_and_a_bad_one_is_named_by_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let mut f = std::fs::File::create(&path).unwrap();
        let item = ServedTokens { id: "a".into(), prompt: vec![1, 2], tokens: vec![3, 4, 5], sources: ['s', letter(TokenSource::Cloud), 'f'].iter().collect() };
        append(&mut f, &item).unwrap();
        assert_eq!(read(&path).unwrap(), vec![item]);
        writeln!(f, r#"{{"id":"b","prompt":[1],"tokens":[2,3],"sources":"s"}}"#).unwrap();
        let err = format!("{:#}", read(&path).unwrap_err());
        assert!(err.contains("line 2") && err.contains("1 sources"), "{err}");
    }
}
