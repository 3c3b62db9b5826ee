//! The fleet's report as one self-contained HTML page: the tables of the JSON report and its
//! plots as inline SVG ([`super::svg`]); no script, nothing fetched, so it opens anywhere.

use std::fmt::Write;

use super::group::{GroupStats, OUTCOMES, RTT_BUCKETS_MS};
use super::hist::Histogram;
use super::report::{FleetReport, GroupReport};
use super::svg::{bar_chart, esc, line_chart, Chart, Series};
use super::{RunResult, LOCAL_ONLY};

fn cdf_chart(title: &str, x_label: &str, r: &RunResult, pick: impl Fn(&GroupStats) -> &Histogram, marker: Option<(f64, String)>) -> String {
    let series = r
        .env
        .groups
        .iter()
        .filter(|g| pick(&g.stats).count() > 0)
        .map(|g| Series { name: g.stats.name.clone(), points: pick(&g.stats).cdf(), dashed: g.stats.name == LOCAL_ONLY })
        .collect();
    line_chart(&Chart { title: title.into(), x_label: x_label.into(), y_label: "share ≤ x".into(), log_x: true, y_max: Some(1.0), series, markers: marker.into_iter().collect(), ..Chart::default() })
}

fn tokens_per_s_chart(r: &RunResult) -> String {
    let series = r
        .env
        .groups
        .iter()
        .filter_map(|g| {
            let mut v: Vec<f32> = g.stats.session_tokens_per_s.lock().ok()?.clone();
            if v.is_empty() {
                return None;
            }
            v.sort_by(f32::total_cmp);
            let n = v.len() as f64;
            Some(Series { name: g.stats.name.clone(), points: v.iter().enumerate().map(|(i, &x)| (f64::from(x), (i + 1) as f64 / n)).collect(), dashed: g.stats.name == LOCAL_ONLY })
        })
        .collect();
    line_chart(&Chart { title: "Tokens/s per device (per session), vs the same trace local-only".into(), x_label: "tokens/s".into(), y_label: "share ≤ x".into(), y_max: Some(1.0), series, ..Chart::default() })
}

fn fallback_vs_rtt_chart(r: &RunResult) -> String {
    // All relayed groups together: per RTT bucket, the share of escalations per fallback reason.
    let rows: Vec<Vec<(f64, u64, Vec<u64>)>> = r.env.groups.iter().filter(|g| g.target.is_some()).map(|g| g.stats.by_rtt().into_iter().map(|row| (row.rtt_from_ms, row.escalations, row.by_outcome.iter().map(|o| o.1).collect())).collect()).collect();
    let mut series = Vec::new();
    // Link-down fallbacks have no RTT (the table counts them): outcomes 1..=4 only.
    for (k, reason) in OUTCOMES.iter().enumerate().take(OUTCOMES.len() - 1).skip(1) {
        let mut points = Vec::new();
        for (b, upper) in RTT_BUCKETS_MS.iter().enumerate() {
            let (n, c) = rows.iter().fold((0u64, 0u64), |(n, c), g| (n + g[b].1, c + g[b].2[k]));
            if n == 0 {
                continue;
            }
            let lower = if b == 0 { 1.0 } else { RTT_BUCKETS_MS[b - 1] };
            let mid = if upper.is_finite() { (lower * upper).sqrt() } else { lower * 2.0 };
            points.push((mid, c as f64 / n as f64));
        }
        if points.iter().any(|p| p.1 > 0.0) {
            series.push(Series { name: reason.to_string(), points, dashed: false });
        }
    }
    line_chart(&Chart { title: "Fallback rate by reason vs the device's RTT when it escalated (link down: no RTT)".into(), x_label: "smoothed RTT, ms (bucket)".into(), y_label: "share of escalations".into(), log_x: true, series, ..Chart::default() })
}

