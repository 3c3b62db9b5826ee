//! Duet's edge node as a library: the one decode loop, routing policies, the router file and
//! the routers shipped with it, router bundles from the fleet's rollout ([`bundles`]), and the
//! QUIC link that carries the edge side of the exchange.
//! The `edge-node` binary, the router lab and the load tester use it.

pub mod args;
pub mod bundles;
pub mod decode;
pub mod link;
pub mod link_cloud;
pub mod rotation;
pub mod router;
pub mod router_file;
pub mod shipped_router;
pub mod tls;
