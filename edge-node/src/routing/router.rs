//! Routing policies: how confident is the SLM that its own token is good enough?
//!
//! `confidence` follows the seed's and CITER's convention: 1 means keep the SLM's token. A
//! token is escalated when `confidence < tau`. The trained MLP router ([`MlpRouter`]) plugs
//! in behind the same trait.

use std::path::Path;

use super::router_file::{MlpRouterModel, RouterFileError};
use common::sampling::DistributionStats;

/// What a router sees at each step.
#[derive(Debug, Clone, Copy)]
pub struct RouterInput<'a> {
    /// The SLM's final hidden state at this position.
    pub hidden: &'a [f32],
    /// Statistics of the SLM's next-token distribution.
    pub stats: &'a DistributionStats,
}

/// A routing policy.
pub trait Router: Send {
    /// Short name for reports.
    fn name(&self) -> &str;
    /// Probability that the SLM's token is good enough (higher = keep it local).
    fn confidence(&mut self, input: &RouterInput<'_>) -> f32;
}

/// The first policy: the SLM's top next-token probability.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConfidenceRouter;

impl Router for ConfidenceRouter {
    fn name(&self) -> &str {
        "confidence"
    }
    fn confidence(&mut self, input: &RouterInput<'_>) -> f32 {
        input.stats.top_prob
    }
}

/// The trained router: an MLP over the SLM's hidden state, top probability and entropy,
/// loaded from a router file that must match the running SLM.
#[derive(Debug, Clone)]
pub struct MlpRouter {
    model: MlpRouterModel,
}

impl MlpRouter {
    /// Load `path` and refuse it unless it was trained for this SLM, tokenizer and feature width.
    pub fn load(path: &Path, slm_id: &str, tokenizer_fingerprint: &str, hidden_size: usize) -> Result<Self, RouterFileError> {
        let model = MlpRouterModel::load(path)?;
        model.check_compatible(path, slm_id, tokenizer_fingerprint, hidden_size)?;
        Ok(Self { model })
    }

    /// A router over an already loaded (and checked) model.
    pub fn from_model(model: MlpRouterModel) -> Self {
        Self { model }
    }

    /// The loaded model (metadata and calibration tables).
    pub fn model(&self) -> &MlpRouterModel {
        &self.model
    }
}

impl Router for MlpRouter {
    fn name(&self) -> &str {
        "mlp"
    }
    fn confidence(&mut self, input: &RouterInput<'_>) -> f32 {
        self.model.confidence(input.hidden, input.stats.top_prob, input.stats.entropy)
    }
}

/// The baseline every router must beat: a uniform random confidence, so `tau` is the share of
/// tokens escalated whatever they are. Seeded, for reproducible evaluations.
#[derive(Debug, Clone)]
pub struct RandomRouter<R> {
    rng: R,
}

impl<R: rand::Rng + Send> RandomRouter<R> {
    /// Draw confidences from `rng`.
    pub fn new(rng: R) -> Self {
        Self { rng }
    }
}

impl<R: rand::Rng + Send> Router for RandomRouter<R> {
    fn name(&self) -> &str {
        "random"
    }
    fn confidence(&mut self, _input: &RouterInput<'_>) -> f32 {
        self.rng.random::<f32>()
    }
}

/// Whether to escalate: `tau >= 1` escalates every token, `tau <= 0` none.
pub fn should_escalate(confidence: f32, tau: f32) -> bool {
    tau >= 1.0 || confidence < tau
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tau_bounds_mean_always_and_never() {
        assert!(should_escalate(1.0, 1.0));
        assert!(!should_escalate(0.0, 0.0));
        assert!(should_escalate(0.3, 0.5));
        assert!(!should_escalate(0.7, 0.5));
    }
}
