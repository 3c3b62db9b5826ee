//! The router lab's teacher behind an engine (`--llm-engine`): a live `llama-server` (built by
//! `deploy/engines/llamacpp/build`, serving the 1.5B LLM's GGUF) labels CommonsenseQA training
//! items, teacher-forced and on-policy, into files the trainer reads; and the evaluation's
//! in-process sweep takes its LLM tokens from the same engine.
//!
//! Training items only (the evaluation reads `train_router.jsonl` here too): the validation
//! set is for the evaluation proper.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use model_runtime::chat::render_user;
use model_runtime::model_files::ModelFiles;
use model_runtime::tokenizer::Tokenizer;
use support::engines::LlamaServer;
use support::{bin, LLM};

fn lab(args: Vec<String>) -> Output {
    Command::new(bin("router-lab")).args(&args).env_remove("DUET_LLM_ENGINE").env_remove("DUET_ROUTER").output().expect("spawn router-lab")
}

/// Run the lab off the test's runtime (the engine's process keeps running meanwhile).
async fn ok(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || lab(args)).await.unwrap();
    assert!(out.status.success(), "router-lab failed:\n{}", String::from_utf8_lossy(&out.stderr));
    out
}

fn train_data() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/data/commonsense_qa/train_router.jsonl").display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_from_a_live_llama_server_are_files_the_trainer_reads() {
    let engine = LlamaServer::start(1).await;
    let spec = format!("llamacpp={}", engine.url());
    let dir = tempfile::tempdir().unwrap();
    let (labels, onpolicy, router) = (dir.path().join("labels.bin"), dir.path().join("onpolicy.bin"), dir.path().join("router.safetensors"));
    let (labels_s, onpolicy_s, router_s, data) = (labels.display().to_string(), onpolicy.display().to_string(), router.display().to_string(), train_data());

    // Teacher-forced on five short items, on-policy on one more: every LLM token from
    // llama-server. (At --holdout-pct 40 the trainer holds out items 1, 4 and 5 by their ids'
    // hash and trains on 0, 2 and 3.)
    let out = ok(&["labels", "--llm-engine", &spec, "--data", &data, "--limit", "5", "--out", &labels_s]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("5 to go"), "{}", String::from_utf8_lossy(&out.stderr));
    ok(&["labels", "--on-policy", "--llm-engine", &spec, "--data", &data, "--offset", "5", "--limit", "1", "--out", &onpolicy_s]).await;
    // A labels file names its teacher: resuming it with another LLM is refused, not mixed.
    let other = tokio::task::spawn_blocking(move || lab(["labels", "--data", &train_data(), "--limit", "3", "--out", &labels_s].map(String::from).to_vec())).await.unwrap();
    assert!(!other.status.success(), "the in-process LLM may not extend labels made by the engine");

    let out = ok(&[
        "train", "--labels", &labels.display().to_string(), "--on-policy-labels", &onpolicy_s, "--out", &router_s, "--epochs", "2", "--holdout-pct", "40",
        "--hidden", "8", "--calibration-items", "2", "--calibration-data", &data,
    ])
    .await;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["llm_id"].as_str().unwrap().starts_with("llamacpp:"), "the router records its teacher: {report}");
    assert!(report["train_positions"].as_u64().unwrap() > 20, "{report}");
    assert_eq!((report["teacher_forced_items"].clone(), report["on_policy_items"].clone()), (serde_json::json!(5), serde_json::json!(1)), "{report}");
    assert!(router.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_engine_as_the_llm_llm_only_answers_are_the_engines_own_greedy_completion() {
    let engine = LlamaServer::start(1).await;
    let spec = format!("llamacpp={}", engine.url());
    let dir = tempfile::tempdir().unwrap();
    let eval = dir.path().join("eval");
    let eval_s = eval.display().to_string();
    let data = train_data();
    let out = ok(&["eval-cqa", "--llm-engine", &spec, "--data", &data, "--limit", "1", "--policies", "slm-only,llm-only", "--max-new-tokens", "24", "--out", &eval_s]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("LLM engine requests"), "{}", String::from_utf8_lossy(&out.stderr));
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(eval.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["llm_engine"], spec.as_str());
    let record: serde_json::Value = serde_json::from_str(std::fs::read_to_string(eval.join("items.jsonl")).unwrap().lines().next().unwrap()).unwrap();
    let llm = record["runs"].as_array().unwrap().iter().find(|r| r["run"] == "llm-only").unwrap();
    assert_eq!(llm["tokens"], llm["escalated"], "LLM-only escalates every token");

    // The same prompt asked of the engine directly, as many tokens.
    let files = ModelFiles::locate(LLM).unwrap();
    let tok = Tokenizer::load(&files.tokenizer, None).unwrap();
    let item: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&data).unwrap().lines().next().unwrap()).unwrap();
    let prompt = tok.encode(&render_user(item["prompt"].as_str().unwrap())).unwrap();
    let direct = engine.greedy(&prompt, llm["tokens"].as_u64().unwrap() as u32).await;
    assert_eq!(llm["text"].as_str().unwrap(), tok.decode(&direct).unwrap(), "escalated token by token = the engine's own greedy run");
}
