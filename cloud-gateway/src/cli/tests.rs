use std::time::Duration;

use clap::Parser;

use super::*;
use crate::config::{BatcherConfig, CertSource, FairShareMode, RateLimit};
use crate::engine::pool::pick::Routing;
use crate::engine::pool::PoolConfig;

fn argv(args: &[&str]) -> Vec<OsString> {
    args.iter().map(Into::into).collect()
}

#[test]
fn no_flags_mean_the_default_configuration() {
    let args = GatewayArgs::parse_from(["cloud-gateway"]);
    assert_eq!(args.gateway_config().unwrap(), GatewayConfig::default());
    let opts = args.embedded_options();
    let defaults = EmbeddedOptions::default();
    assert_eq!((opts.model, opts.threads, opts.max_context, opts.max_cached_sessions), (defaults.model, defaults.threads, defaults.max_context, defaults.max_cached_sessions));
}

#[test]
fn flags_map_onto_their_sections() {
    let args = GatewayArgs::parse_from([
        "cloud-gateway",
        "--listen=0.0.0.0:5000",
        "--http-listen=off",
        "--tls-cert=c.pem",
        "--tls-key=k.pem",
        "--auth-token=sesame",
        "--max-batch=4",
        "--max-wait-ms=7",
        "--queue-capacity=9",
        "--max-connections=2",
        "--drain-grace-secs=45",
        "--drain-redirect=gw-b:4433",
        "--admin-token=root",
        "--client-ca=fleet/ca-cert.pem",
        "--revoked-file=revoked.txt",
        "--revoked-poll-ms=250",
        "--device-rate-limit=20",
        "--device-rate-burst=40",
        "--max-sessions-per-device=3",
        "--session-idle-secs=9",
    ]);
    let c = args.gateway_config().unwrap();
    let t = &c.transport;
    assert_eq!((t.listen.to_string(), t.http_listen, t.max_connections), ("0.0.0.0:5000".to_string(), None, 2));
    assert_eq!(t.cert, CertSource::Files { cert: "c.pem".into(), key: "k.pem".into() });
    assert_eq!(c.identity.auth_token.as_deref(), Some("sesame"));
    assert_eq!(c.batcher, BatcherConfig { max_batch: 4, max_wait: Duration::from_millis(7), queue_capacity: 9 });
    assert_eq!((c.drain.grace, c.drain.redirect.as_deref(), c.drain.admin_token.as_deref()), (Duration::from_secs(45), Some("gw-b:4433"), Some("root")));
    assert_eq!((c.identity.client_ca.as_deref(), c.identity.revoked_file.as_deref()), (Some(std::path::Path::new("fleet/ca-cert.pem")), Some(std::path::Path::new("revoked.txt"))));
    assert_eq!((c.identity.revoked_poll, c.identity.device_rate), (Duration::from_millis(250), RateLimit { per_second: 20, burst: 40 }));
    assert_eq!((c.sessions.max_per_device, c.sessions.idle), (3, Duration::from_secs(9)));
    assert!(GatewayArgs::parse_from(["cloud-gateway", "--queue-capacity=0"]).gateway_config().is_err());
    assert!(GatewayArgs::parse_from(["cloud-gateway", "--max-batch=0"]).gateway_config().is_err());
}

