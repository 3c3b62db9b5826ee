//! The OpenAI API's request and response bodies, as far as a local device server speaks them
//! (chat and text completions, streaming and not, models), plus Duet's `duet` extension object.
//! Unknown fields are ignored, as OpenAI-compatible servers do, so ordinary clients work.

use serde::{Deserialize, Serialize};

use crate::serve::worker::Mode;
use model_runtime::chat::Message;

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far (`model` is not read: the device serves one model).
    pub messages: Vec<Message>,
    #[serde(flatten)]
    pub common: CommonParams,
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    /// The text to continue.
    pub prompt: String,
    #[serde(flatten)]
    pub common: CommonParams,
}

/// Parameters both endpoints take.
#[derive(Debug, Default, Deserialize)]
pub struct CommonParams {
    /// Most tokens to generate (`max_completion_tokens` is the newer name for chat).
    pub max_tokens: Option<usize>,
    /// Same as `max_tokens`.
    pub max_completion_tokens: Option<usize>,
    /// Sampling temperature (0 = greedy); OpenAI's default is 1.
    pub temperature: Option<f32>,
    /// Nucleus mass.
    pub top_p: Option<f32>,
    /// Reproducible sampling.
    pub seed: Option<u64>,
    /// One stop sequence or several.
    pub stop: Option<Stop>,
    /// Stream chunks as server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Duet's routing controls.
    #[serde(default)]
    pub duet: DuetParams,
}

/// `stop`: a string or a list of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One sequence.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl Stop {
    /// As a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// The `duet` extension object: how this request is routed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DuetParams {
    /// `local`, `routed` or `cloud`; default: the server's.
    pub mode: Option<Mode>,
    /// Share of tokens to escalate (needs a trained router file on the server).
    pub escalation_rate: Option<f32>,
    /// Escalation threshold on the router's confidence.
    pub tau: Option<f32>,
}

/// Token counts, OpenAI's `usage`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Both.
    pub total_tokens: usize,
}

/// Duet's figures for one request.
#[derive(Debug, Clone, Serialize)]
pub struct DuetUsage {
    /// How the request was routed.
    pub mode: Mode,
    /// The threshold used (with rate control: where the request started; `rate_control` says
    /// where it was steered).
    pub tau: f32,
    /// The rate controller's figures for this request, when one steered tau.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_control: Option<edge_node::decode::RateReport>,
    /// What the router and the cloud did.
    #[serde(flatten)]
    pub routing: edge_node::decode::RoutingCounts,
    /// Decode speed of this request.
    pub tokens_per_s: f64,
}

/// An OpenAI-style error body: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Serialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// Inside [`ErrorBody`].
#[derive(Debug, Serialize)]
pub struct ErrorDetail {
    /// What is wrong, for people.
    pub message: String,
    /// `invalid_request_error`, `rate_limit_error`, `server_error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The offending parameter, if one.
    pub param: Option<&'static str>,
    /// A machine-readable code, if any.
    pub code: Option<&'static str>,
}
