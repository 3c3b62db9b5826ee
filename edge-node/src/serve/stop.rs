//! Stop sequences over streamed text: text is released only once it cannot be the start of a
//! stop sequence, and generation ends at the first one (which is not returned), as OpenAI's
//! `stop` parameter behaves.

/// Holds back the tail of the generated text that might still turn into a stop sequence.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
}

/// What a new piece of text released.
#[derive(Debug, PartialEq, Eq)]
pub enum Released {
    /// Text that is safe to send; generation goes on.
    Text(String),
    /// A stop sequence was reached: send this text (what came before it) and stop.
    Stop(String),
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> Self {
        Self { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), pending: String::new() }
    }

    /// Add generated text.
    pub fn push(&mut self, piece: &str) -> Released {
        self.pending.push_str(piece);
        if let Some(at) = self.stops.iter().filter_map(|s| self.pending.find(s.as_str())).min() {
            let before = self.pending[..at].to_string();
            self.pending.clear();
            return Released::Stop(before);
        }
        // Keep the longest suffix that is a proper prefix of some stop sequence.
        let keep = self
            .stops
            .iter()
            .flat_map(|s| (1..s.len()).filter(move |&n| s.is_char_boundary(n)).map(move |n| &s[..n]))
            .filter(|prefix| self.pending.ends_with(prefix))
            .map(str::len)
            .max()
            .unwrap_or(0);
        let cut = self.pending.len() - keep;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        Released::Text(out)
    }

    /// Generation ended without a stop sequence: what is still held back.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_may_start_a_stop_sequence_is_held_back_until_decided() {
        let mut m = StopMatcher::new(vec!["\n\n".into(), "END".into()]);
        assert_eq!(m.push("Hello E"), Released::Text("Hello ".into()));
        assert_eq!(m.push("ND? no"), Released::Stop("".into()), "\"END\" completes across pieces");
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("EN"), Released::Text(String::new()));
        assert_eq!(m.push("ough"), Released::Text("ENough".into()));
        assert_eq!(m.push(" E"), Released::Text(" ".into()));
        assert_eq!(m.finish(), "E");
    }

    #[test]
    fn generation_stops_at_the_earliest_stop_sequence_and_drops_it() {
        let mut m = StopMatcher::new(vec!["b".into(), "a".into()]);
        assert_eq!(m.push("xxaYb"), Released::Stop("xx".into()));
        let mut none = StopMatcher::new(vec![String::new()]);
        assert_eq!(none.push("abc"), Released::Text("abc".into()));
    }
}