#[test]
fn overload_flags_map_onto_the_configuration() {
    let args = GatewayArgs::parse_from([
        "cloud-gateway",
        "--max-batch-tokens=64",
        "--ready-saturated-ms=1500",
        "--ready-stalled-ms=9000",
        "--max-sessions=1000",
        "--max-connections-per-source=8",
        "--stream-read-timeout-ms=2500",
        "--max-buffered-bytes-per-connection=200000",
        "--max-buffered-bytes=9000000",
        "--fair-share=off",
        "--fair-line=on",
    ]);
    let config = args.gateway_config().unwrap();
    let o = config.overload;
    assert!(o.fair_share == FairShareMode::Off && config.engines.pool.fair_line);
    let d = GatewayConfig::default();
    assert!(d.overload.fair_share == FairShareMode::Device && !d.engines.pool.fair_line, "devices share fairly by default, without the engine path's line");
    assert_eq!((o.max_batch_tokens, o.max_sessions, o.max_connections_per_source), (64, 1000, 8));
    assert_eq!((o.ready_saturated_after, o.ready_stalled_after, o.stream_read_timeout), (Duration::from_millis(1500), Duration::from_secs(9), Duration::from_millis(2500)));
    assert_eq!((o.max_buffered_bytes_per_connection, o.max_buffered_bytes), (200_000, 9_000_000));
    let tiny = GatewayArgs::parse_from(["cloud-gateway", "--max-buffered-bytes-per-connection=1"]).gateway_config().unwrap().overload;
    assert!(tiny.max_buffered_bytes_per_connection > GatewayConfig::default().transport.max_frame_bytes, "one frame always fits");
}

#[test]
fn a_sectioned_config_file_sets_any_flag_and_the_command_line_wins() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("gateway.toml");
    let text = "[transport]\nhttp-listen = \"off\"\n[batcher]\nmax-batch = 4\n[engines]\nengine = [\"llamacpp=http://a:1\", \"llamacpp=http://b:1\"]\nengine-routing = \"round-robin\"\nengine-startup-secs = 7\n";
    std::fs::write(&f, text).unwrap();
    let with = |extra: &[&str]| -> Vec<OsString> { ["cloud-gateway", "--config", f.to_str().unwrap()].iter().chain(extra).map(Into::into).collect() };
    let args = GatewayArgs::from_argv(with(&["--max-batch=2"])).unwrap();
    assert!(args.config_warnings.is_empty(), "{:?}", args.config_warnings);
    let c = args.gateway_config().unwrap();
    assert_eq!((c.engines.pool.engines.len(), c.engines.pool.pick.routing, c.engines.startup_wait), (2, Routing::RoundRobin, Duration::from_secs(7)));
    assert_eq!((c.batcher.max_batch, c.transport.http_listen), (2, None));
}

#[test]
fn a_config_file_with_an_unknown_section_or_key_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("gateway.toml");
    let refused = |text: &str| {
        std::fs::write(&f, text).unwrap();
        GatewayArgs::from_argv(argv(&["cloud-gateway", "--config", f.to_str().unwrap()])).unwrap_err().to_string()
    };
    let err = refused("[batching]\nmax-batch = 4\n");
    assert!(err.contains("unknown section [batching]") && err.contains("transport, identity, sessions, embedded, batcher"), "{err}");
    let err = refused("[batcher]\nmax_batch = 4\n");
    assert!(err.contains("unknown key `max_batch` in [batcher]") && err.contains("max-batch"), "{err}");
    let err = refused("[transport]\nmax-batch = 4\n");
    assert!(err.contains("`max-batch` belongs in [batcher], not [transport]"), "{err}");
}

#[test]
fn client_crls_come_from_the_flag_its_variable_or_the_identity_section_and_need_a_client_ca() {
    let args = GatewayArgs::parse_from(["cloud-gateway", "--client-ca=ca.pem", "--client-crl=a.pem,b.pem", "--client-crl=c.pem"]);
    let c = args.gateway_config().unwrap();
    assert_eq!(c.identity.client_crls, [std::path::PathBuf::from("a.pem"), "b.pem".into(), "c.pem".into()]);
    assert!(GatewayArgs::parse_from(["cloud-gateway", "--client-crl=a.pem"]).gateway_config().is_err(), "a CRL without the CA it comes from");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("gateway.toml");
    std::fs::write(&f, "[identity]\nclient-ca = \"ca.pem\"\nclient-crl = [\"fleet-crl.pem\"]\n").unwrap();
    let c = GatewayArgs::from_argv(argv(&["cloud-gateway", "--config", f.to_str().unwrap()])).unwrap().gateway_config().unwrap();
    assert_eq!(c.identity.client_crls, [std::path::PathBuf::from("fleet-crl.pem")]);
}

