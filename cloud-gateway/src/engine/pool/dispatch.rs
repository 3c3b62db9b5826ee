//! The engine pool as one of the gateway's two LLM paths: its side of the [`Dispatch`] seam.
//!
//! No queue: an escalation is refused `Busy` at once when its device is over its fair share of
//! the work a contended pool holds (`super::share`), when no worker has room, or when no worker
//! with room can answer it before its deadline (`super::admission`: for its cost), and otherwise
//! becomes one request on the pool ([`EnginePool::answer`]) on a task of its own, dropped
//! mid-request as soon as the device stops waiting; a greedy escalation's draft is checked in
//! that one request and answered with the pool's verdict. Failures are told to the device in the
//! contract's terms: an engine that refuses a context as too long says so with the context's
//! length (engines do not say their limit).

use std::sync::Arc;
use std::time::Instant;

use common::telemetry::TRACE_TARGET;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::{Admitted, EnginePool, PoolError};
use crate::dispatch::{Busy, Dispatch, LlmError, LlmRequest, Outcome};
use crate::engine::EngineError;
use crate::sessions::SessionKey;

/// The engine pool behind the dispatch seam.
#[derive(Clone)]
pub struct EngineDispatch(pub Arc<EnginePool>);

impl Dispatch for EngineDispatch {
    fn try_submit(&self, request: LlmRequest, deadline: Instant, now: Instant) -> Result<oneshot::Receiver<Outcome>, Busy> {
        let pool = &self.0;
        let admitted = pool.admit(&request, deadline, now)?;
        let (tx, rx) = oneshot::channel();
        // Under the escalation's span; none outside one (a span would start a trace).
        let span = match tracing::Span::current().is_disabled() {
            true => tracing::Span::none(),
            false => tracing::info_span!(target: TRACE_TARGET, "backend", backend = "engines", outcome = tracing::field::Empty),
        };
        // The request counts in its worker's load and its device's share until it ends,
        // however it ends.
        let pool = Arc::clone(pool);
        tokio::spawn(
            async move {
                run(pool, request, deadline, tx, &admitted).await;
                drop(admitted);
            }
            .instrument(span),
        );
        Ok(rx)
    }

