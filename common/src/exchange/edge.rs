//! The device's side of one session's escalations, as a state machine without I/O.
//!
//! [`EdgeSession`] decides everything about an escalation: which seq and context sync to send
//! (a `Delta`, or `Full` after a new connection or a `ContextMissing`), how long to wait
//! ([`LinkHealth`]), what a reply means, and when to give up and take the SLM's own token.
//! It is driven by calls that carry the event and `now` ([`EdgeSession::escalate`],
//! [`EdgeSession::on_reply`], [`EdgeSession::on_timeout`], [`EdgeSession::on_transport_error`])
//! and answers with a [`Step`]: bytes to send with their deadline, or the escalation's
//! outcome. The QUIC link only carries the bytes; tests drive this with simulated time
//! (quinn-proto's and neqo's way).
//!
//! Replies pass a [`ReorderBuffer`]: a session applies replies strictly in `seq` order, and a
//! reply for a seq already resolved (by a fallback, or superseded by a `Full` resend) is
//! dropped, never applied twice.
//!
//! A gateway that drains sends `GoAway` ([`read_push`]); the link then reconnects (see
//! [`super::failover`]) and, while it does, shows the session the *next* connection's
//! generation: the escalation in flight is still answered on the old connection and applied
//! as usual, and the next one is a `Full` sync for the new replica, sent once it is welcomed
//! (within that escalation's deadline). Nothing falls back and nothing is applied out of order.
//!
//! A gateway that holds nothing of a long context (a restarted or new replica, one that lost
//! the session) cannot prefill all of it within one token's deadline, and its admission refuses
//! such a `Full` for its cost, again at every hard token. [`EdgeSession::sync_ahead`] sends that
//! context ahead instead, as the prompt's pre-sync is sent: with the protocol's longest
//! deadline and nobody waiting, so the hard token itself is a one-token delta behind it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::deadline::{service_sample, LinkHealth, PrefillReport};
use crate::protocol::{encode_frame, ContextSync, ContextTracker, ErrorCode, Frame, Inserted, ReorderBuffer, WireSampling, MAX_DEADLINE_MS, MAX_DRAFT_TOKENS};

/// How many unresolved seqs a session may have at once (only one escalation waits at a time;
/// the rest is headroom for pre-syncs and resends resolved out of band).
const REPLY_WINDOW: usize = 64;
/// Shortest wait for a liveness probe after the link degrades. At 300 ms the fleet test saw
/// probes close connections that were only slow (a loaded gateway, a busy device core): each a
/// reconnect and a `Full` resync, a storm at 5,000 devices. A second is long for a `Ping`
/// served without the LLM, and short next to QUIC's idle timeout.
const MIN_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What the device knows about its link when it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkView {
    /// No welcomed connection right now.
    Down,
    /// A welcomed connection.
    Up {
        /// Counts connections; a new value means the gateway may have lost every context.
        generation: u64,
        /// Smoothed round-trip time of the connection.
        rtt: Duration,
        /// Largest frame payload the gateway accepts (from `Welcome`).
        max_frame_bytes: usize,
    },
}

/// Why an escalation fell back to the SLM's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackReason {
    /// The deadline passed without an answer.
    Timeout,
    /// The gateway answered `Busy`.
    Busy,
    /// No connection.
    LinkDown,
    /// Local-only after repeated failures (escalation not even tried).
    Degraded,
    /// The gateway answered with an error.
    GatewayError,
    /// The transport failed mid-request.
    Transport,
}

/// Bytes to send for an escalation, and until when to wait for the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The escalation's seq.
    pub seq: u32,
    /// One encoded frame (length prefix included).
    pub bytes: Vec<u8>,
    /// When to stop waiting and call [`EdgeSession::on_timeout`].
    pub deadline: Instant,
    /// Whether it carries the whole context (`Full`).
    pub full: bool,
}

