//! The batcher: one of the gateway's two LLM paths (the engine pool is the other, beside it
//! behind [`crate::dispatch`]). It gathers escalations from every device into calls of an
//! in-process [`backend`], one batch at a time.
//!
//! Split so the policy is testable without a runtime: `queue` is the pure queue and cut
//! policy (time passed in, cost cap per batch), `admission` the pure admission and readiness
//! rules (a `admission::Snapshot` in, a decision out), `book` the one owner of what is
//! admitted (it decides and records in one step; each session's prefill state, computed and
//! covered by its own admitted work), `figures` what the actor publishes besides (the learned
//! cost model, readiness stamps), `actor` the ractor shell that owns the backend, runs it on a
//! blocking thread and arms the max-wait timer, and `handle` the `BatchQueue` connections
//! submit through. Starting the batcher ([`spawn_batcher_with`]) wires them here.

mod actor;
mod admission;
mod book;
pub mod backend;
mod figures;
mod handle;
mod queue;

use std::sync::Arc;

use admission::{Cut, ReadinessPolicy};
use backend::Backend;
use book::{BookRules, SharedBook};
use figures::{Figures, Learned, Readiness};
use handle::BatchQueue;

use crate::config::{BatcherConfig, OverloadConfig};

/// Start the batcher around a backend, with the overload bounds of `overload` (cost cap per
/// batch, readiness, fair sharing).
///
/// The backend first answers one one-token warm-up request: the first real escalation does
/// not pay the runtime's lazy initialisation, and devices that connect before any traffic are
/// told a measured service time instead of none (their first deadlines would be too short).
pub(crate) async fn spawn_batcher_with(backend: Box<dyn Backend>, config: BatcherConfig, overload: OverloadConfig) -> anyhow::Result<BatchQueue> {
    let (backend, warmup_ms, token_ms) = tokio::task::spawn_blocking(move || actor::warm_up(backend)).await?;
    let readiness = ReadinessPolicy { saturated_for: overload.ready_saturated_after, stalled_after: overload.ready_stalled_after };
    let figures = Arc::new(Figures { learned: Learned::new(warmup_ms, token_ms), readiness: Readiness::new(readiness) });
    let capacity = config.queue_capacity.max(1);
    let cut = Cut { max_batch: config.max_batch.max(1), max_batch_tokens: overload.max_batch_tokens.max(1) };
    let book = SharedBook::new(BookRules { capacity, cut, fair: overload.fair_share.is_on() });
    let actor = actor::start(backend, config, overload, figures.clone(), book.clone()).await?;
    Ok(BatchQueue { actor, figures, book, capacity })
}
