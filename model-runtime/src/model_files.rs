//! Where prepared models live on disk and what `deploy/models/prepare` wrote about them.
//!
//! Models are prepared once, outside the repository, under `$DUET_HOME` (default
//! `~/.cache/duet`). Every error here names the command that fixes it, because the usual cause
//! is a model that was never prepared or a preparation that was interrupted.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The command that prepares models; quoted in every "missing file" error.
pub const PREPARE_COMMAND: &str = "deploy/models/prepare";

/// Id of the default edge model (SLM).
pub const DEFAULT_SLM: &str = "qwen2.5-coder-0.5b-instruct";
/// Id of the default cloud model (LLM).
pub const DEFAULT_LLM: &str = "qwen2.5-coder-1.5b-instruct";
/// Id of the tiny random model that tests use.
pub const TINY_MODEL: &str = "tiny-qwen2";

/// Problems finding or reading prepared model files.
#[derive(Debug, thiserror::Error)]
pub enum ModelFilesError {
    /// A directory or file the model needs is not there.
    #[error("model files missing: {path} does not exist; prepare the models with `{cmd}{arg}` (DUET_HOME={home})", cmd = PREPARE_COMMAND)]
    Missing { path: PathBuf, arg: String, home: String },
    /// The manifest exists but cannot be parsed.
    #[error("model manifest {path} is unreadable ({source}); re-run `{cmd}`", cmd = PREPARE_COMMAND)]
    BadManifest { path: PathBuf, source: serde_json::Error },
    /// Some other I/O failure.
    #[error("reading {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// `duet-model.json`: what the preparation step recorded about one ONNX model.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelManifest {
    /// Stable model id, e.g. `qwen2.5-coder-0.5b-instruct`; sent in protocol handshakes.
    pub id: String,
    /// Where the weights came from.
    #[serde(default)]
    pub source: String,
    /// Weight quantization (`int4` or `int8`).
    pub precision: String,
    /// Transformer layers, i.e. KV-cache pairs.
    pub num_layers: usize,
    /// Key/value heads per layer (grouped-query attention).
    pub num_kv_heads: usize,
    /// Size of one attention head.
    pub head_size: usize,
    /// Width of the final hidden state (the router's input).
    pub hidden_size: usize,
    /// Vocabulary size (logits width).
    pub vocab_size: usize,
    /// Maximum context the model was trained for.
    pub context_length: usize,
    /// Tokens that end generation.
    pub eos_token_ids: Vec<u32>,
    /// Tokenizer fingerprint (see [`crate::tokenizer::fingerprint`]).
    pub tokenizer_fingerprint: String,
}

/// Paths of one prepared model.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// The model directory.
    pub dir: PathBuf,
    /// `model.onnx` (its weights sit beside it in `model.onnx.data`).
    pub onnx: PathBuf,
    /// HF `tokenizer.json`.
    pub tokenizer: PathBuf,
    /// Parsed `duet-model.json`.
    pub manifest: ModelManifest,
}

/// `$DUET_HOME`, or `~/.cache/duet`.
pub fn duet_home() -> PathBuf {
    if let Some(h) = std::env::var_os("DUET_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("duet")
}

/// The prepare argument that produces a model id, for error messages: the pinned models' step,
/// or, for any other name, `add NAME --from PATH` (your own model, converted the same way).
fn prepare_arg(model: &str) -> String {
    match model {
        DEFAULT_SLM => " slm".into(),
        DEFAULT_LLM => " llm".into(),
        TINY_MODEL => " slm tiny".into(),
        m if !m.is_empty() && !m.contains('/') => format!(" add {m} --from PATH"),
        _ => String::new(),
    }
}

impl ModelFiles {
    /// Resolve a model given as a directory path or as a prepared model id under `$DUET_HOME/models`.
    pub fn locate(model: &str) -> Result<Self, ModelFilesError> {
        let as_path = Path::new(model);
        let dir = if as_path.is_dir() || model.contains('/') {
            as_path.to_path_buf()
        } else {
            duet_home().join("models").join(model)
        };
        Self::open(&dir, &prepare_arg(model))
    }

    /// Open a model directory and check that every file is present.
    pub fn open(dir: &Path, prepare_arg: &str) -> Result<Self, ModelFilesError> {
        let missing = |path: PathBuf| ModelFilesError::Missing {
            path,
            arg: prepare_arg.to_string(),
            home: duet_home().display().to_string(),
        };
        let manifest_path = dir.join("duet-model.json");
        for p in [dir.to_path_buf(), manifest_path.clone(), dir.join("model.onnx"), dir.join("model.onnx.data"), dir.join("tokenizer.json")] {
            if !p.exists() {
                return Err(missing(p));
            }
        }
        let text = std::fs::read_to_string(&manifest_path).map_err(|source| ModelFilesError::Io { path: manifest_path.clone(), source })?;
        let manifest = serde_json::from_str(&text).map_err(|source| ModelFilesError::BadManifest { path: manifest_path, source })?;
        Ok(Self { onnx: dir.join("model.onnx"), tokenizer: dir.join("tokenizer.json"), dir: dir.to_path_buf(), manifest })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_model_names_the_prepare_command() {
        let dir = tempfile::tempdir().unwrap();
        let err = ModelFiles::open(&dir.path().join("nope"), " slm").unwrap_err().to_string();
        assert!(err.contains("deploy/models/prepare slm"), "{err}");
    }

    #[test]
    fn any_name_resolves_under_duet_home_and_a_missing_one_says_how_to_add_it() {
        // Names are not restricted to the pinned models: `prepare add NAME` writes
        // $DUET_HOME/models/NAME and every --model/--slm/--llm resolves it here.
        let err = ModelFiles::locate("my-own-model-that-is-not-there").unwrap_err().to_string();
        assert!(err.contains("models/my-own-model-that-is-not-there"), "{err}");
        assert!(err.contains("deploy/models/prepare add my-own-model-that-is-not-there --from PATH"), "{err}");
        assert_eq!(prepare_arg(DEFAULT_SLM), " slm");
        assert_eq!(prepare_arg("./some/dir"), "");
    }

    #[test]
    fn partial_model_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("duet-model.json"), "{}").unwrap();
        std::fs::write(dir.path().join("model.onnx"), b"x").unwrap();
        let err = ModelFiles::open(dir.path(), "").unwrap_err().to_string();
        assert!(err.contains("model.onnx.data") && err.contains(PREPARE_COMMAND), "{err}");
    }

    #[test]
    fn corrupt_manifest_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["model.onnx", "model.onnx.data", "tokenizer.json"] {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        std::fs::write(dir.path().join("duet-model.json"), "{not json").unwrap();
        let err = ModelFiles::open(dir.path(), "").unwrap_err();
        assert!(matches!(err, ModelFilesError::BadManifest { .. }), "{err}");
    }
}
