//! Who a device is: the identity sessions, limits, metrics and traces are keyed by.
//!
//! With `--client-ca` (mutual TLS, the production mode) a device proves its identity with a
//! certificate the fleet CA issued ([`ca`]); rustls verifies it during the TLS handshake, with
//! the deny list (`verifier`, [`revoked`]), and the device id is the certificate's subject
//! common name (`cert`). What a device *claims* in `Hello.device_id` is then only logged:
//! a device holding its own valid certificate still cannot name itself as another and reach
//! that device's sessions, and cannot spread over invented ids to dodge its session limit.
//!
//! Devices that cannot hold a certificate prove their id with a per-device token
//! (`--device-token-secret`, [`common::device_token`]): the gateway recomputes the token of the
//! claimed id from its secret, so one device's token opens no other id.
//!
//! Without either, the shared `--auth-token` (or nothing) is all there is: every device may
//! claim any id. That is a development mode: the gateway says so at start-up, and refuses to
//! listen beyond loopback in it unless `--insecure-unverified-devices` says that is meant
//! (`config::validate`).
//!
//! Either way one connection serves one identity at a time ([`registry`]: a proved identity's
//! newest connection replaces the older; a claimed one cannot evict a live connection from
//! another address), a deny list and the fleet CA's CRLs ([`crl`]), reloaded without restart, refuse
//! and disconnect revoked devices (`reload`), and each identity has its own escalation rate
//! limit (`rate`).

pub mod ca;
pub(crate) mod cert;
pub mod crl;
pub(crate) mod rate;
pub mod registry;
mod config;
mod reload;
pub mod revoked;
mod verifier;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use common::device_token::DeviceTokenKey;
use common::protocol::RejectReason;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;
use tokio::task::JoinHandle;

use cert::parse_device_cert;
pub use config::IdentityConfig;
use crl::CrlSet;
use rate::DeviceRateLimiter;
use registry::{Identity, Registry};
use revoked::{DenyCell, DenyList};
use verifier::DeviceCertVerifier;

/// Identity policy and state shared by the listener and every connection.
pub struct Identities {
    verifier: Option<Arc<DeviceCertVerifier>>,
    /// The secret per-device tokens are checked with (`--device-token-secret`).
    device_tokens: Option<Arc<DeviceTokenKey>>,
    /// The deny list in force.
    pub deny: Arc<DenyCell>,
    /// Which connection serves each identity.
    pub registry: Arc<Registry>,
    /// Escalation rate limit per identity.
    pub rate: DeviceRateLimiter,
    revoked_file: Option<PathBuf>,
    revoked_poll: Duration,
    /// The CRL files (`--client-crl`), and the set in force.
    crl_files: Vec<PathBuf>,
    crls: RwLock<Arc<CrlSet>>,
}

impl Identities {
    /// Load what `config` names: the client CA (mutual TLS) and the deny list. A deny-list
    /// file that does not exist yet is an empty list (`fleet revoke` creates it); one that does
    /// not parse stops the gateway. Rate buckets are kept for twice `max_connections` devices.
    pub fn load(config: &IdentityConfig, max_connections: usize) -> anyhow::Result<Self> {
        let list = match &config.revoked_file {
            Some(path) if path.exists() => DenyList::load(path)?,
            Some(path) => {
                tracing::warn!(path = %path.display(), "the deny list does not exist yet: nothing revoked");
                DenyList::default()
            }
            None => DenyList::default(),
        };
        let deny = Arc::new(DenyCell::new(list));
        let crl_files = config.client_crls.clone();
        // As with the deny list, a CRL not written yet revokes nothing (`ca revoke --crl`
        // creates it, and the reloader reads it once it appears); one that does not parse
        // stops the gateway.
        let present: Vec<PathBuf> = crl_files.iter().filter(|p| p.exists()).cloned().collect();
        for missing in crl_files.iter().filter(|p| !p.exists()) {
            tracing::warn!(path = %missing.display(), "the CRL does not exist yet: nothing revoked by it");
        }
        let crls = CrlSet::load(&present)?;
        let verifier = match &config.client_ca {
            Some(ca) => {
                let v = DeviceCertVerifier::load(ca, deny.clone(), crls.ders.clone())?;
                if !crl_files.is_empty() {
                    tracing::info!(files = crl_files.len(), revoked = crls.serials.len(), "checking device certificates against the fleet CA's CRLs");
                }
                tracing::info!(client_ca = %ca.display(), "mutual TLS: device identity comes from the client certificate");
                Some(Arc::new(v))
            }
            None => None,
        };
        let device_tokens = match &config.device_token_secret {
            Some(path) => {
                let key = DeviceTokenKey::load(path)?;
                tracing::info!(secret = %path.display(), "per-device tokens: a device's token must be the one issued for the id it claims");
                Some(Arc::new(key))
            }
            None => None,
        };
        if verifier.is_none() && device_tokens.is_none() {
            let how = if config.auth_token.is_some() { "the shared --auth-token" } else { "nothing (no --auth-token either)" };
            tracing::warn!("no --client-ca or --device-token-secret: device identity is UNVERIFIED (dev mode): a device is whatever its Hello claims, checked by {how}");
        }
        let max_buckets = max_connections.saturating_mul(2).max(1024);
        Ok(Self {
            verifier,
            device_tokens,
            deny,
            registry: Arc::default(),
            rate: DeviceRateLimiter::new(config.device_rate, max_buckets),
            revoked_file: config.revoked_file.clone(),
            revoked_poll: config.revoked_poll,
            crl_files,
            crls: RwLock::new(Arc::new(crls)),
        })
    }

