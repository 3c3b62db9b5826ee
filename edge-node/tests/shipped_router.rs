//! The trained router shipped inside edge-node, on the real 0.5B SLM: it loads for the default
//! SLM and, on CommonsenseQA validation questions it was never trained on, escalates about the
//! share of tokens its default operating point promises; signed into a fleet bundle, a device
//! running that SLM accepts it as the same router.

use std::ops::ControlFlow;

use common::fleet::{Bundle, BundleManifest, BundleRef, DeviceSettings, SigningKey};
use edge_node::args::trained_router;
use edge_node::fleet::{accept, DeviceTarget};
use edge_node::decode::{decode, DecodeParams, NoCloud, OnnxSlm};
use edge_node::routing::router::MlpRouter;
use edge_node::routing::shipped_router::{shipped_name, DEFAULT_ESCALATION_RATE};
use model_runtime::chat::render_user;
use model_runtime::model_files::{ModelFiles, DEFAULT_SLM};
use model_runtime::tokenizer::Tokenizer;
use model_runtime::{CausalLm, LmOptions};

/// The seed's prompt format (router-lab's `cqa::prompt_for`, which the router was trained on).
fn cqa_prompt(item: &serde_json::Value) -> String {
    let labels = item["choices"]["label"].as_array().expect("labels");
    let texts = item["choices"]["text"].as_array().expect("texts");
    let choices: String = labels.iter().zip(texts).map(|(l, t)| format!("{}. {}\n", l.as_str().unwrap(), t.as_str().unwrap())).collect();
    format!(
        "Question: {}\nChoices:\n{choices}\nPlease format your response in the following way:\n[Explanation]. Therefore, the answer is answer (label).\nEnsure the final sentence includes the answer followed by the label in parentheses.\n\nAnswer and Reasoning:",
        item["question"].as_str().expect("question")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_router_escalates_about_its_default_rate_on_commonsense_qa() {
    let files = ModelFiles::locate(DEFAULT_SLM).expect("the default SLM is prepared (deploy/models/prepare)");
    let tok = Tokenizer::load(&files.tokenizer, Some(&files.manifest.tokenizer_fingerprint)).expect("tokenizer");
    let mut lm = CausalLm::load(files, &LmOptions { threads: 0, max_context: 1024, ..LmOptions::default() }).expect("SLM loads");

    // `--router default` resolves to the shipped router for this SLM, checked against it.
    let (model, name) = trained_router("default", lm.manifest(), tok.fingerprint()).expect("loads").expect("a router ships for the default SLM");
    assert_eq!(name, shipped_name(DEFAULT_SLM));
    let tau = model.meta().calibration.tau_for_rate(DEFAULT_ESCALATION_RATE).expect("calibrated");
    let mut router = MlpRouter::from_model(model);

    let data = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/data/commonsense_qa/validation.jsonl")).expect("validation set");
    let (mut escalated, mut tokens) = (0, 0);
    let mut cache = lm.new_cache(None).expect("cache");
    for line in data.lines().take(6) {
        let item: serde_json::Value = serde_json::from_str(line).expect("item");
        let prompt = tok.encode(&render_user(&cqa_prompt(&item))).expect("encodes");
        let mut slm = OnnxSlm::new(&mut lm, &mut cache, Default::default()).expect("slm");
        // No cloud: every escalation falls back, which is what lets this count the router's
        // choices on the SLM's own text.
        let stats = decode(&mut slm, &mut router, &mut NoCloud, &prompt, DecodeParams { max_new_tokens: 64, tau, rate_control: None }, |_| ControlFlow::Continue(())).await.expect("decodes");
        escalated += stats.routing.escalated;
        tokens += stats.tokens;
    }
    let rate = escalated as f64 / tokens as f64;
    // Calibrated on other prompts' tokens; six answers are a small sample, hence the band.
    assert!((0.03..=0.25).contains(&rate), "escalated {escalated} of {tokens} tokens ({:.1} %), target {:.0} %", rate * 100.0, DEFAULT_ESCALATION_RATE * 100.0);
}

#[test]
fn confidence_is_still_available_and_needs_no_router_file() {
    let files = ModelFiles::locate(DEFAULT_SLM).expect("the default SLM is prepared");
    assert!(trained_router("confidence", &files.manifest, &files.manifest.tokenizer_fingerprint).expect("no file needed").is_none());
}

#[test]
fn default_router_for_an_slm_without_one_is_the_confidence_router() {
    let files = ModelFiles::locate(DEFAULT_SLM).expect("the default SLM is prepared");
    let mut other = files.manifest.clone();
    other.id = "an-slm-nobody-trained-a-router-for".into();
    assert!(trained_router("default", &other, &other.tokenizer_fingerprint).expect("falls back").is_none());
}

#[test]
fn the_shipped_router_signed_into_a_bundle_is_accepted_by_a_device_as_the_same_router() {
    let files = ModelFiles::locate(DEFAULT_SLM).expect("the default SLM is prepared");
    let m = &files.manifest;
    // The bytes compiled in, as an operator hands them to `cloud-gateway fleet bundle`.
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/routers/qwen2.5-coder-0.5b-instruct.router.safetensors")).expect("the shipped router file");
    let key = SigningKey::generate().expect("a signing key").0;
    let manifest = BundleManifest {
        version: "shipped-1".into(),
        slm_id: m.id.clone(),
        tokenizer_fingerprint: m.tokenizer_fingerprint.clone(),
        settings: DeviceSettings { escalation_rate: Some(DEFAULT_ESCALATION_RATE), ..DeviceSettings::default() },
        router_sha256: Default::default(),
        key_id: [0; 8],
        created_unix: 0,
    };
    let bundle = Bundle::sign(manifest, bytes, &key).expect("signs").encode();
    let target = DeviceTarget { slm_id: m.id.clone(), tokenizer_fingerprint: m.tokenizer_fingerprint.clone(), hidden_size: m.hidden_size };
    let active = accept(&bundle, &BundleRef::of("shipped-1", &bundle), &key.verifying_key(), &target).expect("the device accepts it");
    let (shipped, _) = trained_router("default", m, &m.tokenizer_fingerprint).expect("loads").expect("ships");
    assert_eq!(active.router.meta().pooling, shipped.meta().pooling, "pooling travels with the file");
    let (a, b) = (active.router.meta().calibration.tau_for_rate(DEFAULT_ESCALATION_RATE).expect("tau"), shipped.meta().calibration.tau_for_rate(DEFAULT_ESCALATION_RATE).expect("tau"));
    assert_eq!(a, b, "the same calibration");
    assert_eq!(active.settings.escalation_rate, Some(DEFAULT_ESCALATION_RATE));
}
