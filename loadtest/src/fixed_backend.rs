//! A backend with a known, fixed cost per batch, so that what a measurement sees beyond that
//! cost is the gateway's own overhead (DESIGN §8). Its token is a deterministic function of
//! the context; it is a measuring instrument, never a way to serve users.

use std::time::Duration;

use cloud_gateway::backend::{Backend, BackendError, BackendRequest, BackendToken};

/// Sleeps `cost` per batch and answers with `hash(context) % vocab`.
pub struct FixedCostBackend {
    pub cost: Duration,
    pub vocab: u32,
}

impl Backend for FixedCostBackend {
    fn name(&self) -> &str {
        "fixed-cost"
    }
    fn model_id(&self) -> &str {
        "fixed-cost"
    }
    fn max_context(&self) -> usize {
        32_768
    }
    fn next_tokens(&mut self, batch: &[BackendRequest]) -> Vec<Result<BackendToken, BackendError>> {
        if !self.cost.is_zero() {
            std::thread::sleep(self.cost);
        }
        batch
            .iter()
            .map(|r| {
                let h = r.context.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| (h ^ t as u64).wrapping_mul(0x100_0000_01b3));
                Ok(BackendToken { token_id: (h % self.vocab as u64) as u32, logprob: -1.0 })
            })
            .collect()
    }
}
