//! The second stage: one validator per `relay.toml` section, from the raw serde structs to the
//! validated parts of a [`Config`](super::Config). Every error names the key and the file;
//! regexes are compiled here once and kept in the result.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::TelemetryConfig;
use super::raw::{
    self, RawConfig, RawDestinations, RawIngest, RawListen, RawRouter, RawRule, RawServer,
    RawTelemetry,
};
use super::{ConfigError, IngestConfig, ListenConfig};
use crate::destination::{
    DestinationConfig, ExtensionDestination, MAX_UDP_PAYLOAD, OutputProtocol,
};
use crate::extension::{DestinationContext, Extensions, SectionContext, SourceSpec};
use crate::filter::ListsConfig;
use crate::protocol::compression::Compression;
use crate::queue::spill::{FsyncPolicy, SpillConfig};
use crate::queue::{QueueLimits, SpillSettings, WhenFull};
use crate::router::aggregation::AggregationRule;
use crate::router::{DestinationSpec, RelayMethod, RouterSpec, RuleSpec};
use crate::tls::{ClientTls, ClientTlsSettings, NameCheck, ServerTls, ServerTlsSettings};

/// Where errors point: the file being validated.
pub(super) struct Ctx<'a> {
    pub(super) file: &'a str,
}

impl Ctx<'_> {
    pub(super) fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::invalid(self.file, key, message)
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

    /// `v` within `min..=max`, or an error naming the key and the range.
    pub(super) fn int<T>(&self, key: &str, v: T, min: T, max: T) -> Result<T, ConfigError>
    where
        T: PartialOrd + std::fmt::Display + Copy,
    {
        if v < min || v > max {
            return Err(self.invalid(key, format!("{v} is out of range: {min} to {max}")));
        }
        Ok(v)
    }

    /// Seconds as a duration: a finite number within `min..=max` (so no conversion can
    /// panic or overflow); with `zero_off`, 0 means "off" (`None`).
    pub(super) fn secs(
        &self,
        key: &str,
        v: f64,
        min: f64,
        max: f64,
        zero_off: bool,
    ) -> Result<Option<Duration>, ConfigError> {
        if zero_off && v == 0.0 {
            return Ok(None);
        }
        if !(v.is_finite() && v >= min && v <= max) {
            let off = if zero_off { " (0 = off)" } else { "" };
            return Err(self.invalid(
                key,
                format!("{v} is out of range: {min} to {max} seconds{off}"),
            ));
        }
        Ok(Some(Duration::from_secs_f64(v)))
    }
}

/// The longest any configured duration may be: one year. Longer values are surely mistakes,
/// and every duration stays far from `Instant` overflow.
pub(super) const MAX_SECS: f64 = 31_536_000.0;

