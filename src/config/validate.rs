//! The second stage: one validator per `relay.toml` section, from the raw serde structs to the
//! validated parts of a [`Config`](super::Config). Every error names the key and the file;
//! regexes are compiled here once and kept in the result.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::raw::{self, RawDestinations, RawIngest, RawListen, RawRouter, RawRule, RawTelemetry};
use super::{ConfigError, IngestConfig, ListenConfig};
use crate::destination::DestinationConfig;
use crate::filter::ListsConfig;
use crate::queue::spill::{FsyncPolicy, SpillConfig};
use crate::queue::{QueueLimits, SpillSettings, WhenFull};
use crate::router::aggregation::AggregationRule;
use crate::router::{DestinationSpec, Method, RouterSpec, RuleSpec};
use crate::telemetry::TelemetryConfig;

/// Where errors point: the file being validated.
pub(super) struct Ctx<'a> {
    pub(super) file: &'a str,
}

impl Ctx<'_> {
    pub(super) fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.to_string(),
            key: key.to_string(),
            message: message.into(),
        }
    }

    /// `IP:port`, or `None` for `""`.
    fn addr(&self, key: &str, text: &str) -> Result<Option<SocketAddr>, ConfigError> {
        if text.is_empty() {
            return Ok(None);
        }
        text.parse::<SocketAddr>().map(Some).map_err(|e| {
            self.invalid(
                key,
                format!("{text:?} is not an IP:port socket address ({e}); use \"\" to disable"),
            )
        })
    }
}

/// `[listen]`.
pub(super) fn listen(l: &RawListen, ctx: &Ctx) -> Result<ListenConfig, ConfigError> {
    if l.max_line_length < 64 {
        return Err(ctx.invalid("listen.max_line_length", "must be at least 64"));
    }
    if l.max_pickle_frame < 64 || l.max_pickle_frame > (1 << 30) {
        return Err(ctx.invalid(
            "listen.max_pickle_frame",
            "must be between 64 bytes and 1 GiB",
        ));
    }
    if l.max_connections == 0 {
        return Err(ctx.invalid("listen.max_connections", "must be at least 1"));
    }
    Ok(ListenConfig {
        line_tcp: ctx.addr("listen.line_tcp", &l.line_tcp)?,
        line_udp: ctx.addr("listen.line_udp", &l.line_udp)?,
        pickle_tcp: ctx.addr("listen.pickle_tcp", &l.pickle_tcp)?,
        max_connections: l.max_connections,
        idle_timeout: (l.idle_timeout_secs > 0.0)
            .then(|| Duration::from_secs_f64(l.idle_timeout_secs)),
        max_line_length: l.max_line_length,
        max_pickle_frame: l.max_pickle_frame,
    })
}

/// `[destinations]` with its `queue` and `spill` tables and per-server overrides.
pub(super) fn destinations(
    d: &RawDestinations,
    ctx: &Ctx,
) -> Result<Vec<DestinationConfig>, ConfigError> {
    if d.servers.is_empty() {
        return Err(ctx.invalid(
            "destinations.servers",
            "at least one destination is required",
        ));
    }
    if d.servers.len() > usize::from(u16::MAX) {
        return Err(ctx.invalid("destinations.servers", "too many destinations"));
    }
    if d.max_datapoints_per_message == 0 {
        return Err(ctx.invalid(
            "destinations.max_datapoints_per_message",
            "must be at least 1",
        ));
    }
    if d.backoff_min_ms == 0 || d.backoff_max_ms < d.backoff_min_ms {
        return Err(ctx.invalid(
            "destinations.backoff_max_ms",
            "need 0 < backoff_min_ms <= backoff_max_ms",
        ));
    }
    let mut out: Vec<DestinationConfig> = Vec::with_capacity(d.servers.len());
    for (i, server) in d.servers.iter().enumerate() {
        let key = format!("destinations.servers[{i}]");
        let spec = DestinationSpec::parse(server.address())
            .map_err(|e| ctx.invalid(&key, e.to_string()))?;
        if let Some(prev) = out
            .iter()
            .find(|p| p.spec.host == spec.host && p.spec.instance == spec.instance)
        {
            return Err(ctx.invalid(
                &key,
                format!(
                    "{spec} has the same (host, instance) as {} — carbon's ring cannot tell them apart",
                    prev.spec
                ),
            ));
        }
        let o = server.overrides();
        let queue = queue_limits(d, &o, &key, ctx)?;
        let spill = if d.spill.dir.is_empty() {
            None
        } else {
            Some(spill_settings(&d.spill, &o, &spec, ctx)?)
        };
        out.push(DestinationConfig {
            spec,
            protocol: o.protocol.unwrap_or(d.protocol),
            max_datapoints_per_message: d.max_datapoints_per_message,
            queue,
            flush_bytes: d.flush_bytes.max(1),
            linger: Duration::from_millis(d.linger_ms),
            connect_timeout: Duration::from_millis(d.connect_timeout_ms.max(1)),
            backoff_min: Duration::from_millis(d.backoff_min_ms),
            backoff_max: Duration::from_millis(d.backoff_max_ms),
            spill,
        });
    }
    Ok(out)
}