fn gateway_charts(r: &RunResult, out: &mut String) {
    let all = &r.samples;
    let good = super::metrics_scrape::scraped(&r.samples);
    let rate = |f: &dyn Fn(&super::metrics_scrape::Sample) -> f64| -> Vec<(f64, f64)> { good.windows(2).map(|w| (w[1].t_s, (f(w[1]) - f(w[0])) / (w[1].t_s - w[0].t_s).max(1e-3))).collect() };
    let load = (r.plan.args.ramp_up_s + 1.0, r.plan.args.ramp_up_s + 1.0 + r.plan.args.duration_s);
    let mut device_side = Vec::new();
    let bins: Vec<Vec<u64>> = r.env.groups.iter().map(|g| g.stats.escalations_over_time.counts()).collect();
    let bin_s = super::group::BIN_MS as f64 / 1e3;
    let per_s = (1.0 / bin_s).round().max(1.0) as usize;
    if let Some(n) = bins.iter().map(Vec::len).max() {
        for i in (0..n).step_by(per_s) {
            let c: u64 = bins.iter().map(|b| b[i..(i + per_s).min(b.len())].iter().sum::<u64>()).sum();
            device_side.push(((i + per_s) as f64 * bin_s, c as f64 / (per_s as f64 * bin_s)));
        }
    }
    out.push_str(&line_chart(&Chart {
        title: "Escalations/s: received by the gateway, Busy answers, and resolved at the devices".into(),
        x_label: "s since start (shaded = ramp-up)".into(),
        y_label: "per second".into(),
        series: vec![
            Series { name: "gateway received".into(), points: rate(&|x| x.received), dashed: false },
            Series { name: "gateway busy".into(), points: rate(&|x| x.busy), dashed: false },
            Series { name: "devices".into(), points: device_side, dashed: true },
        ],
        bands: vec![(0.0, load.0)],
        ..Chart::default()
    }));
    let cpu = |f: &dyn Fn(&super::metrics_scrape::Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        all.windows(2).filter_map(|w| Some((w[1].t_s, (f(&w[1])? - f(&w[0])?) / (w[1].t_s - w[0].t_s).max(1e-3) * 100.0))).collect()
    };
    out.push_str(&line_chart(&Chart {
        title: "CPU over time (% of one core; the machine has 2)".into(),
        x_label: "s since start (shaded = ramp-up)".into(),
        y_label: "% of one core".into(),
        series: vec![
            Series { name: "gateway".into(), points: cpu(&|x| x.gateway.map(|g| g.cpu_s)), dashed: false },
            Series { name: "fleet (devices+relays)".into(), points: cpu(&|x| x.fleet.map(|g| g.cpu_s)), dashed: true },
            Series { name: "whole machine".into(), points: cpu(&|x| Some(x.host_busy_s)), dashed: true },
        ],
        bands: vec![(0.0, load.0)],
        ..Chart::default()
    }));
    out.push_str(&line_chart(&Chart {
        title: "Gateway RSS and connections over time".into(),
        x_label: "s since start (shaded = ramp-up)".into(),
        y_label: "MiB / connections ÷ 10".into(),
        series: vec![
            Series { name: "gateway RSS, MiB".into(), points: all.iter().filter_map(|x| Some((x.t_s, x.gateway?.rss_mib))).collect(), dashed: false },
            Series { name: "connections ÷ 10".into(), points: good.iter().map(|x| (x.t_s, x.connections / 10.0)).collect(), dashed: true },
        ],
        bands: vec![(0.0, load.0)],
        ..Chart::default()
    }));
}

