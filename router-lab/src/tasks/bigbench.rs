//! BIG-bench JSON tasks (from the PyPI sdist `bigbench`, extracted by
//! `deploy/eval/tasks/setup`) as routed chat tasks.
//!
//! A multiple-choice example (`target_scores`) becomes a CommonsenseQA-style question: its
//! choices lettered A, B, … in the file's order, the seed's answer format, and the same answer
//! rule ([`crate::cqa::extract_answer`]); the key is the choice with the highest score. An
//! exact-match example (`target`, one string or several) asks for a short answer ending in
//! "Therefore, the answer is X."; the text after the last "the answer is" is the answer, and
//! it is right when it equals one of the targets, ignoring case, surrounding spaces, quotes
//! and a final full stop. The task's `task_prefix` leads every question. Held-out tasks are
//! refused before their file is opened.

use std::path::Path;

use anyhow::{bail, Context};
use serde::Deserialize;

use super::heldout::bigbench_allowed;
use crate::cqa::Choices;

/// A task file, as far as Duet reads it.
#[derive(Debug, Deserialize)]
struct TaskFile {
    #[serde(default)]
    task_prefix: String,
    #[serde(default)]
    examples: Vec<Example>,
}

#[derive(Debug, Deserialize)]
struct Example {
    input: String,
    #[serde(default)]
    target_scores: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    target: Option<Target>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Target {
    One(String),
    Many(Vec<String>),
}

/// What one example asks.
#[derive(Debug, Clone, PartialEq)]
pub enum Question {
    /// Pick one of `choices`; `key` is the right label.
    Choice {
        /// The question text (task prefix included).
        text: String,
        /// Lettered choices.
        choices: Choices,
        /// The right label.
        key: String,
    },
    /// Answer with one of `targets`.
    Exact {
        /// The question text (task prefix included).
        text: String,
        /// Accepted answers.
        targets: Vec<String>,
    },
}

/// Labels for `n` choices: A, B, …, Z, then AA, AB, … (tasks with more than 26 are rare).
fn label(i: usize) -> String {
    let letters = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    if i < 26 { (letters[i] as char).to_string() } else { format!("{}{}", letters[i / 26 - 1] as char, letters[i % 26] as char) }
}

/// Read task `name` (e.g. `date_understanding`, `logical_deduction/three_objects`) under
/// `root`: its examples in file order, at most `limit`.
pub fn read(root: &Path, name: &str, limit: Option<usize>) -> anyhow::Result<Vec<Question>> {
    bigbench_allowed(name)?;
    let path = root.join(name).join("task.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {} (is `{name}` in deploy/eval/tasks/bigbench-tasks.txt? run deploy/eval/tasks/setup, which needs the bigbench 1.0.0 sdist: BIGBENCH_SDIST=FILE where the package index does not serve it)", path.display()))?;
    let file: TaskFile = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if file.examples.is_empty() {
        bail!("{} has no examples (a task with subtasks: name one, e.g. {name}/<subtask>)", path.display());
    }
    let mut out = Vec::new();
    for ex in file.examples.into_iter().take(limit.unwrap_or(usize::MAX)) {
        out.push(question(&file.task_prefix, ex)?);
    }
    Ok(out)
}

fn question(prefix: &str, ex: Example) -> anyhow::Result<Question> {
    let text = format!("{}{}", prefix, ex.input).trim().to_string();
    if let Some(scores) = ex.target_scores.filter(|s| !s.is_empty()) {
        let mut best = (f64::MIN, 0);
        let mut choices = Choices { label: Vec::new(), text: Vec::new() };
        for (i, (choice, score)) in scores.into_iter().enumerate() {
            let s = score.as_f64().unwrap_or(0.0);
            if s > best.0 {
                best = (s, i);
            }
            choices.label.push(label(i));
            choices.text.push(choice);
        }
        let key = choices.label[best.1].clone();
        return Ok(Question::Choice { text, choices, key });
    }
    let targets = match ex.target {
        Some(Target::One(t)) => vec![t],
        Some(Target::Many(ts)) if !ts.is_empty() => ts,
        _ => bail!("an example has neither target_scores nor target"),
    };
    Ok(Question::Exact { text, targets })
}

/// The user message of an exact-match question.
pub fn exact_prompt(text: &str) -> String {
    format!("{text}\n\nAnswer briefly. End with the sentence \"Therefore, the answer is X.\" where X is only the answer.")
}

/// The answer of an exact-match response: the text after the last "the answer is", without
/// surrounding spaces, quotes, `*` and a final full stop, to the end of its line.
pub fn exact_answer(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let at = lower.rfind("the answer is")? + "the answer is".len();
    let rest = text[at..].lines().next().unwrap_or("");
    let a = rest.trim().trim_start_matches(':').trim().trim_end_matches('.').trim_matches(|c: char| c == '"' || c == '\'' || c == '*' || c == '`').trim();
    (!a.is_empty()).then(|| a.to_string())
}

/// Whether `answer` equals one of `targets` (ignoring case and surrounding spaces).
pub fn exact_correct(answer: &str, targets: &[String]) -> bool {
    targets.iter().any(|t| t.trim().eq_ignore_ascii_case(answer.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_task(dir: &Path, name: &str, body: &str) {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("task.json"), body).unwrap();
    }

    #[test]
    fn a_multiple_choice_example_is_lettered_in_file_order_with_the_best_scored_key() {
        let dir = tempfile::tempdir().unwrap();
        write_task(dir.path(), "t", r#"{"task_prefix": "Q: ", "examples": [{"input": "2+2?", "target_scores": {"3": 0, "4": 1, "5": 0}}]}"#);
        let q = read(dir.path(), "t", None).unwrap();
        let Question::Choice { text, choices, key } = &q[0] else { panic!("{q:?}") };
        assert_eq!(text, "Q: 2+2?");
        assert_eq!(choices.label, ["A", "B", "C"]);
        assert_eq!(choices.text, ["3", "4", "5"]);
        assert_eq!(key, "B");
    }

    #[test]
    fn an_exact_example_takes_one_target_or_several() {
        let dir = tempfile::tempdir().unwrap();
        write_task(dir.path(), "t", r#"{"examples": [{"input": "a", "target": "x"}, {"input": "b", "target": ["three", "3"]}]}"#);
        let q = read(dir.path(), "t", Some(2)).unwrap();
        assert_eq!(q[1], Question::Exact { text: "b".into(), targets: vec!["three".into(), "3".into()] });
        assert_eq!(read(dir.path(), "t", Some(1)).unwrap().len(), 1);
    }

    #[test]
    fn held_out_tasks_are_refused_before_their_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        write_task(dir.path(), "strategyqa", r#"{"examples": [{"input": "a", "target": "x"}]}"#);
        let err = read(dir.path(), "strategyqa", None).unwrap_err();
        assert!(err.to_string().contains("kept back"), "{err}");
    }

    #[test]
    fn the_exact_answer_is_what_follows_the_last_the_answer_is() {
        assert_eq!(exact_answer("I count. Therefore, the answer is 3.").as_deref(), Some("3"));
        assert_eq!(exact_answer("the answer is: \"penguins\".\nMore text").as_deref(), Some("penguins"));
        assert_eq!(exact_answer("Three of them."), None);
        assert!(exact_correct("Three", &["three".into(), "3".into()]));
        assert!(!exact_correct("4", &["three".into(), "3".into()]));
    }

    #[test]
    fn labels_go_past_z() {
        assert_eq!((label(0), label(25), label(26), label(27)), ("A".into(), "Z".into(), "AA".into(), "AB".into()));
    }
}
