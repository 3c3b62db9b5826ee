//! The capacity report: each row's capacity with its probes, and the closed form
//! `1 + γ·t_d/t_v` from the same run, as JSON, a markdown table and an HTML page whose plot
//! is the served share against fleet size (the fleet report's SVG charts).
//!
//! The closed form is the edge-drafting estimate of clients per saturated server: a verified
//! draft saves the server the γ escalations its accepted tokens would otherwise have cost,
//! weighed by how long the device took to draft them (t_d per token) against what one
//! verification costs the server (t_v). Here γ is the draft row's accepted tokens per
//! answered draft at its capacity, t_d the trace's mean SLM step over the sessions replayed,
//! and t_v the one-token row's escalation round trip p50 at its smallest fleet (the
//! verifier's time for one escalation, barely queued).

use std::fmt::Write;

use serde::Serialize;

use super::level::ServiceLevel;
use super::{CapacityArgs, Row, RowResult};
use crate::fleet::svg::{esc, line_chart, Chart, Series};
use crate::fleet::trace::Trace;

/// The closed form's inputs, measured, and its value.
#[derive(Debug, Clone, Serialize)]
pub struct ClosedForm {
    /// Draft tokens accepted per answered draft (draft row, at its capacity).
    pub gamma: f64,
    /// SLM time per token on the device (the trace's mean step over the sessions replayed), ms.
    pub t_d_ms: f64,
    /// Verifier time per escalation (one-token row, smallest fleet, RTT p50), ms.
    pub t_v_ms: f64,
    /// 1 + γ·t_d/t_v.
    pub ratio: f64,
}

/// Everything `loadtest capacity` found.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityReport {
    /// The server behind the gateway (`--backend`).
    pub backend: String,
    /// The trace replayed, its session mix and the share of tokens escalated.
    pub trace: String,
    pub session_mix: String,
    pub escalation_rate: f64,
    /// A device's mean think time between sessions, s, and seconds of load per probe.
    pub think_time_s: f64,
    pub duration_s: f64,
    /// Network profiles of the devices.
    pub profiles: String,
    /// The level every probe was judged against.
    pub level: ServiceLevel,
    /// Each row's search.
    pub rows: Vec<RowResult>,
    /// Each drafting row's capacity over the one-token row's (None without both).
    pub ratios: Vec<(Row, Option<f64>)>,
    /// The closed form from this run (None without a one-token and a draft row).
    pub closed_form: Option<ClosedForm>,
}

impl CapacityReport {
    /// Assemble the report of `rows`, measured with `args` on `trace`.
    pub fn new(args: &CapacityArgs, level: ServiceLevel, trace: &Trace, rows: Vec<RowResult>) -> Self {
        let f = &args.fleet;
        let find = |row: Row| rows.iter().find(|r| r.row == row);
        let base = find(Row::OneToken).map(|r| r.capacity).filter(|&c| c > 0);
        let ratios = rows.iter().filter(|r| r.row != Row::OneToken).map(|r| (r.row, base.map(|b| r.capacity as f64 / b as f64))).collect();
        let kinds = f.mix.names();
        let steps: Vec<f64> = trace.sessions.iter().filter(|s| kinds.contains(&s.kind.as_str())).flat_map(|s| s.step_ms.iter().map(|&t| f64::from(t))).collect();
        let t_d_ms = steps.iter().sum::<f64>() / steps.len().max(1) as f64;
        let t_v_ms = find(Row::OneToken).and_then(|r| r.probes.iter().filter(|p| p.answered > 0).min_by_key(|p| p.devices)).map(|p| p.escalation_rtt_p50_ms);
        let gamma = find(Row::Draft).and_then(|r| r.at_capacity().or(r.probes.first())).map(|p| p.accepted_per_draft());
        let closed_form = match (gamma, t_v_ms) {
            (Some(gamma), Some(t_v_ms)) if t_v_ms > 0.0 => Some(ClosedForm { gamma, t_d_ms, t_v_ms, ratio: 1.0 + gamma * t_d_ms / t_v_ms }),
            _ => None,
        };
        Self {
            backend: f.gateway.backend.to_string(),
            trace: f.gateway.trace_name(),
            session_mix: kinds.join(","),
            escalation_rate: f.escalation_rate,
            think_time_s: f.think_time_s,
            duration_s: f.duration_s,
            profiles: f.profiles.names().join(","),
            level,
            rows,
            ratios,
            closed_form,
        }
    }

