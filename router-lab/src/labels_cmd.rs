//! `edge-node router-labels`: teacher-force the SLM and the LLM over reference chains of
//! thought and store, per position, the SLM's features and both models' greedy tokens (the
//! CITER shortcut labels follow from those; see `labels_file`).
//!
//! With `--on-policy` it labels the SLM's own answers by roll-outs instead (see the flag).
//!
//! The LLM's tokens come from a [`Teacher`]: the in-process ONNX LLM, or with `--llm-engine`
//! the LLM an engine serves (so the router learns from the LLM the gateway will serve).
//!
//! Items run in lockstep batches so each decode step of a model is one batched call; the
//! ONNX graphs give logits for the last position only, so teacher forcing is a decode step per
//! position rather than one prefill.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use common::sampling::{distribution_stats, DistributionStats, SamplingParams};
use edge_node::decode::{decode, DecodeParams, NoCloud, OnnxSlm};
use edge_node::routing::router::ConfidenceRouter;
use edge_node::routing::router_file::FEATURE_SPEC;
use model_runtime::chat::render_user;
use model_runtime::model_files::duet_home;
use model_runtime::tokenizer::Tokenizer;
use model_runtime::{CausalLm, KvCache, StepOutput};

use crate::cqa::{prompt_for, Item};
use crate::cqa_args::{progress, read_dataset, Pair, PairArgs};
use crate::tasks::{self, Scoring, TaskItem, TaskSpec};
use crate::labels_file::{LabelledItem, LabelledPosition, LabelsHeader, LabelsWriter, LABELS_FORMAT};
use crate::teacher::Teacher;

/// Options of `edge-node router-labels`.
#[derive(Debug, Args)]
pub struct LabelsArgs {
    #[command(flatten)]
    pub pair: PairArgs,
    /// Training items with a reference chain of thought (`prompt` and `cot` fields).
    #[arg(long, env = "DUET_LABEL_DATA", default_value = "deploy/data/commonsense_qa/train_router.jsonl")]
    pub data: PathBuf,
    /// Label only the first N items of the file.
    #[arg(long, env = "DUET_LIMIT")]
    pub limit: Option<usize>,
    /// Output file (appended to and resumed); default $DUET_HOME/router/labels-<slm>.bin.
    #[arg(long, env = "DUET_LABELS")]
    pub out: Option<PathBuf>,
    /// Skip the first N items of the file (so that label sets and calibration prompts can
    /// take disjoint ranges).
    #[arg(long, env = "DUET_OFFSET", default_value_t = 0)]
    pub offset: usize,
    /// On-policy roll-out labels instead of teacher forcing: the SLM answers the prompt itself;
    /// at each position where the LLM's greedy token differs from the SLM's, the SLM continues
    /// from the LLM's token to the end of the answer. Label 0 (escalate) where that roll-out's
    /// answer is right and the SLM's own is wrong, 1 otherwise (ties go to the SLM, as in
    /// CITER). Default file: $DUET_HOME/router/labels-onpolicy-<slm>.bin.
    #[arg(long, env = "DUET_ON_POLICY")]
    pub on_policy: bool,
    /// On-policy labels for another task's prompts instead of `--data`: `bigbench:NAME` (a task
    /// listed for training in deploy/eval/tasks/bigbench-tasks.txt) or `code:stdlib` (code
    /// prompts without tests: there the label is 0 wherever the LLM's token differs from the
    /// SLM's, the LLM taken as right). Evaluation tasks are refused.
    #[arg(long, env = "DUET_LABEL_TASK", requires = "on_policy")]
    pub task: Option<TaskSpec>,
    /// Items per lockstep batch.
    #[arg(long, env = "DUET_BATCH", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub batch: u16,
}

/// Default labels path for an SLM.
pub fn default_labels_path(slm_id: &str) -> PathBuf {
    duet_home().join("router").join(format!("labels-{slm_id}.bin"))
}

struct Row {
    id: String,
    prompt: Vec<u32>,
    target: Vec<u32>,
    slm_cache: KvCache,
    positions: Vec<LabelledPosition>,
}

