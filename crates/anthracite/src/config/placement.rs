//! [`Placement`]: where a configuration sends each name, as `anthracite route` prints it.

use super::Config;
use crate::router::{Router, RouterError};

/// The destinations a configuration's routing gives each metric name, in carbon's preference
/// order (duplicates included where carbon yields them), without running a relay.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = anthracite::Config::builder()
///     .destinations(["127.0.0.1:2104:a", "127.0.0.1:2204:b"])
///     .build()?;
/// let placement = anthracite::Placement::new(&config)?;
/// let first = placement.destinations("servers.web-1.cpu.user");
/// assert_eq!(first.len(), 1);
/// assert!(first[0] == "127.0.0.1:2104:a" || first[0] == "127.0.0.1:2204:b");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Placement {
    router: Router,
}

impl Placement {
    /// Builds the configuration's router (the same one a running relay builds).
    pub fn new(config: &Config) -> Result<Self, RouterError> {
        Ok(Placement {
            router: Router::new(config.router.clone())?,
        })
    }

    /// The destinations of `name` as `host:port[:instance]`, in preference order.
    pub fn destinations(&self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.router.route_into(name.as_bytes(), &mut out);
        out.iter()
            .filter_map(|&i| self.router.destinations().get(usize::from(i)))
            .map(ToString::to_string)
            .collect()
    }

    /// Every destination the configuration routes to, as `host:port[:instance]`.
    pub fn all_destinations(&self) -> Vec<String> {
        self.router
            .destinations()
            .iter()
            .map(ToString::to_string)
            .collect()
    }
}
