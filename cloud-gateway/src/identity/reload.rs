//! Reloading the deny list and the CRLs while the gateway runs: their files are polled for a
//! new modification time or size every `--revoked-poll-ms`, and read at once on SIGHUP. A
//! reload that parses replaces the list (or the CRLs) and closes the live connections it now
//! refuses; one that does not (a typo, a half-written file, the file gone) keeps the previous
//! one and says why, so revocation fails closed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::task::JoinHandle;

use super::Identities;

/// What tells a changed file from an unchanged one without reading it: its modification
/// time, size and inode (an editor or `mv` that replaces the file makes a new one).
fn stamp(path: &Path) -> Option<(Option<SystemTime>, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.modified().ok(), m.len(), m.ino()))
}

async fn hangup(signal: &mut Option<Signal>) {
    match signal {
        Some(s) => {
            if s.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// What a watched file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The deny list (`--revoked-file`).
    DenyList,
    /// A CRL file (`--client-crl`).
    Crl,
}

/// Watch the `files` every `poll` (and on SIGHUP) and reload what changed: the deny list, or
/// all the CRLs when one of them changed.
pub fn spawn(identities: Arc<Identities>, files: Vec<(PathBuf, Kind)>, poll: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last: Vec<_> = files.iter().map(|(path, _)| stamp(path)).collect();
        let mut tick = tokio::time::interval(poll.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("no SIGHUP reload of the deny list ({e}); polling only");
                None
            }
        };
        loop {
            let forced = tokio::select! {
                _ = tick.tick() => false,
                _ = hangup(&mut hup) => true,
            };
            let (mut deny, mut crls) = (None, false);
            for ((path, kind), last) in files.iter().zip(last.iter_mut()) {
                let now = stamp(path);
                if forced || now != *last {
                    *last = now;
                    match kind {
                        Kind::DenyList => deny = Some(path),
                        Kind::Crl => crls = true,
                    }
                }
            }
            if let Some(path) = deny {
                identities.reload_deny_list(path);
            }
            if crls {
                identities.reload_crls();
            }
        }
    })
}
