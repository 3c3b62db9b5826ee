//! A backend with a known, fixed cost per batch, so that what a measurement sees beyond that
//! cost is the gateway's own overhead (docs/ARCHITECTURE.md). Its token is a deterministic
//! function of the context; it is a measuring instrument, never a way to serve users.

use std::time::Duration;

use cloud_gateway::batcher::backend::{Backend, LlmError, LlmRequest, LlmToken, ModelFacts};
use model_runtime::model_files::ModelManifest;

/// Sleeps `cost` per batch and answers with `hash(context) % vocab_size`.
pub struct FixedCostBackend {
    cost: Duration,
    facts: ModelFacts,
}

impl FixedCostBackend {
    /// A backend that costs `cost` per batch and stands in for `model`: it announces that
    /// model's tokenizer, vocabulary and context length (so that real devices' frames pass the
    /// gateway's checks), under the id `fixed-cost`.
    pub fn new(cost: Duration, model: &ModelManifest) -> Self {
        Self::with_facts(cost, ModelFacts::of_manifest(model, model.context_length))
    }

    /// A backend that costs `cost` per batch and announces `facts` (under the id `fixed-cost`):
    /// no model files needed, e.g. with the tokenizer facts a fleet trace recorded.
    pub fn with_facts(cost: Duration, facts: ModelFacts) -> Self {
        Self { cost, facts: ModelFacts { llm_id: "fixed-cost".into(), ..facts } }
    }
}

/// The token this backend answers after `context` with a vocabulary of `vocab` ids (FNV-1a of
/// the ids, modulo the vocabulary): a device can check a cloud token without a model.
pub fn expected_token(context: &[u32], vocab: usize) -> u32 {
    let h = context.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| (h ^ t as u64).wrapping_mul(0x100_0000_01b3));
    (h % vocab.max(1) as u64) as u32
}

impl Backend for FixedCostBackend {
    fn name(&self) -> &str {
        "fixed-cost"
    }
    fn facts(&self) -> ModelFacts {
        self.facts.clone()
    }
    fn next_tokens(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>> {
        if !self.cost.is_zero() {
            std::thread::sleep(self.cost);
        }
        batch.iter().map(|r| Ok(LlmToken { token_id: expected_token(&r.context, self.facts.vocab_size), logprob: -1.0, accepted: 0 })).collect()
    }
}
