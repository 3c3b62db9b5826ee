//! The cloud of a routed session: the QUIC [`Link`] carrying what the session's
//! [`EdgeSession`] decides. All rules (what to send, how long to wait, what a reply means)
//! are the exchange's; this file only moves its bytes and reports what happened.

use std::time::{Duration, Instant};

use common::exchange::{EdgeSession, LinkHealth, Outcome, Step};
use common::protocol::{Frame, WireSampling};

use crate::decode::{Cloud, CloudAnswer, DecodeStats};
use crate::link::{Link, LinkError};

/// How long the `EndSession` notice may take; nobody waits for its answer beyond this.
const END_SESSION_WAIT: Duration = Duration::from_millis(200);

/// One session's escalations over a link.
pub struct LinkCloud<'a> {
    link: &'a Link,
    session: EdgeSession,
    presync: bool,
    speculation_window: usize,
    sent_at_start: u64,
    received_at_start: u64,
    escalation_bytes: Vec<usize>,
}

impl<'a> LinkCloud<'a> {
    /// Session `session_id` over `link`, with what the link learned so far (`health`).
    /// `presync` sends the prompt ahead of the first hard token.
    pub fn new(link: &'a Link, session_id: u64, sampling: WireSampling, health: LinkHealth, presync: bool) -> Self {
        let c = link.counters();
        Self {
            link,
            session: EdgeSession::new(session_id, sampling, health),
            presync,
            speculation_window: 0,
            sent_at_start: c.sent(),
            received_at_start: c.received(),
            escalation_bytes: Vec::new(),
        }
    }

    /// Let the SLM decode up to `window` tokens ahead while an escalation crosses the link
    /// (see [`crate::decode::decode`]); 0 (the default) waits for every answer.
    pub fn with_speculation(mut self, window: usize) -> Self {
        self.speculation_window = window;
        self
    }

    /// The link health, to carry into the next session on the same link.
    pub fn into_health(self) -> LinkHealth {
        self.session.into_health()
    }
}

impl Cloud for LinkCloud<'_> {
    fn start(&mut self, prompt: &[u32]) {
        if !self.presync {
            return;
        }
        let Some((t, report)) = self.session.presync(prompt, self.link.view(), Instant::now()) else { return };
        // Nobody waits for the answer (an LLM token nobody needs), but the work must not be
        // cancelled, and its service time is a whole prefill's cost: learn it whenever it comes.
        let link = self.link.clone();
        tokio::spawn(async move {
            match link.request_bytes(&t.bytes, t.deadline).await {
                Ok(Frame::Token { llm_ms, .. }) => report.report(llm_ms),
                _ => report.finish(),
            }
        });
    }

    fn speculation_window(&self) -> usize {
        self.speculation_window
    }

    async fn escalate(&mut self, context: &[u32]) -> CloudAnswer {
        let mut step = self.session.escalate(context, self.link.view(), Instant::now());
        loop {
            step = match step {
                Step::Send(t) => {
                    self.escalation_bytes.push(t.bytes.len());
                    match self.link.request_bytes(&t.bytes, t.deadline).await {
                        Ok(reply) => match self.session.on_reply(reply, context, Instant::now()) {
                            // Each request has its own stream: a reply that is not for it is a
                            // gateway fault, and nothing else will come on that stream.
                            Step::Wait => self.session.on_transport_error(false, Instant::now()),
                            next => next,
                        },
                        Err(LinkError::Timeout) => self.session.on_timeout(Instant::now()),
                        Err(LinkError::Down) => self.session.on_transport_error(true, Instant::now()),
                        Err(e) => {
                            tracing::debug!("escalation failed: {e}");
                            self.session.on_transport_error(false, Instant::now())
                        }
                    }
                }
                Step::Wait => self.session.on_transport_error(false, Instant::now()),
                Step::Done(Outcome::Cloud { token, .. }) => return CloudAnswer::Token(token),
                Step::Done(Outcome::Fallback { reason, probe }) => {
                    if let Some(timeout) = probe {
                        self.link.probe(timeout);
                    }
                    return CloudAnswer::Fallback(reason);
                }
            };
        }
    }

    async fn finish(&mut self, stats: &mut DecodeStats) {
        if let Some(end) = self.session.end() {
            // Free the gateway's copy of this session at once instead of waiting for expiry.
            let _ = self.link.request(&end, Instant::now() + END_SESSION_WAIT).await;
        }
        let counters = self.session.counters();
        stats.full_syncs += counters.full_syncs;
        stats.context_missing += counters.context_missing;
        stats.escalation_bytes = std::mem::take(&mut self.escalation_bytes);
        let c = self.link.counters();
        stats.bytes_sent = c.sent() - self.sent_at_start;
        stats.bytes_received = c.received() - self.received_at_start;
    }
}
