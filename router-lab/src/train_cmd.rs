//! `edge-node router-train`: fit the router MLP on a labels file with binary cross-entropy
//! (candle, CPU), pick the epoch with the best held-out AUC, calibrate tau against escalation
//! rates on the held-out items, and write one router file.
//!
//! Held-out items are chosen by a hash of their id, so the split is stable when more items are
//! labelled later. Calibration uses *every* held-out position (also the both-wrong ones the
//! training drops), because at run time the router sees every token.

use std::path::PathBuf;

use anyhow::{bail, Context};
use candle_core::{DType, Device, Tensor, D};
use candle_nn::{Module, Optimizer, VarBuilder, VarMap};
use clap::Args;
use edge_node::routing::router_file::{feature_width, features_into, Calibration, MlpRouterModel, MlpWeights, RouterMeta, FEATURE_SPEC, FORMAT_VERSION};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::calibration::{self, CalibrationArgs};
use crate::labels_cmd::default_labels_path;
use crate::labels_file::{LabelledItem, LabelsFile};

/// Options of `edge-node router-train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Teacher-forced (CITER shortcut) labels files from `router-labels`, comma separated
    /// (default: the default SLM's, when present).
    #[arg(long, env = "DUET_LABELS", value_delimiter = ',')]
    pub labels: Vec<PathBuf>,
    /// On-policy roll-out labels files from `router-labels --on-policy` (default: the default
    /// SLM's, when present). Held-out AUC on these selects the epoch when there are any,
    /// because they follow the token distribution the router meets at run time.
    #[arg(long, env = "DUET_ON_POLICY_LABELS", value_delimiter = ',')]
    pub on_policy_labels: Vec<PathBuf>,
    /// Each on-policy training position counts this many times (they are few and on target).
    #[arg(long, env = "DUET_ON_POLICY_WEIGHT", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub on_policy_weight: u32,
    /// Router file to write; default $DUET_HOME/router/<slm>.router.safetensors.
    #[arg(long, env = "DUET_ROUTER")]
    pub out: Option<PathBuf>,
    /// Width of the hidden layer.
    #[arg(long, env = "DUET_ROUTER_HIDDEN", default_value_t = 128)]
    pub hidden: usize,
    /// Passes over the training positions.
    #[arg(long, env = "DUET_EPOCHS", default_value_t = 20)]
    pub epochs: usize,
    /// Learning rate (AdamW).
    #[arg(long, env = "DUET_LR", default_value_t = 1e-3)]
    pub lr: f64,
    /// AdamW weight decay.
    #[arg(long, env = "DUET_WEIGHT_DECAY", default_value_t = 1e-2)]
    pub weight_decay: f64,
    /// Dropout on the hidden layer while training.
    #[arg(long, env = "DUET_DROPOUT", default_value_t = 0.2, value_parser = parse_dropout)]
    pub dropout: f32,
    /// Percentage of items held out for model selection and tau calibration.
    #[arg(long, env = "DUET_HOLDOUT_PCT", default_value_t = 20, value_parser = clap::value_parser!(u8).range(5..=50))]
    pub holdout_pct: u8,
    #[command(flatten)]
    pub calibration: CalibrationArgs,
    /// Seed for initialisation and shuffling.
    #[arg(long, env = "DUET_SEED", default_value_t = 7)]
    pub seed: u64,
}

fn parse_dropout(s: &str) -> Result<f32, String> {
    let v: f32 = s.parse().map_err(|e| format!("`{s}`: {e}"))?;
    if (0.0..0.95).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is outside [0, 0.95)"))
    }
}

/// Default router path for an SLM.
pub fn default_router_path(slm_id: &str) -> PathBuf {
    model_runtime::model_files::duet_home().join("router").join(format!("{slm_id}.router.safetensors"))
}

/// Stable split: FNV-1a of the id.
fn held_out(id: &str, pct: u8) -> bool {
    let h = id.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3));
    h % 100 < pct as u64
}

