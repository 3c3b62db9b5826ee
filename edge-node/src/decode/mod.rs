//! The one decode loop of the device: SLM step → router → keep, escalate or fall back → append.
//!
//! Every use runs [`decode`]: local generation (no cloud), routed generation over the QUIC
//! link, the CommonsenseQA evaluation (an in-process LLM as the cloud), the router lab's
//! roll-outs, and later the app server and the fleet simulator. It is generic over the SLM
//! ([`Slm`]: the ONNX model, a memoised one for evaluation sweeps, or a trace-driven stand-in)
//! and over the cloud ([`Cloud`]), so what is evaluated is exactly what serves users
//! (docs/ARCHITECTURE.md, "Decode loop"). When the threshold comes from a target escalation
//! rate, a [`RateControl`] in [`DecodeParams`] steers it from position to position (`rate`).

mod cloud;
mod draft;
mod engine;
mod slm;
mod stats;
mod trace;

#[cfg(test)]
mod tests;

pub use cloud::{Cloud, CloudAnswer, DraftAnswer, NoCloud};
pub use draft::{DraftControl, DraftMode, MAX_DRAFT};
pub use engine::{decode, DecodeParams, Emitted, TokenSource};
pub use crate::routing::rate::{RateControl, RateControlError, RateReport, DEFAULT_BAND, RULE as RATE_RULE};
pub use slm::{OnnxSlm, Proposal, Slm};
pub use stats::{DecodeStats, DraftCounts, FinishReason, RoutingCounts, SpeculationCounts};
pub use trace::{TracePoint, TraceSlm};