    /// Whether identities are verified by client certificate (mutual TLS).
    pub fn verified(&self) -> bool {
        self.verifier.is_some()
    }

    /// The per-device token secret, for the handshake to check tokens with.
    pub fn device_tokens(&self) -> Option<Arc<DeviceTokenKey>> {
        self.device_tokens.clone()
    }

    /// The TLS client-certificate verifier, under mutual TLS.
    pub fn client_verifier(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.verifier.clone().map(|v| v as Arc<dyn ClientCertVerifier>)
    }

    /// The identity of a device past `Hello`, which claimed `claimed`: under mutual TLS the
    /// verified certificate's, else the claim (proved when the handshake checked its
    /// per-device token). A revoked one is refused (`Auth`).
    pub fn identify(&self, conn: &quinn::Connection, claimed: &str) -> Result<Identity, RejectReason> {
        let identity = if self.verified() {
            let certs = conn.peer_identity().and_then(|any| any.downcast::<Vec<CertificateDer<'static>>>().ok());
            let Some(end_entity) = certs.as_ref().and_then(|c| c.first()) else {
                tracing::info!(remote = %conn.remote_address(), "no client certificate under mutual TLS");
                return Err(RejectReason::Auth);
            };
            let cert = parse_device_cert(end_entity).map_err(|e| {
                tracing::info!(remote = %conn.remote_address(), "{e}");
                RejectReason::Auth
            })?;
            if cert.device_id != claimed {
                tracing::debug!(device = %cert.device_id, claimed, "Hello claims another device id than the certificate: the certificate's is used");
            }
            Identity { device_id: Arc::from(cert.device_id), serial: Some(cert.serial), verified: true }
        } else {
            Identity { device_id: Arc::from(claimed), serial: None, verified: self.device_tokens.is_some() }
        };
        // Checked again here: the list may have been reloaded since the TLS handshake, and in
        // dev mode this is the only check.
        if self.deny.get().denies(&identity.device_id, identity.serial.as_ref()) {
            tracing::info!(device = %identity.device_id, remote = %conn.remote_address(), "revoked device refused");
            return Err(RejectReason::Auth);
        }
        Ok(identity)
    }

    /// Read the deny list at `path` again; if it parses, put it in force and close the live
    /// connections it refuses. Returns how many were closed (`None`: kept the previous list).
    pub fn reload_deny_list(&self, path: &Path) -> Option<usize> {
        match DenyList::load(path) {
            Ok(list) => {
                let entries = list.len();
                self.deny.set(list);
                let closed = self.registry.close_denied(&self.deny.get());
                metrics::gauge!("duet_gateway_deny_list_entries").set(entries as f64);
                tracing::info!(entries, closed, "deny list reloaded");
                Some(closed)
            }
            Err(e) => {
                tracing::warn!("{e}: keeping the previous deny list");
                None
            }
        }
    }

    /// Read the CRL files again; if they all parse, check new handshakes against them and
    /// close the live connections whose certificates they now revoke. Returns how many were
    /// closed (`None`: kept the CRLs in force).
    pub fn reload_crls(&self) -> Option<usize> {
        let loaded = CrlSet::load(&self.crl_files).map_err(anyhow::Error::from).and_then(|set| match &self.verifier {
            Some(v) => v.set_crls(set.ders.clone()).map(|()| set),
            None => Ok(set),
        });
        match loaded {
            Ok(set) => {
                let set = Arc::new(set);
                *self.crls.write().unwrap_or_else(|p| p.into_inner()) = set.clone();
                let closed = self.registry.close_where(|_, serial| set.revokes(serial));
                metrics::gauge!("duet_gateway_crl_revoked_serials").set(set.serials.len() as f64);
                tracing::info!(revoked = set.serials.len(), closed, "CRLs reloaded");
                Some(closed)
            }
            Err(e) => {
                tracing::warn!("{e:#}: keeping the CRLs in force");
                None
            }
        }
    }

    /// Start reloading the deny list and the CRLs on change and on SIGHUP, if there are any.
    pub fn spawn_reloader(self: &Arc<Self>) -> Option<JoinHandle<()>> {
        if self.revoked_file.is_none() && self.crl_files.is_empty() {
            return None;
        }
        metrics::gauge!("duet_gateway_deny_list_entries").set(self.deny.get().len() as f64);
        metrics::gauge!("duet_gateway_crl_revoked_serials").set(self.crls.read().unwrap_or_else(|p| p.into_inner()).serials.len() as f64);
        let mut watched: Vec<(PathBuf, reload::Kind)> = self.revoked_file.iter().map(|p| (p.clone(), reload::Kind::DenyList)).collect();
        watched.extend(self.crl_files.iter().map(|p| (p.clone(), reload::Kind::Crl)));
        Some(reload::spawn(self.clone(), watched, self.revoked_poll))
    }
}
