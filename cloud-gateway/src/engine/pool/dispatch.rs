//! The engine pool as one of the gateway's two LLM paths: its side of the [`Dispatch`] seam.
//!
//! No queue: an escalation is refused `Busy` at once when no worker has room, or when its
//! device holds its fair share of a pool at least half full (`super::share`), and otherwise
//! becomes one request on the pool ([`EnginePool::next_token`]) on a task of its own, dropped
//! mid-request as soon as the device stops waiting. Failures are told to the device in the
//! contract's terms: an engine that refuses a context as too long says so with the context's
//! length (engines do not say their limit).

use std::sync::Arc;
use std::time::Instant;

use common::telemetry::TRACE_TARGET;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::{EnginePool, PoolError};
use crate::dispatch::{Busy, BusyReason, Dispatch, LlmError, LlmRequest, LlmToken, Outcome};
use crate::engine::EngineError;
use crate::sessions::SessionKey;

/// The engine pool behind the dispatch seam.
#[derive(Clone)]
pub struct EngineDispatch(pub Arc<EnginePool>);

impl Dispatch for EngineDispatch {
    fn try_submit(&self, request: LlmRequest, deadline: Instant, now: Instant) -> Result<oneshot::Receiver<Outcome>, Busy> {
        let pool = &self.0;
        if !pool.has_room(now) {
            return Err(Busy { retry_after_ms: pool.service_ms().max(5), reason: BusyReason::Capacity });
        }
        let Some(share) = pool.take_share(&request.session.device) else {
            return Err(Busy { retry_after_ms: pool.service_ms().max(5), reason: BusyReason::Share });
        };
        let (tx, rx) = oneshot::channel();
        // Under the escalation's span; none outside one (a span would start a trace).
        let span = match tracing::Span::current().is_disabled() {
            true => tracing::Span::none(),
            false => tracing::info_span!(target: TRACE_TARGET, "backend", backend = "engines", outcome = tracing::field::Empty),
        };
        // The device's place is held until the request ends, however it ends.
        let pool = Arc::clone(pool);
        tokio::spawn(
            async move {
                run(pool, request, deadline, tx).await;
                drop(share);
            }
            .instrument(span),
        );
        Ok(rx)
    }

    /// Engines keep no per-session state the gateway owns (their prefix caches age out on
    /// their own).
    fn end_session(&self, _key: SessionKey) {}

    fn service_ms(&self) -> u32 {
        self.0.service_ms()
    }

    fn in_flight(&self) -> usize {
        self.0.in_flight()
    }

    fn not_ready(&self, now: Instant) -> Option<String> {
        if !self.0.any_available(now) {
            return Some("no engine worker available".into());
        }
        if !self.0.has_room(now) {
            return Some("every engine worker is full".into());
        }
        None
    }
}

/// One escalation on the pool: answered with its token, a failure or `Expired`; abandoned
/// (its HTTP request dropped) as soon as the device stops waiting.
async fn run(pool: Arc<EnginePool>, request: LlmRequest, deadline: Instant, mut reply: oneshot::Sender<Outcome>) {
    let started = Instant::now();
    let result = tokio::select! {
        r = pool.next_token(&request, deadline) => r,
        _ = reply.closed() => {
            tracing::Span::current().record("outcome", "cancelled");
            return;
        }
    };
    tracing::Span::current().record("outcome", if result.is_ok() { "token" } else { "failed" });
    let outcome = match result {
        Ok(answer) => {
            // Dialects always ask for the log-probability; an engine that omits it reads as 0
            // (the protocol refuses NaN).
            let first = answer.tokens[0];
            let token = LlmToken { token_id: first.id, logprob: first.logprob.unwrap_or(0.0), accepted: 0 };
            Outcome::Token { token, llm_ms: started.elapsed().as_millis().min(u128::from(u32::MAX)) as u32 }
        }
        Err(PoolError::DeadlineExpired(_)) => Outcome::Expired,
        Err(e) => Outcome::Failed(llm_error(e, &request)),
    };
    let _ = reply.send(outcome);
}

/// A pool failure as the error the device is told about.
fn llm_error(e: PoolError, request: &LlmRequest) -> LlmError {
    match e {
        PoolError::Engine(EngineError::ContextTooLong { .. }) => LlmError::ContextTooLong { len: request.context.len(), max: None },
        other => LlmError::Failed(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::client::EngineClient;
    use crate::engine::llamacpp::LlamaCppDialect;
    use crate::engine::pool::PoolConfig;
    use crate::engine::EngineSpec;
    use common::exchange::gateway::EscalationOutcome;

    /// A llama-server stand-in that refuses every context as llama-server does when it
    /// exceeds its context size.
    async fn refusing_engine() -> EngineSpec {
        let body = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;
        let app = axum::Router::new().fallback(move || async move { (axum::http::StatusCode::BAD_REQUEST, body) });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let spec = format!("llamacpp=http://{}", listener.local_addr().unwrap()).parse().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        spec
    }

    #[tokio::test]
    async fn an_engines_context_too_long_reaches_the_device_with_the_contexts_length_not_a_limit_of_zero() {
        let spec = refusing_engine().await;
        let client = EngineClient::new(&spec, Arc::new(LlamaCppDialect)).unwrap();
        let pool = EngineDispatch(Arc::new(EnginePool::new(PoolConfig { engines: vec![spec], ..PoolConfig::default() }, vec![client], 1000)));
        let session = SessionKey { device: Arc::from("d"), session_id: 1 };
        let request = LlmRequest { session, context: vec![7; 5000].into(), sampling: Default::default(), seq: 1, draft: Default::default() };
        let now = Instant::now();
        let rx = pool.try_submit(request, now + std::time::Duration::from_secs(5), now).unwrap();
        let wire = rx.await.unwrap().to_wire();
        assert_eq!(wire, EscalationOutcome::ContextTooLong("context of 5000 tokens exceeds the LLM's context limit".into()));
    }
}
