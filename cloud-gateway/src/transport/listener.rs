//! The QUIC listener: binds the endpoint and accepts devices, up to the connection limit.
//!
//! A device beyond the limit is not dropped silently: it completes the TLS handshake and is
//! answered `Reject { Overloaded }`, so that it knows to back off or try another replica
//! rather than retrying as if the network had failed. While the gateway drains, new devices
//! are refused at the QUIC level (`CONNECTION_REFUSED`, no TLS work), which a device reads at
//! once as "try the next address".

use std::sync::Arc;

use anyhow::Context;
use tokio::task::JoinHandle;

use super::connection::{refuse_overloaded, serve_connection};
use super::tls::server_config;
use crate::config::GatewayConfig;
use crate::state::Shared;

/// Bind the QUIC endpoint the configuration describes (TLS and transport settings included);
/// with `client_auth`, devices must present a certificate it accepts (mutual TLS).
pub fn bind(config: &GatewayConfig, client_auth: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>) -> anyhow::Result<quinn::Endpoint> {
    let server = server_config(&config.transport.cert, client_auth, config.transport.idle_timeout)?;
    quinn::Endpoint::server(server, config.transport.listen).with_context(|| format!("binding QUIC on {}", config.transport.listen))
}

/// Accept devices until the endpoint closes: each gets its own task (handshake, then a
/// connection actor), or an `Overloaded` refusal beyond the connection limit.
pub fn spawn_accept_loop(endpoint: quinn::Endpoint, shared: Arc<Shared>) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            if shared.draining().is_some() {
                metrics::counter!("duet_gateway_drain_refused_connections_total").increment(1);
                incoming.refuse();
                continue;
            }
            // One address cannot take every place (an idle-connection flood from one host).
            let Some(place) = shared.sources.try_acquire(incoming.remote_address().ip()) else {
                metrics::counter!("duet_gateway_source_refused_connections_total").increment(1);
                incoming.refuse();
                continue;
            };
            if shared.at_connection_limit() {
                metrics::counter!("duet_gateway_connections_refused_total").increment(1);
                tokio::spawn(refuse_overloaded(incoming, shared.max_frame_bytes));
                continue;
            }
            tokio::spawn(serve_connection(incoming, shared.clone(), place));
        }
    })
}
