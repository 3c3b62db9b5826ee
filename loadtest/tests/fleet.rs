//! `loadtest fleet` end to end: a small fleet against a real gateway (fixed-cost backend, its
//! own process) through the impairment relay passes every device's correctness checks under
//! `4g` and under blackouts, and with a certificate per device against a gateway that verifies
//! them (which refuses devices without one), and with drafts; bad options are refused with a
//! message that says what to fix.
//! Kept to about ten seconds of load each; the long measurements are in
//! docs/src/benchmarks/fleet.md.

use std::path::Path;
use std::process::Command;

use clap::Parser;
use loadtest::fleet::{self, report, FleetArgs};

/// The command line as `loadtest fleet` parses it.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: FleetArgs,
}

fn args(extra: &[&str]) -> FleetArgs {
    let base = ["fleet", "--devices", "50", "--ramp-up-s", "2", "--duration-s", "8", "--think-time-s", "0.5", "--escalation-rate", "0.15", "--progress-s", "0", "--baseline-devices", "2"];
    Cli::parse_from(base.iter().chain(extra)).args
}

fn run(args: FleetArgs) -> report::FleetReport {
    let plan = fleet::plan(args).expect("the options are valid");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let result = rt.block_on(fleet::run_fleet(plan, Path::new(env!("CARGO_BIN_EXE_loadtest")))).expect("the fleet runs");
    let report = report::build(&result);
    let html = fleet::html::render(&result, &report);
    assert!(html.contains("<svg") && html.contains("Correctness: 0 violations") && !html.contains("<script"), "a self-contained HTML report");
    report
}

fn assert_correct(r: &report::FleetReport) {
    let c = &r.correctness;
    assert_eq!(c.violations, 0, "violations: {:?}", c.samples);
    assert!(c.sessions_checked >= 50, "{c:?}");
    assert!(c.tokens_checked > 1000 && c.cloud_tokens_checked > 50 && c.contexts_checked >= c.cloud_tokens_checked, "{c:?}");
}

#[test]
fn a_small_fleet_on_4g_passes_every_correctness_check() {
    let r = run(args(&["--profiles", "4g"]));
    assert_correct(&r);
    let p = &r.profiles[0];
    assert_eq!((p.profile.as_str(), p.devices, p.connected), ("4g", 50, 50));
    assert!(p.goodput > 0.8, "4g answers most escalations in time: {p:?}");
    assert!(p.escalation_rtt_ms.p50 > 80.0, "the relay's 2 x 50 ms is in the round trip: {:?}", p.escalation_rtt_ms);
    assert!(p.itl_p99_within_deadline_max && p.stalls == 0, "{:?}", p.itl_ms);
    assert!(r.gateway.connections_idle >= 50.0 && r.gateway.escalations_received > 0.0, "the gateway's /metrics were scraped: {:?}", r.gateway);
    assert!(r.gateway.rss_idle_mib.is_some(), "the gateway's own process was sampled");
    assert!(r.local_only.as_ref().is_some_and(|l| l.tokens > 0 && l.escalated == 0), "the local-only baseline ran");
    assert!(r.relays[0].up.packets_in > 0 && r.relays[0].up.dropped.loss > 0, "1 % loss was applied: {:?}", r.relays[0].up);
}

#[test]
fn a_small_fleet_whose_escalations_carry_drafts_passes_every_correctness_check() {
    let r = run(args(&["--profiles", "direct", "--draft", "adaptive"]));
    assert_correct(&r);
    let p = &r.profiles[0];
    assert!(p.drafts > 50 && p.draft_tokens_sent >= p.drafts, "the devices drafted: {p:?}");
    assert_eq!(p.draft_tokens_accepted, 0, "the fixed-cost backend accepts nothing: its token follows the context alone");
}

#[test]
fn a_small_fleet_through_blackouts_passes_every_correctness_check_and_never_stalls() {
    // `flapping` (4g with a 5 s blackout every 30 s), its schedule compressed so that a
    // ten-second run sees two blackouts.
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("profiles.toml");
    std::fs::write(&file, "[flapping-fast]\nextends = \"flapping\"\nblackout = { every_s = 5, for_s = 2, offset_s = 3 }\n").expect("write");
    let r = run(args(&["--profiles", "flapping-fast", "--profiles-file", file.to_str().expect("utf-8")]));
    assert_correct(&r);
    let p = &r.profiles[0];
    assert!(r.relays[0].up.dropped.blackout > 0, "blackouts happened: {:?}", r.relays[0].up.dropped);
    assert!(p.fallbacks > 0, "escalations fell back during the blackouts");
    assert_eq!(p.stalls, 0, "no token waited past the deadline's maximum: ITL {:?}", p.itl_ms);
    assert!(p.itl_ms.max <= r.deadline_max_ms as f64 + 500.0, "{:?}", p.itl_ms);
    assert!(p.blackouts.is_some());
}

