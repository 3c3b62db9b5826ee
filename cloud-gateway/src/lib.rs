//! Duet's cloud gateway as a library, so the binary, the tests and the load tester run the
//! same code: QUIC listener → connection actors → session store → batcher → backend.

pub mod backend;
pub mod batcher;
pub mod cli;
pub mod connection;
pub mod http;
pub mod server;
pub mod session_store;
pub mod tls;
