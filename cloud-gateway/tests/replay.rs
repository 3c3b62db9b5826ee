//! Recording and replaying the LLM's answers on the tiny model: what the embedded backend
//! answered (plain escalations of two sessions decoding in one batch, and drafts it accepts
//! whole, in part and not at all) is written by the recorder, and the replay backend, loading
//! no model, answers the same requests identically; a context never recorded is a miss.

use std::sync::Arc;

use cloud_gateway::batcher::backend::{Backend, EmbeddedBackend, EmbeddedOptions, LlmRequest, LlmToken, RecordingBackend, ReplayBackend};
use cloud_gateway::sessions::SessionKey;
use common::sampling::SamplingParams;
use model_runtime::model_files::TINY_MODEL;

fn request(session: u64, context: &[u32], draft: &[u32]) -> LlmRequest {
    LlmRequest { session: SessionKey { device: Arc::from("dev"), session_id: session }, context: Arc::from(context), sampling: SamplingParams::default(), seq: 0, draft: Arc::from(draft) }
}

#[test]
fn answers_recorded_from_the_embedded_llm_replay_identically_without_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("answers.bin");
    let options = EmbeddedOptions { model: TINY_MODEL.into(), threads: 1, max_context: 512, ..EmbeddedOptions::default() };
    let tiny = EmbeddedBackend::load(&options).expect("the tiny model (deploy/models/prepare slm tiny)");
    let facts = tiny.facts();
    let mut recorder = RecordingBackend::create(tiny, &file).unwrap();

    // Two sessions decoding greedily side by side, one batch per step.
    let mut asked: Vec<LlmRequest> = Vec::new();
    let mut answered: Vec<LlmToken> = Vec::new();
    let mut contexts = [vec![100u32, 200, 300, 400], vec![9_000u32, 8_000, 7_000]];
    for _ in 0..10 {
        let batch: Vec<LlmRequest> = contexts.iter().enumerate().map(|(s, c)| request(s as u64, c, &[])).collect();
        let out = recorder.next_tokens(&batch);
        for (c, t) in contexts.iter_mut().zip(&out) {
            c.push(t.as_ref().expect("an answer").token_id);
        }
        answered.extend(out.into_iter().map(|t| t.unwrap()));
        asked.extend(batch);
    }
    // Drafts on a fresh session: the LLM's own continuation (accepted whole), one wrong in the
    // middle, one wrong at once.
    let (start, own) = (&contexts[0][..6], &contexts[0][6..10]);
    let mut wrong_middle = own.to_vec();
    wrong_middle[2] = (wrong_middle[2] + 1) % 1000;
    let wrong_first = [(own[0] + 1) % 1000, own[1]];
    for draft in [own.to_vec(), wrong_middle, wrong_first.to_vec()] {
        let r = request(7, start, &draft);
        let t = recorder.next_tokens(std::slice::from_ref(&r)).pop().unwrap().expect("a verdict");
        asked.push(r);
        answered.push(t);
    }
    let accepted: Vec<u32> = answered[answered.len() - 3..].iter().map(|t| t.accepted).collect();
    assert_eq!(accepted, [4, 2, 0], "the tiny LLM's own continuation is accepted whole, the others up to their wrong token");
    drop(recorder);

    let mut replay = ReplayBackend::open(&file).unwrap();
    assert_eq!(replay.facts(), facts, "the devices are checked against the recorded model's facts");
    let again: Vec<LlmToken> = asked.chunks(2).flat_map(|batch| replay.next_tokens(batch)).map(|t| t.expect("recorded")).collect();
    let verdicts = |ts: &[LlmToken]| ts.iter().map(|t| (t.token_id, t.accepted)).collect::<Vec<_>>();
    assert_eq!(verdicts(&again), verdicts(&answered), "every token and draft verdict as the LLM gave it");
    // A context answered twice (batched, then inside a draft pass) is recorded once: its
    // log-probability is the first pass's, equal to float noise.
    for (r, l) in again.iter().zip(&answered) {
        assert!((r.logprob - l.logprob).abs() < 1e-3, "log-probability {} vs {}", r.logprob, l.logprob);
    }
    assert_eq!(replay.counts().misses, 0);
    let unknown = replay.next_tokens(&[request(1, &[5, 5, 5, 5, 5], &[])]);
    assert!(unknown[0].is_err(), "a context never recorded is not invented");
    assert_eq!(replay.counts().misses, 1);
}
