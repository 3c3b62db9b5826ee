//! The router pipeline end to end on the real models: label a few training items, train and
//! calibrate a router, evaluate every policy in-process, then evaluate the trained router
//! through a real gateway over QUIC and check that the served system makes the same choices.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::{bin, cert_pair, free_udp_port, spawn_gateway_process, LLM, TINY};

fn run(binary: &str, args: &[&str]) -> Output {
    Command::new(bin(binary)).args(args).env_remove("DUET_MODEL").env_remove("DUET_ROUTER").output().unwrap_or_else(|e| panic!("spawn {binary}: {e}"))
}

fn edge_node(args: &[&str]) -> Output {
    run("edge-node", args)
}

fn lab(args: &[&str]) -> Output {
    run("router-lab", args)
}

fn ok(out: Output) -> Output {
    assert!(out.status.success(), "command failed:\n{}", String::from_utf8_lossy(&out.stderr));
    out
}

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/data/commonsense_qa").join(name).display().to_string()
}

fn items(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("items.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn label_train_evaluate_and_serve() {
    let dir = tempfile::tempdir().unwrap();
    let labels = dir.path().join("labels.bin");
    let router = dir.path().join("router.safetensors");
    let (labels_s, router_s) = (labels.display().to_string(), router.display().to_string());

    // Labels: 8 items; a second run resumes and has nothing left to do.
    ok(lab(&["labels", "--data", &data("train_router.jsonl"), "--limit", "8", "--batch", "4", "--out", &labels_s]));
    let again = ok(lab(&["labels", "--data", &data("train_router.jsonl"), "--limit", "8", "--out", &labels_s]));
    assert!(String::from_utf8_lossy(&again.stderr).contains("8 already done, 0 to go"), "{}", String::from_utf8_lossy(&again.stderr));

    // On-policy roll-out labels for two more items (the SLM's own answers).
    let onpolicy = dir.path().join("onpolicy.bin");
    let onpolicy_s = onpolicy.display().to_string();
    ok(lab(&["labels", "--on-policy", "--data", &data("train_router.jsonl"), "--offset", "8", "--limit", "2", "--out", &onpolicy_s]));

    // Training on both writes a router file with calibration tables and a held-out report.
    let both = format!("{labels_s},{onpolicy_s}");
    let out = ok(lab(&[
        "train", "--labels", &both, "--out", &router_s, "--epochs", "3", "--holdout-pct", "50", "--hidden", "16", "--calibration-items", "3",
        "--calibration-data", &data("train_router.jsonl"),
    ]));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["train_positions"].as_u64().unwrap() > 50, "{report}");
    assert!(report["holdout_auc_mlp"].as_f64().unwrap().is_finite(), "{report}");

    // In-process sweep on two validation items, every policy.
    let eval = dir.path().join("eval");
    let eval_s = eval.display().to_string();
    let out = ok(lab(&["eval-cqa", "--data", &data("validation.jsonl"), "--limit", "2", "--rates", "0.1,0.3", "--router", &router_s, "--out", &eval_s]));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    for run in ["slm-only", "llm-only", "router@0.100", "confidence@0.300", "random@0.300"] {
        assert!(table.contains(run), "{run} missing:\n{table}");
    }
    for f in ["results.json", "results.csv", "pareto.svg", "config.json"] {
        assert!(eval.join(f).exists(), "{f}");
    }
    let records = items(&eval);
    assert_eq!(records.len(), 2);
    for r in &records {
        let runs = r["runs"].as_array().unwrap();
        let llm = runs.iter().find(|x| x["run"] == "llm-only").unwrap();
        assert_eq!(llm["tokens"], llm["escalated"], "LLM-only escalates every token");
        let slm = runs.iter().find(|x| x["run"] == "slm-only").unwrap();
        assert_eq!(slm["escalated"], 0);
    }
    // Resuming the same configuration does no new work; another configuration is refused.
    ok(lab(&["eval-cqa", "--data", &data("validation.jsonl"), "--limit", "2", "--rates", "0.1,0.3", "--router", &router_s, "--out", &eval_s]));
    assert_eq!(items(&eval).len(), 2);
    let other = lab(&["eval-cqa", "--data", &data("validation.jsonl"), "--limit", "2", "--rates", "0.2", "--router", &router_s, "--out", &eval_s]);
    assert!(!other.status.success() && String::from_utf8_lossy(&other.stderr).contains("another configuration"));

    // The same router pooled with the SLM's confidence: recalibrated, evaluated alone, and drawn
    // against the baselines above.
    let pooled = dir.path().join("pooled.safetensors");
    let pooled_s = pooled.display().to_string();
    ok(lab(&["pool", "--router", &router_s, "--router-weight", "0.5", "--out", &pooled_s, "--calibration-items", "2", "--calibration-data", &data("train_router.jsonl")]));
    let header = common::router_header::RouterHeader::from_file(&pooled).unwrap();
    let meta: serde_json::Value = serde_json::from_str(&header.meta_json).unwrap();
    assert_eq!((meta["format"].as_u64(), meta["pooling"]["router_weight"].as_f64()), (Some(2), Some(0.5)), "{meta}");
    let pooled_eval = dir.path().join("eval-pooled").display().to_string();
    ok(lab(&["eval-cqa", "--data", &data("validation.jsonl"), "--limit", "2", "--rates", "0.1,0.3", "--router", &pooled_s, "--policies", "router", "--out", &pooled_eval]));
    let both_dir = dir.path().join("both").display().to_string();
    let out = ok(lab(&["curves", "--items", &eval_s, "--with", &format!("pooled={pooled_eval}"), "--out", &both_dir]));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    // Two items rarely show an LLM ahead of the SLM, so no gap or lead is asserted: the pooled
    // router's runs are drawn beside the baselines, on both items.
    assert!(table.starts_with("2 items") && table.contains("pooled: escalated") && table.contains("confidence: escalated"), "{table}");

    // The served system: the same router and rate through a real gateway with the LLM.
    let (cert, key) = cert_pair(dir.path());
    let port = free_udp_port();
    let _gw = spawn_gateway_process(port, &cert, &key, LLM, &[]);
    let served = dir.path().join("served");
    let addr = format!("127.0.0.1:{port}");
    ok(lab(&[
        "eval-cqa", "--data", &data("validation.jsonl"), "--limit", "2", "--router", &router_s, "--escalation-rate", "0.3",
        "--gateway", &addr, "--ca-cert", &cert.display().to_string(), "--deadline-min-ms", "20000", "--deadline-max-ms", "60000",
        "--out", &served.display().to_string(),
    ]));
    let stats: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(served.join("served-stats.json")).unwrap()).unwrap();
    assert!(stats["escalated"].as_u64().unwrap() > 0, "{stats}");
    let served_items = items(&served);
    assert_eq!(served_items.len(), 2);
    // Deadlines long enough that nothing falls back: every escalation is answered by the
    // gateway's LLM. Greedy on both sides with the same tau, the served texts equal the
    // in-process ones, except where the LLM's top two tokens are so close that the gateway's
    // prefill chunking (prompt first, then deltas) flips them (98 of 100 identical in the
    // served run of docs/src/benchmarks/routing-quality.md), so one identical item of two is required here.
    assert_eq!(stats["fallbacks"], 0, "{stats}");
    assert_eq!(stats["cloud_tokens"], stats["escalated"], "{stats}");
    let identical = served_items
        .iter()
        .zip(&records)
        .filter(|(a, b)| {
            let local = b["runs"].as_array().unwrap().iter().find(|x| x["run"] == "router@0.300").unwrap();
            a["runs"][0]["text"] == local["text"]
        })
        .count();
    assert!(identical >= 1, "served {served_items:?}\nin-process {records:?}");
}

