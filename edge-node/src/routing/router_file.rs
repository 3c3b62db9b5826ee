//! The trained token router as one self-describing file: a small MLP over the SLM's
//! per-token features, plus what it was trained for (SLM id, tokenizer fingerprint, feature
//! spec) and a table mapping a target escalation rate to the threshold tau.
//!
//! The file is safetensors: the weights as tensors, the metadata as one JSON string under the
//! `duet_router` key. A router learned on one SLM's hidden states means nothing for another
//! model, so loading checks the SLM id and the tokenizer fingerprint and refuses a mismatch.
//!
//! Scoring is plain Rust (one 898x128 mat-vec and a dot product, a few tens of microseconds),
//! so the edge does not need a tensor library at run time; training lives in the edge-node
//! binary (candle).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::router_header::RouterHeader;
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};

use super::pooled::ConfidencePooling;

/// Version of the feature vector: the SLM's final hidden state, then its top next-token
/// probability, then the entropy (nats) of that distribution.
pub const FEATURE_SPEC: &str = "duet-features/v1: hidden_state[hidden_size] ++ [top_prob, entropy]";

/// The largest f32 below 1: tau for any target rate below 100 %.
const BELOW_ONE: f32 = 1.0 - f32::EPSILON / 2.0;

/// Metadata key under which the JSON metadata is stored (its header is read by
/// [`common::router_header`], which the gateway's `fleet bundle` reads it with too).
const META_KEY: &str = common::router_header::META_KEY;

/// Why a router file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RouterFileError {
    /// The file could not be read or written.
    #[error("router file {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The file is not a Duet router file (or is damaged).
    #[error("router file {path} is not a valid Duet router: {message}")]
    Format { path: PathBuf, message: String },
    /// Trained for another SLM.
    #[error("router file {path} was trained for SLM `{trained}`, but the loaded SLM is `{loaded}`; train one for this model (edge-node router-labels / router-train)")]
    WrongSlm { path: PathBuf, trained: String, loaded: String },
    /// Trained with another tokenizer.
    #[error("router file {path} was trained with tokenizer {trained}, but the loaded SLM's tokenizer is {loaded}")]
    WrongTokenizer { path: PathBuf, trained: String, loaded: String },
    /// Features of another layout.
    #[error("router file {path} expects features `{trained}` of width {width}, this build computes `{ours}` of width {ours_width}")]
    WrongFeatures { path: PathBuf, trained: String, width: usize, ours: String, ours_width: usize },
    /// A target escalation rate outside what the calibration table covers.
    #[error("escalation rate {rate} is outside [0, 1]")]
    RateOutOfRange { rate: f32 },
}

/// One point of a calibration table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CalibrationPoint {
    /// Share of tokens escalated on the held-out data.
    pub rate: f32,
    /// The tau that escalates that share (escalate when confidence < tau).
    pub tau: f32,
}

/// Maps a target escalation rate to tau for one scoring policy, measured on held-out data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Calibration {
    /// Points sorted by rate (and so by tau).
    pub points: Vec<CalibrationPoint>,
}

impl Calibration {
    /// Rates tabulated by [`Calibration::from_confidences`]: fine steps where routers operate.
    pub fn default_rates() -> Vec<f32> {
        let mut r: Vec<f32> = (1..=40).map(|i| i as f32 * 0.005).collect(); // 0.5 % .. 20 %
        r.extend((5..=20).map(|i| i as f32 * 0.05).filter(|&x| x > 0.2001)); // 25 % .. 100 %
        r
    }

    /// Table from confidences observed on held-out tokens: for each rate, the tau below which
    /// that share of confidences falls.
    pub fn from_confidences(confidences: &[f32], rates: &[f32]) -> Self {
        let mut sorted: Vec<f32> = confidences.iter().copied().filter(|c| c.is_finite()).collect();
        sorted.sort_by(f32::total_cmp);
        let n = sorted.len();
        let points = rates
            .iter()
            .filter(|_| n > 0)
            .map(|&rate| {
                let k = ((rate.clamp(0.0, 1.0) * n as f32).round() as usize).min(n);
                // Escalate when confidence < tau: tau is the k-th smallest (the first kept).
                let tau = if k >= n { 1.0 } else if k == 0 { sorted[0].min(0.0) } else { (sorted[k - 1] + sorted[k]) / 2.0 };
                CalibrationPoint { rate, tau }
            })
            .collect();
        Self { points }
    }

