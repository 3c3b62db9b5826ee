//! Everything that touches QUIC: TLS, the accept loop, one actor per device, and reading the
//! one frame each stream carries. What the bytes mean is decided elsewhere
//! (`common::exchange::gateway` for the wire rules, the store and the batcher for the work);
//! this layer moves bytes and enforces the per-connection bounds.

pub(crate) mod connection;
pub(crate) mod dev_cert;
pub(crate) mod listener;
pub(crate) mod read;
pub mod tls;
