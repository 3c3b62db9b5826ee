//! The router lab's extension: the LLM's greedy choice at every position of a sequence
//! ([`PromptChoicesRequest`]), for labels.
//!
//! A trait of its own rather than methods of [`Dialect`]: the gateway's escalation path never
//! asks it, so its dialects need not carry it. It lives in this crate, implemented in each
//! dialect's module, because the mapping shares the dialect's parsers with the draft check
//! (SGLang and vLLM read both from prompt log-probabilities) and is tested against the same
//! documented bodies; the lab could not implement it on its side without copying them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::{EngineClient, MAX_CHOICES_RESPONSE_BYTES};
use crate::{Dialect, EngineError, HttpCall, PromptChoice, PromptChoicesRequest};

/// How one engine answers a [`PromptChoicesRequest`]: pure functions, no I/O.
pub trait PromptChoicesDialect: Send + Sync + fmt::Debug {
    /// The calls that answer `request`, to be made in order: one for an engine that returns
    /// prompt log-probabilities, one per position for one that does not.
    fn prompt_choices_calls(&self, request: &PromptChoicesRequest<'_>) -> Vec<HttpCall>;
    /// Read the answers (2xx bodies, in the order of the calls): one choice per position of
    /// [`PromptChoicesRequest::positions`].
    fn parse_prompt_choices(&self, request: &PromptChoicesRequest<'_>, bodies: &[Vec<u8>]) -> Result<Vec<PromptChoice>, EngineError>;
}

/// A worker's client with the prompt-choices mapping of the dialect it speaks: the router
/// lab's teacher.
#[derive(Debug, Clone)]
pub struct ChoicesClient {
    client: EngineClient,
    choices: Arc<dyn PromptChoicesDialect>,
}

impl ChoicesClient {
    /// `client` and the prompt-choices mapping of the engine it talks to.
    pub fn new(client: EngineClient, choices: Arc<dyn PromptChoicesDialect>) -> Self {
        Self { client, choices }
    }

    /// The worker's client, for everything else ([`EngineClient::next_token`], ...).
    pub fn client(&self) -> &EngineClient {
        &self.client
    }

    /// The LLM's choice at every position `request` asks for, each call of the dialect made in
    /// order (llama-server: one per position, so the slot's cache grows by one token a call),
    /// each within `timeout`, each answer read up to [`MAX_CHOICES_RESPONSE_BYTES`].
    pub async fn prompt_choices(&self, request: &PromptChoicesRequest<'_>, timeout: Duration) -> Result<Vec<PromptChoice>, EngineError> {
        let mut bodies = Vec::new();
        for call in self.choices.prompt_choices_calls(request) {
            bodies.push(self.client.call_with_limit(&call, timeout, MAX_CHOICES_RESPONSE_BYTES).await?);
        }
        let choices = self.choices.parse_prompt_choices(request, &bodies)?;
        if choices.len() != request.positions().len() {
            return Err(EngineError::BadResponse(format!("{} choices for {} positions", choices.len(), request.positions().len())));
        }
        Ok(choices)
    }
}

/// `dialect` as both mappings: the escalation path's and the lab's.
pub(crate) fn both<D: Dialect + PromptChoicesDialect + 'static>(dialect: D) -> (Arc<dyn Dialect>, Arc<dyn PromptChoicesDialect>) {
    let d = Arc::new(dialect);
    (d.clone(), d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llamacpp::LlamaCppDialect;
    use crate::EngineSpec;

    #[tokio::test]
    async fn prompt_choices_make_the_dialects_calls_in_order_and_read_every_answer() {
        // A llama-server stand-in whose greedy token is the prompt's length (runner-up +100).
        let app = axum::Router::new().route(
            "/completion",
            axum::routing::post(|axum::Json(b): axum::Json<serde_json::Value>| async move {
                let n = b["prompt"].as_array().map_or(0, Vec::len);
                let top = serde_json::json!([{"id": n, "logprob": -0.5}, {"id": n + 100, "logprob": -2.0}]);
                axum::Json(serde_json::json!({"tokens": [n], "completion_probabilities": [{"id": n, "logprob": -0.5, "top_logprobs": top}]}))
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let spec: EngineSpec = format!("llamacpp=http://{}", listener.local_addr().unwrap()).parse().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let dialect = Arc::new(LlamaCppDialect);
        let client = ChoicesClient::new(EngineClient::new(&spec, dialect.clone()).unwrap(), dialect);
        let request = PromptChoicesRequest { tokens: &[9, 9, 9, 9, 9], first: 2, runner_up: true, slot: Some(0) };
        let choices = client.prompt_choices(&request, Duration::from_secs(5)).await.unwrap();
        assert_eq!(choices.iter().map(|c| c.best.id).collect::<Vec<_>>(), vec![2, 3, 4], "positions 2, 3, 4 in order");
        assert_eq!(choices.iter().map(|c| c.runner_up.map(|t| t.id)).collect::<Vec<_>>(), vec![Some(102), Some(103), Some(104)]);
    }
}