    /// Engines keep no per-session state the gateway owns (their prefix caches age out on
    /// their own); the pool forgets which worker held the session's context.
    fn end_session(&self, key: SessionKey) {
        self.0.forget(&key);
    }

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

/// One escalation on the pool: answered with its token (a draft's verdict for a greedy one
/// with a draft), a failure or `Expired`; abandoned (its HTTP request dropped) as soon as the
/// device stops waiting.
async fn run(pool: Arc<EnginePool>, request: LlmRequest, deadline: Instant, mut reply: oneshot::Sender<Outcome>, admitted: &Admitted) {
    let started = Instant::now();
    let result = tokio::select! {
        r = pool.answer(&request, deadline, admitted) => r,
        _ = reply.closed() => {
            tracing::Span::current().record("outcome", "cancelled");
            return;
        }
    };
    tracing::Span::current().record("outcome", if result.is_ok() { "token" } else { "failed" });
    let outcome = match result {
        Ok(token) => Outcome::Token { token, llm_ms: started.elapsed().as_millis().min(u128::from(u32::MAX)) as u32 },
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

    /// A llama-server stand-in whose greedy continuation of any prompt is 5, 6, 7, 8, ...
    /// (`n_predict` of them); it records each `n_predict` asked for.
    async fn counting_engine() -> (EngineSpec, Arc<std::sync::Mutex<Vec<u64>>>) {
        let asked: Arc<std::sync::Mutex<Vec<u64>>> = Arc::default();
        let seen = asked.clone();
        let app = axum::Router::new().route(
            "/completion",
            axum::routing::post(move |axum::Json(b): axum::Json<serde_json::Value>| {
                let seen = seen.clone();
                async move {
                    let n = b["n_predict"].as_u64().unwrap_or(1);
                    seen.lock().unwrap().push(n);
                    let tokens: Vec<u64> = (5..5 + n).collect();
                    let probs: Vec<serde_json::Value> = tokens.iter().map(|&t| serde_json::json!({"id": t, "logprob": -0.5})).collect();
                    axum::Json(serde_json::json!({"tokens": tokens, "completion_probabilities": probs}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let spec = format!("llamacpp=http://{}", listener.local_addr().unwrap()).parse().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (spec, asked)
    }

    /// A llama-server stand-in that reports every prompt's last 5 tokens processed and the rest
    /// found cached (`timings.cache_n`), as a slot that kept the session's context would.
    async fn caching_engine() -> EngineSpec {
        let app = axum::Router::new().route(
            "/completion",
            axum::routing::post(|axum::Json(b): axum::Json<serde_json::Value>| async move {
                let n = b["prompt"].as_array().map_or(0, Vec::len);
                let cached = n.saturating_sub(5);
                axum::Json(serde_json::json!({"tokens": [5], "tokens_evaluated": n, "timings": {"cache_n": cached, "prompt_n": n - cached}}))
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let spec = format!("llamacpp=http://{}", listener.local_addr().unwrap()).parse().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        spec
    }

    #[tokio::test]
    async fn a_session_is_charged_its_delta_while_the_engine_reports_caches_and_its_whole_context_after_a_request_not_answered() {
        let spec = caching_engine().await;
        let client = EngineClient::new(&spec, Arc::new(LlamaCppDialect)).unwrap();
        let pool = EnginePool::new(PoolConfig { engines: vec![spec], ..PoolConfig::default() }, vec![client], 1000);
        let session = SessionKey { device: Arc::from("d"), session_id: 1 };
        let request = |len: u32| LlmRequest { session: session.clone(), context: (0..len).collect::<Vec<u32>>().into(), sampling: Default::default(), seq: len, draft: Default::default() };
        let deadline = || Instant::now() + std::time::Duration::from_secs(5);
        // Admitted, it counts in the worker's load with the tokens it is charged.
        let charged = |a: &Admitted| a.workers[a.first].load().ahead().tokens;
        let mut costs = Vec::new();
        for len in [10, 15, 20] {
            let r = request(len);
            let admitted = pool.admit(&r, deadline(), Instant::now()).unwrap();
            costs.push(charged(&admitted));
            pool.answer(&r, deadline(), &admitted).await.unwrap();
        }
        assert_eq!(costs, vec![10, 5, 5], "the first answer's context counts as kept (the engine just ran it); the second showed it cached");
        // Sent and not answered (the device left): its slot may hold anything.
        let dropped = pool.admit(&request(25), deadline(), Instant::now()).unwrap();
        assert_eq!(charged(&dropped), 5);
        drop(dropped);
        let next = pool.admit(&request(30), deadline(), Instant::now()).unwrap();
        assert_eq!(charged(&next), 30, "after a request not answered, the whole context again");
    }

    async fn answer(pool: &EngineDispatch, draft: &[u32], sampling: common::sampling::SamplingParams) -> Outcome {
        let session = SessionKey { device: Arc::from("d"), session_id: 1 };
        let request = LlmRequest { session, context: vec![1, 2, 3].into(), sampling, seq: 1, draft: draft.into() };
        let now = Instant::now();
        pool.try_submit(request, now + std::time::Duration::from_secs(5), now).unwrap().await.unwrap()
    }

    #[tokio::test]
    async fn a_greedy_draft_is_checked_in_one_request_and_answered_with_the_verdict_and_a_sampled_one_is_not() {
        let (spec, asked) = counting_engine().await;
        let client = EngineClient::new(&spec, Arc::new(LlamaCppDialect)).unwrap();
        let pool = EngineDispatch(Arc::new(EnginePool::new(PoolConfig { engines: vec![spec], ..PoolConfig::default() }, vec![client], 1000)));
        let token = |o: Outcome| match o {
            Outcome::Token { token, .. } => (token.accepted, token.token_id),
            other => panic!("{other:?}"),
        };
        let greedy = common::sampling::SamplingParams::default();
        assert_eq!(token(answer(&pool, &[5, 6, 7], greedy).await), (3, 8), "all accepted: the bonus");
        assert_eq!(token(answer(&pool, &[5, 6, 9, 10], greedy).await), (2, 7), "the correction at the first difference");
        assert_eq!(token(answer(&pool, &[], greedy).await), (0, 5), "no draft: the next token");
        let sampled = common::sampling::SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, seed: Some(3) };
        assert_eq!(token(answer(&pool, &[5, 6], sampled).await), (0, 5), "a sampled draft is not checked");
        assert_eq!(*asked.lock().unwrap(), vec![4, 5, 1, 1], "the draft's length plus one, in one request each; one token otherwise");
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