/// `[listen]`.
pub(super) fn listen(l: &RawListen, ctx: &Ctx) -> Result<ListenConfig, ConfigError> {
    ctx.int("listen.max_line_length", l.max_line_length, 64, 1 << 20)?;
    ctx.int("listen.max_pickle_frame", l.max_pickle_frame, 64, 1 << 30)?;
    ctx.int(
        "listen.max_protobuf_frame",
        l.max_protobuf_frame,
        64,
        1 << 30,
    )?;
    ctx.int("listen.max_name_length", l.max_name_length, 16, 1 << 20)?;
    ctx.int(
        "listen.max_frame_buffer_bytes",
        l.max_frame_buffer_bytes,
        l.max_pickle_frame.max(l.max_protobuf_frame) + 4,
        64 << 30,
    )?;
    ctx.int("listen.max_connections", l.max_connections, 1, 1_000_000)?;
    ctx.int(
        "listen.max_decompressed_bytes",
        l.max_decompressed_bytes,
        crate::protocol::compression::MIN_BUDGET,
        1 << 30,
    )?;
    let line_tcp_compression =
        compression(ctx, "listen.line_tcp_compression", &l.line_tcp_compression)?;
    ctx.int("listen.backlog", l.backlog, 1, 65_535)?;
    if l.udp_recv_buffer != 0 {
        ctx.int("listen.udp_recv_buffer", l.udp_recv_buffer, 4096, 1 << 30)?;
    }
    let idle_timeout = ctx.secs(
        "listen.idle_timeout_secs",
        l.idle_timeout_secs,
        0.001,
        MAX_SECS,
        true,
    )?;
    let line_tcp = ctx.addr("listen.line_tcp", &l.line_tcp)?;
    let pickle_tcp = ctx.addr("listen.pickle_tcp", &l.pickle_tcp)?;
    let protobuf_tcp = ctx.addr("listen.protobuf_tcp", &l.protobuf_tcp)?;
    let tcp = [
        ("listen.line_tcp", line_tcp),
        ("listen.pickle_tcp", pickle_tcp),
        ("listen.protobuf_tcp", protobuf_tcp),
    ];
    for (i, (key, b)) in tcp.iter().enumerate() {
        for (other, a) in &tcp[..i] {
            if let (Some(a), Some(b)) = (a, b)
                && overlap(a, b)
            {
                return Err(ctx.invalid(
                    key,
                    format!("{b} overlaps {other} ({a}): both cannot be bound"),
                ));
            }
        }
    }
    Ok(ListenConfig {
        line_tcp,
        line_udp: ctx.addr("listen.line_udp", &l.line_udp)?,
        pickle_tcp,
        protobuf_tcp,
        max_connections: l.max_connections,
        idle_timeout,
        max_line_length: l.max_line_length,
        max_pickle_frame: l.max_pickle_frame,
        max_name_length: l.max_name_length,
        max_frame_buffer_bytes: l.max_frame_buffer_bytes,
        backlog: l.backlog,
        udp_recv_buffer: (l.udp_recv_buffer > 0).then_some(l.udp_recv_buffer),
        max_protobuf_frame: l.max_protobuf_frame,
        tls: server_tls(l.tls.as_ref(), ctx)?,
        line_tcp_compression,
        max_decompressed_bytes: l.max_decompressed_bytes,
        extra_line: Vec::new(),
    })
}

/// A `compression` word.
fn compression(ctx: &Ctx, key: &str, word: &str) -> Result<Compression, ConfigError> {
    Compression::from_word(word).ok_or_else(|| {
        ctx.invalid(
            key,
            format!("{word:?}: not one of plain, gzip, lz4, snappy, zstd"),
        )
    })
}