/// One server's queue bounds and policies (its overrides over `[destinations.queue]`).
fn queue_limits(
    d: &RawDestinations,
    o: &raw::RawServerDetail,
    key: &str,
    ctx: &Ctx,
) -> Result<QueueLimits, ConfigError> {
    let spill_on = !d.spill.dir.is_empty();
    let default_policy = if spill_on {
        WhenFull::Spill
    } else {
        WhenFull::DropNewest
    };
    let limits = QueueLimits {
        max_datapoints: o.max_queue_datapoints.unwrap_or(d.queue.max_datapoints),
        max_bytes: o.max_queue_bytes.unwrap_or(d.queue.max_bytes),
        when_full: o.when_full.or(d.queue.when_full).unwrap_or(default_policy),
        spill_fallback: o.spill_fallback.unwrap_or(d.queue.spill_fallback),
    };
    if limits.max_datapoints == 0 || limits.max_bytes == 0 {
        return Err(ctx.invalid(key, "queue bounds must be positive"));
    }
    if limits.spill_fallback == WhenFull::Spill {
        let k = if o.spill_fallback.is_some() {
            format!("{key}.spill_fallback")
        } else {
            "destinations.queue.spill_fallback".into()
        };
        return Err(ctx.invalid(
            &k,
            "must be drop_newest, drop_oldest or block (spill cannot be its own fallback)",
        ));
    }
    if limits.when_full == WhenFull::Spill && !spill_on {
        let k = if o.when_full.is_some() {
            format!("{key}.when_full")
        } else {
            "destinations.queue.when_full".into()
        };
        return Err(ctx.invalid(&k, "\"spill\" needs destinations.spill.dir to be set"));
    }
    Ok(limits)
}

