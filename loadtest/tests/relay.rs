//! The impairment relay over real sockets on loopback: what it applies is measured from the
//! outside (round trips to an echo server behind it, a real Duet gateway over QUIC), and the
//! `loadtest relay` command refuses bad profiles and options with messages that say what is
//! wrong.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use loadtest::relay::bench::EchoServer;
use loadtest::relay::{Blackout, LinkParams, Profile, Profiles, Relay, RelayConfig};
use tokio::net::UdpSocket;

fn profile(params: LinkParams) -> Profile {
    Profile { name: "test".into(), description: String::new(), up: params.clone(), down: params }
}

async fn relay_to_echo(params: LinkParams) -> (Relay, EchoServer) {
    let echo = EchoServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let relay = Relay::start(RelayConfig::new("127.0.0.1:0".parse().unwrap(), echo.local_addr(), profile(params))).await.unwrap();
    (relay, echo)
}

async fn client(target: SocketAddr) -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.connect(target).await.unwrap();
    s
}

/// One round trip of `seq`; its time, or `None` if nothing came back within `timeout`.
async fn round_trip(s: &UdpSocket, seq: u64, timeout: Duration) -> Option<Duration> {
    let t = Instant::now();
    s.send(&seq.to_le_bytes()).await.unwrap();
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout_at((t + timeout).into(), s.recv(&mut buf)).await {
            Ok(Ok(8)) if buf[..8] == seq.to_le_bytes() => return Some(t.elapsed()),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_trip_through_the_relay_takes_twice_the_one_way_delay() {
    let (relay, echo) = relay_to_echo(LinkParams { delay_ms: 40.0, ..LinkParams::default() }).await;
    let (direct, relayed) = (client(echo.local_addr()).await, client(relay.local_addr()).await);
    let mut rtts = Vec::new();
    for seq in 0..15 {
        assert!(round_trip(&direct, seq, Duration::from_secs(1)).await.unwrap() < Duration::from_millis(20));
        rtts.push(round_trip(&relayed, seq, Duration::from_secs(1)).await.expect("no loss configured").as_secs_f64() * 1e3);
    }
    rtts.sort_by(f64::total_cmp);
    // 2 x 40 ms, plus under 1 ms of timer granularity per direction and loopback.
    assert!(rtts[0] >= 80.0 && rtts[7] < 88.0 && rtts[14] < 150.0, "{rtts:?}");
    let stats = relay.stats();
    assert_eq!((stats.up.packets_out, stats.down.packets_out, stats.clients), (15, 15, 1));
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_through_the_relay_is_the_configured_rate_each_way() {
    let (relay, _echo) = relay_to_echo(LinkParams { loss: 0.2, ..LinkParams::default() }).await;
    let s = std::sync::Arc::new(client(relay.local_addr()).await);
    // Read while sending: a socket buffer holds only a few hundred small datagrams.
    let reader = s.clone();
    let counter = tokio::spawn(async move {
        let (mut back, mut buf) = (0u64, [0u8; 64]);
        while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(300), reader.recv(&mut buf)).await {
            back += 1;
        }
        back
    });
    let n = 2000u64;
    for seq in 0..n {
        s.send(&seq.to_le_bytes()).await.unwrap();
        if seq % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let back = counter.await.unwrap();
    let stats = relay.stats();
    // Each way 20 %: 64 % of round trips survive (standard deviation about 1 %).
    let share = back as f64 / n as f64;
    assert!((share - 0.64).abs() < 0.05, "{share}");
    let up_loss = stats.up.dropped.loss as f64 / stats.up.packets_in as f64;
    assert!((up_loss - 0.2).abs() < 0.03, "{up_loss}");
    assert_eq!(stats.up.packets_in, n);
    assert_eq!(stats.up.packets_out + stats.up.dropped.total(), n);
    assert_eq!(stats.down.packets_out, back);
    assert_eq!(stats.up.dropped.overflow + stats.down.dropped.overflow, 0);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackout_drops_everything_in_its_window_then_traffic_resumes() {
    let (relay, _echo) = relay_to_echo(LinkParams { blackout: Some(Blackout { every_s: 10.0, for_s: 0.4, offset_s: Some(0.3) }), ..LinkParams::default() }).await;
    let t0 = relay.epoch();
    let s = std::sync::Arc::new(client(relay.local_addr()).await);
    let reader = s.clone();
    let echoed = tokio::spawn(async move {
        let (mut seqs, mut buf) = (std::collections::HashSet::new(), [0u8; 64]);
        // Longer than the blackout: silence during it is expected.
        while let Ok(Ok(8)) = tokio::time::timeout(Duration::from_millis(700), reader.recv(&mut buf)).await {
            seqs.insert(u64::from_le_bytes(buf[..8].try_into().unwrap()));
        }
        seqs
    });
    // One datagram every 5 ms for a second; the echo says which got through both ways.
    let mut sent = Vec::new();
    while t0.elapsed() < Duration::from_secs(1) {
        sent.push(t0.elapsed().as_secs_f64());
        s.send(&(sent.len() as u64 - 1).to_le_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let echoed = echoed.await.unwrap();
    let fates: Vec<(f64, bool)> = sent.iter().enumerate().map(|(i, &t)| (t, echoed.contains(&(i as u64)))).collect();
    // The window is [0.3, 0.7) s after the relay started.
    let inside: Vec<_> = fates.iter().filter(|(t, _)| (0.33..0.67).contains(t)).collect();
    let before: Vec<_> = fates.iter().filter(|(t, _)| *t < 0.27).collect();
    let after: Vec<_> = fates.iter().filter(|(t, _)| *t > 0.73).collect();
    assert!(inside.len() > 20 && inside.iter().all(|(_, ok)| !ok), "{fates:?}");
    assert!(before.len() > 20 && after.len() > 20, "{fates:?}");
    assert!(before.iter().chain(&after).all(|(_, ok)| *ok), "{fates:?}");
    let stats = relay.stats();
    assert!(stats.up.dropped.blackout >= inside.len() as u64);
    assert_eq!(stats.up.dropped.total(), stats.up.dropped.blackout);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_table_is_bounded_and_forgets_idle_clients() {
    let echo = EchoServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let config = RelayConfig { max_clients: 2, idle_timeout: Duration::from_millis(300), ..RelayConfig::new("127.0.0.1:0".parse().unwrap(), echo.local_addr(), Profile::clean("lan")) };
    let relay = Relay::start(config).await.unwrap();
    let (a, b, c) = (client(relay.local_addr()).await, client(relay.local_addr()).await, client(relay.local_addr()).await);
    let wait = Duration::from_millis(200);
    assert!(round_trip(&a, 1, wait).await.is_some());
    assert!(round_trip(&b, 1, wait).await.is_some());
    assert!(round_trip(&c, 1, wait).await.is_none(), "a third client is over the bound");
    let stats = relay.stats();
    assert_eq!((stats.clients, stats.clients_refused, stats.up.dropped.overflow), (2, 1, 1));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stats = relay.stats();
    assert_eq!((stats.clients, stats.clients_expired), (0, 2));
    assert!(round_trip(&c, 2, wait).await.is_some(), "room again after the idle timeout");
    assert_eq!(relay.stats().clients_total, 3);
    relay.shutdown().await;
}

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
