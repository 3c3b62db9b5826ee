//! Duet's edge node as a library: the routed decode loop, the QUIC link to the gateway, routing
//! policies and fallback logic. The `edge-node` binary, the fleet and the load tester use it.

pub mod deadline;
pub mod link;
pub mod routed;
pub mod router;
pub mod tls;
