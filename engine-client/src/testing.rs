//! Test support shared by the dialects: JSON shaped like an engine's answer, for the property
//! tests that check no body can panic a parser; and the acceptance rule a draft check's answer
//! is read with, so a dialect's tests can say what verdict its mapping leads to.

use proptest::prelude::*;
use serde_json::Value;

/// JSON values nested up to 4 deep whose object keys are mostly `keys` (the fields a parser
/// reads), so generated bodies reach deep into the parser rather than failing at the top.
pub fn jsonish(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u32>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z_]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        let key = prop_oneof![3 => prop::sample::select(keys).prop_map(str::to_string), 1 => "[a-z]{1,4}"];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A draft check's verdict: draft tokens accepted, then the token answered and its
/// log-probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Draft tokens accepted.
    pub accepted: u32,
    /// The token answered after them (the correction, or the bonus).
    pub token_id: u32,
    /// Its log-probability (0 when the engine omits it).
    pub logprob: f32,
}

/// The acceptance rule (the gateway's `dispatch::draft`, restated for the dialects' tests):
/// accept draft tokens while the LLM's choice equals them, answer the first that differs or
/// the choice after the last agreed one.
pub trait AcceptanceRule {
    /// The verdict over `self`'s tokens read as choices from the hard position on.
    fn verdict(&self, draft: &[u32]) -> Option<Verdict>;
}

impl AcceptanceRule for crate::EngineReply {
    fn verdict(&self, draft: &[u32]) -> Option<Verdict> {
        let last = draft.len().min(self.tokens.len().checked_sub(1)?);
        let j = (0..last).find(|&j| draft[j] != self.tokens[j].id).unwrap_or(last);
        let t = self.tokens[j];
        Some(Verdict { accepted: j as u32, token_id: t.id, logprob: t.logprob.filter(|l| l.is_finite()).unwrap_or(0.0) })
    }
}