/// Area under the ROC curve for separating label 1 from label 0 (Mann-Whitney, ties halved).
pub fn auc(scores: &[f32], labels: &[f32]) -> f64 {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let (mut rank_sum, mut pos, mut i) = (0.0f64, 0usize, 0usize);
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && scores[idx[j + 1]] == scores[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            if labels[k] > 0.5 {
                rank_sum += avg;
                pos += 1;
            }
        }
        i = j + 1;
    }
    let neg = scores.len() - pos;
    if pos == 0 || neg == 0 {
        return f64::NAN;
    }
    (rank_sum - (pos * (pos + 1)) as f64 / 2.0) / (pos * neg) as f64
}

#[derive(Debug, Serialize)]
struct TrainingReport {
    labels_file: String,
    llm_id: String,
    items: usize,
    teacher_forced_items: usize,
    on_policy_items: usize,
    on_policy_weight: u32,
    selected_on: &'static str,
    train_items: usize,
    holdout_items: usize,
    train_positions: usize,
    holdout_labelled_positions: usize,
    holdout_all_positions: usize,
    dropped_both_wrong: usize,
    share_label_1: f64,
    best_epoch: usize,
    holdout_auc_mlp: f64,
    holdout_auc_top_prob: f64,
    holdout_auc_neg_entropy: f64,
    /// The other held-out set (teacher-forced when selection was on-policy), for comparison.
    other_holdout_auc_mlp: f64,
    other_holdout_auc_top_prob: f64,
    holdout_bce: f64,
    hidden: usize,
    epochs: usize,
    lr: f64,
    weight_decay: f64,
    dropout: f32,
    seed: u64,
}

struct Rows {
    x: Vec<f32>,
    y: Vec<f32>,
    top_prob: Vec<f32>,
    entropy: Vec<f32>,
}

/// The items of `v` from one source (or both), on-policy ones repeated `repeat` times.
fn select<'a>(v: &[(bool, &'a LabelledItem)], on_policy: Option<bool>, repeat: u32) -> Vec<&'a LabelledItem> {
    v.iter()
        .filter(|(o, _)| on_policy.is_none_or(|want| *o == want))
        .flat_map(|(o, i)| std::iter::repeat_n(*i, if *o { repeat as usize } else { 1 }))
        .collect()
}

fn rows(items: &[&LabelledItem], width: usize, labelled_only: bool) -> Rows {
    let mut r = Rows { x: Vec::new(), y: Vec::new(), top_prob: Vec::new(), entropy: Vec::new() };
    let mut f = Vec::with_capacity(width);
    for item in items {
        for p in &item.positions {
            let label = p.label();
            if labelled_only && label.is_none() {
                continue;
            }
            features_into(&p.hidden(), p.top_prob, p.entropy, &mut f);
            if f.len() != width {
                continue;
            }
            r.x.extend_from_slice(&f);
            r.y.push(label.unwrap_or(f32::NAN));
            r.top_prob.push(p.top_prob);
            r.entropy.push(p.entropy);
        }
    }
    r
}

/// Numerically stable BCE on logits: max(z,0) - z*y + ln(1 + e^-|z|).
fn bce_with_logits(z: &Tensor, y: &Tensor) -> candle_core::Result<Tensor> {
    let a = z.relu()?;
    let b = (z * y)?;
    let c = (z.abs()?.neg()?.exp()? + 1.0)?.log()?;
    ((a - b)? + c)?.mean_all()
}

/// Run it.
pub fn run(args: TrainArgs) -> anyhow::Result<()> {
    let labels = Labels::read(&args)?;
    let data = Dataset::split(&args, &labels)?;
    let fit = train_mlp(&args, &data)?;
    let report = TrainingReport::new(&args, &labels, &data, &fit)?;
    let model = calibrate(&args, &labels, &data, &report, fit.weights)?;
    let out = args.out.clone().unwrap_or_else(|| default_router_path(&labels.header.slm_id));
    model.save(&out)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    let tau7 = model.meta().calibration.tau_for_rate(0.07)?;
    eprintln!("router -> {} (held-out AUC {:.4} vs top-prob {:.4}; tau for 7 % escalation: {tau7:.4})", out.display(), fit.auc, report.holdout_auc_top_prob);
    Ok(())
}