/// How an escalation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The LLM's token.
    Cloud {
        /// The token.
        token: u32,
        /// Time from the escalation's start to the answer.
        waited: Duration,
    },
    /// The LLM checked a draft (v5): it took the first `accepted` draft tokens and chose
    /// `token` after them (a correction, or the bonus after a fully accepted draft).
    Verified {
        /// Draft tokens taken, at most the draft's length.
        accepted: usize,
        /// The LLM's token after them.
        token: u32,
        /// Time from the escalation's start to the answer.
        waited: Duration,
    },
    /// Take the SLM's token.
    Fallback {
        /// Why.
        reason: FallbackReason,
        /// The gateway was silent (a timeout, a transport error): check with a ping (this
        /// long) that it is alive.
        probe: Option<Duration>,
    },
}

/// What the shell must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send these bytes on a new request stream and report what comes back.
    Send(Transmit),
    /// The event did not concern the waiting escalation (a stale or duplicate reply): keep
    /// waiting until the same deadline.
    Wait,
    /// The escalation is resolved.
    Done(Outcome),
}

/// Counters of what this session's exchange sent and met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ExchangeCounters {
    /// Escalations that carried the whole context: the first, and each resync.
    pub full_syncs: usize,
    /// `ContextMissing` answers (each followed by a `Full` resend).
    pub context_missing: usize,
    /// Replies dropped as stale or duplicated.
    pub stale_replies: usize,
    /// Times the session continued under a new id after `OutOfOrder`/`Replayed`.
    pub renewed_session_ids: usize,
    /// Contexts sent ahead of a hard token ([`EdgeSession::sync_ahead`]); each is also a full sync.
    pub syncs_ahead: usize,
}

/// Next session id of this process. Small on purpose: bincode spends 1 byte on values below
/// 251 and 9 on a random u64, and session ids ride in every escalation. A restarted process
/// starts again at 1; a gateway still holding an old session of that id answers `OutOfOrder`,
/// and the session moves to a fresh id ([`EdgeSession`] does that on its own).
pub fn next_session_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The escalation being waited for.
#[derive(Debug, Clone)]
struct Waiting {
    seq: u32,
    started: Instant,
    deadline: Instant,
    budget: Duration,
    /// Context tokens the current frame makes the LLM prefill (a `Full` resend counts whole).
    sent: usize,
    /// `Full` resends after `ContextMissing` so far.
    resends: u32,
    max_frame_bytes: usize,
    /// The draft sent with it (v5), empty for a plain `Escalate`.
    draft: Vec<u32>,
    /// Whether the frame sent carries the whole context.
    full: bool,
    /// The link's round trip when it was sent (what of the wait is not the gateway's).
    rtt: Duration,
}

/// A prompt pre-sync still being prefilled by the gateway: a hard token queued behind it waits
/// for what is left of it.
#[derive(Debug)]
struct Presync {
    started: Instant,
    tokens: usize,
    generation: u64,
    report: PrefillReport,
}

/// One session's escalation exchange (see the module docs).
#[derive(Debug)]
pub struct EdgeSession {
    session_id: u64,
    sampling: WireSampling,
    tracker: ContextTracker,
    health: LinkHealth,
    replies: ReorderBuffer<Frame>,
    generation: Option<u64>,
    waiting: Option<Waiting>,
    presync: Option<Presync>,
    counters: ExchangeCounters,
}

impl EdgeSession {
    /// A session `session_id` with what the device's link has learned so far (`health`).
    pub fn new(session_id: u64, sampling: WireSampling, health: LinkHealth) -> Self {
        Self {
            session_id,
            sampling,
            tracker: ContextTracker::new(),
            health,
            replies: ReorderBuffer::new(0, REPLY_WINDOW),
            generation: None,
            waiting: None,
            presync: None,
            counters: ExchangeCounters::default(),
        }
    }

    /// The session id on the wire.
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// What was sent and met so far.
    pub fn counters(&self) -> ExchangeCounters {
        self.counters
    }

    /// The link health, to carry into the next session on the same link.
    pub fn into_health(self) -> LinkHealth {
        self.health
    }

    /// Whether the gateway may hold this session's context (then [`Self::end`] is worth sending).
    pub fn gateway_may_hold_context(&self) -> bool {
        self.tracker.assumed_len().is_some()
    }

