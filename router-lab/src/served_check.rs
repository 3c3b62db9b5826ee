//! The rule `check-served` applies: a served text equals the position-by-position reference
//! (the decode loop that asks the LLM about one position at a time) when every token the LLM
//! chose or accepted is the LLM's greedy choice given the tokens before it, and every other
//! token is the SLM's. Both models are greedy, so a text that passes at every position is the
//! text the reference loop writes, token for token.
//!
//! Pure: the models' choices come in as [`PromptChoice`]s (computed by teacher forcing, one
//! step per position), so the rule is tested without a model.

use engine_client::PromptChoice;
use serde::Serialize;

use crate::served_tokens::ServedTokens;

/// How a served token compares with the reference model's choice at its position.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum Verdict {
    /// The model's greedy choice.
    Agree,
    /// The model's second choice, within `margin` nats of its first: two kernels that sum in
    /// another order may pick either.
    NearTie {
        /// Best minus served log-probability (nats).
        margin: f32,
    },
    /// Neither: the served system committed a token the model would not have.
    Differ,
}

/// Judge `served` against `choice`, with ties up to `tie_nats`.
pub fn judge(choice: &PromptChoice, served: u32, tie_nats: f32) -> Verdict {
    if choice.best.id == served {
        return Verdict::Agree;
    }
    match (choice.runner_up, choice.best.logprob) {
        (Some(second), Some(best)) if second.id == served => match second.logprob.map(|l| best - l) {
            Some(margin) if margin <= tie_nats => Verdict::NearTie { margin },
            _ => Verdict::Differ,
        },
        _ => Verdict::Differ,
    }
}

/// Counts of one kind of position.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Positions {
    /// Positions judged.
    pub judged: usize,
    /// Of those, the model's choice.
    pub agree: usize,
    /// Near-ties ([`Verdict::NearTie`]).
    pub near_tie: usize,
    /// Real differences ([`Verdict::Differ`]).
    pub differ: usize,
}

impl Positions {
    fn count(&mut self, v: Verdict) {
        self.judged += 1;
        match v {
            Verdict::Agree => self.agree += 1,
            Verdict::NearTie { .. } => self.near_tie += 1,
            Verdict::Differ => self.differ += 1,
        }
    }

    fn add(&mut self, o: Positions) {
        self.judged += o.judged;
        self.agree += o.agree;
        self.near_tie += o.near_tie;
        self.differ += o.differ;
    }
}

/// A position where the served token is not the reference model's choice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    /// The item.
    pub item: String,
    /// Answer position (0 = the first generated token).
    pub position: usize,
    /// Where the served token came from (`c`, `s` or `f`, as in `served-tokens.jsonl`).
    pub source: char,
    /// The served token.
    pub served: u32,
    /// The reference model's choice there.
    pub reference: u32,
    /// How it compares.
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// One item's check.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ItemCheck {
    /// Positions the LLM chose or accepted (`c`), judged against the LLM.
    pub llm: Positions,
    /// Positions of the SLM's own tokens (`s` and `f`), judged against the SLM.
    pub slm: Positions,
    /// Every position that is not a plain agreement, in order.
    pub differences: Vec<Difference>,
}

impl ItemCheck {
    /// Whether the served text is the reference's, token for token.
    pub fn equal(&self) -> bool {
        self.differences.is_empty()
    }

    /// Whether it is, counting near-ties as equal.
    pub fn equal_up_to_ties(&self) -> bool {
        self.differences.iter().all(|d| d.verdict != Verdict::Differ)
    }
}

/// Check `item` against both models' choices at each of its answer positions (an error when
/// they do not cover exactly its answer).
pub fn check_item(item: &ServedTokens, llm: &[PromptChoice], slm: &[PromptChoice], tie_nats: f32) -> anyhow::Result<ItemCheck> {
    anyhow::ensure!(
        llm.len() == item.tokens.len() && slm.len() == item.tokens.len(),
        "item {}: {} answer tokens but {} LLM and {} SLM choices",
        item.id,
        item.tokens.len(),
        llm.len(),
        slm.len()
    );
    let mut check = ItemCheck::default();
    for (position, ((&served, source), (l, s))) in item.tokens.iter().zip(item.sources.chars()).zip(llm.iter().zip(slm)).enumerate() {
        let (choice, counts) = if source == 'c' { (l, &mut check.llm) } else { (s, &mut check.slm) };
        let verdict = judge(choice, served, tie_nats);
        counts.count(verdict);
        if verdict != Verdict::Agree {
            check.differences.push(Difference { item: item.id.clone(), position, source, served, reference: choice.best.id, verdict });
        }
    }
    Ok(check)
}

