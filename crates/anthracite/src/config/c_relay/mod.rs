//! carbon-c-relay import: run on an existing carbon-c-relay configuration unchanged.
//!
//! Reads the file as carbon-c-relay 3.7.3 does: [`lexer`] cuts it into tokens as its flex
//! scanner does, [`parser`] reads its bison grammar's statements, [`build`] applies each
//! statement's meaning and checks in carbon-c-relay's order (addresses resolved, servers shared
//! between clusters by address, `include` read in place, globs sorted), and [`flags`] reads its
//! command-line flags. The result is a routing [`Program`] (the core's router runs it, see
//! [`crate::router::c_relay`]), the listeners and the statistics settings, translated into a
//! [`RawConfig`] and validated by [`Config`]'s normal path, so a carbon-c-relay configuration
//! ends in the same [`Config`] as a relay.toml. What has no effect in anthracite, or differs,
//! becomes one line of [`CRelayImport::warnings`].
//!
//! Every error names the file and line (`file:line:column: message`, as carbon-c-relay
//! reports them); what carbon-c-relay's `-t -t` accepts, [`Config::load_c_relay`] accepts.

use std::fmt::{self, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

mod address;
mod build;
mod flags;
mod lexer;
mod overlay;
mod parser;

pub use flags::CRelayFlags;

use super::raw::{RawConfig, RawServer, RawServerDetail};
use super::{Config, ConfigError, ExtraLine, ListenerPem};
use crate::destination::OutputProtocol;
use crate::protocol::c_relay::Cleansing;
use crate::queue::WhenFull;
use crate::router::c_relay::print::{PrintMode, quoteident};
use crate::router::c_relay::{Compression, Dest, Program, ServerProto};
use crate::router::{CRelayProgram, CRelayStatistics, DestinationSpec};
use crate::tls::{ClientTls, ClientTlsSettings, NameCheck};

/// How to read a carbon-c-relay configuration: its file and its command-line flags.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CRelayOptions {
    /// The configuration (carbon-c-relay's `-f`). Relative `include` paths are read from
    /// the working directory, as carbon-c-relay reads them.
    pub path: PathBuf,
    /// carbon-c-relay's other flags, as given to it (`-p 2003 -H relay1 -q 50000`).
    pub flags: CRelayFlags,
    /// The parent directory of the members' spill logs (`--spill-dir`): when set, a member's
    /// queue overflows to disk instead of dropping. Overrides the overlay's `[spill] dir`.
    pub spill_dir: Option<PathBuf>,
    /// A small TOML file with what the configuration language cannot say: `[spill]`,
    /// `[admin]`, `[limits]` (`--carbon-c-relay-overlay`).
    pub overlay: Option<PathBuf>,
}

impl CRelayOptions {
    /// Options for `path` with carbon-c-relay's default flags.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            flags: CRelayFlags::default(),
            spill_dir: None,
            overlay: None,
        }
    }
}

/// An error in a carbon-c-relay configuration: where, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CRelayError {
    pub file: String,
    /// 1-based (0 when the file itself could not be read).
    pub line: usize,
    /// 0-based, as carbon-c-relay counts.
    pub col: usize,
    pub message: String,
}

impl fmt::Display for CRelayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(
                f,
                "line {}, column {}: {}",
                self.line, self.col, self.message
            )
        }
    }
}

impl From<CRelayError> for ConfigError {
    fn from(e: CRelayError) -> Self {
        ConfigError::Syntax {
            file: e.file.clone(),
            message: e.to_string(),
        }
    }
}

/// The `statistics` settings.
#[derive(Clone, Debug)]
pub(crate) struct Collector {
    /// Seconds between submissions.
    pub interval: i32,
    /// The names' prefix, the template applied to the hostname.
    pub prefix: String,
    /// `reset counters after interval`.
    pub reset: bool,
    /// The stub its datapoints carry when they have targets of their own (`send to`).
    pub stub: Option<String>,
    pub targets: Vec<Dest>,
}

impl Default for Collector {
    fn default() -> Self {
        Self {
            interval: 60,
            prefix: String::new(),
            reset: false,
            stub: None,
            targets: Vec::new(),
        }
    }
}

/// A receptor's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListenerProto {
    Tcp,
    Udp,
    Unix,
}

/// One listener (`listen` receptor, or a default one).
#[derive(Clone, Debug)]
pub(crate) struct Listener {
    pub proto: ListenerProto,
    /// The interface as written (`None`: any), or the socket's path.
    pub ip: Option<String>,
    pub port: u16,
    /// What the interface resolved to.
    pub addrs: Vec<SocketAddr>,
    pub compression: Compression,
    /// `ssl PEMCERT`: the certificate and its key, in one file.
    pub ssl: Option<String>,
    /// Where the `listen` statement is (`file:line`), for what is wrong with its `ssl` file.
    pub origin: String,
}

