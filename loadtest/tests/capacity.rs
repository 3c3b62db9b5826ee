//! `loadtest capacity` end to end: the search runs real fleets (fixed-cost backend, its own
//! process) row by row and writes its JSON, markdown and HTML reports; a server that still
//! meets the level at the largest fleet allowed is reported as a lower bound. Bad options are
//! refused by name. A few seconds of load per probe; the measurements are in
//! docs/src/benchmarks/gateway.md ("Capacity: devices per LLM server at a service level").

use std::process::Command;

fn loadtest() -> Command {
    Command::new(env!("CARGO_BIN_EXE_loadtest"))
}

#[test]
fn every_row_is_searched_and_a_level_held_at_the_maximum_is_a_lower_bound() {
    let out = tempfile::tempdir().expect("tempdir");
    let status = loadtest()
        .args(["--log", "error", "capacity", "--backend", "fixed-cost:5", "--devices", "1", "--max-devices", "2", "--duration-s", "3", "--ramp-up-s", "0.5"])
        .args(["--think-time-s", "0.3", "--escalation-rate", "0.2", "--profiles", "direct", "--rows", "one-token,draft", "--min-escalations", "5", "--progress-s", "0"])
        .arg("--out")
        .arg(out.path())
        .status()
        .expect("loadtest runs");
    assert!(status.success());
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.path().join("capacity.json")).expect("capacity.json")).expect("JSON");
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert_eq!((row["capacity"].as_u64(), row["lower_bound"].as_bool()), (Some(2), Some(true)), "{row}");
        let devices: Vec<u64> = row["probes"].as_array().expect("probes").iter().filter_map(|p| p["devices"].as_u64()).collect();
        assert_eq!(devices, vec![1, 2], "doubling from the first size up to the maximum");
    }
    assert!(rows[1]["probes"][0]["drafts"].as_u64().is_some_and(|d| d > 0), "the draft row's devices sent drafts");
    let html = std::fs::read_to_string(out.path().join("capacity.html")).expect("capacity.html");
    assert!(html.contains("<svg") && !html.contains("<script"), "a self-contained page with the plot");
    assert!(out.path().join("draft-2.html").exists(), "each probe's fleet report is kept");
    assert!(std::fs::read_to_string(out.path().join("capacity.md")).expect("capacity.md").contains("| one-token | **2+**"));
}

#[test]
fn a_level_outside_its_range_is_refused_by_name() {
    let out = tempfile::tempdir().expect("tempdir");
    let o = loadtest().args(["capacity", "--served-at-least", "1.5", "--out"]).arg(out.path()).output().expect("loadtest runs");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--served-at-least"), "{}", String::from_utf8_lossy(&o.stderr));
}
