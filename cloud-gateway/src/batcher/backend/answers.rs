//! Recorded LLM answers: the file a [`super::RecordingBackend`] writes and a
//! [`super::ReplayBackend`] serves, and the rule that answers a request from it.
//!
//! Why: a projection of what a faster LLM would give (a GPU engine, modelled by
//! [`super::DelayBackend`]'s service time) must still answer with the LLM's real tokens, or the
//! edge would walk other texts than it would with that LLM. Greedy decoding is deterministic, so
//! the LLM's choice after a context is a function of the context: recorded once with the real
//! model (slowly, with deadlines long enough for every answer), it can be served again at any
//! speed. A context is keyed by a 64-bit FNV-1a hash of its token ids, extended token by token,
//! so the key of every draft position follows from the context's in one step each.
//!
//! The file is input to a gateway, so it is read with bounds and refused with a clear error
//! when it is not one (see [`decode`]). Layout, little-endian:
//!
//! ```text
//! b"DUETANS1"  vocab_size: u32  max_context: u32
//! llm_id: u16 length + UTF-8   tokenizer_fingerprint: u16 length + UTF-8
//! records: (context hash: u64, token: u32, logprob: f32) ...   (16 bytes each, appended)
//! ```

use std::collections::HashMap;

use super::{LlmToken, ModelFacts};
use crate::dispatch::draft::verify_draft;

/// The file's first bytes.
pub const MAGIC: &[u8; 8] = b"DUETANS1";
/// Bytes of one record.
pub const RECORD_BYTES: usize = 16;
/// Most records a file may hold (16 MiB): far more than a benchmark's escalations and draft
/// positions, and a bound on what a replaying gateway loads.
pub const MAX_RECORDS: usize = 1 << 20;
/// Longest model id or tokenizer fingerprint in a header, bytes.
const MAX_NAME_BYTES: usize = 1024;

/// The running key of a token context: FNV-1a over the tokens' little-endian bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextKey(u64);

impl ContextKey {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// The key of `tokens`.
    pub fn of(tokens: &[u32]) -> Self {
        tokens.iter().fold(Self(Self::OFFSET), |k, &t| k.then(t))
    }

    /// The key of this context followed by `token`.
    pub fn then(self, token: u32) -> Self {
        Self(token.to_le_bytes().iter().fold(self.0, |h, &b| (h ^ u64::from(b)).wrapping_mul(Self::PRIME)))
    }

    /// The key as stored.
    pub fn value(self) -> u64 {
        self.0
    }
}

/// One recorded choice: the LLM's greedy token after the context whose key this is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record {
    /// Key of the context.
    pub key: u64,
    /// The LLM's token after it.
    pub token: u32,
    /// Its log-probability (0 where the recorder did not know it: a draft token the LLM
    /// accepted).
    pub logprob: f32,
}

/// Why a file of answers was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswersError {
    /// It does not start with [`MAGIC`].
    #[error("not a file of recorded answers (it does not start with DUETANS1)")]
    BadMagic,
    /// The header ends early or holds a name that is too long or not UTF-8.
    #[error("corrupt header: {0}")]
    BadHeader(&'static str),
    /// The records do not end on a record boundary (a recording cut off mid-write).
    #[error("corrupt records: {0} trailing bytes after the last whole record")]
    Truncated(usize),
    /// More records than [`MAX_RECORDS`] (or the reader's limit).
    #[error("{records} records exceed the limit of {limit}")]
    TooMany {
        /// Records in the file.
        records: usize,
        /// The limit.
        limit: usize,
    },
    /// A recorded token outside the recorded vocabulary.
    #[error("corrupt record {index}: token {token} is outside the vocabulary ({vocab})")]
    BadToken {
        /// Which record.
        index: usize,
        /// Its token.
        token: u32,
        /// The vocabulary size of the header.
        vocab: usize,
    },
}

/// The header: the facts of the model that answered.
pub fn encode_header(facts: &ModelFacts) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&u32::try_from(facts.vocab_size).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&u32::try_from(facts.max_context).unwrap_or(u32::MAX).to_le_bytes());
    for name in [&facts.llm_id, &facts.tokenizer_fingerprint] {
        let bytes = &name.as_bytes()[..name.len().min(MAX_NAME_BYTES)];
        out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// One record's bytes.
pub fn encode_record(r: &Record) -> [u8; RECORD_BYTES] {
    let mut out = [0u8; RECORD_BYTES];
    out[..8].copy_from_slice(&r.key.to_le_bytes());
    out[8..12].copy_from_slice(&r.token.to_le_bytes());
    out[12..].copy_from_slice(&r.logprob.to_le_bytes());
    out
}

/// A decoded file: the model's facts and its records in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The facts of the model that answered.
    pub facts: ModelFacts,
    /// Every record, in the order written.
    pub records: Vec<Record>,
}