/// Everything read from a carbon-c-relay configuration: what `route` prints.
#[derive(Clone, Debug)]
pub(crate) struct CRelaySetup {
    pub path: String,
    pub flags: CRelayFlags,
    pub hostname: String,
    pub program: Arc<Program>,
    pub collector: Collector,
    pub listeners: Vec<Listener>,
}

/// A carbon-c-relay configuration translated into a validated [`Config`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CRelayImport {
    /// The configuration to run.
    pub config: Config,
    /// One line per construct or flag that has no effect in anthracite (or differs); log them.
    pub warnings: Vec<String>,
    pub(crate) setup: Arc<CRelaySetup>,
    /// The overlay's `[limits]`, its defaults where it sets none.
    pub(crate) limits: overlay::Limits,
}

/// The machine's name, as carbon-c-relay takes it (`gethostname`).
fn hostname(flags: &CRelayFlags) -> String {
    flags.hostname.clone().unwrap_or_else(|| {
        gethostname::gethostname()
            .into_string()
            .unwrap_or_else(|_| "127.0.0.1".into())
    })
}

/// Reads `options.path` and everything it includes.
pub(crate) fn load(options: &CRelayOptions) -> Result<CRelayImport, ConfigError> {
    if let Some(ca) = &options.flags.ca
        && let Err(e) = std::fs::metadata(ca)
    {
        // carbon-c-relay checks it before it reads the configuration, in `-t` too.
        return Err(ConfigError::invalid(
            options.path.display(),
            "-C",
            format!("failed to open TLS/SSL CA file '{ca}': {e}"),
        ));
    }
    let setup = read(options)?;
    let overlay = overlay::Overlay::load(options.overlay.as_deref(), options.spill_dir.as_ref())?;
    let (config, mut warnings) = to_config(&setup, &overlay)?;
    warnings.extend(
        options
            .flags
            .ignored
            .iter()
            .map(|f| format!("carbon-c-relay flag {f}: no effect in anthracite")),
    );
    Ok(CRelayImport {
        config,
        warnings,
        setup: Arc::new(setup),
        limits: overlay.limits.clone(),
    })
}

/// The first stage: the files read into a program, listeners and statistics.
fn read(options: &CRelayOptions) -> Result<CRelaySetup, CRelayError> {
    let path = options.path.display().to_string();
    let host = hostname(&options.flags);
    let mut b = build::Builder::new(&host);
    b.read(&path)?;
    b.default_listeners(options.flags.port);
    let (mut program, b) = b.finish(options.flags.optimiser);
    program.cleansing = Cleansing::new(options.flags.allowed().as_bytes());
    Ok(CRelaySetup {
        path,
        flags: options.flags.clone(),
        hostname: host,
        program: Arc::new(program),
        collector: b.collector,
        listeners: b.listeners,
    })
}

/// Reads a configuration from text without touching anything outside (no `include`, no
/// name service, no files), prints it back as `-t` does and routes `lines` through it: the
/// fuzz target's entry. `Err` is the configuration's error.
pub fn check_text(text: &[u8], lines: &[&[u8]]) -> Result<String, String> {
    let mut b = build::Builder::offline("fuzz.example");
    b.read_text("<text>", text).map_err(|e| e.to_string())?;
    let (program, _) = b.finish(Some(50));
    let mut out = String::new();
    program.print(
        PrintMode {
            aggregations: true,
            hash: true,
            stubs: true,
        },
        &mut out,
    );
    let mut routed = crate::router::c_relay::Routed::default();
    let env = crate::router::c_relay::route::Env { failed: &|_| false };
    for line in lines {
        program.test_line(line, true, &mut out);
        let firstspace = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
        program.route(line, firstspace, b"127.0.0.1", &env, &mut routed);
    }
    Ok(out)
}

