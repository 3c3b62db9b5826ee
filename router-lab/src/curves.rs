//! Curves of the SLM-to-LLM gap recovered against the share of tokens escalated, per policy,
//! with paired bootstrap intervals, and each trained router's lead over the SLM's own
//! confidence at each operating point.
//!
//! One operating point says little: with the rate controller holding the share, two policies
//! can tie at 10 % and part at 5 %. So an evaluation's runs `POLICY@RATE` are read as curves,
//! and every figure carries its uncertainty from the same resamples: items are drawn with
//! replacement and every run of an item is kept together (paired), so the lead of one policy
//! over another is measured on the same items, which is far tighter than comparing two
//! unpaired intervals. The gap is measurable only when the LLM beats the SLM in the
//! resamples: its own interval (`llm_minus_slm`) says whether it is at the item count.
//!
//! Pure: records in, figures out, the seed passed in.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::eval_report::ItemRecord;
use crate::rate_choice::{choose, OperatingPoint, RateChoice};

/// The policy drawn against the router: the SLM's own top probability.
const BASELINE: &str = "confidence";
/// The policy whose slope is the floor of the rate a curve supports (every other policy's curve
/// is read against it; every policy but it and the baseline has its lead measured).
const RANDOM: &str = "random";

/// A 95 % interval (2.5th and 97.5th percentiles of the resamples).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

/// One run of a curve: a policy at one target rate.
#[derive(Debug, Clone, Serialize)]
pub struct CurvePoint {
    /// The run's name (`policy@rate`).
    pub run: String,
    /// Policy (`router`, `confidence`, `random`, or a named router such as `mixed-router`).
    pub policy: String,
    /// The operating point's target share.
    pub target_rate: f64,
    /// Escalated tokens / generated tokens over the items.
    pub share: f64,
    /// Accuracy over the items.
    pub accuracy: f64,
    /// Share of the SLM-to-LLM accuracy gap recovered (`None` when the LLM is not ahead).
    pub gap: Option<f64>,
    /// Its paired bootstrap interval.
    pub gap_interval: Option<Interval>,
}

/// A router's lead over confidence routing at one target rate, in shares of the gap.
#[derive(Debug, Clone, Serialize)]
pub struct Lead {
    /// The router's policy name (`router`, or a name joined with `router-lab curves --with`).
    pub policy: String,
    /// The operating point's target share.
    pub target_rate: f64,
    /// The router's gap recovered minus confidence's.
    pub lead: f64,
    /// Its paired bootstrap interval: above 0 means the router is ahead at this item count.
    pub interval: Interval,
}

/// Every curve of one evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct Curves {
    /// Items that hold every run (only those are counted).
    pub items: usize,
    /// SLM-only accuracy.
    pub slm: f64,
    /// LLM-only accuracy.
    pub llm: f64,
    /// LLM minus SLM accuracy, with its interval: the gap is measurable when it excludes 0.
    pub llm_minus_slm: (f64, Interval),
    /// Points of every routed policy, by policy then rate.
    pub points: Vec<CurvePoint>,
    /// Each router's lead over confidence at each rate both were run at, by policy then rate.
    pub leads: Vec<Lead>,
    /// The rate each policy's curve supports against random routing ([`crate::rate_choice`]),
    /// by policy: the routers' and the SLM's confidence's, so a default rate can be read off
    /// the router a device runs.
    pub rate_choices: Vec<SupportedRate>,
}

/// The rate one policy's curve supports.
#[derive(Debug, Clone, Serialize)]
pub struct SupportedRate {
    /// The policy (`router`, `confidence`, or a name joined with `router-lab curves --with`).
    pub policy: String,
    /// Its choice, with the slopes it was read from.
    #[serde(flatten)]
    pub choice: RateChoice,
}

impl Curves {
    /// Whether the LLM's lead over the SLM is beyond chance at this item count.
    pub fn gap_measurable(&self) -> bool {
        self.llm_minus_slm.1.low > 0.0
    }
}