/// The labels files read together: one header they agree on, every item tagged with whether it
/// came from an on-policy file.
struct Labels {
    header: crate::labels_file::LabelsHeader,
    items: Vec<(bool, LabelledItem)>,
    /// The files, comma separated (what the report names).
    path: PathBuf,
}

impl Labels {
    /// The files `--labels` and `--on-policy-labels` name (or the default SLM's, when present);
    /// fails when they were labelled for different SLMs or feature layouts.
    fn read(args: &TrainArgs) -> anyhow::Result<Self> {
        let slm = model_runtime::model_files::DEFAULT_SLM;
        let or_default = |given: &Vec<PathBuf>, default: PathBuf| if given.is_empty() { vec![default].into_iter().filter(|p| p.exists()).collect() } else { given.clone() };
        let tf_paths = or_default(&args.labels, default_labels_path(slm));
        let op_paths = or_default(&args.on_policy_labels, crate::labels_cmd::default_on_policy_path(slm));
        let paths: Vec<(bool, PathBuf)> = tf_paths.into_iter().map(|p| (false, p)).chain(op_paths.into_iter().map(|p| (true, p))).collect();
        if paths.is_empty() {
            bail!("no labels: run `edge-node router-labels` (and `--on-policy`) first, or pass --labels / --on-policy-labels");
        }
        let mut header: Option<crate::labels_file::LabelsHeader> = None;
        let mut items: Vec<(bool, LabelledItem)> = Vec::new();
        for (on_policy, path) in &paths {
            let f = LabelsFile::read(path)?;
            if let Some(a) = &header {
                let b = &f.header;
                if (&a.slm_id, &a.tokenizer_fingerprint, &a.feature_spec, a.hidden_size) != (&b.slm_id, &b.tokenizer_fingerprint, &b.feature_spec, b.hidden_size) {
                    bail!("{} was labelled for another SLM or feature layout than {}", path.display(), paths[0].1.display());
                }
            } else {
                header = Some(f.header.clone());
            }
            items.extend(f.items.into_iter().map(|i| (*on_policy, i)));
        }
        let Some(header) = header else { bail!("no labels files") };
        let path = PathBuf::from(paths.iter().map(|(_, p)| p.display().to_string()).collect::<Vec<_>>().join(","));
        Ok(Self { header, items, path })
    }
}

type Tagged<'a> = Vec<(bool, &'a LabelledItem)>;

/// The items split into training and held-out ones, as feature rows, and which held-out set
/// selects the epoch.
struct Dataset<'a> {
    width: usize,
    train: Tagged<'a>,
    holdout: Tagged<'a>,
    /// Training positions with a label (on-policy ones repeated).
    tr: Rows,
    /// Held-out labelled positions, on-policy and teacher-forced.
    ho_op: Rows,
    ho_tf: Rows,
    /// Every held-out position, labelled or not (calibration sees every token).
    all: Rows,
    selection_on_policy: bool,
}

