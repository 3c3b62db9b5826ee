//! The batcher: one of the gateway's two LLM paths (the engine pool is the other, beside it
//! behind [`crate::dispatch`]). It gathers escalations from every device into calls of an
//! in-process [`backend`], one batch at a time.
//!
//! Split so the policy is testable without a runtime: `queue` is the pure queue and cut
//! policy (time passed in, cost cap per batch), `admission` the pure admission and readiness
//! rules (a `admission::Snapshot` in, a decision out), `ledger` each session's prefill
//! state (computed, covered by its own admitted work), `figures` what the actor publishes for
//! them (admitted work, the learned cost model, readiness stamps), `actor` the ractor shell
//! that owns the backend, runs it on a blocking thread and arms the max-wait timer, and
//! `handle` the `BatchQueue` connections submit through.

mod actor;
mod admission;
pub mod backend;
mod figures;
mod handle;
mod ledger;
mod queue;

pub(crate) use actor::{count_served, spawn_batcher_with};