#[test]
fn router_for_another_slm_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A router file made for the real SLM but with another tokenizer fingerprint, written
    // through the library (training one is what the test above does).
    let path = dir.path().join("r.safetensors");
    let meta = edge_node::routing::router_file::RouterMeta {
        format: edge_node::routing::router_file::FORMAT_VERSION,
        slm_id: "qwen2.5-coder-0.5b-instruct".into(),
        tokenizer_fingerprint: "not-this-one".into(),
        feature_spec: edge_node::routing::router_file::FEATURE_SPEC.into(),
        feature_width: 898,
        mlp_hidden: 2,
        calibration: Default::default(),
        confidence_calibration: Default::default(),
        training: serde_json::Value::Null,
        pooling: None,
    };
    let w = edge_node::routing::router_file::MlpWeights { mean: vec![0.0; 898], std: vec![1.0; 898], w1: vec![0.0; 1796], b1: vec![0.0; 2], w2: vec![0.0; 2], b2: 0.0 };
    edge_node::routing::router_file::MlpRouterModel::new(meta, w).unwrap().save(&path).unwrap();
    let p = path.display().to_string();
    // Another SLM (the tiny model): refused, naming both.
    let out = edge_node(&["generate", "--model", TINY, "--prompt", "hi", "--gateway", "127.0.0.1:9", "--router", &p, "--connect-wait-ms", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("trained for SLM `qwen2.5-coder-0.5b-instruct`") && err.contains(TINY), "{err}");
    // The right SLM id but another tokenizer fingerprint: refused too.
    let out = edge_node(&["generate", "--prompt", "hi", "--gateway", "127.0.0.1:9", "--router", &p, "--connect-wait-ms", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("tokenizer"), "{err}");
    // --escalation-rate needs a trained router: the confidence baseline has no calibration table.
    let out = edge_node(&["generate", "--prompt", "hi", "--gateway", "127.0.0.1:9", "--router", "confidence", "--escalation-rate", "0.07", "--connect-wait-ms", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("needs a trained router"), "{err}");
}

#[test]
fn bad_dataset_lines_are_reported_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(data("validation.jsonl")).unwrap();
    let mut lines: Vec<&str> = src.lines().take(2).collect();
    lines.insert(1, "{not json");
    let file = dir.path().join("v.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = ok(lab(&[
        "eval-cqa", "--slm", TINY, "--llm", TINY, "--policies", "slm-only,llm-only", "--max-new-tokens", "4",
        "--data", &file.display().to_string(), "--out", &dir.path().join("e").display().to_string(),
    ]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2"), "{err}");
    assert_eq!(items(&dir.path().join("e")).len(), 2, "the good items around the bad line are evaluated");
}