/// The second stage: a [`RawConfig`] for the normal validation path, with the program as its
/// routing.
fn to_config(
    setup: &CRelaySetup,
    overlay: &overlay::Overlay,
) -> Result<(Config, Vec<String>), ConfigError> {
    let mut warnings = Vec::new();
    let flags = &setup.flags;
    let mut raw = RawConfig::default();
    // `line_tcp` is the first TCP address of a listener without `ssl`: `listen.tls` would
    // apply to every receiver, so each `ssl` listener is an extra receiver with its own.
    let first = |p: ListenerProto| {
        setup
            .listeners
            .iter()
            .filter(|l| l.proto == p && l.ssl.is_none())
            .find_map(|l| l.addrs.first().map(|a| (*a, l.compression)))
    };
    let line_tcp = first(ListenerProto::Tcp);
    raw.listen.line_tcp = line_tcp.map_or(String::new(), |(a, _)| a.to_string());
    raw.listen.line_tcp_compression = line_tcp
        .map_or(Compression::Plain, |(_, c)| c)
        .word()
        .into();
    raw.listen.line_udp = first(ListenerProto::Udp).map_or(String::new(), |(a, _)| a.to_string());
    raw.listen.pickle_tcp = String::new();
    raw.listen.backlog = flags.backlog;
    raw.listen.max_line_length = flags.max_input().max(64);
    raw.listen.max_name_length = flags.max_metric().clamp(16, 1 << 20);
    raw.listen.idle_timeout_secs = if flags.no_expire { 0.0 } else { 600.0 };
    if let Some(b) = flags.sockbuf {
        raw.listen.udp_recv_buffer = (b as usize).max(4096);
    }
    // Every other address, and every Unix socket, is an extra receiver.
    let (mut tcp_first, mut udp_first) = (line_tcp.is_some(), true);
    for l in &setup.listeners {
        let pem = l.ssl.as_ref().map(|path| ListenerPem {
            path: path.into(),
            origin: l.origin.clone(),
        });
        if let Some(Err(e)) = pem.as_ref().map(ListenerPem::load) {
            // carbon-c-relay's `-t` does not read the file either; its start refuses it.
            let warning = format!("{e}; `run` refuses to start without it");
            // Once per statement, not per address.
            if !warnings.contains(&warning) {
                warnings.push(warning);
            }
        }
        match l.proto {
            ListenerProto::Tcp => {
                for a in &l.addrs {
                    if pem.is_some() || !std::mem::take(&mut tcp_first) {
                        raw.extra_line
                            .push(ExtraLine::Tcp(*a, l.compression, pem.clone()));
                    }
                }
            }
            ListenerProto::Udp => {
                for a in &l.addrs {
                    if !std::mem::take(&mut udp_first) {
                        raw.extra_line.push(ExtraLine::Udp(*a));
                    }
                }
            }
            ListenerProto::Unix => {
                if let Some(path) = &l.ip {
                    raw.extra_line
                        .push(ExtraLine::Unix(path.into(), l.compression, pem));
                }
            }
        }
    }
    let servers = &setup.program.servers;
    raw.destinations.protocol = OutputProtocol::Line.as_str().into();
    raw.destinations.queue.max_datapoints = flags.queue_size;
    raw.destinations.queue.when_full = Some(WhenFull::DropNewest);
    raw.destinations.queue.full_wait_ms = u64::from(flags.max_stalls) * 1000;
    raw.destinations.connect_timeout_ms = u64::from(flags.io_timeout_ms);
    if let Some(spill) = overlay.spill() {
        // A member's queue keeps `-q` datapoints in memory and the rest on disk.
        raw.destinations.spill = spill.clone();
        raw.destinations.queue.when_full = Some(WhenFull::Spill);
    }
    raw.admin = overlay.admin.clone();
    for s in servers {
        if s.syslog {
            warnings.push(format!(
                "{}:{}: type syslog is sent as linemode",
                s.display_ip(),
                s.port
            ));
        }
        if s.proto == ServerProto::Udp && s.transport.ssl {
            warnings.push(format!(
                "{}:{}: proto udp with ssl is sent as plaintext datagrams: TLS needs a stream \
                 (carbon-c-relay 3.7.3 sends a TLS hello in a datagram and delivers nothing)",
                s.display_ip(),
                s.port
            ));
        }
        let spec = destination_spec(s);
        raw.destinations
            .servers
            .push(RawServer::Detailed(Box::new(RawServerDetail {
                address: spec.to_string(),
                protocol: Some(
                    if s.proto == ServerProto::Udp {
                        OutputProtocol::Udp
                    } else {
                        OutputProtocol::Line
                    }
                    .as_str()
                    .into(),
                ),
                compression: (s.proto == ServerProto::Tcp
                    && s.transport.compression != Compression::Plain)
                    .then(|| s.transport.compression.word().into()),
                ..RawServerDetail::default()
            })));
    }
    raw.telemetry.interval_secs = 0.0;
    let mut program = CRelayProgram::new(
        setup.program.clone(),
        overlay.limits.max_aggregation_series,
        overlay.limits.max_aggregation_values,
    );
    if setup.collector.interval > 0 && !flags.submission {
        let c = &setup.collector;
        program.statistics = Some(Arc::new(CRelayStatistics {
            interval: c.interval.unsigned_abs(),
            prefix: format!("{}{}.", c.stub.as_deref().unwrap_or(""), c.prefix),
            dispatchers: flags.workers.map_or_else(
                || std::thread::available_parallelism().map_or(1, usize::from),
                |w| w as usize,
            ),
            reset: c.reset,
        }));
    }
    raw.c_relay = Some(program);
    let mut config = Config::from_raw(raw, &setup.path)?;
    let tls = member_tls(setup, &mut warnings)?;
    // A file member's destination appends to its file (one destination per server, in order);
    // an `ssl` member's connection is inside TLS, its compressed stream within it.
    for (s, d) in servers.iter().zip(config.destinations.iter_mut()) {
        if s.proto == ServerProto::File {
            d.file = Some(s.ip.clone().into());
        }
        if s.proto == ServerProto::Tcp && s.transport.ssl {
            d.tls = tls.clone();
        }
    }
    Ok((config, warnings))
}

