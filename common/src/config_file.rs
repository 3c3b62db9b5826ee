//! `--config FILE`: one TOML file for many settings, for both binaries (a device's
//! `/etc/duet/edge.toml`, a gateway's ConfigMap).
//!
//! Keys are the long flag names of the command (or of the subcommand given: `edge-node serve`):
//! `listen = "127.0.0.1:8088"`, `tau = 0.5`, `no-presync = true`, and an array for a flag that
//! repeats (`engine = ["llamacpp=http://a:8080", "llamacpp=http://b:8080"]`); a key that is not
//! a flag is refused by name. Precedence: a flag on the command line, then its `DUET_*`
//! environment variable, then the file, then the default. The file's values become
//! command-line arguments placed before the user's, so clap parses and validates them exactly
//! as it does flags: one definition of every setting, its type and its check.
//!
//! A command whose flags are grouped under help headings (the gateway's) may take its file in
//! sections instead ([`expand_sectioned`]): `[batcher] max-batch = 16`, each section one
//! heading, each key a flag of that heading; an unknown section, or a key of another section,
//! is refused by name. Keys outside any section still work, with a deprecation warning.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{bail, Context};

/// The arguments `argv` stands for once `config` (a TOML file) is applied to `command`, or to
/// the subcommand named in `argv` when `command` has subcommands.
pub fn expand(command: &clap::Command, argv: Vec<OsString>, config: &Path) -> anyhow::Result<Vec<OsString>> {
    expand_table(command, argv, read(config)?, config)
}

/// One section of a sectioned file: its name in the file, and the help heading whose flags it
/// holds.
#[derive(Debug, Clone, Copy)]
pub struct Section {
    /// `[name]` in the file.
    pub name: &'static str,
    /// The help heading of the flags it holds.
    pub heading: &'static str,
}

/// [`expand`] for a file in `sections` (`command` has no subcommands): each `[section]` holds
/// flags of its heading. Returns the arguments and one deprecation warning per key given
/// outside any section.
pub fn expand_sectioned(command: &clap::Command, argv: Vec<OsString>, config: &Path, sections: &[Section]) -> anyhow::Result<(Vec<OsString>, Vec<String>)> {
    let (flat, warnings) = flatten(command, read(config)?, config, sections)?;
    Ok((expand_table(command, argv, flat, config)?, warnings))
}

fn read(config: &Path) -> anyhow::Result<toml::Table> {
    let text = std::fs::read_to_string(config).with_context(|| format!("reading --config {}", config.display()))?;
    text.parse().with_context(|| format!("--config {}: not valid TOML", config.display()))
}

/// The sections' keys as one flat table, each checked against its section's heading; keys
/// outside any section are kept, with a warning naming the section they belong in.
fn flatten(command: &clap::Command, table: toml::Table, config: &Path, sections: &[Section]) -> anyhow::Result<(toml::Table, Vec<String>)> {
    let file = config.display();
    let heading_of = |key: &str| command.get_arguments().find(|a| a.get_long() == Some(key)).map(|a| a.get_help_heading());
    let section_of = |heading: Option<&str>| sections.iter().find(|s| Some(s.heading) == heading).map(|s| s.name);
    let names: Vec<&str> = sections.iter().map(|s| s.name).collect();
    let mut flat = toml::Table::new();
    let mut warnings = Vec::new();
    for (key, value) in table {
        let toml::Value::Table(inner) = value else {
            if let Some(Some(section)) = heading_of(&key).map(section_of) {
                warnings.push(format!("--config {file}: `{key}` outside a section is deprecated (it will be refused in the next release): put it under [{section}]"));
            }
            insert(&mut flat, key, value, config)?;
            continue;
        };
        let Some(section) = sections.iter().find(|s| s.name == key) else {
            bail!("--config {file}: unknown section [{key}] (known: {})", names.join(", "));
        };
        for (k, v) in inner {
            match heading_of(&k) {
                Some(h) if h == Some(section.heading) => insert(&mut flat, k, v, config)?,
                Some(h) if section_of(h).is_some() => bail!("--config {file}: `{k}` belongs in [{}], not [{key}]", section_of(h).unwrap_or_default()),
                _ => {
                    let known: Vec<&str> = command.get_arguments().filter(|a| a.get_help_heading() == Some(section.heading)).filter_map(|a| a.get_long()).collect();
                    bail!("--config {file}: unknown key `{k}` in [{key}] (known: {})", known.join(", "));
                }
            }
        }
    }
    Ok((flat, warnings))
}