/// Two TCP listen addresses that cannot both be bound: the same port (not 0, which picks a
/// free one) on the same address, or on any address where one is the wildcard.
fn overlap(a: &SocketAddr, b: &SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// `[destinations]` with its `queue` and `spill` tables and per-server overrides.
pub(super) fn destinations(
    d: &mut RawDestinations,
    ctx: &Ctx,
    extensions: &Extensions,
    c_relay: bool,
) -> Result<Vec<DestinationConfig>, ConfigError> {
    // A carbon-c-relay configuration may have no servers (everything blackholed or
    // aggregated), and its servers share hosts (they differ by port).
    if d.servers.is_empty() && !c_relay {
        return Err(ctx.invalid(
            "destinations.servers",
            "at least one destination is required",
        ));
    }
    if d.servers.len() > usize::from(u16::MAX) {
        return Err(ctx.invalid("destinations.servers", "too many destinations"));
    }
    ctx.int(
        "destinations.max_datapoints_per_message",
        d.max_datapoints_per_message,
        1,
        1_000_000,
    )?;
    ctx.int("destinations.flush_bytes", d.flush_bytes, 1, 64 << 20)?;
    ctx.int("destinations.linger_ms", d.linger_ms, 0, 60_000)?;
    ctx.int(
        "destinations.connect_timeout_ms",
        d.connect_timeout_ms,
        1,
        600_000,
    )?;
    ctx.int(
        "destinations.backoff_min_ms",
        d.backoff_min_ms,
        1,
        3_600_000,
    )?;
    ctx.int(
        "destinations.backoff_max_ms",
        d.backoff_max_ms,
        d.backoff_min_ms,
        3_600_000,
    )?;
    if !d.spill.dir.is_empty() {
        spill_dir_usable(Path::new(&d.spill.dir), ctx)?;
    }
    if d.write_timeout_ms != 0 && !(100..=3_600_000).contains(&d.write_timeout_ms) {
        return Err(ctx.invalid(
            "destinations.write_timeout_ms",
            "must be 0 (off) or between 100 and 3600000",
        ));
    }
    if d.keepalive_secs > 7200 {
        return Err(ctx.invalid(
            "destinations.keepalive_secs",
            "must be between 0 (off) and 7200",
        ));
    }
    let tls = client_tls(d.tls.as_ref(), ctx)?;
    if !(64..=MAX_UDP_PAYLOAD).contains(&d.max_datagram_bytes) {
        return Err(ctx.invalid(
            "destinations.max_datagram_bytes",
            format!("must be between 64 and {MAX_UDP_PAYLOAD}"),
        ));
    }
    let mut out: Vec<DestinationConfig> = Vec::with_capacity(d.servers.len());
    for i in 0..d.servers.len() {
        let server = &d.servers[i];
        let key = format!("destinations.servers[{i}]");
        let spec = DestinationSpec::parse(server.address())
            .map_err(|e| ctx.invalid(&key, e.to_string()))?;
        if spec.port == 0 {
            return Err(ctx.invalid(&key, format!("{spec}: port 0 is not a destination")));
        }
        if spec.instance.as_deref().is_some_and(str::is_empty) {
            return Err(ctx.invalid(
                &key,
                format!(
                    "{:?}: empty instance after the port; write host:port or host:port:instance",
                    server.address()
                ),
            ));
        }
        if let Some(prev) = out
            .iter()
            .filter(|_| !c_relay)
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
        let name = o.protocol.as_deref().unwrap_or(&d.protocol);
        let (protocol, extension) = match OutputProtocol::from_name(name) {
            Some(p) => {
                if let Some(k) = o.settings.keys().next() {
                    return Err(ctx.invalid(
                        &format!("{key}.{k}"),
                        format!("unknown key for protocol \"{}\"", p.as_str()),
                    ));
                }
                (p, None)
            }
            None => {
                let e = extension_destination(
                    name,
                    &o.settings,
                    &key,
                    &spec,
                    tls.is_some(),
                    ctx,
                    extensions,
                )?;
                (OutputProtocol::default(), Some(e))
            }
        };
        if protocol == OutputProtocol::Udp && tls.is_some() {
            return Err(ctx.invalid(
                "destinations.tls",
                format!(
                    "{spec} uses protocol \"udp\": TLS needs a TCP protocol (pickle, line or protobuf)"
                ),
            ));
        }
        let compression = match o.compression.as_deref() {
            Some(word) => compression(ctx, &format!("{key}.compression"), word)?,
            None => compression(ctx, "destinations.compression", &d.compression)?,
        };
        if compression != Compression::Plain && protocol != OutputProtocol::Line {
            let at = if o.compression.is_some() {
                format!("{key}.compression")
            } else {
                "destinations.compression".to_string()
            };
            return Err(ctx.invalid(
                &at,
                format!(
                    "{spec}: compression applies to protocol \"line\" (what the receivers decompress), not \"{name}\""
                ),
            ));
        }
        let queue = queue_limits(d, &o, &key, ctx)?;
        let spill = if d.spill.dir.is_empty() {
            None
        } else {
            Some(spill_settings(&d.spill, &o, &spec, ctx)?)
        };
        if let (Some(e), Some(RawServer::Detailed(detail))) = (&extension, d.servers.get_mut(i)) {
            detail.settings = e.settings.clone();
        }
        out.push(DestinationConfig {
            spec,
            protocol,
            // `destinations.tls` is the core's TCP transport's; an extension's destination
            // has its own (and says so when it refuses the setting).
            tls: tls.clone().filter(|_| extension.is_none()),
            max_datagram_bytes: d.max_datagram_bytes,
            max_datapoints_per_message: d.max_datapoints_per_message,
            queue,
            flush_bytes: d.flush_bytes,
            linger: Duration::from_millis(d.linger_ms),
            connect_timeout: Duration::from_millis(d.connect_timeout_ms),
            backoff_min: Duration::from_millis(d.backoff_min_ms),
            backoff_max: Duration::from_millis(d.backoff_max_ms),
            write_timeout: (d.write_timeout_ms > 0)
                .then(|| Duration::from_millis(d.write_timeout_ms)),
            keepalive: (d.keepalive_secs > 0).then(|| Duration::from_secs(d.keepalive_secs)),
            compression,
            spill,
            extension,
            file: None,
        });
    }
    Ok(out)
}

/// A destination of an extension's protocol: its settings validated by that extension.
fn extension_destination(
    protocol: &str,
    settings: &toml::Table,
    key: &str,
    spec: &DestinationSpec,
    tls: bool,
    ctx: &Ctx,
    extensions: &Extensions,
) -> Result<ExtensionDestination, ConfigError> {
    let Some(extension) = extensions.get(protocol) else {
        let core: Vec<&str> = OutputProtocol::ALL.iter().map(|p| p.as_str()).collect();
        return Err(ctx.invalid(
            &format!("{key}.protocol"),
            format!(
                "unknown protocol {protocol:?}: this build has {}{} (stream protocols such as \"kinesis\" and \"kafka\" need the anthracite binary built with their Cargo features)",
                core.join(", "),
                extensions
                    .names()
                    .iter()
                    .map(|n| format!(", {n}"))
                    .collect::<String>()
            ),
        ));
    };
    let name = spec.to_string();
    let cx = DestinationContext {
        file: ctx.file,
        key,
        name: &name,
        host: &spec.host,
        port: spec.port,
        tls,
    };
    let (kind, settings) = extension.destination(settings, &cx)?;
    Ok(ExtensionDestination {
        protocol: extension.name(),
        settings,
        kind,
    })
}

/// The top-level sections that are not the core's: each validated by the extension of its
/// name into sources, and replaced by its resolved form.
pub(super) fn extension_sections(
    sections: &mut std::collections::BTreeMap<String, toml::Value>,
    ctx: &Ctx,
    max_line_length: usize,
    extensions: &Extensions,
) -> Result<Vec<std::sync::Arc<dyn SourceSpec>>, ConfigError> {
    let cx = SectionContext {
        file: ctx.file,
        max_line_length,
    };
    let mut sources = Vec::new();
    for (name, value) in sections.iter_mut() {
        let Some(extension) = extensions.get(name) else {
            return Err(ctx.invalid(
                name,
                format!(
                    "unknown section: relay.toml has {}{} (the sections of stream sources such as [[kinesis]] and [[kafka]] need the anthracite binary built with their Cargo features)",
                    RawConfig::SECTIONS.join(", "),
                    extensions
                        .names()
                        .iter()
                        .map(|n| format!(", {n}"))
                        .collect::<String>()
                ),
            ));
        };
        let section = extension.sources(value, &cx)?;
        *value = section.resolved;
        sources.extend(section.sources);
    }
    Ok(sources)
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
        full_wait: Duration::from_millis(ctx.int(
            "destinations.queue.full_wait_ms",
            d.queue.full_wait_ms,
            0,
            3_600_000,
        )?),
    };
    let (points_key, bytes_key) = match (o.max_queue_datapoints, o.max_queue_bytes) {
        (Some(_), _) | (_, Some(_)) => (
            format!("{key}.max_queue_datapoints"),
            format!("{key}.max_queue_bytes"),
        ),
        _ => (
            "destinations.queue.max_datapoints".to_string(),
            "destinations.queue.max_bytes".to_string(),
        ),
    };
    ctx.int(&points_key, limits.max_datapoints, 1, 1_000_000_000)?;
    ctx.int(&bytes_key, limits.max_bytes, 1024, 1 << 40)?;
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
    let max_age = ctx.secs(
        "destinations.spill.max_age_secs",
        raw.max_age_secs,
        1.0,
        10.0 * MAX_SECS,
        true,
    )?;
    let fsync = match raw.fsync {
        raw::RawFsync::Always => FsyncPolicy::Always,
        raw::RawFsync::Never => FsyncPolicy::Never,
        raw::RawFsync::Interval => {
            ctx.int(
                "destinations.spill.fsync_interval_ms",
                raw.fsync_interval_ms,
                1,
                3_600_000,
            )?;
            FsyncPolicy::Interval(Duration::from_millis(raw.fsync_interval_ms))
        }
    };
    let log = SpillConfig {
        max_bytes: o.spill_max_bytes.unwrap_or(raw.max_bytes),
        segment_bytes: raw.segment_bytes,
        max_age,
        fsync,
        ..SpillConfig::default()
    };
    if log.segment_bytes < 4096 || log.segment_bytes > u64::from(u32::MAX) {
        return Err(ctx.invalid(
            "destinations.spill.segment_bytes",
            "must be between 4096 bytes and 4 GiB",
        ));
    }
    let k = if o.spill_max_bytes.is_some() {
        "spill_max_bytes"
    } else {
        "destinations.spill.max_bytes"
    };
    if log.max_bytes < 2 * log.segment_bytes {
        return Err(ctx.invalid(
            k,
            format!(
                "must be at least 2 × segment_bytes ({})",
                2 * log.segment_bytes
            ),
        ));
    }
    ctx.int(k, log.max_bytes, 2 * log.segment_bytes, 1 << 50)?;
    let rate = o.replay_rate.unwrap_or(raw.replay_rate);
    let k = if o.replay_rate.is_some() {
        "replay_rate"
    } else {
        "destinations.spill.replay_rate"
    };
    ctx.int(k, rate, 0, 1_000_000_000)?;
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
    let dir = Path::new(&raw.dir).join(leaf);
    if dir.exists() && !dir.is_dir() {
        return Err(ctx.invalid(
            "destinations.spill.dir",
            format!(
                "{} (the spill log of {spec}) is not a directory",
                dir.display()
            ),
        ));
    }
    Ok(SpillSettings {
        dir,
        log,
        replay_rate: (rate > 0).then_some(rate),
    })
}

