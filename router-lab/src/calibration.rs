//! Calibration: the tau that escalates each target share of tokens, read off a router's scores
//! at every position of the SLM's own greedy answers to training prompts.
//!
//! Why the SLM's own answers: the device scores the tokens the SLM generates, not a reference
//! text, and a tau read off reference text escalated a third of the target share. The prompts
//! are the last items of each training task (labels take the first ones), shared equally among
//! the tasks, so that a rate means about the same share on each kind of traffic.

use std::collections::HashSet;
use std::path::PathBuf;

use clap::Args;
use edge_node::routing::router_file::MlpRouterModel;

use crate::tasks::{self, TaskItem, TaskSpec};

/// Which prompts calibrate a router (`train`, `pool`).
#[derive(Debug, Args)]
pub struct CalibrationArgs {
    /// Calibrate tau on the SLM's own greedy answers to this many training prompts (the last
    /// items of each calibration task, skipping any that were labelled), i.e. on the token
    /// distribution the router meets at run time; 0 (`train` only) calibrates on the held-out
    /// teacher-forced positions instead.
    #[arg(long, env = "DUET_CALIBRATION_ITEMS", default_value_t = 200)]
    pub calibration_items: usize,
    /// Prompts for on-policy calibration (CommonsenseQA).
    #[arg(long, env = "DUET_CALIBRATION_DATA", default_value = "deploy/data/commonsense_qa/train_router.jsonl")]
    pub calibration_data: PathBuf,
    /// Tasks whose prompts calibrate tau, `--calibration-items` shared equally among them, the
    /// last items of each not used for labels (`cqa` = `--calibration-data`); training tasks
    /// only (see `router-lab labels --task`). A router for mixed traffic is calibrated on the
    /// mix, so that a rate means the same share on each.
    #[arg(long, env = "DUET_CALIBRATION_TASKS", value_delimiter = ',', default_value = "cqa")]
    pub calibration_tasks: Vec<TaskSpec>,
}

impl CalibrationArgs {
    /// What the calibration ran on, for a router file's training report.
    pub fn describe(&self, prompts: usize) -> String {
        let names: Vec<String> = self.calibration_tasks.iter().map(|t| t.name()).collect();
        format!("SLM greedy answers to {prompts} training prompts ({}; {})", names.join(", "), self.calibration_data.display())
    }
}

/// The calibration prompts: `--calibration-items` shared equally among `--calibration-tasks`,
/// each task's last items first, none in `skip` (items whose positions were labelled).
pub fn prompts(args: &CalibrationArgs, skip: &HashSet<&str>) -> anyhow::Result<Vec<TaskItem>> {
    let roots = tasks::default_roots(&model_runtime::model_files::duet_home(), args.calibration_data.clone());
    let per_task = args.calibration_items.div_ceil(args.calibration_tasks.len().max(1));
    let mut chosen = Vec::new();
    for task in &args.calibration_tasks {
        tasks::trainable(task)?;
        let items = tasks::load(task, &roots, None)?;
        chosen.extend(items.into_iter().rev().filter(|i| !skip.contains(i.id.as_str())).take(per_task));
    }
    Ok(chosen)
}

/// The trained router's confidence and the SLM's top probability at every position of the
/// SLM's own greedy answers to `chosen` (each to its task's stop rule).
pub fn on_policy_scores(slm_id: &str, chosen: &[TaskItem], model: &mut MlpRouterModel) -> anyhow::Result<(Vec<f32>, Vec<f32>)> {
    use edge_node::decode::{decode, DecodeParams, NoCloud, OnnxSlm};
    use model_runtime::{CausalLm, LmOptions};
    let files = model_runtime::model_files::ModelFiles::locate(slm_id)?;
    let tok = model_runtime::tokenizer::Tokenizer::load(&files.tokenizer, Some(&files.manifest.tokenizer_fingerprint))?;
    let mut lm = CausalLm::load(files, &LmOptions { threads: 0, max_context: 1024, ..LmOptions::default() })?;
    let mut cache = lm.new_cache(Some(1024))?;
    let mut slm = OnnxSlm::new(&mut lm, &mut cache, common::sampling::SamplingParams::default())?;
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let (mut conf, mut top) = (Vec::new(), Vec::new());
    let bar = crate::cqa_args::progress(chosen.len() as u64, "calibrate");
    // The SLM's own greedy answers through the device's decode loop (no cloud): the router
    // and the confidence baseline are scored at every position the device would score.
    for item in chosen {
        let code = matches!(item.scoring, tasks::Scoring::Untested | tasks::Scoring::Code(_));
        let params = DecodeParams { max_new_tokens: if code { 256 } else { 96 }, tau: 0.0, rate_control: None };
        let prompt = tok.encode(&model_runtime::chat::render_user(&item.user))?;
        let mut generated = Vec::new();
        rt.block_on(decode(&mut slm, &mut edge_node::routing::router::ConfidenceRouter, &mut NoCloud, &prompt, params, |e| {
            if let Some(p) = e.proposal {
                conf.push(model.confidence(p.hidden, p.stats.top_prob, p.stats.entropy));
                top.push(p.stats.top_prob);
            }
            generated.push(e.token);
            match tok.decode(&generated) {
                Ok(text) if item.done(&text) => std::ops::ControlFlow::Break(()),
                _ => std::ops::ControlFlow::Continue(()),
            }
        }))?;
        bar.inc(1);
    }
    bar.finish();
    Ok((conf, top))
}
