//! Which engine runs where: an engine's kind (the dialect it speaks) and its URL, as the
//! command line and the configuration name them (`KIND=URL`, `KIND=dns+URL`).

use std::fmt;
use std::str::FromStr;

/// Which engine a worker runs: picks the [`Dialect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// SGLang's native API (`POST /generate` with `input_ids`).
    Sglang,
    /// vLLM's OpenAI-compatible completions with a token-id prompt, or its token-in/token-out
    /// `POST /inference/v1/generate` where the server has it.
    Vllm,
    /// llama.cpp's `llama-server` (`POST /completion` with a token-id prompt).
    LlamaCpp,
}

impl EngineKind {
    /// The name used on the command line and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sglang => "sglang",
            Self::Vllm => "vllm",
            Self::LlamaCpp => "llamacpp",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "sglang" => Ok(Self::Sglang),
            "vllm" => Ok(Self::Vllm),
            "llamacpp" | "llama.cpp" | "llama-cpp" | "llama-server" => Ok(Self::LlamaCpp),
            other => Err(format!("unknown engine `{other}` (expected sglang, vllm or llamacpp)")),
        }
    }
}

/// One engine entry: its kind and base URL (`--engine llamacpp=http://127.0.0.1:8080`), one
/// worker; or, written `dns+http://...`, one worker per address its host name resolves to.
///
/// Discovery is asked for explicitly rather than inferred from a name that happens to resolve
/// to several addresses: a plain URL keeps meaning one worker whose HTTP client resolves the
/// name per connection (a ClusterIP Service, an external load balancer, replicas behind one
/// endpoint), so a configuration does not change behaviour when DNS starts returning more
/// records; and a discovered engine stays discovered when its name resolves to a single pod
/// (an engine Deployment scaled from 1 to N needs no configuration change). The `dns+` prefix
/// is the one Thanos and Cortex use for the same thing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EngineSpec {
    /// What runs there.
    pub kind: EngineKind,
    /// Base URL without a trailing slash (and without `dns+`), e.g. `http://10.0.0.5:30000`.
    pub url: String,
    /// `dns+`: one worker per address the URL's host resolves to, re-resolved periodically
    /// (a Kubernetes headless Service's name lists its pods).
    pub discover: bool,
}

impl EngineSpec {
    /// One worker at `url` (no discovery).
    pub fn fixed(kind: EngineKind, url: impl Into<String>) -> Self {
        Self { kind, url: url.into(), discover: false }
    }
}

impl FromStr for EngineSpec {
    type Err = String;
    /// `KIND=URL`, e.g. `sglang=http://10.0.0.5:30000`, or `KIND=dns+URL`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, url) = s.split_once('=').ok_or_else(|| format!("engine `{s}`: expected KIND=URL, e.g. llamacpp=http://127.0.0.1:8080"))?;
        let kind: EngineKind = kind.trim().parse()?;
        let url = url.trim().trim_end_matches('/');
        let (discover, url) = match url.strip_prefix("dns+") {
            Some(rest) => (true, rest),
            None => (false, url),
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() <= "https://".len() {
            return Err(format!("engine `{s}`: the URL must start with http:// or https:// (dns+http:// or dns+https:// to discover workers)"));
        }
        if discover {
            let parsed = reqwest::Url::parse(url).map_err(|e| format!("engine `{s}`: {e}"))?;
            if parsed.host_str().is_none() {
                return Err(format!("engine `{s}`: dns+ needs a host name to resolve"));
            }
        }
        Ok(Self { kind, url: url.to_string(), discover })
    }
}

impl fmt::Display for EngineSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}{}", self.kind, if self.discover { "dns+" } else { "" }, self.url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_is_named_kind_equals_url() {
        let spec: EngineSpec = "llamacpp=http://127.0.0.1:8080/".parse().unwrap();
        assert_eq!(spec, EngineSpec::fixed(EngineKind::LlamaCpp, "http://127.0.0.1:8080"));
        assert_eq!(spec.to_string(), "llamacpp=http://127.0.0.1:8080");
        assert_eq!("SGLang=https://gpu:30000".parse::<EngineSpec>().unwrap().kind, EngineKind::Sglang);
        for bad in ["http://x:1", "tgi=http://x:1", "vllm=x:1", "vllm=http://", "vllm=dns+x:1", "vllm=dns+http://"] {
            assert!(bad.parse::<EngineSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn dns_plus_asks_for_one_worker_per_resolved_address() {
        let spec: EngineSpec = "llamacpp=dns+http://duet-llama.duet.svc:8080/".parse().unwrap();
        assert_eq!(spec, EngineSpec { kind: EngineKind::LlamaCpp, url: "http://duet-llama.duet.svc:8080".into(), discover: true });
        assert_eq!(spec.to_string(), "llamacpp=dns+http://duet-llama.duet.svc:8080");
        assert!(!"llamacpp=http://duet-llama.duet.svc:8080".parse::<EngineSpec>().unwrap().discover, "a plain URL stays one worker");
    }
}
