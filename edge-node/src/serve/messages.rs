//! `messages` as clients send them, turned into the chat template's turns: content as a string
//! or an array of parts (text parts joined by newlines; image, audio and file parts refused by
//! name), `developer` as `system`, assistant `tool_calls` and `tool` results kept for the
//! template's tool sections. Every refusal names the message (and part) at fault.

use serde_json::{Map, Value};

use super::error::{kind, ApiError};
use model_runtime::chat::{Role, ToolCall, Turn};

/// Most messages in one conversation: far beyond any context the device's model holds, and a
/// bound on the work a request can cause before its prompt is measured.
pub const MAX_MESSAGES: usize = 1024;

/// Read `messages`.
pub fn turns(v: Value) -> Result<Vec<Turn>, ApiError> {
    let items = match v {
        Value::Array(items) => items,
        Value::Null => return Err(ApiError::invalid("`messages` is required", Some("messages"))),
        other => return Err(ApiError::invalid(format!("`messages` must be an array of messages, not {}", kind(&other)), Some("messages"))),
    };
    if items.is_empty() {
        return Err(ApiError::invalid("`messages` must hold at least one message", Some("messages")));
    }
    if items.len() > MAX_MESSAGES {
        return Err(ApiError::invalid(format!("`messages` holds {} messages; at most {MAX_MESSAGES}", items.len()), Some("messages")));
    }
    items.into_iter().enumerate().map(|(i, m)| turn(i, m)).collect()
}

fn turn(i: usize, v: Value) -> Result<Turn, ApiError> {
    let at = format!("messages[{i}]");
    let Value::Object(mut m) = v else {
        return Err(ApiError::invalid(format!("`{at}` must be an object with `role` and `content`, not {}", kind(&v)), Some(&at)));
    };
    let role_at = format!("{at}.role");
    let role = match m.get("role") {
        Some(Value::String(r)) => match r.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            "function" => return Err(ApiError::unsupported(&role_at, "the deprecated `function` role; send tool results with role `tool`")),
            other => return Err(ApiError::invalid(format!("`{role_at}`: unknown role `{other}`; expected system, developer, user, assistant or tool"), Some(&role_at))),
        },
        Some(other) => return Err(ApiError::invalid(format!("`{role_at}` must be a string, not {}", kind(other)), Some(&role_at))),
        None => return Err(ApiError::invalid(format!("`{role_at}` is required"), Some(&role_at))),
    };
    let tool_calls = match m.remove("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) if role == Role::Assistant => tool_calls(&at, v)?,
        Some(_) => return Err(ApiError::invalid(format!("`{at}.tool_calls`: only an assistant message calls tools"), Some(&format!("{at}.tool_calls")))),
    };
    let content = match m.remove("content") {
        None | Some(Value::Null) if role == Role::Assistant && !tool_calls.is_empty() => String::new(),
        None | Some(Value::Null) => return Err(ApiError::invalid(format!("`{at}.content` is required"), Some(&format!("{at}.content")))),
        Some(Value::String(s)) => s,
        Some(Value::Array(parts)) => text_of_parts(&at, parts)?,
        Some(other) => return Err(ApiError::invalid(format!("`{at}.content` must be a string or an array of content parts, not {}", kind(&other)), Some(&format!("{at}.content")))),
    };
    Ok(Turn { role, content, tool_calls })
}

/// Text parts joined by newlines (as vLLM joins them); any other part refused by its type.
fn text_of_parts(at: &str, parts: Vec<Value>) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(parts.len());
    for (j, part) in parts.into_iter().enumerate() {
        let part_at = format!("{at}.content[{j}]");
        let Value::Object(p) = part else {
            return Err(ApiError::invalid(format!("`{part_at}` must be a content part object, not {}", kind(&part)), Some(&part_at)));
        };
        match (p.get("type").and_then(Value::as_str), p.get("text")) {
            (Some("text"), Some(Value::String(t))) => texts.push(t.clone()),
            (Some("text"), _) => return Err(ApiError::invalid(format!("`{part_at}.text` must be a string"), Some(&format!("{part_at}.text")))),
            (Some(media @ ("image_url" | "input_image" | "image" | "input_audio" | "audio" | "file" | "input_file")), _) => {
                return Err(ApiError::unsupported(&format!("{part_at}.type"), &format!("`{media}` parts: the device's model reads text only")));
            }
            (Some(other), _) => return Err(ApiError::invalid(format!("`{part_at}.type`: unknown content part type `{other}`; this server reads `text` parts"), Some(&format!("{part_at}.type")))),
            (None, _) => return Err(ApiError::invalid(format!("`{part_at}.type` is required"), Some(&format!("{part_at}.type")))),
        }
    }
    Ok(texts.join("\n"))
}

/// `tool_calls` of an assistant message: `[{"type": "function", "function": {"name", "arguments"}}]`.
fn tool_calls(at: &str, v: Value) -> Result<Vec<ToolCall>, ApiError> {
    let param = format!("{at}.tool_calls");
    let Value::Array(calls) = v else {
        return Err(ApiError::invalid(format!("`{param}` must be an array, not {}", kind(&v)), Some(&param)));
    };
    calls
        .into_iter()
        .enumerate()
        .map(|(k, call)| {
            let call_at = format!("{param}[{k}]");
            let bad = || ApiError::invalid(format!("`{call_at}` must be {{\"type\": \"function\", \"function\": {{\"name\": string, \"arguments\": JSON text}}}}"), Some(&call_at));
            let f: &Map<String, Value> = call.get("function").and_then(Value::as_object).ok_or_else(bad)?;
            let name = f.get("name").and_then(Value::as_str).ok_or_else(bad)?.to_string();
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(v @ Value::Object(_)) => v.to_string(),
                None | Some(Value::Null) => "{}".to_string(),
                Some(_) => return Err(bad()),
            };
            Ok(ToolCall { name, arguments })
        })
        .collect()
}