#[test]
fn a_fleet_with_its_own_certificates_passes_every_check_against_a_gateway_that_verifies_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = dir.path().join("fleet-ca");
    cloud_gateway::identity::ca::init_ca(&ca, "Test fleet CA", 1).expect("a fleet CA");
    let r = run(args(&["--profiles", "direct", "--fleet-ca-dir", ca.to_str().expect("utf-8")]));
    assert_correct(&r);
    assert_eq!((r.identity.mode.as_str(), r.identity.certificates), ("mutual_tls_issued", 50), "{:?}", r.identity);
    assert!(r.identity.issue_ms_each.is_some_and(|ms| ms < 20.0), "{:?}", r.identity);
    let p = &r.profiles[0];
    assert_eq!((p.devices, p.connected, p.connect_failures), (50, 50, 0), "every device got in with its certificate");
    assert!(p.cloud_tokens > 0, "{p:?}");
}

#[test]
fn a_gateway_that_verifies_devices_lets_no_device_without_a_certificate_in() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = dir.path().join("fleet-ca");
    let ca_cert = cloud_gateway::identity::ca::init_ca(&ca, "Test fleet CA", 1).expect("a fleet CA");
    let base = ["fleet", "--devices", "3", "--ramp-up-s", "0", "--duration-s", "1", "--connect-timeout-s", "2", "--progress-s", "0", "--baseline-devices", "0", "--profiles", "direct"];
    let a = Cli::parse_from(base.iter().chain(&["--client-ca", ca_cert.to_str().expect("utf-8")])).args;
    let plan = fleet::plan(a).expect("the options are valid");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let result = rt.block_on(fleet::run_fleet(plan, Path::new(env!("CARGO_BIN_EXE_loadtest")))).expect("the fleet runs");
    let r = report::build(&result);
    assert_eq!(r.identity.mode, "none");
    let p = &r.profiles[0];
    assert_eq!((p.connected, p.connect_failures, p.cloud_tokens), (0, 3, 0), "{p:?}");
}

fn refused(extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_loadtest")).arg("fleet").args(extra).output().expect("run loadtest");
    assert!(!out.status.success(), "{extra:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_options_are_refused_with_what_to_fix() {
    for (extra, says) in [
        (&["--devices", "0"][..], "--devices must be at least 1"),
        (&["--duration-s", "0"], "--duration-s must be > 0"),
        (&["--profiles", "5g=10"], "5g"),
        (&["--profiles", "4g=x"], "weight"),
        (&["--mix", "poetry=1"], "no `poetry` sessions"),
        (&["--backend", "gpu"], "fixed-cost[:MS]"),
        (&["--escalation-rate", "2"], "outside [0, 1]"),
        (&["--tau", "0.3", "--escalation-rate", "0.1"], "cannot be used with"),
        (&["--deadline-min-ms", "500", "--deadline-max-ms", "100"], "above --deadline-max-ms"),
        (&["--trace", "/nonexistent/trace.json"], "reading the trace"),
        (&["--gateway", "127.0.0.1:4433"], "--ca-cert"),
        (&["--fleet-ca-dir", "/nonexistent/fleet-ca"], "--fleet-ca-dir /nonexistent/fleet-ca"),
        (&["--client-cert-dir", "/nonexistent/certs"], "no /nonexistent/certs/fleet-0/device-cert.pem for device fleet-0"),
        (&["--fleet-ca-dir", "a", "--client-cert-dir", "b"], "cannot be used with"),
    ] {
        let err = refused(extra);
        assert!(err.contains(says), "{extra:?}: expected `{says}` in:\n{err}");
    }
    let err = refused(&["--profiles", "5g=10"]);
    assert!(err.contains("4g") && err.contains("direct"), "an unknown profile lists the known ones: {err}");
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[slow]\ndelay_ms = 100\nlatency_ms = 5\n").expect("write");
    let err = refused(&["--profiles", "slow", "--profiles-file", bad.to_str().expect("utf-8")]);
    assert!(err.contains("latency_ms"), "a bad profile file names the bad key: {err}");
}
