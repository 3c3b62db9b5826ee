//! External LLM engines behind the gateway: SGLang, vLLM and llama.cpp's `llama-server`.
//!
//! Engines batch continuously on their own, so the gateway does not cut batches for them: each
//! escalation becomes one HTTP request, many in flight at once, cancelled when the device stops
//! waiting. Every engine is driven by token ids only (never text), for the next token (or a
//! short lookahead) of the session's whole context; engines with a prefix cache (SGLang's radix
//! cache, vLLM's prefix caching, llama.cpp's `cache_prompt`) then prefill only the delta the
//! device sent since its last escalation, provided the session keeps going to the same worker
//! ([`pool`]).
//!
//! What differs between engines is only the shape of the bodies: a [`Dialect`] is a pure
//! mapping between a [`NextTokenRequest`] and one engine's JSON, tested field by field against
//! the engine's documented bodies without a server. [`client::EngineClient`] is the I/O around
//! it.
//!
//! The same dialects serve the router lab, which labels training data with the LLM an engine
//! serves ([`PromptChoicesRequest`]: the LLM's greedy choice at every position of a token-id
//! sequence): one mapping per engine for both uses, so the lab's teacher and the gateway's
//! escalations cannot drift apart in how they ask an engine for a greedy token.
//!
//! A greedy escalation with a draft (protocol v5) is checked in one request
//! ([`DraftCheckRequest`]): SGLang and vLLM give the LLM's choice at the draft's positions as
//! prompt log-probabilities of context + draft (the prompt-choices mapping, asked from the hard
//! position), llama.cpp, which has none, continues the context greedily for the draft's length
//! plus one. Each dialect reads its answer as the LLM's choices from the hard position on, and
//! [`EngineReply::verdict`] applies the one acceptance rule ([`crate::dispatch::draft`]) the
//! embedded backend applies too. What each costs is in its module.

pub mod client;
pub mod connect;
pub mod discovery;
pub mod llamacpp;
pub mod pool;
pub mod sglang;
#[cfg(test)]
mod testing;
pub mod verify;
pub mod vllm;

use std::fmt;
use std::str::FromStr;

use common::sampling::SamplingParams;

use crate::dispatch::draft::accept_prefix;
use crate::dispatch::LlmToken;

/// Which engine a worker runs: picks the [`Dialect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// SGLang's native API (`POST /generate` with `input_ids`).
    Sglang,
    /// vLLM's OpenAI-compatible completions with a token-id prompt, or its token-in/token-out
    /// `POST /inference/v1/generate` where the server has it.
    Vllm,
    /// llama.cpp's `llama-server` (`POST /completion` with a token-id prompt).
    LlamaCpp,
}

impl EngineKind {
    /// The name used on the command line and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sglang => "sglang",
            Self::Vllm => "vllm",
            Self::LlamaCpp => "llamacpp",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "sglang" => Ok(Self::Sglang),
            "vllm" => Ok(Self::Vllm),
            "llamacpp" | "llama.cpp" | "llama-cpp" | "llama-server" => Ok(Self::LlamaCpp),
            other => Err(format!("unknown engine `{other}` (expected sglang, vllm or llamacpp)")),
        }
    }
}

/// One engine entry: its kind and base URL (`--engine llamacpp=http://127.0.0.1:8080`), one
/// worker; or, written `dns+http://...`, one worker per address its host name resolves to.
///
/// Discovery is asked for explicitly rather than inferred from a name that happens to resolve
/// to several addresses: a plain URL keeps meaning one worker whose HTTP client resolves the
/// name per connection (a ClusterIP Service, an external load balancer, replicas behind one
/// endpoint), so a configuration does not change behaviour when DNS starts returning more
/// records; and a discovered engine stays discovered when its name resolves to a single pod
/// (an engine Deployment scaled from 1 to N needs no configuration change). The `dns+` prefix
/// is the one Thanos and Cortex use for the same thing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EngineSpec {
    /// What runs there.
    pub kind: EngineKind,
    /// Base URL without a trailing slash (and without `dns+`), e.g. `http://10.0.0.5:30000`.
    pub url: String,
    /// `dns+`: one worker per address the URL's host resolves to, re-resolved periodically
    /// (a Kubernetes headless Service's name lists its pods).
    pub discover: bool,
}

