//! The one SLM of the device, serving requests one at a time in arrival order.
//!
//! The model and its KV cache belong to a single task; HTTP handlers hand it [`Job`]s through
//! a bounded queue (beyond it a request gets 429 at once) and read the job's [`Event`]s back.
//! Every job runs the device's decode loop, so the server routes exactly as `generate` does.
//! A client that goes away closes its event channel, which stops its generation at the next
//! token. The cache is reused across requests for the prefix they share (a system prompt, the
//! earlier turns of a chat).

use std::ops::ControlFlow;
use std::sync::Arc;

use common::exchange::LinkHealth;
use common::protocol::WireSampling;
use common::sampling::SamplingParams;
use model_runtime::detokenize::StreamDecoder;
use model_runtime::tokenizer::Tokenizer;
use model_runtime::{CausalLm, KvCache};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::logprobs::{self, TokenLogprob};
use super::stop::{Released, StopMatcher};
use edge_node::args::RateControlMode;
use edge_node::decode::{decode, DecodeParams, DecodeStats, DraftMode, Emitted, FinishReason, NoCloud, OnnxSlm, RateControl, TokenSource};
use edge_node::link::{next_session_id, Link};
use edge_node::link::link_cloud::LinkCloud;
use edge_node::fleet::{bundle_routing, ActiveBundle, DeviceCounters, RoutingAsk};
use edge_node::routing::router::{MlpRouter, Router};

/// How one request is routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The SLM alone.
    Local,
    /// The router sends hard tokens to the cloud.
    Routed,
    /// Every token from the cloud (the SLM stands in only when the cloud does not answer).
    Cloud,
}

/// One generation asked for by an HTTP request.
pub struct Job {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// How the SLM samples.
    pub sampling: SamplingParams,
    /// Stop sequences.
    pub stops: Vec<String>,
    /// Routing.
    pub mode: Mode,
    /// Threshold for [`Mode::Routed`] (where a controller starts, with `rate_control`).
    pub tau: f32,
    /// A fresh controller for the rate the request asked for (the worker may carry its own
    /// instead), or none for a fixed tau.
    pub rate_control: Option<RateControl>,
    /// What the request asked for (a router bundle's calibration maps it again).
    pub routing: RoutingAsk,
    /// Logprobs to compute after the answer, if asked.
    pub scoring: Option<Scoring>,
    /// Where the job's events go; closed = the client left.
    pub events: mpsc::UnboundedSender<Event>,
}

/// Which logprobs a job returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scoring {
    /// Alternatives per position.
    pub top: usize,
    /// Score the prompt too (from its second token).
    pub echo: bool,
}

/// The logprobs of one job: the SLM's view of each position.
#[derive(Debug, Default)]
pub struct Scored {
    /// Prompt positions 1.. (with `echo`).
    pub prompt: Vec<TokenLogprob>,
    /// The answer's tokens, up to the one that completed a stop sequence.
    pub answer: Vec<TokenLogprob>,
}

/// What a job produces, in order: text pieces, then one end.
#[derive(Debug)]
pub enum Event {
    /// Committed text and where its token came from.
    Text {
        /// The text.
        text: String,
        /// Its source.
        source: TokenSource,
    },
    /// The generation ended.
    Done {
        /// OpenAI's `finish_reason`: `stop` or `length`.
        finish_reason: &'static str,
        /// Its figures.
        stats: Box<DecodeStats>,
        /// Logprobs, when the job asked.
        scored: Option<Box<Scored>>,
    },
    /// The generation failed.
    Failed(String),
}

/// The model, its cache and the routing it needs; [`Worker::run`] owns them.
pub struct Worker {
    /// The SLM.
    pub lm: CausalLm,
    /// Its KV cache, reused across requests.
    pub cache: KvCache,
    /// Its tokenizer.
    pub tok: Arc<Tokenizer>,
    /// The routing policy.
    pub router: Box<dyn Router>,
    /// The link to the gateway, when one is configured.
    pub link: Option<Link>,
    /// What the link learned, carried from request to request.
    pub health: LinkHealth,
    /// How far the SLM may decode ahead of an escalation in flight (`--speculate`).
    pub speculate: usize,
    /// Whether escalations carry drafts (`--draft`).
    pub draft: DraftMode,
    /// Whether a routed request's prompt is sent ahead of its first hard token (not
    /// `--no-presync`).
    pub presync: bool,
    /// `--rate-control`: under `carry`, what the controller learned goes on from request to
    /// request (for requests at the same target rate).
    pub rate_mode: RateControlMode,
    /// The controller the last controlled request ended with.
    pub carried: Option<RateControl>,
    /// Router bundles: what the agent switched to, and what they override.
    pub bundles: Bundles,
}