/// Decode a file's bytes, refusing anything that is not a whole file of at most `limit`
/// records whose tokens are inside the recorded vocabulary.
pub fn decode(bytes: &[u8], limit: usize) -> Result<Decoded, AnswersError> {
    let rest = bytes.strip_prefix(MAGIC.as_slice()).ok_or(AnswersError::BadMagic)?;
    let (vocab, rest) = take_u32(rest).ok_or(AnswersError::BadHeader("no vocabulary size"))?;
    let (max_context, rest) = take_u32(rest).ok_or(AnswersError::BadHeader("no context limit"))?;
    let (llm_id, rest) = take_name(rest)?;
    let (tokenizer_fingerprint, rest) = take_name(rest)?;
    if rest.len() % RECORD_BYTES != 0 {
        return Err(AnswersError::Truncated(rest.len() % RECORD_BYTES));
    }
    let count = rest.len() / RECORD_BYTES;
    if count > limit {
        return Err(AnswersError::TooMany { records: count, limit });
    }
    let vocab = vocab as usize;
    let mut records = Vec::with_capacity(count);
    for (index, chunk) in rest.chunks_exact(RECORD_BYTES).enumerate() {
        let word = |i: usize| [chunk[i], chunk[i + 1], chunk[i + 2], chunk[i + 3]];
        let key = u64::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3], chunk[4], chunk[5], chunk[6], chunk[7]]);
        let token = u32::from_le_bytes(word(8));
        if token as usize >= vocab {
            return Err(AnswersError::BadToken { index, token, vocab });
        }
        records.push(Record { key, token, logprob: f32::from_le_bytes(word(12)) });
    }
    let facts = ModelFacts { llm_id, tokenizer_fingerprint, vocab_size: vocab, max_context: max_context as usize };
    Ok(Decoded { facts, records })
}

/// Bytes a header takes at most: where a reader stops before trusting the rest.
pub const MAX_HEADER_BYTES: usize = MAGIC.len() + 8 + 2 * (2 + MAX_NAME_BYTES);

fn take_u32(b: &[u8]) -> Option<(u32, &[u8])> {
    let (head, rest) = b.split_first_chunk::<4>()?;
    Some((u32::from_le_bytes(*head), rest))
}

fn take_name(b: &[u8]) -> Result<(String, &[u8]), AnswersError> {
    let (len, rest) = b.split_first_chunk::<2>().ok_or(AnswersError::BadHeader("a name's length is missing"))?;
    let len = usize::from(u16::from_le_bytes(*len));
    if len > MAX_NAME_BYTES {
        return Err(AnswersError::BadHeader("a name is longer than 1024 bytes"));
    }
    if rest.len() < len {
        return Err(AnswersError::BadHeader("a name is cut off"));
    }
    let name = std::str::from_utf8(&rest[..len]).map_err(|_| AnswersError::BadHeader("a name is not UTF-8"))?;
    Ok((name.to_string(), &rest[len..]))
}

/// The records of a file by key. The first record of a key wins (a recording that saw the
/// same context twice wrote it once; a later different token, which greedy decoding does not
/// produce, is counted in `conflicts`).
#[derive(Debug, Clone, Default)]
pub struct Choices {
    by_key: HashMap<u64, (u32, f32)>,
    /// Records whose key was already present with another token.
    pub conflicts: usize,
}

impl Choices {
    /// Index `records`.
    pub fn new(records: &[Record]) -> Self {
        let mut c = Self::default();
        for r in records {
            match c.by_key.get(&r.key) {
                Some(&(token, _)) if token != r.token => c.conflicts += 1,
                Some(_) => {}
                None => {
                    c.by_key.insert(r.key, (r.token, r.logprob));
                }
            }
        }
        c
    }

    /// Distinct contexts known.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The recorded choice after the context keyed `key`.
    pub fn get(&self, key: ContextKey) -> Option<(u32, f32)> {
        self.by_key.get(&key.value()).copied()
    }
}

/// What the recording says about one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Replayed {
    /// The LLM's answer, as the shared draft rule gives it from recorded choices. `short`: the
    /// recording knew fewer draft positions than the rule would have read, so the answer stops
    /// at the last one known (still the LLM's token there, with fewer accepted).
    Answer {
        /// The answer.
        token: LlmToken,
        /// Whether the recording ran out of positions.
        short: bool,
    },
    /// No choice is recorded after the context itself: nothing true can be answered.
    Miss,
}