/// Run it.
pub fn run(args: LabelsArgs) -> anyhow::Result<()> {
    if let Some(task) = &args.task {
        return run_task(&args, task);
    }
    let items = read_dataset(&args.data, None)?;
    let mut pair = args.pair.load(4096)?;
    let slm_id = pair.slm.manifest().id.clone();
    let out = args.out.clone().unwrap_or_else(|| if args.on_policy { default_on_policy_path(&slm_id) } else { default_labels_path(&slm_id) });
    let header = labels_header(&pair);
    let (mut writer, done) = LabelsWriter::open(&out, &header)?;
    let done: std::collections::HashSet<String> = done.into_iter().collect();
    let usable: Vec<_> = items.into_iter().filter(|i| i.prompt.is_some() && (args.on_policy || i.cot.is_some())).collect();
    let selected: Vec<_> = usable.into_iter().skip(args.offset).take(args.limit.unwrap_or(usize::MAX)).collect();
    let todo: Vec<_> = selected.iter().filter(|i| !done.contains(&i.id)).collect();
    eprintln!("labels -> {} ({} items selected, {} already done, {} to go)", out.display(), selected.len(), selected.len() - todo.len(), todo.len());
    let bar = progress(selected.len() as u64, "labels");
    bar.set_position((selected.len() - todo.len()) as u64);
    let end = *pair.slm.stop_tokens().first().context("the SLM has no stop token")?;
    if args.on_policy {
        let todo: Vec<TaskItem> = todo.into_iter().map(cqa_item).collect();
        return rollouts(&mut pair, &todo, &mut writer, &bar, &out);
    }
    let (mut positions, mut zeros, mut dropped) = (0usize, 0usize, 0usize);
    for chunk in todo.chunks(args.batch as usize) {
        let mut rows = Vec::with_capacity(chunk.len());
        for item in chunk {
            let (Some(p), Some(cot)) = (&item.prompt, &item.cot) else { continue };
            let prompt = pair.tok.encode(&render_user(p))?;
            let mut target = pair.tok.encode(cot)?;
            target.push(end);
            let cap = prompt.len() + target.len() + 1;
            rows.push(Row {
                id: item.id.clone(),
                slm_cache: pair.slm.new_cache(Some(cap))?,
                prompt,
                target,
                positions: Vec::new(),
            });
        }
        label_batch(&mut pair.slm, pair.llm.teacher(), &mut rows)?;
        for row in rows {
            positions += row.positions.len();
            zeros += row.positions.iter().filter(|p| p.label() == Some(0.0)).count();
            dropped += row.positions.iter().filter(|p| p.label().is_none()).count();
            writer.append(&LabelledItem { id: row.id, positions: row.positions })?;
            bar.inc(1);
        }
        bar.set_prefix(format!("{positions} positions, {zeros} LLM-only-right, {dropped} dropped"));
        if !bar.is_hidden() {
            continue;
        }
        eprintln!("labels: {}/{} items, {positions} positions ({zeros} label 0, {dropped} dropped)", bar.position(), selected.len());
    }
    bar.finish();
    eprintln!("done: {} ({positions} new positions, {zeros} labelled 0, {dropped} dropped as both-wrong)", out.display());
    Ok(())
}

/// A CommonsenseQA training item as a task item (its exact training prompt).
fn cqa_item(item: &Item) -> TaskItem {
    let user = item.prompt.clone().unwrap_or_else(|| prompt_for(&item.question, &item.choices));
    TaskItem { id: item.id.clone(), user, scoring: Scoring::Choice { choices: item.choices.clone(), key: item.answer_key.clone() } }
}

/// On-policy labels for `--task`'s prompts, into the task's own default file.
fn run_task(args: &LabelsArgs, task: &TaskSpec) -> anyhow::Result<()> {
    tasks::trainable(task)?;
    let roots = tasks::default_roots(&duet_home(), args.data.clone());
    let items = tasks::load(task, &roots, None)?;
    let mut pair = args.pair.load(4096)?;
    let slm_id = pair.slm.manifest().id.clone();
    let out = args.out.clone().unwrap_or_else(|| duet_home().join("router").join(format!("labels-onpolicy-{}-{slm_id}.bin", task.name())));
    let (mut writer, done) = LabelsWriter::open(&out, &labels_header(&pair))?;
    let done: std::collections::HashSet<String> = done.into_iter().collect();
    let selected: Vec<TaskItem> = items.into_iter().skip(args.offset).take(args.limit.unwrap_or(usize::MAX)).collect();
    let todo: Vec<TaskItem> = selected.iter().filter(|i| !done.contains(&i.id)).cloned().collect();
    eprintln!("labels ({}) -> {} ({} items selected, {} to go)", task.name(), out.display(), selected.len(), todo.len());
    let bar = progress(selected.len() as u64, "labels");
    bar.set_position((selected.len() - todo.len()) as u64);
    rollouts(&mut pair, &todo, &mut writer, &bar, &out)
}