impl EngineSpec {
    /// One worker at `url` (no discovery).
    pub fn fixed(kind: EngineKind, url: impl Into<String>) -> Self {
        Self { kind, url: url.into(), discover: false }
    }
}

impl FromStr for EngineSpec {
    type Err = String;
    /// `KIND=URL`, e.g. `sglang=http://10.0.0.5:30000`, or `KIND=dns+URL`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, url) = s.split_once('=').ok_or_else(|| format!("engine `{s}`: expected KIND=URL, e.g. llamacpp=http://127.0.0.1:8080"))?;
        let kind: EngineKind = kind.trim().parse()?;
        let url = url.trim().trim_end_matches('/');
        let (discover, url) = match url.strip_prefix("dns+") {
            Some(rest) => (true, rest),
            None => (false, url),
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() <= "https://".len() {
            return Err(format!("engine `{s}`: the URL must start with http:// or https:// (dns+http:// or dns+https:// to discover workers)"));
        }
        if discover {
            let parsed = reqwest::Url::parse(url).map_err(|e| format!("engine `{s}`: {e}"))?;
            if parsed.host_str().is_none() {
                return Err(format!("engine `{s}`: dns+ needs a host name to resolve"));
            }
        }
        Ok(Self { kind, url: url.to_string(), discover })
    }
}

impl fmt::Display for EngineSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}{}", self.kind, if self.discover { "dns+" } else { "" }, self.url)
    }
}

/// What the gateway asks an engine for: the next token(s) after `context`.
#[derive(Debug, Clone, Copy)]
pub struct NextTokenRequest<'a> {
    /// The session's whole context (token ids); the answer continues it.
    pub context: &'a [u32],
    /// How to choose tokens (greedy when `temperature == 0`).
    pub sampling: &'a SamplingParams,
    /// Seed for sampled decoding (the escalation's seed mixed with its `seq`), so a retry on
    /// another worker draws the same token.
    pub seed: Option<u64>,
    /// Tokens to generate: 1 for an escalation, more for a lookahead.
    pub max_new_tokens: u32,
    /// Top log-probabilities wanted per token (0 = only the chosen token's).
    pub top_logprobs: u32,
    /// llama.cpp slot to use (the pool pins a session to a slot for its prompt cache).
    pub slot: Option<u32>,
}

/// One generated token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineToken {
    /// Its id.
    pub id: u32,
    /// Its log-probability, when the engine reports it.
    pub logprob: Option<f32>,
}

/// An engine's answer to a [`NextTokenRequest`] or a [`DraftCheckRequest`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineReply {
    /// Generated tokens, first one first (at least one); for a draft check, the LLM's choices
    /// from the hard position on (at most the draft's length plus one).
    pub tokens: Vec<EngineToken>,
    /// Prompt tokens the engine counted, when reported.
    pub prompt_tokens: Option<u32>,
    /// Of those, how many came from its prefix cache, when reported.
    pub cached_tokens: Option<u32>,
}

impl EngineReply {
    /// The answer as every LLM path gives it: the one acceptance rule
    /// ([`crate::dispatch::draft::accept_prefix`]) over [`Self::tokens`] read as the LLM's
    /// choices from the hard position on, with `draft` the draft the engine checked (empty for
    /// a plain next-token request: its first token, nothing accepted). Dialects always ask for
    /// log-probabilities; one the engine omits reads as 0 (the protocol refuses NaN).
    pub fn verdict(&self, draft: &[u32]) -> Result<LlmToken, EngineError> {
        let choices: Vec<(u32, f32)> = self.tokens.iter().map(|t| (t.id, t.logprob.filter(|l| l.is_finite()).unwrap_or(0.0))).collect();
        accept_prefix(&choices, draft).ok_or_else(|| EngineError::BadResponse("no generated token".into()))
    }
}

