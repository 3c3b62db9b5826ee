//! Where an admitted escalation goes: the batcher (in-process backends, one batch at a time)
//! or the engine pool (external engines, one HTTP request per escalation, many in flight).
//!
//! Connections see one interface either way: submit with a deadline and get a receiver of the
//! [`Outcome`], or `Busy` at once; dropping the receiver cancels the work (before the batch for
//! the batcher, mid-request for an engine).
//!
//! Traces: the batcher hangs its spans (queue wait, batch, backend) under the caller's current
//! span; an escalation sent to the engine pool gets a `backend` span there, with one
//! `engine_request` span per HTTP attempt under it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use common::telemetry::TRACE_TARGET;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::backend::{BackendError, BackendRequest, BackendToken};
use crate::batcher::{BatchQueue, Outcome, QueueFull};
use crate::engine::pool::{EnginePool, PoolError};
use crate::engine::EngineError;
use crate::sessions::SessionKey;

/// The gateway's path to its LLM.
#[derive(Clone)]
pub enum Dispatcher {
    /// An in-process backend behind the batcher.
    Batcher(BatchQueue),
    /// External engine workers.
    Engines(Arc<EnginePool>),
}

impl Dispatcher {
    /// Admit `request` and start it, or refuse at once with a retry hint when nothing has room.
    pub fn try_submit(&self, request: BackendRequest, deadline: Instant) -> Result<oneshot::Receiver<Outcome>, QueueFull> {
        match self {
            Self::Batcher(queue) => queue.try_submit(request, deadline),
            Self::Engines(pool) => {
                if !pool.has_room(Instant::now()) {
                    metrics::counter!("duet_gateway_escalations_busy_total").increment(1);
                    return Err(QueueFull { retry_after_ms: pool.service_ms().max(5) });
                }
                let (tx, rx) = oneshot::channel();
                // Under the escalation's span; none outside one (a span would start a trace).
                let span = match tracing::Span::current().is_disabled() {
                    true => tracing::Span::none(),
                    false => tracing::info_span!(target: TRACE_TARGET, "backend", backend = "engines", outcome = tracing::field::Empty),
                };
                tokio::spawn(run_on_pool(pool.clone(), request, deadline, tx).instrument(span));
                Ok(rx)
            }
        }
    }

    /// A session ended: drop its queued work and per-session backend state. Engines keep no
    /// per-session state the gateway owns (their prefix caches age out on their own).
    pub fn end_session(&self, key: SessionKey) {
        if let Self::Batcher(queue) = self {
            queue.end_session(key);
        }
    }

    /// Smoothed LLM time per escalation (or batch), ms: announced to devices.
    pub fn service_ms(&self) -> u32 {
        match self {
            Self::Batcher(queue) => queue.stats().service_ms.load(Ordering::Relaxed),
            Self::Engines(pool) => pool.service_ms(),
        }
    }

    /// Escalations admitted and not yet answered.
    pub fn in_flight(&self) -> usize {
        match self {
            Self::Batcher(queue) => queue.stats().in_flight.load(Ordering::Relaxed),
            Self::Engines(pool) => pool.in_flight(),
        }
    }

    /// Why the gateway cannot take work now, if it cannot (for `/readyz`): the batcher stopped,
    /// its queue is full, it has been saturated or its backend stalled for too long (see
    /// [`crate::batcher::admission::not_ready`]); or no engine worker can take work.
    pub fn not_ready(&self) -> Option<String> {
        let now = Instant::now();
        match self {
            Self::Batcher(queue) if queue.actor().get_status() != ractor::ActorStatus::Running => Some("batcher not running".into()),
            Self::Batcher(queue) if self.in_flight() >= queue.capacity() => Some("queue full".into()),
            Self::Batcher(queue) => queue.stats().not_ready(now),
            Self::Engines(pool) if !pool.any_available(now) => Some("no engine worker available".into()),
            Self::Engines(pool) if !pool.has_room(now) => Some("every engine worker is full".into()),
            _ => None,
        }
    }

    /// Stop the batcher (engines need nothing).
    pub fn stop(&self) {
        if let Self::Batcher(queue) = self {
            queue.actor().stop(None);
        }
    }
}

/// One escalation on the pool: answered with its token, a failure or `Expired`; abandoned
/// (its HTTP request dropped) as soon as the device stops waiting.
async fn run_on_pool(pool: Arc<EnginePool>, request: BackendRequest, deadline: Instant, mut reply: oneshot::Sender<Outcome>) {
    let started = Instant::now();
    let result = tokio::select! {
        r = pool.next_token(&request, deadline) => r,
        _ = reply.closed() => {
            metrics::counter!("duet_gateway_escalations_cancelled_total").increment(1);
            tracing::Span::current().record("outcome", "cancelled");
            return;
        }
    };
    tracing::Span::current().record("outcome", if result.is_ok() { "token" } else { "failed" });
    let outcome = match result {
        Ok(answer) => {
            metrics::counter!("duet_gateway_escalations_answered_total").increment(1);
            // Dialects always ask for the log-probability; an engine that omits it reads as 0
            // (the protocol refuses NaN).
            let first = answer.tokens[0];
            let token = BackendToken { token_id: first.id, logprob: first.logprob.unwrap_or(0.0) };
            Outcome::Token { token, llm_ms: started.elapsed().as_millis().min(u128::from(u32::MAX)) as u32 }
        }
        Err(PoolError::DeadlineExpired(_)) => {
            metrics::counter!("duet_gateway_escalations_expired_total").increment(1);
            Outcome::Expired
        }
        Err(e) => {
            metrics::counter!("duet_gateway_backend_errors_total").increment(1);
            Outcome::Failed(backend_error(e))
        }
    };
    let _ = reply.send(outcome);
}

/// A pool failure as the backend error the device is told about.
fn backend_error(e: PoolError) -> BackendError {
    match e {
        PoolError::Engine(EngineError::ContextTooLong { len }) => BackendError::ContextTooLong { len, max: 0 },
        other => BackendError::Failed(other.to_string()),
    }
}
