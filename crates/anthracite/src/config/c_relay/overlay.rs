//! What a carbon-c-relay configuration cannot say, given beside it: the spill directory
//! (`--spill-dir`) and an optional small TOML file (`--carbon-c-relay-overlay`) with the
//! relay.toml sections that make sense on a carbon-c-relay configuration:
//!
//! ```toml
//! [spill]                      # [destinations.spill] of relay.toml: one log per member
//! dir = "/var/spool/anthracite"
//! max_bytes = 1073741824
//!
//! [admin]                      # /metrics, the status page
//! listen = "127.0.0.1:8080"
//!
//! [limits]
//! max_aggregation_series = 1000000
//! max_aggregation_values = 10000000
//! ```
//!
//! Without either, the relay keeps carbon-c-relay's behaviour: each member's queue holds
//! `-q` datapoints and drops (counted) what does not fit.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::ConfigError;
use crate::config::raw::{RawAdmin, RawSpill};
use crate::router::c_relay::aggregate::{DEFAULT_MAX_SERIES, DEFAULT_MAX_VALUES};

/// The overlay file's schema.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Overlay {
    /// `[spill]`: the members' disk tier (`dir` empty: off unless `--spill-dir` is given).
    pub spill: Option<RawSpill>,
    /// `[admin]`: the admin listener (`/metrics`, `/status`, the status page).
    pub admin: RawAdmin,
    /// `[limits]`.
    pub limits: Limits,
}

/// `[limits]`: bounds carbon-c-relay does not have.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Limits {
    /// Most open aggregation series (one output name of one `compute`), over every
    /// aggregation; a datapoint that would open one more is dropped, counted with reason
    /// `series_limit`. Default 1000000.
    pub max_aggregation_series: usize,
    /// Most values the `median`, `percentileN`, `variance` and `stddev` computes keep until
    /// their bucket is written, over every aggregation (8 bytes each); a datapoint that would
    /// keep one more is dropped, counted with reason `values_limit`. Default 10000000.
    pub max_aggregation_values: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_aggregation_series: DEFAULT_MAX_SERIES,
            max_aggregation_values: DEFAULT_MAX_VALUES,
        }
    }
}

impl Overlay {
    /// Reads `path`, or the defaults when there is none; `spill_dir` (the command line's)
    /// wins over the file's `[spill] dir`. A relative directory is taken from where it was
    /// given: the command line's from the working directory, the file's from the file's
    /// directory.
    pub(crate) fn load(
        path: Option<&Path>,
        spill_dir: Option<&PathBuf>,
    ) -> Result<Self, ConfigError> {
        let mut overlay = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.to_path_buf(),
                    source,
                })?;
                let file = p.display().to_string();
                let mut overlay: Overlay =
                    toml::from_str(&text).map_err(|e| ConfigError::Syntax {
                        file: file.clone(),
                        message: e.to_string(),
                    })?;
                for (key, value) in [
                    (
                        "max_aggregation_series",
                        overlay.limits.max_aggregation_series,
                    ),
                    (
                        "max_aggregation_values",
                        overlay.limits.max_aggregation_values,
                    ),
                ] {
                    if value == 0 {
                        return Err(ConfigError::Syntax {
                            file,
                            message: format!("limits.{key} must be at least 1"),
                        });
                    }
                }
                if let Some(spill) = overlay.spill.as_mut().filter(|s| !s.dir.is_empty()) {
                    let base = p.parent().unwrap_or(Path::new(""));
                    spill.dir = absolute(&base.join(&spill.dir));
                }
                overlay
            }
            None => Overlay::default(),
        };
        if let Some(dir) = spill_dir {
            overlay.spill.get_or_insert_with(RawSpill::default).dir = absolute(dir);
        }
        Ok(overlay)
    }

    /// The spill settings, when spilling is on.
    pub(crate) fn spill(&self) -> Option<&RawSpill> {
        self.spill.as_ref().filter(|s| !s.dir.is_empty())
    }
}

/// `dir` from the working directory (as given when that cannot be read).
fn absolute(dir: &Path) -> String {
    std::path::absolute(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}
