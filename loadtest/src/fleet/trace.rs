//! The trace the simulated devices replay instead of running an SLM.
//!
//! A device's CPU is not what a fleet test measures, so no device runs a model: each replays
//! sessions recorded from real runs of the 0.5B (`edge-node generate --json` over
//! CommonsenseQA, coding and chat prompts; `loadtest/traces/record.sh` re-records them). Per
//! generated position the trace holds the SLM's token, its top probability (what the
//! confidence router scores) and how long the step took; the stand-in ([`ReplaySlm`]) proposes
//! those tokens to the real decode loop and *sleeps* the recorded step time, so a device costs
//! a timer, not a model.

use std::path::{Path, PathBuf};
use std::time::Duration;

use edge_node::decode::{Proposal, Slm, TracePoint, TraceSlm};
use model_runtime::RuntimeError;
use serde::{Deserialize, Serialize};

/// The trace built into the tool (`loadtest/traces/qwen2.5-coder-0.5b.trace.json`), so an
/// installed binary replays it from anywhere and `--trace` is needed only for another one.
const BUILT_IN_TRACE: &str = include_str!("../../traces/qwen2.5-coder-0.5b.trace.json");

/// How a report names the built-in trace.
pub const BUILT_IN_TRACE_NAME: &str = "built-in qwen2.5-coder-0.5b trace";

/// Why a trace file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// It could not be read.
    #[error("reading the trace {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a trace.
    #[error("the trace {path} is not valid JSON of the trace format: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// It parses but says something impossible.
    #[error("the trace {path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the session.
        why: String,
    },
}

/// One recorded generation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceSession {
    /// Short name (e.g. `cqa-17`).
    pub name: String,
    /// What kind of request it is: `cqa`, `code` or `chat` (what `--mix` selects on).
    pub kind: String,
    /// The prompt's token ids (chat template applied).
    pub prompt: Vec<u32>,
    /// Prefill time of the prompt, ms.
    pub prefill_ms: f64,
    /// The SLM's token at each generated position (local run: what it committed).
    pub tokens: Vec<u32>,
    /// Its top probability there.
    pub top_probs: Vec<f32>,
    /// How long the step that produced it took, ms (prefill excluded).
    pub step_ms: Vec<f32>,
}

impl TraceSession {
    /// Positions as the decode loop's trace stand-in wants them.
    pub fn points(&self) -> Vec<TracePoint> {
        self.tokens.iter().zip(&self.top_probs).map(|(&token, &top_prob)| TracePoint { token, top_prob }).collect()
    }

    /// How long the session takes on the device with no cloud at all, ms.
    pub fn local_ms(&self) -> f64 {
        self.prefill_ms + self.step_ms.iter().map(|&s| f64::from(s)).sum::<f64>()
    }
}

/// A trace file: what it was recorded with, and its sessions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trace {
    /// Format version (1).
    pub format: u32,
    /// The SLM that was recorded.
    pub slm_id: String,
    /// Its tokenizer's fingerprint (what devices present in `Hello`).
    pub tokenizer_fingerprint: String,
    /// Its vocabulary size (the fixed-cost backend's answers are taken modulo it).
    pub vocab_size: usize,
    /// Tokens that end a generation.
    pub stop_tokens: Vec<u32>,
    /// How, where and when it was recorded.
    pub recorded: String,
    /// The sessions.
    pub sessions: Vec<TraceSession>,
}

impl Trace {
    /// Read and check `path`, or the built-in trace when there is none.
    pub fn load(path: Option<&Path>) -> Result<Self, TraceError> {
        let Some(path) = path else {
            return Self::parse(BUILT_IN_TRACE, Path::new(BUILT_IN_TRACE_NAME));
        };
        let text = std::fs::read_to_string(path).map_err(|source| TraceError::Read { path: path.into(), source })?;
        Self::parse(&text, path)
    }

    /// Parse and check `text`, naming it `path` in errors.
    fn parse(text: &str, path: &Path) -> Result<Self, TraceError> {
        let trace: Trace = serde_json::from_str(text).map_err(|source| TraceError::Parse { path: path.into(), source })?;
        trace.check().map_err(|why| TraceError::Invalid { path: path.into(), why })?;
        Ok(trace)
    }

