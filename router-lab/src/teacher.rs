//! The LLM as the router lab's teacher: its greedy choice at every position of token
//! sequences, from the in-process ONNX LLM or from the LLM an engine serves
//! (`--llm-engine KIND=URL`), behind one interface ([`Teacher`]) so that labelling does not
//! care which.
//!
//! Why an engine: the router learns where the LLM's token beats the SLM's, so its labels should
//! come from the LLM the gateway will serve, and a deployment's LLM (a 32B on SGLang or vLLM)
//! does not run in this process. The engine side is `engine_llm`, over the gateway's own
//! engine dialects and client (one mapping per engine in the workspace).
//!
//! The in-process teacher runs rows in lockstep batches: the ONNX graphs give logits for the
//! last position only, so teacher forcing is one decode step per position, and a batched step
//! costs less than one step per row.

use anyhow::Context;
use engine_client::{EngineToken, PromptChoice};
use common::sampling::argmax;
use model_runtime::{CausalLm, KvCache, StepOutput};

use crate::engine_llm::EngineLlm;

/// One sequence to teacher-force: its tokens, and the first position whose choice is wanted.
pub type TeacherRow<'a> = (&'a [u32], usize);

/// The LLM's greedy choices at given positions of token sequences.
pub trait Teacher {
    /// The LLM's id, as labels files and evaluation configs record it.
    fn id(&self) -> &str;

    /// For each row `(tokens, first)`: the LLM's choice at every position of `tokens` from
    /// `max(first, 1)` on, each given the tokens before it (`tokens.len() - first` choices),
    /// with the second-best token when `runner_up`.
    fn choices(&mut self, rows: &[TeacherRow<'_>], runner_up: bool) -> anyhow::Result<Vec<Vec<PromptChoice>>>;
}

/// The LLM the lab runs: in-process, or served by an engine.
pub enum Llm {
    /// The ONNX LLM in this process (boxed: it holds the ONNX sessions).
    InProcess(Box<CausalLm>),
    /// The LLM an engine serves.
    Engine(EngineLlm),
}

impl Llm {
    /// Its id (see [`Teacher::id`]).
    pub fn id(&self) -> &str {
        match self {
            Llm::InProcess(lm) => Teacher::id(lm.as_ref()),
            Llm::Engine(e) => e.id(),
        }
    }

    /// It as a teacher.
    pub fn teacher(&mut self) -> &mut dyn Teacher {
        match self {
            Llm::InProcess(lm) => lm.as_mut(),
            Llm::Engine(e) => e,
        }
    }
}

impl Teacher for CausalLm {
    fn id(&self) -> &str {
        &self.manifest().id
    }

    fn choices(&mut self, rows: &[TeacherRow<'_>], runner_up: bool) -> anyhow::Result<Vec<Vec<PromptChoice>>> {
        let start = |r: usize| rows[r].1.max(1);
        let mut out: Vec<Vec<PromptChoice>> = vec![Vec::new(); rows.len()];
        let mut active: Vec<usize> = (0..rows.len()).filter(|&r| start(r) < rows[r].0.len()).collect();
        if active.is_empty() {
            return Ok(out);
        }
        let mut caches = rows.iter().map(|(tokens, _)| self.new_cache(Some(tokens.len()))).collect::<Result<Vec<KvCache>, _>>()?;
        // Prefill each row up to its first position; then one batched step per position.
        let mut step_out = step(self, &mut caches, &active, |r| rows[r].0[..start(r)].to_vec())?;
        let mut t = 0;
        loop {
            for (k, &r) in active.iter().enumerate() {
                out[r].push(choice_from_logits(&step_out[k].logits, runner_up).context("the LLM produced no logits")?);
            }
            let next: Vec<usize> = active.iter().copied().filter(|&r| start(r) + t + 1 < rows[r].0.len()).collect();
            if next.is_empty() {
                return Ok(out);
            }
            step_out = step(self, &mut caches, &next, |r| vec![rows[r].0[start(r) + t]])?;
            active = next;
            t += 1;
        }
    }
}

/// One batched forward of the rows `which` (ascending), each fed `feed(row)`.
fn step(lm: &mut CausalLm, caches: &mut [KvCache], which: &[usize], feed: impl Fn(usize) -> Vec<u32>) -> anyhow::Result<Vec<StepOutput>> {
    let tokens: Vec<Vec<u32>> = which.iter().map(|&r| feed(r)).collect();
    let mut selected: Vec<&mut KvCache> = caches.iter_mut().enumerate().filter(|(i, _)| which.contains(i)).map(|(_, c)| c).collect();
    let slices: Vec<&[u32]> = tokens.iter().map(Vec::as_slice).collect();
    Ok(lm.forward_batch(&mut selected, &slices)?)
}

/// The argmax of `logits` (the first of equals, as the decode loop picks it) with its
/// log-probability, and the best other token when `runner_up`.
pub fn choice_from_logits(logits: &[f32], runner_up: bool) -> Option<PromptChoice> {
    let (best, max) = argmax(logits)?;
    let z: f64 = logits.iter().filter(|l| !l.is_nan()).map(|&l| f64::from(l - max).exp()).sum();
    let log_z = z.ln();
    let logprob = |l: f32| Some((f64::from(l - max) - log_z) as f32);
    let second = runner_up
        .then(|| logits.iter().enumerate().filter(|&(i, l)| i as u32 != best && !l.is_nan()).max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0))))
        .flatten()
        .map(|(i, &l)| EngineToken { id: i as u32, logprob: logprob(l) });
    Some(PromptChoice { best: EngineToken { id: best, logprob: logprob(max) }, runner_up: second })
}

