//! `--config FILE`: one TOML file for many settings (a device's `/etc/duet/edge.toml`).
//!
//! Keys are the subcommand's long flag names (`listen = "127.0.0.1:8088"`, `gateway = "..."`,
//! `tau = 0.5`, `no-presync = true`); a key that is not a flag of that subcommand is refused by
//! name. Precedence: a flag on the command line, then its `DUET_*` environment variable, then
//! the file, then the default. The file's values become command-line arguments placed before
//! the user's, so clap parses and validates them exactly as it does flags.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{bail, Context};

/// The arguments `argv` stands for once `config` (a TOML file) is applied to `subcommand`.
pub fn expand(command: &clap::Command, argv: Vec<OsString>, config: &Path) -> anyhow::Result<Vec<OsString>> {
    let text = std::fs::read_to_string(config).with_context(|| format!("reading --config {}", config.display()))?;
    let table: toml::Table = text.parse().with_context(|| format!("--config {}: not valid TOML", config.display()))?;
    let Some(sub_at) = argv.iter().skip(1).position(|a| command.find_subcommand(a).is_some()).map(|i| i + 1) else {
        bail!("--config needs a subcommand (serve, generate, ...)");
    };
    let sub_name = argv[sub_at].to_string_lossy().to_string();
    let sub = command.find_subcommand(&sub_name).context("subcommand")?;
    let given: Vec<String> = argv[sub_at + 1..].iter().map(|a| a.to_string_lossy().to_string()).collect();
    let mut extra: Vec<OsString> = Vec::new();
    for (key, value) in &table {
        let Some(arg) = sub.get_arguments().find(|a| a.get_long() == Some(key.as_str())) else {
            let known: Vec<&str> = sub.get_arguments().filter_map(|a| a.get_long()).filter(|l| *l != "help" && *l != "config").collect();
            bail!("--config {}: unknown key `{key}` for `{sub_name}` (known: {})", config.display(), known.join(", "));
        };
        let on_command_line = given.iter().any(|g| g == &format!("--{key}") || g.starts_with(&format!("--{key}=")));
        let in_env = arg.get_env().is_some_and(|e| std::env::var_os(e).is_some());
        if on_command_line || in_env {
            continue;
        }
        match value {
            toml::Value::Boolean(true) => extra.push(format!("--{key}").into()),
            toml::Value::Boolean(false) => {}
            toml::Value::String(s) => extra.push(format!("--{key}={s}").into()),
            toml::Value::Integer(i) => extra.push(format!("--{key}={i}").into()),
            toml::Value::Float(f) => extra.push(format!("--{key}={f}").into()),
            other => bail!("--config {}: `{key}` must be a string, number or boolean, not {}", config.display(), other.type_str()),
        }
    }
    let mut out = argv[..=sub_at].to_vec();
    out.extend(extra);
    out.extend_from_slice(&argv[sub_at + 1..]);
    Ok(out)
}

/// The `--config` value in `argv` (or `DUET_CONFIG`), before clap parses anything.
pub fn find(argv: &[OsString]) -> Option<std::path::PathBuf> {
    let mut it = argv.iter().map(|a| a.to_string_lossy().to_string());
    while let Some(a) = it.next() {
        if a == "--config" {
            return it.next().map(Into::into);
        }
        if let Some(v) = a.strip_prefix("--config=") {
            return Some(v.into());
        }
    }
    std::env::var_os("DUET_CONFIG").filter(|v| !v.is_empty()).map(Into::into)
}

/// `argv` without `--config FILE` (it has been applied).
pub fn strip(argv: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(argv.len());
    let mut skip = false;
    for a in argv {
        if skip {
            skip = false;
            continue;
        }
        let s = a.to_string_lossy();
        if s == "--config" {
            skip = true;
            continue;
        }
        if s.starts_with("--config=") {
            continue;
        }
        out.push(a);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct Cli {
        #[arg(long, global = true)]
        config: Option<std::path::PathBuf>,
        #[command(subcommand)]
        cmd: Sub,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Sub {
        Serve {
            #[arg(long, default_value = "a")]
            listen: String,
            #[arg(long, env = "DUET_TEST_CONFIG_TAU", default_value_t = 0.5)]
            tau: f32,
            #[arg(long)]
            quiet: bool,
        },
    }

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn file_values_apply_below_the_command_line_and_unknown_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("edge.toml");
        std::fs::write(&f, "listen = \"0.0.0.0:1\"\ntau = 0.25\nquiet = true\n").unwrap();
        let argv = strip(expand(&Cli::command(), args(&["x", "serve", "--listen", "cli"]), &f).unwrap());
        let Sub::Serve { listen, tau, quiet } = Cli::parse_from(argv).cmd;
        assert_eq!((listen.as_str(), tau, quiet), ("cli", 0.25, true));
        std::fs::write(&f, "lisen = \"x\"\n").unwrap();
        let err = expand(&Cli::command(), args(&["x", "serve"]), &f).unwrap_err().to_string();
        assert!(err.contains("unknown key `lisen`") && err.contains("listen"), "{err}");
        std::fs::write(&f, "tau = [1]\n").unwrap();
        assert!(expand(&Cli::command(), args(&["x", "serve"]), &f).is_err());
        assert_eq!(find(&args(&["x", "--config", "f.toml", "serve"])), Some("f.toml".into()));
        assert_eq!(strip(args(&["x", "--config=f", "serve"])), args(&["x", "serve"]));
    }
}