    /// A new connection makes every assumption about what the gateway holds void.
    fn observe_connection(&mut self, generation: u64) {
        if self.generation != Some(generation) {
            self.generation = Some(generation);
            self.tracker.reset();
        }
        self.health.on_connection(generation);
    }

    /// Send the prompt ahead of the first hard token, so that escalation costs the LLM only a
    /// short delta. Nobody waits for the reply: the shell sends the bytes in the background and
    /// reports the answer's service time through the returned handle (the link health learns a
    /// whole prefill's cost from it, even after this session ended).
    pub fn presync(&mut self, prompt: &[u32], link: LinkView, now: Instant) -> Option<(Transmit, PrefillReport)> {
        let LinkView::Up { generation, max_frame_bytes, .. } = link else { return None };
        self.observe_connection(generation);
        let deadline = now + Duration::from_millis(u64::from(MAX_DEADLINE_MS));
        let sent = self.encode_sync(prompt, &[], MAX_DEADLINE_MS, max_frame_bytes)?;
        // Its reply is handled out of band: resolved here, so later replies stay in order.
        let _ = self.replies.mark_resolved(sent.seq);
        let report = self.health.expect_prefill(prompt.len());
        self.presync = Some(Presync { started: now, tokens: prompt.len(), generation, report: report.clone() });
        Some((Transmit { seq: sent.seq, bytes: sent.bytes, deadline, full: sent.full }, report))
    }

    /// Before the hard token at `context`: when its sync would be a `Full` whose prefill cannot
    /// be answered within the deadline's maximum (the gateway holds nothing of a long context:
    /// a new connection, a lost session, no prompt pre-sync), all of the context but its last
    /// token to send ahead, as [`Self::presync`] sends a prompt. The hard token then goes as a
    /// one-token delta waiting behind what is left of that prefill, instead of a `Full` the
    /// gateway refuses for its cost at every hard token. `None` when nothing needs to go ahead,
    /// or the link is down or the device is holding back (degraded, or asked to by `Busy`).
    pub fn sync_ahead(&mut self, context: &[u32], link: LinkView, now: Instant) -> Option<(Transmit, PrefillReport)> {
        let LinkView::Up { generation, rtt, .. } = link else { return None };
        self.observe_connection(generation);
        let held = self.tracker.assumed_len().is_some_and(|n| n <= context.len());
        if held || context.len() < 2 || !self.health.may_escalate(now) {
            return None;
        }
        let whole = self.health.expected_behind(rtt, context.len(), Duration::ZERO);
        if whole < self.health.policy().max {
            return None;
        }
        let ahead = self.presync(&context[..context.len() - 1], link, now)?;
        self.counters.syncs_ahead += 1;
        Some(ahead)
    }

    /// A hard token at `context` (the whole context before the position asked for): what to
    /// send, or the fallback at once when the link is down or degraded.
    pub fn escalate(&mut self, context: &[u32], link: LinkView, now: Instant) -> Step {
        self.escalate_draft(context, &[], link, now)
    }

    /// [`Self::escalate`] with a draft (v5: only to a gateway that has drafts, see
    /// [`crate::protocol::understands_drafts`]): the SLM's token at the position asked for and
    /// its continuation, at most [`MAX_DRAFT_TOKENS`]; an empty draft is a plain `Escalate`. The
    /// deadline counts the draft's tokens as LLM work; the answer is [`Outcome::Verified`].
    pub fn escalate_draft(&mut self, context: &[u32], draft: &[u32], link: LinkView, now: Instant) -> Step {
        self.health.poll_prefill();
        if let Some(w) = self.waiting.take() {
            // The shell started a new escalation without resolving the last: resolve it now.
            let _ = self.replies.mark_resolved(w.seq);
        }
        let LinkView::Up { generation, rtt, max_frame_bytes } = link else {
            // A dead link costs no waiting, so it does not count towards local-only mode; the
            // link reconnects on its own.
            return Step::Done(Outcome::Fallback { reason: FallbackReason::LinkDown, probe: None });
        };
        self.observe_connection(generation);
        if !self.health.may_escalate(now) {
            return Step::Done(Outcome::Fallback { reason: FallbackReason::Degraded, probe: None });
        }
        let assumed = self.tracker.assumed_len().filter(|&n| n <= context.len()).unwrap_or(0);
        let to_send = context.len() - assumed;
        let ahead = match self.presync.as_ref().filter(|p| p.generation == generation && !p.report.is_finished()) {
            // Still prefilling the prompt: this token waits behind what is left of it, or
            // behind all of the cap once it is overdue (the deadline's maximum still applies,
            // so the edge never stalls longer than configured).
            Some(p) => self.health.presync_left(p.tokens, now.saturating_duration_since(p.started)),
            None => Duration::ZERO,
        };
        let draft = &draft[..draft.len().min(MAX_DRAFT_TOKENS)];
        let budget = self.health.deadline_behind(rtt, to_send + draft.len(), ahead);
        self.waiting = Some(Waiting { seq: 0, started: now, deadline: now + budget, budget, sent: 0, resends: 0, max_frame_bytes, draft: draft.to_vec(), full: false, rtt });
        self.send(context, now)
    }

