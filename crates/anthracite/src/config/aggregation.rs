//! `[aggregation]` and `[rewrite]`: carbon-aggregator's rules in the relay
//! (`crate::aggregator` is the design), from relay.toml or an `[aggregator]` carbon.conf.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::aggregator::{
    AggregationRules, AggregationSettings, AggregatorLimits, RewriteRules, RulesError,
};

/// `[aggregation]`: aggregate received datapoints with carbon's aggregation rules.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RawAggregation {
    /// An `aggregation-rules.conf` (re-read when it changes). Default `""`: `rules` only.
    pub rules_file: String,
    /// Rules given inline, one `output (frequency) = method input` per entry (used when
    /// `rules_file` is empty).
    pub rules: Vec<String>,
    /// carbon's `FORWARD_ALL`: pass every datapoint on as well, unless it is itself an
    /// aggregate output. Default true.
    pub forward_all: bool,
    /// carbon's `MAX_AGGREGATION_INTERVALS`: intervals kept per series. Default 5.
    pub max_intervals: u64,
    /// carbon's `WRITE_BACK_FREQUENCY` in seconds; 0 (default) = each rule's frequency.
    pub write_back_frequency_secs: f64,
    /// carbon's `LOG_AGGREGATOR_MISSES` (logged once per episode). Default true.
    pub log_misses: bool,
    /// Most output series held; more are dropped and counted (`series_limit`). Default 1000000.
    pub max_series: usize,
    /// Most values held for percentile rules; more are dropped and counted (`values_limit`).
    /// Default 10000000 (8 bytes each).
    pub max_values: usize,
    /// Most intervals held over all series; a datapoint that would open one more is dropped
    /// and counted (`intervals_limit`). Default 5000000 (about 80 bytes each).
    pub max_intervals_held: usize,
    /// Most input names whose rule verdict is cached (emptied when full). Default 1000000.
    pub max_cached_names: usize,
    /// Where `aggregator.state` is written at shutdown and read at start; `""` (default):
    /// `destinations.spill.dir`, and no state file without one.
    pub state_dir: String,
    /// How often the rule files are checked for changes, in seconds. Default 10 (carbon's).
    pub reload_interval_secs: f64,
    /// How often the open intervals are checkpointed to the state file while any is held, in
    /// seconds; 0 disables. Default 10. A SIGKILL loses what was aggregated after the last
    /// checkpoint.
    pub checkpoint_interval_secs: f64,
}

impl Default for RawAggregation {
    fn default() -> Self {
        Self {
            rules_file: String::new(),
            rules: Vec::new(),
            forward_all: true,
            max_intervals: 5,
            write_back_frequency_secs: 0.0,
            log_misses: true,
            max_series: 1_000_000,
            max_values: 10_000_000,
            max_intervals_held: 5_000_000,
            max_cached_names: 1_000_000,
            state_dir: String::new(),
            reload_interval_secs: 10.0,
            checkpoint_interval_secs: 10.0,
        }
    }
}

/// `[rewrite]`: carbon's rewrite rules (`[pre]` before aggregation, `[post]` on what is
/// passed on).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RawRewrite {
    /// A `rewrite-rules.conf` (re-read when it changes). Default `""`: `rules` only.
    pub rules_file: String,
    /// The rules inline, in the file's format (`[pre]`, `pattern = replacement`, …).
    pub rules: String,
}

/// The validated aggregation stage.
#[derive(Clone, Debug)]
pub(crate) struct AggregationConfig {
    /// The aggregation rules.
    pub rules: AggregationRules,
    /// Their file, watched for changes.
    pub rules_file: Option<PathBuf>,
    /// The rewrite rules.
    pub rewrite: RewriteRules,
    /// Their file, watched for changes.
    pub rewrite_file: Option<PathBuf>,
    /// Behaviour and bounds.
    pub settings: AggregationSettings,
    /// Where the state file lives (`None`: no state file).
    pub state_dir: Option<PathBuf>,
    /// How often the rule files are checked.
    pub reload_interval: Duration,
    /// How often the open intervals are checkpointed (`None`: never, or no state file).
    pub checkpoint_interval: Option<Duration>,
}

impl AggregationConfig {
    /// A warning per rule whose output template is worth one, naming its file and line (or
    /// its entry of `aggregation.rules` in `file`).
    pub(crate) fn warnings(&self, file: &str) -> Vec<String> {
        rule_warnings(&self.rules, self.rules_file.as_deref(), file)
    }
}

/// A warning per rule of `rules` whose output template is worth one: `path: line N` when they
/// were read from `path`, else `file: aggregation.rules[i]`.
pub(crate) fn rule_warnings(
    rules: &AggregationRules,
    path: Option<&Path>,
    file: &str,
) -> Vec<String> {
    rules
        .warnings()
        .into_iter()
        .map(|w| {
            let at = match path {
                Some(p) => format!("{}: line {}", p.display(), w.line),
                None => format!("{file}: aggregation.rules[{}]", w.line - 1),
            };
            format!("{at}: {:?}: {}", w.rule, w.effect)
        })
        .collect()
}

/// Reads and parses an aggregation-rules file; the error names the file and line.
pub(crate) fn read_rules(path: &Path) -> Result<AggregationRules, ConfigError> {
    let text = read(path)?;
    AggregationRules::parse(&text).map_err(|e| rules_error(path, e))
}

