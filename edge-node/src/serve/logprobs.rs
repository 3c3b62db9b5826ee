//! Log-probabilities from the SLM's next-token distribution, for `logprobs`/`top_logprobs`
//! (chat) and `logprobs`/`echo` (completions): what evaluation harnesses score with. Every
//! figure is the SLM's, cloud tokens included (the SLM's view of the token the cloud chose), so
//! that all positions are measured by one model.

use model_runtime::tokenizer::Tokenizer;
use model_runtime::{CausalLm, KvCache, RuntimeError, StepOutput};
use serde_json::{json, Map, Value};

/// One position: its token, that token's logprob, and the likeliest alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The token's text (its bytes as UTF-8, lossy for a token that splits a character).
    pub token: String,
    /// Its raw bytes.
    pub bytes: Vec<u8>,
    /// ln p(token | context) under the SLM.
    pub logprob: f32,
    /// The `k` likeliest tokens there, likeliest first: (text, bytes, logprob).
    pub top: Vec<(String, Vec<u8>, f32)>,
}

/// A token's text and bytes (the decoded piece; lossy only for partial characters).
pub fn token_text(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let text = tok.decode(&[id]).unwrap_or_default();
    let bytes = text.as_bytes().to_vec();
    (text, bytes)
}

/// The logprob of `chosen` and the `k` likeliest tokens under `logits`.
pub fn at(logits: &[f32], chosen: u32, k: usize, tok: &Tokenizer) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let log_z = max + logits.iter().map(|&l| ((l - max) as f64).exp()).sum::<f64>().ln() as f32;
    let lp = |id: usize| logits.get(id).map_or(f32::NEG_INFINITY, |l| l - log_z);
    let mut top: Vec<usize> = Vec::new();
    if k > 0 {
        let mut ids: Vec<usize> = (0..logits.len()).collect();
        let k = k.min(ids.len());
        ids.select_nth_unstable_by(k.saturating_sub(1), |a, b| logits[*b].total_cmp(&logits[*a]));
        ids.truncate(k);
        ids.sort_by(|a, b| logits[*b].total_cmp(&logits[*a]));
        top = ids;
    }
    let (token, bytes) = token_text(tok, chosen);
    let top = top
        .into_iter()
        .map(|id| {
            let (t, b) = token_text(tok, id as u32);
            (t, b, lp(id))
        })
        .collect();
    TokenLogprob { token, bytes, logprob: lp(chosen as usize), top }
}

/// Score `tokens[from..]` (from ≥ 1) by the SLM: one step per position after the cached prefix
/// they share with the last sequence. Leaves the cache holding `tokens` but its last token.
pub fn score(lm: &mut CausalLm, cache: &mut KvCache, tokens: &[u32], from: usize, k: usize, tok: &Tokenizer) -> Result<Vec<TokenLogprob>, RuntimeError> {
    let from = from.max(1);
    if from >= tokens.len() {
        return Ok(Vec::new());
    }
    let keep = cache.reusable_prefix(&tokens[..from]);
    cache.truncate(keep);
    let mut step = StepOutput::default();
    if keep < from - 1 {
        lm.forward_into(cache, &tokens[keep..from - 1], &mut step)?;
    }
    let mut out = Vec::with_capacity(tokens.len() - from);
    for p in from..tokens.len() {
        lm.forward_into(cache, &tokens[p - 1..p], &mut step)?;
        out.push(at(&step.logits, tokens[p], k, tok));
    }
    Ok(out)
}

/// Chat's `choices[].logprobs`: `{"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}`.
pub fn chat_json(items: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = items
        .iter()
        .map(|t| {
            let top: Vec<Value> = t.top.iter().map(|(tt, b, l)| json!({"token": tt, "logprob": l, "bytes": b})).collect();
            json!({"token": t.token, "logprob": t.logprob, "bytes": t.bytes, "top_logprobs": top})
        })
        .collect();
    json!({"content": content, "refusal": null})
}

/// Completions' `choices[].logprobs`: parallel lists `tokens`, `token_logprobs`,
/// `top_logprobs` (token → logprob) and `text_offset`; `None` for an echoed first prompt token,
/// which has no context to be scored in.
pub fn completion_json(items: &[(String, Option<TokenLogprob>)]) -> Value {
    let mut offset = 0usize;
    let (mut tokens, mut lps, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    for (text, item) in items {
        tokens.push(json!(text));
        offsets.push(json!(offset));
        offset += text.len();
        match item {
            Some(t) => {
                lps.push(json!(t.logprob));
                let top: Map<String, Value> = t.top.iter().map(|(tt, _, l)| (tt.clone(), json!(l))).collect();
                tops.push(Value::Object(top));
            }
            None => {
                lps.push(Value::Null);
                tops.push(Value::Null);
            }
        }
    }
    json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_logprobs_are_parallel_lists_with_a_null_for_the_unscored_first_token() {
        let t = TokenLogprob { token: "b".into(), bytes: b"b".to_vec(), logprob: -0.5, top: vec![("b".into(), b"b".to_vec(), -0.5), ("c".into(), b"c".to_vec(), -1.0)] };
        let v = completion_json(&[("ab".into(), None), ("b".into(), Some(t))]);
        assert_eq!(v["token_logprobs"], json!([null, -0.5]));
        assert_eq!(v["text_offset"], json!([0, 2]));
        assert_eq!(v["top_logprobs"][1]["c"], json!(-1.0));
        assert!(v["top_logprobs"][0].is_null());
    }
}
