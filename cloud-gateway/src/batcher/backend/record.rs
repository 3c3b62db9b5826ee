//! A wrapper that writes down what the LLM answered: for every greedy request its inner
//! backend answers, the LLM's choice after the context, and after each draft position it
//! accepted ([`answers::records_of`]), appended to a file a [`super::ReplayBackend`] serves
//! later at another speed (`--record-answers FILE`).
//!
//! The answers pass through unchanged; recording only costs a hash per token and a small
//! write per batch (flushed, so a gateway stopped between batches leaves a whole file). The
//! file is bounded ([`answers::MAX_RECORDS`]): past it the recorder stops writing and says so
//! once. An existing file of the same model is appended to, so one recording can span several
//! gateway runs; one of another model is refused.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::answers;
use super::{Backend, LlmError, LlmRequest, LlmToken, ModelFacts};
use crate::sessions::SessionKey;

/// Why a recording could not start.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file could not be read or written.
    #[error("recording answers to {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file exists and is not a recording this model may append to.
    #[error("recording answers to {path}: {why}")]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// Records the greedy answers of `inner` to a file.
pub struct RecordingBackend<B> {
    inner: B,
    out: BufWriter<File>,
    path: PathBuf,
    /// Contexts already written (each once), bounded by `limit`.
    written: HashSet<u64>,
    limit: usize,
    full_said: bool,
}

impl<B: Backend> RecordingBackend<B> {
    /// Record `inner`'s answers to `path`: a new file, or an existing recording of the same
    /// model (its records are kept and not written twice).
    pub fn create(inner: B, path: &Path) -> Result<Self, RecordError> {
        Self::with_limit(inner, path, answers::MAX_RECORDS)
    }

    /// [`Self::create`] with at most `limit` records in the file.
    pub fn with_limit(inner: B, path: &Path, limit: usize) -> Result<Self, RecordError> {
        let io = |source| RecordError::Io { path: path.to_path_buf(), source };
        let facts = inner.facts();
        let mut written = HashSet::new();
        let existing = match File::open(path) {
            Ok(f) => {
                let mut bytes = Vec::new();
                let max = answers::MAX_HEADER_BYTES + limit.saturating_mul(answers::RECORD_BYTES);
                f.take(max as u64 + 1).read_to_end(&mut bytes).map_err(io)?;
                (!bytes.is_empty()).then_some(bytes)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(e)),
        };
        let refused = |why: String| RecordError::Refused { path: path.to_path_buf(), why };
        if let Some(bytes) = &existing {
            let old = answers::decode(bytes, limit).map_err(|e| refused(e.to_string()))?;
            if old.facts != facts {
                return Err(refused(format!("it holds answers of {} ({:?}), not of {}", old.facts.llm_id, old.facts, facts.llm_id)));
            }
            written.extend(old.records.iter().map(|r| r.key));
        }
        let file = OpenOptions::new().create(true).append(true).open(path).map_err(io)?;
        let mut out = BufWriter::new(file);
        if existing.is_none() {
            out.write_all(&answers::encode_header(&facts)).and_then(|()| out.flush()).map_err(io)?;
        }
        Ok(Self { inner, out, path: path.to_path_buf(), written, limit, full_said: false })
    }

    /// Records in the file so far.
    pub fn records(&self) -> usize {
        self.written.len()
    }

    fn write(&mut self, request: &LlmRequest, answer: &LlmToken) -> std::io::Result<()> {
        for r in answers::records_of(&request.context, &request.draft, answer) {
            if self.written.contains(&r.key) {
                continue;
            }
            if self.written.len() >= self.limit {
                if !self.full_said {
                    tracing::warn!(path = %self.path.display(), limit = self.limit, "the recording is full: later answers are not recorded");
                    self.full_said = true;
                }
                return Ok(());
            }
            self.out.write_all(&answers::encode_record(&r))?;
            self.written.insert(r.key);
        }
        Ok(())
    }
}

