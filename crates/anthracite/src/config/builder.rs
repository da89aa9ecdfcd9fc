//! [`ConfigBuilder`]: a [`Config`] in code, for embedders, with typed values.
//!
//! It fills the same raw structs `relay.toml` deserialises into and validates them the same
//! way, so a builder and a file with the same settings give the same `Config` — except for one
//! default: **a builder binds nothing unless asked.** `relay.toml` defaults to carbon's ports
//! (2003, 2004 on 0.0.0.0); a program embedding the relay owns its sockets (inject listeners
//! with [`RelayBuilder`](crate::RelayBuilder)) or names the addresses here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::raw::{RawConfig, RawServer};
use super::{Config, ConfigError};
use crate::destination::OutputProtocol;
use crate::queue::WhenFull;
use crate::router::HashType;

/// Builds a [`Config`] with typed setters; start with [`Config::builder`].
///
/// ```
/// use std::time::Duration;
/// use anthracite::{Config, WhenFull};
///
/// let config = Config::builder()
///     .destinations(["127.0.0.1:2104:a", "127.0.0.1:2204:b"])
///     .line_tcp("127.0.0.1:2003".parse().ok())
///     .when_full(WhenFull::Block)
///     .telemetry_interval(None)
///     .shutdown_grace(Duration::from_secs(5))
///     .build()?;
/// # Ok::<(), anthracite::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct ConfigBuilder {
    raw: RawConfig,
}

fn addr_text(addr: Option<SocketAddr>) -> String {
    addr.map(|a| a.to_string()).unwrap_or_default()
}

impl ConfigBuilder {
    pub(super) fn new() -> Self {
        let mut raw = RawConfig::default();
        raw.listen.line_tcp.clear();
        raw.listen.pickle_tcp.clear();
        raw.listen.line_udp.clear();
        Self { raw }
    }

    /// Destinations in carbon's `DESTINATIONS` syntax, `host:port[:instance]`, in ring order.
    pub fn destinations<I, S>(mut self, servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.raw.destinations.servers = servers
            .into_iter()
            .map(|s| RawServer::Address(s.into()))
            .collect();
        self
    }

    /// Plaintext over TCP on this address (`None`, the builder's default: not bound).
    pub fn line_tcp(mut self, addr: Option<SocketAddr>) -> Self {
        self.raw.listen.line_tcp = addr_text(addr);
        self
    }

    /// Pickle over TCP on this address (`None`, the builder's default: not bound).
    pub fn pickle_tcp(mut self, addr: Option<SocketAddr>) -> Self {
        self.raw.listen.pickle_tcp = addr_text(addr);
        self
    }

    /// carbon's protobuf over TCP on this address (`None`, the default: not bound).
    pub fn protobuf_tcp(mut self, addr: Option<SocketAddr>) -> Self {
        self.raw.listen.protobuf_tcp = addr_text(addr);
        self
    }

    /// Most client connections over every TCP receiver (`listen.max_connections`, default
    /// 10,000); at the limit the idlest connection is closed to admit a new one.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.raw.listen.max_connections = connections;
        self
    }

    /// Closes a client connection that sends nothing for this long (`listen.idle_timeout_secs`,
    /// default 600 s; `None`: never).
    pub fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.raw.listen.idle_timeout_secs = timeout.map_or(0.0, |d| d.as_secs_f64());
        self
    }

    /// What destinations are sent (`destinations.protocol`, default pickle, as carbon-relay
    /// sends to carbon-cache).
    pub fn protocol(mut self, protocol: OutputProtocol) -> Self {
        self.raw.destinations.protocol = protocol.as_str().to_string();
        self
    }

    /// carbon's `ROUTER_HASH_TYPE` for the consistent-hashing ring (`router.hash_type`,
    /// default `carbon_ch`).
    pub fn hash_type(mut self, hash: HashType) -> Self {
        self.raw.router.hash_type = hash;
        self
    }

    /// Plaintext over UDP on this address (`None`, the default: not bound).
    pub fn line_udp(mut self, addr: Option<SocketAddr>) -> Self {
        self.raw.listen.line_udp = addr_text(addr);
        self
    }

    /// What a full destination queue does (`destinations.queue.when_full`).
    pub fn when_full(mut self, policy: WhenFull) -> Self {
        self.raw.destinations.queue.when_full = Some(policy);
        self
    }

    /// Each destination queue's memory bound (`destinations.queue.max_datapoints` and
    /// `max_bytes`).
    pub fn queue_bounds(mut self, max_datapoints: usize, max_bytes: usize) -> Self {
        self.raw.destinations.queue.max_datapoints = max_datapoints;
        self.raw.destinations.queue.max_bytes = max_bytes;
        self
    }

    /// Spill full queues to disk below this directory (`destinations.spill.dir`).
    pub fn spill_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.raw.destinations.spill.dir = dir.into().to_string_lossy().into_owned();
        self
    }

    /// Copies of each datapoint (`router.replication_factor`, carbon's `REPLICATION_FACTOR`).
    pub fn replication_factor(mut self, copies: usize) -> Self {
        self.raw.router.replication_factor = copies;
        self
    }

    /// How often the relay's own metrics join the stream (`None`: never).
    pub fn telemetry_interval(mut self, every: Option<Duration>) -> Self {
        self.raw.telemetry.interval_secs = every.map_or(0.0, |d| d.as_secs_f64());
        self
    }

    /// Serves `/metrics`, `/healthz`, `/ready` and `/destinations` on this address (`None`,
    /// the default: no admin listener).
    pub fn admin_listen(mut self, addr: Option<SocketAddr>) -> Self {
        self.raw.admin.listen = addr_text(addr);
        self
    }

    /// How long shutdown may take to flush the queues.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.raw.shutdown.grace_secs = grace.as_secs_f64();
        self
    }

    /// Validates the settings, as `relay.toml` is validated.
    pub fn build(self) -> Result<Config, ConfigError> {
        Config::from_raw(self.raw, "<builder>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_binds_nothing_unless_asked() {
        let c = Config::builder()
            .destinations(["127.0.0.1:2104:a"])
            .build()
            .expect("valid");
        assert_eq!(c.listen.line_tcp, None);
        assert_eq!(c.listen.pickle_tcp, None);
        assert_eq!(c.listen.line_udp, None);
        let addr: SocketAddr = "127.0.0.1:2003".parse().expect("addr");
        let c = Config::builder()
            .destinations(["127.0.0.1:2104:a"])
            .line_tcp(Some(addr))
            .when_full(WhenFull::Block)
            .build()
            .expect("valid");
        assert_eq!(c.listen.line_tcp, Some(addr));
        assert_eq!(c.destinations[0].queue.when_full, WhenFull::Block);
        let err = Config::builder().build().expect_err("no destinations");
        assert!(err.to_string().contains("destinations.servers"), "{err}");
    }
}