    /// Encode the next escalation of `context` for the waiting escalation.
    fn send(&mut self, context: &[u32], now: Instant) -> Step {
        let Some(w) = self.waiting.as_ref() else { return Step::Wait };
        let (deadline, max, draft) = (w.deadline, w.max_frame_bytes, w.draft.clone());
        let deadline_ms = u32::try_from(deadline.saturating_duration_since(now).as_millis()).unwrap_or(u32::MAX).min(MAX_DEADLINE_MS);
        let Some(sent) = self.encode_sync(context, &draft, deadline_ms, max) else {
            return self.fall_back(FallbackReason::Transport, now);
        };
        if let Some(w) = self.waiting.as_mut() {
            w.seq = sent.seq;
            w.sent = sent.tokens + draft.len();
            w.full = sent.full;
        }
        Step::Send(Transmit { seq: sent.seq, bytes: sent.bytes, deadline, full: sent.full })
    }

    /// Allocate a seq and encode the `Escalate` frame that syncs the gateway to `context`.
    /// `None` if the frame exceeds the gateway's limit (its seq is resolved: nothing waits on it).
    fn encode_sync(&mut self, context: &[u32], draft: &[u32], deadline_ms: u32, max_frame_bytes: usize) -> Option<Encoded> {
        let sync = self.tracker.sync_for(context);
        let full = matches!(sync.context, ContextSync::Full { .. });
        let tokens = sync.context.tokens().len();
        let (session_id, seq, sampling) = (self.session_id, sync.seq, self.sampling);
        let frame = if draft.is_empty() {
            Frame::Escalate { session_id, seq, context: sync.context, sampling, deadline_ms }
        } else {
            Frame::EscalateDraft { session_id, seq, context: sync.context, draft: draft.into(), sampling, deadline_ms }
        };
        match encode_frame(&frame, max_frame_bytes) {
            Ok(bytes) => {
                if full {
                    self.counters.full_syncs += 1;
                }
                Some(Encoded { seq: sync.seq, bytes, tokens, full })
            }
            Err(e) => {
                tracing::warn!(session = self.session_id, "escalation not sent: {e}");
                // The gateway never saw it: what it holds is unknown again.
                self.tracker.reset();
                let _ = self.replies.mark_resolved(sync.seq);
                None
            }
        }
    }

    /// The reply that came back on the request stream of seq `frame.seq`. `context` is the
    /// escalation's context again (a `ContextMissing` is answered with a `Full` resend of it).
    pub fn on_reply(&mut self, frame: Frame, context: &[u32], now: Instant) -> Step {
        let Some(w) = self.waiting.as_ref() else {
            self.counters.stale_replies += 1;
            return Step::Wait;
        };
        let waiting_seq = w.seq;
        let reply_seq = match frame.session_seq() {
            Some((sid, Some(seq))) if sid == self.session_id => seq,
            // An error about no escalation in particular (malformed, oversize) answers ours.
            _ if matches!(frame, Frame::Error { seq: None, .. }) => waiting_seq,
            _ => {
                self.counters.stale_replies += 1;
                return Step::Wait;
            }
        };
        if reply_seq != waiting_seq {
            // A reply to something already resolved, or to nothing we sent.
            self.counters.stale_replies += 1;
            return Step::Wait;
        }
        match self.replies.insert(reply_seq, frame) {
            Ok(Inserted::Queued) => {}
            _ => {
                self.counters.stale_replies += 1;
                return Step::Wait;
            }
        }
        let Some((seq, frame)) = self.replies.pop_ready() else { return Step::Wait };
        self.apply(seq, frame, context, now)
    }