/// `policy@rate` split, e.g. `("router", 0.05)`.
fn split_run(run: &str) -> Option<(&str, f64)> {
    let (policy, rate) = run.split_once('@')?;
    Some((policy, rate.parse().ok()?))
}

/// The curves of `records` (runs `slm-only`, `llm-only` and `POLICY@RATE`), with `resamples`
/// paired bootstrap draws from `seed`. `None` without both SLM-only and LLM-only runs.
pub fn curves(records: &[ItemRecord], resamples: usize, seed: u64) -> Option<Curves> {
    // The run names, in a stable order; only items holding all of them are paired.
    let mut names: Vec<String> = records.iter().flat_map(|r| r.runs.iter().map(|o| o.run.clone())).collect();
    names.sort();
    names.dedup();
    let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let (slm, llm) = (*index.get("slm-only")?, *index.get("llm-only")?);
    // Per item: correct per run, and tokens / escalated per run.
    let mut correct: Vec<Vec<bool>> = Vec::new();
    let (mut tokens, mut escalated) = (vec![0usize; names.len()], vec![0usize; names.len()]);
    for rec in records {
        if rec.runs.len() < names.len() || names.iter().any(|n| !rec.runs.iter().any(|o| &o.run == n)) {
            continue;
        }
        let mut row = vec![false; names.len()];
        for o in &rec.runs {
            let i = index[o.run.as_str()];
            row[i] = o.correct;
            tokens[i] += o.tokens;
            escalated[i] += o.escalated;
        }
        correct.push(row);
    }
    let n = correct.len();
    if n == 0 {
        return None;
    }
    let count = |rows: &[&Vec<bool>], i: usize| rows.iter().filter(|r| r[i]).count() as f64;
    let all: Vec<&Vec<bool>> = correct.iter().collect();
    let totals: Vec<f64> = (0..names.len()).map(|i| count(&all, i)).collect();
    let gap_of = |c: &[f64], i: usize| (c[llm] > c[slm]).then(|| (c[i] - c[slm]) / (c[llm] - c[slm]));

    let routed: Vec<(usize, &str, f64)> = names.iter().enumerate().filter_map(|(i, name)| split_run(name).map(|(p, r)| (i, p, r))).collect();
    let mut leads_of: Vec<(&str, f64, usize, usize)> = routed
        .iter()
        .filter(|(_, p, _)| *p != BASELINE && *p != RANDOM)
        .filter_map(|&(i, policy, rate)| routed.iter().find(|(_, p, r)| *p == BASELINE && (r - rate).abs() < 1e-9).map(|&(j, _, _)| (policy, rate, i, j)))
        .collect();
    leads_of.sort_by(|a, b| a.0.cmp(b.0).then(a.1.total_cmp(&b.1)));

    // Resample items with every run kept together.
    let mut rng = StdRng::seed_from_u64(seed);
    let mut gaps: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut lead_draws: Vec<Vec<f64>> = vec![Vec::new(); leads_of.len()];
    let mut llm_minus_slm = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let sample: Vec<&Vec<bool>> = (0..n).map(|_| &correct[rng.random_range(0..n)]).collect();
        let c: Vec<f64> = (0..names.len()).map(|i| count(&sample, i)).collect();
        llm_minus_slm.push((c[llm] - c[slm]) / n as f64);
        if c[llm] <= c[slm] {
            continue;
        }
        for &(i, _, _) in &routed {
            gaps[i].extend(gap_of(&c, i));
        }
        for (k, &(_, _, i, j)) in leads_of.iter().enumerate() {
            lead_draws[k].push((c[i] - c[j]) / (c[llm] - c[slm]));
        }
    }

    let mut points: Vec<CurvePoint> = routed
        .iter()
        .map(|&(i, policy, rate)| CurvePoint {
            run: names[i].clone(),
            policy: policy.to_string(),
            target_rate: rate,
            share: escalated[i] as f64 / tokens[i].max(1) as f64,
            accuracy: totals[i] / n as f64,
            gap: gap_of(&totals, i),
            gap_interval: interval(&mut gaps[i]),
        })
        .collect();
    points.sort_by(|a, b| a.policy.cmp(&b.policy).then(a.target_rate.total_cmp(&b.target_rate)));
    let leads = leads_of
        .iter()
        .zip(lead_draws.iter_mut())
        .filter_map(|(&(policy, rate, i, j), draws)| {
            let lead = (totals[i] - totals[j]) / (totals[llm] - totals[slm]);
            Some(Lead { policy: policy.to_string(), target_rate: rate, lead: lead.is_finite().then_some(lead)?, interval: interval(draws)? })
        })
        .collect();
    let operating = |policy: &str| -> Vec<OperatingPoint> {
        points.iter().filter(|p| p.policy == policy).filter_map(|p| Some(OperatingPoint { target_rate: p.target_rate, share: p.share, gap: p.gap? })).collect()
    };
    let mut policies: Vec<&str> = points.iter().map(|p| p.policy.as_str()).filter(|p| *p != RANDOM).collect();
    policies.dedup();
    let random = operating(RANDOM);
    let rate_choices = policies.into_iter().filter_map(|p| Some(SupportedRate { policy: p.to_string(), choice: choose(&operating(p), &random)? })).collect();
    Some(Curves {
        items: n,
        slm: totals[slm] / n as f64,
        llm: totals[llm] / n as f64,
        llm_minus_slm: ((totals[llm] - totals[slm]) / n as f64, interval(&mut llm_minus_slm)?),
        points,
        leads,
        rate_choices,
    })
}

