//! Duet's shared core, used by the edge node, the cloud gateway and the load tester.
//!
//! Everything here is free of network I/O so that it can be tested alone: the model runtime
//! ([`runtime`]), sampling ([`sampling`]), the chat template ([`chat`]), tokenizer loading and
//! fingerprinting ([`tokenizer`]) and the on-disk model layout ([`model_files`]).

pub mod chat;
pub mod cqa;
pub mod detokenize;
pub mod model_files;
pub mod protocol;
pub mod router_model;
pub mod runtime;
pub mod sampling;
pub mod telemetry;
pub mod tokenizer;