#[test]
fn a_flat_config_file_still_works_for_a_release_with_a_warning_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("gateway.toml");
    std::fs::write(&f, "max-batch = 4\nengine = [\"llamacpp=http://a:1\"]\n").unwrap();
    let args = GatewayArgs::from_argv(argv(&["cloud-gateway", "--config", f.to_str().unwrap()])).unwrap();
    let c = args.gateway_config().unwrap();
    assert_eq!((c.batcher.max_batch, c.engines.pool.engines.len()), (4, 1));
    assert_eq!(args.config_warnings.len(), 2);
    assert!(args.config_warnings.iter().any(|w| w.contains("`engine`") && w.contains("[engines]")), "{:?}", args.config_warnings);
}

#[test]
fn help_shows_one_heading_per_section_and_every_flag_has_an_environment_twin() {
    let mut command = GatewayArgs::command();
    let help = command.render_long_help().to_string();
    for section in SECTIONS {
        assert!(help.contains(&format!("{}:", section.heading)), "no {} heading in\n{help}", section.heading);
    }
    for arg in command.get_arguments().filter(|a| !matches!(a.get_id().as_str(), "help" | "version" | "check")) {
        assert!(arg.get_env().is_some_and(|e| e.to_string_lossy().starts_with("DUET_")), "--{:?} has no DUET_* twin", arg.get_long());
        assert!(arg.get_id() == "config" || arg.get_help_heading().is_some(), "--{:?} is in no section", arg.get_long());
    }
}

#[test]
fn engine_flags_map_onto_the_pool_and_a_bad_engine_is_refused_by_name() {
    let args = GatewayArgs::parse_from([
        "cloud-gateway",
        "--engine=llamacpp=http://a:1",
        "--engine",
        "sglang=http://b:2/,vllm=https://c:3",
        "--engine-routing=round-robin",
        "--engine-max-in-flight=3",
        "--engine-breaker-failures=7",
        "--engine-breaker-open-ms=900",
        "--engine-resolve-interval-ms=2500",
    ]);
    let p = args.gateway_config().unwrap().engines.pool;
    let urls: Vec<String> = p.engines.iter().map(|e| e.to_string()).collect();
    assert_eq!(urls, ["llamacpp=http://a:1", "sglang=http://b:2", "vllm=https://c:3"]);
    assert_eq!((p.pick.routing, p.max_in_flight_per_worker), (Routing::RoundRobin, 3));
    assert_eq!((p.breaker.failure_threshold, p.breaker.open_for), (7, Duration::from_millis(900)));
    assert_eq!(p.resolve_interval, Duration::from_millis(2500));
    let default_pool = GatewayArgs::parse_from(["cloud-gateway"]).gateway_config().unwrap().engines.pool;
    assert_eq!(default_pool.resolve_interval, PoolConfig::default().resolve_interval);
    assert!(default_pool.engines.is_empty(), "no engine: the embedded LLM");
    let discovered = GatewayArgs::parse_from(["cloud-gateway", "--engine=llamacpp=dns+http://duet-llama:8080"]).gateway_config().unwrap().engines.pool;
    assert!(discovered.engines[0].discover, "dns+ asks for discovery");
    let err = GatewayArgs::try_parse_from(["cloud-gateway", "--engine=tgi=http://x:1"]).unwrap_err().to_string();
    assert!(err.contains("unknown engine `tgi`"), "{err}");
    assert!(GatewayArgs::parse_from(["cloud-gateway", "--engine-resolve-interval-ms=5"]).gateway_config().is_err());
}