impl<'a> Dataset<'a> {
    fn split(args: &TrainArgs, labels: &'a Labels) -> anyhow::Result<Self> {
        let width = feature_width(labels.header.hidden_size);
        let (holdout, train): (Tagged, Tagged) =
            labels.items.iter().map(|(o, i)| (*o, i)).partition(|(_, i)| held_out(&i.id, args.holdout_pct));
        if train.is_empty() || holdout.is_empty() {
            bail!("{} has {} items: too few to hold some out (label more items)", labels.path.display(), labels.items.len());
        }
        let tr = rows(&select(&train, None, args.on_policy_weight), width, true);
        let ho_op = rows(&select(&holdout, Some(true), 1), width, true);
        let ho_tf = rows(&select(&holdout, Some(false), 1), width, true);
        // Select on the run-time distribution (on-policy) when there is enough of it.
        let selection_on_policy = ho_op.y.iter().any(|&y| y < 0.5) && ho_op.y.iter().any(|&y| y > 0.5);
        let all = rows(&select(&holdout, None, 1), width, false);
        let data = Self { width, train, holdout, tr, ho_op, ho_tf, all, selection_on_policy };
        let (n, m) = (data.tr.y.len(), data.selected().y.len());
        if n == 0 || m == 0 || data.tr.y.iter().all(|&y| y > 0.5) || data.tr.y.iter().all(|&y| y < 0.5) {
            bail!("{}: the labels need both classes in training and held-out data (train {n}, held-out {m} positions)", labels.path.display());
        }
        eprintln!(
            "training on {n} positions (on-policy ones x{}) from {} items, holding out {} items; epochs selected on {m} {} positions",
            args.on_policy_weight,
            data.train.len(),
            data.holdout.len(),
            data.selected_on()
        );
        Ok(data)
    }

    /// The held-out positions that select the epoch.
    fn selected(&self) -> &Rows {
        if self.selection_on_policy {
            &self.ho_op
        } else {
            &self.ho_tf
        }
    }

    /// The other held-out set, reported for comparison.
    fn other(&self) -> &Rows {
        if self.selection_on_policy {
            &self.ho_tf
        } else {
            &self.ho_op
        }
    }

    fn selected_on(&self) -> &'static str {
        if self.selection_on_policy {
            "on-policy"
        } else {
            "teacher-forced"
        }
    }
}

/// Per-feature mean and standard deviation of the training rows (the model's input scaling).
struct Standardiser {
    width: usize,
    mean: Vec<f32>,
    std: Vec<f32>,
}

impl Standardiser {
    fn fit(x: &[f32], width: usize) -> Self {
        let n = x.len() / width;
        let mut mean = vec![0.0f64; width];
        let mut var = vec![0.0f64; width];
        for row in x.chunks_exact(width) {
            for (k, v) in row.iter().enumerate() {
                mean[k] += *v as f64;
            }
        }
        mean.iter_mut().for_each(|v| *v /= n as f64);
        for row in x.chunks_exact(width) {
            for (k, v) in row.iter().enumerate() {
                var[k] += (*v as f64 - mean[k]).powi(2);
            }
        }
        let std: Vec<f32> = var.iter().map(|v| ((v / n as f64).sqrt() as f32).max(1e-3)).collect();
        let mean: Vec<f32> = mean.iter().map(|&v| v as f32).collect();
        Self { width, mean, std }
    }

    fn apply(&self, x: &[f32]) -> Vec<f32> {
        x.chunks_exact(self.width).flat_map(|r| r.iter().zip(self.mean.iter().zip(&self.std)).map(|(v, (m, s))| (v - m) / s)).collect()
    }
}

/// The epoch with the best held-out AUC: its weights and scores.
struct Fit {
    auc: f64,
    epoch: usize,
    bce: f64,
    weights: MlpWeights,
}

/// The two-layer MLP being trained, its variables initialised from a seeded RNG.
struct Mlp {
    varmap: VarMap,
    l1: candle_nn::Linear,
    l2: candle_nn::Linear,
}

