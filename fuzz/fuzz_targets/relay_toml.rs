//! relay.toml parsing and validation: any text gives a configuration or an error naming a
//! key, never a panic (huge, NaN or negative numbers included).
#![no_main]

use anthracite::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = Config::from_toml_str(text) {
        // What `anthracite check` prints must render.
        let _ = config.to_resolved_toml();
        let _ = config.summary();
    }
});
