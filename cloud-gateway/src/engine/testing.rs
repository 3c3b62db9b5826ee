//! Test support shared by the dialects: JSON shaped like an engine's answer, for the property
//! tests that check no body can panic a parser.

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
