//! Network profiles: named sets of impairments, read from TOML.
//!
//! The shipped file (`relay/network-profiles.toml`, compiled into the binary) names the
//! conditions a fleet meets: `lan`, `wifi`, `4g`, `3g-lossy`, `satellite`, `flapping`. A user's
//! file is read on top of it: its profiles add names or replace shipped ones whole.
//!
//! Every top-level table is one profile. Its keys apply to both directions; `up` (device to
//! gateway) and `down` (gateway to device) tables override them for one direction, which is how
//! a link gets asymmetric bandwidth. `extends = "4g"` starts from another profile's resolved
//! directions, then applies this profile's shared keys, then its `up`/`down` keys.
//!
//! Errors name the profile and the field (`profile "4g": up.loss = 1.5 is not a probability`),
//! and a key that is not a field is refused by name rather than ignored: a typo must not
//! silently turn an impairment off. Each layer is checked where it is written, so a merged
//! profile is valid by construction.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The shipped profiles (also readable in the repository as `relay/network-profiles.toml`).
pub const BUILTIN_PROFILES: &str = include_str!("../network-profiles.toml");

/// The longest delay, jitter or blackout period a profile may ask for: beyond this a value is
/// a unit mistake, not a network.
const MAX_MS: f64 = 60_000.0;
const MAX_S: f64 = 86_400.0;

/// What went wrong reading or looking up profiles.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("reading network profiles {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Not TOML, or a top-level key that is not a profile table.
    #[error("network profiles {origin}: {message}")]
    Syntax {
        /// The file (or "built-in").
        origin: String,
        /// The parser's message.
        message: String,
    },
    /// A profile with an unknown key, a value of the wrong type or out of range, or a bad
    /// `extends`.
    #[error("profile \"{profile}\": {message}")]
    Invalid {
        /// The profile's name.
        profile: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// No profile by this name.
    #[error("unknown network profile \"{name}\" (known: {})", known.join(", "))]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: Vec<String>,
    },
}

/// How jitter is drawn around the one-way delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JitterDistribution {
    /// Uniform in `delay ± jitter`.
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter`, cut at ±3 standard deviations.
    Normal,
}

/// Gilbert-Elliott bursty loss: a two-state Markov chain stepped once per packet.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    /// Probability per packet of going from the good state to the bad one.
    pub good_to_bad: f64,
    /// Probability per packet of going back to good (mean burst: 1 / this, in packets).
    pub bad_to_good: f64,
    /// Loss probability in the good state (default 0).
    #[serde(default)]
    pub loss_good: f64,
    /// Loss probability in the bad state (default 1).
    #[serde(default = "one")]
    pub loss_bad: f64,
}

fn one() -> f64 {
    1.0
}

/// Scheduled outages: every packet is dropped in `[offset + k * every, offset + k * every +
/// for)` seconds after the relay started, k = 0, 1, ...
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blackout {
    /// Period, seconds.
    pub every_s: f64,
    /// Length of each outage, seconds (less than `every_s`).
    pub for_s: f64,
    /// Start of the first outage, seconds after the relay started (default: `every_s`, so a
    /// run begins with a full period of service).
    #[serde(default)]
    pub offset_s: Option<f64>,
}

impl Blackout {
    /// The first outage's start, seconds after the relay started.
    pub fn first_s(&self) -> f64 {
        self.offset_s.unwrap_or(self.every_s)
    }
}

/// The impairments of one direction of a link. Field names are the file's keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkParams {
    /// One-way delay, ms.
    pub delay_ms: f64,
    /// Jitter around the delay, ms (see [`JitterDistribution`]); a delay never goes below 0.
    pub jitter_ms: f64,
    /// Distribution of the jitter.
    pub jitter_distribution: JitterDistribution,
    /// Deliver in arrival order even when jitter would reorder (a packet waits for the one
    /// before it). Off by default: jitter larger than the packet spacing reorders, as netem.
    pub keep_order: bool,
    /// Independent random loss probability per packet.
    pub loss: f64,
    /// Bursty loss on top of `loss`.
    pub burst: Option<Burst>,
    /// Bandwidth cap, kbit/s of UDP payload; none = unlimited.
    pub rate_kbit: Option<f64>,
    /// Bytes the bottleneck queue holds behind the cap before it tail-drops.
    pub queue_bytes: u64,
    /// Probability that a packet is delivered twice (the copy gets its own delay).
    pub duplicate: f64,
    /// Scheduled outages.
    pub blackout: Option<Blackout>,
}

