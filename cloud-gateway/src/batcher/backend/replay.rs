//! A backend that answers from a recording of the real LLM (`--replay-answers FILE`, written by
//! `--record-answers`): no model runs, so wrapped in [`super::DelayBackend`] it is a latency
//! model of another LLM deployment (a GPU engine) that still answers with the recorded LLM's
//! tokens. The edge, its router and the network stay real.
//!
//! A draft gets the verdict of the rule every LLM path shares, over the recorded choices
//! ([`answers::replay`]). A context the recording never saw is not invented: it is answered
//! with an error the device falls back on, counted as a miss and logged with the running
//! counts (`replay: no recorded answer`), so a projection says how much of it is real. With
//! greedy decoding, a replay whose answers arrive in time walks the recorded contexts; a device
//! that fell back (a deadline, a miss) walks new ones, and misses follow.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::answers::{self, Choices, Replayed};
use super::{Backend, LlmError, LlmRequest, LlmToken, ModelFacts};

/// Why a recording could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The file could not be read.
    #[error("replaying answers from {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file is not a whole recording within the bounds.
    #[error("replaying answers from {path}: {source}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: answers::AnswersError,
    },
}

/// How a replay went so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayCounts {
    /// Requests asked.
    pub requests: u64,
    /// Requests with no recorded answer (answered with an error).
    pub misses: u64,
    /// Answers cut short: the draft ran past the positions recorded.
    pub short: u64,
}

/// Serves a recording's answers.
pub struct ReplayBackend {
    facts: ModelFacts,
    choices: Choices,
    counts: ReplayCounts,
}

impl ReplayBackend {
    /// Load the recording at `path` (at most [`answers::MAX_RECORDS`] records).
    pub fn open(path: &Path) -> Result<Self, ReplayError> {
        let io = |source| ReplayError::Io { path: path.to_path_buf(), source };
        let max = answers::MAX_HEADER_BYTES + answers::MAX_RECORDS * answers::RECORD_BYTES;
        let mut bytes = Vec::new();
        File::open(path).and_then(|f| f.take(max as u64 + 1).read_to_end(&mut bytes)).map_err(io)?;
        let decoded = answers::decode(&bytes, answers::MAX_RECORDS).map_err(|source| ReplayError::Corrupt { path: path.to_path_buf(), source })?;
        let backend = Self::new(decoded.facts, Choices::new(&decoded.records));
        if backend.choices.conflicts > 0 {
            tracing::warn!(conflicts = backend.choices.conflicts, "the recording holds contexts with two different answers; the first is served");
        }
        tracing::info!(path = %path.display(), contexts = backend.choices.len(), llm = %backend.facts.llm_id, "replaying recorded answers");
        Ok(backend)
    }

    /// Serve `choices` as the model `facts` describes.
    pub fn new(facts: ModelFacts, choices: Choices) -> Self {
        Self { facts, choices, counts: ReplayCounts::default() }
    }

    /// How the replay went so far.
    pub fn counts(&self) -> ReplayCounts {
        self.counts
    }

    fn answer(&mut self, request: &LlmRequest) -> Result<LlmToken, LlmError> {
        self.counts.requests += 1;
        if !request.sampling.is_greedy() {
            self.counts.misses += 1;
            return Err(LlmError::Failed("replay: recorded answers serve greedy decoding only".into()));
        }
        match answers::replay(&self.choices, &request.context, &request.draft) {
            Replayed::Answer { token, short } => {
                self.counts.short += u64::from(short);
                Ok(token)
            }
            Replayed::Miss => {
                self.counts.misses += 1;
                let c = self.counts;
                tracing::warn!(misses = c.misses, requests = c.requests, context = request.context.len(), "replay: no recorded answer");
                Err(LlmError::Failed("replay: no recorded answer for this context".into()))
            }
        }
    }
}

impl Backend for ReplayBackend {
    fn name(&self) -> &str {
        "replay"
    }
    fn facts(&self) -> ModelFacts {
        self.facts.clone()
    }
    fn next_tokens(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>> {
        batch.iter().map(|r| self.answer(r)).collect()
    }
    /// Nothing to bring up: a replay keeps no state per session (its time is the wrapping
    /// delay's).
    fn prefill(&mut self, _request: &LlmRequest, _upto: usize) -> Result<(), LlmError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batcher::backend::answers::{encode_header, encode_record, records_of};
    use crate::sessions::SessionKey;
    use common::sampling::SamplingParams;
    use std::sync::Arc;

    fn facts() -> ModelFacts {
        ModelFacts { llm_id: "llm".into(), tokenizer_fingerprint: "fp".into(), vocab_size: 1000, max_context: 512 }
    }

    fn request(context: &[u32], draft: &[u32]) -> LlmRequest {
        LlmRequest { session: SessionKey { device: Arc::from("d"), session_id: 1 }, context: Arc::from(context), sampling: SamplingParams::default(), seq: 0, draft: Arc::from(draft) }
    }

    fn recorded() -> ReplayBackend {
        let records = records_of(&[1, 2], &[3, 4, 5], &LlmToken { token_id: 9, logprob: -0.25, accepted: 2 });
        ReplayBackend::new(facts(), Choices::new(&records))
    }

    #[test]
    fn a_recorded_context_is_answered_and_an_unknown_one_is_a_counted_miss() {
        let mut b = recorded();
        let out = b.next_tokens(&[request(&[1, 2], &[3, 4, 6]), request(&[1, 2], &[]), request(&[7], &[])]);
        assert_eq!(out[0], Ok(LlmToken { token_id: 9, logprob: -0.25, accepted: 2 }));
        assert_eq!(out[1].as_ref().map(|t| t.token_id), Ok(3));
        assert!(matches!(&out[2], Err(LlmError::Failed(m)) if m.contains("no recorded answer")), "{:?}", out[2]);
        assert_eq!(b.counts(), ReplayCounts { requests: 3, misses: 1, short: 0 });
    }

    #[test]
    fn sampled_requests_are_refused_rather_than_answered_greedily() {
        let mut b = recorded();
        let mut r = request(&[1, 2], &[]);
        r.sampling.temperature = 0.7;
        assert!(b.next_tokens(&[r])[0].is_err());
        assert_eq!(b.counts().misses, 1);
    }

    #[test]
    fn prefill_needs_no_recording() {
        assert_eq!(recorded().prefill(&request(&[8, 8, 8], &[]), 2), Ok(()));
    }

    #[test]
    fn a_file_is_served_with_its_facts_and_a_corrupt_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        let mut bytes = encode_header(&facts());
        for r in records_of(&[1, 2], &[], &LlmToken { token_id: 3, logprob: 0.0, accepted: 0 }) {
            bytes.extend_from_slice(&encode_record(&r));
        }
        std::fs::write(&path, &bytes).unwrap();
        let b = ReplayBackend::open(&path).unwrap();
        assert_eq!(b.facts(), facts());
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let err = ReplayBackend::open(&path).err().expect("refused").to_string();
        assert!(err.contains("trailing bytes") && err.contains("a.bin"), "{err}");
        assert!(ReplayBackend::open(&dir.path().join("none.bin")).is_err());
    }
}