/// What the gateway asks an engine to check (protocol v5), in one request: the LLM's greedy
/// choice at the position after `context` (the hard position) and after each draft token but
/// the last, and its token after the whole draft. Only greedy escalations are checked: an
/// engine's choices are its argmax, which a seeded sampler's draws are not.
#[derive(Debug, Clone, Copy)]
pub struct DraftCheckRequest<'a> {
    /// The session's whole context (not empty); the draft continues it.
    pub context: &'a [u32],
    /// The SLM's tokens from the hard position on (at least one).
    pub draft: &'a [u32],
    /// llama.cpp slot to use, as in [`NextTokenRequest::slot`].
    pub slot: Option<u32>,
}

impl DraftCheckRequest<'_> {
    /// Context and draft as one sequence: what prompt log-probabilities are asked of.
    pub fn sequence(&self) -> Vec<u32> {
        [self.context, self.draft].concat()
    }

    /// The draft's positions in [`Self::sequence`] as the prompt choices that give the LLM's
    /// choice there (the token after the draft is the generated one, not a prompt position).
    pub fn prompt_choices<'s>(&self, sequence: &'s [u32]) -> PromptChoicesRequest<'s> {
        PromptChoicesRequest { tokens: sequence, first: self.context.len(), runner_up: false, slot: self.slot }
    }
}

/// What the router lab asks an engine for: the LLM's greedy choice at every position of
/// `tokens` from `first` on, each given the tokens before it (teacher forcing). Engines with
/// prompt log-probabilities (SGLang, vLLM) answer it in one request; llama-server needs one
/// request per position (see [`llamacpp`]).
#[derive(Debug, Clone, Copy)]
pub struct PromptChoicesRequest<'a> {
    /// The whole sequence; its last token is never predicted from, only predicted.
    pub tokens: &'a [u32],
    /// First position wanted (at least 1: nothing predicts position 0).
    pub first: usize,
    /// Also the second-best token at each position: the gap between the two tells a near-tie.
    pub runner_up: bool,
    /// llama.cpp slot to pin the per-position requests to (each then prefills one token on the
    /// slot's cached prefix); other engines ignore it.
    pub slot: Option<u32>,
}

impl PromptChoicesRequest<'_> {
    /// The positions answered, in order: `max(first, 1)..tokens.len()`.
    pub fn positions(&self) -> std::ops::Range<usize> {
        self.first.max(1)..self.tokens.len().max(self.first.max(1))
    }

    /// Top log-probabilities to ask for per position: 2 with the runner-up, else 1.
    pub fn top_n(&self) -> u32 {
        if self.runner_up {
            2
        } else {
            1
        }
    }
}

/// The LLM's choice at one position of a [`PromptChoicesRequest`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PromptChoice {
    /// Its greedy (argmax) token, with its log-probability when the engine reports it.
    pub best: EngineToken,
    /// The second-best token, when asked for and reported.
    pub runner_up: Option<EngineToken>,
}

impl PromptChoice {
    /// The best and second-best of `candidates` (any order) by log-probability; the earlier of
    /// equals wins. `None` when there is no candidate.
    pub fn from_candidates(candidates: &[EngineToken], runner_up: bool) -> Option<Self> {
        let key = |t: &EngineToken| t.logprob.unwrap_or(f32::NEG_INFINITY);
        let mut sorted: Vec<EngineToken> = candidates.to_vec();
        // Stable: ties keep the engine's order.
        sorted.sort_by(|a, b| key(b).total_cmp(&key(a)));
        let best = *sorted.first()?;
        let second = sorted.iter().find(|t| t.id != best.id).copied().filter(|_| runner_up);
        Some(Self { best, runner_up: second })
    }
}

/// What an engine says about its model at start-up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineModel {
    /// Model id or path as the engine names it.
    pub id: String,
    /// Vocabulary size, when the engine reports it.
    pub vocab_size: Option<usize>,
    /// Longest context per request, when reported.
    pub max_context: Option<usize>,
}