    /// Act on the reply for the waiting escalation.
    fn apply(&mut self, seq: u32, frame: Frame, context: &[u32], now: Instant) -> Step {
        let Some(w) = self.waiting.clone() else { return Step::Wait };
        match frame {
            Frame::Token { token_id, llm_ms, .. } => {
                self.tracker.acknowledge(seq);
                let waited = now.saturating_duration_since(w.started);
                self.health.success(w.sent, service_sample(llm_ms, waited, w.rtt));
                self.waiting = None;
                tracing::debug!(waited_ms = waited.as_millis() as u64, budget_ms = w.budget.as_millis() as u64, sent = w.sent, llm_ms, "cloud token");
                Step::Done(Outcome::Cloud { token: token_id, waited })
            }
            Frame::Verified { accepted, token_id, llm_ms, .. } if usize::try_from(accepted).is_ok_and(|a| a <= w.draft.len()) => {
                let accepted = usize::try_from(accepted).unwrap_or(0);
                // The gateway appended the accepted draft tokens before answering.
                self.tracker.draft_accepted(seq, accepted);
                let waited = now.saturating_duration_since(w.started);
                self.health.success(w.sent, service_sample(llm_ms, waited, w.rtt));
                self.waiting = None;
                tracing::debug!(waited_ms = waited.as_millis() as u64, budget_ms = w.budget.as_millis() as u64, sent = w.sent, accepted, draft = w.draft.len(), llm_ms, "draft verified");
                Step::Done(Outcome::Verified { accepted, token: token_id, waited })
            }
            Frame::ContextMissing { held_len, .. } if w.resends == 0 => {
                // The gateway lost the context (restart, expiry): resend it whole, within the
                // same deadline.
                self.counters.context_missing += 1;
                self.tracker.context_missing(seq, held_len);
                if let Some(w) = self.waiting.as_mut() {
                    w.resends += 1;
                }
                self.send(context, now)
            }
            Frame::Busy { retry_after_ms, .. } => {
                if w.full {
                    // A session the gateway did not hold is kept only once its work is admitted:
                    // refused, it holds nothing, and the next sync is whole again.
                    self.tracker.reset();
                } else {
                    // A held session's context grew before admission refused the work.
                    self.tracker.acknowledge(seq);
                }
                // The gateway's load hint: stay local-only as long as it asks (bounded), so a
                // loaded gateway sheds load at once. It answered, so the link is fine: no probe.
                self.health.busy(now, Duration::from_millis(u64::from(retry_after_ms)));
                self.resolve(FallbackReason::Busy, now);
                Step::Done(Outcome::Fallback { reason: FallbackReason::Busy, probe: None })
            }
            Frame::Error { code: ErrorCode::OutOfOrder | ErrorCode::Replayed, .. } if w.resends == 0 => {
                // The gateway holds this session id with later seqs than ours: another process
                // of this device used it (a restart reuses small ids) until it expires there.
                // Carry on under a fresh id, with a `Full` sync, within the same deadline.
                self.renew_session_id();
                if let Some(w) = self.waiting.as_mut() {
                    w.resends += 1;
                }
                self.send(context, now)
            }
            Frame::Error { code: ErrorCode::DeadlineExpired, .. } => {
                // The gateway's queue held it past the deadline this device gave it: the
                // deadline was too short for the gateway as it is now, which is what a timeout
                // says, and it is learned the same way (Karn's rule). The gateway answered: no
                // probe.
                tracing::debug!("escalation expired in the gateway's queue");
                self.fall_back_learning(FallbackReason::GatewayError, true, now)
            }
            other => {
                tracing::debug!(reply = ?other, "escalation answered with an error");
                self.fall_back(FallbackReason::GatewayError, now)
            }
        }
    }