    /// Tau for a target rate, interpolating linearly between tabulated points.
    pub fn tau_for_rate(&self, rate: f32) -> Result<f32, RouterFileError> {
        if !(0.0..=1.0).contains(&rate) {
            return Err(RouterFileError::RateOutOfRange { rate });
        }
        if rate == 0.0 {
            return Ok(0.0);
        }
        if rate >= 1.0 {
            return Ok(1.0);
        }
        let p = &self.points;
        let Some(first) = p.first() else { return Ok(rate) };
        if rate <= first.rate {
            return Ok(first.tau * rate / first.rate.max(f32::EPSILON));
        }
        for w in p.windows(2) {
            if rate <= w[1].rate {
                let t = (rate - w[0].rate) / (w[1].rate - w[0].rate).max(f32::EPSILON);
                // Below rate 1, never tau 1 (which means "escalate everything").
                return Ok((w[0].tau + t * (w[1].tau - w[0].tau)).min(BELOW_ONE));
            }
        }
        Ok(p.last().map_or(1.0, |l| l.tau.max(rate)).min(BELOW_ONE))
    }
}

/// Everything a router file says about itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouterMeta {
    /// File format version.
    pub format: u32,
    /// The SLM whose features it reads (model id from duet-model.json).
    pub slm_id: String,
    /// That SLM's tokenizer fingerprint.
    pub tokenizer_fingerprint: String,
    /// [`FEATURE_SPEC`] at training time.
    pub feature_spec: String,
    /// Width of the feature vector.
    pub feature_width: usize,
    /// Width of the MLP's hidden layer.
    pub mlp_hidden: usize,
    /// Target escalation rate -> tau for this router.
    pub calibration: Calibration,
    /// The same table for the confidence baseline (the SLM's top probability), from the same
    /// held-out tokens, so evaluations compare policies at matched rates.
    pub confidence_calibration: Calibration,
    /// How it was trained and how it scored on held-out data (free-form, for reports).
    pub training: serde_json::Value,
    /// When set, the file's confidence is the MLP's pooled with the SLM's top probability
    /// ([`ConfidencePooling`]), and `calibration` is that pooled score's table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooling: Option<ConfidencePooling>,
}

impl RouterMeta {
    /// The oldest format that reads this file: a pooled score needs [`FORMAT_VERSION`] 2, so
    /// a build that would ignore the pooling (and misread the calibration) refuses the file.
    pub fn format_needed(&self) -> u32 {
        if self.pooling.is_some() { 2 } else { 1 }
    }
}

/// The newest file format this build reads (and writes, for a pooled router; a plain one is
/// written as format 1, which every build reads).
pub const FORMAT_VERSION: u32 = 2;

/// Feature width for an SLM of `hidden_size`.
pub fn feature_width(hidden_size: usize) -> usize {
    hidden_size + 2
}

/// Build the feature vector of one position into `out`.
pub fn features_into(hidden: &[f32], top_prob: f32, entropy: f32, out: &mut Vec<f32>) {
    out.clear();
    out.extend_from_slice(hidden);
    out.push(top_prob);
    out.push(entropy);
}

/// Weights of the router MLP: `sigmoid(w2 . relu(w1 (x - mean) / std + b1) + b2)`.
#[derive(Debug, Clone)]
pub struct MlpWeights {
    /// Per-feature mean of the training data.
    pub mean: Vec<f32>,
    /// Per-feature standard deviation of the training data.
    pub std: Vec<f32>,
    /// `[hidden, in]`, row-major.
    pub w1: Vec<f32>,
    /// `[hidden]`.
    pub b1: Vec<f32>,
    /// `[hidden]`.
    pub w2: Vec<f32>,
    /// Output bias.
    pub b2: f32,
}

