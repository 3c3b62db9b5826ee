//! The fleet's option values that are small languages of their own: which backend stands
//! behind the gateway, how devices split over network profiles and over session kinds. Each
//! parses from its command-line form and says what is wrong with a bad one.

use std::fmt;
use std::str::FromStr;

use cloud_gateway::engine::EngineSpec;

/// The pseudo-profile of devices that talk to the gateway without a relay in between.
pub const DIRECT: &str = "direct";

/// What answers the gateway's escalations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendSpec {
    /// [`crate::fixed_backend::FixedCostBackend`]: a known cost per batch (ms) and tokens
    /// the devices can check.
    FixedCost {
        /// Cost per batch, ms.
        cost_ms: u64,
    },
    /// The embedded ONNX LLM (a prepared model id or directory).
    Embedded {
        /// Model id or directory.
        model: String,
    },
    /// External engines behind the gateway's pool.
    Engines(Vec<EngineSpec>),
}

impl BackendSpec {
    /// Whether devices can check every cloud token against the backend's own rule.
    pub fn tokens_checkable(&self) -> bool {
        matches!(self, Self::FixedCost { .. })
    }
}

impl FromStr for BackendSpec {
    type Err = String;
    /// `fixed-cost[:MS]`, `embedded[:MODEL]` or `engine=KIND=URL[,KIND=URL...]`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix("fixed-cost") {
            let cost_ms = match rest.strip_prefix(':') {
                None if rest.is_empty() => 0,
                Some(ms) => ms.trim().parse().map_err(|_| format!("backend `{s}`: the cost after `fixed-cost:` must be whole milliseconds, e.g. fixed-cost:2"))?,
                None => return Err(format!("backend `{s}`: expected fixed-cost or fixed-cost:MS")),
            };
            return Ok(Self::FixedCost { cost_ms });
        }
        if let Some(rest) = s.strip_prefix("embedded") {
            return match rest.strip_prefix(':') {
                None if rest.is_empty() => Ok(Self::Embedded { model: model_runtime::model_files::DEFAULT_LLM.to_string() }),
                Some(m) if !m.trim().is_empty() => Ok(Self::Embedded { model: m.trim().to_string() }),
                _ => Err(format!("backend `{s}`: expected embedded or embedded:MODEL")),
            };
        }
        if let Some(rest) = s.strip_prefix("engine=") {
            let engines = rest.split(',').map(str::parse).collect::<Result<Vec<EngineSpec>, String>>()?;
            return Ok(Self::Engines(engines));
        }
        Err(format!("backend `{s}`: expected fixed-cost[:MS], embedded[:MODEL] or engine=KIND=URL[,KIND=URL...]"))
    }
}

impl fmt::Display for BackendSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FixedCost { cost_ms } => write!(f, "fixed-cost:{cost_ms}"),
            Self::Embedded { model } => write!(f, "embedded:{model}"),
            Self::Engines(e) => write!(f, "engine={}", e.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(",")),
        }
    }
}

/// Named shares (`4g=70,wifi=20,3g-lossy=10`): device groups by profile, or sessions by kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Mix(pub Vec<(String, f64)>);

impl FromStr for Mix {
    type Err = String;
    /// `NAME=WEIGHT,...` (weights need not add up to 100) or a lone `NAME` (all of it).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = match part.split_once('=') {
                Some((n, w)) => (n.trim(), w.trim().parse::<f64>().map_err(|_| format!("`{part}`: the weight after `=` must be a number"))?),
                None => (part, 1.0),
            };
            if name.is_empty() {
                return Err(format!("`{part}`: a name is missing before `=`"));
            }
            if !(weight.is_finite() && weight >= 0.0) {
                return Err(format!("`{part}`: the weight must be a number >= 0"));
            }
            if parts.iter().any(|(n, _): &(String, f64)| n == name) {
                return Err(format!("`{name}` is named twice"));
            }
            parts.push((name.to_string(), weight));
        }
        if parts.iter().map(|p| p.1).sum::<f64>() <= 0.0 {
            return Err(format!("`{s}`: no name with a weight above 0 (expected e.g. 4g=70,wifi=30)"));
        }
        Ok(Self(parts))
    }
}