fn insert(flat: &mut toml::Table, key: String, value: toml::Value, config: &Path) -> anyhow::Result<()> {
    if flat.contains_key(&key) {
        bail!("--config {}: `{key}` is given twice (in a section and outside one)", config.display());
    }
    flat.insert(key, value);
    Ok(())
}

/// [`expand`] with the file already read into `table`.
fn expand_table(command: &clap::Command, argv: Vec<OsString>, table: toml::Table, config: &Path) -> anyhow::Result<Vec<OsString>> {
    let (at, target, name) = if command.has_subcommands() {
        let Some(at) = argv.iter().skip(1).position(|a| command.find_subcommand(a).is_some()).map(|i| i + 1) else {
            bail!("--config needs a subcommand (serve, generate, ...)");
        };
        let name = argv[at].to_string_lossy().to_string();
        (at, command.find_subcommand(&name).context("subcommand")?, name)
    } else {
        (0, command, command.get_name().to_string())
    };
    let given: Vec<String> = argv[at + 1..].iter().map(|a| a.to_string_lossy().to_string()).collect();
    let mut extra: Vec<OsString> = Vec::new();
    for (key, value) in &table {
        let Some(arg) = target.get_arguments().find(|a| a.get_long() == Some(key.as_str())) else {
            let known: Vec<&str> = target.get_arguments().filter_map(|a| a.get_long()).filter(|l| *l != "help" && *l != "config" && *l != "version").collect();
            bail!("--config {}: unknown key `{key}` for `{name}` (known: {})", config.display(), known.join(", "));
        };
        let on_command_line = given.iter().any(|g| g == &format!("--{key}") || g.starts_with(&format!("--{key}=")));
        let in_env = arg.get_env().is_some_and(|e| std::env::var_os(e).is_some());
        if on_command_line || in_env {
            continue;
        }
        let repeats = matches!(arg.get_action(), clap::ArgAction::Append);
        match value {
            toml::Value::Array(items) if repeats => {
                for item in items {
                    extra.push(flag(key, item).ok_or_else(|| anyhow::anyhow!("--config {}: `{key}` must hold strings or numbers", config.display()))?);
                }
            }
            toml::Value::Boolean(true) => extra.push(format!("--{key}").into()),
            toml::Value::Boolean(false) => {}
            other => match flag(key, other) {
                Some(f) => extra.push(f),
                None => bail!("--config {}: `{key}` must be a string, number or boolean, not {}", config.display(), other.type_str()),
            },
        }
    }
    let mut out = argv[..=at].to_vec();
    out.extend(extra);
    out.extend_from_slice(&argv[at + 1..]);
    Ok(out)
}

/// `--key=value` for a scalar TOML value.
fn flag(key: &str, value: &toml::Value) -> Option<OsString> {
    let v = match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        _ => return None,
    };
    Some(format!("--{key}={v}").into())
}