impl Mlp {
    fn new(width: usize, hidden: usize, rng: &mut rand::rngs::StdRng) -> anyhow::Result<Self> {
        let dev = Device::Cpu;
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &dev);
        let l1 = candle_nn::linear(width, hidden, vb.pp("l1"))?;
        let l2 = candle_nn::linear(hidden, 1, vb.pp("l2"))?;
        // candle's CPU generator cannot be seeded: initialise (and drop out) from our own seeded
        // RNG so that a training run is reproducible.
        {
            let vars = varmap.data().lock().map_err(|_| anyhow::anyhow!("varmap lock poisoned"))?;
            let mut names: Vec<&String> = vars.keys().collect();
            names.sort();
            for name in names {
                let var = &vars[name];
                let dims = var.dims().to_vec();
                let fan_in = if name.starts_with("l1") { width } else { hidden };
                let bound = 1.0 / (fan_in as f32).sqrt();
                let values: Vec<f32> = (0..var.elem_count()).map(|_| rng.random_range(-bound..bound)).collect();
                var.set(&Tensor::from_vec(values, dims, &dev)?)?;
            }
        }
        Ok(Self { varmap, l1, l2 })
    }

    /// Logits without dropout.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.l2.forward(&self.l1.forward(x)?.relu()?)
    }

    /// The weights as the router file stores them, with the input scaling.
    fn weights(&self, scale: &Standardiser) -> anyhow::Result<MlpWeights> {
        let w1: Vec<f32> = self.l1.weight().flatten_all()?.to_vec1()?;
        let b1: Vec<f32> = self.l1.bias().context("l1 bias")?.to_vec1()?;
        let w2: Vec<f32> = self.l2.weight().flatten_all()?.to_vec1()?;
        let b2: f32 = self.l2.bias().context("l2 bias")?.to_vec1::<f32>()?[0];
        Ok(MlpWeights { mean: scale.mean.clone(), std: scale.std.clone(), w1, b1, w2, b2 })
    }
}

/// Trains for `--epochs` with AdamW on standardised rows; keeps the epoch with the best AUC on
/// the selected held-out set.
fn train_mlp(args: &TrainArgs, data: &Dataset) -> anyhow::Result<Fit> {
    let (width, ho) = (data.width, data.selected());
    let (n, m) = (data.tr.y.len(), ho.y.len());
    let scale = Standardiser::fit(&data.tr.x, width);
    let xho = Tensor::from_vec(scale.apply(&ho.x), (m, width), &Device::Cpu)?;
    let yho = Tensor::from_vec(ho.y.clone(), (m, 1), &Device::Cpu)?;
    let mut trainer = Trainer::new(args, data, &scale)?;
    let mut best: Option<Fit> = None;
    for epoch in 1..=args.epochs {
        let total = trainer.epoch()?;
        let z = trainer.mlp.forward(&xho)?;
        let bce = bce_with_logits(&z, &yho)?.to_scalar::<f32>()? as f64;
        let scores: Vec<f32> = z.squeeze(D::Minus1)?.to_vec1()?;
        let a = auc(&scores, &ho.y);
        eprintln!("epoch {epoch:>3}: train bce {:.4}, held-out bce {bce:.4}, held-out AUC {a:.4}", total / n as f64);
        if best.as_ref().is_none_or(|b| a > b.auc) {
            best = Some(Fit { auc: a, epoch, bce, weights: trainer.mlp.weights(&scale)? });
        }
    }
    best.context("no epochs were run (--epochs 0)")
}

/// The state of a training run: the model, its optimiser, the one seeded RNG (initialisation,
/// shuffling and dropout draw from it in that order) and the standardised training rows.
struct Trainer<'a> {
    mlp: Mlp,
    opt: candle_nn::AdamW,
    rng: rand::rngs::StdRng,
    xtr: Vec<f32>,
    ytr: &'a [f32],
    order: Vec<usize>,
    width: usize,
    hidden: usize,
    dropout: f32,
}

impl<'a> Trainer<'a> {
    fn new(args: &TrainArgs, data: &'a Dataset, scale: &Standardiser) -> anyhow::Result<Self> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
        let mlp = Mlp::new(data.width, args.hidden, &mut rng)?;
        let params = candle_nn::ParamsAdamW { lr: args.lr, weight_decay: args.weight_decay, ..Default::default() };
        let opt = candle_nn::AdamW::new(mlp.varmap.all_vars(), params)?;
        let order = (0..data.tr.y.len()).collect();
        Ok(Self { mlp, opt, rng, xtr: scale.apply(&data.tr.x), ytr: &data.tr.y, order, width: data.width, hidden: args.hidden, dropout: args.dropout })
    }