#[test]
fn engine_admission_by_cost_is_on_by_default_and_off_by_flag_or_file() {
    assert!(GatewayArgs::parse_from(["cloud-gateway"]).gateway_config().unwrap().engines.pool.admit_by_cost);
    assert!(!GatewayArgs::parse_from(["cloud-gateway", "--engine-admission=off"]).gateway_config().unwrap().engines.pool.admit_by_cost);
    assert!(GatewayArgs::try_parse_from(["cloud-gateway", "--engine-admission=maybe"]).is_err());
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("gateway.toml");
    std::fs::write(&f, "[engines]\nengine-admission = \"off\"\n").unwrap();
    let args = GatewayArgs::from_argv(argv(&["cloud-gateway", "--config", f.to_str().unwrap()])).unwrap();
    assert!(!args.gateway_config().unwrap().engines.pool.admit_by_cost, "the [engines] key");
}

#[test]
fn recording_and_replaying_answers_are_flags_and_keys_of_the_embedded_section_and_exclude_each_other() {
    let args = GatewayArgs::parse_from(["cloud-gateway", "--replay-answers=a.bin", "--backend-delay-ms=25", "--backend-token-delay-us=100", "--backend-draft-token-delay-us=100"]);
    let e = &args.embedded;
    assert_eq!((e.replay_answers.as_deref(), e.record_answers.as_deref()), (Some(std::path::Path::new("a.bin")), None));
    assert_eq!((e.backend_delay_ms, e.backend_token_delay_us, e.backend_draft_token_delay_us), (25, 100, 100));
    assert!(GatewayArgs::try_parse_from(["cloud-gateway", "--replay-answers=a.bin", "--record-answers=b.bin"]).is_err(), "one or the other");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("gateway.toml");
    std::fs::write(&f, "[embedded]\nrecord-answers = \"rec.bin\"\nbackend-draft-token-delay-us = 7\n").unwrap();
    let args = GatewayArgs::from_argv(argv(&["cloud-gateway", "--config", f.to_str().unwrap()])).unwrap();
    assert_eq!((args.embedded.record_answers.as_deref(), args.embedded.backend_draft_token_delay_us), (Some(std::path::Path::new("rec.bin")), 7));
    let missing = GatewayArgs::parse_from(["cloud-gateway", "--replay-answers", dir.path().join("none.bin").to_str().unwrap()]);
    let err = missing.load_backend().err().expect("no such recording").to_string();
    assert!(err.contains("none.bin"), "{err}");
}

#[test]
fn the_engine_paths_line_is_an_engines_key_and_the_switches_take_the_same_words_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("gateway.toml");
    std::fs::write(&f, "[overload]\nfair-share = \"device\"\n[engines]\nfair-line = \"on\"\nengine-routing = \"round-robin\"\nengine-admission = \"cost\"\n").unwrap();
    let config = GatewayArgs::from_argv(argv(&["cloud-gateway", "--config", f.to_str().unwrap()])).unwrap().gateway_config().unwrap();
    assert!(config.overload.fair_share == FairShareMode::Device && config.engines.pool.fair_line && config.engines.pool.admit_by_cost);
    assert_eq!(config.engines.pool.pick.routing, Routing::RoundRobin);
    std::fs::write(&f, "[overload]\nfair-line = \"on\"\n").unwrap();
    let err = GatewayArgs::from_argv(argv(&["cloud-gateway", "--config", f.to_str().unwrap()])).err().map(|e| format!("{e:#}")).unwrap_or_default();
    assert!(err.contains("fair-line"), "refused by name in [overload]: {err}");
    for bad in ["--fair-share=maybe", "--fair-line=yes", "--engine-routing=random", "--engine-admission=maybe"] {
        assert!(GatewayArgs::try_parse_from(["cloud-gateway", bad]).is_err(), "{bad}");
    }
    let off = GatewayArgs::parse_from(["cloud-gateway", "--fair-share=off", "--engine-routing=sticky", "--engine-admission=off"]).gateway_config().unwrap();
    assert!(off.overload.fair_share == FairShareMode::Off && !off.engines.pool.admit_by_cost && off.engines.pool.pick.routing == Routing::Sticky);
}
