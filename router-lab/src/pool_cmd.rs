//! `router-lab pool`: a trained router's score pooled with the SLM's own top probability
//! (`edge_node::routing::pooled`), recalibrated on the SLM's own answers, written as a new
//! router file. The weights are the input file's; only how they are read and the tau tables
//! change, so a router can lean on the SLM's confidence without being trained again.

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use edge_node::routing::pooled::ConfidencePooling;
use edge_node::routing::router_file::{Calibration, MlpRouterModel, RouterMeta};
use edge_node::routing::shipped_router::SHIPPED_ROUTER_WEIGHT;

use crate::calibration::{self, CalibrationArgs};

/// Options of `router-lab pool`.
#[derive(Debug, Args)]
pub struct PoolArgs {
    /// The trained router file whose score is pooled (its own pooling, if any, is replaced).
    #[arg(long, env = "DUET_POOL_ROUTER")]
    pub router: PathBuf,
    /// Weight of the router's log-odds against the SLM's top probability's: 1 is the router
    /// alone, 0 the SLM's confidence alone (the default is the weight whose evaluation curves
    /// lead or tie the SLM's confidence at every rate, the shipped routers' weight).
    #[arg(long, env = "DUET_POOL_ROUTER_WEIGHT", default_value_t = SHIPPED_ROUTER_WEIGHT, value_parser = parse_weight)]
    pub router_weight: f32,
    /// The pooled router file to write.
    #[arg(long, env = "DUET_POOL_OUT")]
    pub out: PathBuf,
    #[command(flatten)]
    pub calibration: CalibrationArgs,
}

fn parse_weight(s: &str) -> Result<f32, String> {
    let v: f32 = s.parse().map_err(|e| format!("`{s}`: {e}"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is outside [0, 1]"))
    }
}

/// Run it.
pub fn run(args: PoolArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.calibration.calibration_items > 0, "--calibration-items must be at least 1: a pooled score is calibrated on the SLM's own answers");
    let source = MlpRouterModel::load(&args.router)?;
    let pooling = ConfidencePooling { router_weight: args.router_weight };
    let meta = RouterMeta { pooling: Some(pooling), ..source.meta().clone() };
    let mut model = MlpRouterModel::new(meta, source.weights().clone())?;
    let chosen = calibration::prompts(&args.calibration, &HashSet::new())?;
    let slm_id = model.meta().slm_id.clone();
    let (pooled, top_probs) = calibration::on_policy_scores(&slm_id, &chosen, &mut model)?;
    eprintln!("calibrated on {} positions", pooled.len());
    // The training report is free-form: one that is not a JSON object is kept under a key.
    let mut training = match source.meta().training.clone() {
        t @ serde_json::Value::Object(_) => t,
        other => serde_json::json!({ "training": other }),
    };
    training["pooling"] = serde_json::json!({
        "router_weight": args.router_weight,
        "from": args.router.file_name().map(|n| n.to_string_lossy().into_owned()),
        "calibration_source": args.calibration.describe(chosen.len()),
        "calibration_positions": pooled.len(),
    });
    let meta = RouterMeta {
        calibration: Calibration::from_confidences(&pooled, &Calibration::default_rates()),
        confidence_calibration: Calibration::from_confidences(&top_probs, &Calibration::default_rates()),
        training,
        ..model.meta().clone()
    };
    let out = MlpRouterModel::new(meta, model.weights().clone())?;
    out.save(&args.out).with_context(|| format!("writing {}", args.out.display()))?;
    let tau = out.meta().calibration.tau_for_rate(0.1)?;
    eprintln!("pooled router (router weight {}) -> {} (tau at 10 %: {tau:.4})", args.router_weight, args.out.display());
    Ok(())
}