/// A loaded router: weights, metadata and scratch space for scoring without allocating.
#[derive(Debug, Clone)]
pub struct MlpRouterModel {
    meta: RouterMeta,
    weights: MlpWeights,
    inv_std: Vec<f32>,
    x: Vec<f32>,
    h: Vec<f32>,
}

fn f32_tensor<'a>(st: &'a SafeTensors<'a>, name: &str, len: usize, path: &Path) -> Result<Vec<f32>, RouterFileError> {
    let fmt = |message: String| RouterFileError::Format { path: path.to_path_buf(), message };
    let t = st.tensor(name).map_err(|e| fmt(format!("tensor `{name}`: {e}")))?;
    if t.dtype() != Dtype::F32 {
        return Err(fmt(format!("tensor `{name}` is {:?}, expected F32", t.dtype())));
    }
    let n: usize = t.shape().iter().product();
    if n != len {
        return Err(fmt(format!("tensor `{name}` has {n} values, expected {len}")));
    }
    Ok(t.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

impl MlpRouterModel {
    /// A router of the right shape and header for `slm_id` (its tokenizer `fingerprint`, hidden
    /// size `hidden_size`) whose constant weights score every token alike, with `calibration`:
    /// for tests and tools where a file's shape, header and checks matter, not what it learned.
    pub fn constant(slm_id: &str, fingerprint: &str, hidden_size: usize, mlp_hidden: usize, calibration: Calibration) -> Result<Self, RouterFileError> {
        let (i, h) = (feature_width(hidden_size), mlp_hidden);
        let meta = RouterMeta {
            format: FORMAT_VERSION,
            slm_id: slm_id.into(),
            tokenizer_fingerprint: fingerprint.into(),
            feature_spec: FEATURE_SPEC.into(),
            feature_width: i,
            mlp_hidden: h,
            calibration,
            confidence_calibration: Calibration::default(),
            training: serde_json::json!({}),
            pooling: None,
        };
        let weights = MlpWeights { mean: vec![0.0; i], std: vec![1.0; i], w1: vec![0.01; i * h], b1: vec![0.0; h], w2: vec![0.5; h], b2: 0.0 };
        Self::new(meta, weights)
    }

    /// Assemble from trained weights (checks shapes and the pooling weight; sets `format` to
    /// [`RouterMeta::format_needed`]).
    pub fn new(mut meta: RouterMeta, weights: MlpWeights) -> Result<Self, RouterFileError> {
        let (i, h) = (meta.feature_width, meta.mlp_hidden);
        let bad = |m: &str| RouterFileError::Format { path: PathBuf::from("<memory>"), message: m.to_string() };
        if meta.pooling.is_some_and(|p| !p.is_valid()) {
            return Err(bad("pooling router_weight must lie in [0, 1]"));
        }
        meta.format = meta.format_needed();
        if weights.mean.len() != i || weights.std.len() != i || weights.w1.len() != i * h || weights.b1.len() != h || weights.w2.len() != h {
            return Err(bad("weight shapes do not match feature_width and mlp_hidden"));
        }
        let inv_std = weights.std.iter().map(|s| if *s > 1e-6 { 1.0 / s } else { 1.0 }).collect();
        Ok(Self { x: Vec::with_capacity(i), h: vec![0.0; h], inv_std, meta, weights })
    }

    /// Load a router file (no compatibility check: see [`MlpRouterModel::check_compatible`]).
    pub fn load(path: &Path) -> Result<Self, RouterFileError> {
        let bytes = std::fs::read(path).map_err(|source| RouterFileError::Io { path: path.to_path_buf(), source })?;
        Self::from_bytes(&bytes, path)
    }

    /// Read a router file's bytes; `path` names where they came from in errors (a file, or the
    /// router built into the binary).
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self, RouterFileError> {
        let fmt = |message: String| RouterFileError::Format { path: path.to_path_buf(), message };
        let header = RouterHeader::from_bytes(bytes).map_err(|e| fmt(e.to_string()))?;
        let meta: RouterMeta = serde_json::from_str(&header.meta_json).map_err(|e| fmt(format!("metadata: {e}")))?;
        if !(1..=FORMAT_VERSION).contains(&meta.format) || meta.format < meta.format_needed() {
            return Err(fmt(format!("format version {} (this build reads 1 to {FORMAT_VERSION}; pooling needs 2)", meta.format)));
        }
        let st = SafeTensors::deserialize(bytes).map_err(|e| fmt(e.to_string()))?;
        let (i, h) = (meta.feature_width, meta.mlp_hidden);
        if i == 0 || h == 0 || i.saturating_mul(h) > 64 << 20 {
            return Err(fmt(format!("implausible sizes: feature_width {i}, mlp_hidden {h}")));
        }
        let weights = MlpWeights {
            mean: f32_tensor(&st, "mean", i, path)?,
            std: f32_tensor(&st, "std", i, path)?,
            w1: f32_tensor(&st, "w1", i * h, path)?,
            b1: f32_tensor(&st, "b1", h, path)?,
            w2: f32_tensor(&st, "w2", h, path)?,
            b2: f32_tensor(&st, "b2", 1, path)?[0],
        };
        if weights.w1.iter().chain(&weights.w2).chain(&weights.mean).chain(&weights.std).any(|v| !v.is_finite()) {
            return Err(fmt("non-finite weights".into()));
        }
        Self::new(meta, weights).map_err(|e| fmt(match e {
            RouterFileError::Format { message, .. } => message,
            other => other.to_string(),
        }))
    }

    /// Write this router to `path` (atomically: a temporary file renamed into place).
    pub fn save(&self, path: &Path) -> Result<(), RouterFileError> {
        let io = |source: std::io::Error| RouterFileError::Io { path: path.to_path_buf(), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let w = &self.weights;
        let (i, h) = (self.meta.feature_width, self.meta.mlp_hidden);
        let b2 = [w.b2];
        let parts: [(&str, &[f32], Vec<usize>); 6] =
            [("mean", &w.mean, vec![i]), ("std", &w.std, vec![i]), ("w1", &w.w1, vec![h, i]), ("b1", &w.b1, vec![h]), ("w2", &w.w2, vec![1, h]), ("b2", &b2, vec![1])];
        let bytes: Vec<(String, Vec<u8>, Vec<usize>)> =
            parts.iter().map(|(n, v, s)| (n.to_string(), v.iter().flat_map(|x| x.to_le_bytes()).collect(), s.clone())).collect();
        let fmt = |message: String| RouterFileError::Format { path: path.to_path_buf(), message };
        let views = bytes
            .iter()
            .map(|(n, b, s)| TensorView::new(Dtype::F32, s.clone(), b).map(|v| (n.clone(), v)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fmt(e.to_string()))?;
        let json = serde_json::to_string(&self.meta).map_err(|e| fmt(e.to_string()))?;
        let meta = HashMap::from([(META_KEY.to_string(), json)]);
        safetensors::serialize_to_file(views, Some(meta), path).map_err(|e| fmt(e.to_string()))
    }

    /// Refuse a router trained for another SLM, tokenizer or feature layout.
    pub fn check_compatible(&self, path: &Path, slm_id: &str, fingerprint: &str, hidden_size: usize) -> Result<(), RouterFileError> {
        let m = &self.meta;
        if m.slm_id != slm_id {
            return Err(RouterFileError::WrongSlm { path: path.into(), trained: m.slm_id.clone(), loaded: slm_id.into() });
        }
        if m.tokenizer_fingerprint != fingerprint {
            return Err(RouterFileError::WrongTokenizer { path: path.into(), trained: m.tokenizer_fingerprint.clone(), loaded: fingerprint.into() });
        }
        if m.feature_spec != FEATURE_SPEC || m.feature_width != feature_width(hidden_size) {
            return Err(RouterFileError::WrongFeatures {
                path: path.into(),
                trained: m.feature_spec.clone(),
                width: m.feature_width,
                ours: FEATURE_SPEC.into(),
                ours_width: feature_width(hidden_size),
            });
        }
        Ok(())
    }

    /// The file's metadata.
    pub fn meta(&self) -> &RouterMeta {
        &self.meta
    }

    /// The weights.
    pub fn weights(&self) -> &MlpWeights {
        &self.weights
    }

    /// Confidence that the SLM's token is good enough (1 = keep it), from one position's
    /// features: the MLP's, pooled with `top_prob` when the file says so. Allocation-free.
    pub fn confidence(&mut self, hidden: &[f32], top_prob: f32, entropy: f32) -> f32 {
        let mlp = self.mlp_confidence(hidden, top_prob, entropy);
        match self.meta.pooling {
            Some(p) => p.pool(mlp, top_prob),
            None => mlp,
        }
    }

    /// The MLP's own confidence, before any pooling.
    pub fn mlp_confidence(&mut self, hidden: &[f32], top_prob: f32, entropy: f32) -> f32 {
        let i = self.meta.feature_width;
        features_into(hidden, top_prob, entropy, &mut self.x);
        if self.x.len() != i {
            return 0.0; // wrong width: treat as unsure (escalate); check_compatible prevents it
        }
        let w = &self.weights;
        for (x, (m, s)) in self.x.iter_mut().zip(w.mean.iter().zip(&self.inv_std)) {
            *x = (*x - m) * s;
        }
        for (j, h) in self.h.iter_mut().enumerate() {
            let row = &w.w1[j * i..(j + 1) * i];
            *h = (dot(row, &self.x) + w.b1[j]).max(0.0);
        }
        let z = dot(&w.w2, &self.h) + w.b2;
        1.0 / (1.0 + (-z).exp())
    }
}

/// Dot product in eight independent lanes, so the compiler vectorises it.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(width: usize, hidden: usize) -> RouterMeta {
        RouterMeta {
            format: FORMAT_VERSION,
            slm_id: "slm-a".into(),
            tokenizer_fingerprint: "fp-a".into(),
            feature_spec: FEATURE_SPEC.into(),
            feature_width: width,
            mlp_hidden: hidden,
            calibration: Calibration::from_confidences(&[0.1, 0.2, 0.3, 0.9], &[0.25, 0.5]),
            confidence_calibration: Calibration::default(),
            training: serde_json::json!({"items": 1}),
            pooling: None,
        }
    }

    fn model() -> MlpRouterModel {
        let (i, h) = (feature_width(3), 4);
        let weights = MlpWeights {
            mean: vec![0.0; i],
            std: vec![1.0; i],
            w1: (0..i * h).map(|k| (k as f32 * 0.37).sin()).collect(),
            b1: vec![0.1; h],
            w2: vec![0.5, -0.25, 1.0, 0.75],
            b2: -0.2,
        };
        MlpRouterModel::new(meta(i, h), weights).unwrap()
    }

    #[test]
    fn save_load_round_trip_scores_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.safetensors");
        let mut a = model();
        a.save(&path).unwrap();
        let mut b = MlpRouterModel::load(&path).unwrap();
        let s = a.confidence(&[0.5, -1.0, 2.0], 0.7, 1.2);
        assert!((0.0..=1.0).contains(&s));
        assert_eq!(s, b.confidence(&[0.5, -1.0, 2.0], 0.7, 1.2));
        assert_eq!(b.meta().slm_id, "slm-a");
    }

    #[test]
    fn a_pooled_router_round_trips_as_format_2_and_scores_its_mlp_pooled_with_top_prob() {
        let plain = model();
        assert_eq!(plain.meta().format, 1, "a plain router stays readable by every build");
        let pooling = ConfidencePooling { router_weight: 0.5 };
        let meta = RouterMeta { pooling: Some(pooling), ..plain.meta().clone() };
        let mut pooled = MlpRouterModel::new(meta, plain.weights().clone()).unwrap();
        assert_eq!(pooled.meta().format, 2);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pooled.safetensors");
        pooled.save(&path).unwrap();
        let mut loaded = MlpRouterModel::load(&path).unwrap();
        assert_eq!(loaded.meta().pooling, Some(pooling));
        let (h, t, e) = ([0.5, -1.0, 2.0], 0.9, 0.4);
        let mlp = loaded.mlp_confidence(&h, t, e);
        assert_eq!(loaded.confidence(&h, t, e), pooling.pool(mlp, t));
        assert_eq!(loaded.confidence(&h, t, e), pooled.confidence(&h, t, e));
        assert_ne!(loaded.confidence(&h, t, e), mlp);
    }

    #[test]
    fn a_pooled_router_marked_format_1_or_with_a_weight_outside_0_to_1_is_refused() {
        let plain = model();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.safetensors");
        plain.save(&path).unwrap();
        // Rewrite the header as an older writer would have: pooling under format 1.
        let bytes = std::fs::read(&path).unwrap();
        let header = RouterHeader::from_bytes(&bytes).unwrap();
        let mut meta: serde_json::Value = serde_json::from_str(&header.meta_json).unwrap();
        meta["pooling"] = serde_json::json!({"router_weight": 0.5});
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let tensors: Vec<(String, TensorView<'_>)> = st.tensors();
        safetensors::serialize_to_file(tensors, Some(HashMap::from([(META_KEY.to_string(), meta.to_string())])), &path).unwrap();
        let e = MlpRouterModel::load(&path).unwrap_err();
        assert!(e.to_string().contains("pooling needs 2"), "{e}");
        let bad = RouterMeta { pooling: Some(ConfidencePooling { router_weight: 1.5 }), ..plain.meta().clone() };
        assert!(MlpRouterModel::new(bad, plain.weights().clone()).is_err());
    }

    #[test]
    fn another_slm_or_tokenizer_is_refused() {
        let m = model();
        let p = Path::new("r.safetensors");
        assert!(m.check_compatible(p, "slm-a", "fp-a", 3).is_ok());
        let e = m.check_compatible(p, "slm-b", "fp-a", 3).unwrap_err();
        assert!(matches!(e, RouterFileError::WrongSlm { .. }), "{e}");
        assert!(e.to_string().contains("slm-a") && e.to_string().contains("slm-b"));
        assert!(matches!(m.check_compatible(p, "slm-a", "fp-b", 3), Err(RouterFileError::WrongTokenizer { .. })));
        assert!(matches!(m.check_compatible(p, "slm-a", "fp-a", 5), Err(RouterFileError::WrongFeatures { .. })));
    }

    #[test]
    fn garbage_and_foreign_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, b"not a router").unwrap();
        assert!(matches!(MlpRouterModel::load(&p), Err(RouterFileError::Format { .. })));
        // A valid safetensors file without our metadata.
        let data = [0u8; 4];
        let v = TensorView::new(Dtype::F32, vec![1], &data).unwrap();
        safetensors::serialize_to_file([("w", v)], None, &p).unwrap();
        let e = MlpRouterModel::load(&p).unwrap_err();
        assert!(e.to_string().contains("not a Duet router"), "{e}");
        assert!(matches!(MlpRouterModel::load(&dir.path().join("missing")), Err(RouterFileError::Io { .. })));
    }

    #[test]
    fn calibration_hits_target_rates() {
        let scores: Vec<f32> = (0..1000).map(|i| i as f32 / 1000.0).collect();
        let cal = Calibration::from_confidences(&scores, &Calibration::default_rates());
        for target in [0.01f32, 0.05, 0.07, 0.1, 0.3] {
            let tau = cal.tau_for_rate(target).unwrap();
            let rate = scores.iter().filter(|&&s| s < tau).count() as f32 / scores.len() as f32;
            assert!((rate - target).abs() < 0.003, "target {target}: tau {tau} gives {rate}");
        }
        assert_eq!(cal.tau_for_rate(0.0).unwrap(), 0.0);
        assert_eq!(cal.tau_for_rate(1.0).unwrap(), 1.0);
        assert!(cal.tau_for_rate(1.5).is_err());
    }
}
