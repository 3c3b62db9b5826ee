//! Summaries of an evaluation: accuracy and escalation share per run, as JSON, CSV and a
//! Pareto plot (SVG) of accuracy against the share of tokens escalated.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::eval_item::RunOutcome;

/// All runs of one item, as stored (one JSON line per item).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ItemRecord {
    /// Dataset id.
    pub id: String,
    /// The correct label.
    pub answer_key: String,
    /// One outcome per run.
    pub runs: Vec<RunOutcome>,
}

/// One row of the results table.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Run name (policy@rate).
    pub run: String,
    /// Policy.
    pub policy: String,
    /// Target escalation rate of the operating point.
    pub target_rate: f32,
    /// Items evaluated.
    pub items: usize,
    /// Correct answers.
    pub correct: usize,
    /// Accuracy.
    pub accuracy: f64,
    /// Half-width of a 95 % normal-approximation interval on the accuracy.
    pub accuracy_ci95: f64,
    /// Items where no answer could be extracted.
    pub no_answer: usize,
    /// Tokens generated over all items.
    pub tokens: usize,
    /// Of those, escalated.
    pub escalated: usize,
    /// Escalated / generated.
    pub escalation_share: f64,
    /// Share of the SLM-to-LLM accuracy gap this run recovers.
    pub gap_recovered: Option<f64>,
}

/// Aggregate item records into one row per run, in the order `runs` gives.
pub fn summarise(records: &[ItemRecord], runs: &[(String, String, f32)]) -> Vec<RunSummary> {
    let mut by_run: BTreeMap<&str, (usize, usize, usize, usize, usize)> = BTreeMap::new();
    for rec in records {
        for o in &rec.runs {
            let e = by_run.entry(o.run.as_str()).or_default();
            e.0 += 1;
            e.1 += o.correct as usize;
            e.2 += o.answer.is_none() as usize;
            e.3 += o.tokens;
            e.4 += o.escalated;
        }
    }
    let mut rows: Vec<RunSummary> = runs
        .iter()
        .filter_map(|(name, policy, rate)| {
            let &(items, correct, no_answer, tokens, escalated) = by_run.get(name.as_str())?;
            let p = correct as f64 / items.max(1) as f64;
            Some(RunSummary {
                run: name.clone(),
                policy: policy.clone(),
                target_rate: *rate,
                items,
                correct,
                accuracy: p,
                accuracy_ci95: 1.96 * (p * (1.0 - p) / items.max(1) as f64).sqrt(),
                no_answer,
                tokens,
                escalated,
                escalation_share: escalated as f64 / tokens.max(1) as f64,
                gap_recovered: None,
            })
        })
        .collect();
    let acc = |name: &str| rows.iter().find(|r| r.run == name).map(|r| r.accuracy);
    if let (Some(slm), Some(llm)) = (acc("slm-only"), acc("llm-only")) {
        if (llm - slm).abs() > 1e-9 {
            for r in &mut rows {
                r.gap_recovered = Some((r.accuracy - slm) / (llm - slm));
            }
        }
    }
    rows
}

/// Write `results.json`, `results.csv` and `pareto.svg` into `dir`.
pub fn write_reports(dir: &Path, config: &serde_json::Value, rows: &[RunSummary]) -> anyhow::Result<()> {
    let json = serde_json::json!({ "config": config, "runs": rows });
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&json)?)?;
    let mut csv = String::from("run,policy,target_rate,items,correct,accuracy,accuracy_ci95,no_answer,tokens,escalated,escalation_share,gap_recovered\n");
    for r in rows {
        csv.push_str(&format!(
            "{},{},{:.3},{},{},{:.4},{:.4},{},{},{},{:.4},{}\n",
            r.run,
            r.policy,
            r.target_rate,
            r.items,
            r.correct,
            r.accuracy,
            r.accuracy_ci95,
            r.no_answer,
            r.tokens,
            r.escalated,
            r.escalation_share,
            r.gap_recovered.map(|g| format!("{g:.3}")).unwrap_or_default()
        ));
    }
    std::fs::write(dir.join("results.csv"), csv)?;
    plot(&dir.join("pareto.svg"), rows).context("drawing pareto.svg")?;
    Ok(())
}