    /// One pass over the shuffled training rows in batches, with dropout on the hidden layer;
    /// returns the loss summed over positions.
    fn epoch(&mut self) -> anyhow::Result<f64> {
        const BATCH: usize = 256;
        let (dev, width) = (Device::Cpu, self.width);
        self.order.shuffle(&mut self.rng);
        let mut total = 0.0f64;
        for idx in self.order.chunks(BATCH) {
            let mut xb = Vec::with_capacity(idx.len() * width);
            let mut yb = Vec::with_capacity(idx.len());
            for &i in idx {
                xb.extend_from_slice(&self.xtr[i * width..(i + 1) * width]);
                yb.push(self.ytr[i]);
            }
            let xs = Tensor::from_vec(xb, (idx.len(), width), &dev)?;
            let ys = Tensor::from_vec(yb, (idx.len(), 1), &dev)?;
            let hidden = self.mlp.l1.forward(&xs)?.relu()?;
            let hidden = if self.dropout > 0.0 {
                let keep = 1.0 - self.dropout;
                let mask: Vec<f32> = (0..idx.len() * self.hidden).map(|_| if self.rng.random::<f32>() < keep { 1.0 / keep } else { 0.0 }).collect();
                (hidden * Tensor::from_vec(mask, (idx.len(), self.hidden), &dev)?)?
            } else {
                hidden
            };
            let loss = bce_with_logits(&self.mlp.l2.forward(&hidden)?, &ys)?;
            self.opt.backward_step(&loss)?;
            total += loss.to_scalar::<f32>()? as f64 * idx.len() as f64;
        }
        Ok(total)
    }
}

impl TrainingReport {
    fn new(args: &TrainArgs, labels: &Labels, data: &Dataset, fit: &Fit) -> anyhow::Result<Self> {
        let (items, width, ho, other) = (&labels.items, data.width, data.selected(), data.other());
        let (n, m) = (data.tr.y.len(), ho.y.len());
        let mut probe = MlpRouterModel::new(probe_meta(&labels.header, width, args.hidden), fit.weights.clone())?;
        let other_scores: Vec<f32> = other.x.chunks_exact(width).map(|f| probe.confidence(&f[..width - 2], f[width - 2], f[width - 1])).collect();
        Ok(Self {
            labels_file: labels.path.display().to_string(),
            llm_id: labels.header.llm_id.clone(),
            items: items.len(),
            teacher_forced_items: items.iter().filter(|(o, _)| !o).count(),
            on_policy_items: items.iter().filter(|(o, _)| *o).count(),
            on_policy_weight: args.on_policy_weight,
            selected_on: data.selected_on(),
            train_items: data.train.len(),
            holdout_items: data.holdout.len(),
            train_positions: n,
            holdout_labelled_positions: m,
            holdout_all_positions: data.all.y.len(),
            dropped_both_wrong: items.iter().flat_map(|(_, i)| &i.positions).filter(|p| p.label().is_none()).count(),
            share_label_1: data.tr.y.iter().filter(|&&y| y > 0.5).count() as f64 / n as f64,
            best_epoch: fit.epoch,
            holdout_auc_mlp: fit.auc,
            holdout_auc_top_prob: auc(&ho.top_prob, &ho.y),
            holdout_auc_neg_entropy: auc(&ho.entropy.iter().map(|e| -e).collect::<Vec<_>>(), &ho.y),
            other_holdout_auc_mlp: auc(&other_scores, &other.y),
            other_holdout_auc_top_prob: auc(&other.top_prob, &other.y),
            holdout_bce: fit.bce,
            hidden: args.hidden,
            epochs: args.epochs,
            lr: args.lr,
            weight_decay: args.weight_decay,
            dropout: args.dropout,
            seed: args.seed,
        })
    }
}

