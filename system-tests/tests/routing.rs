//! End to end over real QUIC on loopback with the real SLM (0.5B) on the edge and the real
//! embedded LLM (1.5B) in the gateway.

mod support;

use support::*;

const PROMPT: &str = "What is the capital of France? Answer in one sentence.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_token_escalated_equals_the_llms_own_greedy_output() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(dir.path(), LLM).await;
    let addr = gw.local_addr().unwrap().to_string();
    let ca = dir.path().join("cert.pem");
    let ca = ca.to_str().unwrap();
    let (routed, _) = tokio::task::spawn_blocking({
        let addr = addr.clone();
        let ca = ca.to_string();
        move || {
            edge_json(&[
                "generate", "--chat", "--prompt", PROMPT, "--max-new-tokens", "16", "--json", "--gateway", &addr, "--ca-cert", &ca,
                "--tau", "1", "--deadline-min-ms", "60000", "--deadline-max-ms", "60000",
            ])
        }
    })
    .await
    .unwrap();
    let (llm, _) = tokio::task::spawn_blocking(|| edge_json(&["generate", "--model", LLM, "--chat", "--prompt", PROMPT, "--max-new-tokens", "16", "--json"]))
        .await
        .unwrap();
    assert_eq!(routed["escalated"], routed["tokens"], "{routed}");
    assert_eq!(routed["cloud_tokens"], routed["tokens"], "no fallback expected: {routed}");
    assert_eq!(ids(&routed), ids(&llm), "routed: {} / llm: {}", routed["text"], llm["text"]);
    assert!(routed["text"].as_str().unwrap().contains("Paris"));
    assert!(routed["sources"].as_array().unwrap().iter().all(|s| s == "cloud"));
    // Delta sync: after the first (Full) escalation, each one carries a single new token.
    let sent = routed["bytes_sent"].as_u64().unwrap();
    let n = routed["escalated"].as_u64().unwrap();
    assert!(sent < 200 + 64 * n, "bytes sent {sent} for {n} escalations");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_escalated_equals_the_slms_own_greedy_output() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(dir.path(), LLM).await;
    let addr = gw.local_addr().unwrap().to_string();
    let ca = dir.path().join("cert.pem").to_str().unwrap().to_string();
    let (routed, _) = tokio::task::spawn_blocking(move || {
        edge_json(&["generate", "--chat", "--prompt", PROMPT, "--max-new-tokens", "24", "--json", "--gateway", &addr, "--ca-cert", &ca, "--tau", "0"])
    })
    .await
    .unwrap();
    let (slm, _) = tokio::task::spawn_blocking(|| edge_json(&["generate", "--chat", "--prompt", PROMPT, "--max-new-tokens", "24", "--json"])).await.unwrap();
    assert_eq!(routed["escalated"], 0);
    assert_eq!(routed["bytes_sent"], 0);
    assert_eq!(ids(&routed), ids(&slm));
    gw.shutdown().await;
}
