//! One escalation's way through the pool once admitted: the first attempt to the worker
//! admission chose, a failed attempt retried on another after a jittered pause while the
//! deadline allows, a hung worker given half the time left while another could still answer,
//! and every answer checked against the shared vocabulary and counted in the worker's metrics.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::sampling::SamplingParams;
use rand::Rng;

use super::pick::{choose, Candidate};
use super::worker::{InFlight, Worker};
use super::{Admitted, EnginePool, PoolError};
use crate::dispatch::{LlmRequest, LlmToken};
use crate::engine::client::EngineClient;
use crate::engine::{DraftCheckRequest, EngineError, EngineReply, NextTokenRequest, Verdict};

impl EnginePool {
    /// The LLM's answer to `request`, trying workers as the policies say until one answers or
    /// `deadline` passes: its token after the context or, for a greedy request with a draft,
    /// the verdict on the draft from the same one request ([`EngineClient::check_draft`]: how
    /// many draft tokens it accepts and its token after them). A sampled request's draft is not
    /// checked (an engine's choices are its argmax, not the seeded draws the device would get
    /// position by position): its token at the hard position, `accepted` 0.
    ///
    /// The first attempt goes to the worker `admitted` names ([`EnginePool::admit`]), a retry
    /// to another as the pick chooses.
    pub async fn answer(&self, request: &LlmRequest, deadline: Instant, admitted: &Admitted) -> Result<LlmToken, PoolError> {
        let (workers, order, rr) = (&admitted.workers, &admitted.order, admitted.rr);
        let sampling = request.sampling;
        let seed = seed_for(&sampling, request.seq);
        let next = NextTokenRequest { context: &request.context, sampling: &sampling, seed, max_new_tokens: 1, top_logprobs: 0, slot: None };
        let checks_draft = sampling.is_greedy() && !request.draft.is_empty() && !request.context.is_empty();
        let ask = match checks_draft {
            true => Ask::Draft(DraftCheckRequest { context: &request.context, draft: &request.draft, slot: None }),
            false => Ask::Next(next),
        };
        let mut tried: Vec<usize> = Vec::new();
        let mut last_error: Option<EngineError> = None;
        for attempt in 0..self.config.max_attempts.max(1) {
            let now = Instant::now();
            if now >= deadline {
                return Err(PoolError::DeadlineExpired(last_error));
            }
            let candidates: Vec<Candidate> = order
                .iter()
                .map(|&index| {
                    let w = &workers[index];
                    Candidate { index, eligible: w.in_flight() < self.config.max_in_flight_per_worker && w.is_available(now), in_flight: w.in_flight() }
                })
                .collect();
            let pick = if attempt == 0 { Some(admitted.first) } else { choose(&candidates, &self.config.pick, &tried, rr) };
            let Some(index) = pick else {
                return Err(match last_error {
                    Some(EngineError::Timeout) if Instant::now() >= deadline => PoolError::DeadlineExpired(last_error),
                    Some(e) => PoolError::Engine(e),
                    None => PoolError::NoWorker,
                });
            };
            tried.push(index);
            let worker = &workers[index];
            let (acquired, half_opened) = {
                let mut st = worker.lock();
                let half_opened = st.breaker.poll(now);
                (st.breaker.try_acquire(now), half_opened)
            };
            worker.record_transition(half_opened);
            if !acquired {
                continue; // half-open with its trial already out: another worker
            }
            let slot = InFlight::start(worker);
            // While another worker could still answer, an attempt gets half the time left, so
            // a hung worker leaves room to fail over within the deadline.
            let remaining = deadline.saturating_duration_since(now);
            let others = candidates.iter().any(|c| c.eligible && !tried.contains(&c.index));
            let budget = if others && attempt + 1 < self.config.max_attempts { remaining / 2 } else { remaining };
            let timeout = budget.min(self.config.attempt_timeout);
            let started = Instant::now();
            let down = worker.down.notified();
            let result = tokio::select! {
                r = ask.make(&worker.client, timeout) => r.and_then(|reply| self.check_vocab(reply)).and_then(|reply| Ok((reply.verdict(ask.draft())?, reply))),
                _ = down => Err(EngineError::Transport("worker failed its health checks while the request was in flight".into())),
            };
            let seconds = started.elapsed().as_secs_f64();
            let done = Instant::now();
            match result {
                Ok((verdict, reply)) => {
                    slot.succeeded(done);
                    if index == admitted.first {
                        admitted.answered.store(true, Ordering::Relaxed);
                        if let Some(ran) = ran_tokens(&reply, request.context.len() + ask.draft().len()) {
                            admitted.ran.store(ran, Ordering::Relaxed);
                        }
                    }
                    self.gate().answered(&request.session, &worker.label, request.context.len(), reply.cached_tokens);
                    self.record_success(worker, &reply, seconds, ask.draft().len(), verdict.accepted as usize);
                    return Ok(verdict);
                }
                Err(error) => {
                    slot.failed(&error, done);
                    metrics::counter!("duet_gateway_engine_requests_total", "worker" => worker.label.clone(), "outcome" => error.label()).increment(1);
                    tracing::debug!(worker = %worker.label, attempt, %error, "engine attempt failed");
                    if !error.is_retryable() {
                        return Err(PoolError::Engine(error));
                    }
                    last_error = Some(error);
                    let pause = jittered(self.config.retry_backoff);
                    if Instant::now() + pause >= deadline {
                        return Err(PoolError::DeadlineExpired(last_error));
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
        Err(last_error.map_or(PoolError::NoWorker, PoolError::Engine))
    }

    fn check_vocab(&self, reply: EngineReply) -> Result<EngineReply, EngineError> {
        match reply.tokens.iter().find(|t| t.id as usize >= self.vocab_size) {
            Some(t) => Err(EngineError::TokenOutOfVocabulary { id: t.id, vocab_size: self.vocab_size }),
            None => Ok(reply),
        }
    }

    /// Count an answered request: for a draft check, `drafted` tokens checked and `accepted`
    /// of them taken (the LLM then answered `accepted + 1` tokens).
    fn record_success(&self, worker: &Worker, reply: &EngineReply, seconds: f64, drafted: usize, accepted: usize) {
        let label = worker.label.clone();
        metrics::counter!("duet_gateway_engine_requests_total", "worker" => label.clone(), "outcome" => "ok").increment(1);
        metrics::histogram!("duet_gateway_engine_latency_seconds", "worker" => label.clone()).record(seconds);
        if drafted > 0 {
            metrics::counter!("duet_gateway_engine_draft_tokens_total", "worker" => label.clone(), "kind" => "checked").increment(drafted as u64);
            metrics::counter!("duet_gateway_engine_draft_tokens_total", "worker" => label.clone(), "kind" => "accepted").increment(accepted as u64);
        }
        if let Some(prompt) = reply.prompt_tokens {
            metrics::counter!("duet_gateway_engine_prompt_tokens_total", "worker" => label.clone()).increment(u64::from(prompt));
        }
        if let Some(cached) = reply.cached_tokens {
            metrics::counter!("duet_gateway_engine_cached_tokens_total", "worker" => label).increment(u64::from(cached));
        }
        let prefilled = reply.prompt_tokens.map_or(0, |p| p.saturating_sub(reply.cached_tokens.unwrap_or(0)));
        let answered = if drafted > 0 { accepted + 1 } else { reply.tokens.len() };
        crate::dispatch::count_served(prefilled as usize, answered);
        let ms = seconds * 1e3;
        let prev = f64::from(self.service_ms.load(Ordering::Relaxed));
        let ewma = if prev == 0.0 { ms } else { 0.8 * prev + 0.2 * ms };
        self.service_ms.store(ewma.round().max(1.0) as u32, Ordering::Relaxed);
    }

}


/// What one attempt asks a worker: the next token, or a draft check.
enum Ask<'a> {
    Next(NextTokenRequest<'a>),
    Draft(DraftCheckRequest<'a>),
}

impl Ask<'_> {
    /// Make the request on `client`.
    async fn make(&self, client: &EngineClient, timeout: Duration) -> Result<EngineReply, EngineError> {
        match self {
            Self::Next(r) => client.next_token(r, timeout).await,
            Self::Draft(r) => client.check_draft(r, timeout).await,
        }
    }

    /// The draft the answer is a verdict on (none for a plain next-token request).
    fn draft(&self) -> &[u32] {
        match self {
            Self::Next(_) => &[],
            Self::Draft(r) => r.draft,
        }
    }
}

/// The tokens an answered request ran, from the engine's report: the prompt tokens it did not
/// find cached, and the positions of `asked` (context and draft) not in the prompt (a
/// llama-server draft check decodes them one by one); `None` when it reported no cache figures.
fn ran_tokens(reply: &EngineReply, asked: usize) -> Option<usize> {
    let prompt = reply.prompt_tokens? as usize;
    let cached = reply.cached_tokens? as usize;
    Some((prompt.saturating_sub(cached) + asked.saturating_sub(prompt)).max(1))
}


/// The seed an engine samples with: the escalation's seed mixed with its `seq`, so repeated
/// escalations of a session draw differently and a retry draws the same.
fn seed_for(sampling: &SamplingParams, seq: u32) -> Option<u64> {
    if sampling.is_greedy() {
        return None;
    }
    Some(sampling.seed.unwrap_or(0) ^ (u64::from(seq)).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// A pause uniform in [base/2, base*3/2], so retries from many escalations do not align.
fn jittered(base: Duration) -> Duration {
    let base = base.as_secs_f64();
    Duration::from_secs_f64(rand::rng().random_range(base * 0.5..=base * 1.5))
}