fn blackout_charts(r: &RunResult, out: &mut String) {
    for g in r.env.groups.iter().filter(|g| g.blackouts.is_some()) {
        let Some(b) = g.blackouts else { continue };
        let offset = b.epoch.saturating_duration_since(r.env.started).as_secs_f64() - r.env.started.saturating_duration_since(b.epoch).as_secs_f64();
        let bands = b.windows(r.env.end).into_iter().map(|(s, e)| (s.duration_since(b.epoch).as_secs_f64() + offset, e.duration_since(b.epoch).as_secs_f64() + offset)).collect();
        let bin_s = super::group::BIN_MS as f64 / 1e3;
        let series = |t: &super::hist::Timeline, name: &str, dashed| Series { name: name.into(), points: t.counts().iter().enumerate().map(|(i, &c)| ((i as f64 + 0.5) * bin_s, c as f64 / bin_s)).collect(), dashed };
        out.push_str(&line_chart(&Chart {
            title: format!("{}: cloud tokens and fallbacks per second around the blackouts (shaded)", g.stats.name),
            x_label: "s since start".into(),
            y_label: "per second".into(),
            series: vec![series(&g.stats.cloud_over_time, "cloud tokens", false), series(&g.stats.fallbacks_over_time, "fallbacks", true)],
            bands,
            ..Chart::default()
        }));
    }
}