/// Reads and parses a rewrite-rules file; a missing file is no rule (as in carbon).
pub(crate) fn read_rewrite(path: &Path) -> Result<RewriteRules, ConfigError> {
    if !path.exists() {
        return Ok(RewriteRules::default());
    }
    let text = read(path)?;
    RewriteRules::parse(&text).map_err(|e| invalid_line(path, &e.to_string()))
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn rules_error(path: &Path, e: RulesError) -> ConfigError {
    invalid_line(path, &e.to_string())
}

/// `file: line N: message` as a [`ConfigError::Invalid`] keyed by the line.
fn invalid_line(path: &Path, message: &str) -> ConfigError {
    let (key, message) = match message.split_once(": ") {
        Some((line, rest)) if line.starts_with("line ") => (line.to_owned(), rest.to_owned()),
        _ => (String::new(), message.to_owned()),
    };
    ConfigError::invalid(path.display(), key, message)
}

/// Validates `[aggregation]` and `[rewrite]` (`spill_dir` is `destinations.spill.dir`).
pub(crate) fn validate(
    aggregation: Option<&RawAggregation>,
    rewrite: Option<&RawRewrite>,
    spill_dir: &str,
    file: &str,
) -> Result<Option<AggregationConfig>, ConfigError> {
    let ctx = super::validate::Ctx { file };
    let invalid = |key: &str, message: &str| ctx.invalid(key, message);
    let Some(a) = aggregation else {
        if rewrite.is_some() {
            return Err(invalid(
                "rewrite",
                "rewrite rules are applied by the aggregation stage: add an [aggregation] section",
            ));
        }
        return Ok(None);
    };
    let (rules, rules_file) = if a.rules_file.is_empty() {
        let rules = AggregationRules::from_lines(&a.rules).map_err(|e| match e {
            RulesError::Rule { line, error } => invalid(
                &format!("aggregation.rules[{}]", line - 1),
                &error.to_string(),
            ),
            RulesError::Frequency { line, .. } => invalid(
                &format!("aggregation.rules[{}]", line - 1),
                "frequency must be a positive number of seconds",
            ),
        })?;
        (rules, None)
    } else {
        if !a.rules.is_empty() {
            return Err(invalid(
                "aggregation.rules",
                "give either rules_file or rules, not both",
            ));
        }
        let path = PathBuf::from(&a.rules_file);
        (read_rules(&path)?, Some(path))
    };
    let (rewrite, rewrite_file) = match rewrite {
        None => (RewriteRules::default(), None),
        Some(r) if !r.rules_file.is_empty() => {
            if !r.rules.is_empty() {
                return Err(invalid(
                    "rewrite.rules",
                    "give either rules_file or rules, not both",
                ));
            }
            let path = PathBuf::from(&r.rules_file);
            (read_rewrite(&path)?, Some(path))
        }
        Some(r) => (
            RewriteRules::parse(&r.rules).map_err(|e| invalid("rewrite.rules", &e.to_string()))?,
            None,
        ),
    };
    if a.max_intervals > 1_000_000 {
        return Err(invalid("aggregation.max_intervals", "must be 0 to 1000000"));
    }
    if !(a.write_back_frequency_secs >= 0.0 && a.write_back_frequency_secs.is_finite()) {
        return Err(invalid(
            "aggregation.write_back_frequency_secs",
            "must be 0 (each rule's frequency) or a positive number of seconds",
        ));
    }
    if a.max_series == 0 {
        return Err(invalid("aggregation.max_series", "must be at least 1"));
    }
    if a.max_intervals_held == 0 {
        return Err(invalid(
            "aggregation.max_intervals_held",
            "must be at least 1",
        ));
    }
    if !(a.reload_interval_secs > 0.0 && a.reload_interval_secs <= 86_400.0) {
        return Err(invalid(
            "aggregation.reload_interval_secs",
            "must be more than 0 and at most 86400",
        ));
    }
    if !(a.checkpoint_interval_secs >= 0.0 && a.checkpoint_interval_secs <= 86_400.0) {
        return Err(invalid(
            "aggregation.checkpoint_interval_secs",
            "must be 0 (no checkpoints) to 86400",
        ));
    }
    let state_dir = if !a.state_dir.is_empty() {
        Some(PathBuf::from(&a.state_dir))
    } else if !spill_dir.is_empty() {
        Some(PathBuf::from(spill_dir))
    } else {
        None
    };
    Ok(Some(AggregationConfig {
        rules,
        rules_file,
        rewrite,
        rewrite_file,
        settings: AggregationSettings {
            forward_all: a.forward_all,
            log_misses: a.log_misses,
            limits: AggregatorLimits {
                max_intervals: a.max_intervals as i64,
                write_back: (a.write_back_frequency_secs > 0.0)
                    .then_some(a.write_back_frequency_secs),
                max_series: a.max_series,
                max_values: a.max_values,
                max_intervals_held: a.max_intervals_held,
                max_cached_names: a.max_cached_names,
            },
        },
        checkpoint_interval: (a.checkpoint_interval_secs > 0.0 && state_dir.is_some())
            .then(|| Duration::from_secs_f64(a.checkpoint_interval_secs)),
        state_dir,
        reload_interval: Duration::from_secs_f64(a.reload_interval_secs),
    }))
}