    /// The table docs/src/benchmarks/gateway.md publishes ("Capacity"): one line per row.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "| row | devices per server | served | ITL p99 ms | esc/s | LLM-checked tokens | accepted per draft | vs one-token | probes (devices: served) |");
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
        for r in &self.rows {
            let at = r.at_capacity();
            let ratio = self.ratios.iter().find(|x| x.0 == r.row).and_then(|x| x.1).map_or("-".into(), |v| format!("{v:.2}x"));
            let probes: Vec<String> = r.probes.iter().map(|p| format!("{}: {:.3}{}", p.devices, p.served, if p.held { "" } else { " ✗" })).collect();
            let _ = writeln!(
                out,
                "| {} | **{}{}** | {} | {} | {} | {} | {} | {} | {} |",
                r.row.name(),
                r.capacity,
                if r.lower_bound { "+" } else { "" },
                at.map_or("-".into(), |p| format!("{:.3}", p.served)),
                at.map_or("-".into(), |p| format!("{:.0}", p.itl_p99_ms)),
                at.map_or("-".into(), |p| format!("{:.1}", p.gateway_escalations_per_s)),
                at.map_or("-".into(), |p| format!("{:.1} %", 100.0 * p.llm_checked_tokens as f64 / p.tokens.max(1) as f64)),
                at.map_or("-".into(), |p| if p.drafts > 0 { format!("{:.2}", p.accepted_per_draft()) } else { "-".into() }),
                ratio,
                probes.join(", ")
            );
        }
        if let Some(c) = &self.closed_form {
            let _ = writeln!(out, "\nClosed form 1 + γ·t_d/t_v = 1 + {:.2} × {:.1} ms / {:.1} ms = **{:.2}x** (γ: accepted per draft; t_d: SLM step; t_v: one-token escalation p50 at the smallest fleet).", c.gamma, c.t_d_ms, c.t_v_ms, c.ratio);
        }
        out
    }

    /// A self-contained page: the settings, the table and the served-share and ITL plots.
    pub fn html(&self) -> String {
        let mut out = String::from("<!doctype html><html><head><meta charset=\"utf-8\"><title>Duet capacity</title><style>body{font-family:sans-serif;margin:24px;max-width:1500px} svg{margin:6px;border:1px solid #ddd} pre{background:#f4f4f4;padding:8px}</style></head><body>");
        let _ = write!(
            out,
            "<h1>Devices per LLM server</h1><p>Backend <code>{}</code>; trace <code>{}</code> (sessions {}), escalation rate {}; think time {} s; {} s of load per probe; profiles {}. \
             Level: at least {} of escalations answered in time and ITL p99 at most {} ms, no stall, no violation, at least {} escalations.</p><pre>{}</pre><div>",
            esc(&self.backend),
            esc(&self.trace),
            esc(&self.session_mix),
            self.escalation_rate,
            self.think_time_s,
            self.duration_s,
            esc(&self.profiles),
            self.level.served,
            self.level.itl_p99_ms,
            self.level.min_escalations,
            esc(&self.markdown())
        );
        let series = |pick: fn(&super::level::Probe) -> f64| -> Vec<Series> {
            self.rows
                .iter()
                .map(|r| {
                    let mut points: Vec<(f64, f64)> = r.probes.iter().map(|p| (p.devices as f64, pick(p))).collect();
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    Series { name: r.row.name(), points, dashed: false }
                })
                .collect()
        };
        let mut served = series(|p| p.served);
        let xs: Vec<f64> = served.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
        let (lo, hi) = (xs.iter().copied().fold(f64::INFINITY, f64::min), xs.iter().copied().fold(0.0, f64::max));
        if hi > 0.0 {
            served.push(Series { name: format!("level {}", self.level.served), points: vec![(lo, self.level.served), (hi, self.level.served)], dashed: true });
        }
        out.push_str(&line_chart(&Chart { title: "Escalations answered in time".into(), x_label: "devices".into(), y_label: "served share".into(), log_x: true, y_max: Some(1.0), series: served, ..Chart::default() }));
        let mut itl = series(|p| p.itl_p99_ms);
        if hi > 0.0 {
            itl.push(Series { name: format!("level {} ms", self.level.itl_p99_ms), points: vec![(lo, self.level.itl_p99_ms), (hi, self.level.itl_p99_ms)], dashed: true });
        }
        out.push_str(&line_chart(&Chart { title: "Devices' inter-token p99".into(), x_label: "devices".into(), y_label: "ms".into(), log_x: true, series: itl, ..Chart::default() }));
        out.push_str("</div><p>Each probe's fleet report is beside this page (ROW-DEVICES.html). Generated by <code>loadtest capacity</code>.</p></body></html>\n");
        out
    }
}
