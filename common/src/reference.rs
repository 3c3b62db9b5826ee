//! Reference pages generated from a binary's own command-line definition, so that they cannot
//! drift from what the binary accepts: a man page per command and subcommand (`clap_mangen`),
//! shell completions for bash, zsh and fish (`clap_complete`), and one Markdown page listing
//! every flag with its `DUET_*` environment twin, its default, its `--config` key and its
//! meaning (the flag's own doc comment).
//!
//! A binary writes them, and does nothing else, when `DUET_WRITE_REFERENCE` names a folder
//! ([`requested`]); `deploy/docs/reference` runs the four binaries that way into
//! `docs/src/reference/`, and the test suite regenerates them and fails on any difference from
//! what is committed. Defaults that depend on the machine (a home folder, the core count) are
//! rendered as the binary computes them under `deploy/docs/reference`'s fixed environment.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Arg, Command};

use crate::config_file::Section;

/// The environment variable that asks a binary to write its reference pages into a folder.
pub const ENV: &str = "DUET_WRITE_REFERENCE";

/// The folder `DUET_WRITE_REFERENCE` names, if set and not empty.
pub fn requested() -> Option<PathBuf> {
    std::env::var_os(ENV).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Write `command`'s reference pages under `dir`: `man/<name>[-<sub>].1`,
/// `completions/<name>.{bash,zsh,fish}` and `cli/<name>.md`. `sections` maps help headings to
/// the `[section]` tables of a sectioned `--config` file (empty: the file's keys are the flags'
/// long names, as for `edge-node`).
pub fn write(command: Command, sections: &[Section], dir: &Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let name = command.get_name().to_string();
    write_pages(command, sections, dir).with_context(|| format!("{ENV}: writing {name}'s reference pages into {}", dir.display()))
}

fn write_pages(command: Command, sections: &[Section], dir: &Path) -> anyhow::Result<()> {
    let name = command.get_name().to_string();
    let (man, completions, cli) = (dir.join("man"), dir.join("completions"), dir.join("cli"));
    for d in [&man, &completions, &cli] {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(cli.join(format!("{name}.md")), markdown(&command, sections))?;
    clap_mangen::generate_to(command.clone(), &man)?;
    for (shell, ext) in [(clap_complete::Shell::Bash, "bash"), (clap_complete::Shell::Zsh, "zsh"), (clap_complete::Shell::Fish, "fish")] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut command.clone(), &name, &mut buf);
        std::fs::write(completions.join(format!("{name}.{ext}")), buf)?;
    }
    Ok(())
}

/// The Markdown reference of `command` and its subcommands: one table of flags per help
/// heading, in the order `--help` shows them.
pub fn markdown(command: &Command, sections: &[Section]) -> String {
    let mut out = format!("# `{}`\n\n", command.get_name());
    out.push_str("Generated from the binary's command-line definition (`deploy/docs/reference`). A flag with an\n");
    out.push_str("environment variable is also read from it; where the binary takes `--config FILE`, from that TOML\n");
    out.push_str("file too (flags and variables override the file).\n\n");
    describe(&mut out, command, command.get_name(), &[], sections, 1);
    out
}

/// Append `command` (reached as `path`, its own title at heading `level`) and its subcommands
/// to `out`.
/// `inherited` are the global flags of the commands above it, listed once where they are defined.
fn describe(out: &mut String, command: &Command, path: &str, inherited: &[&str], sections: &[Section], level: usize) {
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        let _ = writeln!(out, "{}\n", sentence(about.to_string().trim()));
    }
    let args: Vec<&Arg> = command.get_arguments().filter(|a| !a.is_hide_set() && !inherited.contains(&a.get_id().as_str())).collect();
    let mut headings: Vec<Option<&str>> = Vec::new();
    for a in &args {
        if !headings.contains(&a.get_help_heading()) {
            headings.push(a.get_help_heading());
        }
    }
    for heading in headings {
        if let Some(h) = heading {
            let section = sections.iter().find(|s| s.heading == h).map(|s| format!(" (`[{}]` in `--config`)", s.name)).unwrap_or_default();
            let _ = writeln!(out, "{} {h}{section}\n", "#".repeat(level + 1));
        }
        out.push_str("| Flag | Environment | Default | Meaning |\n|---|---|---|---|\n");
        for a in args.iter().filter(|a| a.get_help_heading() == heading) {
            out.push_str(&row(a));
        }
        out.push('\n');
    }
    let globals: Vec<&str> = inherited.iter().copied().chain(command.get_arguments().filter(|a| a.is_global_set()).map(|a| a.get_id().as_str())).collect();
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub_path = format!("{path} {}", sub.get_name());
        let _ = writeln!(out, "{} `{sub_path}`\n", "#".repeat(level + 1));
        describe(out, sub, &sub_path, &globals, &[], level + 1);
    }
}