/// What a labels file records of the pair.
fn labels_header(pair: &Pair) -> LabelsHeader {
    LabelsHeader {
        format: LABELS_FORMAT,
        slm_id: pair.slm.manifest().id.clone(),
        llm_id: pair.llm.id().to_string(),
        tokenizer_fingerprint: pair.tok.fingerprint().to_string(),
        feature_spec: FEATURE_SPEC.to_string(),
        hidden_size: pair.slm.manifest().hidden_size,
    }
}

/// On-policy labels for every item of `todo`, appended to `writer` as each finishes.
fn rollouts(pair: &mut Pair, todo: &[TaskItem], writer: &mut LabelsWriter, bar: &indicatif::ProgressBar, out: &std::path::Path) -> anyhow::Result<()> {
    let (mut positions, mut zeros) = (0usize, 0usize);
    for item in todo {
        let labelled = rollout_labels(pair, item)?;
        positions += labelled.positions.len();
        zeros += labelled.positions.iter().filter(|p| p.label() == Some(0.0)).count();
        writer.append(&labelled)?;
        bar.inc(1);
        bar.set_prefix(format!("{positions} positions, {zeros} escalation helps"));
        if bar.is_hidden() && bar.position().is_multiple_of(10) {
            eprintln!("labels: {} items, {positions} positions ({zeros} label 0)", bar.position());
        }
    }
    bar.finish();
    eprintln!("done: {} ({positions} new positions, {zeros} where escalating fixes the answer)", out.display());
    Ok(())
}

/// Default on-policy labels path for an SLM.
pub fn default_on_policy_path(slm_id: &str) -> PathBuf {
    duet_home().join("router").join(format!("labels-onpolicy-{slm_id}.bin"))
}

/// Most tokens of an answer in roll-outs: a short reasoned answer.
const MAX_ANSWER_TOKENS: usize = 96;

/// Most tokens of a code answer in roll-outs: a function.
const MAX_CODE_TOKENS: usize = 256;

/// The SLM's own greedy answer to `item`'s `prompt`, continuing from `prefix` (the start of an
/// answer, empty for a fresh one), through the device's decode loop with no cloud: until a
/// stop token, the item's stop rule, or `max` tokens. Returns the whole answer (prefix
/// included); `features` receives the SLM's distribution statistics and hidden state (f16) at
/// every new position.
#[allow(clippy::too_many_arguments)]
fn slm_answer(
    lm: &mut CausalLm,
    cache: &mut KvCache,
    tok: &Tokenizer,
    item: &TaskItem,
    max: usize,
    prompt: &[u32],
    prefix: &[u32],
    mut features: Option<&mut Vec<(DistributionStats, Vec<u8>)>>,
) -> anyhow::Result<Vec<u32>> {
    let mut answer = prefix.to_vec();
    let budget = max.saturating_sub(prefix.len());
    if budget == 0 {
        return Ok(answer);
    }
    let mut context = prompt.to_vec();
    context.extend_from_slice(prefix);
    let mut slm = OnnxSlm::new(lm, cache, SamplingParams::default())?;
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let params = DecodeParams { max_new_tokens: budget, tau: 0.0, rate_control: None };
    rt.block_on(decode(&mut slm, &mut ConfidenceRouter, &mut NoCloud, &context, params, |e| {
        if let (Some(f), Some(p)) = (features.as_deref_mut(), e.proposal) {
            f.push((p.stats, LabelledPosition::encode_hidden(p.hidden)));
        }
        answer.push(e.token);
        match tok.decode(&answer) {
            Ok(text) if item.done(&text) => std::ops::ControlFlow::Break(()),
            _ => std::ops::ControlFlow::Continue(()),
        }
    }))?;
    Ok(answer)
}

