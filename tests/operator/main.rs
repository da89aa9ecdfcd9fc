//! What an operator runs around a relay, each against the real tool: the status page in a
//! real browser (headless Chromium), the alert rules under `promtool`, the Grafana
//! dashboard's queries through a real Prometheus scraping a relay, the Debian package, and
//! the README's quick start exactly as written. One test binary (one link) for the group;
//! the Debian tools are installed by the test support when missing.

#[path = "../support/mod.rs"]
mod support;

mod deb;
mod prometheus;
mod quickstart;
mod status_page;
