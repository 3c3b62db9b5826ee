//! Many sessions per connection and many connections at once against one gateway (tiny LLM):
//! every escalation gets exactly one reply, for its own seq, with the token the LLM gives for
//! exactly that session's context: nothing lost, duplicated or mixed up by batching.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use model_runtime::model_files::ModelFiles;
use common::protocol::{ContextTracker, Frame, WireSampling};
use model_runtime::{CausalLm, LmOptions};
use common::sampling::argmax;
use support::*;

const CONNECTIONS: usize = 4;
const SESSIONS_PER_CONNECTION: usize = 6;
const ESCALATIONS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_get_their_own_tokens_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.batcher.max_batch = 8;
    config.batcher.max_wait = Duration::from_millis(2);
    let gw = start_gateway_with(config, TINY, Duration::ZERO).await;
    let addr = gw.local_addr().unwrap();
    let ca = dir.path().join("cert.pem");
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let link = Arc::new(raw_link(addr, &ca, &format!("device-{c}"), ""));
        assert!(link.wait_up(Duration::from_secs(5)).await.is_some());
        for s in 0..SESSIONS_PER_CONNECTION {
            let link = link.clone();
            tasks.push(tokio::spawn(async move {
                let session_id = (c * 100 + s) as u64;
                let mut tracker = ContextTracker::new();
                let mut context: Vec<u32> = (0..5).map(|i| (1000 + 37 * (c * 31 + s * 7 + i)) as u32).collect();
                let mut log = Vec::new();
                for step in 0..ESCALATIONS {
                    // Some local tokens between escalations, as an edge would produce.
                    for j in 0..(step % 3) {
                        context.push((2000 + session_id as usize * 13 + step * 5 + j) as u32);
                    }
                    let sync = tracker.sync_for(&context);
                    let frame = Frame::Escalate {
                        session_id,
                        seq: sync.seq,
                        context: sync.context,
                        sampling: WireSampling::default(),
                        deadline_ms: 20_000,
                    };
                    let (reply, _) = link.request(&frame, Instant::now() + Duration::from_secs(20)).await.expect("reply");
                    match reply {
                        Frame::Token { session_id: sid, seq, token_id, .. } => {
                            assert_eq!((sid, seq), (session_id, sync.seq), "reply for another escalation");
                            tracker.acknowledge(seq);
                            log.push((context.clone(), token_id));
                            context.push(token_id);
                        }
                        other => panic!("unexpected reply {other:?}"),
                    }
                }
                log
            }));
        }
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    assert_eq!(all.len(), CONNECTIONS * SESSIONS_PER_CONNECTION * ESCALATIONS);
    // Every answer must be the LLM's greedy token for exactly that context.
    let mut lm = CausalLm::load(ModelFiles::locate(TINY).unwrap(), &LmOptions { threads: 1, max_context: 512, ..LmOptions::default() }).unwrap();
    for (context, token) in &all {
        let mut cache = lm.new_cache(Some(context.len() + 1)).unwrap();
        let out = lm.forward(&mut cache, context).unwrap();
        let (expected, best) = argmax(&out.logits).unwrap();
        if expected != *token {
            // Tolerate only float-level ties between chunked and one-shot prefill.
            assert!((best - out.logits[*token as usize]).abs() < 1e-3, "context {context:?}: got {token}, expected {expected}");
        }
    }
    gw.shutdown().await;
}
