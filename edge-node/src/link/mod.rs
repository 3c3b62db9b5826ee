//! The device's link to the gateway: a task that owns the QUIC connection.
//!
//! It connects, says `Hello`, publishes the live connection through a watch channel, and when
//! the connection drops it reconnects with exponential back-off and jitter, without the user
//! doing anything. Escalations never wait for a connection: if the link is down they fail at
//! once and the decode loop takes the SLM's token. What to send and what replies mean is
//! decided by the exchange ([`common::exchange`]); the link carries bytes, one request stream
//! per frame.
//!
//! Several replicas: the gateway setting is a list (`a:4433,b:4433`), and each name is resolved
//! again before every attempt, so a DNS name with several records is a list too. Which address
//! comes next, and how long to wait first, is [`Failover`](common::exchange::Failover)'s decision: a random first pick,
//! the next address at once after a failure, back-off only after a whole round. Every attempt
//! uses a fresh UDP socket, so a load balancer keyed on the source port (a Kubernetes UDP
//! Service's conntrack entry) sees a new flow and may pick another replica.
//!
//! Graceful drain: a gateway that drains pushes `GoAway` on a stream it opens. The link then
//! publishes [`LinkState::Moving`]: the session sees the next connection's generation (so its
//! next escalation is a `Full` sync), requests wait for the new connection within their own
//! deadline instead of falling back, and answers in flight on the old connection still arrive
//! (it closes when the last of them has). The link reconnects at once to the `GoAway`'s
//! redirect or to another address; if no other replica takes it, it goes on using the drained
//! one (which serves until its drain stops taking work) and keeps trying.
//!
//! The parts, with arrows one way: `connection` is the task that connects and reconnects (and
//! the connection facts it publishes); `handle` holds [`Link`], what the rest of the device keeps
//! (requests, probes, close), which starts that task and the certificate watcher; [`tls`] builds
//! the QUIC client configuration and holds the one in force, which [`rotation`] replaces when
//! the device certificate changes on disk; [`link_cloud`] is the decode loop's
//! [`Cloud`](crate::decode::Cloud) over the link. The handle uses the connection task and
//! rotation, both use tls, and tls uses none of them.

mod connection;
mod handle;
pub mod link_cloud;
pub mod rotation;
pub mod tls;

pub use common::exchange::next_session_id;
pub use connection::{Connected, LinkConfig, LinkState, KEEP_ALIVE};
pub use handle::{Link, LinkCounters, LinkError, CLOSE_LEAVING};