/// An HTTP call a dialect wants made: method, path and (for POST) a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpCall {
    /// `GET` when `body` is `None`, `POST` otherwise.
    pub path: String,
    /// JSON body of a POST.
    pub body: Option<serde_json::Value>,
}

impl HttpCall {
    /// A GET of `path`.
    pub fn get(path: &str) -> Self {
        Self { path: path.into(), body: None }
    }
    /// A POST of `body` to `path`.
    pub fn post(path: &str, body: serde_json::Value) -> Self {
        Self { path: path.into(), body: Some(body) }
    }
}

/// Why an engine call failed. [`EngineError::is_retryable`] says whether another worker may
/// succeed; [`EngineError::counts_against_worker`] whether it is the worker's fault.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum EngineError {
    /// No connection, reset, or a broken response stream.
    #[error("engine unreachable: {0}")]
    Transport(String),
    /// No answer within the time the escalation had left.
    #[error("engine did not answer in time")]
    Timeout,
    /// The engine answered with an HTTP error.
    #[error("engine answered HTTP {status}: {message}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// The engine's message (truncated).
        message: String,
    },
    /// The body was not what the engine's API documents (not JSON, fields missing, no token).
    #[error("engine response not understood: {0}")]
    BadResponse(String),
    /// The engine produced a token id outside the vocabulary the devices share.
    #[error("engine produced token id {id}, outside the vocabulary of {vocab_size}")]
    TokenOutOfVocabulary {
        /// The id it produced.
        id: u32,
        /// The shared vocabulary size.
        vocab_size: usize,
    },
    /// The engine refused the context as too long for its model.
    #[error("context of {len} tokens is too long for the engine")]
    ContextTooLong {
        /// Tokens in the context.
        len: usize,
    },
}

impl EngineError {
    /// Whether the same request may succeed on another worker (a greedy next-token request
    /// is idempotent, so retrying is safe).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Transport(_) | Self::Timeout | Self::BadResponse(_) | Self::TokenOutOfVocabulary { .. } => true,
            Self::Status { status, .. } => *status >= 500 || *status == 429,
            Self::ContextTooLong { .. } => false,
        }
    }

    /// Whether the failure says something about the worker's health (feeds its circuit
    /// breaker); a request the engine rightly refused does not.
    pub fn counts_against_worker(&self) -> bool {
        match self {
            Self::Status { status, .. } => *status >= 500,
            Self::ContextTooLong { .. } => false,
            _ => true,
        }
    }

    /// [`Self::counts_against_worker`] for a failure of a request during which the worker
    /// answered others (`answered_meanwhile`): a timeout then says the deadline was too short
    /// for the worker's queue, not that the worker is down. Counted, five of a flood's
    /// deadline-bound attempts in a row opened the breaker of a llama-server that kept
    /// answering, and the pool refused every device for its whole pause (BENCHMARKS.md, the
    /// engine path's fair flood). A hung worker answers nobody, and its timeouts still count.
    pub fn counts_against_worker_that_answered(&self, answered_meanwhile: bool) -> bool {
        self.counts_against_worker() && !(matches!(self, Self::Timeout) && answered_meanwhile)
    }

    /// Short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Transport(_) => "transport",
            Self::Timeout => "timeout",
            Self::Status { .. } => "http_error",
            Self::BadResponse(_) => "bad_response",
            Self::TokenOutOfVocabulary { .. } => "bad_token",
            Self::ContextTooLong { .. } => "context_too_long",
        }
    }
}

