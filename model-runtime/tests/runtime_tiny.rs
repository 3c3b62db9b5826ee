//! The runtime on the tiny generated model (same architecture and interface as the real ones):
//! KV-cache correctness, cache independence and input validation, in well under a second.

use model_runtime::model_files::{ModelFiles, TINY_MODEL};
use model_runtime::tokenizer::Tokenizer;
use model_runtime::{CausalLm, LmOptions, RuntimeError};

fn tiny() -> CausalLm {
    let files = ModelFiles::locate(TINY_MODEL).expect("tiny model missing: run deploy/models/prepare");
    CausalLm::load(files, &LmOptions { threads: 1, max_context: 64, ..LmOptions::default() }).expect("load tiny model")
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

const TOKENS: [u32; 12] = [9707, 11, 1879, 0, 151643, 42, 1000, 70000, 5, 6, 7, 151935];

#[test]
fn incremental_decode_matches_one_prefill() {
    let mut lm = tiny();
    let mut full = lm.new_cache(None).unwrap();
    let reference = lm.forward(&mut full, &TOKENS).unwrap();
    assert_eq!(reference.logits.len(), lm.manifest().vocab_size);
    assert_eq!(reference.hidden.len(), lm.manifest().hidden_size);

    let mut inc = lm.new_cache(None).unwrap();
    lm.forward(&mut inc, &TOKENS[..5]).unwrap();
    let mut last = None;
    for &t in &TOKENS[5..] {
        last = Some(lm.forward(&mut inc, &[t]).unwrap());
    }
    let last = last.unwrap();
    assert_eq!(inc.len(), TOKENS.len());
    assert!(max_abs_diff(&reference.logits, &last.logits) < 1e-3, "logits differ: {}", max_abs_diff(&reference.logits, &last.logits));
    assert!(max_abs_diff(&reference.hidden, &last.hidden) < 1e-3);
}

#[test]
fn steps_and_prefills_alternating_on_one_cache_match_one_prefill() {
    // The output shapes follow the number of tokens a step runs (a prefill's hidden states have
    // one row per token), and one binding serves them all: every switch between one-token steps,
    // several-token steps and a draft check's pass must leave the numbers and shapes right.
    let mut lm = tiny();
    let mut c = lm.new_cache(None).unwrap();
    let mut step = model_runtime::StepOutput::default();
    let chunks: [&[u32]; 6] = [&TOKENS[..1], &TOKENS[1..2], &TOKENS[2..5], &TOKENS[5..6], &TOKENS[6..9], &TOKENS[9..]];
    for (i, chunk) in chunks.iter().enumerate() {
        lm.forward_into(&mut c, chunk, &mut step).unwrap();
        let upto = c.len();
        let mut reference_cache = lm.new_cache(None).unwrap();
        let reference = lm.forward(&mut reference_cache, &TOKENS[..upto]).unwrap();
        assert_eq!(step.hidden.len(), lm.manifest().hidden_size, "chunk {i}");
        assert!(max_abs_diff(&reference.logits, &step.logits) < 1e-3, "chunk {i}: logits differ");
        assert!(max_abs_diff(&reference.hidden, &step.hidden) < 1e-3, "chunk {i}: hidden states differ");
    }
    // The draft check's pass over several positions, then a step again.
    let tail = lm.forward_tail(&mut c, &[5, 6], 2).unwrap();
    assert_eq!(tail.len(), 2);
    let after = lm.forward(&mut c, &[7]).unwrap();
    let mut reference_cache = lm.new_cache(None).unwrap();
    let mut all = TOKENS.to_vec();
    all.extend([5, 6, 7]);
    let reference = lm.forward(&mut reference_cache, &all).unwrap();
    assert!(max_abs_diff(&reference.logits, &after.logits) < 1e-3);
}

#[test]
fn caches_are_independent_when_interleaved() {
    let mut lm = tiny();
    let mut a = lm.new_cache(None).unwrap();
    let mut b = lm.new_cache(None).unwrap();
    let alone = {
        let mut c = lm.new_cache(None).unwrap();
        lm.forward(&mut c, &TOKENS[..4]).unwrap();
        lm.forward(&mut c, &TOKENS[4..8]).unwrap()
    };
    lm.forward(&mut a, &TOKENS[..4]).unwrap();
    lm.forward(&mut b, &TOKENS[6..]).unwrap();
    let mixed = lm.forward(&mut a, &TOKENS[4..8]).unwrap();
    assert!(max_abs_diff(&alone.logits, &mixed.logits) < 1e-4);
}

#[test]
fn truncate_rolls_back_the_context() {
    let mut lm = tiny();
    let mut c = lm.new_cache(None).unwrap();
    lm.forward(&mut c, &TOKENS[..6]).unwrap();
    let first = lm.forward(&mut c, &[TOKENS[6]]).unwrap();
    lm.forward(&mut c, &[1, 2, 3]).unwrap();
    c.truncate(6);
    let again = lm.forward(&mut c, &[TOKENS[6]]).unwrap();
    assert_eq!(c.tokens(), &TOKENS[..7]);
    assert!(max_abs_diff(&first.logits, &again.logits) < 1e-4);
}

#[test]
fn bad_inputs_are_typed_errors_and_leave_the_cache_alone() {
    let mut lm = tiny();
    let mut c = lm.new_cache(Some(8)).unwrap();
    assert!(matches!(lm.forward(&mut c, &[]), Err(RuntimeError::EmptyInput)));
    assert!(matches!(lm.forward(&mut c, &[151936]), Err(RuntimeError::TokenOutOfRange { token: 151936, .. })));
    lm.forward(&mut c, &TOKENS[..6]).unwrap();
    assert!(matches!(lm.forward(&mut c, &TOKENS[..3]), Err(RuntimeError::ContextFull { needed: 9, capacity: 8 })));
    assert_eq!(c.len(), 6);
    lm.forward(&mut c, &TOKENS[..2]).unwrap();
    assert_eq!(c.len(), 8);
}

#[test]
fn tokenizer_fingerprint_matches_the_one_recorded_at_preparation() {
    let files = ModelFiles::locate(TINY_MODEL).unwrap();
    let tok = Tokenizer::load(&files.tokenizer, Some(&files.manifest.tokenizer_fingerprint)).unwrap();
    assert_eq!(tok.fingerprint().len(), 64);
    let err = Tokenizer::load(&files.tokenizer, Some("00")).unwrap_err();
    assert!(err.to_string().contains("fingerprint"), "{err}");
    let ids = tok.encode("<|im_start|>user\nhello<|im_end|>").unwrap();
    assert_eq!(ids[0], 151644, "special tokens in text must map to their ids");
}

#[test]
fn batched_forward_matches_row_by_row() {
    let mut lm = tiny();
    // Rows with different histories and different numbers of new tokens (1, 3, 2), plus one
    // row too short to be padded with its own history (it runs alone).
    let histories: [&[u32]; 4] = [&TOKENS[..6], &TOKENS[2..9], &TOKENS[..4], &[]];
    let new: [&[u32]; 4] = [&[5], &[6, 7, 8], &[9, 10], &[11, 12, 13, 14]];
    let mut expected = Vec::new();
    for (h, n) in histories.iter().zip(new.iter()) {
        let mut c = lm.new_cache(None).unwrap();
        if !h.is_empty() {
            lm.forward(&mut c, h).unwrap();
        }
        expected.push(lm.forward(&mut c, n).unwrap());
    }
    let mut caches: Vec<_> = histories
        .iter()
        .map(|h| {
            let mut c = lm.new_cache(None).unwrap();
            if !h.is_empty() {
                lm.forward(&mut c, h).unwrap();
            }
            c
        })
        .collect();
    let mut refs: Vec<&mut model_runtime::KvCache> = caches.iter_mut().collect();
    let got = lm.forward_batch(&mut refs, &new).unwrap();
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(max_abs_diff(&g.logits, &e.logits) < 1e-3, "row {i}: logits differ by {}", max_abs_diff(&g.logits, &e.logits));
        assert!(max_abs_diff(&g.hidden, &e.hidden) < 1e-3, "row {i}: hidden differs");
    }
    // The caches now continue exactly as if each row had run alone.
    for (i, c) in caches.iter_mut().enumerate() {
        assert_eq!(c.len(), histories[i].len() + new[i].len());
        let mut solo = lm.new_cache(None).unwrap();
        let mut all: Vec<u32> = histories[i].to_vec();
        all.extend_from_slice(new[i]);
        lm.forward(&mut solo, &all).unwrap();
        let a = lm.forward(&mut solo, &[42]).unwrap();
        let b = lm.forward(c, &[42]).unwrap();
        assert!(max_abs_diff(&a.logits, &b.logits) < 1e-3, "row {i}: cache continues differently");
    }
}