fn plot(path: &Path, rows: &[RunSummary]) -> anyhow::Result<()> {
    let routed: Vec<&RunSummary> = rows.iter().filter(|r| !matches!(r.policy.as_str(), "slm-only" | "llm-only")).collect();
    let x_max = routed.iter().map(|r| r.escalation_share * 100.0).fold(10.0, f64::max) * 1.1;
    let accs: Vec<f64> = rows.iter().map(|r| r.accuracy * 100.0).collect();
    let y_min = (accs.iter().copied().fold(f64::INFINITY, f64::min) - 3.0).max(0.0);
    let y_max = (accs.iter().copied().fold(0.0, f64::max) + 3.0).min(100.0);
    let items = rows.iter().map(|r| r.items).max().unwrap_or(0);
    let root = SVGBackend::new(path, (800, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("CommonsenseQA validation ({items} items): accuracy vs tokens escalated"), ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, y_min..y_max)?;
    chart.configure_mesh().x_desc("tokens escalated to the LLM (%)").y_desc("accuracy (%)").draw()?;
    let style = |policy: &str| match policy {
        "router" => RGBColor(200, 30, 30),
        "confidence" => RGBColor(30, 90, 200),
        "random" => RGBColor(120, 120, 120),
        _ => BLACK,
    };
    for policy in ["router", "confidence", "random"] {
        let mut pts: Vec<(f64, f64)> = routed.iter().filter(|r| r.policy == policy).map(|r| (r.escalation_share * 100.0, r.accuracy * 100.0)).collect();
        if pts.is_empty() {
            continue;
        }
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = style(policy);
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(policy)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    for (name, color) in [("slm-only", RGBColor(0, 150, 80)), ("llm-only", RGBColor(150, 0, 150))] {
        if let Some(r) = rows.iter().find(|r| r.run == name) {
            let y = r.accuracy * 100.0;
            chart
                .draw_series(LineSeries::new(vec![(0.0, y), (x_max, y)], color.stroke_width(1)))?
                .label(format!("{name} ({:.1} %, {:.0} % escalated)", y, r.escalation_share * 100.0))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(1)));
        }
    }
    chart.configure_series_labels().position(SeriesLabelPosition::LowerRight).background_style(WHITE.mix(0.85)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(run: &str, correct: bool, tokens: usize, escalated: usize) -> RunOutcome {
        RunOutcome { run: run.into(), answer: correct.then(|| "A".into()), correct, tokens, escalated, text: String::new() }
    }

    #[test]
    fn summary_rates_gap_and_files() {
        let records = vec![
            ItemRecord { id: "1".into(), answer_key: "A".into(), runs: vec![outcome("slm-only", false, 10, 0), outcome("llm-only", true, 10, 10), outcome("router@0.100", true, 10, 1)] },
            ItemRecord { id: "2".into(), answer_key: "A".into(), runs: vec![outcome("slm-only", true, 10, 0), outcome("llm-only", true, 10, 10), outcome("router@0.100", false, 10, 1)] },
        ];
        let runs = vec![("slm-only".to_string(), "slm-only".to_string(), 0.0), ("llm-only".into(), "llm-only".into(), 1.0), ("router@0.100".into(), "router".into(), 0.1)];
        let rows = summarise(&records, &runs);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].accuracy, 0.5);
        assert_eq!(rows[1].escalation_share, 1.0);
        assert_eq!(rows[2].escalation_share, 0.1);
        assert_eq!(rows[2].gap_recovered, Some(0.0));
        let dir = tempfile::tempdir().unwrap();
        write_reports(dir.path(), &serde_json::json!({}), &rows).unwrap();
        let svg = std::fs::read_to_string(dir.path().join("pareto.svg")).unwrap();
        assert!(svg.contains("<svg") && svg.contains("router"));
        assert!(std::fs::read_to_string(dir.path().join("results.csv")).unwrap().lines().count() == 4);
    }
}
