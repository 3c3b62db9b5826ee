//! What every connection shares: the limits derived from the configuration and the model,
//! the session store, the LLM (behind the dispatch seam), the connection count and the drain.
//!
//! It sits below the transport and the HTTP port (both read it) and above the store and the
//! LLM paths (it holds them), so that `server` wires the pieces together without the pieces
//! importing each other. The limits a device sees are derived here, in one place, from
//! [`GatewayConfig`] and [`ModelFacts`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::exchange::gateway::HandshakePolicy;
use common::exchange::Drain;
use common::protocol::{Limits, ValidationLimits};
use tokio::sync::watch;

use crate::dispatch::ModelFacts;
use crate::dispatch::{Dispatch, Dispatcher};
use crate::config::GatewayConfig;
use crate::fleet::Fleet;
use crate::identity::Identities;
use crate::sessions::SessionStore;
use crate::limits::{BufferBudget, SourceLimiter};

/// State shared by the listener, every connection actor and the HTTP port.
pub struct Shared {
    /// What a `Hello` is checked against, and what `Welcome` announces.
    pub handshake: HandshakePolicy,
    /// Checks every request frame passes before it touches the store.
    pub validation: ValidationLimits,
    /// Largest accepted frame payload, bytes.
    pub max_frame_bytes: usize,
    /// Longest session context, tokens: the backend's limit less the token asked for.
    pub max_context_tokens: usize,
    /// Most sessions one device may hold.
    pub max_sessions_per_device: usize,
    /// Most connected devices.
    pub max_connections: usize,
    /// Every live session's token context.
    pub store: Arc<SessionStore>,
    /// The LLM escalations go to: the batcher or the engine pool, behind the dispatch seam.
    pub llm: Dispatcher,
    /// Devices past the handshake right now.
    pub connections: AtomicUsize,
    /// Connections per source address (bounded: one host cannot take every place).
    pub sources: Arc<SourceLimiter>,
    /// Bytes held in unfinished frames (bounded per connection and in total), and how long a
    /// stream may take to deliver its frame.
    pub buffers: Arc<BufferBudget>,
    /// Escalations admitted and not yet answered (while draining: not yet acknowledged by
    /// the device), which a drain waits for before it closes connections.
    pub open_escalations: AtomicUsize,
    /// The drain, once one started: connections watch it to send `GoAway`, the listener to
    /// refuse devices, `/readyz` to say why it is not ready.
    pub drain: watch::Sender<Option<Drain>>,
    /// How long a drain may take, start to exit.
    pub drain_grace: Duration,
    /// Where a drain sends devices, if somewhere in particular.
    pub drain_redirect: Option<String>,
    /// Bearer token of `POST /drain`; `None` = refused.
    pub admin_token: Option<String>,
    /// Who each device is (mutual TLS or dev mode), which connection serves it, the deny
    /// list and the per-device rate limit.
    pub identity: Arc<Identities>,
    /// The bundle store served to devices and the devices connected, for `/v1/fleet`.
    pub fleet: Arc<Fleet>,
}

impl Shared {
    /// Derive the shared state from a validated configuration and the LLM's facts, with the
    /// LLM path `llm`, the identities `config` describes (loaded before the listener,
    /// whose TLS needs them) and the fleet's bundle store.
    pub fn new(config: &GatewayConfig, facts: &ModelFacts, llm: Arc<dyn Dispatch>, identity: Arc<Identities>, fleet: Arc<Fleet>) -> Self {
        let max_context_tokens = facts.max_context.saturating_sub(1);
        let drain = watch::Sender::new(None);
        Self {
            handshake: HandshakePolicy {
                auth_token: config.identity.auth_token.clone(),
                device_tokens: identity.device_tokens(),
                tokenizer_fingerprint: facts.tokenizer_fingerprint.clone(),
                gateway_id: config.identity.gateway_id.clone(),
                llm_id: facts.llm_id.clone(),
            },
            validation: ValidationLimits {
                max_context_tokens: u32::try_from(max_context_tokens).unwrap_or(u32::MAX),
                vocab_size: Some(u32::try_from(facts.vocab_size).unwrap_or(u32::MAX)),
                ..ValidationLimits::default()
            },
            max_frame_bytes: config.transport.max_frame_bytes,
            max_context_tokens,
            max_sessions_per_device: config.sessions.max_per_device,
            max_connections: config.transport.max_connections,
            store: Arc::new(SessionStore::with_total(max_context_tokens, config.sessions.max_per_device, config.overload.max_sessions)),
            llm: Dispatcher::new(llm, drain.subscribe()).verifying(config.overload.draft_verify),
            connections: AtomicUsize::new(0),
            sources: Arc::new(SourceLimiter::new(config.overload.max_connections_per_source)),
            buffers: Arc::new(BufferBudget::new(config.overload.max_buffered_bytes_per_connection, config.overload.max_buffered_bytes, config.overload.stream_read_timeout)),
            open_escalations: AtomicUsize::new(0),
            drain,
            drain_grace: config.drain.grace,
            drain_redirect: config.drain.redirect.clone(),
            admin_token: config.drain.admin_token.clone(),
            identity,
            fleet,
        }
    }

    /// Start draining at `now`; `false` if a drain had already started (it keeps its timeline).
    pub fn start_drain(&self, now: Instant) -> bool {
        let started = self.drain.send_if_modified(|d| match d {
            Some(_) => false,
            None => {
                *d = Some(Drain::start(now, self.drain_grace));
                true
            }
        });
        if started {
            metrics::gauge!("duet_gateway_draining").set(1.0);
            tracing::warn!(grace_s = self.drain_grace.as_secs_f64(), connections = self.connections.load(Ordering::Relaxed), "draining: refusing new devices, sending GoAway");
        }
        started
    }

    /// The drain in progress, if any.
    pub fn draining(&self) -> Option<Drain> {
        *self.drain.borrow()
    }

    /// The limits announced in `Welcome`, with the LLM's current service time so that a
    /// device's first deadlines are realistic.
    pub fn welcome_limits(&self) -> Limits {
        Limits {
            max_frame_bytes: u32::try_from(self.max_frame_bytes).unwrap_or(u32::MAX),
            max_context_tokens: u32::try_from(self.max_context_tokens).unwrap_or(u32::MAX),
            max_sessions: u32::try_from(self.max_sessions_per_device).unwrap_or(u32::MAX),
            service_time_ms: self.llm.service_ms(),
        }
    }

    /// Whether a new device would exceed the connection limit.
    pub fn at_connection_limit(&self) -> bool {
        self.connections.load(Ordering::Relaxed) >= self.max_connections
    }
}
