//! Why an engine call failed, typed so that a caller can tell a failure another worker may not
//! have (retry elsewhere) from a refusal of the request itself, and a worker's fault (its
//! circuit breaker) from a request the engine rightly refused.

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
    /// answering, and the pool refused every device for its whole pause
    /// (docs/src/benchmarks/fairness-overload.md, the engine path's fair flood). A hung worker
    /// answers nobody, and its timeouts still count.
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

#[cfg(test)]
mod tests {
    use super::*;

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