fn f(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn profile_table(rows: &[&GroupReport], out: &mut String) {
    let head = [
        "profile", "devices", "sessions", "tokens", "escalated", "goodput", "fallback", "busy", "timeout / down / degraded / error", "TTFT p50/p99 ms", "ITL p50/p90/p99/max ms",
        "escalation RTT p50/p90/p99 ms", "ping p50/p99 ms", "gateway-added p50/p99 ms", "tokens/s per device", "vs local-only", "reconnects", "Full syncs", "stalls",
    ];
    out.push_str("<table><tr>");
    for h in head {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>");
    for p in rows {
        let r = &p.fallbacks_by_reason;
        let cells = [
            p.profile.clone(),
            format!("{} ({} connected)", p.devices, p.connected),
            p.sessions.to_string(),
            p.tokens.to_string(),
            format!("{} ({:.1} %)", p.escalated, p.escalation_share * 100.0),
            format!("{:.4} ({}/s)", p.goodput, f(p.goodput_per_s)),
            format!("{:.4}", p.fallback_rate),
            format!("{:.4}", p.busy_rate),
            format!("{} / {} / {} / {}", r.timeout, r.link_down, r.degraded, r.error),
            format!("{} / {}", f(p.ttft_ms.p50), f(p.ttft_ms.p99)),
            format!("{} / {} / {} / {}", f(p.itl_ms.p50), f(p.itl_ms.p90), f(p.itl_ms.p99), f(p.itl_ms.max)),
            format!("{} / {} / {}", f(p.escalation_rtt_ms.p50), f(p.escalation_rtt_ms.p90), f(p.escalation_rtt_ms.p99)),
            format!("{} / {}", f(p.ping_ms.p50), f(p.ping_ms.p99)),
            match (p.gateway_added_p50_ms, p.gateway_added_p99_ms) {
                (Some(a), Some(b)) => format!("{} / {}", f(a), f(b)),
                _ => "-".into(),
            },
            format!("{} (nominal {})", f(p.tokens_per_s_per_device), f(p.nominal_local_tokens_per_s)),
            p.vs_local_only.map_or("-".into(), |v| format!("{v:.3}")),
            p.reconnects.to_string(),
            p.full_syncs.to_string(),
            p.stalls.to_string(),
        ];
        out.push_str("<tr>");
        for c in cells {
            let _ = write!(out, "<td>{}</td>", esc(&c));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
}

/// The whole page.
pub fn render(r: &RunResult, rep: &FleetReport) -> String {
    let mut out = String::new();
    page_head(rep, &mut out);
    correctness_section(rep, &mut out);
    profiles_section(rep, &mut out);
    gateway_section(rep, &mut out);
    plots_section(r, rep, &mut out);
    out.push_str("</div><p>Generated by <code>loadtest fleet</code>; the JSON report has every figure.</p></body></html>\n");
    out
}

/// The document head and style, the title and the run's configuration.
fn page_head(rep: &FleetReport, out: &mut String) {
    let _ = write!(
        out,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Duet fleet load test {}</title><style>\
body{{font-family:sans-serif;margin:24px;max-width:1500px}} table{{border-collapse:collapse;font-size:12px;margin:8px 0 20px}}\
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}} th{{background:#f4f4f4}} td:first-child{{text-align:left}}\
.ok{{background:#e3f5e3;padding:8px;border:1px solid #8c8}} .bad{{background:#fbe3e3;padding:8px;border:1px solid #c88}}\
.plots svg{{margin:6px;border:1px solid #ddd}} code{{background:#f4f4f4;padding:1px 3px}}</style></head><body>",
        esc(&rep.label)
    );
    let _ = write!(
        out,
        "<h1>Fleet load test {}</h1><p>{} devices (+{} local-only) over profiles <code>{}</code>, sessions <code>{}</code>; ramp-up {} s, load {} s (wall {:.0} s); \
backend <code>{}</code> ({}); tau {:.4} (trace escalation rate {:.3}); deadline {}–{} ms; presync {}; seed {}.<br>Trace: {}</p>",
        esc(&rep.label),
        rep.devices,
        rep.baseline_devices,
        esc(&rep.profiles_mix),
        esc(&rep.session_mix),
        rep.ramp_up_s,
        rep.duration_s,
        rep.wall_s,
        esc(&rep.gateway.backend),
        esc(&rep.gateway.llm_id),
        rep.tau,
        rep.escalation_rate_of_trace,
        rep.deadline_min_ms,
        rep.deadline_max_ms,
        rep.presync,
        rep.seed,
        esc(&rep.trace)
    );
}

/// The checker's verdict, with the first violations.
fn correctness_section(rep: &FleetReport, out: &mut String) {
    let c = &rep.correctness;
    let _ = write!(
        out,
        "<div class=\"{}\"><b>Correctness: {} violations.</b> Checked {} sessions: {} committed tokens (position by position: none lost, duplicated or out of order), \
{} escalated contexts against the committed stream, {} cloud tokens against the backend's token for exactly that context, {} fallbacks accounted for by reason.</div>",
        if c.violations == 0 { "ok" } else { "bad" },
        c.violations,
        c.sessions_checked,
        c.tokens_checked,
        c.contexts_checked,
        c.cloud_tokens_checked,
        c.fallbacks_accounted
    );
    if !c.samples.is_empty() {
        out.push_str("<ul>");
        for v in &c.samples {
            let _ = write!(out, "<li>device {} session {} position {:?}: {}</li>", v.device, esc(&v.session), v.position, esc(&v.what));
        }
        out.push_str("</ul>");
    }
}

/// The table per network profile (and local-only), then each blackout profile's resumption.
fn profiles_section(rep: &FleetReport, out: &mut String) {
    out.push_str("<h2>Per network profile (at the device)</h2>");
    let mut rows: Vec<&GroupReport> = rep.profiles.iter().collect();
    if let Some(l) = &rep.local_only {
        rows.push(l);
    }
    profile_table(&rows, out);
    for p in rep.profiles.iter().filter(|p| p.blackouts.is_some()) {
        if let Some(b) = &p.blackouts {
            let _ = write!(
                out,
                "<p><b>{}</b> blackouts: {} device-blackouts resumed (cloud token after the end: p50 {} ms, p99 {} ms, max {} ms; {:.1} % within 2 s), {} did not resume before the next; {:.1} % of {} first escalations 2 s or more after the end got a cloud token; longest ITL {} ms (deadline max {} ms), {} stalls.</p>",
                esc(&p.profile),
                b.resumed,
                f(b.resume_ms.p50),
                f(b.resume_ms.p99),
                f(b.resume_ms.max),
                b.resumed_within_2s * 100.0,
                b.not_resumed,
                b.served_2s_after * 100.0,
                b.served_2s_after_n,
                f(p.itl_ms.max),
                rep.deadline_max_ms,
                p.stalls
            );
        }
    }
}

/// The gateway's connections, memory, CPU and escalation counters.
fn gateway_section(rep: &FleetReport, out: &mut String) {
    let g = &rep.gateway;
    let opt = |v: Option<f64>| v.map_or("-".into(), f);
    let _ = write!(
        out,
        "<h2>Gateway</h2><table><tr><th>connections idle / peak</th><th>RSS before / idle / peak MiB</th><th>RSS per idle device KiB</th><th>RSS per connected device at peak KiB</th>\
<th>CPU under load %</th><th>escalations/s (peak)</th><th>received / answered / busy / expired / cancelled</th><th>fleet process CPU % / peak RSS MiB</th><th>machine busy (all cores)</th></tr>\
<tr><td>{} / {}</td><td>{} / {} / {}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ({})</td><td>{} / {} / {} / {} / {}</td><td>{} / {}</td><td>{}</td></tr></table>",
        g.connections_idle,
        g.connections_peak,
        opt(g.rss_before_mib),
        opt(g.rss_idle_mib),
        opt(g.rss_peak_mib),
        opt(g.rss_per_idle_device_kib),
        opt(g.rss_per_connected_device_kib_at_peak),
        opt(g.cpu_load_pct),
        f(g.escalations_per_s),
        f(g.escalations_per_s_peak),
        g.escalations_received,
        g.escalations_answered,
        g.escalations_busy,
        g.escalations_expired,
        g.escalations_cancelled,
        opt(rep.fleet_cpu_load_pct),
        opt(rep.fleet_rss_peak_mib),
        rep.host_busy_share.map_or("-".into(), |b| format!("{:.0} %", b * 100.0)),
    );
}

/// Every plot; opens the plots' `div` that the page's end closes.
fn plots_section(r: &RunResult, rep: &FleetReport, out: &mut String) {
    out.push_str("<h2>Plots</h2><div class=\"plots\">");
    let deadline = Some((rep.deadline_max_ms as f64, "deadline max".to_string()));
    out.push_str(&cdf_chart("Escalation round trip (answered by the cloud), CDF per profile", "ms (log)", r, |g| &g.escalation_cloud, deadline.clone()));
    out.push_str(&cdf_chart("Per-token latency at the device (ITL), CDF per profile", "ms (log)", r, |g| &g.itl, deadline.clone()));
    out.push_str(&cdf_chart("Time to first token (TTFT), CDF per profile", "ms (log)", r, |g| &g.ttft, None));
    out.push_str(&cdf_chart("Ping round trip on the same links (transport baseline), CDF", "ms (log)", r, |g| &g.ping, None));
    out.push_str(&tokens_per_s_chart(r));
    out.push_str(&fallback_vs_rtt_chart(r));
    let names: Vec<String> = rep.profiles.iter().map(|p| p.profile.clone()).collect();
    out.push_str(&bar_chart(
        "Goodput (answered within the deadline), fallback and Busy rates per profile",
        "share of escalations",
        &names,
        &[
            ("goodput".into(), rep.profiles.iter().map(|p| p.goodput).collect()),
            ("fallback".into(), rep.profiles.iter().map(|p| p.fallback_rate).collect()),
            ("busy".into(), rep.profiles.iter().map(|p| p.busy_rate).collect()),
        ],
    ));
    out.push_str(&bar_chart(
        "Reconnects, Full resyncs and ContextMissing per device",
        "per device",
        &names,
        &[
            ("reconnects".into(), rep.profiles.iter().map(|p| p.reconnects as f64 / p.devices.max(1) as f64).collect()),
            ("Full syncs".into(), rep.profiles.iter().map(|p| p.full_syncs as f64 / p.devices.max(1) as f64).collect()),
            ("ContextMissing".into(), rep.profiles.iter().map(|p| p.context_missing as f64 / p.devices.max(1) as f64).collect()),
        ],
    ));
    gateway_charts(r, out);
    blackout_charts(r, out);
}
