//! The impairment relay in front of a real Duet gateway over QUIC, and the `loadtest relay`
//! command, which refuses bad profiles and options with messages that say what is wrong.

use std::process::Command;
use std::time::{Duration, Instant};

use relay::{Profiles, Relay, RelayConfig};

mod quic {
    use super::*;
    use cloud_gateway::Gateway;
    use common::protocol::{ContextTracker, Frame, WireSampling};
    use edge_node::link::{Link, LinkConfig};
    use loadtest::fixed_backend::FixedCostBackend;
    use model_runtime::model_files::ModelManifest;

    /// What the devices and the fixed-cost backend agree on; no model files needed.
    fn manifest() -> ModelManifest {
        ModelManifest {
            id: "relay-test".into(),
            source: String::new(),
            precision: "int4".into(),
            num_layers: 1,
            num_kv_heads: 1,
            head_size: 1,
            hidden_size: 1,
            vocab_size: 32_000,
            context_length: 4096,
            eos_token_ids: vec![0],
            tokenizer_fingerprint: "relay-test-tokenizer".into(),
        }
    }

    /// The fixed-cost backend's answer (FNV-1a of the context modulo the vocabulary).
    fn expected(context: &[u32]) -> u32 {
        let h = context.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| (h ^ t as u64).wrapping_mul(0x100_0000_01b3));
        (h % 32_000) as u32
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_device_link_connects_and_escalations_are_answered_through_4g() {
        let dir = tempfile::tempdir().unwrap();
        let (config, cert) = loadtest::loopback::loopback_config(dir.path()).unwrap();
        let gw = Gateway::start(config, Box::new(FixedCostBackend::new(Duration::ZERO, &manifest()))).await.unwrap();
        let g4 = Profiles::builtin().get("4g").unwrap().clone();
        let relay = Relay::start(RelayConfig { seed: 3, ..RelayConfig::new("127.0.0.1:0".parse().unwrap(), gw.local_addr().unwrap(), g4) }).await.unwrap();

        let link = Link::start(LinkConfig::new(relay.local_addr().to_string(), Some(cert), "device-behind-4g", "relay-test-tokenizer")).unwrap();
        link.wait_up(Duration::from_secs(10)).await.expect("the link comes up through the relay");
        let mut tracker = ContextTracker::new();
        let mut ctx: Vec<u32> = (1..40).collect();
        let mut rtts = Vec::new();
        for k in 0..8 {
            ctx.extend([100 + k, 200 + k]);
            let sync = tracker.sync_for(&ctx);
            let frame = Frame::Escalate { session_id: 1, seq: sync.seq, context: sync.context, sampling: WireSampling::default(), deadline_ms: 10_000 };
            let t = Instant::now();
            match link.request(&frame, Instant::now() + Duration::from_secs(10)).await {
                Ok((Frame::Token { token_id, .. }, _)) => {
                    assert_eq!(token_id, expected(&ctx), "the backend's token for exactly this context");
                    ctx.push(token_id);
                }
                other => panic!("escalation {k}: {other:?}"),
            }
            rtts.push(t.elapsed().as_secs_f64() * 1e3);
        }
        rtts.sort_by(f64::total_cmp);
        // 4g: 50 +- 20 ms each way, so a round trip takes at least 60 ms (a lost packet's
        // retransmission can make one much longer).
        assert!(rtts[0] >= 60.0 && rtts[4] < 400.0, "{rtts:?}");
        let stats = relay.stats();
        assert_eq!(stats.clients, 1);
        assert!(stats.up.packets_out > 8 && stats.down.packets_out > 8, "{stats:?}");
        drop(link);
        relay.shutdown().await;
        gw.shutdown().await;
    }
}

mod command_line {
    use super::*;

    fn loadtest(args: &[&str]) -> (bool, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_loadtest")).arg("relay").args(args).env_remove("DUET_LOG").output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    #[test]
    fn an_unknown_profile_is_refused_with_the_known_names() {
        let (ok, _, err) = loadtest(&["--profile", "5g", "--upstream", "127.0.0.1:9"]);
        assert!(!ok);
        assert!(err.contains("unknown network profile \"5g\" (known: 3g-lossy, 4g, flapping, lan, satellite, wifi)"), "{err}");
    }

    #[test]
    fn a_bad_profiles_file_is_refused_naming_the_profile_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[4g]\nloss = 2\n").unwrap();
        let (ok, _, err) = loadtest(&["--profiles-file", bad.to_str().unwrap(), "--profile", "4g", "--upstream", "127.0.0.1:9"]);
        assert!(!ok && err.contains("profile \"4g\": loss = 2 is not a probability (0 to 1)"), "{err}");
        std::fs::write(&bad, "[edge]\ndelay_ms = 10\njiter_ms = 5\n").unwrap();
        let (ok, _, err) = loadtest(&["--profiles-file", bad.to_str().unwrap(), "--upstream", "127.0.0.1:9"]);
        assert!(!ok && err.contains("profile \"edge\"") && err.contains("unknown field `jiter_ms`"), "{err}");
        let (ok, _, err) = loadtest(&["--profiles-file", "/nonexistent.toml", "--upstream", "127.0.0.1:9"]);
        assert!(!ok && err.contains("reading network profiles /nonexistent.toml"), "{err}");
    }

    #[test]
    fn bad_options_are_refused_by_name() {
        let (ok, _, err) = loadtest(&["--profile", "4g"]);
        assert!(!ok && err.contains("--upstream"), "{err}");
        let (ok, _, err) = loadtest(&["--upstream", "no-port"]);
        assert!(!ok && err.contains("--upstream no-port: not a HOST:PORT"), "{err}");
        let (ok, _, err) = loadtest(&["--upstream", "127.0.0.1:9", "--idle-timeout-s", "0"]);
        assert!(!ok && err.contains("--idle-timeout-s must be > 0"), "{err}");
        let (ok, _, err) = loadtest(&["--upstream", "127.0.0.1:9", "--seed=-1"]);
        assert!(!ok && err.contains("--seed"), "{err}");
    }

    #[test]
    fn list_shows_every_profile_and_a_timed_run_prints_its_statistics() {
        let (ok, out, _) = loadtest(&["--list"]);
        assert!(ok);
        for name in ["lan", "wifi", "4g", "3g-lossy", "satellite", "flapping"] {
            assert!(out.lines().any(|l| l.starts_with(name)), "{out}");
        }
        let (ok, out, err) = loadtest(&["--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9", "--profile", "4g", "--duration-s", "0.3"]);
        assert!(ok, "{err}");
        assert!(err.contains("profile 4g"), "{err}");
        let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(stats["profile"], "4g");
        assert_eq!(stats["up"]["packets_in"], 0);
    }
}
