//! Engine workers found through DNS, and workers that pass their start-up check late.
//!
//! In Kubernetes, engine pods sit behind a headless Service whose name resolves to every pod's
//! IP (no API access needed). `--engine llamacpp=dns+http://duet-llama:8080` asks for one worker
//! per address: sticky routing, health checks, breakers and in-flight limits then see each pod
//! (a plain URL with that name would be one worker whose connections land on whichever pod the
//! resolver returns first). The name is resolved again every `resolve_interval`; the
//! bookkeeping of what to verify, cancel and drain is [`Membership`]'s, a pure state machine;
//! this module is its I/O: lookups, the start-up checks ([`verify_engine`]) as tasks, and the
//! pool's [`WorkerSet`] changed by the outcome.
//!
//! Listed engines (plain URLs) go through the same path with a fixed address: the gateway
//! serves as soon as one worker is verified ([`crate::engine::connect`]), and the others join
//! when their check passes, or are checked again after `refused_retry` if it failed.
//!
//! Each worker of a discovered engine is labelled `scheme://ip:port` (its metrics' `worker`
//! label and its rendezvous key, so every gateway replica homes a session on the same pod); its
//! client keeps the host name in the URL and is pinned to the address
//! ([`EngineClient::pinned`]), so an https engine's certificate is still checked against the
//! name.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use engine_client::connect::connect_worker;
use tokio::task::{AbortHandle, JoinSet};

use super::client::{pinned_label, EngineClient};
use super::pool::membership::{after_lookup, Action, Membership};
use super::pool::WorkerSet;
use super::verify::ExpectedVocabulary;
use super::{EngineModel, EngineSpec};
use crate::dispatch::ModelFacts;

/// How names are resolved: the system resolver in the gateway; tests swap in a
/// [`FixedResolver`] to make a name resolve to servers on loopback and change its answer.
pub trait Resolve: Send + Sync + fmt::Debug {
    /// The addresses `host` resolves to now.
    fn lookup<'a>(&'a self, host: &'a str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;
}

/// The operating system's resolver (`getaddrinfo`: /etc/hosts, then DNS, as every program on
/// the host resolves), through tokio.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, 0)).await?.map(|a| a.ip()).collect()) })
    }
}

/// A resolver answering from a table that can change while the pool runs: for tests, and for
/// embedding the pool where addresses come from elsewhere. An unknown name does not resolve.
#[derive(Debug, Default)]
pub struct FixedResolver {
    names: Mutex<HashMap<String, Vec<IpAddr>>>,
}

impl FixedResolver {
    /// Make `host` resolve to `addrs` from now on (an empty list: to nothing).
    pub fn set(&self, host: &str, addrs: Vec<IpAddr>) {
        self.names.lock().unwrap_or_else(|p| p.into_inner()).insert(host.to_ascii_lowercase(), addrs);
    }
}

impl Resolve for FixedResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        let answer = self.names.lock().unwrap_or_else(|p| p.into_inner()).get(&host.to_ascii_lowercase()).cloned();
        Box::pin(async move { answer.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{host} does not resolve"))) })
    }
}

/// One worker an engine entry stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    /// The entry.
    spec: EngineSpec,
    /// Its position in the configuration (the pool lists workers by it).
    rank: usize,
    /// The address its client is pinned to (discovered engines).
    pin: Option<IpAddr>,
}

/// What a start-up check found: a client and its engine's model, or why it was refused.
type CheckResult = Result<(EngineClient, EngineModel), String>;

/// The membership of one pool: its engine entries, what each resolves to, the checks under
/// way. [`Discovery::start`] runs until a first worker is verified; [`Discovery::run`] keeps
/// the pool's membership up to date after that.
pub struct Discovery {
    specs: Vec<EngineSpec>,
    resolver: Arc<dyn Resolve>,
    expected: ExpectedVocabulary,
    verify_wait: Duration,
    interval: Duration,
    membership: Membership<String>,
    /// Every address desired now, by label.
    targets: BTreeMap<String, Target>,
    /// The addresses each discovered entry resolved to last (by entry position).
    resolved: Vec<BTreeSet<IpAddr>>,
    checks: JoinSet<(String, CheckResult)>,
    running: HashMap<String, AbortHandle>,
}

impl Discovery {
    /// For `specs`, resolving through `resolver`; every new address is checked against
    /// `expected`, waiting up to `verify_wait` for an engine still loading its model.
    pub fn new(specs: Vec<EngineSpec>, resolver: Arc<dyn Resolve>, expected: ExpectedVocabulary, verify_wait: Duration, interval: Duration, refused_retry: Duration) -> Self {
        let resolved = vec![BTreeSet::new(); specs.len()];
        Self { specs, resolver, expected, verify_wait, interval: interval.max(Duration::from_millis(100)), membership: Membership::new(refused_retry), targets: BTreeMap::new(), resolved, checks: JoinSet::new(), running: HashMap::new() }
    }