/// `destinations.spill.dir` must be usable when the relay starts: a directory that exists
/// and is writable, or one that can be created (its nearest existing ancestor is a writable
/// directory). Checked here so `anthracite check` reports it and `run` fails before binding.
fn spill_dir_usable(dir: &Path, ctx: &Ctx) -> Result<(), ConfigError> {
    const KEY: &str = "destinations.spill.dir";
    let mut existing = dir;
    loop {
        match std::fs::metadata(existing) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(ctx.invalid(KEY, format!("{} is not a directory", existing.display())));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match existing.parent() {
                    Some(p) if !p.as_os_str().is_empty() => existing = p,
                    // A relative path whose first component does not exist: the working
                    // directory is its parent.
                    _ => {
                        existing = Path::new(".");
                        break;
                    }
                }
            }
            Err(e) => {
                return Err(ctx.invalid(KEY, format!("{}: {e}", existing.display())));
            }
        }
    }
    let access = nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK;
    nix::unistd::access(existing, access).map_err(|e| {
        let what = if existing == dir {
            "is not writable"
        } else {
            "cannot be created"
        };
        ctx.invalid(
            KEY,
            format!("{} {what}: {} ({e})", dir.display(), existing.display()),
        )
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
    c_relay: Option<&crate::router::CRelayProgram>,
    ctx: &Ctx,
) -> Result<RouterSpec, ConfigError> {
    if let Some(program) = c_relay {
        return Ok(RouterSpec {
            destinations: destinations.iter().map(|d| d.spec.clone()).collect(),
            c_relay: Some(program.clone()),
            ..RouterSpec::default()
        });
    }
    ctx.int("router.replication_factor", r.replication_factor, 1, 100)?;
    let rules = if r.method == RelayMethod::Rules {
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
        c_relay: None,
    })
}