/// The mapping between Duet's requests and one engine's HTTP API: pure functions, no I/O.
pub trait Dialect: Send + Sync + fmt::Debug {
    /// Which engine this speaks to.
    fn kind(&self) -> EngineKind;
    /// The call that asks for the next token(s).
    fn next_token_call(&self, request: &NextTokenRequest<'_>) -> HttpCall;
    /// Read the answer to [`Dialect::next_token_call`] (a 2xx body; errors are mapped by the
    /// client before this is called).
    fn parse_next_token(&self, body: &[u8]) -> Result<EngineReply, EngineError>;
    /// Path that answers 200 when the engine can serve.
    fn health_path(&self) -> &'static str;
    /// The call that describes the served model.
    fn model_info_call(&self) -> HttpCall;
    /// Read [`Dialect::model_info_call`]'s answer.
    fn parse_model_info(&self, body: &[u8]) -> Result<EngineModel, EngineError>;
    /// The call that tokenizes `text` without special tokens, if the engine offers one
    /// (a server started without a tokenizer does not).
    fn tokenize_call(&self, text: &str) -> Option<HttpCall>;
    /// Read [`Dialect::tokenize_call`]'s answer.
    fn parse_tokenize(&self, body: &[u8]) -> Result<Vec<u32>, EngineError>;
    /// The calls that answer a [`PromptChoicesRequest`], to be made in order: one for an
    /// engine that returns prompt log-probabilities, one per position for one that does not.
    fn prompt_choices_calls(&self, request: &PromptChoicesRequest<'_>) -> Vec<HttpCall>;
    /// Read the answers (2xx bodies, in the order of the calls): one choice per position of
    /// [`PromptChoicesRequest::positions`].
    fn parse_prompt_choices(&self, request: &PromptChoicesRequest<'_>, bodies: &[Vec<u8>]) -> Result<Vec<PromptChoice>, EngineError>;
    /// The one call that checks a greedy draft (what it costs is in each dialect's module).
    fn draft_check_call(&self, request: &DraftCheckRequest<'_>) -> HttpCall;
    /// Read its answer (a 2xx body): [`EngineReply::tokens`] are the LLM's greedy choices at
    /// the hard position and after each draft token, in order, at least one and at most the
    /// draft's length plus one. A choice after the first that differs from the draft may be
    /// conditioned on the engine's own tokens rather than the draft's: the acceptance rule
    /// never reads it.
    fn parse_draft_check(&self, request: &DraftCheckRequest<'_>, body: &[u8]) -> Result<EngineReply, EngineError>;
}

/// A prompt-logprob list aligned on the sequence: entry `i` is position `i` when the list has
/// one entry per token (the first one null), and a list one shorter (no leading null) is
/// aligned on its end. The entries of `positions`, or an error naming the engine.
pub(crate) fn aligned_positions<'a>(entries: &'a [serde_json::Value], tokens: usize, positions: std::ops::Range<usize>, engine: &str) -> Result<&'a [serde_json::Value], EngineError> {
    let offset = tokens.checked_sub(entries.len()).filter(|&o| o <= positions.start);
    match offset {
        Some(o) => Ok(&entries[positions.start - o..positions.end - o]),
        None => Err(EngineError::BadResponse(format!("{engine} returned {} prompt logprob entries for {tokens} tokens, positions {positions:?} wanted", entries.len()))),
    }
}

/// Parse a JSON body, with an error that names the engine's API.
pub(crate) fn parse_json(body: &[u8]) -> Result<serde_json::Value, EngineError> {
    serde_json::from_slice(body).map_err(|e| {
        let head = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        EngineError::BadResponse(format!("not JSON ({e}): {head:?}"))
    })
}

/// The first model of an OpenAI-style `GET /v1/models` list (`data[0]`) and its `id`, as
/// llama-server and vLLM answer it.
pub(crate) fn first_listed_model<'a>(v: &'a serde_json::Value, engine: &str) -> Result<(&'a serde_json::Value, &'a str), EngineError> {
    let missing = |field: &str| EngineError::BadResponse(format!("{engine} model list lacks `{field}`"));
    let model = v.get("data").and_then(serde_json::Value::as_array).and_then(|d| d.first()).ok_or_else(|| missing("data[0]"))?;
    let id = model.get("id").and_then(serde_json::Value::as_str).ok_or_else(|| missing("data[0].id"))?;
    Ok((model, id))
}

/// A JSON number as a token id, refusing negatives, fractions and ids beyond u32.
pub(crate) fn token_id(v: &serde_json::Value) -> Result<u32, EngineError> {
    v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| EngineError::BadResponse(format!("token id {v} is not a u32")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_is_named_kind_equals_url() {
        let spec: EngineSpec = "llamacpp=http://127.0.0.1:8080/".parse().unwrap();
        assert_eq!(spec, EngineSpec::fixed(EngineKind::LlamaCpp, "http://127.0.0.1:8080"));
        assert_eq!(spec.to_string(), "llamacpp=http://127.0.0.1:8080");
        assert_eq!("SGLang=https://gpu:30000".parse::<EngineSpec>().unwrap().kind, EngineKind::Sglang);
        for bad in ["http://x:1", "tgi=http://x:1", "vllm=x:1", "vllm=http://", "vllm=dns+x:1", "vllm=dns+http://"] {
            assert!(bad.parse::<EngineSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn dns_plus_asks_for_one_worker_per_resolved_address() {
        let spec: EngineSpec = "llamacpp=dns+http://duet-llama.duet.svc:8080/".parse().unwrap();
        assert_eq!(spec, EngineSpec { kind: EngineKind::LlamaCpp, url: "http://duet-llama.duet.svc:8080".into(), discover: true });
        assert_eq!(spec.to_string(), "llamacpp=dns+http://duet-llama.duet.svc:8080");
        assert!(!"llamacpp=http://duet-llama.duet.svc:8080".parse::<EngineSpec>().unwrap().discover, "a plain URL stays one worker");
    }

    #[test]
    fn a_plain_reply_is_its_first_token_with_nothing_accepted_and_a_missing_logprob_reads_as_zero() {
        let reply = EngineReply { tokens: vec![EngineToken { id: 7, logprob: None }, EngineToken { id: 8, logprob: Some(-0.5) }], ..EngineReply::default() };
        assert_eq!(reply.verdict(&[]).unwrap(), LlmToken { token_id: 7, logprob: 0.0, accepted: 0 });
        assert_eq!(reply.verdict(&[7]).unwrap(), LlmToken { token_id: 8, logprob: -0.5, accepted: 1 }, "a checked draft: the rule over the choices");
        assert!(matches!(EngineReply::default().verdict(&[]), Err(EngineError::BadResponse(_))));
    }

    #[test]
    fn a_draft_check_asks_for_the_choices_at_the_drafts_positions_of_context_and_draft() {
        let r = DraftCheckRequest { context: &[1, 2, 3], draft: &[4, 5], slot: Some(1) };
        let sequence = r.sequence();
        assert_eq!(sequence, vec![1, 2, 3, 4, 5]);
        let choices = r.prompt_choices(&sequence);
        assert_eq!((choices.positions(), choices.runner_up, choices.slot), (3..5, false, Some(1)), "the hard position and the one after the first draft token");
    }

    #[test]
    fn only_failures_another_worker_could_fix_are_retried() {
        assert!(EngineError::Timeout.is_retryable());
        assert!(EngineError::Status { status: 503, message: String::new() }.is_retryable());
        assert!(!EngineError::Status { status: 400, message: String::new() }.is_retryable());
        assert!(!EngineError::ContextTooLong { len: 9 }.is_retryable());
        assert!(!EngineError::Status { status: 400, message: String::new() }.counts_against_worker());
        assert!(EngineError::BadResponse("x".into()).counts_against_worker());
    }

    #[test]
    fn a_timeout_counts_against_a_worker_only_if_it_answered_nobody_meanwhile() {
        assert!(EngineError::Timeout.counts_against_worker_that_answered(false), "hung");
        assert!(!EngineError::Timeout.counts_against_worker_that_answered(true), "alive, just loaded");
        assert!(EngineError::BadResponse("x".into()).counts_against_worker_that_answered(true), "a broken answer is broken");
    }
}
