//! A router's score pooled with the SLM's own confidence, so that the trained router can only
//! add to confidence rather than replace it.
//!
//! The MLP reads the hidden state, the top probability and the entropy, and on the tasks it was
//! trained on it ranks tokens better than the top probability alone. On a task it never saw, the
//! hidden state can lead it to tokens the SLM is sure of (the start of an explanation, say) where
//! an escalation rephrases rather than corrects. Pooling the two in log-odds,
//! `sigmoid(w * logit(router) + (1 - w) * logit(top_prob))`, keeps a token's rank high only where
//! both agree it is hard, or where one of them is very sure: `w = 1` is the router alone, `w = 0`
//! confidence alone. It is a product of experts for a binary outcome: each side's odds raised to
//! its weight.
//!
//! Pure: two probabilities and a weight in, one probability out.

use serde::{Deserialize, Serialize};

/// Probabilities are clamped this far from 0 and 1 before their log-odds are taken, so a side
/// that says exactly 0 or 1 cannot outvote the other without bound.
const EDGE: f32 = 1e-6;

/// How a router file's score is pooled with the SLM's top probability.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfidencePooling {
    /// Weight of the router's log-odds, in [0, 1]; the top probability gets the rest.
    pub router_weight: f32,
}

impl ConfidencePooling {
    /// The pooled confidence that the SLM's token is good enough (1 = keep it).
    pub fn pool(&self, router: f32, top_prob: f32) -> f32 {
        let w = self.router_weight.clamp(0.0, 1.0);
        let z = w * logit(router) + (1.0 - w) * logit(top_prob);
        1.0 / (1.0 + (-z).exp())
    }

    /// Whether the weight is one a file may carry.
    pub fn is_valid(&self) -> bool {
        (0.0..=1.0).contains(&self.router_weight)
    }
}

fn logit(p: f32) -> f32 {
    let p = if p.is_nan() { 0.5 } else { p.clamp(EDGE, 1.0 - EDGE) };
    (p / (1.0 - p)).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() < 1e-4
    }

    #[test]
    fn weight_one_is_the_router_and_weight_zero_is_confidence() {
        let router = ConfidencePooling { router_weight: 1.0 };
        let confidence = ConfidencePooling { router_weight: 0.0 };
        for (r, t) in [(0.2, 0.9), (0.7, 0.3), (0.5, 0.5)] {
            assert!(close(router.pool(r, t), r));
            assert!(close(confidence.pool(r, t), t));
        }
    }

    #[test]
    fn an_even_pool_keeps_a_token_the_slm_is_sure_of_above_one_both_doubt() {
        let p = ConfidencePooling { router_weight: 0.5 };
        // The router alone would escalate the first token before the second.
        let sure_slm = p.pool(0.05, 0.98);
        let both_doubt = p.pool(0.15, 0.3);
        assert!(sure_slm > both_doubt, "{sure_slm} vs {both_doubt}");
        // Equal sides give back that probability.
        assert!(close(p.pool(0.3, 0.3), 0.3));
    }

    #[test]
    fn extreme_or_broken_inputs_stay_probabilities() {
        let p = ConfidencePooling { router_weight: 0.5 };
        for (r, t) in [(0.0, 1.0), (1.0, 0.0), (0.0, 0.0), (1.0, 1.0), (f32::NAN, 0.5), (0.5, f32::NAN)] {
            let s = p.pool(r, t);
            assert!((0.0..=1.0).contains(&s), "{r} {t}: {s}");
        }
        assert!((p.pool(0.0, 1.0) - 0.5).abs() < 0.01);
    }

    #[test]
    fn pooling_is_monotone_in_each_side() {
        let p = ConfidencePooling { router_weight: 0.6 };
        let grid = [0.01f32, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99];
        for &t in &grid {
            for w in grid.windows(2) {
                assert!(p.pool(w[0], t) < p.pool(w[1], t));
                assert!(p.pool(t, w[0]) < p.pool(t, w[1]));
            }
        }
    }

    #[test]
    fn only_weights_in_the_unit_interval_are_valid() {
        assert!(ConfidencePooling { router_weight: 0.5 }.is_valid());
        assert!(!ConfidencePooling { router_weight: 1.5 }.is_valid());
        assert!(!ConfidencePooling { router_weight: f32::NAN }.is_valid());
    }
}
