//! carbon-c-relay configurations: any text gives a configuration or an error (never a panic),
//! the configuration prints back as `carbon-c-relay -t -d` prints it, and lines route through
//! it. The input holds the configuration, then NUL-separated lines to route.
#![no_main]

use anthracite::unstable::config::c_relay::check_text;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split(|&b| b == 0);
    let conf = parts.next().unwrap_or_default();
    let lines: Vec<&[u8]> = parts.take(16).collect();
    let _ = check_text(conf, &lines);
});
