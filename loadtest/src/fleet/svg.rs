//! Plots as inline SVG, written by hand so that the report is one self-contained file (no
//! script, no CDN): line charts (CDFs on a log axis, values over time) and grouped bars.

use std::fmt::Write;

const W: f64 = 680.0;
const H: f64 = 330.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 46.0;
/// Colours of consecutive series (colour-blind-safe palette).
const COLOURS: [&str; 8] = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442", "#000000"];

/// One line.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) in data units, in x order.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (e.g. a baseline).
    pub dashed: bool,
}

/// A line chart.
#[derive(Debug, Clone, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Log-scaled x axis (values <= 0 are left out).
    pub log_x: bool,
    /// Fixed y range top (default: the data's maximum).
    pub y_max: Option<f64>,
    pub series: Vec<Series>,
    /// Shaded x ranges (e.g. blackouts).
    pub bands: Vec<(f64, f64)>,
    /// Vertical marker lines with labels (e.g. a deadline).
    pub markers: Vec<(f64, String)>,
}

/// Escape text for XML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A "nice" step for about `n` ticks over `span`.
fn nice_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    mag * if f < 1.5 {
        1.0
    } else if f < 3.5 {
        2.0
    } else if f < 7.5 {
        5.0
    } else {
        10.0
    }
}

fn fmt_tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 10.0 {
        format!("{:.0}", v)
    } else if v.abs() >= 1.0 {
        format!("{:.1}", v).trim_end_matches(".0").to_string()
    } else {
        format!("{:.3}", v).trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    from: f64,
    to: f64,
}

impl Axis {
    fn map(&self, v: f64) -> f64 {
        let (a, b, x) = if self.log { (self.lo.log10(), self.hi.log10(), v.max(self.lo).log10()) } else { (self.lo, self.hi, v) };
        let t = if b > a { (x - a) / (b - a) } else { 0.5 };
        self.from + t.clamp(0.0, 1.0) * (self.to - self.from)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let mut out = Vec::new();
            let mut p = 10f64.powf(self.lo.log10().floor());
            while p <= self.hi * 1.0001 {
                for m in [1.0, 2.0, 5.0] {
                    let v = p * m;
                    if v >= self.lo * 0.9999 && v <= self.hi * 1.0001 {
                        out.push(v);
                    }
                }
                p *= 10.0;
            }
            out
        } else {
            let step = nice_step(self.hi - self.lo, 5.0);
            let mut v = (self.lo / step).ceil() * step;
            let mut out = Vec::new();
            while v <= self.hi + step * 1e-9 && out.len() < 50 {
                out.push(v);
                v += step;
            }
            out
        }
    }
}

