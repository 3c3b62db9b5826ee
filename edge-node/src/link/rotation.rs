//! Rotating the device certificate without a restart: the certificate and key files are
//! checked every `--client-cert-poll-ms` (and, under `serve`, read at once on SIGHUP); a new
//! pair that loads is used from the next connection on, while the live connection keeps the
//! certificate it was made with (the gateway knows the device by the certificate of each
//! connection, and a new one of the same device replaces the old there).
//!
//! When to reload is [`RotationWatch`]'s decision, a pure part over file stamps and `now`: a
//! change is taken once the files have stayed the same for a settling time (an installer that
//! writes the certificate, then the key, is not caught half-way), a pair that failed to load is
//! not retried until it changes again, and a missing file keeps the certificate in force. The
//! task around it reads the files, builds the client configuration and swaps it in.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::task::JoinHandle;

use super::tls::{ClientIdentity, ClientTls};

/// What tells a changed file from an unchanged one without reading it: modification time, size
/// and inode (a `mv` over it makes a new inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    /// Last modification.
    pub modified: Option<SystemTime>,
    /// Size in bytes.
    pub len: u64,
    /// Inode number.
    pub inode: u64,
}

impl FileStamp {
    /// The stamp of `path`, `None` if it cannot be read.
    pub fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| Self { modified: m.modified().ok(), len: m.len(), inode: m.ino() })
    }
}

/// The stamps of the certificate and key files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairStamp {
    /// The certificate file's.
    pub cert: Option<FileStamp>,
    /// The key file's.
    pub key: Option<FileStamp>,
}

impl PairStamp {
    /// Stamp `identity`'s two files now.
    pub fn of(identity: &ClientIdentity) -> Self {
        Self { cert: FileStamp::of(&identity.cert), key: FileStamp::of(&identity.key) }
    }

    fn complete(&self) -> bool {
        self.cert.is_some() && self.key.is_some()
    }
}

/// What to do after a look at the files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Nothing changed (or the change is a pair known not to load).
    Keep,
    /// Changed, not settled yet (or a file is missing): look again later.
    Wait,
    /// Read the files and use them if they load, then report [`RotationWatch::loaded`].
    Reload,
}

/// The reload decision: inputs are the files' stamps, `now` and whether a reload was asked
/// for (SIGHUP); no clock, no file access.
#[derive(Debug, Clone)]
pub struct RotationWatch {
    applied: PairStamp,
    pending: Option<(PairStamp, Instant)>,
    failed: Option<PairStamp>,
    settle: Duration,
}

impl RotationWatch {
    /// Watching files whose pair in force has `applied` stamps; a change must stay unchanged
    /// for `settle` before it is read.
    pub fn new(applied: PairStamp, settle: Duration) -> Self {
        Self { applied, pending: None, failed: None, settle }
    }

    /// The files now have `observed` stamps at `now`; `forced`: asked to reload whatever the
    /// stamps say.
    pub fn check(&mut self, observed: PairStamp, now: Instant, forced: bool) -> Check {
        if forced {
            self.pending = None;
            return Check::Reload;
        }
        if observed == self.applied || Some(observed) == self.failed {
            self.pending = None;
            return Check::Keep;
        }
        if !observed.complete() {
            // Mid-replacement (or removed): the certificate in force stays.
            self.pending = None;
            return Check::Wait;
        }
        match self.pending {
            Some((stamp, since)) if stamp == observed => {
                if now.saturating_duration_since(since) >= self.settle {
                    self.pending = None;
                    Check::Reload
                } else {
                    Check::Wait
                }
            }
            _ => {
                self.pending = Some((observed, now));
                if self.settle.is_zero() {
                    self.pending = None;
                    Check::Reload
                } else {
                    Check::Wait
                }
            }
        }
    }

    /// The reload of the files stamped `stamp` loaded (`ok`) or did not; a failed pair is not
    /// read again until it changes.
    pub fn loaded(&mut self, stamp: PairStamp, ok: bool) {
        if ok {
            self.applied = stamp;
            self.failed = None;
        } else {
            self.failed = Some(stamp);
        }
    }
}

/// How the watcher runs.
#[derive(Debug, Clone, Copy)]
pub struct WatchConfig {
    /// Poll interval (zero: no polling).
    pub poll: Duration,
    /// Reload on SIGHUP too.
    pub on_sighup: bool,
}

/// How long a changed pair must stay unchanged before it is read.
const SETTLE: Duration = Duration::from_millis(200);

