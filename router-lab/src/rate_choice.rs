//! The escalation rate a curve supports: the highest operating point whose further escalated
//! tokens, chosen by the router, still bought more of the SLM-to-LLM gap than tokens chosen at
//! random buy on average.
//!
//! A curve of gap recovered against share escalated rises steeply while the router spends the
//! cloud on the tokens that decide the answer and flattens once those are taken. Where its
//! slope (gap per escalated share, between neighbouring operating points) has dropped to random
//! routing's average slope for good, the router picks tokens no better than a coin would: the
//! cloud's tokens buy little there. The supported rate is the last operating point reached by
//! a segment steeper than random's; a device's default target should sit at it, not past it.
//! The curve is read from the top down, so one flat segment at a low rate (a share of 1 % on
//! 150 answers is a handful of tokens, and a single item moves its gap) does not rule out the
//! rates above it that do pay.
//!
//! Pure: two policies' operating points in, the choice out.

use serde::Serialize;

/// One operating point of a policy's curve, as the choice reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OperatingPoint {
    /// Its target rate.
    pub target_rate: f64,
    /// The share of tokens it escalated.
    pub share: f64,
    /// The share of the gap it recovered.
    pub gap: f64,
}

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
    /// The highest target rate whose segment is steeper than random routing; `None` when no
    /// segment is.
    pub rate: Option<f64>,
    /// Random routing's average gap recovered per share escalated (its gaps over its shares).
    pub random_gain_per_share: f64,
    /// The router's slope into each of its operating points, lowest rate first.
    pub segments: Vec<Segment>,
}

/// The rate the `router`'s curve supports against `random` routing's points; `None` with fewer
/// than two router points or no random share.
pub fn choose(router: &[OperatingPoint], random: &[OperatingPoint]) -> Option<RateChoice> {
    let (gaps, shares) = random.iter().fold((0.0, 0.0), |(g, s), p| (g + p.gap, s + p.share));
    if shares <= 0.0 || router.len() < 2 {
        return None;
    }
    let random = (gaps / shares).max(0.0);
    let mut own = router.to_vec();
    own.sort_by(|a, b| a.target_rate.total_cmp(&b.target_rate));
    let mut segments = Vec::with_capacity(own.len());
    let (mut share, mut gap) = (0.0, 0.0);
    for p in &own {
        // A point that escalated no more than the one before says nothing about the slope.
        if p.share <= share {
            continue;
        }
        segments.push(Segment { to_rate: p.target_rate, gain_per_share: (p.gap - gap) / (p.share - share) });
        (share, gap) = (p.share, p.gap);
    }
    let rate = segments.iter().rposition(|s| s.gain_per_share > random).map(|k| segments[k].to_rate);
    Some(RateChoice { rate, random_gain_per_share: random, segments })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(target_rate: f64, share: f64, gap: f64) -> OperatingPoint {
        OperatingPoint { target_rate, share, gap }
    }

    /// The CommonsenseQA curves (first 300 validation items): random routing, then the shipped
    /// router.
    fn commonsense_qa() -> (Vec<OperatingPoint>, Vec<OperatingPoint>) {
        let random = vec![at(0.01, 0.013, 0.03), at(0.02, 0.020, 0.01), at(0.05, 0.053, 0.08), at(0.10, 0.100, 0.18), at(0.20, 0.199, 0.40)];
        let router = vec![at(0.01, 0.010, 0.24), at(0.02, 0.020, 0.37), at(0.05, 0.050, 0.72), at(0.10, 0.100, 0.88), at(0.20, 0.192, 0.97)];
        (random, router)
    }

    #[test]
    fn the_supported_rate_is_the_last_point_before_the_router_is_no_steeper_than_random() {
        let (random, router) = commonsense_qa();
        let c = choose(&router, &random).unwrap();
        // Random: 0.70 of the gap over 0.385 of the tokens, 1.8 per share.
        assert!((c.random_gain_per_share - 0.70 / 0.385).abs() < 1e-9, "{c:?}");
        let slopes: Vec<f64> = c.segments.iter().map(|s| (s.gain_per_share * 10.0).round() / 10.0).collect();
        assert_eq!(slopes, [24.0, 13.0, 11.7, 3.2, 1.0], "{c:?}");
        assert_eq!(c.rate, Some(0.10), "10 -> 20 % buys 1.0 per share, random 1.8");
    }

    #[test]
    fn a_router_steeper_than_random_everywhere_supports_its_highest_rate_and_one_never_steeper_none() {
        let (random, mut router) = commonsense_qa();
        router.retain(|p| p.target_rate < 0.15);
        assert_eq!(choose(&router, &random).unwrap().rate, Some(0.10));
        let flat = choose(&[at(0.05, 0.05, 0.05), at(0.1, 0.1, 0.1)], &[at(0.1, 0.1, 0.2)]).unwrap();
        assert_eq!(flat.rate, None, "1.0 per share against random's 2.0");
    }

    #[test]
    fn a_flat_segment_at_a_low_rate_does_not_rule_out_the_rates_above_it_that_pay() {
        // BIG-bench object_counting, pooled router: one item fewer at 1 %, then steeper than
        // random up to 20 %.
        let random = [at(0.01, 0.011, -0.03), at(0.05, 0.05, 0.03), at(0.1, 0.102, 0.23), at(0.2, 0.192, 0.26)];
        let router = [at(0.01, 0.011, -0.03), at(0.02, 0.021, 0.06), at(0.05, 0.05, 0.17), at(0.1, 0.101, 0.31), at(0.2, 0.2, 0.69)];
        let c = choose(&router, &random).unwrap();
        assert!(c.segments[0].gain_per_share < 0.0);
        assert_eq!(c.rate, Some(0.2));
    }

    #[test]
    fn a_point_that_escalated_no_more_than_the_one_before_is_skipped() {
        let c = choose(&[at(0.01, 0.02, 0.3), at(0.02, 0.02, 0.35), at(0.05, 0.05, 0.6)], &[at(0.1, 0.1, 0.1)]).unwrap();
        assert_eq!(c.segments.iter().map(|s| s.to_rate).collect::<Vec<_>>(), [0.01, 0.05]);
        assert_eq!(c.rate, Some(0.05));
    }

    #[test]
    fn without_random_routing_or_a_second_point_there_is_no_choice() {
        assert!(choose(&[at(0.05, 0.05, 0.5), at(0.1, 0.1, 0.8)], &[]).is_none());
        assert!(choose(&[at(0.1, 0.1, 0.8)], &[at(0.1, 0.1, 0.1)]).is_none());
    }
}
