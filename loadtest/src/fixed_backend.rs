//! A backend with a known, fixed cost per batch, so that what a measurement sees beyond that
//! cost is the gateway's own overhead (docs/ARCHITECTURE.md). Its token is a deterministic
//! function of the context; it is a measuring instrument, never a way to serve users.

use std::time::Duration;

use cloud_gateway::backend::{Backend, BackendError, BackendRequest, BackendToken, ModelFacts};
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
        let facts = ModelFacts { llm_id: "fixed-cost".into(), ..ModelFacts::of_manifest(model, model.context_length) };
        Self { cost, facts }
    }
}

impl Backend for FixedCostBackend {
    fn name(&self) -> &str {
        "fixed-cost"
    }
    fn facts(&self) -> ModelFacts {
        self.facts.clone()
    }
    fn next_tokens(&mut self, batch: &[BackendRequest]) -> Vec<Result<BackendToken, BackendError>> {
        if !self.cost.is_zero() {
            std::thread::sleep(self.cost);
        }
        let vocab = self.facts.vocab_size.max(1) as u64;
        batch
            .iter()
            .map(|r| {
                let h = r.context.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| (h ^ t as u64).wrapping_mul(0x100_0000_01b3));
                Ok(BackendToken { token_id: (h % vocab) as u32, logprob: -1.0 })
            })
            .collect()
    }
}
