//! Duet's load tester as a library: the measurements behind `loadtest`'s subcommands, so that
//! integration tests (`loadtest/tests/`) drive the same code the command line runs.

pub mod abuse;
pub mod batching;
pub mod capacity;
pub mod engines;
pub mod fixed_backend;
pub mod fleet;
pub mod gateway_latency;
pub mod handshake;
pub mod loopback;
pub mod otlp_sink;
