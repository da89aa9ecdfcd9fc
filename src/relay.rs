//! Wires the stages together. (work in progress)

use std::future::Future;

use crate::config::Config;

/// A relay ready to run.
pub struct Relay {}
/// Builds a [`Relay`].
pub struct RelayBuilder {}
/// A cheap handle onto a running relay.
#[derive(Clone)]
pub struct RelayHandle {}

impl Relay {
    /// Starts building a relay from a validated config.
    pub fn builder(config: Config) -> RelayBuilder {
        let _ = config;
        RelayBuilder {}
    }
    /// Runs until `shutdown` completes, then shuts down in order.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), std::io::Error> {
        shutdown.await;
        Ok(())
    }
}

impl RelayBuilder {
    /// Serves plaintext on an already-bound listener.
    pub fn line_listener(self, l: tokio::net::TcpListener) -> Self {
        let _ = l;
        self
    }
    /// Builds the relay.
    pub fn build(self) -> Result<Relay, std::io::Error> {
        Ok(Relay {})
    }
}
