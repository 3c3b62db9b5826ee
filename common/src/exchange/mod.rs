//! The edge–gateway exchange as state machines without I/O (docs/ARCHITECTURE.md, "Exchange").
//!
//! Both ends' rules live here, in the crate both ends share: [`edge::EdgeSession`] decides what
//! a device sends for a hard token, how long it waits and what each reply means;
//! [`gateway`] decides what a gateway answers to a `Hello`, a request and each outcome of an
//! escalation; [`drain`] is a gateway's graceful drain (what it still takes, when it closes)
//! and [`failover`] a device's choice of replica (where to reconnect after a `GoAway` or a
//! lost connection, and when). Time is passed in (`now`), nothing here opens a socket or sleeps, so every
//! fault the network can cause is a deterministic unit test; the QUIC code in `edge-node` and
//! `cloud-gateway` only carries the bytes (quinn-proto's and neqo's split).
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

pub mod deadline;
pub mod drain;
pub mod edge;
pub mod failover;
pub mod gateway;

#[cfg(test)]
mod tests;

pub use deadline::{DeadlinePolicy, LinkHealth, PrefillReport};
pub use drain::{Drain, DrainStep, Live};
pub use failover::Failover;
pub use edge::{next_session_id, EdgeSession, ExchangeCounters, FallbackReason, LinkView, Outcome, Step, Transmit};

/// Compare secrets in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
