//! The process-wide ONNX Runtime environment.
//!
//! `ort` is built with `load-dynamic`: the shared library is found at start-up rather than
//! downloaded at build time. Resolving it here, once, turns "library missing" into an error
//! that names the fix instead of a panic at first use.

use std::path::PathBuf;
use std::sync::OnceLock;

use ort::environment::Environment;

use super::RuntimeError;
use crate::model_files::{duet_home, PREPARE_COMMAND};

static ENVIRONMENT: OnceLock<Result<Environment, String>> = OnceLock::new();

/// Where the ONNX Runtime shared library is looked for: `ORT_DYLIB_PATH`, else
/// `$DUET_HOME/lib/libonnxruntime.so` (written by `deploy/models/prepare runtime`).
pub fn ort_library_path() -> PathBuf {
    match std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => duet_home().join("lib").join("libonnxruntime.so"),
    }
}

/// The one ONNX Runtime environment of this process, created on first use.
pub fn environment() -> Result<&'static Environment, RuntimeError> {
    let env = ENVIRONMENT.get_or_init(|| {
        let path = ort_library_path();
        if !path.exists() {
            return Err(format!(
                "ONNX Runtime library not found at {}; run `{PREPARE_COMMAND} runtime` or set ORT_DYLIB_PATH to a libonnxruntime.so >= 1.31",
                path.display()
            ));
        }
        let builder = ort::init_from(&path).map_err(|e| format!("loading ONNX Runtime from {}: {e}", path.display()))?;
        builder.with_name("duet").with_telemetry(false).build().map_err(|e| format!("creating the ONNX Runtime environment: {e}"))
    });
    env.as_ref().map_err(|e| RuntimeError::Environment(e.clone()))
}
