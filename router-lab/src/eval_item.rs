//! In-process routed generation for the evaluation: every policy and operating point is run
//! on one item through the device's own decode loop ([`edge_node::decode::decode`]), with an
//! in-process LLM as the cloud (or, with `--llm-engine`, the LLM an engine serves:
//! [`EngineCloud`]), and both models' results memoised by context.
//!
//! Models are deterministic (greedy), so the SLM's proposal and the LLM's token for a given
//! context are computed once and shared by every run that reaches that context; a cache moves
//! between runs by keeping the longest common prefix and prefilling the rest. Runs of one item
//! share the prompt prefill and every prefix up to where their choices diverge, which makes a
//! sweep of many operating points several times cheaper than running each alone, with results
//! identical to running each alone.

use std::collections::HashMap;
use std::ops::ControlFlow;

use common::sampling::{argmax, distribution_stats, DistributionStats};
use edge_node::args::RateControlMode;
use edge_node::decode::{decode, Cloud, CloudAnswer, DecodeParams, Proposal, RateControl, Slm};
use edge_node::routing::router::{ConfidenceRouter, MlpRouter, RandomRouter, Router};
use edge_node::routing::router_file::MlpRouterModel;
use model_runtime::tokenizer::Tokenizer;
use model_runtime::{CausalLm, KvCache, RuntimeError, StepOutput};
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::engine_llm::EngineCloud;
use crate::teacher::Llm;

/// A routing policy at one operating point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "kebab-case")]
pub enum RunSpec {
    /// Never escalate.
    SlmOnly,
    /// Escalate every token.
    LlmOnly,
    /// Escalate each token with probability `rate`.
    Random { rate: f32 },
    /// Escalate when the SLM's top probability is below `tau` (calibrated for `rate`).
    Confidence { rate: f32, tau: f32 },
    /// Escalate when the trained router's confidence is below `tau` (calibrated for `rate`).
    Router { rate: f32, tau: f32 },
}

impl RunSpec {
    /// Policy name for tables and plots.
    pub fn policy(&self) -> &'static str {
        match self {
            RunSpec::SlmOnly => "slm-only",
            RunSpec::LlmOnly => "llm-only",
            RunSpec::Random { .. } => "random",
            RunSpec::Confidence { .. } => "confidence",
            RunSpec::Router { .. } => "router",
        }
    }

    /// Target escalation rate.
    pub fn target_rate(&self) -> f32 {
        match self {
            RunSpec::SlmOnly => 0.0,
            RunSpec::LlmOnly => 1.0,
            RunSpec::Random { rate } | RunSpec::Confidence { rate, .. } | RunSpec::Router { rate, .. } => *rate,
        }
    }

    /// Unique run name, e.g. `router@0.070`.
    pub fn name(&self) -> String {
        match self {
            RunSpec::SlmOnly | RunSpec::LlmOnly => self.policy().to_string(),
            _ => format!("{}@{:.3}", self.policy(), self.target_rate()),
        }
    }
}

/// One run's outcome on one item.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunOutcome {
    /// [`RunSpec::name`].
    pub run: String,
    /// Extracted label, if any.
    pub answer: Option<String>,
    /// Whether it matches the key.
    pub correct: bool,
    /// Tokens generated (routing decisions made).
    pub tokens: usize,
    /// Of those, escalated to the LLM.
    pub escalated: usize,
    /// Generated text.
    pub text: String,
}

/// Generation ends at a stop token, at `max_new_tokens`, or at the end of the line holding
/// "the answer is" (the seed's format ends there; models that loop would otherwise repeat it).
pub fn answer_line_done(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.find("the answer is").is_some_and(|at| lower[at..].contains('\n'))
}

/// The SLM's view of one context.
#[derive(Debug, Clone)]
struct SlmPoint {
    stats: DistributionStats,
    hidden: Vec<f32>,
}

/// Bring `cache` to `context` reusing its longest common prefix, and run the rest; returns the
/// tokens run.
fn sync(lm: &mut CausalLm, cache: &mut KvCache, context: &[u32], out: &mut StepOutput) -> Result<usize, RuntimeError> {
    let keep = cache.reusable_prefix(context);
    cache.truncate(keep);
    lm.forward_into(cache, &context[keep..], out)?;
    Ok(context.len() - keep)
}

/// The SLM with its proposals memoised by context (greedy).
struct MemoSlm<'a> {
    lm: &'a mut CausalLm,
    cache: KvCache,
    step: StepOutput,
    memo: HashMap<Vec<u32>, SlmPoint>,
    context: Vec<u32>,
    stop: Vec<u32>,
    computed: usize,
}