/// Answer `context` + `draft` from `choices`: the draft rule of every LLM path
/// ([`verify_draft`]) over the recorded choice at each position it reads.
pub fn replay(choices: &Choices, context: &[u32], draft: &[u32]) -> Replayed {
    let mut key = ContextKey::of(context);
    let mut known = Vec::with_capacity(draft.len() + 1);
    for j in 0..=draft.len() {
        let Some(choice) = choices.get(key) else { break };
        known.push(choice);
        if j < draft.len() {
            if choice.0 != draft[j] {
                break; // the rule reads no further than the first difference
            }
            key = key.then(draft[j]);
        }
    }
    if known.is_empty() {
        return Replayed::Miss;
    }
    let short = known.len() <= draft.len() && known.last().is_some_and(|&(t, _)| draft.get(known.len() - 1) == Some(&t));
    match verify_draft::<std::convert::Infallible>(draft, known.len(), |j| Ok(known[j])) {
        Ok(token) => Replayed::Answer { token, short },
        Err(never) => match never {},
    }
}

/// The records one answer teaches: the choice after the context at each draft position the
/// LLM accepted (the draft's token), and its answer after them.
pub fn records_of(context: &[u32], draft: &[u32], answer: &LlmToken) -> Vec<Record> {
    let mut key = ContextKey::of(context);
    let accepted = (answer.accepted as usize).min(draft.len());
    let mut out = Vec::with_capacity(accepted + 1);
    for &t in &draft[..accepted] {
        out.push(Record { key: key.value(), token: t, logprob: 0.0 });
        key = key.then(t);
    }
    out.push(Record { key: key.value(), token: answer.token_id, logprob: answer.logprob });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn facts() -> ModelFacts {
        ModelFacts { llm_id: "qwen-test".into(), tokenizer_fingerprint: "abc123".into(), vocab_size: 1000, max_context: 4096 }
    }

    fn file(records: &[Record]) -> Vec<u8> {
        let mut b = encode_header(&facts());
        for r in records {
            b.extend_from_slice(&encode_record(r));
        }
        b
    }

    /// Choices of an LLM that, after `context`, would write `llm` (one per position).
    fn llm(context: &[u32], tokens: &[u32]) -> Choices {
        let mut records = Vec::new();
        let mut key = ContextKey::of(context);
        for (i, &t) in tokens.iter().enumerate() {
            records.push(Record { key: key.value(), token: t, logprob: -(i as f32) });
            key = key.then(t);
        }
        Choices::new(&records)
    }

    fn answer(r: Replayed) -> (u32, u32, bool) {
        match r {
            Replayed::Answer { token, short } => (token.accepted, token.token_id, short),
            Replayed::Miss => panic!("a miss"),
        }
    }

    #[test]
    fn the_key_of_a_context_extended_is_the_key_of_the_longer_context() {
        assert_eq!(ContextKey::of(&[1, 2]).then(3), ContextKey::of(&[1, 2, 3]));
        assert_ne!(ContextKey::of(&[1, 2, 3]), ContextKey::of(&[3, 2, 1]), "order matters");
        assert_ne!(ContextKey::of(&[0]), ContextKey::of(&[]), "a zero token still counts");
    }

    #[test]
    fn a_plain_escalation_gets_the_recorded_choice() {
        let c = llm(&[7, 8], &[5]);
        assert_eq!(answer(replay(&c, &[7, 8], &[])), (0, 5, false));
    }

    #[test]
    fn a_draft_the_llm_would_write_is_accepted_whole_with_the_bonus_after_it() {
        let c = llm(&[7, 8], &[5, 6, 7, 9]);
        assert_eq!(answer(replay(&c, &[7, 8], &[5, 6, 7])), (3, 9, false));
    }

    #[test]
    fn a_draft_rejected_at_its_first_token_gets_the_llms_token_there() {
        let c = llm(&[7, 8], &[5, 6, 7, 9]);
        assert_eq!(answer(replay(&c, &[7, 8], &[4, 6, 7])), (0, 5, false));
    }

    #[test]
    fn a_draft_rejected_in_the_middle_keeps_the_agreed_prefix_and_gets_the_correction() {
        let c = llm(&[7, 8], &[5, 6, 7, 9]);
        assert_eq!(answer(replay(&c, &[7, 8], &[5, 6, 1, 2])), (2, 7, false));
    }

    #[test]
    fn a_context_never_recorded_is_a_miss_not_an_invented_answer() {
        let c = llm(&[7, 8], &[5, 6]);
        assert_eq!(replay(&c, &[7, 9], &[]), Replayed::Miss);
        assert_eq!(replay(&c, &[7, 9], &[5, 6]), Replayed::Miss);
    }

    #[test]
    fn a_draft_longer_than_the_recording_stops_at_the_last_position_known() {
        // Recorded: 5 then 6 after [7, 8]; nothing after [7, 8, 5, 6].
        let c = llm(&[7, 8], &[5, 6]);
        assert_eq!(answer(replay(&c, &[7, 8], &[5, 6, 7])), (1, 6, true), "the LLM's token at the last known position: the draft's own");
        assert_eq!(answer(replay(&c, &[7, 8], &[5, 1, 7])), (1, 6, false), "a difference before the end is a full verdict");
    }

    #[test]
    fn what_an_answer_teaches_replays_as_that_answer() {
        let (ctx, draft) = ([3u32, 4], [10u32, 11, 12, 13]);
        let real = LlmToken { token_id: 99, logprob: -0.5, accepted: 2 };
        let records = records_of(&ctx, &draft, &real);
        assert_eq!(records.len(), 3, "two accepted draft positions and the correction");
        let c = Choices::new(&records);
        match replay(&c, &ctx, &draft) {
            Replayed::Answer { token, short } => assert_eq!((token, short), (real, false)),
            Replayed::Miss => panic!("a miss"),
        }
        assert_eq!(answer(replay(&c, &ctx, &[])), (0, 10, false), "the hard position alone: the first draft token");
        assert_eq!(answer(replay(&c, &[3, 4, 10, 11], &[])), (0, 99, false), "the correction's position asked alone");
    }

    #[test]
    fn the_first_record_of_a_context_wins_and_conflicts_are_counted() {
        let r = |token| Record { key: 1, token, logprob: 0.0 };
        let c = Choices::new(&[r(5), r(5), r(6)]);
        assert_eq!((c.len(), c.conflicts, c.get(ContextKey(1)).map(|x| x.0)), (1, 1, Some(5)));
    }

    #[test]
    fn a_file_round_trips_its_facts_and_records() {
        let records = vec![Record { key: 42, token: 7, logprob: -1.25 }, Record { key: u64::MAX, token: 999, logprob: 0.0 }];
        let d = decode(&file(&records), MAX_RECORDS).unwrap();
        assert_eq!((d.facts, d.records), (facts(), records));
    }

    #[test]
    fn a_corrupt_file_is_refused_with_what_is_wrong() {
        let good = file(&[Record { key: 1, token: 2, logprob: 0.0 }]);
        assert_eq!(decode(b"hello world", 10), Err(AnswersError::BadMagic));
        assert!(matches!(decode(&good[..10], 10), Err(AnswersError::BadHeader(_))));
        assert_eq!(decode(&good[..good.len() - 3], 10), Err(AnswersError::Truncated(13)));
        assert_eq!(decode(&good, 0), Err(AnswersError::TooMany { records: 1, limit: 0 }));
        let outside = file(&[Record { key: 1, token: 1000, logprob: 0.0 }]);
        assert!(matches!(decode(&outside, 10), Err(AnswersError::BadToken { token: 1000, .. })));
        let mut bad_name = good.clone();
        bad_name[18] = 0xff; // inside the model id
        assert_eq!(decode(&bad_name, 10), Err(AnswersError::BadHeader("a name is not UTF-8")));
    }

    proptest! {
        #[test]
        fn the_decoder_never_panics_and_accepts_only_what_it_can_serve(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(d) = decode(&bytes, 8) {
                prop_assert!(d.records.len() <= 8);
                prop_assert!(d.records.iter().all(|r| (r.token as usize) < d.facts.vocab_size));
            }
        }

        #[test]
        fn a_valid_file_with_a_flipped_byte_is_refused_or_decodes_whole(
            n in 0usize..6, at in any::<prop::sample::Index>(), flip in 1u8..=255,
        ) {
            let records: Vec<Record> = (0..n).map(|i| Record { key: i as u64 * 77, token: i as u32, logprob: -0.5 }).collect();
            let mut b = file(&records);
            let i = at.index(b.len());
            b[i] ^= flip;
            if let Ok(d) = decode(&b, 8) {
                prop_assert!(d.records.len() <= 8);
            }
            let cut = at.index(b.len());
            prop_assert!(decode(&b[..cut], 8).map(|d| d.records.len() <= 8).unwrap_or(true));
        }

        #[test]
        fn any_records_round_trip(keys in proptest::collection::vec((any::<u64>(), 0u32..1000, -50.0f32..0.0), 0..32)) {
            let records: Vec<Record> = keys.into_iter().map(|(key, token, logprob)| Record { key, token, logprob }).collect();
            let d = decode(&file(&records), MAX_RECORDS).unwrap();
            prop_assert_eq!(d.records, records);
        }
    }
}