/// The TLS of the `ssl` members (`None` when there are none): verified as carbon-c-relay 3.7.3
/// verifies them, against `-C` and without a host name check.
fn member_tls(
    setup: &CRelaySetup,
    warnings: &mut Vec<String>,
) -> Result<Option<ClientTls>, ConfigError> {
    if !setup
        .program
        .servers
        .iter()
        .any(|s| s.proto == ServerProto::Tcp && s.transport.ssl)
    {
        return Ok(None);
    }
    let ca = setup.flags.ca.as_ref();
    if ca.is_none() {
        warnings.push(
            "transport ssl without -C: the members' certificates are checked against the \
             system's CA store (carbon-c-relay 3.7.3 trusts no certificate without -C)"
                .into(),
        );
    }
    ClientTls::new(ClientTlsSettings {
        ca_file: ca.map(PathBuf::from),
        names: NameCheck::ChainOnly,
        ..ClientTlsSettings::default()
    })
    .map(Some)
    .map_err(|e| ConfigError::invalid(&setup.path, "-C", e.to_string()))
}

/// The destination of a server: `host:port`, a UDP one with instance `udp` (carbon-c-relay
/// names it `host:port-udp`), a file by its path.
fn destination_spec(s: &crate::router::c_relay::Server) -> DestinationSpec {
    DestinationSpec {
        host: s.ip.clone(),
        port: if s.proto == ServerProto::File {
            1
        } else {
            s.port
        },
        instance: match s.proto {
            ServerProto::Udp => Some("udp".into()),
            ServerProto::File => Some("file".into()),
            ServerProto::Tcp => None,
        },
    }
}

impl CRelayImport {
    /// The overlay's `[limits]` as they apply (the defaults where the overlay sets none), as
    /// comment lines: what `check` prints after carbon-c-relay's settings.
    pub fn limits_text(&self) -> String {
        let l = &self.limits;
        format!(
            "# overlay [limits]:\n#   max_aggregation_series = {}\n#   max_aggregation_values = {}\n",
            l.max_aggregation_series, l.max_aggregation_values
        )
    }