impl Slm for MemoSlm<'_> {
    fn start(&mut self, prompt: &[u32]) -> Result<(), RuntimeError> {
        self.context.clear();
        self.context.extend_from_slice(prompt);
        Ok(())
    }

    fn propose(&mut self) -> Result<Proposal<'_>, RuntimeError> {
        if !self.memo.contains_key(&self.context) {
            self.computed += sync(self.lm, &mut self.cache, &self.context, &mut self.step)?;
            let stats = distribution_stats(&self.step.logits)?;
            self.memo.insert(self.context.clone(), SlmPoint { stats, hidden: self.step.hidden.clone() });
        }
        let p = &self.memo[&self.context];
        Ok(Proposal { token: p.stats.argmax, stats: p.stats, hidden: &p.hidden })
    }

    fn push(&mut self, token: u32) {
        self.context.push(token);
    }

    fn stop_tokens(&self) -> &[u32] {
        &self.stop
    }

    fn has_room(&self) -> bool {
        self.context.len() < self.cache.capacity()
    }
}

/// The LLM in-process as the cloud (greedy, memoised): it always answers.
struct InProcessLlm<'a> {
    lm: &'a mut CausalLm,
    cache: KvCache,
    step: StepOutput,
    memo: HashMap<Vec<u32>, u32>,
    computed: usize,
    error: Option<RuntimeError>,
}

impl InProcessLlm<'_> {
    fn token(&mut self, context: &[u32]) -> Result<u32, RuntimeError> {
        if let Some(&t) = self.memo.get(context) {
            return Ok(t);
        }
        self.computed += sync(self.lm, &mut self.cache, context, &mut self.step)?;
        let t = argmax(&self.step.logits).map(|(i, _)| i).ok_or_else(|| RuntimeError::Interface("the LLM produced no logits".into()))?;
        self.memo.insert(context.to_vec(), t);
        Ok(t)
    }
}

impl Cloud for InProcessLlm<'_> {
    async fn escalate(&mut self, context: &[u32]) -> CloudAnswer {
        match self.token(context) {
            Ok(t) => CloudAnswer::Token(t),
            Err(e) => {
                // The loop takes no error from a cloud; the run reports it afterwards.
                self.error = Some(e);
                CloudAnswer::Fallback(common::exchange::FallbackReason::GatewayError)
            }
        }
    }
}

/// The evaluation's cloud: the LLM in-process, or served by an engine.
enum EvalCloud<'a> {
    InProcess(Box<InProcessLlm<'a>>),
    Engine(EngineCloud<'a>),
}

impl EvalCloud<'_> {
    /// Start a new item: forget the memo.
    fn clear(&mut self) {
        match self {
            EvalCloud::InProcess(c) => c.memo.clear(),
            EvalCloud::Engine(c) => c.clear(),
        }
    }

    /// The error that made an escalation fall back, if any (taken).
    fn take_error(&mut self) -> Option<anyhow::Error> {
        match self {
            EvalCloud::InProcess(c) => c.error.take().map(Into::into),
            EvalCloud::Engine(c) => c.take_error().map(Into::into),
        }
    }
}

impl Cloud for EvalCloud<'_> {
    async fn escalate(&mut self, context: &[u32]) -> CloudAnswer {
        match self {
            EvalCloud::InProcess(c) => c.escalate(context).await,
            EvalCloud::Engine(c) => c.escalate(context).await,
        }
    }
}

/// Both models, their caches and the memo for the item in progress.
pub struct ItemEvaluator<'a> {
    slm: MemoSlm<'a>,
    llm: EvalCloud<'a>,
    tok: &'a Tokenizer,
    router: Option<MlpRouterModel>,
    max_new_tokens: usize,
    prompt: Vec<u32>,
    rt: tokio::runtime::Runtime,
    /// `--rate-control`: whether the calibrated policies' tau is steered toward their rate.
    rate_mode: RateControlMode,
    /// Under `carry`, each run's controller as its last item left it (by run name): one run
    /// is one device answering the items in order.
    carried: HashMap<String, RateControl>,
}

impl<'a> ItemEvaluator<'a> {
    /// Caches are sized for the longest prompt plus `max_new_tokens`.
    pub fn new(slm: &'a mut CausalLm, llm: &'a mut Llm, tok: &'a Tokenizer, router: Option<MlpRouterModel>, capacity: usize, max_new_tokens: usize) -> anyhow::Result<Self> {
        let stop = slm.stop_tokens().to_vec();
        let slm_cache = slm.new_cache(Some(capacity))?;
        let llm = match llm {
            Llm::InProcess(lm) => {
                let cache = lm.new_cache(Some(capacity))?;
                EvalCloud::InProcess(Box::new(InProcessLlm { lm, cache, step: StepOutput::default(), memo: HashMap::new(), computed: 0, error: None }))
            }
            Llm::Engine(engine) => EvalCloud::Engine(EngineCloud::new(engine)),
        };
        Ok(Self {
            slm: MemoSlm { lm: slm, cache: slm_cache, step: StepOutput::default(), memo: HashMap::new(), context: Vec::new(), stop, computed: 0 },
            llm,
            tok,
            router,
            max_new_tokens,
            prompt: Vec::new(),
            rt: tokio::runtime::Builder::new_current_thread().build()?,
            rate_mode: RateControlMode::Off,
            carried: HashMap::new(),
        })
    }

