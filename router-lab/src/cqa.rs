//! CommonsenseQA as the seed and CITER use it: reading the JSON Lines files, the exact prompt
//! format, and extracting the chosen label from generated text.
//!
//! Answer rule (documented for every reported accuracy): take the text after the *last*
//! "the answer is" (any case). If it contains a parenthesised single label letter, e.g.
//! "(c)", that label is the answer. Otherwise, if it starts with a capital label letter
//! standing alone ("C.", "C)", "C:", "C " or the end of the text), that label is the answer.
//! Otherwise, if it starts with one choice's text (any case, ignoring surrounding
//! punctuation), that choice's label is the answer; when several choices match, the longest
//! wins. Without the phrase at all, the last parenthesised label letter in
//! the text is the answer ("... is going to England (c)."). Anything else is "no answer" and
//! counts as wrong.

use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;

/// The answer options of one question.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Choices {
    /// Labels, "A".."E".
    pub label: Vec<String>,
    /// Option texts, in label order.
    pub text: Vec<String>,
}

/// One question (validation items have no prompt or reference chain of thought).
#[derive(Debug, Clone, Deserialize)]
pub struct Item {
    /// Dataset id.
    pub id: String,
    /// The question.
    pub question: String,
    /// Its options.
    pub choices: Choices,
    /// The correct label.
    #[serde(rename = "answerKey")]
    pub answer_key: String,
    /// The exact prompt (training files only).
    #[serde(default)]
    pub prompt: Option<String>,
    /// Reference chain of thought (training files only).
    #[serde(default)]
    pub cot: Option<String>,
}

/// A line of a dataset file that could not be used; reading goes on past it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// Why it was skipped.
    pub message: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Read a JSON Lines file of items; lines that do not parse are reported, not fatal.
pub fn read_items(path: &Path) -> std::io::Result<(Vec<Item>, Vec<LineError>)> {
    let file = std::fs::File::open(path)?;
    let mut items = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Item>(&line) {
            Ok(item) if item.choices.label.len() == item.choices.text.len() && !item.choices.label.is_empty() => items.push(item),
            Ok(_) => errors.push(LineError { line: i + 1, message: "choices: labels and texts differ in number".into() }),
            Err(e) => errors.push(LineError { line: i + 1, message: e.to_string() }),
        }
    }
    Ok((items, errors))
}

/// The seed's prompt for a question (identical to the `prompt` field of the training files).
pub fn prompt_for(question: &str, choices: &Choices) -> String {
    let mut s = format!("Question: {question}\nChoices:\n");
    for (l, t) in choices.label.iter().zip(&choices.text) {
        s.push_str(&format!("{l}. {t}\n"));
    }
    s.push_str(
        "\nPlease format your response in the following way:\n[Explanation]. Therefore, the answer is answer (label).\n\
         Ensure the final sentence includes the answer followed by the label in parentheses.\n\nAnswer and Reasoning:",
    );
    s
}