/// The worker's router bundles: the agent's latest (taken between generations), the one in
/// use, and the flags' values a bundle's settings replace.
pub struct Bundles {
    /// Bundles the agent accepted (none: no gateway, so no agent).
    pub updates: Option<tokio::sync::watch::Receiver<Option<Arc<ActiveBundle>>>>,
    /// The bundle in use.
    pub active: Option<Arc<ActiveBundle>>,
    /// `--speculate`.
    pub speculate: usize,
    /// The deadline flags.
    pub policy: common::exchange::DeadlinePolicy,
    /// `--escalation-rate`, or its default.
    pub default_rate: f32,
    /// Escalation and fallback counts the agent reports.
    pub counters: Arc<DeviceCounters>,
}

impl Worker {
    /// Serve jobs until every sender is gone.
    pub async fn run(mut self, mut jobs: mpsc::Receiver<Job>) {
        while let Some(job) = jobs.recv().await {
            metrics::gauge!("duet_edge_serve_queue_depth").set(jobs.len() as f64);
            if job.events.is_closed() {
                metrics::counter!("duet_edge_serve_requests_cancelled_total").increment(1);
                continue;
            }
            self.serve(job).await;
        }
    }

    /// Use `bundle` from the next generation on: its router, speculation and deadlines.
    pub fn use_bundle(&mut self, bundle: Arc<ActiveBundle>) {
        let s = bundle.settings;
        self.router = Box::new(MlpRouter::from_model(bundle.router.clone()));
        self.speculate = s.speculate.map_or(self.bundles.speculate, |n| n as usize);
        let mut policy = self.bundles.policy;
        if let Some(ms) = s.deadline_min_ms {
            policy.min = std::time::Duration::from_millis(u64::from(ms));
        }
        if let Some(ms) = s.deadline_max_ms {
            policy.max = std::time::Duration::from_millis(u64::from(ms));
        }
        policy.max = policy.max.max(policy.min);
        self.health.set_policy(policy);
        // What the controller learned belongs to the old router's confidences.
        self.carried = None;
        tracing::info!(bundle = %bundle.reference.version, "generations now run router bundle {}", bundle.reference.version);
        self.bundles.active = Some(bundle);
    }

    /// Between generations: switch to the bundle the agent accepted meanwhile, if any.
    fn take_bundle_update(&mut self) {
        let Some(rx) = self.bundles.updates.as_mut() else { return };
        if !rx.has_changed().unwrap_or(false) {
            return;
        }
        let latest = rx.borrow_and_update().clone();
        if let Some(b) = latest {
            self.use_bundle(b);
        }
    }