/// Totals over many items.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Items checked.
    pub items: usize,
    /// Items whose served text is the reference's, token for token.
    pub items_equal: usize,
    /// Items equal but for near-ties.
    pub items_equal_up_to_ties: usize,
    /// LLM positions over all items.
    pub llm: Positions,
    /// SLM positions over all items.
    pub slm: Positions,
}

impl Totals {
    /// Count one item.
    pub fn add(&mut self, c: &ItemCheck) {
        self.items += 1;
        self.items_equal += usize::from(c.equal());
        self.items_equal_up_to_ties += usize::from(c.equal_up_to_ties());
        self.llm.add(c.llm);
        self.slm.add(c.slm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine_client::EngineToken;

    fn choice(best: u32, second: u32, margin: f32) -> PromptChoice {
        PromptChoice { best: EngineToken { id: best, logprob: Some(-0.5) }, runner_up: Some(EngineToken { id: second, logprob: Some(-0.5 - margin) }) }
    }

    fn item(tokens: &[u32], sources: &str) -> ServedTokens {
        ServedTokens { id: "i".into(), prompt: vec![1], tokens: tokens.to_vec(), sources: sources.into() }
    }

    #[test]
    fn the_models_choice_agrees_its_close_second_is_a_near_tie_and_anything_else_differs() {
        assert_eq!(judge(&choice(5, 6, 0.03125), 5, 0.05), Verdict::Agree);
        assert_eq!(judge(&choice(5, 6, 0.03125), 6, 0.05), Verdict::NearTie { margin: 0.03125 });
        assert_eq!(judge(&choice(5, 6, 0.5), 6, 0.05), Verdict::Differ, "a clear second is a difference");
        assert_eq!(judge(&choice(5, 6, 0.03125), 7, 0.05), Verdict::Differ);
        let no_runner_up = PromptChoice { best: EngineToken { id: 5, logprob: Some(-0.1) }, runner_up: None };
        assert_eq!(judge(&no_runner_up, 6, 0.05), Verdict::Differ);
    }

    #[test]
    fn llm_positions_are_judged_against_the_llm_and_the_others_against_the_slm() {
        // The LLM and SLM disagree at every position; the served tokens follow each source.
        let llm = [choice(10, 0, 1.0), choice(11, 0, 1.0), choice(12, 0, 1.0), choice(13, 0, 1.0)];
        let slm = [choice(20, 0, 1.0), choice(21, 0, 1.0), choice(22, 0, 1.0), choice(23, 0, 1.0)];
        let c = check_item(&item(&[20, 11, 12, 23], "sccf"), &llm, &slm, 0.05).unwrap();
        assert!(c.equal());
        assert_eq!((c.llm.agree, c.slm.agree), (2, 2));
    }

    #[test]
    fn a_cloud_token_the_llm_would_not_choose_is_a_difference_at_its_position() {
        let llm = [choice(10, 0, 1.0), choice(11, 30, 0.03125), choice(12, 0, 1.0)];
        let slm = [choice(20, 0, 1.0), choice(21, 0, 1.0), choice(22, 0, 1.0)];
        let c = check_item(&item(&[10, 30, 12], "ccc"), &llm, &slm, 0.05).unwrap();
        assert!(!c.equal() && c.equal_up_to_ties(), "position 1 is a near-tie");
        let c = check_item(&item(&[10, 11, 22], "ccc"), &llm, &slm, 0.05).unwrap();
        assert_eq!(c.differences.iter().map(|d| (d.position, d.source, d.verdict)).collect::<Vec<_>>(), vec![(2, 'c', Verdict::Differ)]);
        let mut totals = Totals::default();
        totals.add(&c);
        assert_eq!((totals.items, totals.items_equal, totals.items_equal_up_to_ties, totals.llm.differ), (1, 0, 0, 1));
    }

    #[test]
    fn choices_that_do_not_cover_the_answer_are_refused() {
        let one = [choice(1, 0, 1.0)];
        assert!(check_item(&item(&[1, 2], "ss"), &one, &one, 0.05).is_err());
    }
}
