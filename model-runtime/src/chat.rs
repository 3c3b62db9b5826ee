//! The Qwen2.5 chat template (ChatML), written out so that no template engine is needed:
//! plain turns ([`render`]) and the template's tool sections for tool calls and tool results in
//! a conversation's history ([`render_turns`]).

/// The system prompt Qwen2.5 models use when the caller gives none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

/// Who said a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the assistant.
    System,
    /// The person asking.
    User,
    /// The model.
    Assistant,
    /// A tool's result, answering the assistant's tool call (rendered inside a user turn, as
    /// `<tool_response>`, the way Qwen's template does).
    Tool,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    /// Speaker.
    pub role: Role,
    /// Text of the turn.
    pub content: String,
}

/// A call the assistant made to a tool, kept in the history so the model sees what it asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments as the client sent them: JSON text (OpenAI's wire form).
    pub arguments: String,
}

/// One turn of a conversation that may hold tool calls (assistant) or a tool's result
/// ([`Role::Tool`]): what agent frameworks send back after running a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Speaker.
    pub role: Role,
    /// Text of the turn (may be empty for an assistant turn that only calls tools).
    pub content: String,
    /// The tools the assistant called in this turn.
    pub tool_calls: Vec<ToolCall>,
}

/// Render messages as ChatML and open the assistant's turn, as Qwen's own template does
/// (a default system prompt is added when the first message is not a system message).
pub fn render(messages: &[Message]) -> String {
    let turns: Vec<Turn> = messages.iter().map(|m| Turn { role: m.role, content: m.content.clone(), tool_calls: Vec::new() }).collect();
    render_turns(&turns)
}

/// [`render`] for turns with tool calls and tool results, as Qwen2.5's template renders them:
/// an assistant turn's calls as `<tool_call>` blocks after its text, consecutive tool results
/// as `<tool_response>` blocks in one user turn.
pub fn render_turns(turns: &[Turn]) -> String {
    let mut out = String::new();
    if turns.first().map(|m| m.role) != Some(Role::System) {
        push_turn(&mut out, Role::System, DEFAULT_SYSTEM_PROMPT);
    }
    for (i, t) in turns.iter().enumerate() {
        match t.role {
            Role::Assistant if !t.tool_calls.is_empty() => push_tool_calls(&mut out, t),
            Role::Tool => {
                if i == 0 || turns[i - 1].role != Role::Tool {
                    out.push_str("<|im_start|>user");
                }
                out.push_str("\n<tool_response>\n");
                out.push_str(&t.content);
                out.push_str("\n</tool_response>");
                if turns.get(i + 1).map(|n| n.role) != Some(Role::Tool) {
                    out.push_str("<|im_end|>\n");
                }
            }
            role => push_turn(&mut out, role, &t.content),
        }
    }
    out.push_str("<|im_start|>assistant\n");
    out
}

fn push_tool_calls(out: &mut String, t: &Turn) {
    out.push_str("<|im_start|>assistant");
    if !t.content.is_empty() {
        out.push('\n');
        out.push_str(&t.content);
    }
    for call in &t.tool_calls {
        out.push_str("\n<tool_call>\n{\"name\": \"");
        out.push_str(&call.name);
        out.push_str("\", \"arguments\": ");
        out.push_str(&arguments_json(&call.arguments));
        out.push_str("}\n</tool_call>");
    }
    out.push_str("<|im_end|>\n");
}

/// The arguments as the template's `tojson` prints them: an object (what OpenAI's JSON text
/// holds, parsed as servers do before templating) with Python's `json.dumps` separators and the
/// client's key order; text that is not a JSON object as a JSON string.
fn arguments_json(arguments: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(serde_json::Value::Object(_)) => python_separators(arguments),
        _ => serde_json::Value::String(arguments.to_string()).to_string(),
    }
}

/// Valid JSON text re-spaced as `json.dumps` does: no whitespace outside strings but `", "`
/// and `": "`.
fn python_separators(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            ',' => out.push_str(", "),
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// A single user question in the chat template.
pub fn render_user(prompt: &str) -> String {
    render(&[Message { role: Role::User, content: prompt.to_string() }])
}

fn push_turn(out: &mut String, role: Role, content: &str) {
    out.push_str("<|im_start|>");
    out.push_str(role.as_str());
    out.push('\n');
    out.push_str(content);
    out.push_str("<|im_end|>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_prompt_gets_default_system_and_open_assistant_turn() {
        let s = render_user("hi");
        assert_eq!(
            s,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n\
             <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn explicit_system_prompt_replaces_default() {
        let s = render(&[
            Message { role: Role::System, content: "be brief".into() },
            Message { role: Role::User, content: "q".into() },
        ]);
        assert!(s.starts_with("<|im_start|>system\nbe brief<|im_end|>\n"));
        assert!(!s.contains(DEFAULT_SYSTEM_PROMPT));
    }

    /// Expected text written out from Qwen2.5's `chat_template.jinja` (no `tools` given).
    #[test]
    fn tool_calls_and_results_render_as_qwens_template_does() {
        let turns = [
            Turn { role: Role::User, content: "weather?".into(), tool_calls: vec![] },
            Turn {
                role: Role::Assistant,
                content: String::new(),
                tool_calls: vec![
                    ToolCall { name: "get_weather".into(), arguments: r#"{"city":"Paris","days":[1, 2]}"#.into() },
                    ToolCall { name: "now".into(), arguments: "not json".into() },
                ],
            },
            Turn { role: Role::Tool, content: "18C".into(), tool_calls: vec![] },
            Turn { role: Role::Tool, content: "noon".into(), tool_calls: vec![] },
        ];
        assert_eq!(
            render_turns(&turns),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n\
             <|im_start|>user\nweather?<|im_end|>\n\
             <|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>\
             \n<tool_call>\n{\"name\": \"now\", \"arguments\": \"not json\"}\n</tool_call><|im_end|>\n\
             <|im_start|>user\n<tool_response>\n18C\n</tool_response>\n<tool_response>\nnoon\n</tool_response><|im_end|>\n\
             <|im_start|>assistant\n"
        );
    }

    #[test]
    fn an_assistant_turn_with_text_keeps_it_before_its_tool_calls() {
        let t = Turn { role: Role::Assistant, content: "Let me check.".into(), tool_calls: vec![ToolCall { name: "f".into(), arguments: "{}".into() }] };
        assert!(render_turns(&[t]).contains("<|im_start|>assistant\nLet me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|im_end|>\n"));
    }
}