    /// The waiting escalation's deadline passed.
    pub fn on_timeout(&mut self, now: Instant) -> Step {
        if self.waiting.is_none() {
            return Step::Wait;
        }
        self.fall_back(FallbackReason::Timeout, now)
    }

    /// The request failed in the transport: `down` when there was no connection to send on.
    pub fn on_transport_error(&mut self, down: bool, now: Instant) -> Step {
        if self.waiting.is_none() {
            return Step::Wait;
        }
        self.fall_back(if down { FallbackReason::LinkDown } else { FallbackReason::Transport }, now)
    }

    /// Resolve the waiting escalation with the SLM's token, and learn from the failure.
    fn fall_back(&mut self, reason: FallbackReason, now: Instant) -> Step {
        self.fall_back_learning(reason, reason == FallbackReason::Timeout, now)
    }

    /// [`Self::fall_back`], learning the failure as a deadline too short (`too_short`: the
    /// service estimate backs off) or as a plain failure.
    fn fall_back_learning(&mut self, reason: FallbackReason, too_short: bool, now: Instant) -> Step {
        let Some(w) = self.resolve(reason, now) else { return Step::Wait };
        if !w.draft.is_empty() && matches!(reason, FallbackReason::Timeout | FallbackReason::Transport) {
            // Unanswered: the gateway may have appended some of the draft, or none.
            self.tracker.draft_unresolved(w.seq);
        }
        if too_short {
            self.health.timeout(now);
        } else {
            self.health.failure(now);
        }
        // Only silence calls the gateway's liveness into question: after an answer (an error)
        // it is alive, and a probe could only close a working connection. Every silent
        // fallback asks (the shell runs one probe at a time), not only the one that degrades:
        // a device with few hard tokens may never fail three times in a row during a blackout,
        // and would otherwise sit on a connection stuck in QUIC's growing retransmission timer.
        let silent = matches!(reason, FallbackReason::Timeout | FallbackReason::Transport);
        let probe = silent.then(|| w.budget.max(MIN_PROBE_TIMEOUT));
        Step::Done(Outcome::Fallback { reason, probe })
    }

    /// Stop waiting for the current escalation (its reply, if one comes, is dropped).
    fn resolve(&mut self, reason: FallbackReason, now: Instant) -> Option<Waiting> {
        let w = self.waiting.take()?;
        let _ = self.replies.mark_resolved(w.seq);
        tracing::debug!(?reason, waited_ms = now.saturating_duration_since(w.started).as_millis() as u64, budget_ms = w.budget.as_millis() as u64, sent = w.sent, "escalation fell back");
        Some(w)
    }

    /// Continue under a new session id: the gateway's copy of the old one is unusable (its seqs
    /// are ahead of ours) and expires there. Everything about the old id is forgotten.
    fn renew_session_id(&mut self) {
        let old = self.session_id;
        self.session_id = next_session_id();
        self.tracker = ContextTracker::new();
        self.replies = ReorderBuffer::new(0, REPLY_WINDOW);
        self.presync = None;
        self.counters.renewed_session_ids += 1;
        tracing::info!(old, new = self.session_id, "the gateway holds this session id with later seqs (another process used it): continuing under a new id");
    }

    /// The session is over: the frame that frees the gateway's copy of its context at once
    /// (instead of at idle expiry), if the gateway may hold one.
    pub fn end(&mut self) -> Option<Frame> {
        if let Some(w) = self.waiting.take() {
            let _ = self.replies.mark_resolved(w.seq);
        }
        self.gateway_may_hold_context().then_some(Frame::EndSession { session_id: self.session_id })
    }
}

/// One encoded escalation.
struct Encoded {
    seq: u32,
    bytes: Vec<u8>,
    /// Context tokens it carries.
    tokens: usize,
    full: bool,
}

