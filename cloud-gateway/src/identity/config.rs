//! `[identity]`: who devices are and how the gateway tells, as the configuration states it.
//! It lives beside the identity code that reads it; [`crate::config`] re-exports it as one
//! section of the gateway's configuration.

use std::path::PathBuf;
use std::time::Duration;

use super::rate::RateLimit;

/// Who devices are (mutual TLS or the dev mode's shared token), and what the gateway calls
/// itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityConfig {
    /// Name announced in `Welcome`, so a device's logs say which gateway answered.
    pub gateway_id: String,
    /// Shared secret devices present in `Hello`; `None` accepts any device (development only).
    pub auth_token: Option<String>,
    /// The fleet CA (PEM) that device certificates must chain to: mutual TLS, and the device
    /// id comes from the certificate. `None`: identity is what `Hello` claims (dev mode).
    pub client_ca: Option<PathBuf>,
    /// File holding the secret per-device tokens are issued from (`cloud-gateway ca
    /// init-token-secret`): a device's `Hello` must carry the token of the id it claims.
    pub device_token_secret: Option<PathBuf>,
    /// Listen beyond loopback although device identity is not verified (neither `client_ca`
    /// nor `device_token_secret`): any device may then act as any other. Off, the gateway
    /// refuses to start that way.
    pub insecure_unverified_devices: bool,
    /// Deny list of device ids and certificate serials (see [`super::revoked`]),
    /// reloaded while running.
    pub revoked_file: Option<PathBuf>,
    /// How often the deny list's and CRLs' files are checked for changes (SIGHUP reloads at
    /// once).
    pub revoked_poll: Duration,
    /// Certificate revocation lists the fleet CA signed (`cloud-gateway ca revoke --crl`),
    /// checked in the TLS handshake beside the deny list and reloaded while running.
    pub client_crls: Vec<PathBuf>,
    /// Escalations per second (and burst) each device identity may make; beyond it `Busy`.
    pub device_rate: RateLimit,
}

impl IdentityConfig {
    /// Whether a device must prove the id it uses (certificate or per-device token).
    pub fn verifies_devices(&self) -> bool {
        self.client_ca.is_some() || self.device_token_secret.is_some()
    }
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            gateway_id: "duet-gateway".into(),
            auth_token: None,
            client_ca: None,
            device_token_secret: None,
            insecure_unverified_devices: false,
            revoked_file: None,
            revoked_poll: Duration::from_secs(2),
            client_crls: Vec::new(),
            device_rate: RateLimit::default(),
        }
    }
}