/// Start watching `identity`'s files; a new pair that `build` turns into a client
/// configuration replaces the one in `cell`. `None` when neither polling nor SIGHUP is on.
pub fn spawn(
    identity: ClientIdentity,
    cell: Arc<ClientTls>,
    watch: WatchConfig,
    build: impl Fn(&ClientIdentity) -> anyhow::Result<quinn::ClientConfig> + Send + 'static,
) -> Option<JoinHandle<()>> {
    if watch.poll.is_zero() && !watch.on_sighup {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut state = RotationWatch::new(PairStamp::of(&identity), SETTLE.min(watch.poll.max(Duration::from_millis(1))));
        let mut hup = if watch.on_sighup {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!("no SIGHUP reload of the client certificate ({e}); polling only");
                    None
                }
            }
        } else {
            None
        };
        let poll = if watch.poll.is_zero() { Duration::from_secs(3600) } else { watch.poll };
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let forced = tokio::select! {
                _ = tick.tick() => false,
                Some(()) = recv_hup(&mut hup) => true,
            };
            if !forced && watch.poll.is_zero() {
                continue;
            }
            let stamp = PairStamp::of(&identity);
            if state.check(stamp, Instant::now(), forced) != Check::Reload {
                continue;
            }
            match build(&identity) {
                Ok(config) => {
                    cell.replace(config);
                    state.loaded(stamp, true);
                    metrics::counter!("duet_edge_client_cert_reloads_total", "result" => "ok").increment(1);
                    tracing::info!(cert = %identity.cert.display(), forced, "client certificate reloaded: the next connection presents it");
                }
                Err(e) => {
                    state.loaded(stamp, false);
                    metrics::counter!("duet_edge_client_cert_reloads_total", "result" => "failed").increment(1);
                    tracing::warn!(cert = %identity.cert.display(), "client certificate not reloaded, keeping the one in force: {e:#}");
                }
            }
        }
    }))
}

/// The next SIGHUP, or never without a handler.
async fn recv_hup(hup: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match hup {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(n: u64) -> Option<FileStamp> {
        Some(FileStamp { modified: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(n)), len: n, inode: n })
    }

    fn pair(cert: u64, key: u64) -> PairStamp {
        PairStamp { cert: stamp(cert), key: stamp(key) }
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn unchanged_files_are_kept_and_a_change_is_read_once_it_settles() {
        let t0 = Instant::now();
        let mut w = RotationWatch::new(pair(1, 1), MS(200));
        assert_eq!(w.check(pair(1, 1), t0, false), Check::Keep);
        // The installer writes the certificate, then the key: neither half is read alone.
        assert_eq!(w.check(pair(2, 1), t0 + MS(100), false), Check::Wait);
        assert_eq!(w.check(pair(2, 2), t0 + MS(250), false), Check::Wait, "changed again: settling starts over");
        assert_eq!(w.check(pair(2, 2), t0 + MS(400), false), Check::Wait);
        assert_eq!(w.check(pair(2, 2), t0 + MS(450), false), Check::Reload);
        w.loaded(pair(2, 2), true);
        assert_eq!(w.check(pair(2, 2), t0 + MS(2000), false), Check::Keep);
    }

    #[test]
    fn a_pair_that_failed_to_load_is_not_retried_until_it_changes() {
        let t0 = Instant::now();
        let mut w = RotationWatch::new(pair(1, 1), Duration::ZERO);
        assert_eq!(w.check(pair(2, 1), t0, false), Check::Reload, "no settling time: at once");
        w.loaded(pair(2, 1), false);
        assert_eq!(w.check(pair(2, 1), t0 + MS(10), false), Check::Keep);
        assert_eq!(w.check(pair(2, 1), t0 + MS(5000), false), Check::Keep);
        assert_eq!(w.check(pair(2, 2), t0 + MS(5010), false), Check::Reload, "the key came: try again");
        w.loaded(pair(2, 2), true);
        assert_eq!(w.check(pair(2, 2), t0 + MS(6000), false), Check::Keep);
    }

    #[test]
    fn a_missing_file_keeps_the_certificate_in_force_and_sighup_always_reloads() {
        let t0 = Instant::now();
        let mut w = RotationWatch::new(pair(1, 1), MS(100));
        let gone = PairStamp { cert: None, key: stamp(1) };
        assert_eq!(w.check(gone, t0, false), Check::Wait);
        assert_eq!(w.check(gone, t0 + MS(500), false), Check::Wait, "never read half a pair");
        assert_eq!(w.check(pair(1, 1), t0 + MS(600), false), Check::Keep, "back as it was");
        assert_eq!(w.check(pair(1, 1), t0 + MS(700), true), Check::Reload, "SIGHUP reads whatever the stamps say");
        w.loaded(pair(1, 1), false);
        assert_eq!(w.check(pair(1, 1), t0 + MS(800), true), Check::Reload, "even a pair that failed");
    }

    #[test]
    fn the_watcher_swaps_the_configuration_when_the_files_change() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let identity = ClientIdentity { cert: dir.path().join("c.pem"), key: dir.path().join("k.pem") };
            std::fs::write(&identity.cert, "one").unwrap();
            std::fs::write(&identity.key, "one").unwrap();
            let built = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let dummy = || crate::link::tls::client_config(None, true, Duration::from_secs(1)).unwrap();
            let cell = Arc::new(ClientTls::new(dummy()));
            let counted = built.clone();
            let task = spawn(identity.clone(), cell, WatchConfig { poll: MS(20), on_sighup: false }, move |id| {
                anyhow::ensure!(std::fs::read_to_string(&id.key)? != "bad", "the key does not match");
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(dummy())
            })
            .unwrap();
            tokio::time::sleep(MS(150)).await;
            assert_eq!(built.load(std::sync::atomic::Ordering::SeqCst), 0, "unchanged files are not read");
            std::fs::write(&identity.cert, "two, longer").unwrap();
            std::fs::write(&identity.key, "two, longer").unwrap();
            let until = Instant::now() + Duration::from_secs(5);
            while built.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                assert!(Instant::now() < until, "the rotation was picked up");
                tokio::time::sleep(MS(10)).await;
            }
            task.abort();
        });
    }
}
