//! What both ends of Duet must agree on, and nothing that needs a model or a socket: the wire
//! protocol ([`protocol`]), the edge–gateway exchange as state machines with time passed in
//! ([`exchange`]), the tokenizer fingerprint ([`fingerprint`]), sampling parameters and the sampler both
//! ends run ([`sampling`]), and the
//! logging set-up every binary shares ([`telemetry`]), and the `--config FILE` both binaries read
//! ([`config_file`]). The ONNX model runtime is the
//! `model-runtime` crate; docs/ARCHITECTURE.md shows where each piece sits on the data path.

pub mod config_file;
pub mod exchange;
pub mod fingerprint;
pub mod protocol;
pub mod sampling;
pub mod telemetry;
