//! The escalation rate a curve supports: the highest operating point up to which each further
//! escalated token, chosen by the router, buys more of the SLM-to-LLM gap than a token chosen
//! at random buys on average.
//!
//! A curve of gap recovered against share escalated rises steeply while the router spends the
//! cloud on the tokens that decide the answer and flattens once those are taken. Past the
//! point where its slope (gap per escalated share, between neighbouring operating points)
//! drops to random routing's average slope, the router picks tokens no better than a coin
//! would: the cloud's tokens buy little there. That point is the rate the curve supports;
//! a device's default target should sit at it, not past it.
//!
//! Pure: a curve's points in, the choice out.

use serde::Serialize;

use crate::curves::CurvePoint;

/// The policy whose slope is the floor.
const RANDOM: &str = "random";

/// The router's slope into one operating point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Segment {
    /// The operating point the segment ends at (its target rate).
    pub to_rate: f64,
    /// Gap recovered per share escalated between the previous point (or nothing escalated)
    /// and this one.
    pub gain_per_share: f64,
}

/// The rate a curve supports, with the slopes it was read from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateChoice {
    /// The highest target rate reached before the router's slope first falls to random's;
    /// `None` when even its first segment is no steeper than random routing.
    pub rate: Option<f64>,
    /// Random routing's average gap recovered per share escalated (its gaps over its shares).
    pub random_gain_per_share: f64,
    /// The router's slope into each of its operating points, lowest rate first.
    pub segments: Vec<Segment>,
}

/// The rate `policy`'s curve supports against random routing, from `points` (a curve's
/// points, every policy); `None` without a gap for `policy` at two or more rates or without
/// random routing on the curve.
pub fn choose(points: &[CurvePoint], policy: &str) -> Option<RateChoice> {
    let (gaps, shares) = points.iter().filter(|p| p.policy == RANDOM).filter_map(|p| Some((p.gap?, p.share))).fold((0.0, 0.0), |(g, s), (pg, ps)| (g + pg, s + ps));
    if shares <= 0.0 {
        return None;
    }
    let random = (gaps / shares).max(0.0);
    let mut own: Vec<(f64, f64, f64)> = points.iter().filter(|p| p.policy == policy).filter_map(|p| Some((p.target_rate, p.share, p.gap?))).collect();
    if own.len() < 2 {
        return None;
    }
    own.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut segments = Vec::with_capacity(own.len());
    let (mut share, mut gap) = (0.0, 0.0);
    for &(rate, s, g) in &own {
        // A point that escalated no more than the one before says nothing about the slope.
        if s <= share {
            continue;
        }
        segments.push(Segment { to_rate: rate, gain_per_share: (g - gap) / (s - share) });
        (share, gap) = (s, g);
    }
    let below = segments.iter().position(|s| s.gain_per_share <= random);
    let rate = match below {
        Some(0) => None,
        Some(k) => Some(segments[k - 1].to_rate),
        None => segments.last().map(|s| s.to_rate),
    };
    Some(RateChoice { rate, random_gain_per_share: random, segments })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(policy: &str, rate: f64, share: f64, gap: f64) -> CurvePoint {
        CurvePoint { run: format!("{policy}@{rate:.3}"), policy: policy.into(), target_rate: rate, share, accuracy: 0.0, gap: Some(gap), gap_interval: None }
    }

    /// The CommonsenseQA curve of the shipped router (first 300 validation items).
    fn commonsense_qa() -> Vec<CurvePoint> {
        vec![
            point("random", 0.01, 0.013, 0.03),
            point("random", 0.02, 0.020, 0.01),
            point("random", 0.05, 0.053, 0.08),
            point("random", 0.10, 0.100, 0.18),
            point("random", 0.20, 0.199, 0.40),
            point("router", 0.01, 0.010, 0.24),
            point("router", 0.02, 0.020, 0.37),
            point("router", 0.05, 0.050, 0.72),
            point("router", 0.10, 0.100, 0.88),
            point("router", 0.20, 0.192, 0.97),
        ]
    }

    #[test]
    fn the_supported_rate_is_the_last_point_before_the_router_is_no_steeper_than_random() {
        let c = choose(&commonsense_qa(), "router").unwrap();
        // Random: 0.70 of the gap over 0.385 of the tokens, 1.8 per share.
        assert!((c.random_gain_per_share - 0.70 / 0.385).abs() < 1e-9, "{c:?}");
        let slopes: Vec<f64> = c.segments.iter().map(|s| (s.gain_per_share * 10.0).round() / 10.0).collect();
        assert_eq!(slopes, [24.0, 13.0, 11.7, 3.2, 1.0], "{c:?}");
        assert_eq!(c.rate, Some(0.10), "10 -> 20 % buys 1.0 per share, random 1.8");
    }

    #[test]
    fn a_router_steeper_than_random_everywhere_supports_its_highest_rate_and_one_never_steeper_none() {
        let mut pts = commonsense_qa();
        pts.retain(|p| !(p.policy == "router" && p.target_rate > 0.15));
        assert_eq!(choose(&pts, "router").unwrap().rate, Some(0.10));
        let flat: Vec<CurvePoint> = vec![point("random", 0.1, 0.1, 0.2), point("router", 0.05, 0.05, 0.05), point("router", 0.1, 0.1, 0.1)];
        assert_eq!(choose(&flat, "router").unwrap().rate, None, "1.0 per share against random's 2.0");
    }

    #[test]
    fn a_point_that_escalated_no_more_than_the_one_before_is_skipped() {
        let pts = vec![point("random", 0.1, 0.1, 0.1), point("router", 0.01, 0.02, 0.3), point("router", 0.02, 0.02, 0.35), point("router", 0.05, 0.05, 0.6)];
        let c = choose(&pts, "router").unwrap();
        assert_eq!(c.segments.iter().map(|s| s.to_rate).collect::<Vec<_>>(), [0.01, 0.05]);
        assert_eq!(c.rate, Some(0.05));
    }

    #[test]
    fn without_random_routing_or_a_second_point_there_is_no_choice() {
        assert!(choose(&[point("router", 0.05, 0.05, 0.5), point("router", 0.1, 0.1, 0.8)], "router").is_none());
        assert!(choose(&[point("random", 0.1, 0.1, 0.1), point("router", 0.1, 0.1, 0.8)], "router").is_none());
    }
}
