//! The batcher: gathers escalations from every device into backend calls.
//!
//! Split so the policy is testable without a runtime: [`queue`] is the pure queue and cut
//! policy (time passed in, cost cap per batch), [`admission`] the estimate-based admission and
//! readiness rules, [`ledger`] each session's prefill state (computed, covered by its own
//! admitted work), [`actor`] the ractor shell that owns the backend, runs it on a blocking
//! thread and arms the max-wait timer. Connections only see [`BatchQueue`].

pub mod actor;
pub mod admission;
pub mod ledger;
pub mod queue;

pub use actor::{spawn_batcher, spawn_batcher_with, BatchQueue, BatcherMsg, BatcherStats, QueueFull};
pub use queue::Outcome;
