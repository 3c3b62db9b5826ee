//! Duet's edge node as a library: the one decode loop, routing (the policies, the router file,
//! the routers shipped with it, and router bundles from the fleet's rollout: [`routing`]), and
//! the QUIC link that carries the edge side of the exchange ([`link`]).
//! The `edge-node` binary, the router lab and the load tester use it.

pub mod args;
pub mod decode;
pub mod link;
pub mod routing;
