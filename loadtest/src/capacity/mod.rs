//! `loadtest capacity`: how many devices one LLM server serves at a service level, found by
//! search over the fleet's size (docs/src/benchmarks/gateway.md, "Capacity: devices per LLM
//! server at a service level").
//!
//! Each probe is one `loadtest fleet` run (the real edge stack replaying recorded SLM traces
//! of real tasks, over QUIC, against a gateway in front of the server), judged against the
//! level ([`level`]); the search ([`search`]) picks the next size. Rows are the ways a device
//! asks: one token per escalation, a draft at the length the edge's rule chooses, and the
//! same drafts with the gateway checking a shorter prefix while its queue is old
//! (`--draft-verify by-load`). Because the replayed SLM proposes the trace's tokens, draft
//! lengths and the LLM's acceptance are those of the real models on real prompts (the LLM
//! really checks them), up to where a rejected draft would have changed what the SLM writes
//! next: the replay continues the recorded text there.
//!
//! Every probe's fleet report (JSON and HTML) stays in the output directory beside the
//! capacity report ([`report`]), which sets each row's capacity beside the closed form
//! `1 + γ·t_d/t_v` measured in the same run.

pub mod level;
pub mod report;
pub mod search;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use cloud_gateway::config::DraftVerify;
use edge_node::decode::DraftMode;

use self::level::{Probe, ServiceLevel};
use self::search::FleetSearch;
use crate::fleet::{self, FleetArgs};

/// How the devices of a row escalate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[value(rename_all = "kebab-case")]
pub enum Row {
    /// One token per escalation.
    OneToken,
    /// Drafts at the edge's adaptive length, checked whole.
    Draft,
    /// Drafts at the edge's adaptive length; the gateway checks less of them under load.
    DraftByLoad,
}

impl Row {
    fn draft(self) -> DraftMode {
        match self {
            Row::OneToken => DraftMode::Off,
            Row::Draft | Row::DraftByLoad => DraftMode::Adaptive,
        }
    }

    fn verify(self) -> DraftVerify {
        match self {
            Row::DraftByLoad => DraftVerify::ByLoad,
            Row::OneToken | Row::Draft => DraftVerify::Whole,
        }
    }

    /// Its name on the command line and in reports.
    pub fn name(self) -> String {
        self.to_possible_value().map_or_else(String::new, |v| v.get_name().to_string())
    }
}

/// Options of `loadtest capacity`.
#[derive(Debug, Clone, Args)]
pub struct CapacityArgs {
    /// Rows to measure, in order.
    #[arg(long, env = "DUET_CAPACITY_ROWS", value_enum, value_delimiter = ',', default_value = "one-token,draft,draft-by-load")]
    pub rows: Vec<Row>,
    /// Least share of escalations the LLM must answer in time.
    #[arg(long, env = "DUET_CAPACITY_SERVED_AT_LEAST", default_value_t = 0.99)]
    pub served_at_least: f64,
    /// Largest inter-token p99 of the devices, ms.
    #[arg(long, env = "DUET_CAPACITY_ITL_P99_MS", default_value_t = 1000.0)]
    pub itl_p99_ms: f64,
    /// Fewest escalations a probe must see to be judged.
    #[arg(long, env = "DUET_CAPACITY_MIN_ESCALATIONS", default_value_t = 40)]
    pub min_escalations: u64,
    /// Largest fleet tried (the answer is a lower bound if it still holds there).
    #[arg(long, env = "DUET_CAPACITY_MAX_DEVICES", default_value_t = 4096)]
    pub max_devices: usize,
    /// Stop when the bracket is within this share of the size that held.
    #[arg(long, env = "DUET_CAPACITY_PRECISION", default_value_t = 0.1)]
    pub precision: f64,
    /// Directory for the capacity report (capacity.json, capacity.html, capacity.md) and every
    /// probe's fleet report.
    #[arg(long, env = "DUET_CAPACITY_OUT")]
    pub out: PathBuf,
    /// The fleet of each probe (`--devices` is the first size tried).
    #[command(flatten)]
    pub fleet: FleetArgs,
}

