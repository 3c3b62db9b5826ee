//! The batcher: gathers escalations from every device into backend calls.
//!
//! Split in two so the policy is testable without a runtime: [`queue`] is the pure queue and
//! cut policy (time passed in), [`actor`] the ractor shell that owns the backend, runs it on
//! a blocking thread and arms the max-wait timer. Connections only see [`BatchQueue`].

pub mod actor;
pub mod queue;

pub use actor::{spawn_batcher, BatchQueue, BatcherMsg, BatcherStats, QueueFull};
pub use queue::Outcome;