/// The queue behind a bandwidth cap when a profile does not say: 64 KiB, half a second at
/// 1 Mbit/s.
pub const DEFAULT_QUEUE_BYTES: u64 = 64 * 1024;

impl Default for LinkParams {
    fn default() -> Self {
        Self {
            delay_ms: 0.0,
            jitter_ms: 0.0,
            jitter_distribution: JitterDistribution::Uniform,
            keep_order: false,
            loss: 0.0,
            burst: None,
            rate_kbit: None,
            queue_bytes: DEFAULT_QUEUE_BYTES,
            duplicate: 0.0,
            blackout: None,
        }
    }
}

impl LinkParams {
    /// Long-run share of packets lost to `loss` and `burst` together (not counting the queue or
    /// blackouts).
    pub fn expected_loss(&self) -> f64 {
        let burst = self.burst.map_or(0.0, |b| {
            let bad = if b.good_to_bad + b.bad_to_good > 0.0 { b.good_to_bad / (b.good_to_bad + b.bad_to_good) } else { 0.0 };
            (1.0 - bad) * b.loss_good + bad * b.loss_bad
        });
        1.0 - (1.0 - self.loss) * (1.0 - burst)
    }
}

/// A named network condition: the impairments of each direction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    /// The profile's name (its table's name in the file).
    pub name: String,
    /// One line for people (`loadtest relay --list`).
    pub description: String,
    /// Device to gateway.
    pub up: LinkParams,
    /// Gateway to device.
    pub down: LinkParams,
}

impl Profile {
    /// A profile that changes nothing (the relay's own cost is all that remains).
    pub fn clean(name: impl Into<String>) -> Self {
        Self { name: name.into(), description: String::new(), up: LinkParams::default(), down: LinkParams::default() }
    }

    /// Round trip the configured delays add, without jitter or queueing, ms.
    pub fn base_rtt_ms(&self) -> f64 {
        self.up.delay_ms + self.down.delay_ms
    }
}

/// A set of profiles by name.
#[derive(Debug, Clone, PartialEq)]
pub struct Profiles {
    by_name: BTreeMap<String, Profile>,
}

impl Profiles {
    /// The shipped profiles.
    pub fn builtin() -> Profiles {
        // The shipped file is checked by a test; a broken one is a build defect.
        Self::parse_str(BUILTIN_PROFILES, "built-in", None).expect("the shipped network-profiles.toml is valid")
    }

    /// The shipped profiles with a user's file read on top (it may add names and replace shipped
    /// ones, and extend either).
    pub fn load(path: &Path) -> Result<Profiles, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Io { path: path.to_path_buf(), source })?;
        let builtin = parse_tables(BUILTIN_PROFILES, "built-in")?;
        Self::parse_str(&text, &path.display().to_string(), Some(builtin))
    }

    /// Profiles from TOML text alone (no shipped ones); `origin` names the text in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Profiles, ProfileError> {
        Self::parse_str(text, origin, None)
    }

    fn parse_str(text: &str, origin: &str, base: Option<BTreeMap<String, RawProfile>>) -> Result<Profiles, ProfileError> {
        let mut raw = base.unwrap_or_default();
        raw.extend(parse_tables(text, origin)?);
        let mut by_name = BTreeMap::new();
        for name in raw.keys() {
            let profile = resolve(name, &raw, &mut Vec::new())?;
            by_name.insert(name.clone(), profile);
        }
        Ok(Profiles { by_name })
    }

    /// The profile called `name`.
    pub fn get(&self, name: &str) -> Result<&Profile, ProfileError> {
        self.by_name.get(name).ok_or_else(|| ProfileError::Unknown { name: name.to_string(), known: self.names() })
    }

    /// Every name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    /// Every profile, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Profile> {
        self.by_name.values()
    }
}

/// One layer of keys as written (shared, `up` or `down`); absent keys inherit.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParams {
    delay_ms: Option<f64>,
    jitter_ms: Option<f64>,
    jitter_distribution: Option<JitterDistribution>,
    keep_order: Option<bool>,
    loss: Option<f64>,
    burst: Option<Burst>,
    rate_kbit: Option<f64>,
    queue_bytes: Option<u64>,
    duplicate: Option<f64>,
    blackout: Option<Blackout>,
}

