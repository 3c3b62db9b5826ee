//! `cloud-gateway`: QUIC server that batches escalations from many devices into the LLM.

use clap::Parser;
use cloud_gateway::cli::GatewayArgs;
use cloud_gateway::Gateway;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = GatewayArgs::parse();
    common::telemetry::init_logging(&args.log)?;
    let config = args.gateway_config()?;
    let backend = tokio::task::spawn_blocking({
        let args = args.clone();
        move || args.load_backend()
    })
    .await??;
    let gateway = Gateway::start(config, backend).await?;
    eprintln!("cloud-gateway ready on quic://{} (http {:?})", gateway.local_addr()?, gateway.http_addr);
    tokio::signal::ctrl_c().await?;
    tracing::info!("shutting down");
    gateway.shutdown().await;
    Ok(())
}