/// On-policy labels for one item (see `--on-policy`). The positions' `reference` is the token
/// the roll-outs prefer: the LLM's where escalating fixes the answer, else the SLM's. An item
/// that cannot be judged (code without tests) takes the LLM's token wherever it differs.
fn rollout_labels(pair: &mut Pair, item: &TaskItem) -> anyhow::Result<LabelledItem> {
    let prompt = pair.tok.encode(&render_user(&item.user))?;
    let untested = item.scoring == Scoring::Untested;
    let max = if untested { MAX_CODE_TOKENS } else { MAX_ANSWER_TOKENS };
    let cap = prompt.len() + 2 * max;
    let stop = pair.slm.stop_tokens().to_vec();
    // The SLM's own answer, with its features at every position.
    let mut slm_cache = pair.slm.new_cache(Some(cap))?;
    let mut feats = Vec::new();
    let generated = slm_answer(&mut pair.slm, &mut slm_cache, &pair.tok, item, max, &prompt, &[], Some(&mut feats))?;
    let correct = |ids: &[u32]| -> anyhow::Result<bool> { Ok(item.judge(&pair.tok.decode(ids)?).is_some_and(|(_, ok)| ok)) };
    let slm_correct = !untested && correct(&generated)?;
    // The LLM's greedy token at each position of that answer.
    let mut sequence = prompt.clone();
    sequence.extend_from_slice(&generated);
    let llm_choices = pair.llm.teacher().choices(&[(&sequence, prompt.len())], false)?.remove(0);
    anyhow::ensure!(llm_choices.len() == feats.len(), "{}: the LLM gave {} choices for {} positions", item.id, llm_choices.len(), feats.len());
    let mut positions = Vec::with_capacity(generated.len());
    for (t, ((dist, hidden), choice)) in feats.into_iter().zip(llm_choices).enumerate() {
        let llm = choice.best.id;
        let slm = generated[t];
        let mut reference = slm;
        if llm != slm && untested {
            reference = llm;
        } else if llm != slm && !slm_correct {
            // Roll out: the SLM continues from the LLM's token (the decode loop reuses the
            // cached prefix, so this costs only the tokens after position t).
            let mut prefix = generated[..t].to_vec();
            prefix.push(llm);
            let rolled = if stop.contains(&llm) { prefix } else { slm_answer(&mut pair.slm, &mut slm_cache, &pair.tok, item, max, &prompt, &prefix, None)? };
            if correct(&rolled)? {
                reference = llm;
            }
        }
        positions.push(LabelledPosition { reference, slm, llm, top_prob: dist.top_prob, entropy: dist.entropy, hidden_f16: hidden });
    }
    Ok(LabelledItem { id: item.id.clone(), positions })
}

/// Teacher-force every row's target through the SLM (features and greedy token per position)
/// and take the teacher's greedy token at the same positions.
fn label_batch(slm: &mut CausalLm, teacher: &mut dyn Teacher, rows: &mut [Row]) -> anyhow::Result<()> {
    slm_positions(slm, rows)?;
    let sequences: Vec<Vec<u32>> = rows.iter().map(|r| r.prompt.iter().chain(&r.target).copied().collect()).collect();
    let teacher_rows: Vec<(&[u32], usize)> = sequences.iter().zip(rows.iter()).map(|(s, r)| (s.as_slice(), r.prompt.len())).collect();
    let choices = teacher.choices(&teacher_rows, false)?;
    for (row, choices) in rows.iter_mut().zip(choices) {
        if choices.len() != row.positions.len() {
            anyhow::bail!("{}: the LLM gave {} choices for {} positions", row.id, choices.len(), row.positions.len());
        }
        for (p, c) in row.positions.iter_mut().zip(choices) {
            p.llm = c.best.id;
        }
    }
    Ok(())
}

/// Teacher-force every row's target through the SLM, recording each position (the LLM's token
/// is filled in by [`label_batch`]).
fn slm_positions(slm: &mut CausalLm, rows: &mut [Row]) -> anyhow::Result<()> {
    // Prefill the prompts: each output predicts the first target token.
    let mut slm_out = step(slm, rows.iter_mut().map(|r| (&mut r.slm_cache, r.prompt.clone())).collect())?;
    let mut active: Vec<usize> = (0..rows.len()).collect();
    let mut t = 0;
    while !active.is_empty() {
        for (k, &r) in active.iter().enumerate() {
            let dist = distribution_stats(&slm_out[k].logits)?;
            rows[r].positions.push(LabelledPosition {
                reference: rows[r].target[t],
                slm: dist.argmax,
                llm: u32::MAX,
                top_prob: dist.top_prob,
                entropy: dist.entropy,
                hidden_f16: LabelledPosition::encode_hidden(&slm_out[k].hidden),
            });
        }
        let next: Vec<usize> = active.iter().copied().filter(|&r| t + 1 < rows[r].target.len()).collect();
        if next.is_empty() {
            break;
        }
        let slm_rows = rows.iter_mut().enumerate().filter(|(i, _)| next.contains(i)).map(|(_, row)| (&mut row.slm_cache, vec![row.target[t]])).collect();
        slm_out = step(slm, slm_rows)?;
        active = next;
        t += 1;
    }
    Ok(())
}

fn step(lm: &mut CausalLm, rows: Vec<(&mut KvCache, Vec<u32>)>) -> anyhow::Result<Vec<StepOutput>> {
    let (mut caches, tokens): (Vec<&mut KvCache>, Vec<Vec<u32>>) = rows.into_iter().unzip();
    let slices: Vec<&[u32]> = tokens.iter().map(|t| t.as_slice()).collect();
    Ok(lm.forward_batch(&mut caches, &slices)?)
}