impl RawParams {
    /// `base` with the keys this layer sets.
    fn apply(&self, base: &LinkParams) -> LinkParams {
        LinkParams {
            delay_ms: self.delay_ms.unwrap_or(base.delay_ms),
            jitter_ms: self.jitter_ms.unwrap_or(base.jitter_ms),
            jitter_distribution: self.jitter_distribution.unwrap_or(base.jitter_distribution),
            keep_order: self.keep_order.unwrap_or(base.keep_order),
            loss: self.loss.unwrap_or(base.loss),
            burst: self.burst.or(base.burst),
            rate_kbit: self.rate_kbit.or(base.rate_kbit),
            queue_bytes: self.queue_bytes.unwrap_or(base.queue_bytes),
            duplicate: self.duplicate.unwrap_or(base.duplicate),
            blackout: self.blackout.or(base.blackout),
        }
    }

    /// Checks every value this layer sets; `prefix` is "" or "up." / "down.".
    fn check(&self, prefix: &str) -> Result<(), String> {
        let field = |name: &str| format!("{prefix}{name}");
        let range = |name: &str, v: Option<f64>, max: f64| match v {
            Some(v) if !v.is_finite() || v < 0.0 || v > max => Err(format!("{} = {v} is out of range (0 to {max})", field(name))),
            _ => Ok(()),
        };
        let prob = |name: &str, v: Option<f64>| match v {
            Some(v) if !(0.0..=1.0).contains(&v) => Err(format!("{} = {v} is not a probability (0 to 1)", field(name))),
            _ => Ok(()),
        };
        range("delay_ms", self.delay_ms, MAX_MS)?;
        range("jitter_ms", self.jitter_ms, MAX_MS)?;
        prob("loss", self.loss)?;
        prob("duplicate", self.duplicate)?;
        if let Some(b) = &self.burst {
            prob("burst.good_to_bad", Some(b.good_to_bad))?;
            prob("burst.bad_to_good", Some(b.bad_to_good))?;
            prob("burst.loss_good", Some(b.loss_good))?;
            prob("burst.loss_bad", Some(b.loss_bad))?;
            if b.bad_to_good == 0.0 && b.good_to_bad > 0.0 {
                return Err(format!("{} = 0 would stay in the bad state forever", field("burst.bad_to_good")));
            }
        }
        if let Some(r) = self.rate_kbit {
            if !r.is_finite() || r <= 0.0 || r > 1e9 {
                return Err(format!("{} = {r} must be above 0 (leave it out for no cap)", field("rate_kbit")));
            }
        }
        if self.queue_bytes == Some(0) {
            return Err(format!("{} = 0 would drop every packet behind the cap", field("queue_bytes")));
        }
        if let Some(b) = &self.blackout {
            range("blackout.every_s", Some(b.every_s), MAX_S)?;
            range("blackout.for_s", Some(b.for_s), MAX_S)?;
            range("blackout.offset_s", b.offset_s, MAX_S)?;
            if b.for_s <= 0.0 || b.for_s >= b.every_s {
                return Err(format!("{} = {} must be above 0 and below blackout.every_s = {}", field("blackout.for_s"), b.for_s, b.every_s));
            }
        }
        Ok(())
    }
}

/// One profile's table as written.
#[derive(Debug, Clone, Default)]
struct RawProfile {
    description: Option<String>,
    extends: Option<String>,
    shared: RawParams,
    up: RawParams,
    down: RawParams,
}

/// The file's profile tables, each checked on its own.
fn parse_tables(text: &str, origin: &str) -> Result<BTreeMap<String, RawProfile>, ProfileError> {
    let syntax = |message: String| ProfileError::Syntax { origin: origin.to_string(), message };
    let table: toml::Table = toml::from_str(text).map_err(|e| syntax(e.to_string().trim_end().to_string()))?;
    let mut out = BTreeMap::new();
    for (name, value) in table {
        let toml::Value::Table(mut t) = value else {
            return Err(syntax(format!("top-level key `{name}` is not a profile table (write [{name}] and its keys under it)")));
        };
        let invalid = |message: String| ProfileError::Invalid { profile: name.clone(), message };
        let text_key = |t: &mut toml::Table, key: &str| match t.remove(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(invalid(format!("{key} must be a string, not {}", other.type_str()))),
        };
        let description = text_key(&mut t, "description")?;
        let extends = text_key(&mut t, "extends")?;
        let direction = |t: &mut toml::Table, key: &str| -> Result<RawParams, ProfileError> {
            match t.remove(key) {
                None => Ok(RawParams::default()),
                Some(toml::Value::Table(d)) => {
                    let raw: RawParams = d.try_into().map_err(|e: toml::de::Error| invalid(format!("{key}: {}", e.message())))?;
                    raw.check(&format!("{key}.")).map_err(invalid)?;
                    Ok(raw)
                }
                Some(other) => Err(invalid(format!("{key} must be a table, not {}", other.type_str()))),
            }
        };
        let up = direction(&mut t, "up")?;
        let down = direction(&mut t, "down")?;
        let shared: RawParams = t.try_into().map_err(|e: toml::de::Error| invalid(e.message().to_string()))?;
        shared.check("").map_err(invalid)?;
        out.insert(name, RawProfile { description, extends, shared, up, down });
    }
    Ok(out)
}

