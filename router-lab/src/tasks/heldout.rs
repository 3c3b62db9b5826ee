//! Items kept back for independent checks: never trained on, tuned on or run by Duet's tools.
//!
//! HumanEval problems 82–163 and the BIG-bench tasks `social_iqa` and `strategyqa` are held
//! out so that someone else can check the router on data it has never touched. The rule is
//! enforced where items are read (every task reader calls these), not left to the commands'
//! options, so no `--limit`, `--offset` or task name can reach them.

/// First HumanEval problem number kept back (problems `HumanEval/82` and after).
pub const FIRST_HELD_OUT_HUMANEVAL: usize = 82;

/// BIG-bench tasks kept back, by name (a subtask path starting with one counts too).
pub const HELD_OUT_BIGBENCH: [&str; 2] = ["social_iqa", "strategyqa"];

/// Why an item or task may not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldOut {
    /// A HumanEval problem at or after [`FIRST_HELD_OUT_HUMANEVAL`].
    HumanEval(usize),
    /// A held-out BIG-bench task.
    BigBench(String),
    /// A HumanEval task id that is not `HumanEval/<n>`.
    BadId(String),
}

impl std::fmt::Display for HeldOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::HumanEval(n) => write!(f, "HumanEval/{n} is kept back for independent checks (only problems 0-81 may be used)"),
            Self::BigBench(t) => write!(f, "BIG-bench task `{t}` is kept back for independent checks"),
            Self::BadId(id) => write!(f, "`{id}` is not a HumanEval task id (HumanEval/<n>)"),
        }
    }
}

impl std::error::Error for HeldOut {}

/// The problem number of `task_id` if it may be used.
pub fn humaneval_allowed(task_id: &str) -> Result<usize, HeldOut> {
    let n = task_id.strip_prefix("HumanEval/").and_then(|n| n.parse::<usize>().ok()).ok_or_else(|| HeldOut::BadId(task_id.to_string()))?;
    if n >= FIRST_HELD_OUT_HUMANEVAL {
        return Err(HeldOut::HumanEval(n));
    }
    Ok(n)
}

/// `Ok` if the BIG-bench task (or subtask path such as `logical_deduction/three_objects`) may
/// be used.
pub fn bigbench_allowed(task: &str) -> Result<(), HeldOut> {
    let top = task.trim_matches('/').split('/').next().unwrap_or("").to_ascii_lowercase();
    if HELD_OUT_BIGBENCH.iter().any(|h| top == *h) {
        return Err(HeldOut::BigBench(task.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humaneval_problems_from_82_on_are_refused() {
        assert_eq!(humaneval_allowed("HumanEval/0"), Ok(0));
        assert_eq!(humaneval_allowed("HumanEval/81"), Ok(81));
        assert_eq!(humaneval_allowed("HumanEval/82"), Err(HeldOut::HumanEval(82)));
        assert_eq!(humaneval_allowed("HumanEval/163"), Err(HeldOut::HumanEval(163)));
        assert!(matches!(humaneval_allowed("HumanEval/x"), Err(HeldOut::BadId(_))));
        assert!(matches!(humaneval_allowed("MBPP/1"), Err(HeldOut::BadId(_))));
    }

    #[test]
    fn the_held_out_bigbench_tasks_are_refused_by_any_spelling() {
        assert!(bigbench_allowed("date_understanding").is_ok());
        assert!(bigbench_allowed("logical_deduction/three_objects").is_ok());
        for t in ["social_iqa", "strategyqa", "Social_IQA", "strategyqa/sub", "/social_iqa/"] {
            assert!(bigbench_allowed(t).is_err(), "{t}");
        }
    }
}
