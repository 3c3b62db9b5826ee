//! Logging set-up shared by every Duet binary: `tracing` to stderr, filtered by `--log` /
//! `DUET_LOG` (EnvFilter syntax), so stdout stays clean for generated text and JSON reports.

/// An invalid `--log` filter.
#[derive(Debug, thiserror::Error)]
#[error("invalid --log filter `{filter}`: {message}")]
pub struct LogFilterError {
    /// The filter as given.
    pub filter: String,
    /// What the parser said.
    pub message: String,
}

/// Install the global subscriber. Call once, at the start of `main`.
pub fn init_logging(filter: &str) -> Result<(), LogFilterError> {
    let env_filter = tracing_subscriber::EnvFilter::try_new(filter)
        .map_err(|e| LogFilterError { filter: filter.to_string(), message: e.to_string() })?;
    // A second call (e.g. from a test harness) keeps the first subscriber.
    let _ = tracing_subscriber::fmt().with_env_filter(env_filter).with_writer(std::io::stderr).try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_typo_in_the_filter_is_a_clear_error() {
        let err = super::init_logging("info,=[").unwrap_err();
        assert!(err.to_string().contains("invalid --log filter"), "{err}");
        assert!(super::init_logging("warn").is_ok());
    }
}