/// Render a line chart.
pub fn line_chart(c: &Chart) -> String {
    let pts = || c.series.iter().flat_map(|s| s.points.iter()).filter(|p| !c.log_x || p.0 > 0.0);
    let (mut xlo, mut xhi) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(p.0), b.max(p.0)));
    for (x, _) in &c.markers {
        xlo = xlo.min(*x);
        xhi = xhi.max(*x);
    }
    let mut ymax = c.y_max.unwrap_or_else(|| pts().map(|p| p.1).fold(0.0, f64::max));
    let mut out = String::new();
    let _ = write!(out, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"#);
    let _ = write!(out, r#"<text x="{}" y="18" font-size="13" font-weight="bold">{}</text>"#, LEFT, esc(&c.title));
    if !xlo.is_finite() || !xhi.is_finite() {
        let _ = write!(out, r##"<text x="{}" y="{}" fill="#888">no data</text></svg>"##, W / 2.0 - 30.0, H / 2.0);
        return out;
    }
    if c.log_x {
        xlo = 10f64.powf(xlo.log10().floor());
        xhi = 10f64.powf(xhi.log10().ceil()).max(xlo * 10.0);
    } else if xhi <= xlo {
        xhi = xlo + 1.0;
    }
    if ymax <= 0.0 {
        ymax = 1.0;
    }
    if c.y_max.is_none() {
        let step = nice_step(ymax, 5.0);
        ymax = (ymax / step).ceil() * step;
    }
    let x = Axis { lo: xlo, hi: xhi, log: c.log_x, from: LEFT, to: W - RIGHT };
    let y = Axis { lo: 0.0, hi: ymax, log: false, from: H - BOTTOM, to: TOP };
    for &(a, b) in &c.bands {
        let (xa, xb) = (x.map(a), x.map(b));
        let _ = write!(out, r##"<rect x="{xa:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="#f3d3d3"/>"##, (xb - xa).max(1.0), H - BOTTOM - TOP);
    }
    for t in x.ticks() {
        let px = x.map(t);
        let _ = write!(out, r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#eee"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##, H - BOTTOM, H - BOTTOM + 14.0, fmt_tick(t));
    }
    for t in y.ticks() {
        let py = y.map(t);
        let _ = write!(out, r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##, W - RIGHT, LEFT - 4.0, py + 4.0, fmt_tick(t));
    }
    let _ = write!(out, r##"<rect x="{LEFT}" y="{TOP}" width="{:.1}" height="{:.1}" fill="none" stroke="#444"/>"##, W - RIGHT - LEFT, H - BOTTOM - TOP);
    let _ = write!(out, r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, (LEFT + W - RIGHT) / 2.0, H - 8.0, esc(&c.x_label));
    let _ = write!(out, r#"<text transform="translate(14,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#, (TOP + H - BOTTOM) / 2.0, esc(&c.y_label));
    for (mx, label) in &c.markers {
        let px = x.map(*mx);
        let _ = write!(out, r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#c00" stroke-dasharray="3,3"/><text x="{:.1}" y="{:.1}" fill="#c00">{}</text>"##, H - BOTTOM, px + 3.0, TOP + 12.0, esc(label));
    }
    for (i, s) in c.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let path: Vec<String> = s.points.iter().filter(|p| !c.log_x || p.0 > 0.0).map(|&(a, b)| format!("{:.1},{:.1}", x.map(a), y.map(b.min(ymax)))).collect();
        if !path.is_empty() {
            let dash = if s.dashed { r#" stroke-dasharray="6,4""# } else { "" };
            let _ = write!(out, r#"<polyline fill="none" stroke="{colour}" stroke-width="1.6"{dash} points="{}"/>"#, path.join(" "));
        }
        let ly = TOP + 10.0 + i as f64 * 16.0;
        let lx = W - RIGHT + 10.0;
        let _ = write!(out, r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#, lx + 18.0, lx + 22.0, ly + 4.0, esc(&s.name));
    }
    out.push_str("</svg>");
    out
}

/// Grouped bars: one group per category, one bar per series.
pub fn bar_chart(title: &str, y_label: &str, categories: &[String], series: &[(String, Vec<f64>)]) -> String {
    let mut out = String::new();
    let _ = write!(out, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"#);
    let _ = write!(out, r#"<text x="{LEFT}" y="18" font-size="13" font-weight="bold">{}</text>"#, esc(title));
    let mut ymax = series.iter().flat_map(|s| s.1.iter().copied()).fold(0.0, f64::max);
    if ymax <= 0.0 {
        ymax = 1.0;
    }
    let step = nice_step(ymax, 5.0);
    ymax = (ymax / step).ceil() * step;
    let y = Axis { lo: 0.0, hi: ymax, log: false, from: H - BOTTOM, to: TOP };
    for t in y.ticks() {
        let py = y.map(t);
        let _ = write!(out, r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##, W - RIGHT, LEFT - 4.0, py + 4.0, fmt_tick(t));
    }
    let n = categories.len().max(1) as f64;
    let slot = (W - RIGHT - LEFT) / n;
    let bar = (slot * 0.8) / series.len().max(1) as f64;
    for (ci, cat) in categories.iter().enumerate() {
        let x0 = LEFT + ci as f64 * slot + slot * 0.1;
        for (si, (_, values)) in series.iter().enumerate() {
            let v = values.get(ci).copied().unwrap_or(0.0);
            let (top, base) = (y.map(v), y.map(0.0));
            let _ = write!(out, r#"<rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {v:.4}</title></rect>"#, x0 + si as f64 * bar, (bar - 1.0).max(1.0), (base - top).max(0.0), COLOURS[si % COLOURS.len()], esc(cat));
        }
        let _ = write!(out, r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, x0 + slot * 0.4, H - BOTTOM + 14.0, esc(cat));
    }
    let _ = write!(out, r##"<rect x="{LEFT}" y="{TOP}" width="{:.1}" height="{:.1}" fill="none" stroke="#444"/>"##, W - RIGHT - LEFT, H - BOTTOM - TOP);
    let _ = write!(out, r#"<text transform="translate(14,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#, (TOP + H - BOTTOM) / 2.0, esc(y_label));
    for (i, (name, _)) in series.iter().enumerate() {
        let ly = TOP + 10.0 + i as f64 * 16.0;
        let lx = W - RIGHT + 10.0;
        let _ = write!(out, r#"<rect x="{lx}" y="{}" width="12" height="10" fill="{}"/><text x="{}" y="{}">{}</text>"#, ly - 6.0, COLOURS[i % COLOURS.len()], lx + 18.0, ly + 4.0, esc(name));
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_one_svg_element_with_its_series_and_escaped_labels() {
        let c = Chart {
            title: "ITL <4g & wifi>".into(),
            log_x: true,
            series: vec![Series { name: "4g".into(), points: vec![(1.0, 0.1), (10.0, 0.5), (100.0, 1.0)], dashed: false }],
            markers: vec![(3000.0, "deadline".into())],
            ..Chart::default()
        };
        let s = line_chart(&c);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert!(s.contains("&lt;4g &amp; wifi&gt;") && s.contains("<polyline") && s.contains("deadline"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
    }

    #[test]
    fn empty_charts_say_so_instead_of_failing() {
        assert!(line_chart(&Chart::default()).contains("no data"));
        let b = bar_chart("t", "y", &[], &[]);
        assert!(b.ends_with("</svg>") && !b.contains("NaN"));
    }
}
