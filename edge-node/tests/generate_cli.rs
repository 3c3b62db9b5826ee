//! `edge-node generate` end to end on the real prepared models (0.5B SLM and 1.5B LLM).

use std::process::{Command, Output};

fn edge_node(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_edge-node")).args(args).env_remove("DUET_MODEL").output().expect("spawn edge-node")
}

fn json_of(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "edge-node failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("--json output parses")
}

#[test]
fn slm_answers_paris_in_chat_mode() {
    let v = json_of(&edge_node(&["generate", "--chat", "--prompt", "What is the capital of France?", "--json"]));
    let text = v["text"].as_str().unwrap();
    assert!(text.contains("Paris"), "{text}");
    assert_eq!(v["finish_reason"], "stop");
    assert!(v["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["prefill_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(v["tokens"].as_u64().unwrap() as usize, v["token_ids"].as_array().unwrap().len());
}

#[test]
fn slm_continues_fibonacci_with_code() {
    let v = json_of(&edge_node(&["generate", "--prompt", "def fibonacci(n):", "--max-new-tokens", "64", "--json"]));
    let text = v["text"].as_str().unwrap();
    assert!(text.contains("return") && text.contains("fibonacci(n"), "{text}");
}

#[test]
fn streamed_text_equals_json_text() {
    let streamed = edge_node(&["generate", "--prompt", "def fibonacci(n):", "--max-new-tokens", "24"]);
    assert!(streamed.status.success());
    let v = json_of(&edge_node(&["generate", "--prompt", "def fibonacci(n):", "--max-new-tokens", "24", "--json"]));
    assert_eq!(String::from_utf8(streamed.stdout).unwrap().trim_end(), v["text"].as_str().unwrap().trim_end());
}

#[test]
fn llm_answers_paris_and_writes_code() {
    let v = json_of(&edge_node(&["generate", "--model", "qwen2.5-coder-1.5b-instruct", "--chat", "--prompt", "What is the capital of France?", "--json"]));
    assert!(v["text"].as_str().unwrap().contains("Paris"), "{}", v["text"]);
    let v = json_of(&edge_node(&["generate", "--model", "qwen2.5-coder-1.5b-instruct", "--prompt", "def fibonacci(n):", "--max-new-tokens", "48", "--json"]));
    let text = v["text"].as_str().unwrap();
    assert!(text.contains("return"), "{text}");
}

#[test]
fn huge_pages_change_where_the_weights_live_not_the_tokens() {
    let prompts: [&[&str]; 2] = [&["--chat", "--prompt", "What is the capital of France?"], &["--prompt", "def fibonacci(n):", "--max-new-tokens", "80"]];
    for prompt in prompts {
        let run = |pages: &str| json_of(&edge_node(&[&["generate", "--json", "--huge-pages", pages][..], prompt].concat()));
        let (on, off) = (run("on"), run("off"));
        assert!(!on["token_ids"].as_array().unwrap().is_empty());
        assert_eq!(on["token_ids"], off["token_ids"], "{prompt:?}");
        assert_eq!(on["top_probs"], off["top_probs"], "{prompt:?}");
    }
}

#[test]
fn seeded_sampling_is_reproducible() {
    let args = ["generate", "--prompt", "Once upon a time", "--temperature", "0.8", "--top-p", "0.9", "--seed", "42", "--max-new-tokens", "16", "--json"];
    let a = json_of(&edge_node(&args));
    let b = json_of(&edge_node(&args));
    assert_eq!(a["token_ids"], b["token_ids"]);
}

#[test]
fn empty_prompt_is_refused() {
    let out = edge_node(&["generate", "--prompt", "  "]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--prompt is empty"));
}

#[test]
fn over_long_prompt_is_refused_or_truncated_on_request() {
    let long = "word ".repeat(100);
    let out = edge_node(&["generate", "--prompt", &long, "--max-context", "32"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at most 31 fit") && err.contains("--truncate"), "{err}");
    let v = json_of(&edge_node(&["generate", "--prompt", &long, "--max-context", "32", "--truncate", "--max-new-tokens", "4", "--json"]));
    assert_eq!(v["prompt_tokens"], 31);
    assert!(v["truncated_tokens"].as_u64().unwrap() >= 69, "{}", v["truncated_tokens"]);
}

#[test]
fn missing_model_names_the_prepare_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_edge-node"))
        .args(["generate", "--prompt", "hi"])
        .env("DUET_HOME", dir.path())
        .env("ORT_DYLIB_PATH", model_runtime::env::ort_library_path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("deploy/models/prepare slm"), "{err}");
}

#[test]
fn missing_onnx_runtime_names_the_prepare_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_edge-node"))
        .args(["generate", "--prompt", "hi"])
        .env("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("deploy/models/prepare runtime"), "{err}");
}

#[test]
fn invalid_sampling_flag_is_a_clear_error() {
    let out = edge_node(&["generate", "--prompt", "hi", "--top-p", "1.5"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("top_p"));
}
