//! `router-lab curves`: the curves of an evaluation's `items.jsonl` ([`crate::curves`]) as
//! `curves.json`, `curves.svg` (gap recovered against share escalated, one line per policy,
//! each point with its interval) and a Markdown table. The evaluation writes them too; the
//! command redraws them from any results, a run still in progress included.
//!
//! `--with NAME=DIR` draws another router's runs against the same baselines: the SLM-only,
//! LLM-only, random and confidence runs do not depend on the router, so a new router is
//! evaluated with `--policies router` alone and joined here, on the items both hold, as long as
//! both evaluations ran the same models, task and settings.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use plotters::prelude::*;

use crate::curves::{curves, Curves, Interval};
use crate::rate_choice::RateChoice;
use crate::eval_report::ItemRecord;

/// Paired bootstrap draws per figure.
pub const RESAMPLES: usize = 2000;
/// Their seed: the same results give the same intervals.
pub const SEED: u64 = 7;

/// Options of `router-lab curves`.
#[derive(Debug, Args)]
pub struct CurvesArgs {
    /// An evaluation's results directory (or its `items.jsonl`).
    #[arg(long, env = "DUET_CURVES_ITEMS")]
    pub items: PathBuf,
    /// The task's name on the figure.
    #[arg(long, env = "DUET_CURVES_TITLE", default_value = "")]
    pub title: String,
    /// Where to write `curves.json` and `curves.svg` [default: beside the items].
    #[arg(long, env = "DUET_CURVES_OUT")]
    pub out: Option<PathBuf>,
    /// Another evaluation of the same task, models and settings, `NAME=DIR`, whose
    /// `router@RATE` runs join these as `NAME@RATE` on the items both hold (repeatable).
    #[arg(long = "with", env = "DUET_CURVES_WITH", value_delimiter = ',', value_parser = parse_with)]
    pub with: Vec<(String, PathBuf)>,
}

fn parse_with(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, dir)) if !name.is_empty() && !dir.is_empty() && !name.contains('@') && !matches!(name, "router" | "confidence" | "random") => {
            Ok((name.to_string(), PathBuf::from(dir)))
        }
        _ => Err(format!("`{s}`: expected NAME=DIR, NAME not router, confidence or random and without '@'")),
    }
}

/// The settings two evaluations must share for their runs to be drawn on one figure.
const SAME_SETTINGS: [&str; 9] = ["mode", "slm", "llm", "task", "data", "max_new_tokens", "answer_rule", "stop_rule", "rate_control"];

/// Join `other`'s `router@RATE` runs into `records` as `name@RATE`, keeping only the items
/// both hold.
pub fn join(records: &mut Vec<ItemRecord>, other: Vec<ItemRecord>, name: &str) {
    let mut theirs: std::collections::HashMap<String, ItemRecord> = other.into_iter().map(|r| (r.id.clone(), r)).collect();
    records.retain_mut(|rec| {
        let Some(o) = theirs.remove(&rec.id) else { return false };
        rec.runs.extend(o.runs.into_iter().filter_map(|mut run| {
            let rate = run.run.strip_prefix("router@")?.to_string();
            run.run = format!("{name}@{rate}");
            Some(run)
        }));
        true
    });
}

fn config_of(dir: &Path) -> anyhow::Result<serde_json::Value> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Refuse to draw `other` beside `base` unless they ran the same models, task and settings.
fn check_same_settings(base: &Path, other: &Path) -> anyhow::Result<()> {
    let (a, b) = (config_of(base)?, config_of(other)?);
    for key in SAME_SETTINGS {
        if a.get(key) != b.get(key) {
            anyhow::bail!("{} and {} differ in `{key}` ({} against {}): their runs cannot share baselines", base.display(), other.display(), a.get(key).unwrap_or(&serde_json::Value::Null), b.get(key).unwrap_or(&serde_json::Value::Null));
        }
    }
    Ok(())
}

/// Run `router-lab curves`.
pub fn run(args: CurvesArgs) -> anyhow::Result<()> {
    let path = if args.items.is_dir() { args.items.join("items.jsonl") } else { args.items.clone() };
    let mut records = read_items(&path)?;
    for (name, dir) in &args.with {
        check_same_settings(path.parent().unwrap_or(Path::new(".")), dir)?;
        join(&mut records, read_items(&dir.join("items.jsonl"))?, name);
    }
    let out = args.out.clone().or_else(|| path.parent().map(Path::to_path_buf)).unwrap_or_default();
    let title = if args.title.is_empty() { out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default() } else { args.title };
    let c = write(&out, &records, &title)?.context("no curves: the results need slm-only and llm-only runs on the same items")?;
    println!("{}", table(&c));
    Ok(())
}

/// The item records of an `items.jsonl` (a torn last line of a run in progress is skipped).
pub fn read_items(path: &Path) -> anyhow::Result<Vec<ItemRecord>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        match serde_json::from_str(&line) {
            Ok(r) => out.push(r),
            Err(e) if !line.trim().is_empty() => tracing::warn!("{}: a line skipped ({e})", path.display()),
            Err(_) => {}
        }
    }
    Ok(out)
}

