//! Verifying the draft (protocol v5) over real QUIC on loopback: the real SLM (0.5B) drafts on
//! the edge and the embedded LLM (1.5B) in the gateway checks each draft in its batched pass.
//!
//! With nearly every position hard (the confidence router at tau 0.9999: only tokens the SLM is
//! all but certain of stay local; at tau 1 the loop never decodes the SLM's token, so there is
//! nothing to draft) and deadlines long enough that nothing falls back, the committed tokens
//! are the LLM's whether the loop asks one token per round trip (`--draft off`) or sends drafts
//! (`--draft adaptive`): the texts must be equal, and the drafting loop must take fewer round
//! trips for them. (A draft is decoded without the router, so a token the router would keep
//! local can be corrected there; at this tau that is a token the SLM gives > 0.9999 and the
//! LLM would not write, which these prompts do not have.) A device that speaks an older
//! protocol is served by the same gateway, and a draft on its connection is refused by name.

mod support;

use common::protocol::{ContextSync, ErrorCode, Frame, WireSampling};
use support::raw::{ask, raw_device};
use support::*;

/// `edge-node generate` with nearly every position escalated, greedy, deadlines no answer
/// misses.
fn generate(addr: &str, ca: &str, prompt: &[&str], max_new_tokens: &str, draft: &str) -> serde_json::Value {
    let mut args = vec!["generate"];
    args.extend_from_slice(prompt);
    args.extend_from_slice(&["--max-new-tokens", max_new_tokens, "--json", "--gateway", addr, "--ca-cert", ca, "--router", "confidence", "--tau", "0.9999"]);
    args.extend_from_slice(&["--deadline-min-ms", "60000", "--deadline-max-ms", "60000", "--draft", draft]);
    edge_json(&args).0
}

fn count(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("`{key}` in {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drafting_gives_the_same_text_as_one_token_per_round_trip_in_fewer_round_trips_and_an_old_device_is_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(dir.path(), LLM).await;
    let addr = gw.local_addr().unwrap();
    let ca = dir.path().join("cert.pem");
    let prompts: [(&[&str], &str); 2] = [(&["--chat", "--prompt", "What is the capital of France? Answer in one sentence."], "16"), (&["--prompt", "def is_prime(n):"], "24")];
    let (mut answered, mut accepted) = (0, 0);
    for (prompt, n) in prompts {
        let (a, c) = (addr.to_string(), ca.to_str().unwrap().to_string());
        let (off, drafted) = tokio::task::spawn_blocking(move || (generate(&a, &c, prompt, n, "off"), generate(&a, &c, prompt, n, "adaptive"))).await.unwrap();
        assert_eq!(ids(&drafted), ids(&off), "drafting: {} / one token per round trip: {}", drafted["text"], off["text"]);
        for run in [&off, &drafted] {
            assert_eq!(count(run, "fallbacks"), 0, "{run}");
            assert_eq!(count(run, "cloud_tokens"), count(run, "escalated"), "every escalation answered: {run}");
        }
        assert_eq!(count(&off, "drafts_answered"), 0, "--draft off sends none: {off}");
        eprintln!(
            "{prompt:?}: {} tokens; one per round trip {} round trips, drafting {} ({} drafts, {} of {} draft tokens accepted)",
            count(&off, "tokens"),
            count(&off, "escalated"),
            count(&drafted, "escalated"),
            count(&drafted, "drafts_answered"),
            count(&drafted, "draft_tokens_accepted"),
            count(&drafted, "draft_tokens_sent")
        );
        answered += count(&drafted, "drafts_answered");
        accepted += count(&drafted, "draft_tokens_accepted");
        if count(&drafted, "draft_tokens_accepted") > 0 {
            assert!(count(&drafted, "escalated") < count(&off, "escalated"), "accepted drafts save round trips: {drafted} / {off}");
        }
    }
    assert!(answered > 0 && accepted > 0, "the LLM checked drafts ({answered}) and took some of their tokens ({accepted})");

    // A v4 device on the same gateway: its escalations are answered, a draft is refused by name.
    let old = raw_device(addr, &ca, 4, "v4-device").await;
    let context: Vec<u32> = vec![151644, 872, 198, 3838, 374, 220, 16, 10, 220, 17, 30, 151645, 198, 151644, 77091, 198];
    let escalate = Frame::Escalate { session_id: 7, seq: 1, context: ContextSync::Full { tokens: context.clone().into() }, sampling: WireSampling::default(), deadline_ms: 60_000 };
    assert!(matches!(ask(&old, &escalate).await, Frame::Token { session_id: 7, seq: 1, .. }), "a v4 device is served");
    let draft = Frame::EscalateDraft { session_id: 8, seq: 1, context: ContextSync::Full { tokens: context.into() }, draft: vec![16].into(), sampling: WireSampling::default(), deadline_ms: 60_000 };
    match ask(&old, &draft).await {
        Frame::Error { code: ErrorCode::Malformed, message, .. } => assert!(message.contains("protocol version 5"), "{message}"),
        other => panic!("a draft from a v4 connection: {other:?}"),
    }
    gw.shutdown().await;
}