/// One table row: the flag as typed, its environment twin, its default and its meaning.
fn row(arg: &Arg) -> String {
    let value = arg.get_value_names().map(|names| names.iter().map(|n| format!(" <{n}>")).collect::<String>());
    let takes_value = arg.get_action().takes_values();
    let value = if takes_value { value.unwrap_or_else(|| format!(" <{}>", arg.get_id().as_str().to_uppercase())) } else { String::new() };
    let flag = match (arg.get_long(), arg.get_short()) {
        (Some(long), _) => format!("`--{long}{value}`"),
        (None, Some(short)) => format!("`-{short}{value}`"),
        (None, None) => format!("`<{}>`", arg.get_id().as_str().to_uppercase()),
    };
    let env = arg.get_env().map(|e| format!("`{}`", e.to_string_lossy())).unwrap_or_default();
    let defaults: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().to_string()).collect();
    let default = if defaults.is_empty() { String::new() } else { format!("`{}`", defaults.join(",")) };
    let mut meaning = sentence(arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default().trim());
    let choices: Vec<String> = arg.get_possible_values().iter().filter(|p| !p.is_hide_set()).map(|p| format!("`{}`", p.get_name())).collect();
    if !choices.is_empty() && takes_value {
        let _ = write!(meaning, " One of: {}.", choices.join(", "));
    }
    format!("| {flag} | {env} | {default} | {} |\n", cell(&meaning))
}

/// `text` ending as a sentence: clap drops the period of a one-line doc comment.
fn sentence(text: &str) -> String {
    match text.chars().last() {
        Some(c) if c.is_alphanumeric() || c == '`' || c == ')' => format!("{text}."),
        _ => text.to_string(),
    }
}

/// Text made fit for one table cell: one line, pipes escaped, and `<`/`>` outside code spans
/// written as entities (a help text's `<slm>` is a placeholder, not an HTML tag).
fn cell(text: &str) -> String {
    let joined = text.split('\n').map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(joined.len());
    let mut in_code = false;
    for c in joined.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '|' => out.push_str("\\|"),
            '<' if !in_code => out.push_str("&lt;"),
            '>' if !in_code => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, CommandFactory, Parser, Subcommand};

    #[derive(Parser)]
    #[command(name = "tool", about = "A tool.")]
    struct Cli {
        /// Log filter.
        #[arg(long, global = true, env = "DUET_LOG", default_value = "warn")]
        log: String,
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(Subcommand)]
    enum Sub {
        /// Run it.
        Run(RunArgs),
    }

    #[derive(Args)]
    #[command(next_help_heading = "Batcher")]
    struct RunArgs {
        /// Rows per batch,
        /// at most.
        #[arg(long, env = "DUET_MAX_BATCH", default_value_t = 16)]
        max_batch: usize,
        /// Fair | plain, per <device> or `<slm>`.
        #[arg(long)]
        fast: bool,
    }

    #[test]
    fn every_flag_is_a_row_with_its_environment_twin_default_and_one_line_meaning() {
        let md = markdown(&Cli::command(), &[]);
        assert!(md.contains("| `--log <LOG>` | `DUET_LOG` | `warn` | Log filter. |"), "{md}");
        assert!(md.contains("| `--max-batch <MAX_BATCH>` | `DUET_MAX_BATCH` | `16` | Rows per batch, at most. |"), "{md}");
        assert!(md.contains("| `--fast` |  |  | Fair \\| plain, per &lt;device&gt; or `<slm>`. |"), "{md}");
    }

    #[test]
    fn a_global_flag_is_listed_once_where_it_is_defined_and_subcommands_get_their_own_heading() {
        let md = markdown(&Cli::command(), &[]);
        assert_eq!(md.matches("`--log").count(), 1, "{md}");
        assert!(md.contains("## `tool run`\n\nRun it.\n\n### Batcher\n"), "{md}");
    }

    #[test]
    fn a_heading_that_is_a_config_section_names_its_table() {
        let sections = [Section { name: "batcher", heading: "Batcher" }];
        let md = markdown(&RunArgs::augment_args(clap::Command::new("gw")), &sections);
        assert!(md.contains("## Batcher (`[batcher]` in `--config`)"), "{md}");
    }

    #[test]
    fn the_pages_are_written_for_every_subcommand_and_shell() {
        let dir = tempfile::tempdir().unwrap();
        write(Cli::command(), &[], dir.path()).unwrap();
        for file in ["man/tool.1", "man/tool-run.1", "completions/tool.bash", "completions/tool.zsh", "completions/tool.fish", "cli/tool.md"] {
            assert!(dir.path().join(file).is_file(), "{file}");
        }
    }
}
