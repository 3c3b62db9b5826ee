//! A userspace UDP impairment relay: devices send their QUIC packets to it instead of to the
//! gateway, and it forwards them with the delay, jitter, loss, bandwidth cap, duplication and
//! blackouts of a named network profile, in both directions.
//!
//! Why userspace: the kernels of the machines Duet is tested on have no `sch_netem`, and a load
//! test should run anywhere as an ordinary user. Why a relay rather than impairing inside the
//! simulated device: the device and the gateway then run unmodified, over real sockets, and a
//! person can put a real `edge-node generate --gateway` behind `loadtest relay` as well.
//!
//! It works like a NAT: each client source address gets its own upstream socket (so the
//! gateway sees one peer per device, as in the field) and its own impaired link, one per
//! direction, each with its own queue, loss state and random stream drawn from the relay's
//! seed. The table of clients is bounded and forgets a client after an idle timeout. The model
//! ([`impair`]) is a pure state machine driven with `now` passed in; [`udp`] is the tokio
//! shell around it (one task for the listening socket, one per client).
//!
//! ```no_run
//! # async fn f() -> anyhow::Result<()> {
//! use relay::{Profiles, Relay, RelayConfig};
//! let profile = Profiles::builtin().get("4g")?.clone();
//! let relay = Relay::start(RelayConfig::new("127.0.0.1:0".parse()?, "127.0.0.1:4433".parse()?, profile)).await?;
//! // ... point devices at relay.local_addr() ...
//! println!("{}", serde_json::to_string(&relay.stats())?);
//! relay.shutdown().await;
//! # Ok(()) }
//! ```

pub mod bench;
pub mod cmd;
pub mod impair;
pub mod profile;
pub mod udp;

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use impair::{Decision, DirectionStats, DropCause, Drops, Impairment, Link};
pub use profile::{Blackout, Burst, JitterDistribution, LinkParams, Profile, ProfileError, Profiles};
pub use udp::Relay;

/// Default bound of the client table ([`RelayConfig::max_clients`]).
pub const DEFAULT_MAX_CLIENTS: usize = 10_000;
/// Default idle timeout of a client ([`RelayConfig::idle_timeout`]).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a relay listens on, forwards to, and how.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Where devices send (port 0: any free port; see [`Relay::local_addr`]).
    pub listen: SocketAddr,
    /// The gateway.
    pub upstream: SocketAddr,
    /// The impairments.
    pub profile: Profile,
    /// Seeds every client's random streams (client k's are drawn from this and k, k counted in
    /// order of first packet).
    pub seed: u64,
    /// Most clients (source addresses) at once; packets from more are dropped and counted.
    pub max_clients: usize,
    /// A client that sent and received nothing for this long is forgotten (its upstream socket
    /// closed); its next packet makes it new again, behind a new upstream port.
    pub idle_timeout: Duration,
    /// Packets waiting between the listening socket and one client's task; beyond it they are
    /// dropped as overflow.
    pub client_inbox: usize,
    /// Payload bytes one direction of one client may hold in its delay line.
    pub max_line_bytes: usize,
    /// Receive and send buffer asked of the kernel for the listening socket (it caps them at
    /// `net.core.rmem_max`/`wmem_max`).
    pub socket_buffer_bytes: usize,
}

impl RelayConfig {
    /// A relay from `listen` to `upstream` with `profile`, seed 1 and default bounds.
    pub fn new(listen: SocketAddr, upstream: SocketAddr, profile: Profile) -> Self {
        Self {
            listen,
            upstream,
            profile,
            seed: 1,
            max_clients: DEFAULT_MAX_CLIENTS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            client_inbox: 512,
            max_line_bytes: 4 << 20,
            socket_buffer_bytes: 4 << 20,
        }
    }
}

/// What a relay has done since it started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RelayStats {
    /// The profile's name.
    pub profile: String,
    /// Seconds since the relay started.
    pub elapsed_s: f64,
    /// Device to gateway.
    pub up: DirectionStats,
    /// Gateway to device.
    pub down: DirectionStats,
    /// Clients in the table now.
    pub clients: u64,
    /// Clients ever added (a client forgotten and back counts twice).
    pub clients_total: u64,
    /// Clients forgotten after the idle timeout.
    pub clients_expired: u64,
    /// Packets from new source addresses turned away because the table was full.
    pub clients_refused: u64,
}

impl RelayStats {
    /// One line for people: packets and drops per direction.
    pub fn summary(&self) -> String {
        let dir = |d: &DirectionStats| {
            let x = &d.dropped;
            format!(
                "{} in, {} out, dropped {} (loss {}, burst {}, queue {}, blackout {}, overflow {}), dup {}, reordered {}",
                d.packets_in,
                d.packets_out,
                x.total(),
                x.loss,
                x.burst,
                x.queue,
                x.blackout,
                x.overflow,
                d.duplicated,
                d.reordered
            )
        };
        format!("[{} {:.0}s] clients {} | up: {} | down: {}", self.profile, self.elapsed_s, self.clients, dir(&self.up), dir(&self.down))
    }
}