impl<B: Backend> Backend for RecordingBackend<B> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn facts(&self) -> ModelFacts {
        self.inner.facts()
    }
    fn next_tokens(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>> {
        let results = self.inner.next_tokens(batch);
        for (request, result) in batch.iter().zip(&results) {
            let Ok(answer) = result else { continue };
            if !request.sampling.is_greedy() {
                continue; // a sampled token is not the function of its context a replay needs
            }
            if let Err(e) = self.write(request, answer) {
                tracing::warn!(path = %self.path.display(), "recording an answer failed: {e}");
            }
        }
        if let Err(e) = self.out.flush() {
            tracing::warn!(path = %self.path.display(), "recording answers failed: {e}");
        }
        results
    }
    fn end_session(&mut self, session: &SessionKey) {
        self.inner.end_session(session)
    }
    fn prefill(&mut self, request: &LlmRequest, upto: usize) -> Result<(), LlmError> {
        self.inner.prefill(request, upto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batcher::backend::answers::{decode, Choices, ContextKey};
    use common::sampling::SamplingParams;
    use std::sync::Arc;

    /// An LLM whose greedy choice after a context is the context's length (so every answer
    /// is different and known).
    struct Counting;
    impl Backend for Counting {
        fn name(&self) -> &str {
            "counting"
        }
        fn facts(&self) -> ModelFacts {
            ModelFacts { llm_id: "counting".into(), tokenizer_fingerprint: "fp".into(), vocab_size: 100_000, max_context: 4096 }
        }
        fn next_tokens(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>> {
            batch.iter().map(|r| Ok(LlmToken { token_id: r.context.len() as u32, logprob: -0.5, accepted: 0 })).collect()
        }
    }

    fn request(context: &[u32]) -> LlmRequest {
        LlmRequest {
            session: SessionKey { device: Arc::from("d"), session_id: 1 },
            context: Arc::from(context),
            sampling: SamplingParams::default(),
            seq: 0,
            draft: Arc::from([]),
        }
    }

    #[test]
    fn the_file_holds_the_models_facts_and_each_context_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("answers.bin");
        let mut rec = RecordingBackend::create(Counting, &path).unwrap();
        rec.next_tokens(&[request(&[1, 2]), request(&[1, 2, 3])]);
        rec.next_tokens(&[request(&[1, 2])]);
        let d = decode(&std::fs::read(&path).unwrap(), 10).unwrap();
        assert_eq!(d.facts, Counting.facts());
        assert_eq!(d.records.len(), 2, "the repeated context is written once");
        let c = Choices::new(&d.records);
        assert_eq!(c.get(ContextKey::of(&[1, 2, 3])).map(|x| x.0), Some(3));
    }

    #[test]
    fn the_recording_stops_at_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("answers.bin");
        let mut rec = RecordingBackend::with_limit(Counting, &path, 3).unwrap();
        for n in 1..10u32 {
            let ctx: Vec<u32> = (0..n).collect();
            assert!(rec.next_tokens(&[request(&ctx)])[0].is_ok(), "answers pass through a full recording");
        }
        assert_eq!(rec.records(), 3);
        assert_eq!(decode(&std::fs::read(&path).unwrap(), 3).unwrap().records.len(), 3);
    }

    #[test]
    fn an_existing_recording_of_the_model_is_appended_to_and_another_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("answers.bin");
        RecordingBackend::create(Counting, &path).unwrap().next_tokens(&[request(&[1])]);
        let mut again = RecordingBackend::create(Counting, &path).unwrap();
        assert_eq!(again.records(), 1);
        again.next_tokens(&[request(&[1]), request(&[2, 2])]);
        assert_eq!(decode(&std::fs::read(&path).unwrap(), 10).unwrap().records.len(), 2);
        std::fs::write(&path, b"not a recording").unwrap();
        let err = RecordingBackend::create(Counting, &path).err().expect("refused").to_string();
        assert!(err.contains("DUETANS1"), "{err}");
    }

    #[test]
    fn sampled_answers_are_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("answers.bin");
        let mut rec = RecordingBackend::create(Counting, &path).unwrap();
        let mut sampled = request(&[4, 5]);
        sampled.sampling.temperature = 0.8;
        rec.next_tokens(&[sampled]);
        assert_eq!(rec.records(), 0);
    }
}
