//! The drain task: carries out [`common::exchange::Drain`]'s timeline once a drain starts
//! (SIGTERM in the binary, `POST /drain`, or [`crate::Gateway::drain`]).
//!
//! Everything else of a drain happens where the work is: `/readyz` turns false
//! ([`crate::http`]), the listener refuses new devices and each connection sends its `GoAway`
//! and answers late escalations `Busy` ([`crate::transport`]). This task only watches what is
//! still live (connections, escalations not yet answered) and, when the timeline says so,
//! closes every connection and reports the gateway drained, half a close margin later at most,
//! so the process exits within its grace period.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::exchange::{DrainStep, Live};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::state::Shared;

/// QUIC application close code of the connections a drain closes.
pub const CLOSE_DRAINED: u32 = 3;
/// How often the task looks at what is live (devices leaving, answers going out).
const POLL: Duration = Duration::from_millis(20);

/// Wait for a drain to start, follow its timeline, close the endpoint's connections and set
/// `drained` to true once they are closed (or the grace period is over).
pub fn spawn_drain_task(endpoint: quinn::Endpoint, shared: Arc<Shared>, drained: watch::Sender<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut started = shared.drain.subscribe();
        let drain = match started.wait_for(Option::is_some).await {
            Ok(d) => *d,
            Err(_) => return, // the gateway is gone
        };
        let Some(drain) = drain else { return };
        loop {
            let now = Instant::now();
            let live = Live { connections: shared.connections.load(Ordering::Relaxed), in_flight: shared.open_escalations.load(Ordering::Relaxed) };
            match drain.step(now, live) {
                DrainStep::Close => {
                    tracing::info!(after_ms = now.duration_since(drain.started()).as_millis() as u64, connections = live.connections, in_flight = live.in_flight, "drained: closing");
                    break;
                }
                DrainStep::Wait { until } => tokio::time::sleep_until(until.min(now + POLL).into()).await,
            }
        }
        endpoint.close(CLOSE_DRAINED.into(), b"gateway drained");
        // The closes are sent at once; waiting until every connection is fully gone can take
        // longer (a peer that vanished leaves its connection draining for several timeouts).
        let flush_until = (Instant::now() + drain.close_margin() / 2).min(drain.deadline());
        let _ = tokio::time::timeout_at(flush_until.into(), endpoint.wait_idle()).await;
        drained.send_replace(true);
    })
}
