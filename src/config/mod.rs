//! Configuration. (work in progress)

/// Validated configuration.
#[derive(Clone, Debug)]
pub struct Config {}

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// TOML did not parse.
    #[error("{0}")]
    Toml(String),
}

impl Config {
    /// Parses and validates relay.toml text.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let _ = text;
        todo!()
    }
}