#[test]
fn the_tail_logits_of_one_pass_match_stepping_token_by_token() {
    let mut lm = tiny();
    let mut stepped = lm.new_cache(None).unwrap();
    lm.forward(&mut stepped, &TOKENS[..7]).unwrap();
    let mut want = Vec::new();
    for &t in &TOKENS[7..] {
        want.push(lm.forward(&mut stepped, &[t]).unwrap().logits);
    }
    let mut tail = lm.new_cache(None).unwrap();
    lm.forward(&mut tail, &TOKENS[..6]).unwrap();
    // Tokens 6..12 in one pass; the logits after each of the last 5.
    let got = lm.forward_tail(&mut tail, &TOKENS[6..], 5).unwrap();
    assert_eq!(got.len(), 5);
    assert_eq!(tail.len(), TOKENS.len());
    for (g, w) in got.iter().zip(&want) {
        assert!(max_abs_diff(g, w) < 1e-3, "logits differ: {}", max_abs_diff(g, w));
    }
}

#[test]
fn a_batched_tail_pass_matches_each_row_alone() {
    let mut lm = tiny();
    let rows: [&[u32]; 2] = [&TOKENS[..8], &TOKENS[3..6]];
    let mut alone = Vec::new();
    for r in rows {
        let mut c = lm.new_cache(None).unwrap();
        lm.forward(&mut c, &r[..1]).unwrap();
        alone.push(lm.forward_tail(&mut c, &r[1..], 2).unwrap());
    }
    let mut a = lm.new_cache(None).unwrap();
    let mut b = lm.new_cache(None).unwrap();
    lm.forward(&mut a, &rows[0][..1]).unwrap();
    lm.forward(&mut b, &rows[1][..1]).unwrap();
    let got = lm.forward_batch_tail(&mut [&mut a, &mut b], &[&rows[0][1..], &rows[1][1..]], &[2, 2]).unwrap();
    for (g, w) in got.iter().zip(&alone) {
        assert_eq!(g.len(), 2);
        for (x, y) in g.iter().zip(w) {
            assert!(max_abs_diff(x, y) < 1e-3, "logits differ: {}", max_abs_diff(x, y));
        }
    }
}
