//! The gateway as a whole: wires the listener, the session store, the LLM path (the batcher or
//! the engine pool, behind [`crate::dispatch`]), session expiry, the drain task and the HTTP
//! side port together, and takes them down again: at once ([`Gateway::shutdown`]) or
//! gracefully ([`Gateway::drain`], then [`Gateway::drained`]).
//!
//! This is the only module that knows every part; the parts know only the shared state
//! ([`crate::state`]) and the layers below them, so none of them imports another.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::batcher::backend::Backend;
use crate::batcher::spawn_batcher_with;
use crate::config::GatewayConfig;
use crate::dispatch::{Dispatch, Dispatcher, ModelFacts};
use crate::engine::pool::dispatch::EngineDispatch;
use crate::engine::pool::EnginePool;
use crate::identity::Identities;
use crate::sessions::SessionStore;
use crate::state::Shared;
use crate::transport::listener;

/// A running gateway.
pub struct Gateway {
    /// The QUIC endpoint (its local address is the one devices dial).
    pub endpoint: quinn::Endpoint,
    /// Shared state, for tests and diagnostics.
    pub shared: Arc<Shared>,
    /// Bound address of the HTTP side port, if any.
    pub http_addr: Option<SocketAddr>,
    /// The engine pool, when engines serve (for tests and diagnostics).
    engines: Option<Arc<EnginePool>>,
    drained: watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Gateway {
    /// Start serving `backend` as `config` says. Returns once the listener is bound and the
    /// backend has answered its warm-up request. What devices are told about the model comes
    /// from [`Backend::facts`].
    pub async fn start(config: GatewayConfig, backend: Box<dyn Backend>) -> anyhow::Result<Self> {
        let config = config.validated()?;
        let facts = backend.facts();
        let batcher = spawn_batcher_with(backend, config.batcher, config.overload).await?;
        Self::start_with(config, facts, Arc::new(batcher), Vec::new()).await
    }

    /// Start serving from external engines: `pool` is already checked against the devices'
    /// tokenizer ([`crate::engine::connect`]), which also found its `facts`. Workers' health is
    /// polled for as long as the gateway runs.
    pub async fn start_with_engines(config: GatewayConfig, pool: EnginePool, facts: ModelFacts) -> anyhow::Result<Self> {
        let config = config.validated()?;
        let pool = Arc::new(pool);
        let health = pool.spawn_health_checks();
        let mut gateway = Self::start_with(config, facts, Arc::new(EngineDispatch(pool.clone())), vec![health]).await?;
        gateway.engines = Some(pool);
        Ok(gateway)
    }

    async fn start_with(config: GatewayConfig, facts: ModelFacts, llm: Arc<dyn Dispatch>, mut tasks: Vec<JoinHandle<()>>) -> anyhow::Result<Self> {
        let identities = Arc::new(Identities::load(&config.identity, config.transport.max_connections)?);
        let endpoint = listener::bind(&config, identities.client_verifier())?;
        tasks.extend(identities.spawn_reloader());
        let fleet = Arc::new(crate::fleet::Fleet::from_config(&config.fleet, config.transport.max_frame_bytes)?);
        tasks.push(fleet.spawn_poller());
        let shared = Arc::new(Shared::new(&config, &facts, llm, identities, fleet));
        tasks.push(listener::spawn_accept_loop(endpoint.clone(), shared.clone()));
        tasks.push(spawn_expiry(shared.store.clone(), shared.llm.clone(), config.sessions.idle));
        // After a flood, what it held is given back to the system, not only to the allocator.
        tasks.push(crate::memory::spawn_trimmer(shared.clone(), Duration::from_secs(5)));
        let (drained_tx, drained) = watch::channel(false);
        tasks.push(crate::drain::spawn_drain_task(endpoint.clone(), shared.clone(), drained_tx));
        let http_addr = match config.transport.http_listen {
            Some(addr) => {
                let (bound, task) = crate::http::serve(addr, shared.clone()).await?;
                tasks.push(task);
                Some(bound)
            }
            None => None,
        };
        metrics::gauge!("duet_gateway_draining").set(0.0);
        tracing::info!(quic = %endpoint.local_addr()?, http = ?http_addr, llm = %facts.llm_id, "gateway listening");
        Ok(Self { endpoint, shared, http_addr, engines: None, drained, tasks })
    }

    /// The engine pool serving this gateway, if engines serve it.
    pub fn engine_pool(&self) -> Option<&Arc<EnginePool>> {
        self.engines.as_ref()
    }

    /// Local QUIC address.
    pub fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.endpoint.local_addr()?)
    }

    /// Start a graceful drain (as SIGTERM does in the binary): `/readyz` turns false, new devices
    /// are refused, connected ones get `GoAway`, work already taken is answered, and the
    /// connections are closed within the configured grace period. `false` if one had started.
    pub fn drain(&self) -> bool {
        self.shared.start_drain(Instant::now())
    }

    /// Wait until a drain (started here or by `POST /drain`) has closed every connection; then
    /// [`Self::shutdown`] stops the rest. Never returns if no drain starts.
    pub async fn drained(&self) {
        let mut rx = self.drained.clone();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Stop accepting, close every connection and stop the LLM path.
    pub async fn shutdown(self) {
        self.endpoint.close(0u32.into(), b"gateway shutting down");
        for t in &self.tasks {
            t.abort();
        }
        self.shared.llm.stop();
        self.endpoint.wait_idle().await;
    }
}

/// Drop sessions idle longer than `idle`, and their queued work and LLM state, checking four
/// times per `idle` (at most every 100 ms).
fn spawn_expiry(store: Arc<SessionStore>, llm: Dispatcher, idle: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval((idle / 4).max(Duration::from_millis(100)));
        loop {
            tick.tick().await;
            for key in store.expire_idle(Instant::now(), idle) {
                llm.end_session(key);
            }
        }
    })
}