    /// Steer the router and confidence policies' tau toward their target rate, as the device
    /// does (`--rate-control`; off unless asked).
    pub fn with_rate_control(mut self, mode: RateControlMode) -> Self {
        self.rate_mode = mode;
        self
    }

    /// SLM tokens prefilled or decoded so far, for the report.
    pub fn slm_tokens_computed(&self) -> usize {
        self.slm.computed
    }

    /// The LLM's work so far: tokens prefilled or decoded in-process, or engine requests.
    pub fn llm_work(&self) -> String {
        match &self.llm {
            EvalCloud::InProcess(c) => format!("LLM tokens computed {}", c.computed),
            EvalCloud::Engine(c) => format!("LLM engine requests {}", c.requests()),
        }
    }

    /// Start a new item.
    pub fn set_prompt(&mut self, prompt: Vec<u32>) -> anyhow::Result<()> {
        if prompt.is_empty() || prompt.len() + self.max_new_tokens > self.slm.cache.capacity() {
            anyhow::bail!("prompt of {} tokens does not fit a {}-token cache with {} new tokens", prompt.len(), self.slm.cache.capacity(), self.max_new_tokens);
        }
        self.prompt = prompt;
        self.slm.memo.clear();
        self.llm.clear();
        Ok(())
    }

    /// Run one policy on the current item; `seed` drives the random policy, and generation
    /// stops once `done(text)` (the task's stop rule, e.g. [`answer_line_done`]). Returns the
    /// generated tokens and how many were escalated.
    pub fn run_until(&mut self, spec: &RunSpec, seed: u64, done: &dyn Fn(&str) -> bool) -> anyhow::Result<(Vec<u32>, usize)> {
        let (mut router, tau): (Box<dyn Router>, f32) = match spec {
            RunSpec::SlmOnly => (Box::new(ConfidenceRouter), 0.0),
            RunSpec::LlmOnly => (Box::new(ConfidenceRouter), 1.0),
            RunSpec::Random { rate } => (Box::new(RandomRouter::new(rand::rngs::StdRng::seed_from_u64(seed))), *rate),
            RunSpec::Confidence { tau, .. } => (Box::new(ConfidenceRouter), *tau),
            RunSpec::Router { tau, .. } => {
                let model = self.router.clone().ok_or_else(|| anyhow::anyhow!("the router policy needs a router file"))?;
                (Box::new(MlpRouter::from_model(model)), *tau)
            }
        };
        // The calibrated policies' rate is held the device's way, from the same table.
        let fresh = match (spec, &self.router) {
            (RunSpec::Router { rate, .. }, Some(m)) => RateControl::for_target(&m.meta().calibration, *rate)?,
            (RunSpec::Confidence { rate, .. }, Some(m)) => RateControl::for_target(&m.meta().confidence_calibration, *rate)?,
            _ => None,
        };
        let rate_control = self.rate_mode.session(fresh, self.carried.get(&spec.name()).copied());
        let params = DecodeParams { max_new_tokens: self.max_new_tokens, tau, rate_control };
        let tok = self.tok;
        let mut generated = Vec::new();
        let mut text_error = None;
        let stats = self.rt.block_on(decode(&mut self.slm, router.as_mut(), &mut self.llm, &self.prompt, params, |e| {
            generated.push(e.token);
            match tok.decode(&generated) {
                Ok(text) if done(&text) => ControlFlow::Break(()),
                Ok(_) => ControlFlow::Continue(()),
                Err(err) => {
                    text_error = Some(err);
                    ControlFlow::Break(())
                }
            }
        }))?;
        if let Some(e) = self.llm.take_error() {
            return Err(e);
        }
        if let Some(e) = text_error {
            return Err(e.into());
        }
        if let Some(c) = stats.rate_control {
            self.carried.insert(spec.name(), c);
        }
        Ok((generated, stats.routing.escalated))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_stop_rule() {
        assert_eq!(RunSpec::Router { rate: 0.07, tau: 0.3 }.name(), "router@0.070");
        assert_eq!(RunSpec::SlmOnly.name(), "slm-only");
        assert!(!answer_line_done("Blah. Therefore, the answer is C."));
        assert!(answer_line_done("Blah. Therefore, the answer is C.\n"));
        assert!(!answer_line_done("Blah.\nMore"));
    }
}