    /// What `carbon-c-relay -t -f FILE` prints before it reads names: its settings, then the
    /// configuration as it understood it.
    pub fn test_header(&self) -> String {
        let s = &self.setup;
        let f = &s.flags;
        let mut out = String::new();
        let workers = if f.submission {
            2
        } else {
            f.workers.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
            })
        };
        let _ = writeln!(out, "configuration:");
        let _ = writeln!(out, "    relay hostname = {}", s.hostname);
        let _ = writeln!(out, "    workers = {workers}");
        let _ = writeln!(out, "    send batch size = {}", f.batch_size);
        let _ = writeln!(out, "    server queue size = {}", f.queue_size);
        let _ = writeln!(out, "    server max stalls = {}", f.max_stalls);
        let _ = writeln!(out, "    listen backlog = {}", f.backlog);
        if let Some(b) = f.sockbuf {
            let _ = writeln!(out, "    socket bufsize = {b}");
        }
        if let Some(ca) = &f.ca {
            let _ = writeln!(out, "    tls/ssl CA = {ca}");
        }
        let _ = writeln!(
            out,
            "    server connection IO timeout = {}ms",
            f.io_timeout_ms
        );
        let _ = writeln!(
            out,
            "    idle connections disconnect timeout = {}",
            if f.no_expire { "never" } else { "10m" }
        );
        if let Some(c) = &f.allowed_chars {
            let _ = writeln!(out, "    extra allowed characters = {c}");
        }
        if f.max_input() < flags::METRIC_BUFSIZ {
            let _ = writeln!(out, "    max input length = {}", f.max_input());
        }
        if f.max_metric() < f.max_input() {
            let _ = writeln!(out, "    max metric length = {}", f.max_metric());
        }
        if f.debug > 0 {
            let _ = writeln!(out, "    debug = true");
        } else if f.submission {
            let _ = writeln!(out, "    submission = true");
        }
        let _ = writeln!(out, "    configuration = {}", s.path);
        out.push('\n');
        let debug = f.debug > 0;
        let aggregators = s.program.aggregators.len();
        out.push_str("parsed configuration follows:\n");
        let mode = if aggregators > 10 && !debug {
            let computes: usize = s.program.aggregators.iter().map(|a| a.computes.len()).sum();
            let _ = writeln!(
                out,
                "({aggregators} aggregations with {computes} computations omitted for brevity)"
            );
            PrintMode::default()
        } else {
            PrintMode {
                aggregations: true,
                hash: debug,
                stubs: debug,
            }
        };
        self.print_config(mode, &mut out);
        out.push('\n');
        out
    }

    /// `router_printconfig`: listeners, statistics, clusters, routes.
    fn print_config(&self, mode: PrintMode, out: &mut String) {
        let s = &self.setup;
        if !s.listeners.is_empty() {
            out.push_str("listen\n");
            let mut i = 0;
            while i < s.listeners.len() {
                let l = &s.listeners[i];
                let wrapped = l.compression != Compression::Plain || l.ssl.is_some();
                let _ = write!(
                    out,
                    "    type linemode{}{}{}{}",
                    if wrapped { " transport " } else { "" },
                    if l.compression == Compression::Plain {
                        ""
                    } else {
                        l.compression.word()
                    },
                    if l.ssl.is_some() { " ssl " } else { "" },
                    l.ssl.as_deref().map(quoteident).unwrap_or_default()
                );
                if l.ssl.is_some() && mode.stubs {
                    let (secs, nanos) = l
                        .ssl
                        .as_deref()
                        .and_then(|p| std::fs::metadata(p).ok())
                        .and_then(|m| m.modified().ok())
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map_or((0, 0), |d| (d.as_secs(), d.subsec_nanos()));
                    let _ = write!(out, "  # mtime {secs}.{nanos}");
                }
                out.push('\n');
                loop {
                    let l = &s.listeners[i];
                    match l.proto {
                        ListenerProto::Unix => {
                            let _ = writeln!(
                                out,
                                "        {} proto unix",
                                quoteident(l.ip.as_deref().unwrap_or(""))
                            );
                        }
                        p => {
                            let _ = writeln!(
                                out,
                                "        {}{}{} proto {}",
                                l.ip.as_deref().unwrap_or(""),
                                if l.ip.is_some() { ":" } else { "" },
                                l.port,
                                if p == ListenerProto::Udp {
                                    "udp"
                                } else {
                                    "tcp"
                                }
                            );
                        }
                    }
                    let same = s.listeners.get(i + 1).is_some_and(|n| {
                        n.compression == l.compression && n.ssl.is_some() == l.ssl.is_some()
                    });
                    if !same {
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            out.push_str("    ;\n\n");
        }
        let c = &s.collector;
        if c.interval > 0 {
            let _ = writeln!(out, "statistics\n    submit every {} seconds", c.interval);
            if c.reset {
                out.push_str("    reset counters after interval\n");
            }
            let _ = writeln!(out, "    prefix with {}", quoteident(&c.prefix));
            if c.stub.is_some() {
                out.push_str("    send to");
                let name = |d: &Dest| match d {
                    Dest::Cluster(i) => s
                        .program
                        .clusters
                        .get(*i)
                        .map_or(String::new(), |c| quoteident(&c.name)),
                    _ => "blackhole".into(),
                };
                if c.targets.len() == 1 {
                    let _ = write!(out, " {}", name(&c.targets[0]));
                } else {
                    for d in &c.targets {
                        let _ = write!(out, "\n        {}", name(d));
                    }
                }
                out.push_str("\n    stop\n");
            }
            out.push_str("    ;\n\n");
        }
        s.program.print(mode, out);
    }

    /// What `carbon-c-relay -t` prints for one line of its input (`None` for a blank line,
    /// which it skips).
    pub fn test_line(&self, line: &str) -> Option<String> {
        if line.trim_start().is_empty() {
            return None;
        }
        let mut out = String::new();
        self.setup
            .program
            .test_line(line.as_bytes(), self.setup.flags.debug > 0, &mut out);
        Some(out)
    }
}

#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod tests;
