//! carbon's `relay-rules.conf`, read from its text as `loadRelayRules` does.

use crate::config::ConfigError;
use crate::config::ini::{self, Ini};
use crate::config::raw::RawRule;
use crate::router::DestinationSpec;

/// carbon's `loadRelayRules` on the text of `file` (relay-rules.conf): sections in file
/// order, each `destinations` kept only where it is one of `configured` (carbon's router
/// yields only configured destinations).
pub fn parse_relay_rules(
    text: &str,
    file: &str,
    configured: &[DestinationSpec],
    warnings: &mut Vec<String>,
) -> Result<Vec<RawRule>, ConfigError> {
    let file = file.to_string();
    let ini = Ini::parse(text).map_err(|e| ConfigError::Syntax {
        file: file.clone(),
        message: e.to_string(),
    })?;
    let invalid = |section: &str, key: &str, message: String| {
        ConfigError::invalid(&file, format!("[{section}] {key}"), message)
    };
    let get = |section: &str, key: &str| -> Result<Option<String>, ConfigError> {
        ini.get(section, key)
            .transpose()
            .map_err(|e| invalid(section, key, e.to_string()))
    };
    let mut rules = Vec::new();
    let mut default: Option<RawRule> = None;
    for section in ini.sections() {
        let Some(dests) = get(section, "destinations")? else {
            return Err(invalid(
                section,
                "destinations",
                "the section does not define a 'destinations' list".into(),
            ));
        };
        let mut kept = Vec::new();
        for d in dests.split(',').filter(|d| !d.trim().is_empty()) {
            let spec = DestinationSpec::parse(d)
                .map_err(|e| invalid(section, "destinations", e.to_string()))?;
            if configured.contains(&spec) {
                kept.push(spec.to_string());
            } else {
                warnings.push(format!(
                    "{file}: [{section}] destinations: {spec} is not in DESTINATIONS; carbon never sends there and neither does anthracite"
                ));
            }
        }
        if kept.is_empty() {
            warnings.push(format!(
                "{file}: [{section}] destinations: none is in DESTINATIONS, so names this rule matches are relayed nowhere (carbon does the same)"
            ));
        }
        let boolean = |key: &str| -> Result<Option<bool>, ConfigError> {
            match get(section, key)? {
                None => Ok(None),
                Some(v) => ini::parse_bool(&v)
                    .map(Some)
                    .ok_or_else(|| invalid(section, key, format!("{v:?} is not a boolean"))),
            }
        };
        if let Some(pattern) = get(section, "pattern")? {
            if ini.has_option(section, "default") {
                return Err(invalid(
                    section,
                    "pattern",
                    "the section has both 'pattern' and 'default'; use one or the other".into(),
                ));
            }
            crate::pattern::Pattern::case_insensitive(&pattern)
                .map_err(|e| invalid(section, "pattern", e.to_string()))?;
            rules.push(RawRule {
                pattern: Some(pattern),
                default: false,
                destinations: kept,
                continue_matching: boolean("continue")?.unwrap_or(false),
            });
            continue;
        }
        match boolean("default")? {
            Some(true) => {
                if default.is_some() {
                    return Err(invalid(
                        section,
                        "default",
                        "only one default rule can be specified".into(),
                    ));
                }
                default = Some(RawRule {
                    pattern: None,
                    default: true,
                    destinations: kept,
                    continue_matching: false,
                });
            }
            Some(false) => {}
            None => warnings.push(format!(
                "{file}: [{section}] has neither 'pattern' nor 'default'; ignored, as carbon does"
            )),
        }
    }
    let Some(default) = default else {
        return Err(ConfigError::invalid(
            &file,
            "default",
            "no default rule defined: exactly one section needs 'default = true'",
        ));
    };
    rules.push(default);
    Ok(rules)
}
