//! In-process routed generation for the evaluation: every policy and operating point is run
//! on one item, with both models' results memoised by context.
//!
//! Models are deterministic (greedy), so the SLM's step and the LLM's token for a given
//! context are computed once and shared by every run that reaches that context; a cache moves
//! between runs by truncating to the longest common prefix and prefilling the rest. Runs of
//! one item share the prompt prefill and every prefix up to where their choices diverge, which
//! makes a sweep of many operating points several times cheaper than running each alone, with
//! results identical to running each alone.

use std::collections::HashMap;

use common::router_model::MlpRouterModel;
use common::runtime::{CausalLm, KvCache, StepOutput};
use common::sampling::{argmax, distribution_stats};
use common::tokenizer::Tokenizer;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

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

#[derive(Debug, Clone, Copy)]
struct SlmPoint {
    argmax: u32,
    top_prob: f32,
    router: f32,
}

/// Both models, their caches and the memo for the item in progress.
pub struct ItemEvaluator<'a> {
    slm: &'a mut CausalLm,
    llm: &'a mut CausalLm,
    tok: &'a Tokenizer,
    router: Option<&'a mut MlpRouterModel>,
    slm_cache: KvCache,
    llm_cache: KvCache,
    max_new_tokens: usize,
    prompt: Vec<u32>,
    slm_memo: HashMap<Vec<u32>, SlmPoint>,
    llm_memo: HashMap<Vec<u32>, u32>,
    step: StepOutput,
    /// Model calls made (tokens prefilled or decoded), for the report.
    pub slm_tokens_computed: usize,
    /// LLM tokens prefilled or decoded.
    pub llm_tokens_computed: usize,
}

impl<'a> ItemEvaluator<'a> {
    /// Caches are sized for the longest prompt plus `max_new_tokens`.
    pub fn new(
        slm: &'a mut CausalLm,
        llm: &'a mut CausalLm,
        tok: &'a Tokenizer,
        router: Option<&'a mut MlpRouterModel>,
        capacity: usize,
        max_new_tokens: usize,
    ) -> anyhow::Result<Self> {
        let slm_cache = slm.new_cache(Some(capacity))?;
        let llm_cache = llm.new_cache(Some(capacity))?;
        Ok(Self {
            slm,
            llm,
            tok,
            router,
            slm_cache,
            llm_cache,
            max_new_tokens,
            prompt: Vec::new(),
            slm_memo: HashMap::new(),
            llm_memo: HashMap::new(),
            step: StepOutput::default(),
            slm_tokens_computed: 0,
            llm_tokens_computed: 0,
        })
    }

    /// Start a new item.
    pub fn set_prompt(&mut self, prompt: Vec<u32>) -> anyhow::Result<()> {
        if prompt.is_empty() || prompt.len() + self.max_new_tokens > self.slm_cache.capacity() {
            anyhow::bail!("prompt of {} tokens does not fit a {}-token cache with {} new tokens", prompt.len(), self.slm_cache.capacity(), self.max_new_tokens);
        }
        self.prompt = prompt;
        self.slm_memo.clear();
        self.llm_memo.clear();
        self.slm_cache.clear();
        self.llm_cache.clear();
        Ok(())
    }

    /// Bring `cache` to `context` reusing the longest common prefix, and run the rest.
    fn sync(lm: &mut CausalLm, cache: &mut KvCache, context: &[u32], out: &mut StepOutput) -> anyhow::Result<usize> {
        let common = cache.tokens().iter().zip(context).take_while(|(a, b)| a == b).count();
        let keep = common.min(context.len() - 1);
        cache.truncate(keep);
        lm.forward_into(cache, &context[keep..], out)?;
        Ok(context.len() - keep)
    }

    fn context(&self, generated: &[u32]) -> Vec<u32> {
        let mut c = self.prompt.clone();
        c.extend_from_slice(generated);
        c
    }

    fn slm_at(&mut self, generated: &[u32]) -> anyhow::Result<SlmPoint> {
        if let Some(p) = self.slm_memo.get(generated) {
            return Ok(*p);
        }
        let ctx = self.context(generated);
        self.slm_tokens_computed += Self::sync(self.slm, &mut self.slm_cache, &ctx, &mut self.step)?;
        let dist = distribution_stats(&self.step.logits)?;
        let router = match self.router.as_deref_mut() {
            Some(r) => r.confidence(&self.step.hidden, dist.top_prob, dist.entropy),
            None => f32::NAN,
        };
        let p = SlmPoint { argmax: dist.argmax, top_prob: dist.top_prob, router };
        self.slm_memo.insert(generated.to_vec(), p);
        Ok(p)
    }

    fn llm_at(&mut self, generated: &[u32]) -> anyhow::Result<u32> {
        if let Some(t) = self.llm_memo.get(generated) {
            return Ok(*t);
        }
        let ctx = self.context(generated);
        self.llm_tokens_computed += Self::sync(self.llm, &mut self.llm_cache, &ctx, &mut self.step)?;
        let t = argmax(&self.step.logits).map(|(i, _)| i).ok_or_else(|| anyhow::anyhow!("LLM produced no logits"))?;
        self.llm_memo.insert(generated.to_vec(), t);
        Ok(t)
    }

    /// Run one policy on the current item; `seed` drives the random policy.
    pub fn run(&mut self, spec: &RunSpec, seed: u64) -> anyhow::Result<(Vec<u32>, usize)> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let stop = self.slm.stop_tokens().to_vec();
        let mut generated = Vec::new();
        let mut escalated = 0;
        while generated.len() < self.max_new_tokens {
            let escalate = match spec {
                RunSpec::SlmOnly => false,
                RunSpec::LlmOnly => true,
                RunSpec::Random { rate } => rng.random::<f32>() < *rate,
                RunSpec::Confidence { tau, .. } => self.slm_at(&generated)?.top_prob < *tau,
                RunSpec::Router { tau, .. } => self.slm_at(&generated)?.router < *tau,
            };
            let token = if escalate {
                escalated += 1;
                self.llm_at(&generated)?
            } else {
                self.slm_at(&generated)?.argmax
            };
            if stop.contains(&token) {
                generated.push(token);
                break;
            }
            generated.push(token);
            if answer_line_done(&self.tok.decode(&generated)?) {
                break;
            }
        }
        Ok((generated, escalated))
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
