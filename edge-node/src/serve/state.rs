//! What every request handler shares: the worker's queue, the tokenizer, the defaults a
//! request falls back on and the link's status. Built once by `serve`, read by the routes
//! (`http`) and the handlers.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use model_runtime::tokenizer::Tokenizer;
use tokio::sync::mpsc;

use super::worker::{Job, Mode};
use edge_node::args::RateControlMode;
use edge_node::decode::RateControl;
use edge_node::routing::router_file::Calibration;

/// What every handler shares.
pub struct AppState {
    /// The worker's queue.
    pub jobs: mpsc::Sender<Job>,
    /// The SLM's tokenizer (prompts are tokenized here, off the worker).
    pub tok: Arc<Tokenizer>,
    /// The model id `/v1/models` lists.
    pub model_id: String,
    /// The SLM's context, prompt and answer together.
    pub max_context: usize,
    /// Default `max_tokens`.
    pub default_max_tokens: usize,
    /// Tokens one request may generate at most, all its choices together.
    pub max_request_tokens: usize,
    /// Mode when a request does not say.
    pub default_mode: Mode,
    /// Threshold when a request gives neither `tau` nor `escalation_rate`.
    pub default_tau: f32,
    /// The rate controller such a request starts from (when the default is a rate).
    pub default_rate_control: Option<RateControl>,
    /// `--rate-control`: whether a requested rate is steered toward.
    pub rate_mode: RateControlMode,
    /// The router file's rate → tau table, if a trained router is loaded.
    pub calibration: Option<Calibration>,
    /// Whether a gateway is configured (routed and cloud modes need one).
    pub has_gateway: bool,
    /// The gateway's address and the link to it, for `/v1/duet/status`.
    pub gateway: Option<(String, edge_node::link::Link)>,
    /// The Prometheus text of `/metrics`.
    pub prometheus: Option<PrometheusHandle>,
    /// Numbers response ids.
    pub next_id: AtomicU64,
}
