//! The figures a device reports with its bundle (`BundleReport`): tokens escalated since it
//! started, and of those how many it answered with its own SLM's token.
//!
//! They are the device's word, shown to the operator as they are (`/v1/fleet`) and read as a
//! fallback rate, so a gateway takes only figures that can be true: fallbacks are a subset of
//! escalations, neither is beyond [`MAX_REPORTED_COUNT`], and on one connection (one run of
//! the device: its counters start at zero when it starts) neither goes back. A report that
//! breaks a rule is refused with a typed error and leaves what was shown before.

/// Largest count a report may carry: a device escalating 100,000 tokens a second for 300
/// years stays below it, and it is below 2^53, so `/v1/fleet`'s JSON numbers read exactly in
/// every JSON parser (JavaScript's included).
pub const MAX_REPORTED_COUNT: u64 = 1_000_000_000_000_000;

/// What one `BundleReport` says the device did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReportedCounts {
    /// Tokens escalated since the device started.
    pub escalations: u64,
    /// Of those, answered by the SLM's own token.
    pub fallbacks: u64,
}

/// Why reported figures were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// More fallbacks than escalations: every fallback is an escalation's answer.
    #[error("a report of {fallbacks} fallbacks among {escalations} escalations (fallbacks are a subset of escalations)")]
    FallbacksExceedEscalations {
        /// Reported escalations.
        escalations: u64,
        /// Reported fallbacks.
        fallbacks: u64,
    },
    /// A count beyond [`MAX_REPORTED_COUNT`].
    #[error("a reported {field} count of {value} exceeds {MAX_REPORTED_COUNT}")]
    TooLarge {
        /// Which count.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A count lower than this connection's previous report: counters only grow while the
    /// device runs.
    #[error("the reported {field} count went back from {before} to {now} on one connection")]
    WentBack {
        /// Which count.
        field: &'static str,
        /// The previous report's.
        before: u64,
        /// This report's.
        now: u64,
    },
}

impl ReportedCounts {
    /// Check one report on its own: fallbacks at most escalations, both within
    /// [`MAX_REPORTED_COUNT`].
    pub fn check(&self) -> Result<(), ReportError> {
        if self.escalations > MAX_REPORTED_COUNT {
            return Err(ReportError::TooLarge { field: "escalations", value: self.escalations });
        }
        if self.fallbacks > self.escalations {
            return Err(ReportError::FallbacksExceedEscalations { escalations: self.escalations, fallbacks: self.fallbacks });
        }
        Ok(())
    }

    /// Check this report as the successor of `before` (the same connection's previous one):
    /// [`Self::check`], and neither count lower than before.
    pub fn follows(&self, before: &ReportedCounts) -> Result<(), ReportError> {
        self.check()?;
        for (field, before, now) in [("escalations", before.escalations, self.escalations), ("fallbacks", before.fallbacks, self.fallbacks)] {
            if now < before {
                return Err(ReportError::WentBack { field, before, now });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(escalations: u64, fallbacks: u64) -> ReportedCounts {
        ReportedCounts { escalations, fallbacks }
    }

    #[test]
    fn honest_reports_pass_from_zero_and_growing() {
        assert_eq!(counts(0, 0).follows(&ReportedCounts::default()), Ok(()));
        assert_eq!(counts(10, 3).follows(&counts(0, 0)), Ok(()));
        assert_eq!(counts(10, 3).follows(&counts(10, 3)), Ok(()), "an idle device reports the same figures");
        assert_eq!(counts(MAX_REPORTED_COUNT, MAX_REPORTED_COUNT).check(), Ok(()));
    }

    #[test]
    fn more_fallbacks_than_escalations_is_refused() {
        assert_eq!(counts(2, 3).check(), Err(ReportError::FallbacksExceedEscalations { escalations: 2, fallbacks: 3 }));
        assert!(counts(0, u64::MAX).follows(&ReportedCounts::default()).is_err());
    }

    #[test]
    fn counts_beyond_the_bound_are_refused() {
        assert_eq!(counts(MAX_REPORTED_COUNT + 1, 0).check(), Err(ReportError::TooLarge { field: "escalations", value: MAX_REPORTED_COUNT + 1 }));
        assert!(counts(u64::MAX, u64::MAX).check().is_err());
    }

    #[test]
    fn counts_that_go_back_on_one_connection_are_refused() {
        assert_eq!(counts(9, 3).follows(&counts(10, 3)), Err(ReportError::WentBack { field: "escalations", before: 10, now: 9 }));
        assert_eq!(counts(11, 2).follows(&counts(10, 3)), Err(ReportError::WentBack { field: "fallbacks", before: 3, now: 2 }));
    }
}