    /// The job's tau and rate controller under the bundle in use (the job's own without one).
    fn routing(&self, job: &Job) -> (f32, Option<RateControl>) {
        let Some(b) = &self.bundles.active else { return (job.tau, job.rate_control) };
        let steer = self.rate_mode != RateControlMode::Off;
        match bundle_routing(job.routing, &b.settings, &b.router.meta().calibration, self.bundles.default_rate, steer) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("bundle {} routing: {e}; using the request's", b.reference.version);
                (job.tau, job.rate_control)
            }
        }
    }

    async fn serve(&mut self, job: Job) {
        self.take_bundle_update();
        let (job_tau, job_rate_control) = self.routing(&job);
        let events = job.events.clone();
        let stop_tokens = self.lm.stop_tokens().to_vec();
        let mut emitter = Emitter {
            tok: &self.tok,
            decoder: StreamDecoder::new(),
            stop: StopMatcher::new(job.stops),
            events: &events,
            stop_tokens,
            client_gone: false,
            stopped: false,
            ids: Vec::new(),
        };
        let mut slm = match OnnxSlm::new(&mut self.lm, &mut self.cache, job.sampling) {
            Ok(s) => s,
            Err(e) => {
                let _ = events.send(Event::Failed(e.to_string()));
                return;
            }
        };
        let router = self.router.as_mut();
        let result = match (job.mode, self.link.as_ref()) {
            (Mode::Local, _) | (_, None) => {
                let params = DecodeParams { max_new_tokens: job.max_tokens, tau: 0.0, rate_control: None };
                decode(&mut slm, router, &mut NoCloud, &job.prompt, params, |e| emitter.on_token(e)).await
            }
            (mode, Some(link)) => {
                let tau = if mode == Mode::Cloud { 1.0 } else { job_tau };
                let health = std::mem::replace(&mut self.health, LinkHealth::new(Default::default(), Default::default()));
                let mut cloud = LinkCloud::new(link, next_session_id(), WireSampling::from(job.sampling), health, self.presync).with_speculation(self.speculate).with_draft(self.draft);
                let rate_control = if mode == Mode::Cloud { None } else { self.rate_mode.session(job_rate_control, self.carried) };
                let params = DecodeParams { max_new_tokens: job.max_tokens, tau, rate_control };
                let r = decode(&mut slm, router, &mut cloud, &job.prompt, params, |e| emitter.on_token(e)).await;
                self.health = cloud.into_health();
                if let Ok(Some(c)) = r.as_ref().map(|s| s.rate_control) {
                    metrics::gauge!("duet_edge_serve_rate_control_tau").set(f64::from(c.tau()));
                    self.carried = Some(c);
                }
                r
            }
        };
        metrics::counter!("duet_edge_serve_requests_total").increment(1);
        let stats = match result {
            Ok(stats) => stats,
            Err(e) => {
                let _ = events.send(Event::Failed(e.to_string()));
                return;
            }
        };
        metrics::counter!("duet_edge_serve_tokens_total").increment(stats.tokens as u64);
        metrics::counter!("duet_edge_serve_tokens_escalated_total").increment(stats.routing.escalated as u64);
        self.bundles.counters.add(stats.routing.escalated, stats.routing.fallbacks);
        if emitter.client_gone {
            metrics::counter!("duet_edge_serve_requests_cancelled_total").increment(1);
            return;
        }
        let finish_reason = if emitter.stopped || stats.finish_reason == FinishReason::Stop { "stop" } else { "length" };
        if !emitter.stopped {
            emitter.flush();
        }
        let ids = std::mem::take(&mut emitter.ids);
        drop(emitter);
        let scored = match job.scoring {
            None => None,
            Some(scoring) => match self.score(&job.prompt, &ids, scoring) {
                Ok(s) => Some(Box::new(s)),
                Err(e) => {
                    let _ = events.send(Event::Failed(format!("computing logprobs: {e}")));
                    return;
                }
            },
        };
        let _ = events.send(Event::Done { finish_reason, stats: Box::new(stats), scored });
    }

    /// The SLM's logprobs for the answer (and the prompt, with echo), after the generation.
    fn score(&mut self, prompt: &[u32], answer: &[u32], scoring: Scoring) -> Result<Scored, model_runtime::RuntimeError> {
        let tokens: Vec<u32> = prompt.iter().chain(answer).copied().collect();
        let from = if scoring.echo { 1 } else { prompt.len() };
        let (lm, cache, tok) = (&mut self.lm, &mut self.cache, &*self.tok);
        let mut all = tokio::task::block_in_place(|| logprobs::score(lm, cache, &tokens, from, scoring.top, tok))?;
        let answer = all.split_off(prompt.len().saturating_sub(from.max(1)).min(all.len()));
        Ok(Scored { prompt: if scoring.echo { all } else { Vec::new() }, answer })
    }
}

/// Turns committed tokens into text events.
struct Emitter<'a> {
    tok: &'a Tokenizer,
    decoder: StreamDecoder,
    stop: StopMatcher,
    events: &'a mpsc::UnboundedSender<Event>,
    stop_tokens: Vec<u32>,
    client_gone: bool,
    stopped: bool,
    /// The answer's token ids so far (stop tokens left out), for logprobs.
    ids: Vec<u32>,
}

impl Emitter<'_> {
    fn on_token(&mut self, e: Emitted<'_>) -> ControlFlow<()> {
        if self.stop_tokens.contains(&e.token) {
            return ControlFlow::Continue(());
        }
        self.ids.push(e.token);
        let piece = match self.decoder.push(self.tok, e.token) {
            Ok(Some(p)) => p,
            Ok(None) => return ControlFlow::Continue(()),
            Err(err) => {
                tracing::warn!("detokenizing: {err}");
                return ControlFlow::Continue(());
            }
        };
        let (text, stop) = match self.stop.push(&piece) {
            Released::Text(t) => (t, false),
            Released::Stop(t) => (t, true),
        };
        if !self.send(text, e.source) {
            self.client_gone = true;
            return ControlFlow::Break(());
        }
        if stop {
            self.stopped = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    /// Send text (nothing for an empty piece); false when the client is gone.
    fn send(&self, text: String, source: TokenSource) -> bool {
        text.is_empty() || self.events.send(Event::Text { text, source }).is_ok()
    }

    /// The text still held back when generation ends without a stop sequence.
    fn flush(&mut self) {
        let mut rest = self.decoder.flush(self.tok).ok().flatten().unwrap_or_default();
        rest = match self.stop.push(&rest) {
            Released::Text(t) => t + &self.stop.finish(),
            Released::Stop(t) => t,
        };
        self.send(rest, TokenSource::Slm);
    }
}
