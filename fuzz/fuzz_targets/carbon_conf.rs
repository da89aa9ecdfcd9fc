//! carbon.conf import, relay-rules.conf and aggregation-rules.conf: any text gives a
//! configuration or an error, never a panic. The input holds the three files separated by
//! NUL bytes.
#![no_main]

use anthracite::CarbonOptions;
use anthracite::unstable::config::carbon::{from_text, parse_relay_rules};
use anthracite::unstable::config::ini::Ini;
use anthracite::unstable::router::DestinationSpec;
use anthracite::unstable::router::aggregation::parse_rules;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.split('\0');
    let conf = parts.next().unwrap_or("");
    let rules = parts.next().unwrap_or("");
    let aggregation = parts.next().unwrap_or("");
    let _ = Ini::parse(conf);
    // Rule files are looked up next to carbon.conf: none exist in this directory.
    let options = CarbonOptions::new("/nonexistent-anthracite-fuzz/carbon.conf");
    let _ = from_text(conf, &options);
    let configured: Vec<DestinationSpec> = ["127.0.0.1:2104:a", "127.0.0.1:2204:b"]
        .iter()
        .filter_map(|d| DestinationSpec::parse(d).ok())
        .collect();
    let mut warnings = Vec::new();
    let _ = parse_relay_rules(rules, "relay-rules.conf", &configured, &mut warnings);
    let _ = parse_rules(aggregation);
});