/// A warning per aggregated-router rule whose output template is worth one (see
/// [`AggregationRule::template_note`]), rule `i` named by `at(i)`.
pub(super) fn router_rule_warnings(spec: &RouterSpec, at: &dyn Fn(usize) -> String) -> Vec<String> {
    spec.aggregation_rules
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| {
            let note = rule.template_note()?;
            Some(format!(
                "{}: {:?}: {}",
                at(i),
                rule.source,
                note.router_effect()
            ))
        })
        .collect()
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
    let interval = ctx.secs(
        "telemetry.interval_secs",
        t.interval_secs,
        0.001,
        86_400.0,
        true,
    )?;
    if interval.is_some() && (t.prefix.is_empty() || t.instance.is_empty()) {
        let key = if t.prefix.is_empty() {
            "telemetry.prefix"
        } else {
            "telemetry.instance"
        };
        return Err(ctx.invalid(key, "must not be empty"));
    }
    let host = if t.host.is_empty() {
        gethostname::gethostname().to_string_lossy().into_owned()
    } else {
        t.host.clone()
    };
    if t.role != "relays" && t.role != "aggregator" {
        return Err(ctx.invalid("telemetry.role", "must be relays or aggregator"));
    }
    Ok(TelemetryConfig {
        interval,
        prefix: t.prefix.clone(),
        host,
        instance: t.instance.clone(),
        role: t.role.clone(),
    })
}

