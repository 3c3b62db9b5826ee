//! The fleet-size search: which fleet to try next, given the sizes tried and whether each met
//! the service level. Pure, so the order of probes is a table test, not a benchmark run.
//!
//! It doubles from the first size while the level holds (a server's capacity is unknown to
//! within orders of magnitude before the first probe), then bisects between the largest size
//! that held and the smallest that did not, until the two are within `precision` of each
//! other (at least one device apart). Capacity is taken to be monotone in the fleet's size:
//! one noisy probe moves the answer by at most the interval it was bisecting.

/// The search's state: the sizes tried and the bracket they set.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetSearch {
    start: usize,
    max: usize,
    precision: f64,
    /// Largest size that met the level (0: none yet).
    held: usize,
    /// Smallest size that did not.
    failed: Option<usize>,
}

impl FleetSearch {
    /// A search starting at `start` devices, never trying more than `max`, stopping once the
    /// bracket is within `precision` (a share of the size that held, e.g. 0.1).
    pub fn new(start: usize, max: usize, precision: f64) -> Self {
        let max = max.max(1);
        Self { start: start.clamp(1, max), max, precision: precision.max(0.0), held: 0, failed: None }
    }

    /// The next fleet size to try; `None` when the capacity is known to the precision.
    pub fn next(&self) -> Option<usize> {
        match self.failed {
            None if self.held >= self.max => None,
            None if self.held == 0 => Some(self.start),
            None => Some((self.held * 2).min(self.max)),
            Some(failed) => {
                let step = ((self.held as f64 * self.precision).ceil() as usize).max(1);
                (failed > self.held + step).then(|| self.held + (failed - self.held) / 2)
            }
        }
    }

    /// `devices` were tried: the level `held` or not.
    pub fn record(&mut self, devices: usize, held: bool) {
        if held {
            self.held = self.held.max(devices);
        } else {
            self.failed = Some(self.failed.map_or(devices, |f| f.min(devices)));
        }
    }

    /// The largest fleet that met the level (0: not even the smallest tried).
    pub fn capacity(&self) -> usize {
        self.held
    }

    /// Whether the search stopped at `max` with the level still holding (a lower bound).
    pub fn hit_the_maximum(&self) -> bool {
        self.failed.is_none() && self.held >= self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run the search against a server that holds the level up to `capacity` devices.
    fn probes(start: usize, max: usize, precision: f64, capacity: usize) -> (Vec<usize>, usize) {
        let mut s = FleetSearch::new(start, max, precision);
        let mut tried = Vec::new();
        while let Some(n) = s.next() {
            assert!(!tried.contains(&n), "{n} tried twice: {tried:?}");
            tried.push(n);
            s.record(n, n <= capacity);
        }
        (tried, s.capacity())
    }

    #[test]
    fn it_doubles_until_the_level_fails_then_bisects_to_the_precision() {
        assert_eq!(probes(1, 1000, 0.1, 37), (vec![1, 2, 4, 8, 16, 32, 64, 48, 40, 36], 36), "36 held, 40 did not: within 10 %");
    }

    #[test]
    fn a_server_that_fails_the_first_size_is_searched_down_to_one_device() {
        assert_eq!(probes(8, 1000, 0.1, 2), (vec![8, 4, 2, 3], 2));
        assert_eq!(probes(4, 1000, 0.1, 0), (vec![4, 2, 1], 0));
    }

    #[test]
    fn the_maximum_bounds_the_search_and_says_the_answer_is_a_lower_bound() {
        let mut s = FleetSearch::new(1, 6, 0.1);
        while let Some(n) = s.next() {
            s.record(n, true);
        }
        assert_eq!((s.capacity(), s.hit_the_maximum()), (6, true));
    }

    #[test]
    fn a_coarse_precision_stops_sooner() {
        let (fine, _) = probes(1, 1000, 0.05, 100);
        let (coarse, c) = probes(1, 1000, 0.25, 100);
        assert!(coarse.len() < fine.len(), "{coarse:?} against {fine:?}");
        assert!((75..=100).contains(&c), "never above the capacity, within 25 % of it: {c}");
    }
}
