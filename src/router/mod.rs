//! Routing: which destinations get a datapoint, exactly as carbon 1.1.10 decides.
//!
//! (Stub: implemented by the router work.)

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A destination as written in carbon's `DESTINATIONS`: `host:port[:instance]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct DestinationSpec {
    /// Host as written (no brackets for IPv6).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Optional instance name (part of the ring key; the port is not).
    pub instance: Option<String>,
}

/// Errors building a router or parsing a destination.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// Destination text is not `host:port[:instance]`.
    #[error("invalid destination {0:?}: expected host:port[:instance] or [ipv6]:port[:instance]")]
    BadDestination(String),
}

impl DestinationSpec {
    /// Parses `host:port[:instance]` or `[ipv6]:port[:instance]`.
    pub fn parse(text: &str) -> Result<Self, RouterError> {
        let _ = text;
        todo!("router work")
    }
}

/// carbon's `ROUTER_HASH_TYPE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum HashType {
    /// MD5, first two bytes.
    #[default]
    #[serde(rename = "carbon_ch")]
    CarbonCh,
    /// FNV-1a 32, folded to 16 bits.
    #[serde(rename = "fnv1a_ch")]
    Fnv1aCh,
    /// MurmurHash3 x86_32.
    #[serde(rename = "mmh3_ch")]
    Mmh3Ch,
}

/// carbon's `RELAY_METHOD`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Consistent-hashing ring.
    #[default]
    ConsistentHashing,
    /// Sorted node list, start at hash mod N.
    FastHashing,
    /// Ordered regex rules.
    Rules,
}

/// One routing rule (indices into the destination list).
#[derive(Clone, Debug)]
pub struct RuleSpec {
    /// Regex searched (unanchored) in the metric name; `None` for the default rule.
    pub pattern: Option<String>,
    /// Destination indices, in order.
    pub destinations: Vec<u16>,
    /// Keep evaluating later rules after a match.
    pub continue_matching: bool,
}

/// Everything needed to build a [`Router`].
#[derive(Clone, Debug)]
pub struct RouterSpec {
    /// Routing method.
    pub method: Method,
    /// Hash for ring positions.
    pub hash_type: HashType,
    /// Copies per datapoint.
    pub replication_factor: usize,
    /// At most one copy per host string.
    pub diverse_replicas: bool,
    /// Destinations; order is ring insertion order.
    pub destinations: Vec<DestinationSpec>,
    /// Rules, in evaluation order, the default rule last (method `rules` only).
    pub rules: Vec<RuleSpec>,
}

/// An immutable router, shared by every connection.
#[derive(Debug)]
pub struct Router {}

impl Router {
    /// Builds the ring (or rule table).
    pub fn new(spec: RouterSpec) -> Result<Self, RouterError> {
        let _ = spec;
        todo!("router work")
    }

    /// Destination indices for `name`, in preference order (carbon may repeat one).
    pub fn route_into(&self, name: &[u8], out: &mut Vec<u16>) {
        let _ = (name, out);
        todo!("router work")
    }

    /// The destinations, indexed as routes refer to them.
    pub fn destinations(&self) -> &[DestinationSpec] {
        todo!("router work")
    }
}

/// A per-connection cache in front of a [`Router`]: repeated names skip the hash.
#[derive(Debug)]
pub struct RouteCache {
    router: Arc<Router>,
}

impl RouteCache {
    /// A cache holding at most `capacity` names.
    pub fn new(router: Arc<Router>, capacity: usize) -> Self {
        let _ = capacity;
        Self { router }
    }

    /// Destination indices for `name`, from the cache when seen before.
    pub fn route(&mut self, name: &[u8]) -> &[u16] {
        let _ = (name, &self.router);
        todo!("router work")
    }
}

impl std::fmt::Display for DestinationSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)?;
        if let Some(i) = &self.instance {
            write!(f, ":{i}")?;
        }
        Ok(())
    }
}