/// Whether `DUET_PARSE_ONLY=1` is set: the binaries (`edge-node`, `cloud-gateway`, `loadtest`,
/// `router-lab`) then parse their whole command line, subcommand included, and exit 0 without
/// doing anything or printing anything (a bad flag still fails as usual). `deploy/check/docs-drift`
/// runs every command the documentation quotes this way.
pub fn parse_only() -> bool {
    std::env::var_os("DUET_PARSE_ONLY").is_some_and(|v| v == "1")
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

    #[derive(Debug, Parser)]
    #[command(name = "gw")]
    struct Flat {
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        #[arg(long = "engine", value_delimiter = ',')]
        engines: Vec<String>,
        #[arg(long, default_value_t = 1)]
        max_batch: u32,
    }

    #[test]
    fn a_command_without_subcommands_takes_its_own_flags_and_arrays_for_repeated_ones() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("gateway.toml");
        std::fs::write(&f, "engine = [\"a\", \"b\"]\nmax-batch = 8\n").unwrap();
        let parsed = Flat::parse_from(strip(expand(&Flat::command(), args(&["gw", "--config", "x"]), &f).unwrap()));
        assert_eq!((parsed.engines, parsed.max_batch), (vec!["a".to_string(), "b".to_string()], 8));
        std::fs::write(&f, "max-batch = [8]\n").unwrap();
        let err = expand(&Flat::command(), args(&["gw"]), &f).unwrap_err().to_string();
        assert!(err.contains("`max-batch` must be a string, number or boolean"), "{err}");
        std::fs::write(&f, "max_batch = 8\n").unwrap();
        let err = expand(&Flat::command(), args(&["gw"]), &f).unwrap_err().to_string();
        assert!(err.contains("unknown key `max_batch` for `gw`") && err.contains("max-batch"), "{err}");
    }

    #[derive(Debug, Parser)]
    #[command(name = "gw")]
    struct Grouped {
        #[command(flatten)]
        batcher: BatcherGroup,
        #[command(flatten)]
        engines: EnginesGroup,
    }

    #[derive(Debug, clap::Args)]
    #[command(next_help_heading = "Batcher")]
    struct BatcherGroup {
        #[arg(long, default_value_t = 1)]
        max_batch: u32,
    }

    #[derive(Debug, clap::Args)]
    #[command(next_help_heading = "Engines")]
    struct EnginesGroup {
        #[arg(long = "engine", value_delimiter = ',')]
        engines: Vec<String>,
    }

    const SECTIONS: &[Section] = &[Section { name: "batcher", heading: "Batcher" }, Section { name: "engines", heading: "Engines" }];

    fn sectioned(text: &str) -> anyhow::Result<(Grouped, Vec<String>)> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("gateway.toml");
        std::fs::write(&f, text).unwrap();
        let (argv, warnings) = expand_sectioned(&Grouped::command(), args(&["gw"]), &f, SECTIONS)?;
        Ok((Grouped::parse_from(strip(argv)), warnings))
    }

    #[test]
    fn a_sectioned_file_sets_each_sections_flags_and_refuses_unknown_sections_and_misplaced_keys_by_name() {
        let (g, warnings) = sectioned("[batcher]\nmax-batch = 8\n[engines]\nengine = [\"a\", \"b\"]\n").unwrap();
        assert_eq!((g.batcher.max_batch, g.engines.engines.len(), warnings.len()), (8, 2, 0));
        let err = sectioned("[batchr]\nmax-batch = 8\n").unwrap_err().to_string();
        assert!(err.contains("unknown section [batchr]") && err.contains("batcher, engines"), "{err}");
        let err = sectioned("[engines]\nmax-batch = 8\n").unwrap_err().to_string();
        assert!(err.contains("`max-batch` belongs in [batcher], not [engines]"), "{err}");
        let err = sectioned("[batcher]\nmax-btch = 8\n").unwrap_err().to_string();
        assert!(err.contains("unknown key `max-btch` in [batcher]") && err.contains("max-batch"), "{err}");
    }

    #[test]
    fn a_flat_key_still_works_with_a_warning_naming_its_section() {
        let (g, warnings) = sectioned("max-batch = 4\n").unwrap();
        assert_eq!(g.batcher.max_batch, 4);
        assert!(warnings.len() == 1 && warnings[0].contains("put it under [batcher]"), "{warnings:?}");
        let err = sectioned("max-batch = 4\n[batcher]\nmax-batch = 5\n").unwrap_err().to_string();
        assert!(err.contains("`max-batch` is given twice"), "{err}");
        assert!(sectioned("nonsense = 4\n").unwrap_err().to_string().contains("unknown key `nonsense`"));
    }
}