/// The LLM an engine serves, as a teacher.
impl Teacher for EngineLlm {
    fn id(&self) -> &str {
        EngineLlm::id(self)
    }

    fn choices(&mut self, rows: &[TeacherRow<'_>], runner_up: bool) -> anyhow::Result<Vec<Vec<PromptChoice>>> {
        EngineLlm::choices(self, rows, runner_up)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model_runtime::model_files::{ModelFiles, TINY_MODEL};
    use model_runtime::LmOptions;

    #[test]
    fn in_process_choices_are_each_positions_argmax_whatever_rows_share_the_batch() {
        let mut lm = CausalLm::load(ModelFiles::locate(TINY_MODEL).unwrap(), &LmOptions { threads: 1, max_context: 64, ..LmOptions::default() }).unwrap();
        let a: Vec<u32> = vec![151644, 872, 198, 3838, 374, 220, 16, 10, 220, 17];
        let b: Vec<u32> = vec![151644, 872, 198, 9707, 11, 1879, 0];
        let batched = lm.choices(&[(&a, 4), (&b, 3), (&b, 7), (&b, 0)], true).unwrap();
        assert_eq!(batched.iter().map(Vec::len).collect::<Vec<_>>(), vec![6, 4, 0, 6], "from max(first, 1) to the end");
        for ((tokens, first), got) in [(&a, 4), (&b, 3), (&b, 1)].into_iter().zip([&batched[0], &batched[1], &batched[3]]) {
            for (k, choice) in got.iter().enumerate() {
                // The same position alone: a fresh cache, the tokens before it in one prefill.
                let mut cache = lm.new_cache(Some(64)).unwrap();
                let logits = lm.forward(&mut cache, &tokens[..first + k]).unwrap().logits;
                let (_, max) = argmax(&logits).unwrap();
                // Batched and single-row kernels may order sums differently: equal up to a tie.
                assert!(max - logits[choice.best.id as usize] < 1e-3, "position {}: chose {} ({}), alone the max is {max}", first + k, choice.best.id, logits[choice.best.id as usize]);
                assert!(choice.runner_up.is_some_and(|r| r.id != choice.best.id && r.logprob <= choice.best.logprob));
            }
        }
    }

    #[test]
    fn a_choice_from_logits_is_the_argmax_with_its_log_probability_and_the_runner_up() {
        let c = choice_from_logits(&[1.0, 3.0, 2.0, 3.0], true).unwrap();
        assert_eq!(c.best.id, 1, "the first of equal maxima, as the decode loop picks");
        assert_eq!(c.runner_up.map(|t| t.id), Some(3), "an equal second is a runner-up with margin 0");
        let z = (1.0f64 - 3.0).exp() + 1.0 + (2.0f64 - 3.0).exp() + 1.0;
        assert!((f64::from(c.best.logprob.unwrap()) + z.ln()).abs() < 1e-6);
        assert_eq!(c.best.logprob, c.runner_up.unwrap().logprob);
        let c = choice_from_logits(&[0.5, f32::NAN, 4.0], false).unwrap();
        assert_eq!((c.best.id, c.runner_up), (2, None));
        assert!(choice_from_logits(&[], true).is_none());
        assert_eq!(choice_from_logits(&[2.0], true).unwrap().runner_up, None, "no other token");
    }
}