    /// Whether every session is complete and consistent; says what is not.
    fn check(&self) -> Result<(), String> {
        if self.format != 1 {
            return Err(format!("format {} is not supported (1 is)", self.format));
        }
        if self.vocab_size == 0 || self.tokenizer_fingerprint.is_empty() {
            return Err("vocab_size and tokenizer_fingerprint must be set".into());
        }
        if self.sessions.is_empty() {
            return Err("no sessions".into());
        }
        for s in &self.sessions {
            let n = s.tokens.len();
            if s.prompt.is_empty() || n == 0 {
                return Err(format!("session {}: empty prompt or no tokens", s.name));
            }
            if s.top_probs.len() != n || s.step_ms.len() != n {
                return Err(format!("session {}: {n} tokens but {} top_probs and {} step_ms", s.name, s.top_probs.len(), s.step_ms.len()));
            }
            if let Some(t) = s.prompt.iter().chain(&s.tokens).find(|&&t| t as usize >= self.vocab_size) {
                return Err(format!("session {}: token {t} is outside the vocabulary of {}", s.name, self.vocab_size));
            }
            if s.top_probs.iter().any(|p| !(0.0..=1.0).contains(p)) {
                return Err(format!("session {}: a top probability outside [0, 1]", s.name));
            }
            let sane = |ms: f64| (0.0..=60_000.0).contains(&ms);
            if !sane(s.prefill_ms) || s.step_ms.iter().any(|&t| !sane(f64::from(t))) {
                return Err(format!("session {}: a negative or absurd time", s.name));
            }
        }
        Ok(())
    }

    /// The kinds of session present, sorted.
    pub fn kinds(&self) -> Vec<String> {
        let mut k: Vec<String> = self.sessions.iter().map(|s| s.kind.clone()).collect();
        k.sort();
        k.dedup();
        k
    }

    /// The tau at which the confidence router escalates a share `rate` of the trace's tokens:
    /// the `rate`-quantile of their top probabilities (tokens below tau are escalated).
    pub fn tau_for_rate(&self, rate: f64) -> f32 {
        if rate <= 0.0 {
            return 0.0;
        }
        if rate >= 1.0 {
            return 1.0;
        }
        let mut p: Vec<f32> = self.sessions.iter().flat_map(|s| s.top_probs.iter().copied()).collect();
        p.sort_by(f32::total_cmp);
        let i = ((p.len() as f64 * rate).round() as usize).min(p.len() - 1);
        p[i]
    }

    /// Share of the trace's tokens the confidence router escalates at `tau`.
    pub fn rate_at(&self, tau: f32) -> f64 {
        let (mut below, mut n) = (0usize, 0usize);
        for s in &self.sessions {
            n += s.top_probs.len();
            below += s.top_probs.iter().filter(|&&p| edge_node::routing::router::should_escalate(p, tau)).count();
        }
        below as f64 / n.max(1) as f64
    }
}

/// The SLM of a simulated device: replays one recorded session through the real decode loop
/// (as [`TraceSlm`]: a cloud token does not change what the trace proposes next) and sleeps
/// each step's recorded time (the first also the prompt's prefill) in [`Slm::pace`]. It
/// rewinds as the model does, so a draft is the trace's continuation, decoded at its
/// recorded pace, and a rejected draft's tail is decoded again after the LLM's token.
#[derive(Debug)]
pub struct ReplaySlm {
    inner: TraceSlm,
    prefill: Duration,
    steps: Vec<f32>,
}

impl ReplaySlm {
    /// Replay `session`; `stop` ends generation.
    pub fn new(session: &TraceSession, stop: Vec<u32>) -> Self {
        let capacity = session.prompt.len() + session.tokens.len() + 1;
        Self { inner: TraceSlm::new(session.points(), capacity, stop), prefill: Duration::from_secs_f64(session.prefill_ms.max(0.0) / 1e3), steps: session.step_ms.clone() }
    }

    /// Every token committed, in order.
    pub fn pushed(&self) -> &[u32] {
        &self.inner.pushed
    }
}

impl Slm for ReplaySlm {
    fn start(&mut self, prompt: &[u32]) -> Result<(), RuntimeError> {
        self.inner.start(prompt)
    }

