//! The trained routers that ship inside the binary, one per supported SLM.
//!
//! A router is what turns Duet from "ask the cloud when the SLM is unsure" into the system
//! EVALUATION.md measures, and training one costs hours of CPU. So the file `router-lab train`
//! wrote for the default SLM is committed (`edge-node/routers/`, ~0.5 MB) and compiled in: a
//! device gets it with the binary, with no path to configure and nothing to download. It is the
//! mixed-traffic router (CommonsenseQA, BIG-bench reasoning tasks and code prompts) pooled with
//! the SLM's own top probability ([`super::pooled`], router weight [`SHIPPED_ROUTER_WEIGHT`]):
//! alone, the router leads the SLM's confidence at low rates but trails it on text it was not
//! trained on once past the rate its curve supports; pooled, it keeps the lead and no longer
//! trails. `deploy/eval/mixed labels train ship` regenerates it. Like any router file it is
//! checked against the running SLM's id, tokenizer fingerprint and feature layout before use.

use std::path::Path;

use super::router_file::{MlpRouterModel, RouterFileError};

/// The operating point used when neither `--escalation-rate` nor `--tau` is given: the share
/// of tokens escalated that EVALUATION.md reports (and the router was calibrated for).
pub const DEFAULT_ESCALATION_RATE: f32 = 0.10;

/// The router's weight against the SLM's confidence in the shipped routers' pooled score: the
/// weight at which the evaluation curves lead or tie the SLM's confidence at every rate.
pub const SHIPPED_ROUTER_WEIGHT: f32 = 0.25;

/// Shipped routers: (SLM id, router file bytes).
const SHIPPED: &[(&str, &[u8])] =
    &[("qwen2.5-coder-0.5b-instruct", include_bytes!("../../routers/qwen2.5-coder-0.5b-instruct.router.safetensors"))];

/// The name a shipped router goes by in logs, reports and errors.
pub fn shipped_name(slm_id: &str) -> String {
    format!("shipped:{slm_id}")
}

/// The router shipped for `slm_id`, if there is one, checked against that SLM's tokenizer
/// fingerprint and hidden size.
pub fn shipped_router(slm_id: &str, tokenizer_fingerprint: &str, hidden_size: usize) -> Option<Result<MlpRouterModel, RouterFileError>> {
    let (_, bytes) = SHIPPED.iter().find(|(id, _)| *id == slm_id)?;
    let name = shipped_name(slm_id);
    let origin = Path::new(&name);
    Some(MlpRouterModel::from_bytes(bytes, origin).and_then(|m| m.check_compatible(origin, slm_id, tokenizer_fingerprint, hidden_size).map(|()| m)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_router_reads_and_names_its_own_slm() {
        for (slm, bytes) in SHIPPED {
            let m = MlpRouterModel::from_bytes(bytes, Path::new(slm)).expect("shipped router reads");
            assert_eq!(m.meta().slm_id, *slm);
            let tau = m.meta().calibration.tau_for_rate(DEFAULT_ESCALATION_RATE).expect("calibrated");
            assert!(tau > 0.0 && tau < 1.0, "tau {tau} for the default rate");
        }
    }

    #[test]
    fn every_shipped_router_pools_its_score_with_the_slm_confidence() {
        for (slm, bytes) in SHIPPED {
            let m = MlpRouterModel::from_bytes(bytes, Path::new(slm)).expect("shipped router reads");
            let pooling = m.meta().pooling.expect("the shipped router is pooled");
            assert_eq!(pooling.router_weight, SHIPPED_ROUTER_WEIGHT, "{slm}");
        }
    }

    #[test]
    fn no_router_ships_for_an_unknown_slm() {
        assert!(shipped_router("some-other-slm", "fp", 896).is_none());
    }

    #[test]
    fn a_shipped_router_refuses_another_tokenizer() {
        let (slm, _) = SHIPPED[0];
        let err = shipped_router(slm, "not-the-fingerprint", 896).expect("ships").expect_err("wrong tokenizer refused");
        assert!(matches!(err, RouterFileError::WrongTokenizer { .. }), "{err}");
    }
}
