//! The gateway every load test starts in its own process: QUIC on a free loopback port, no HTTP
//! side port, a fresh self-signed certificate that the simulated devices pin, and no bound on
//! connections per source address (every simulated device shares 127.0.0.1).

use std::path::{Path, PathBuf};

use cloud_gateway::config::{CertSource, GatewayConfig, OverloadConfig, TransportConfig};

/// A loopback gateway configuration whose certificate and key are written into `dir`; returns
/// it with the certificate's path (the devices' `--ca-cert`).
pub fn loopback_config(dir: &Path) -> anyhow::Result<(GatewayConfig, PathBuf)> {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem())?;
    std::fs::write(&key, ck.signing_key.serialize_pem())?;
    // Every simulated device (and the impairment relay) connects from 127.0.0.1: one source
    // address may hold every connection.
    let overload = OverloadConfig { max_connections_per_source: usize::MAX, ..OverloadConfig::default() };
    let transport = TransportConfig { listen: "127.0.0.1:0".parse()?, http_listen: None, cert: CertSource::Files { cert: cert.clone(), key }, ..TransportConfig::default() };
    let config = GatewayConfig { transport, overload, ..GatewayConfig::default() };
    Ok((config, cert))
}
