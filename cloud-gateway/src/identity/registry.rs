//! Which connection serves each identity, and the rule for a second one ([`takeover`]).
//!
//! Sessions are keyed by identity, so two live connections of one device would interleave
//! their updates to the same sessions; and a device that reconnects after a network change
//! (new address, new QUIC connection) should not wait out the old connection's idle timeout,
//! nor be refused as a duplicate. So for an identity the device **proved** (its certificate
//! under mutual TLS, or its per-device token), the newest connection wins: it continues the
//! device's sessions (its first escalation of each is a `Full` sync, as after any reconnect)
//! and the old one is closed with [`CLOSE_REPLACED`] and told why. Two processes sharing one
//! certificate therefore take turns rather than share: one credential per device.
//!
//! An identity that was only **claimed** (development mode: a shared token or none) proves
//! nothing, so a claim must not evict the device that holds the id: a second connection is
//! let in only from the live one's own address (the same host reconnecting); from anywhere
//! else it is refused while the first lives.
//!
//! The registry also lets a deny-list or CRL reload find and close the connections it now
//! refuses.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use super::cert::Serial;
use super::revoked::DenyList;

/// QUIC application close code of a connection replaced by a newer one of the same identity.
pub const CLOSE_REPLACED: u32 = 4;
/// QUIC application close code of a connection whose credential was revoked.
pub const CLOSE_REVOKED: u32 = 5;
/// Close reason sent with [`CLOSE_REPLACED`].
pub const REPLACED_REASON: &[u8] = b"replaced by a newer connection of this device";
/// Close reason sent with [`CLOSE_REVOKED`].
pub const REVOKED_REASON: &[u8] = b"credential revoked";

/// The identity a connection was admitted with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The device id sessions, limits, metrics and traces use.
    pub device_id: Arc<str>,
    /// The client certificate's serial (mutual TLS), none otherwise.
    pub serial: Option<Serial>,
    /// Whether the device proved the id (certificate or per-device token) rather than only
    /// claimed it.
    pub verified: bool,
}

/// What a new connection of an identity does to the live one, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// No live connection: the identity is free.
    Free,
    /// The new connection replaces the live one, which is closed.
    Replace,
    /// The new connection is refused: the id was only claimed, from another address than the
    /// live connection's.
    Refuse,
}

/// The rule for a second connection of one identity: a proved identity always replaces (the
/// device reconnecting); a claimed one only from the live connection's own address.
pub fn takeover(verified: bool, live_source: Option<IpAddr>, new_source: IpAddr) -> Takeover {
    match live_source {
        None => Takeover::Free,
        Some(_) if verified => Takeover::Replace,
        Some(live) if live.to_canonical() == new_source.to_canonical() => Takeover::Replace,
        Some(_) => Takeover::Refuse,
    }
}

/// A claimed identity's live connection is elsewhere: this connection is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the device id is in use by a live connection from another address, and this connection did not prove it (no client certificate or per-device token)")]
pub struct IdInUse;

struct Live {
    conn: quinn::Connection,
    serial: Option<Serial>,
}

/// Live connections by device id.
#[derive(Default)]
pub struct Registry {
    live: Mutex<HashMap<Arc<str>, Live>>,
}

impl Registry {
    /// Record `conn` as `identity`'s connection, close the one it replaces (if any, by
    /// [`takeover`]), and forget it again when it closes. Returns whether one was replaced, or
    /// [`IdInUse`] when the rule refuses `conn`.
    pub fn admit(self: &Arc<Self>, identity: &Identity, conn: &quinn::Connection) -> Result<bool, IdInUse> {
        let previous = {
            let mut live = self.lock();
            let live_source = live.get(&identity.device_id).filter(|l| l.conn.stable_id() != conn.stable_id()).map(|l| l.conn.remote_address().ip());
            if takeover(identity.verified, live_source, conn.remote_address().ip()) == Takeover::Refuse {
                metrics::counter!("duet_gateway_connections_refused_total", "reason" => "id_in_use").increment(1);
                return Err(IdInUse);
            }
            live.insert(identity.device_id.clone(), Live { conn: conn.clone(), serial: identity.serial.clone() })
        };
        let replaced = previous.filter(|p| p.conn.stable_id() != conn.stable_id()).map(|p| p.conn);
        if let Some(old) = &replaced {
            tracing::info!(device = %identity.device_id, old = %old.remote_address(), new = %conn.remote_address(), "a newer connection of this device replaces the older");
            metrics::counter!("duet_gateway_connections_replaced_total").increment(1);
            old.close(CLOSE_REPLACED.into(), REPLACED_REASON);
        }
        let (registry, id, conn) = (self.clone(), identity.device_id.clone(), conn.clone());
        tokio::spawn(async move {
            conn.closed().await;
            // Only if it is still this connection: a replacement keeps its own entry. (The
            // clones held here and in the map keep `stable_id` from being reused meanwhile.)
            let mut live = registry.lock();
            if live.get(&id).is_some_and(|l| l.conn.stable_id() == conn.stable_id()) {
                live.remove(&id);
            }
        });
        Ok(replaced.is_some())
    }

    /// Close every connection `list` denies; returns how many.
    pub fn close_denied(&self, list: &DenyList) -> usize {
        self.close_where(|id, serial| list.denies(id, serial))
    }

    /// Close every connection whose device id and certificate serial `revoked` refuses (a
    /// reloaded deny list or CRL); returns how many.
    pub fn close_where(&self, revoked: impl Fn(&str, Option<&Serial>) -> bool) -> usize {
        let denied: Vec<(Arc<str>, quinn::Connection)> =
            self.lock().iter().filter(|(id, live)| revoked(id, live.serial.as_ref())).map(|(id, live)| (id.clone(), live.conn.clone())).collect();
        for (id, conn) in &denied {
            tracing::warn!(device = %id, remote = %conn.remote_address(), "credential revoked: closing the device's connection");
            conn.close(CLOSE_REVOKED.into(), REVOKED_REASON);
        }
        if !denied.is_empty() {
            metrics::counter!("duet_gateway_connections_revoked_total").increment(denied.len() as u64);
        }
        denied.len()
    }

    /// The certificate serial (hex) the live connection of `device_id` was admitted with: which
    /// of a device's certificates it uses now (after a rotation, the new one's once it
    /// reconnects).
    pub fn serial_hex(&self, device_id: &str) -> Option<String> {
        self.lock().get(device_id).and_then(|l| l.serial.as_ref().map(Serial::to_hex))
    }

    /// Identities connected now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no identity is connected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Live>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_free_identity_is_taken_by_whoever_proves_or_claims_it() {
        assert_eq!(takeover(false, None, ip("10.0.0.1")), Takeover::Free);
        assert_eq!(takeover(true, None, ip("10.0.0.1")), Takeover::Free);
    }

    #[test]
    fn a_proved_identity_replaces_its_live_connection_from_anywhere() {
        assert_eq!(takeover(true, Some(ip("10.0.0.1")), ip("192.0.2.7")), Takeover::Replace);
    }

    #[test]
    fn a_claimed_identity_never_evicts_a_live_connection_from_another_address() {
        assert_eq!(takeover(false, Some(ip("10.0.0.1")), ip("192.0.2.7")), Takeover::Refuse);
        // The same host reconnecting (also seen as an IPv4-mapped IPv6 address) replaces.
        assert_eq!(takeover(false, Some(ip("10.0.0.1")), ip("10.0.0.1")), Takeover::Replace);
        assert_eq!(takeover(false, Some(ip("::ffff:10.0.0.1")), ip("10.0.0.1")), Takeover::Replace);
    }
}