/// The router with its tau tables: calibrated with the model exactly as the edge runs it, on the
/// SLM's own answers to `--calibration-items` prompts, or on the held-out positions when 0.
fn calibrate(args: &TrainArgs, labels: &Labels, data: &Dataset, report: &TrainingReport, weights: MlpWeights) -> anyhow::Result<MlpRouterModel> {
    let (h, width, all) = (&labels.header, data.width, &data.all);
    let meta = RouterMeta {
        format: FORMAT_VERSION,
        slm_id: h.slm_id.clone(),
        tokenizer_fingerprint: h.tokenizer_fingerprint.clone(),
        feature_spec: FEATURE_SPEC.to_string(),
        feature_width: width,
        mlp_hidden: args.hidden,
        calibration: Calibration::default(),
        confidence_calibration: Calibration::from_confidences(&all.top_prob, &Calibration::default_rates()),
        training: serde_json::to_value(report)?,
        pooling: None,
    };
    let mut model = MlpRouterModel::new(meta.clone(), weights)?;
    let (confidences, top_probs, source) = if args.calibration.calibration_items > 0 {
        let labelled: std::collections::HashSet<&str> = labels.items.iter().map(|(_, i)| i.id.as_str()).collect();
        let chosen = calibration::prompts(&args.calibration, &labelled)?;
        let (c, t) = calibration::on_policy_scores(&h.slm_id, &chosen, &mut model)?;
        (c, t, format!("{} not used for labels", args.calibration.describe(chosen.len())))
    } else {
        let c = all.x.chunks_exact(width).map(|f| model.confidence(&f[..width - 2], f[width - 2], f[width - 1])).collect();
        (c, all.top_prob.clone(), "teacher-forced held-out positions".to_string())
    };
    eprintln!("calibrated on {} positions: {source}", confidences.len());
    let mut training = meta.training.clone();
    training["calibration_source"] = serde_json::Value::String(source);
    training["calibration_positions"] = confidences.len().into();
    let meta = RouterMeta {
        calibration: Calibration::from_confidences(&confidences, &Calibration::default_rates()),
        confidence_calibration: Calibration::from_confidences(&top_probs, &Calibration::default_rates()),
        training,
        ..meta
    };
    Ok(MlpRouterModel::new(meta, model.weights().clone())?)
}

/// Metadata for scoring only (no calibration yet).
fn probe_meta(h: &crate::labels_file::LabelsHeader, width: usize, hidden: usize) -> RouterMeta {
    RouterMeta {
        format: FORMAT_VERSION,
        slm_id: h.slm_id.clone(),
        tokenizer_fingerprint: h.tokenizer_fingerprint.clone(),
        feature_spec: FEATURE_SPEC.to_string(),
        feature_width: width,
        mlp_hidden: hidden,
        calibration: Calibration::default(),
        confidence_calibration: Calibration::default(),
        training: serde_json::Value::Null,
        pooling: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_of_perfect_inverse_and_tied_scores() {
        assert_eq!(auc(&[0.1, 0.2, 0.8, 0.9], &[0.0, 0.0, 1.0, 1.0]), 1.0);
        assert_eq!(auc(&[0.9, 0.8, 0.2, 0.1], &[0.0, 0.0, 1.0, 1.0]), 0.0);
        assert_eq!(auc(&[0.5, 0.5, 0.5, 0.5], &[0.0, 1.0, 0.0, 1.0]), 0.5);
        assert!(auc(&[0.5], &[1.0]).is_nan());
    }

    #[test]
    fn holdout_split_is_stable_and_near_the_share() {
        let ids: Vec<String> = (0..2000).map(|i| format!("{i:032x}")).collect();
        let n = ids.iter().filter(|i| held_out(i, 20)).count();
        assert!((300..500).contains(&n), "{n}");
        assert_eq!(held_out("abc", 20), held_out("abc", 20));
    }
}