    /// Resolve every entry, then start, cancel and drain as [`Membership::plan`] says
    /// (`pool`: where to drain from; none before the pool exists).
    async fn refresh(&mut self, pool: Option<&WorkerSet>) {
        let desired = self.resolve().await;
        for action in self.membership.plan(&desired, Instant::now()) {
            match action {
                Action::Verify(label) => self.spawn_check(label),
                Action::Cancel(label) => {
                    tracing::info!(worker = %label, "engine address gone while being checked");
                    if let Some(task) = self.running.remove(&label) {
                        task.abort();
                    }
                }
                Action::Remove(label) => {
                    if pool.is_some_and(|p| p.remove(&label)) {
                        tracing::warn!(worker = %label, "engine worker gone from DNS: draining it (no new requests, those in flight finish)");
                    }
                }
            }
        }
        self.targets.retain(|label, _| desired.contains(label));
        self.publish_counts();
    }

    /// The labels of every address desired now; records each address's target.
    async fn resolve(&mut self) -> BTreeSet<String> {
        let mut desired = BTreeSet::new();
        for (rank, spec) in self.specs.iter().enumerate() {
            if !spec.discover {
                desired.insert(spec.url.clone());
                self.targets.entry(spec.url.clone()).or_insert_with(|| Target { spec: spec.clone(), rank, pin: None });
                continue;
            }
            let answer = match host_of(&spec.url) {
                Some(host) => match self.resolver.lookup(&host).await {
                    Ok(addrs) => Some(addrs.into_iter().collect::<BTreeSet<IpAddr>>()),
                    Err(e) => {
                        tracing::warn!(engine = %spec, error = %e, "resolving a discovered engine failed: keeping its last addresses");
                        None
                    }
                },
                None => None,
            };
            let now = after_lookup(&self.resolved[rank], answer);
            if now != self.resolved[rank] {
                tracing::info!(engine = %spec, addresses = ?now, "discovered engine resolves to new addresses");
                self.resolved[rank] = now.clone();
            }
            let (scheme, port) = scheme_and_port(&spec.url);
            for ip in now {
                let label = pinned_label(&scheme, ip, port);
                desired.insert(label.clone());
                self.targets.entry(label).or_insert_with(|| Target { spec: spec.clone(), rank, pin: Some(ip) });
            }
        }
        desired
    }

    fn spawn_check(&mut self, label: String) {
        let Some(target) = self.targets.get(&label).cloned() else { return };
        let expected = self.expected.clone();
        let wait = self.verify_wait;
        let key = label.clone();
        tracing::info!(worker = %label, engine = %target.spec, "checking engine worker");
        let task = self.checks.spawn(async move {
            let result = connect_worker(&target.spec, target.pin, &expected, wait).await.map_err(|e| format!("{e:#}"));
            (key, result)
        });
        if let Some(old) = self.running.insert(label, task) {
            old.abort();
        }
    }

    /// The next finished check (`None` when none is running); cancelled ones are skipped.
    async fn next_check(&mut self) -> Option<(String, CheckResult)> {
        loop {
            match self.checks.join_next_with_id().await? {
                Ok((_, (label, result))) => {
                    self.running.remove(&label);
                    return Some((label, result));
                }
                Err(e) if e.is_cancelled() => continue,
                Err(e) => {
                    // A check that panicked: find whose, and count it as refused.
                    let id = e.id();
                    let label = self.running.iter().find(|(_, t)| t.id() == id).map(|(l, _)| l.clone())?;
                    self.running.remove(&label);
                    return Some((label, Err(format!("the check panicked: {e}"))));
                }
            }
        }
    }

    fn rank_of(&self, label: &str) -> usize {
        self.targets.get(label).map_or(usize::MAX, |t| t.rank)
    }

    fn publish_counts(&self) {
        let c = self.membership.counts();
        for (state, n) in [("serving", c.serving), ("verifying", c.verifying), ("refused", c.refused)] {
            metrics::gauge!("duet_gateway_engine_workers", "state" => state).set(n as f64);
        }
    }