/// The spill settings of one destination: its own directory under `spill.dir`, the log's
/// limits (with the server's overrides).
fn spill_settings(
    raw: &raw::RawSpill,
    o: &raw::RawServerDetail,
    spec: &DestinationSpec,
    ctx: &Ctx,
) -> Result<SpillSettings, ConfigError> {
    if !(raw.max_age_secs >= 0.0 && raw.max_age_secs.is_finite()) {
        return Err(ctx.invalid("destinations.spill.max_age_secs", "must be >= 0"));
    }
    let fsync = match raw.fsync {
        raw::RawFsync::Always => FsyncPolicy::Always,
        raw::RawFsync::Never => FsyncPolicy::Never,
        raw::RawFsync::Interval => {
            if raw.fsync_interval_ms == 0 {
                return Err(ctx.invalid(
                    "destinations.spill.fsync_interval_ms",
                    "must be at least 1 (or use fsync = \"always\")",
                ));
            }
            FsyncPolicy::Interval(Duration::from_millis(raw.fsync_interval_ms))
        }
    };
    let log = SpillConfig {
        max_bytes: o.spill_max_bytes.unwrap_or(raw.max_bytes),
        segment_bytes: raw.segment_bytes,
        max_age: (raw.max_age_secs > 0.0).then(|| Duration::from_secs_f64(raw.max_age_secs)),
        fsync,
        ..SpillConfig::default()
    };
    if log.segment_bytes < 4096 || log.segment_bytes > u64::from(u32::MAX) {
        return Err(ctx.invalid(
            "destinations.spill.segment_bytes",
            "must be between 4096 bytes and 4 GiB",
        ));
    }
    if log.max_bytes < 2 * log.segment_bytes {
        let k = if o.spill_max_bytes.is_some() {
            "spill_max_bytes"
        } else {
            "destinations.spill.max_bytes"
        };
        return Err(ctx.invalid(
            k,
            format!(
                "must be at least 2 × segment_bytes ({})",
                2 * log.segment_bytes
            ),
        ));
    }
    let rate = o.replay_rate.unwrap_or(raw.replay_rate);
    let leaf: String = format!(
        "{}_{}_{}",
        spec.host,
        spec.port,
        spec.instance.as_deref().unwrap_or("None")
    )
    .chars()
    .map(|c| {
        if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
            c
        } else {
            '_'
        }
    })
    .collect();
    Ok(SpillSettings {
        dir: Path::new(&raw.dir).join(leaf),
        log,
        replay_rate: (rate > 0).then_some(rate),
    })
}

/// Smallest non-zero `router.route_cache_bytes`.
const MIN_ROUTE_CACHE_BYTES: usize = 64 << 10;
/// Largest `router.route_cache_bytes`.
const MAX_ROUTE_CACHE_BYTES: usize = 1 << 40;

/// `router.route_cache_bytes`: 0 (off), or 64 KiB to 1 TiB.
pub(super) fn route_cache_bytes(r: &RawRouter, ctx: &Ctx) -> Result<usize, ConfigError> {
    let bytes = r.route_cache_bytes;
    if bytes != 0 && !(MIN_ROUTE_CACHE_BYTES..=MAX_ROUTE_CACHE_BYTES).contains(&bytes) {
        return Err(ctx.invalid(
            "router.route_cache_bytes",
            "must be 0 (no cache) or between 65536 (64 KiB) and 1099511627776 (1 TiB)",
        ));
    }
    Ok(bytes)
}

/// `[router]` and `[[rules]]`: the spec the router is built from, rules and aggregation rules
/// compiled.
pub(super) fn router(
    r: &RawRouter,
    raw_rules: &[RawRule],
    destinations: &[DestinationConfig],
    ctx: &Ctx,
) -> Result<RouterSpec, ConfigError> {
    if r.replication_factor == 0 {
        return Err(ctx.invalid("router.replication_factor", "must be at least 1"));
    }
    let rules = if r.method == Method::Rules {
        rules(raw_rules, destinations, ctx)?
    } else if !raw_rules.is_empty() {
        return Err(ctx.invalid(
            "rules",
            "rules are only used with router.method = \"rules\"",
        ));
    } else {
        Vec::new()
    };
    let aggregation_rules = if r.method.is_aggregated() {
        r.aggregation_rules
            .iter()
            .enumerate()
            .map(|(i, line)| {
                AggregationRule::parse(line).map_err(|e| {
                    ctx.invalid(&format!("router.aggregation_rules[{i}]"), e.to_string())
                })
            })
            .collect::<Result<_, _>>()?
    } else if !r.aggregation_rules.is_empty() {
        return Err(ctx.invalid(
            "router.aggregation_rules",
            "aggregation rules are only used with the aggregated methods",
        ));
    } else {
        Vec::new()
    };
    Ok(RouterSpec {
        method: r.method,
        hash_type: r.hash_type,
        replication_factor: r.replication_factor,
        diverse_replicas: r.diverse_replicas,
        destinations: destinations.iter().map(|d| d.spec.clone()).collect(),
        rules,
        aggregation_rules,
    })
}

