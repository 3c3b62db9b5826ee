//! Giving freed heap memory back to the operating system.
//!
//! After a flood stops (sessions expire, connections and their buffers close) the gateway has
//! freed what the flood held, but glibc's allocator keeps most freed pages mapped: RSS stayed
//! at its peak (`loadtest abuse`). The bounds elsewhere cap that peak; this returns it, by
//! asking the allocator to release free pages every so often, when the gateway holds much less
//! than it did at the last look.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::state::Shared;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" {
    /// glibc: release free memory from the heap's arenas to the system.
    fn malloc_trim(pad: usize) -> std::os::raw::c_int;
}

/// Release free heap memory to the operating system (glibc's `malloc_trim`); elsewhere a
/// no-op. Takes a few milliseconds on a heap of a few hundred MB.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointer.
    unsafe {
        malloc_trim(0);
    }
}

/// What the gateway holds, in rough units: sessions, connections and KiB of unfinished
/// frames.
fn held(shared: &Shared) -> usize {
    shared.store.len() + shared.connections.load(Ordering::Relaxed) + shared.buffers.total() / 1024
}

/// Every `every`, trim the heap if what the gateway holds fell below half of its highest since
/// the last trim (so a steady gateway is never trimmed, a drained flood is, once).
pub fn spawn_trimmer(shared: Arc<Shared>, every: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        let mut peak = 0usize;
        loop {
            tick.tick().await;
            let now = held(&shared);
            peak = peak.max(now);
            if peak >= 64 && now < peak / 2 {
                let t = std::time::Instant::now();
                tokio::task::spawn_blocking(trim).await.ok();
                tracing::debug!(held = now, peak, trim_ms = t.elapsed().as_secs_f64() * 1e3, "returned freed memory to the system");
                peak = now;
            }
        }
    })
}
