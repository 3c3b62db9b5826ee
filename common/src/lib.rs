//! What both ends of Duet must agree on, and nothing that needs a model or a socket: the wire
//! protocol ([`protocol`]), the edge–gateway exchange as state machines with time passed in
//! ([`exchange`]), the tokenizer fingerprint ([`fingerprint`]), sampling parameters and the sampler both
//! ends run ([`sampling`]), and the
//! logging and trace set-up every binary shares ([`telemetry`]; with the `otlp` feature, the
//! OTLP exporter and [`trace`], between spans and the trace context an escalation carries),
//! the `--config FILE` both binaries read ([`config_file`]), what a device id may be
//! ([`device_id`]), router bundles with their rollout rules ([`fleet`]), and what a router file says it was
//! trained for ([`router_header`]). The ONNX model runtime is the `model-runtime` crate;
//! docs/ARCHITECTURE.md shows where each piece sits on the data path.

pub mod config_file;
pub mod device_id;
pub mod device_token;
pub mod exchange;
mod exp_sums;
pub mod fingerprint;
pub mod fleet;
pub mod protocol;
#[cfg(feature = "reference")]
pub mod reference;
pub mod router_header;
pub mod sampling;
pub mod stats;
pub mod telemetry;
#[cfg(feature = "otlp")]
pub mod trace;