/// The 95 % percentile interval of `draws` (sorted in place); `None` when empty.
fn interval(draws: &mut [f64]) -> Option<Interval> {
    if draws.is_empty() {
        return None;
    }
    draws.sort_by(f64::total_cmp);
    let at = |q: f64| draws[((q * draws.len() as f64) as usize).min(draws.len() - 1)];
    Some(Interval { low: at(0.025), high: at(0.975) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval_item::RunOutcome;

    fn item(id: usize, runs: &[(&str, bool, usize)]) -> ItemRecord {
        let runs = runs.iter().map(|&(run, correct, escalated)| RunOutcome { run: run.into(), answer: None, correct, tokens: 20, escalated, text: String::new() }).collect();
        ItemRecord { id: id.to_string(), answer_key: "A".into(), runs }
    }

    /// 200 items: the SLM right on 40, the LLM on 140; at 5 % the router recovers 80 of the
    /// 100 items' gap and confidence 40; at 10 % both recover 90.
    fn set() -> Vec<ItemRecord> {
        (0..200)
            .map(|i| {
                let (slm, llm) = (i < 40, i < 140);
                let router5 = i < 120;
                let confidence5 = i < 80;
                let ten = i < 130;
                item(i, &[("slm-only", slm, 0), ("llm-only", llm, 20), ("router@0.050", router5, 1), ("confidence@0.050", confidence5, 1), ("router@0.100", ten, 2), ("confidence@0.100", ten, 2), ("random@0.050", slm, 1)])
            })
            .collect()
    }

    /// [`set`] with one more run on every item, right where `correct(item)`.
    fn set_with(run: &str, escalated: usize, correct: impl Fn(usize) -> bool) -> Vec<ItemRecord> {
        let extra = |i| RunOutcome { run: run.into(), answer: None, correct: correct(i), tokens: 20, escalated, text: String::new() };
        set()
            .into_iter()
            .enumerate()
            .map(|(i, mut r)| {
                r.runs.push(extra(i));
                r
            })
            .collect()
    }

    #[test]
    fn a_router_ahead_on_the_same_items_has_a_lead_interval_above_zero_and_a_tie_straddles_it() {
        let c = curves(&set(), 2000, 7).unwrap();
        assert_eq!(c.items, 200);
        assert!(c.gap_measurable());
        let at = |rate: f64| c.leads.iter().find(|l| l.policy == "router" && (l.target_rate - rate).abs() < 1e-9).unwrap();
        assert!((at(0.05).lead - 0.4).abs() < 1e-9, "{:?}", at(0.05));
        assert!(at(0.05).interval.low > 0.25 && at(0.05).interval.high < 0.55, "{:?}", at(0.05).interval);
        assert_eq!(at(0.1).lead, 0.0);
        assert_eq!((at(0.1).interval.low, at(0.1).interval.high), (0.0, 0.0), "identical answers: no spread at all");
    }

    #[test]
    fn each_point_has_its_share_gap_and_interval_and_random_recovers_nothing() {
        let c = curves(&set(), 500, 1).unwrap();
        let point = |run: &str| c.points.iter().find(|p| p.run == run).unwrap();
        let r = point("router@0.050");
        assert!((r.gap.unwrap() - 0.8).abs() < 1e-9);
        assert!((r.share - 0.05).abs() < 1e-9);
        let i = r.gap_interval.unwrap();
        assert!(i.low < 0.8 && i.high > 0.8);
        assert_eq!(point("random@0.050").gap, Some(0.0));
        assert_eq!(c.points.iter().map(|p| p.policy.as_str()).collect::<Vec<_>>(), ["confidence", "confidence", "random", "router", "router"], "by policy, then rate");
    }

    #[test]
    fn a_gap_within_chance_is_reported_as_not_measurable() {
        // 60 items: the LLM right on one more than the SLM.
        let records: Vec<ItemRecord> = (0..60).map(|i| item(i, &[("slm-only", i < 30, 0), ("llm-only", i < 31, 20), ("router@0.050", i < 31, 1), ("confidence@0.050", i < 30, 1)])).collect();
        let c = curves(&records, 1000, 3).unwrap();
        assert!(!c.gap_measurable(), "{:?}", c.llm_minus_slm);
    }

    #[test]
    fn every_router_beside_the_shipped_one_gets_its_own_lead_over_confidence() {
        let c = curves(&set_with("pooled@0.050", 1, |i| i < 130), 500, 1).unwrap();
        let lead = |policy: &str| c.leads.iter().find(|l| l.policy == policy && (l.target_rate - 0.05).abs() < 1e-9).map(|l| l.lead);
        assert!((lead("pooled").unwrap() - 0.5).abs() < 1e-9);
        assert!((lead("router").unwrap() - 0.4).abs() < 1e-9);
        assert!(lead("random").is_none() && lead("confidence").is_none());
        assert!(c.leads.iter().all(|l| l.policy == "pooled" || l.policy == "router"));
    }

    #[test]
    fn every_policy_but_random_gets_the_rate_its_curve_supports() {
        let c = curves(&set_with("random@0.100", 2, |i| i < 100), 100, 1).unwrap();
        let names: Vec<&str> = c.rate_choices.iter().map(|r| r.policy.as_str()).collect();
        assert_eq!(names, ["confidence", "router"]);
        // Random: 0.6 of the gap over 0.15 of the tokens, 4 per share. The router: 16 per share
        // to 5 %, then 2 to 10 %, so it supports 5 %; confidence: 8, then 10, so 10 %.
        let rate = |p: &str| c.rate_choices.iter().find(|r| r.policy == p).unwrap().choice.rate;
        assert_eq!(rate("router"), Some(0.05));
        assert_eq!(rate("confidence"), Some(0.1));
    }

    #[test]
    fn only_items_holding_every_run_are_counted_and_a_set_without_baselines_has_no_curves() {
        let mut records = set();
        records.push(item(999, &[("slm-only", true, 0)]));
        assert_eq!(curves(&records, 100, 1).unwrap().items, 200);
        let no_llm: Vec<ItemRecord> = (0..10).map(|i| item(i, &[("slm-only", true, 0), ("router@0.050", true, 1)])).collect();
        assert!(curves(&no_llm, 100, 1).is_none());
    }
}
