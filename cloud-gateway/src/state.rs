//! What every connection shares: the limits derived from the configuration and the model,
//! the session store, the batcher's queue and the connection count.
//!
//! It sits below the transport and the HTTP port (both read it) and above the store and the
//! batcher (it holds them), so that `server` wires the pieces together without the pieces
//! importing each other. The limits a device sees are derived here, in one place, from
//! [`GatewayConfig`] and [`ModelFacts`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::exchange::gateway::HandshakePolicy;
use common::protocol::{Limits, ValidationLimits};

use crate::backend::ModelFacts;
use crate::dispatch::Dispatcher;
use crate::config::GatewayConfig;
use crate::sessions::SessionStore;

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
    /// Where escalations go.
    pub queue: Dispatcher,
    /// Devices past the handshake right now.
    pub connections: AtomicUsize,
}

impl Shared {
    /// Derive the shared state from a validated configuration and the backend's facts.
    pub fn new(config: &GatewayConfig, facts: &ModelFacts, queue: Dispatcher) -> Self {
        let max_context_tokens = facts.max_context.saturating_sub(1);
        Self {
            handshake: HandshakePolicy {
                auth_token: config.auth_token.clone(),
                tokenizer_fingerprint: facts.tokenizer_fingerprint.clone(),
                gateway_id: config.gateway_id.clone(),
                llm_id: facts.llm_id.clone(),
            },
            validation: ValidationLimits {
                max_context_tokens: u32::try_from(max_context_tokens).unwrap_or(u32::MAX),
                vocab_size: Some(u32::try_from(facts.vocab_size).unwrap_or(u32::MAX)),
                ..ValidationLimits::default()
            },
            max_frame_bytes: config.max_frame_bytes,
            max_context_tokens,
            max_sessions_per_device: config.max_sessions_per_device,
            max_connections: config.max_connections,
            store: Arc::new(SessionStore::new(max_context_tokens, config.max_sessions_per_device)),
            queue,
            connections: AtomicUsize::new(0),
        }
    }

    /// The limits announced in `Welcome`, with the batcher's current service time so that a
    /// device's first deadlines are realistic.
    pub fn welcome_limits(&self) -> Limits {
        Limits {
            max_frame_bytes: u32::try_from(self.max_frame_bytes).unwrap_or(u32::MAX),
            max_context_tokens: u32::try_from(self.max_context_tokens).unwrap_or(u32::MAX),
            max_sessions: u32::try_from(self.max_sessions_per_device).unwrap_or(u32::MAX),
            service_time_ms: self.queue.service_ms(),
        }
    }

    /// Whether a new device would exceed the connection limit.
    pub fn at_connection_limit(&self) -> bool {
        self.connections.load(Ordering::Relaxed) >= self.max_connections
    }
}