    /// Until one worker passes its check: resolve and check every address, again every
    /// interval (a name may not resolve yet, pods may still be scheduled). Returns the first
    /// verified worker's client, its engine's position in the configuration and its model.
    /// Fails when `wait` passes first, or when every address was refused and nothing is left
    /// to wait for, with every refusal's reason.
    pub async fn start(&mut self, wait: Duration) -> anyhow::Result<(EngineClient, usize, EngineModel)> {
        anyhow::ensure!(!self.specs.is_empty(), "no engine given (--engine KIND=URL)");
        let deadline = tokio::time::Instant::now() + wait;
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut refusals: Vec<String> = Vec::new();
        loop {
            tokio::select! {
                _ = tick.tick() => self.refresh(None).await,
                Some((label, result)) = self.next_check(), if !self.checks.is_empty() => match result {
                    Ok((client, model)) => {
                        if self.membership.verified(&label) {
                            let rank = self.rank_of(&label);
                            self.publish_counts();
                            return Ok((client, rank, model));
                        }
                    }
                    Err(why) => {
                        tracing::warn!(worker = %label, "engine worker refused: {why}");
                        self.membership.refused(&label, Instant::now());
                        refusals.push(why);
                    }
                },
                _ = tokio::time::sleep_until(deadline) => {
                    anyhow::bail!("no engine worker passed its start-up check within {wait:?}{}", reasons(&refusals));
                }
            }
            let unresolved = self.specs.iter().enumerate().any(|(i, s)| s.discover && self.resolved[i].is_empty());
            if self.checks.is_empty() && !unresolved && !refusals.is_empty() {
                anyhow::bail!("no engine worker passed its start-up check{}", reasons(&refusals));
            }
        }
    }

    /// After start-up, for as long as the pool lives: resolve every interval, check new
    /// addresses and add those that pass (and serve what devices were told, `facts`), drain
    /// vanished ones.
    pub async fn run(mut self, pool: Weak<WorkerSet>, facts: ModelFacts) {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + self.interval, self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let Some(set) = pool.upgrade() else { return };
                    self.refresh(Some(&set)).await;
                }
                Some((label, result)) = self.next_check(), if !self.checks.is_empty() => {
                    let Some(set) = pool.upgrade() else { return };
                    match result.and_then(|(client, model)| admissible(&model, &facts).map(|()| (client, model))) {
                        Ok((client, model)) => {
                            if self.membership.verified(&label) && set.add(client, self.rank_of(&label)) {
                                tracing::info!(worker = %label, model = %model.id, context = ?model.max_context, "engine worker verified: serving");
                            }
                        }
                        Err(why) => {
                            tracing::warn!(worker = %label, "engine worker refused: {why}");
                            self.membership.refused(&label, Instant::now());
                        }
                    }
                    self.publish_counts();
                }
            }
        }
    }
}

/// Whether a worker verified after start-up can serve what devices were told at start-up: a
/// context at least as long (a shorter one would refuse sessions devices think fit).
pub fn admissible(model: &EngineModel, facts: &ModelFacts) -> Result<(), String> {
    match model.max_context {
        Some(n) if n < facts.max_context => Err(format!("its context of {n} tokens is shorter than the {} devices were told", facts.max_context)),
        _ => Ok(()),
    }
}

fn reasons(refusals: &[String]) -> String {
    if refusals.is_empty() {
        return String::new();
    }
    format!(": {}", refusals.join("; "))
}

/// The host of `url`, without IPv6 brackets.
fn host_of(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    Some(parsed.host_str()?.trim_start_matches('[').trim_end_matches(']').to_string())
}

fn scheme_and_port(url: &str) -> (String, u16) {
    match reqwest::Url::parse(url) {
        Ok(u) => (u.scheme().to_string(), u.port_or_known_default().unwrap_or(80)),
        Err(_) => ("http".into(), 80),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(max_context: usize) -> ModelFacts {
        ModelFacts { llm_id: "m".into(), tokenizer_fingerprint: "f".into(), vocab_size: 10, max_context }
    }

    #[test]
    fn a_late_worker_must_hold_the_context_devices_were_promised() {
        let model = |c| EngineModel { id: "m".into(), vocab_size: Some(10), max_context: c };
        assert!(admissible(&model(Some(4096)), &facts(4096)).is_ok());
        assert!(admissible(&model(None), &facts(4096)).is_ok(), "an engine that does not say is taken at its word");
        let err = admissible(&model(Some(2048)), &facts(4096)).unwrap_err();
        assert!(err.contains("2048") && err.contains("4096"), "{err}");
    }

    #[test]
    fn hosts_and_ports_come_from_the_url() {
        assert_eq!(host_of("http://duet-llama.duet.svc:8080").as_deref(), Some("duet-llama.duet.svc"));
        assert_eq!(host_of("http://[::1]:8080").as_deref(), Some("::1"));
        assert_eq!(scheme_and_port("https://gpu.example"), ("https".to_string(), 443));
        assert_eq!(scheme_and_port("http://x:30000"), ("http".to_string(), 30000));
    }

    #[tokio::test]
    async fn a_fixed_resolver_answers_what_it_was_told_and_nothing_else() {
        let r = FixedResolver::default();
        assert!(r.lookup("llama.test").await.is_err());
        r.set("Llama.Test", vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()]);
        assert_eq!(r.lookup("llama.test").await.unwrap().len(), 2);
        assert!(!SystemResolver.lookup("localhost").await.unwrap().is_empty());
    }
}
