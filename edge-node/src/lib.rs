//! Duet's edge node as a library: the one decode loop, routing (the policies, the router file,
//! the routers shipped with it: [`routing`]), the QUIC link that carries the edge side of the
//! exchange ([`link`]), and the fleet agent that brings router bundles over that link
//! ([`fleet`]).
//! The `edge-node` binary, the router lab and the load tester use it.

pub mod args;
pub mod decode;
pub mod fleet;
pub mod link;
pub mod routing;
