//! The OpenAI API's request and response bodies, as far as a local device server speaks them
//! (chat and text completions, streaming and not, models), plus Duet's `duet` extension object.
//! How request bodies are read and refused is in `request.rs`.

use serde::{Deserialize, Serialize};

use crate::serve::worker::Mode;

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
    /// The offending parameter, if one (`messages[2].content[0].type` for a nested one).
    pub param: Option<String>,
    /// A machine-readable code, if any.
    pub code: Option<&'static str>,
}

/// Largest request body: far beyond any prompt the device's context holds (413 past it, as
/// OpenAI and proxies answer).
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;