/// `[[rules]]`: exactly one default rule; every destination named must be configured.
fn rules(
    raw_rules: &[RawRule],
    destinations: &[DestinationConfig],
    ctx: &Ctx,
) -> Result<Vec<RuleSpec>, ConfigError> {
    let mut defaults = 0;
    let mut out = Vec::with_capacity(raw_rules.len());
    for (i, rule) in raw_rules.iter().enumerate() {
        let key = format!("rules[{i}]");
        if rule.default == rule.pattern.is_some() {
            return Err(ctx.invalid(
                &key,
                "a rule has either `pattern` or `default = true`, not both or neither",
            ));
        }
        defaults += usize::from(rule.default);
        let pattern = match &rule.pattern {
            Some(p) => Some(
                RuleSpec::compile(p)
                    .map_err(|e| ctx.invalid(&format!("{key}.pattern"), e.to_string()))?,
            ),
            None => None,
        };
        // An empty list is allowed: the rule discards what it matches, which is what carbon
        // does when none of a rule's destinations is configured.
        let mut idx = Vec::with_capacity(rule.destinations.len());
        for name in &rule.destinations {
            let key = format!("{key}.destinations");
            let spec =
                DestinationSpec::parse(name).map_err(|e| ctx.invalid(&key, e.to_string()))?;
            let pos = destinations
                .iter()
                .position(|d| d.spec == spec)
                .ok_or_else(|| {
                    ctx.invalid(&key, format!("{name:?} is not in destinations.servers"))
                })?;
            // Fewer than u16::MAX destinations, checked by `destinations`.
            idx.push(pos as u16);
        }
        out.push(RuleSpec {
            pattern,
            destinations: idx,
            continue_matching: rule.continue_matching,
        });
    }
    if defaults != 1 {
        return Err(ctx.invalid(
            "rules",
            format!(
                "method \"rules\" needs exactly one rule with default = true, found {defaults}"
            ),
        ));
    }
    Ok(out)
}

/// `[telemetry]`.
pub(super) fn telemetry(t: &RawTelemetry, ctx: &Ctx) -> Result<TelemetryConfig, ConfigError> {
    if t.interval_secs < 0.0 || !t.interval_secs.is_finite() {
        return Err(ctx.invalid("telemetry.interval_secs", "must be >= 0"));
    }
    let host = if t.host.is_empty() {
        gethostname::gethostname().to_string_lossy().into_owned()
    } else {
        t.host.clone()
    };
    Ok(TelemetryConfig {
        interval: (t.interval_secs > 0.0).then(|| Duration::from_secs_f64(t.interval_secs)),
        prefix: t.prefix.clone(),
        host,
        instance: t.instance.clone(),
    })
}

/// `[ingest]`.
pub(super) fn ingest(g: &RawIngest, ctx: &Ctx) -> Result<IngestConfig, ConfigError> {
    if !(g.list_reload_secs > 0.0 && g.list_reload_secs.is_finite()) {
        return Err(ctx.invalid("ingest.list_reload_secs", "must be > 0"));
    }
    let path = |p: &str| (!p.is_empty()).then(|| PathBuf::from(p));
    Ok(IngestConfig {
        min_timestamp_resolution: g.min_timestamp_resolution,
        tag_relay_normalized: g.tag_relay_normalized,
        lists: g.use_whitelist.then(|| ListsConfig {
            whitelist: path(&g.whitelist),
            blacklist: path(&g.blacklist),
            reload_interval: Duration::from_secs_f64(g.list_reload_secs),
        }),
    })
}

/// `[shutdown]`.
pub(super) fn shutdown_grace(s: &raw::RawShutdown, ctx: &Ctx) -> Result<Duration, ConfigError> {
    if !(s.grace_secs >= 0.0 && s.grace_secs.is_finite()) {
        return Err(ctx.invalid("shutdown.grace_secs", "must be >= 0"));
    }
    Ok(Duration::from_secs_f64(s.grace_secs))
}