/// `name` resolved through its `extends` chain; `seen` catches cycles.
fn resolve(name: &str, raw: &BTreeMap<String, RawProfile>, seen: &mut Vec<String>) -> Result<Profile, ProfileError> {
    let invalid = |message: String| ProfileError::Invalid { profile: name.to_string(), message };
    let this = raw.get(name).ok_or_else(|| ProfileError::Unknown { name: name.to_string(), known: raw.keys().cloned().collect() })?;
    seen.push(name.to_string());
    let base = match &this.extends {
        None => Profile::clean(name),
        Some(parent) if seen.contains(parent) => return Err(invalid(format!("extends = \"{parent}\" makes a cycle ({} -> {parent})", seen.join(" -> ")))),
        Some(parent) if !raw.contains_key(parent) => {
            let known: Vec<_> = raw.keys().cloned().collect();
            return Err(invalid(format!("extends = \"{parent}\": no such profile (known: {})", known.join(", "))));
        }
        Some(parent) => resolve(parent, raw, seen)?,
    };
    let up = this.up.apply(&this.shared.apply(&base.up));
    let down = this.down.apply(&this.shared.apply(&base.down));
    let description = this.description.clone().unwrap_or(base.description);
    Ok(Profile { name: name.to_string(), description, up, down })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Profiles::from_toml(text, "test.toml").unwrap_err().to_string()
    }

    #[test]
    fn the_shipped_file_has_the_named_profiles_with_the_issues_figures() {
        let p = Profiles::builtin();
        assert_eq!(p.names(), ["3g-lossy", "4g", "flapping", "lan", "satellite", "wifi"]);
        let lan = p.get("lan").unwrap();
        assert_eq!(lan.up, LinkParams::default());
        assert_eq!(lan.down, LinkParams::default());
        let g4 = p.get("4g").unwrap();
        for d in [&g4.up, &g4.down] {
            assert_eq!((d.delay_ms, d.jitter_ms, d.loss), (50.0, 20.0, 0.01));
        }
        let g3 = p.get("3g-lossy").unwrap();
        for d in [&g3.up, &g3.down] {
            assert_eq!((d.delay_ms, d.jitter_ms, d.loss, d.rate_kbit), (150.0, 50.0, 0.03, Some(1000.0)));
        }
        assert_eq!(p.get("satellite").unwrap().down.delay_ms, 300.0);
        let flap = p.get("flapping").unwrap();
        assert_eq!(flap.up.delay_ms, 50.0);
        assert_eq!(flap.down.blackout, Some(Blackout { every_s: 30.0, for_s: 5.0, offset_s: None }));
        assert_eq!(flap.up.blackout, flap.down.blackout);
    }

    #[test]
    fn integers_are_accepted_where_numbers_are_expected() {
        let p = Profiles::from_toml("[x]\ndelay_ms = 7\nrate_kbit = 500\n", "t").unwrap();
        assert_eq!(p.get("x").unwrap().up.delay_ms, 7.0);
        assert_eq!(p.get("x").unwrap().down.rate_kbit, Some(500.0));
    }

    #[test]
    fn up_and_down_override_the_shared_keys_and_extends_inherits_both() {
        let text = "[a]\ndelay_ms = 10\nloss = 0.1\n[a.up]\nrate_kbit = 100\n\n[b]\nextends = \"a\"\ndelay_ms = 20\n[b.down]\nloss = 0.2\n";
        let p = Profiles::from_toml(text, "t").unwrap();
        let b = p.get("b").unwrap();
        assert_eq!((b.up.delay_ms, b.up.loss, b.up.rate_kbit), (20.0, 0.1, Some(100.0)));
        assert_eq!((b.down.delay_ms, b.down.loss, b.down.rate_kbit), (20.0, 0.2, None));
        assert_eq!(b.base_rtt_ms(), 40.0);
    }

    #[test]
    fn a_users_file_adds_names_replaces_shipped_ones_and_extends_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mine.toml");
        std::fs::write(&path, "[4g]\ndelay_ms = 30\n\n[my-5g]\nextends = \"lan\"\ndelay_ms = 5\n\n[slow-4g]\nextends = \"4g\"\nrate_kbit = 200\n").unwrap();
        let p = Profiles::load(&path).unwrap();
        assert!(p.names().contains(&"my-5g".to_string()) && p.names().contains(&"satellite".to_string()));
        // Replaced whole: the shipped 4g's loss is gone.
        assert_eq!((p.get("4g").unwrap().up.delay_ms, p.get("4g").unwrap().up.loss), (30.0, 0.0));
        assert_eq!(p.get("slow-4g").unwrap().up.delay_ms, 30.0);
        assert_eq!(p.get("my-5g").unwrap().down.delay_ms, 5.0);
    }

    #[test]
    fn unknown_keys_are_refused_by_name_with_the_profile() {
        let e = err("[4g]\ndely_ms = 50\n");
        assert!(e.contains("profile \"4g\"") && e.contains("dely_ms"), "{e}");
        let e = err("[4g]\n[4g.up]\nlos = 0.1\n");
        assert!(e.contains("profile \"4g\"") && e.contains("up") && e.contains("los"), "{e}");
        let e = err("[x]\nblackout = { every_s = 30, for_s = 5, ofset_s = 1 }\n");
        assert!(e.contains("profile \"x\"") && e.contains("ofset_s"), "{e}");
    }

    #[test]
    fn bad_values_name_the_profile_and_the_field() {
        let e = err("[x]\nloss = 1.5\n");
        assert_eq!(e, "profile \"x\": loss = 1.5 is not a probability (0 to 1)");
        let e = err("[x]\ndelay_ms = -5\n");
        assert_eq!(e, "profile \"x\": delay_ms = -5 is out of range (0 to 60000)");
        let e = err("[x]\n[x.down]\nduplicate = 2\n");
        assert_eq!(e, "profile \"x\": down.duplicate = 2 is not a probability (0 to 1)");
        let e = err("[x]\nblackout = { every_s = 5, for_s = 5 }\n");
        assert!(e.contains("profile \"x\": blackout.for_s = 5 must be above 0 and below blackout.every_s = 5"), "{e}");
        let e = err("[x]\nrate_kbit = 0\n");
        assert!(e.starts_with("profile \"x\": rate_kbit = 0 must be above 0"), "{e}");
        let e = err("[x]\ndelay_ms = \"fast\"\n");
        assert!(e.contains("profile \"x\"") && e.contains("invalid type"), "{e}");
        let e = err("[x]\njitter_distribution = \"cauchy\"\n");
        assert!(e.contains("profile \"x\"") && e.contains("cauchy"), "{e}");
    }

    #[test]
    fn bad_extends_and_bad_shapes_are_refused() {
        let e = err("[x]\nextends = \"nope\"\n");
        assert!(e.starts_with("profile \"x\": extends = \"nope\": no such profile (known: x)"), "{e}");
        let e = err("[a]\nextends = \"b\"\n[b]\nextends = \"a\"\n");
        assert!(e.contains("makes a cycle"), "{e}");
        let e = err("delay_ms = 5\n");
        assert!(e.contains("test.toml") && e.contains("`delay_ms` is not a profile table"), "{e}");
        let e = err("[x\n");
        assert!(e.starts_with("network profiles test.toml:"), "{e}");
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let e = Profiles::builtin().get("5g").unwrap_err().to_string();
        assert_eq!(e, "unknown network profile \"5g\" (known: 3g-lossy, 4g, flapping, lan, satellite, wifi)");
    }

    #[test]
    fn a_missing_file_names_its_path() {
        let e = Profiles::load(Path::new("/nonexistent/profiles.toml")).unwrap_err().to_string();
        assert!(e.starts_with("reading network profiles /nonexistent/profiles.toml:"), "{e}");
    }

    #[test]
    fn expected_loss_combines_random_and_bursty_loss() {
        let p = LinkParams { loss: 0.1, burst: Some(Burst { good_to_bad: 0.1, bad_to_good: 0.4, loss_good: 0.0, loss_bad: 1.0 }), ..LinkParams::default() };
        assert!((p.expected_loss() - (1.0 - 0.9 * 0.8)).abs() < 1e-12);
    }
}