    fn propose(&mut self) -> Result<Proposal<'_>, RuntimeError> {
        self.inner.propose()
    }

    fn push(&mut self, token: u32) {
        self.inner.push(token)
    }

    fn stop_tokens(&self) -> &[u32] {
        self.inner.stop_tokens()
    }

    fn has_room(&self) -> bool {
        self.inner.has_room()
    }

    fn can_rewind(&self) -> bool {
        self.inner.can_rewind()
    }

    fn rewind(&mut self, len: usize) {
        self.inner.rewind(len)
    }

    fn pace(&mut self) -> impl std::future::Future<Output = ()> + Send {
        let i = self.inner.pushed.len();
        let step = Duration::from_secs_f64(f64::from(self.steps.get(i).copied().unwrap_or(0.0).max(0.0)) / 1e3);
        let wait = if i == 0 { self.prefill + step } else { step };
        async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(probs: &[f32]) -> TraceSession {
        TraceSession {
            name: "t".into(),
            kind: "chat".into(),
            prompt: vec![1, 2],
            prefill_ms: 5.0,
            tokens: (0..probs.len() as u32).map(|i| 10 + i).collect(),
            top_probs: probs.to_vec(),
            step_ms: vec![1.0; probs.len()],
        }
    }

    fn trace(sessions: Vec<TraceSession>) -> Trace {
        Trace { format: 1, slm_id: "s".into(), tokenizer_fingerprint: "f".into(), vocab_size: 100, stop_tokens: vec![0], recorded: String::new(), sessions }
    }

    #[test]
    fn tau_for_a_rate_escalates_about_that_share_of_the_trace() {
        let probs: Vec<f32> = (0..100).map(|i| i as f32 / 100.0).collect();
        let t = trace(vec![session(&probs)]);
        for rate in [0.05, 0.1, 0.5] {
            let tau = t.tau_for_rate(rate);
            assert!((t.rate_at(tau) - rate).abs() < 0.02, "rate {rate}: tau {tau} escalates {}", t.rate_at(tau));
        }
        assert_eq!(t.tau_for_rate(0.0), 0.0);
        assert_eq!(t.tau_for_rate(1.0), 1.0);
    }

    #[test]
    fn inconsistent_sessions_are_refused_by_name() {
        let mut bad = session(&[0.5, 0.5]);
        bad.step_ms.pop();
        let why = trace(vec![bad]).check().unwrap_err();
        assert!(why.contains("session t") && why.contains("step_ms"), "{why}");
        let mut big = session(&[0.5]);
        big.tokens[0] = 100;
        assert!(trace(vec![big]).check().unwrap_err().contains("outside the vocabulary"));
        assert!(trace(vec![]).check().unwrap_err().contains("no sessions"));
    }

    #[test]
    fn the_replay_proposes_the_trace_and_takes_its_recorded_time() {
        let mut s = session(&[0.9, 0.9, 0.9, 0.9]);
        s.prefill_ms = 40.0;
        s.step_ms = vec![20.0; 4];
        let mut slm = ReplaySlm::new(&s, vec![0]);
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let started = std::time::Instant::now();
        let params = edge_node::decode::DecodeParams { max_new_tokens: 4, tau: 0.0, rate_control: None };
        let stats = rt
            .block_on(edge_node::decode::decode(&mut slm, &mut edge_node::routing::router::ConfidenceRouter, &mut edge_node::decode::NoCloud, &s.prompt, params, |_| std::ops::ControlFlow::Continue(())))
            .unwrap();
        let took = started.elapsed().as_secs_f64() * 1e3;
        assert_eq!(stats.tokens, 4);
        assert_eq!(slm.pushed(), &[10, 11, 12], "the last token is committed but not pushed");
        assert!((120.0..1000.0).contains(&took), "prefill 40 + 4 x 20 ms slept, took {took} ms");
        assert!((s.local_ms() - 120.0).abs() < 1e-9);
    }

    #[test]
    fn the_built_in_trace_loads() {
        let t = Trace::load(None).unwrap();
        assert!(t.sessions.len() >= 20);
        assert!(t.kinds().len() >= 2, "{:?}", t.kinds());
    }
}
