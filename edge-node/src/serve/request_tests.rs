use serde_json::json;

use super::*;
use model_runtime::chat::Role;

fn chat_err(body: Value) -> (String, Option<String>) {
    let e = chat(body).unwrap_err();
    assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
    (e.detail.message, e.detail.param)
}

#[test]
fn content_parts_are_joined_and_developer_is_a_system_message() {
    let r = chat(json!({"messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]}))
    .unwrap();
    assert_eq!((r.turns[0].role, r.turns[0].content.as_str()), (Role::System, "be brief"));
    assert_eq!(r.turns[1].content, "a\nb");
}

#[test]
fn an_image_part_is_refused_by_its_place_and_type() {
    let (msg, param) = chat_err(json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}]}));
    assert_eq!(param.as_deref(), Some("messages[0].content[1].type"));
    assert!(msg.contains("image_url"), "{msg}");
}

#[test]
fn tool_calls_and_tool_results_are_kept_for_the_template() {
    let r = chat(json!({"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"}
    ]}))
    .unwrap();
    assert_eq!(r.turns[1].tool_calls[0].name, "w");
    assert_eq!(r.turns[2].role, Role::Tool);
}

#[test]
fn an_unknown_role_and_a_wrong_type_name_their_parameter() {
    let (msg, param) = chat_err(json!({"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]}));
    assert_eq!(param.as_deref(), Some("messages[1].role"));
    assert!(msg.contains("robot"));
    let (_, param) = chat_err(json!({"messages": [{"role": "user", "content": "a"}], "temperature": "hot"}));
    assert_eq!(param.as_deref(), Some("temperature"));
    let (_, param) = chat_err(json!({"messages": "hello"}));
    assert_eq!(param.as_deref(), Some("messages"));
}

#[test]
fn unsupported_parameters_are_refused_unless_set_to_their_no_op_value() {
    let msgs = json!([{"role": "user", "content": "a"}]);
    for (key, value) in [("response_format", json!({"type": "json_object"})), ("tools", json!([{"type": "function"}])), ("logit_bias", json!({"1": 5})), ("presence_penalty", json!(0.5))] {
        let (_, param) = chat_err(json!({"messages": msgs, key: value}));
        assert_eq!(param.as_deref(), Some(key));
    }
    for (key, value) in [("response_format", json!({"type": "text"})), ("tools", json!([])), ("presence_penalty", json!(0)), ("user", json!("u"))] {
        assert!(chat(json!({"messages": msgs, key: value})).is_ok(), "{key}");
    }
}

#[test]
fn several_choices_and_logprobs_are_refused_only_when_streamed() {
    let msgs = json!([{"role": "user", "content": "a"}]);
    let r = chat(json!({"messages": msgs, "n": 3, "logprobs": true, "top_logprobs": 2})).unwrap();
    assert_eq!((r.params.n, r.params.logprobs), (3, Some(2)));
    assert_eq!(chat_err(json!({"messages": msgs, "n": 3, "stream": true})).1.as_deref(), Some("n"));
    assert_eq!(chat_err(json!({"messages": msgs, "logprobs": true, "stream": true})).1.as_deref(), Some("logprobs"));
    assert_eq!(chat_err(json!({"messages": msgs, "top_logprobs": 2})).1.as_deref(), Some("top_logprobs"));
}

#[test]
fn prompt_takes_strings_token_ids_and_lists_of_either() {
    let p = |v: Value| completion(json!({"prompt": v})).map(|r| r.prompts);
    assert_eq!(p(json!("a")).unwrap(), vec![Prompt::Text("a".into())]);
    assert_eq!(p(json!(["a", "b"])).unwrap().len(), 2);
    assert_eq!(p(json!([1, 2, 3])).unwrap(), vec![Prompt::Tokens(vec![1, 2, 3])]);
    assert_eq!(p(json!([[1, 2], [3]])).unwrap(), vec![Prompt::Tokens(vec![1, 2]), Prompt::Tokens(vec![3])]);
    assert_eq!(p(json!([-1])).unwrap_err().detail.param.as_deref(), Some("prompt"));
    assert_eq!(p(json!({"a": 1})).unwrap_err().detail.param.as_deref(), Some("prompt"));
    assert_eq!(p(json!([])).unwrap_err().detail.param.as_deref(), Some("prompt"));
}

#[test]
fn stream_options_include_usage_is_read() {
    let r = completion(json!({"prompt": "a", "stream": true, "stream_options": {"include_usage": true}})).unwrap();
    assert!(r.params.include_usage && r.params.stream);
}