/// `[ingest]`.
pub(super) fn ingest(g: &RawIngest, ctx: &Ctx) -> Result<IngestConfig, ConfigError> {
    let reload = ctx.secs(
        "ingest.list_reload_secs",
        g.list_reload_secs,
        0.001,
        86_400.0,
        false,
    )?;
    ctx.int(
        "ingest.min_timestamp_resolution",
        g.min_timestamp_resolution,
        0,
        MAX_SECS as u64,
    )?;
    let path = |p: &str| (!p.is_empty()).then(|| PathBuf::from(p));
    Ok(IngestConfig {
        min_timestamp_resolution: g.min_timestamp_resolution,
        tag_relay_normalized: g.tag_relay_normalized,
        lists: g.use_whitelist.then(|| ListsConfig {
            whitelist: path(&g.whitelist),
            blacklist: path(&g.blacklist),
            reload_interval: reload.unwrap_or(Duration::from_secs(10)),
        }),
    })
}

/// `[admin]`: the listener's address (`None`: off).
pub(super) fn admin(a: &raw::RawAdmin, ctx: &Ctx) -> Result<Option<SocketAddr>, ConfigError> {
    ctx.addr("admin.listen", &a.listen)
}

/// `[shutdown]`.
pub(super) fn shutdown_grace(s: &raw::RawShutdown, ctx: &Ctx) -> Result<Duration, ConfigError> {
    let grace = ctx.secs("shutdown.grace_secs", s.grace_secs, 0.0, 3600.0, false)?;
    Ok(grace.unwrap_or_default())
}

/// `destinations.tls`: files read and the rustls configuration built now, so a bad file is a
/// startup error naming the key.
fn client_tls(
    raw: Option<&raw::RawClientTls>,
    ctx: &Ctx,
) -> Result<Option<ClientTls>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let path = |p: &str| (!p.is_empty()).then(|| PathBuf::from(p));
    if raw.client_cert.is_empty() != raw.client_key.is_empty() {
        return Err(ctx.invalid(
            "destinations.tls.client_key",
            "client_cert and client_key go together",
        ));
    }
    let settings = ClientTlsSettings {
        ca_file: path(&raw.ca_file),
        server_name: (!raw.server_name.is_empty()).then(|| raw.server_name.clone()),
        client_cert: path(&raw.client_cert),
        client_key: path(&raw.client_key),
        names: NameCheck::Checked,
    };
    ClientTls::new(settings)
        .map(Some)
        .map_err(|e| ctx.invalid("destinations.tls", e.to_string()))
}

/// `listen.tls`, read and built like [`client_tls`].
fn server_tls(
    raw: Option<&raw::RawServerTls>,
    ctx: &Ctx,
) -> Result<Option<ServerTls>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    for (key, value) in [
        ("listen.tls.cert_file", &raw.cert_file),
        ("listen.tls.key_file", &raw.key_file),
    ] {
        if value.is_empty() {
            return Err(ctx.invalid(key, "required with listen.tls"));
        }
    }
    let settings = ServerTlsSettings {
        cert_file: PathBuf::from(&raw.cert_file),
        key_file: PathBuf::from(&raw.key_file),
        client_ca: (!raw.client_ca.is_empty()).then(|| PathBuf::from(&raw.client_ca)),
    };
    ServerTls::new(settings)
        .map(Some)
        .map_err(|e| ctx.invalid("listen.tls", e.to_string()))
}