impl Mix {
    /// Split `n` items over the names in proportion to their weights (largest remainders, so
    /// the counts add up to `n`); names whose share rounds to none are left out.
    pub fn split(&self, n: usize) -> Vec<(String, usize)> {
        let total: f64 = self.0.iter().map(|p| p.1).sum();
        let exact: Vec<f64> = self.0.iter().map(|p| p.1 / total * n as f64).collect();
        let mut counts: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
        let mut left = n - counts.iter().sum::<usize>();
        let mut order: Vec<usize> = (0..exact.len()).collect();
        order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())).then(a.cmp(&b)));
        for &i in order.iter().cycle().take(exact.len() * 2) {
            if left == 0 {
                break;
            }
            if self.0[i].1 > 0.0 {
                counts[i] += 1;
                left -= 1;
            }
        }
        self.0.iter().zip(counts).filter(|(_, c)| *c > 0).map(|((name, _), c)| (name.clone(), c)).collect()
    }

    /// The group of each of `n` items, interleaved so that every prefix has about the mix's
    /// proportions (devices that start first are a fair sample of the fleet).
    pub fn interleave(&self, n: usize) -> Vec<usize> {
        let split = self.split(n);
        let mut slots: Vec<(f64, usize)> = Vec::with_capacity(n);
        for (g, (_, count)) in split.iter().enumerate() {
            slots.extend((0..*count).map(|k| ((k as f64 + 0.5) / *count as f64, g)));
        }
        slots.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        slots.into_iter().map(|s| s.1).collect()
    }

    /// The names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(|p| p.0.as_str()).collect()
    }

    /// Pick a name with probability proportional to its weight, from a uniform `u` in [0, 1).
    pub fn pick(&self, u: f64) -> &str {
        let total: f64 = self.0.iter().map(|p| p.1).sum();
        let mut x = u * total;
        for (name, w) in &self.0 {
            if x < *w {
                return name;
            }
            x -= w;
        }
        self.0.iter().rev().find(|p| p.1 > 0.0).map_or("", |p| p.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_parse_from_their_command_line_forms() {
        assert_eq!("fixed-cost".parse(), Ok(BackendSpec::FixedCost { cost_ms: 0 }));
        assert_eq!("fixed-cost:3".parse(), Ok(BackendSpec::FixedCost { cost_ms: 3 }));
        assert_eq!("embedded:tiny-qwen2".parse(), Ok(BackendSpec::Embedded { model: "tiny-qwen2".into() }));
        let Ok(BackendSpec::Engines(e)) = "engine=llamacpp=http://127.0.0.1:8080,llamacpp=http://127.0.0.1:8081".parse::<BackendSpec>() else { panic!() };
        assert_eq!(e.len(), 2);
        for bad in ["fixed-cost:x", "fixed-costly", "gpu", "engine=nope=http://x", "embedded:"] {
            assert!(bad.parse::<BackendSpec>().is_err(), "{bad}");
        }
        assert!("fixed-cost:x".parse::<BackendSpec>().unwrap_err().contains("milliseconds"));
    }

    #[test]
    fn a_mix_splits_into_counts_that_add_up() {
        let m: Mix = "4g=70,wifi=20,3g-lossy=10".parse().unwrap();
        assert_eq!(m.split(1000), vec![("4g".into(), 700), ("wifi".into(), 200), ("3g-lossy".into(), 100)]);
        assert_eq!(m.split(7).iter().map(|p| p.1).sum::<usize>(), 7);
        let order = m.interleave(10);
        assert_eq!(order.len(), 10);
        assert_eq!(order.iter().filter(|&&g| g == 0).count(), 7);
        assert!(order[..4].contains(&1), "every prefix samples the mix: {order:?}");
        let lone: Mix = "flapping".parse().unwrap();
        assert_eq!(lone.split(3), vec![("flapping".into(), 3)]);
    }

    #[test]
    fn bad_mixes_are_refused_with_the_reason() {
        for (bad, says) in [("4g=x", "number"), ("=5", "name is missing"), ("4g=1,4g=2", "twice"), ("4g=0", "above 0"), ("", "above 0"), ("4g=-1", ">= 0")] {
            let e = bad.parse::<Mix>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn picks_follow_the_weights() {
        let m: Mix = "a=1,b=3".parse().unwrap();
        assert_eq!(m.pick(0.0), "a");
        assert_eq!(m.pick(0.3), "b");
        assert_eq!(m.pick(0.999), "b");
    }
}
