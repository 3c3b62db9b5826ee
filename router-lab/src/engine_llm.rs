//! The LLM served by an engine (`--llm-engine KIND=URL`: SGLang, vLLM or llama-server), as the
//! lab's teacher ([`crate::teacher::Teacher`]) and as the evaluation's cloud
//! ([`EngineCloud`], an `edge_node::decode::Cloud`).
//!
//! It goes through the engine client the gateway's pool uses (`engine_client`): the same
//! dialects, HTTP client and start-up checks (healthy, and the devices' vocabulary, so its
//! token ids mean what the SLM's do), so a label or an evaluated answer asks the engine exactly
//! what a served escalation asks. The labels' prompt choices are that crate's lab-only
//! extension ([`engine_client::prompt_choices`]).
//!
//! The client lives on a runtime of its own with one worker thread: the lab's loops are
//! synchronous or run on short-lived single-threaded runtimes, and the HTTP connections the
//! client keeps must make progress whichever runtime waits for an answer.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use engine_client::connect::{connect_single, expected_vocabulary};
use engine_client::prompt_choices::ChoicesClient;
use engine_client::{EngineError, EngineSpec, NextTokenRequest, PromptChoice, PromptChoicesRequest};
use edge_node::decode::{Cloud, CloudAnswer};


/// How long to wait for the engine to become healthy at start.
const CONNECT_WAIT: Duration = Duration::from_secs(120);
/// Longest engine call: a whole sequence's prompt logprobs on a loaded engine, or one step.
const CALL_TIMEOUT: Duration = Duration::from_secs(600);
/// The llama.cpp slot the per-position requests are pinned to (each prefills one token on the
/// slot's cached prefix); SGLang and vLLM ignore it.
const SLOT: u32 = 0;

/// An engine serving the LLM, checked against the devices' tokenizer.
pub struct EngineLlm {
    client: ChoicesClient,
    id: String,
    vocab_size: usize,
    rt: tokio::runtime::Runtime,
}

impl EngineLlm {
    /// Connect to `spec` and check it serves the vocabulary of `tokenizer_json` (the SLM's).
    pub fn connect(spec: &EngineSpec, tokenizer_json: &Path) -> anyhow::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        let expected = expected_vocabulary(tokenizer_json)?;
        let (client, model) = rt.block_on(connect_single(spec, &expected, CONNECT_WAIT)).with_context(|| format!("--llm-engine {spec}"))?;
        let name = model.id.rsplit('/').next().unwrap_or(&model.id);
        Ok(Self { client, id: format!("{}:{name}", spec.kind), vocab_size: expected.vocab_size, rt })
    }

    /// `KIND:model` (the engine's kind and the model it names), e.g.
    /// `llamacpp:qwen2.5-coder-1.5b-instruct.gguf`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The greedy token after `context`, as an escalation asks for it.
    pub async fn next_token(&self, context: Vec<u32>) -> Result<u32, EngineError> {
        let client = self.client.clone();
        let vocab_size = self.vocab_size;
        let call = async move {
            let sampling = Default::default();
            let request = NextTokenRequest { context: &context, sampling: &sampling, seed: None, max_new_tokens: 1, top_logprobs: 0, slot: Some(SLOT) };
            let id = client.client().next_token(&request, CALL_TIMEOUT).await?.tokens[0].id;
            if id as usize >= vocab_size {
                return Err(EngineError::TokenOutOfVocabulary { id, vocab_size });
            }
            Ok(id)
        };
        self.rt.spawn(call).await.map_err(|e| EngineError::Transport(format!("engine task: {e}")))?
    }
}

impl EngineLlm {
    /// The engine's choice at each position from `first` on of each row `(tokens, first)`, with
    /// its runner-up if asked: row by row, each one request (SGLang, vLLM) or one per position
    /// (llama-server). What the lab's teacher asks ([`crate::teacher::Teacher`]).
    pub fn choices(&mut self, rows: &[(&[u32], usize)], runner_up: bool) -> anyhow::Result<Vec<Vec<PromptChoice>>> {
        let mut out = Vec::with_capacity(rows.len());
        for &(tokens, first) in rows {
            let request = PromptChoicesRequest { tokens, first, runner_up, slot: Some(SLOT) };
            let choices = self.rt.block_on(self.client.prompt_choices(&request, CALL_TIMEOUT)).with_context(|| format!("{}: choices for {} positions", self.id, request.positions().len()))?;
            let ids = choices.iter().flat_map(|c| std::iter::once(c.best).chain(c.runner_up));
            if let Some(bad) = ids.map(|t| t.id).find(|&id| id as usize >= self.vocab_size) {
                bail!("{} chose token id {bad}, outside the devices' vocabulary of {}", self.id, self.vocab_size);
            }
            out.push(choices);
        }
        Ok(out)
    }
}

/// The engine as the evaluation's cloud (greedy, memoised by context like the in-process one):
/// every escalation is answered, or the run fails with the engine's error.
pub struct EngineCloud<'a> {
    llm: &'a EngineLlm,
    memo: HashMap<Vec<u32>, u32>,
    requests: usize,
    error: Option<EngineError>,
}

impl<'a> EngineCloud<'a> {
    /// A cloud over `llm`.
    pub fn new(llm: &'a EngineLlm) -> Self {
        Self { llm, memo: HashMap::new(), requests: 0, error: None }
    }

    /// Forget the memo (a new item).
    pub fn clear(&mut self) {
        self.memo.clear();
    }

    /// Engine requests made so far.
    pub fn requests(&self) -> usize {
        self.requests
    }

    /// The error that made an escalation fall back, if any (taken).
    pub fn take_error(&mut self) -> Option<EngineError> {
        self.error.take()
    }
}

impl Cloud for EngineCloud<'_> {
    async fn escalate(&mut self, context: &[u32]) -> CloudAnswer {
        if let Some(&t) = self.memo.get(context) {
            return CloudAnswer::Token(t);
        }
        self.requests += 1;
        match self.llm.next_token(context.to_vec()).await {
            Ok(t) => {
                self.memo.insert(context.to_vec(), t);
                CloudAnswer::Token(t)
            }
            Err(e) => {
                // The loop takes no error from a cloud; the run reports it afterwards.
                self.error = Some(e);
                CloudAnswer::Fallback(common::exchange::FallbackReason::GatewayError)
            }
        }
    }
}