/// The first frame a device sends on a new connection, in `protocol_version`
/// ([`PROTOCOL_VERSION`](crate::protocol::PROTOCOL_VERSION) unless a gateway asked for an older one).
pub fn hello(protocol_version: u16, device_id: &str, auth: &str, tokenizer_fingerprint: &str, slm_id: &str) -> Frame {
    Frame::Hello {
        protocol_version,
        device_id: device_id.to_string(),
        auth: auth.to_string(),
        tokenizer_fingerprint: tokenizer_fingerprint.to_string(),
        slm_id: slm_id.to_string(),
    }
}

/// What the gateway said to `Hello`.
#[derive(Debug, Clone, PartialEq)]
pub enum HandshakeAnswer {
    /// Welcomed, with the gateway's name, its LLM and the connection's limits.
    Welcome {
        /// Gateway replica.
        gateway_id: String,
        /// Its LLM.
        llm_id: String,
        /// What this connection allows.
        limits: crate::protocol::Limits,
    },
    /// An older gateway (a rolling upgrade in progress): say `Hello` again, at once, in
    /// `version`; it will send nothing that version lacks (no `GoAway`).
    Downgrade {
        /// The gateway's version, one this device also speaks.
        version: u16,
    },
    /// Refused for good (until the device changes something): retry slowly.
    Refused(String),
    /// Not a handshake answer at all: a transient failure, retry normally.
    Unexpected(String),
}

/// Read the gateway's answer to `Hello` into what the link does next; a refusal says what to
/// fix (`our_fingerprint` is quoted when the tokenizers differ).
pub fn read_handshake(reply: Frame, our_fingerprint: &str) -> HandshakeAnswer {
    use crate::protocol::{RejectReason, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION};
    match reply {
        Frame::Welcome { gateway_id, llm_id, limits } => HandshakeAnswer::Welcome { gateway_id, llm_id, limits },
        Frame::Reject { reason: RejectReason::Version { supported } } if (MIN_PROTOCOL_VERSION..PROTOCOL_VERSION).contains(&supported) => {
            HandshakeAnswer::Downgrade { version: supported }
        }
        Frame::Reject { reason } => HandshakeAnswer::Refused(match reason {
            RejectReason::TokenizerMismatch { expected } => {
                format!("tokenizer mismatch: the gateway's LLM has tokenizer {expected}, this SLM has {our_fingerprint}")
            }
            RejectReason::Auth => "authentication failed: check --auth-token / DUET_AUTH_TOKEN".into(),
            RejectReason::Version { supported } => format!("protocol version {PROTOCOL_VERSION} not supported (gateway speaks {supported})"),
            RejectReason::Overloaded => "the gateway is at its connection limit; try another replica or later".into(),
            RejectReason::Other(why) => why,
        }),
        other => HandshakeAnswer::Unexpected(format!("unexpected {} frame in the handshake", other.kind())),
    }
}

/// What a frame the gateway pushed on a stream of its own means to the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Push {
    /// The gateway is draining: reconnect now (to `redirect` if given), resync with `Full`
    /// there, send nothing new on this connection. Not a failure.
    GoAway {
        /// Where to go, if the gateway said (and it is a valid `host:port`).
        redirect: Option<String>,
    },
    /// Nothing this device acts on (an unknown or malformed frame), with why, for logs.
    Ignored(String),
}

/// Read a frame the gateway pushed (a stream it opened). A `GoAway` whose redirect is not a
/// valid `host:port` is still a `GoAway`: the device goes, to its own list.
pub fn read_push(frame: Result<Frame, crate::protocol::CodecError>) -> Push {
    match frame {
        Ok(Frame::GoAway { redirect }) => {
            let checked = Frame::GoAway { redirect: redirect.clone() };
            let valid = checked.validate(&crate::protocol::ValidationLimits::default()).is_ok();
            Push::GoAway { redirect: redirect.filter(|_| valid) }
        }
        Ok(other) => Push::Ignored(format!("unexpected {} frame pushed by the gateway", other.kind())),
        Err(e) => Push::Ignored(format!("malformed frame pushed by the gateway: {e}")),
    }
}
