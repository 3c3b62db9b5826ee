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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speculating_past_escalations_generates_the_same_tokens_as_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(dir.path(), LLM).await;
    let addr = gw.local_addr().unwrap().to_string();
    let ca = dir.path().join("cert.pem").to_str().unwrap().to_string();
    let run = |speculate: &'static str| {
        let (addr, ca) = (addr.clone(), ca.clone());
        tokio::task::spawn_blocking(move || {
            edge_json(&[
                "generate", "--prompt", "def is_prime(n):", "--max-new-tokens", "48", "--json", "--gateway", &addr, "--ca-cert", &ca,
                "--router", "confidence", "--tau", "0.8", "--deadline-min-ms", "60000", "--deadline-max-ms", "60000", "--speculate", speculate,
            ])
            .0
        })
    };
    let waiting = run("0").await.unwrap();
    let speculating = run("8").await.unwrap();
    assert_eq!(ids(&speculating), ids(&waiting), "speculating: {} / waiting: {}", speculating["text"], waiting["text"]);
    assert_eq!(speculating["escalated"], waiting["escalated"]);
    assert_eq!(speculating["fallbacks"], 0, "{speculating}");
    let n = speculating["escalated"].as_u64().unwrap();
    let decided = speculating["speculation_kept"].as_u64().unwrap() + speculating["speculation_rolled_back"].as_u64().unwrap();
    assert!(n > 0 && decided > 0, "the SLM speculated during some of the {n} escalations: {speculating}");
    gw.shutdown().await;
}
