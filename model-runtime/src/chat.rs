//! The Qwen2.5 chat template (ChatML), written out so that no template engine is needed.

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
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
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

/// Render messages as ChatML and open the assistant's turn, as Qwen's own template does
/// (a default system prompt is added when the first message is not a system message).
pub fn render(messages: &[Message]) -> String {
    let mut out = String::new();
    if messages.first().map(|m| m.role) != Some(Role::System) {
        push_turn(&mut out, Role::System, DEFAULT_SYSTEM_PROMPT);
    }
    for m in messages {
        push_turn(&mut out, m.role, &m.content);
    }
    out.push_str("<|im_start|>assistant\n");
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
}