/// Write `curves.json` and `curves.svg` of `records` into `dir`; `None` (and nothing written)
/// without SLM-only and LLM-only runs.
pub fn write(dir: &Path, records: &[ItemRecord], title: &str) -> anyhow::Result<Option<Curves>> {
    let Some(c) = curves(records, RESAMPLES, SEED) else { return Ok(None) };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = dir.join("curves.json");
    std::fs::write(&json, serde_json::to_string_pretty(&c)?).with_context(|| format!("writing {}", json.display()))?;
    plot(&dir.join("curves.svg"), &c, title).context("drawing curves.svg")?;
    Ok(Some(c))
}

fn pct(x: f64) -> String {
    format!("{:.0} %", 100.0 * x)
}

fn within(i: Option<Interval>) -> String {
    i.map(|i| format!(" [{:.0} to {:.0}]", 100.0 * i.low, 100.0 * i.high)).unwrap_or_default()
}

/// The curves as a Markdown table: one row per target rate, each policy's share escalated and
/// gap recovered with its interval, and each router's lead over confidence.
pub fn table(c: &Curves) -> String {
    let (d, i) = c.llm_minus_slm;
    let mut out = format!(
        "{} items; SLM-only {:.1} %, LLM-only {:.1} % (LLM - SLM {:.1} points, 95 % interval {:.1} to {:.1}: {})\n\n",
        c.items,
        100.0 * c.slm,
        100.0 * c.llm,
        100.0 * d,
        100.0 * i.low,
        100.0 * i.high,
        if c.gap_measurable() { "measurable" } else { "not measurable at this item count" }
    );
    let mut policies: Vec<&str> = c.points.iter().map(|p| p.policy.as_str()).collect();
    policies.dedup();
    let mut rates: Vec<f64> = c.points.iter().map(|p| p.target_rate).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    out.push_str("| target rate |");
    for p in &policies {
        out.push_str(&format!(" {p}: escalated, gap recovered [95 %] |"));
    }
    let mut challengers: Vec<&str> = c.leads.iter().map(|l| l.policy.as_str()).collect();
    challengers.dedup();
    for p in &challengers {
        out.push_str(&format!(" {p} - confidence [95 %] |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(policies.len() + challengers.len()));
    out.push('\n');
    for rate in rates {
        out.push_str(&format!("| {:.0} % |", 100.0 * rate));
        for p in &policies {
            match c.points.iter().find(|x| x.policy == *p && x.target_rate == rate) {
                Some(x) => out.push_str(&format!(" {:.1} %, {}{} |", 100.0 * x.share, x.gap.map(pct).unwrap_or("-".into()), within(x.gap_interval))),
                None => out.push_str(" - |"),
            }
        }
        for p in &challengers {
            match c.leads.iter().find(|l| l.policy == *p && l.target_rate == rate) {
                Some(l) => out.push_str(&format!(" {:+.0} points{} |", 100.0 * l.lead, within(Some(l.interval)))),
                None => out.push_str(" - |"),
            }
        }
        out.push('\n');
    }
    if !c.rate_choices.is_empty() {
        out.push('\n');
    }
    for r in &c.rate_choices {
        out.push_str(&rate_line(&r.policy, &r.choice));
    }
    out
}

/// The rate `policy`'s curve supports, with the slopes it was read from (gap points per point
/// of tokens escalated).
fn rate_line(policy: &str, r: &RateChoice) -> String {
    let slopes: Vec<String> = r.segments.iter().map(|s| format!("to {:.0} %: {:.1}", 100.0 * s.to_rate, s.gain_per_share)).collect();
    let rate = r.rate.map_or_else(|| "none (no steeper than random from the first point)".to_string(), pct);
    format!("Rate the {policy} curve supports: {rate} (gap recovered per share escalated, {}; random's average {:.1})\n", slopes.join(", "), r.random_gain_per_share)
}

fn color(policy: &str) -> RGBColor {
    match policy {
        "router" => RGBColor(200, 30, 30),
        "pooled" => RGBColor(30, 150, 60),
        "confidence" => RGBColor(30, 90, 200),
        "random" => RGBColor(120, 120, 120),
        _ => RGBColor(200, 120, 0),
    }
}

fn plot(path: &Path, c: &Curves, title: &str) -> anyhow::Result<()> {
    let x_max = c.points.iter().map(|p| p.share * 100.0).fold(5.0, f64::max) * 1.1;
    let lows = c.points.iter().filter_map(|p| p.gap_interval.map(|i| i.low * 100.0));
    let highs = c.points.iter().filter_map(|p| p.gap_interval.map(|i| i.high * 100.0));
    let y_min = lows.fold(0.0, f64::min) - 5.0;
    let y_max = highs.fold(100.0, f64::max) + 5.0;
    let root = SVGBackend::new(path, (800, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{title} ({} items): gap recovered vs tokens escalated, 95 % intervals", c.items), ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, y_min..y_max)?;
    chart.configure_mesh().x_desc("tokens escalated to the LLM (%)").y_desc("SLM-to-LLM gap recovered (%)").draw()?;
    let mut policies: Vec<&str> = c.points.iter().map(|p| p.policy.as_str()).collect();
    policies.dedup();
    for policy in policies {
        let pts: Vec<_> = c.points.iter().filter(|p| p.policy == policy).filter_map(|p| Some((p.share * 100.0, p.gap? * 100.0, p.gap_interval))).collect();
        let col = color(policy);
        chart
            .draw_series(LineSeries::new(pts.iter().map(|&(x, y, _)| (x, y)), col.stroke_width(2)))?
            .label(policy.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&(x, y, _)| Circle::new((x, y), 4, col.filled())))?;
        chart.draw_series(pts.iter().filter_map(|&(x, _, i)| i.map(|i| PathElement::new(vec![(x, i.low * 100.0), (x, i.high * 100.0)], col.stroke_width(1)))))?;
    }
    for y in [0.0, 100.0] {
        chart.draw_series(LineSeries::new(vec![(0.0, y), (x_max, y)], BLACK.mix(0.4).stroke_width(1)))?;
    }
    chart.configure_series_labels().position(SeriesLabelPosition::LowerRight).background_style(WHITE.mix(0.85)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval_item::RunOutcome;

    #[test]
    fn the_command_writes_the_figure_and_the_table_names_every_rate_and_the_lead() {
        let records: Vec<ItemRecord> = (0..50)
            .map(|i| {
                let run = |run: &str, correct: bool, escalated: usize| RunOutcome { run: run.into(), answer: None, correct, tokens: 10, escalated, text: String::new() };
                let runs = vec![run("slm-only", i < 10, 0), run("llm-only", i < 40, 10), run("router@0.050", i < 35, 1), run("confidence@0.050", i < 20, 1), run("router@0.020", i < 20, 1), run("random@0.050", i < 12, 1)];
                ItemRecord { id: i.to_string(), answer_key: "A".into(), runs }
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let c = write(dir.path(), &records, "test").unwrap().unwrap();
        let svg = std::fs::read_to_string(dir.path().join("curves.svg")).unwrap();
        assert!(svg.contains("<svg") && svg.contains("confidence") && svg.contains("router"));
        let t = table(&c);
        assert!(t.contains("| 2 % |") && t.contains("| 5 % |"), "{t}");
        assert!(t.contains("+50 points"), "{t}");
        assert!(t.contains("measurable"), "{t}");
        assert!(t.contains("Rate the router curve supports"), "{t}");
    }

    #[test]
    fn another_evaluations_router_runs_join_under_their_name_on_the_items_both_hold() {
        let run = |run: &str, correct: bool| RunOutcome { run: run.into(), answer: None, correct, tokens: 10, escalated: 1, text: String::new() };
        let rec = |id: &str, runs: Vec<RunOutcome>| ItemRecord { id: id.into(), answer_key: "A".into(), runs };
        let mut base = vec![rec("1", vec![run("slm-only", false), run("router@0.050", false)]), rec("2", vec![run("slm-only", true)])];
        let other = vec![rec("1", vec![run("router@0.050", true), run("slm-only", true)]), rec("3", vec![run("router@0.050", true)])];
        join(&mut base, other, "pooled");
        assert_eq!(base.len(), 1, "only the item both hold");
        let names: Vec<&str> = base[0].runs.iter().map(|r| r.run.as_str()).collect();
        assert_eq!(names, ["slm-only", "router@0.050", "pooled@0.050"], "its baselines are not taken, only its router");
        assert!(base[0].runs[2].correct);
    }

    #[test]
    fn a_joined_name_must_not_pass_for_a_policy_of_the_base_run() {
        assert_eq!(parse_with("pooled=/tmp/x").unwrap(), ("pooled".to_string(), PathBuf::from("/tmp/x")));
        for bad in ["router=/tmp/x", "confidence=/tmp/x", "a@b=/tmp/x", "pooled", "=/tmp/x", "pooled="] {
            assert!(parse_with(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn evaluations_of_other_settings_are_refused_by_the_setting_that_differs() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(a.path().join("config.json"), r#"{"slm": "s", "llm": "l", "task": "cqa", "max_new_tokens": 96, "router": "r1"}"#).unwrap();
        std::fs::write(b.path().join("config.json"), r#"{"slm": "s", "llm": "l", "task": "cqa", "max_new_tokens": 96, "router": "r2"}"#).unwrap();
        check_same_settings(a.path(), b.path()).unwrap();
        std::fs::write(b.path().join("config.json"), r#"{"slm": "s", "llm": "l", "task": "cqa", "max_new_tokens": 64, "router": "r2"}"#).unwrap();
        let e = check_same_settings(a.path(), b.path()).unwrap_err().to_string();
        assert!(e.contains("max_new_tokens"), "{e}");
    }
}