/// The label chosen by a generated text, by the rule in the module docs.
pub fn extract_answer(text: &str, choices: &Choices) -> Option<String> {
    // ASCII lowering keeps byte offsets, so `text` and `lower` can share indices.
    let lower = text.to_ascii_lowercase();
    let labels: Vec<String> = choices.label.iter().map(|l| l.to_lowercase()).collect();
    let Some(at) = lower.rfind("the answer is") else {
        let b = lower.as_bytes();
        return (0..b.len().saturating_sub(2)).rev().find_map(|i| {
            (b[i] == b'(' && b[i + 2] == b')')
                .then(|| labels.iter().position(|l| l.as_bytes() == [b[i + 1]]))
                .flatten()
                .map(|k| choices.label[k].clone())
        });
    };
    let rest = &lower[at + "the answer is".len()..];
    // A parenthesised label: "(c)".
    let bytes = rest.as_bytes();
    for i in 0..bytes.len().saturating_sub(2) {
        if bytes[i] == b'(' && bytes[i + 2] == b')' {
            let c = (bytes[i + 1] as char).to_string();
            if let Some(k) = labels.iter().position(|l| *l == c) {
                return Some(choices.label[k].clone());
            }
        }
    }
    // A bare capital label: "the answer is C. garments".
    let original = text[at + "the answer is".len()..].trim_start_matches(|c: char| c.is_whitespace() || c == ':' || c == '"' || c == '\'');
    let mut chars = original.chars();
    if let (Some(first), next) = (chars.next(), chars.next()) {
        if first.is_ascii_uppercase() && next.is_none_or(|c| matches!(c, '.' | ')' | ':' | ',' | ' ' | '\n')) {
            if let Some(k) = choices.label.iter().position(|l| l.len() == 1 && l.starts_with(first)) {
                return Some(choices.label[k].clone());
            }
        }
    }
    let rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ':' || c == '"' || c == '\'');
    choices
        .text
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.is_empty() && rest.starts_with(&t.to_lowercase()))
        .max_by_key(|(_, t)| t.len())
        .map(|(k, _)| choices.label[k].clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choices() -> Choices {
        Choices {
            label: ["A", "B", "C", "D", "E"].map(String::from).to_vec(),
            text: ["bank", "library", "department store", "mall", "new york"].map(String::from).to_vec(),
        }
    }

    #[test]
    fn bare_capital_label_counts() {
        assert_eq!(extract_answer("[Explanation]. Therefore, the answer is C. department store.", &choices()).as_deref(), Some("C"));
        assert_eq!(extract_answer("Wood floats. Therefore, the answer is D.", &choices()).as_deref(), Some("D"));
        assert_eq!(extract_answer("the answer is B", &choices()).as_deref(), Some("B"));
        assert_eq!(extract_answer("Therefore, the answer is answer (label).", &choices()), None);
        assert_eq!(extract_answer("the answer is library.", &choices()).as_deref(), Some("B"), "choice text still counts");
    }

    #[test]
    fn label_in_parentheses_wins() {
        assert_eq!(extract_answer("Blah. Therefore, the answer is bank (a).", &choices()).as_deref(), Some("A"));
        assert_eq!(extract_answer("the answer is mall (D)", &choices()).as_deref(), Some("D"));
    }

    #[test]
    fn last_phrase_counts_and_text_match_is_the_fallback() {
        let t = "The answer is bank (a)? No. Therefore, the answer is department store.";
        assert_eq!(extract_answer(t, &choices()).as_deref(), Some("C"));
    }

    #[test]
    fn without_the_phrase_the_last_label_counts() {
        assert_eq!(extract_answer("One possibility is bank (a), or rather mall (d).", &choices()).as_deref(), Some("D"));
    }

    #[test]
    fn no_answer_is_none() {
        assert_eq!(extract_answer("I am not sure.", &choices()), None);
        assert_eq!(extract_answer("The answer is a penguin.", &choices()), None);
    }

    #[test]
    fn bad_lines_are_reported_with_their_number() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        let good = r#"{"id":"1","question":"q","choices":{"label":["A"],"text":["a"]},"answerKey":"A"}"#;
        std::fs::write(&p, format!("{good}\n{{not json\n\n{good}\n")).unwrap();
        let (items, errors) = read_items(&p).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].line, 2);
    }

    #[test]
    fn prompt_format_matches_the_training_files() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/data/commonsense_qa/train_router.jsonl");
        let (items, errors) = read_items(&path).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(items.len(), 2049);
        let mut answered = 0;
        for it in &items {
            assert_eq!(prompt_for(&it.question, &it.choices), it.prompt.clone().unwrap(), "item {}", it.id);
            if extract_answer(it.cot.as_deref().unwrap(), &it.choices).as_deref() == Some(it.answer_key.as_str()) {
                answered += 1;
            }
        }
        // The reference chains of thought end with the right label (a few are malformed).
        assert!(answered as f64 / items.len() as f64 > 0.97, "{answered}");
    }
}