/// One row's search: every probe, in the order tried, and the capacity found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RowResult {
    /// The row.
    pub row: Row,
    /// Largest fleet that met the level (0: none did).
    pub capacity: usize,
    /// Whether the search stopped at `--max-devices` still holding.
    pub lower_bound: bool,
    /// Every probe.
    pub probes: Vec<Probe>,
}

impl RowResult {
    /// The probe at the capacity (None: no size held).
    pub fn at_capacity(&self) -> Option<&Probe> {
        self.probes.iter().find(|p| p.devices == self.capacity && p.held)
    }
}

/// Run one probe: a fleet of `devices` as `row` says, its reports written into `out`.
fn probe(args: &CapacityArgs, row: Row, devices: usize, level: &ServiceLevel, exe: &std::path::Path) -> anyhow::Result<Probe> {
    let name = format!("{}-{devices}", row.name());
    let mut fleet_args = args.fleet.clone();
    fleet_args.devices = devices;
    fleet_args.draft = row.draft();
    fleet_args.gateway.draft_verify = row.verify();
    fleet_args.label = name.clone();
    let plan = fleet::plan(fleet_args)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = rt.block_on(fleet::run_fleet(plan, exe))?;
    let report = fleet::report::build(&result);
    let json = args.out.join(format!("{name}.json"));
    std::fs::write(&json, serde_json::to_string_pretty(&report)? + "\n").with_context(|| format!("writing {}", json.display()))?;
    std::fs::write(args.out.join(format!("{name}.html")), fleet::html::render(&result, &report))?;
    let p = Probe::of(&report, level);
    eprintln!(
        "[capacity] {name}: served {:.3}, ITL p99 {:.0} ms, {:.1} esc/s, accepted/draft {:.2} -> {}",
        p.served,
        p.itl_p99_ms,
        p.gateway_escalations_per_s,
        p.accepted_per_draft(),
        p.why_not.as_deref().unwrap_or("held")
    );
    Ok(p)
}

/// `loadtest capacity`: search each row, write the reports, print the markdown table.
pub fn run(args: CapacityArgs) -> anyhow::Result<()> {
    anyhow::ensure!((0.0..=1.0).contains(&args.served_at_least), "--served-at-least must be a share in [0, 1]");
    anyhow::ensure!(args.itl_p99_ms > 0.0, "--itl-p99-ms must be > 0");
    anyhow::ensure!(!args.rows.is_empty(), "--rows needs at least one row");
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let exe = std::env::current_exe().context("locating the loadtest binary (it starts the gateway)")?;
    let level = ServiceLevel { served: args.served_at_least, itl_p99_ms: args.itl_p99_ms, min_escalations: args.min_escalations };
    let trace = fleet::trace::Trace::load(args.fleet.gateway.trace.as_deref())?;
    let mut rows = Vec::new();
    for &row in &args.rows {
        let mut search = FleetSearch::new(args.fleet.devices, args.max_devices, args.precision);
        let mut probes = Vec::new();
        while let Some(devices) = search.next() {
            let p = probe(&args, row, devices, &level, &exe)?;
            anyhow::ensure!(p.violations == 0, "{} with {devices} devices: {} correctness violations (see its report)", row.name(), p.violations);
            search.record(devices, p.held);
            probes.push(p);
        }
        rows.push(RowResult { row, capacity: search.capacity(), lower_bound: search.hit_the_maximum(), probes });
    }
    let rep = report::CapacityReport::new(&args, level, &trace, rows);
    std::fs::write(args.out.join("capacity.json"), serde_json::to_string_pretty(&rep)? + "\n")?;
    std::fs::write(args.out.join("capacity.html"), rep.html())?;
    let table = rep.markdown();
    std::fs::write(args.out.join("capacity.md"), &table)?;
    println!("{table}");
    Ok(())
}
