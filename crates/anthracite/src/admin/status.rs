//! The status page (`GET /`) and the summary it reads besides `/metrics` and `/destinations`
//! (`GET /status`): the build, the phase, the configuration in brief and the recent reloads.
//!
//! The page is one HTML file compiled into the binary (`status.html`: no external scripts,
//! fonts or style sheets, so it works on a relay with no route to the internet). Its script
//! computes rates from successive `/metrics` scrapes and keeps the last minutes of samples in
//! the browser; the relay keeps no history for it beyond [`MAX_RELOADS`] reload records.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::Phase;

/// The status page, served as is.
pub(super) const PAGE: &str = include_str!("status.html");

/// Reload records `/status` keeps (the oldest is forgotten first).
pub(super) const MAX_RELOADS: usize = 20;

/// What `/status` reports besides the figures: set by the relay at start and on each reload.
#[derive(Debug)]
pub(crate) struct Overview {
    started: SystemTime,
    /// The build's features (`Extensions::features`: extensions and the like), for `/status`
    /// and `anthracite_build_info`.
    features: Vec<&'static str>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    config: Vec<(String, String)>,
    reloads: VecDeque<ReloadRecord>,
}

/// One reload, as the status page lists it.
#[derive(Clone, Debug, Serialize)]
pub(super) struct ReloadRecord {
    /// Seconds since the Unix epoch.
    pub at_unix: f64,
    /// `applied` or `rejected`.
    pub result: &'static str,
    /// The changes applied, or why the reload was rejected.
    pub detail: String,
}

impl Default for Overview {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl Overview {
    /// An overview of a build with `features`.
    pub(crate) fn new(features: Vec<&'static str>) -> Self {
        Self {
            started: SystemTime::now(),
            features,
            state: Mutex::default(),
        }
    }

    /// The build's features.
    pub(crate) fn features(&self) -> &[&'static str] {
        &self.features
    }
}

impl Overview {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The configuration in brief, as `(key, value)` lines in display order.
    pub(crate) fn set_config(&self, entries: Vec<(String, String)>) {
        self.state().config = entries;
    }

    /// A reload was applied or rejected; `detail` says what changed or why not.
    pub(crate) fn record_reload(&self, applied: bool, detail: String) {
        let mut s = self.state();
        if s.reloads.len() == MAX_RELOADS {
            s.reloads.pop_front();
        }
        s.reloads.push_back(ReloadRecord {
            at_unix: unix(SystemTime::now()),
            result: if applied { "applied" } else { "rejected" },
            detail,
        });
    }

    /// The `/status` body.
    pub(super) fn json(&self, phase: Phase) -> String {
        let now = SystemTime::now();
        let s = self.state();
        let status = Status {
            version: env!("CARGO_PKG_VERSION"),
            features: self.features.clone(),
            phase: phase.name(),
            phase_reason: phase.reason(),
            started_at_unix: unix(self.started),
            now_unix: unix(now),
            config: s
                .config
                .iter()
                .map(|(key, value)| ConfigEntry { key, value })
                .collect(),
            reloads: s.reloads.iter().rev().collect(),
        };
        serde_json::to_string_pretty(&status)
            .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()))
    }
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `GET /status`.
#[derive(Serialize)]
struct Status<'a> {
    version: &'static str,
    features: Vec<&'static str>,
    /// `starting`, `ready` or `shutting_down`.
    phase: &'static str,
    phase_reason: &'static str,
    started_at_unix: f64,
    now_unix: f64,
    config: Vec<ConfigEntry<'a>>,
    /// Newest first.
    reloads: Vec<&'a ReloadRecord>,
}

#[derive(Serialize)]
struct ConfigEntry<'a> {
    key: &'a str,
    value: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reload_history_keeps_the_newest_records_newest_first() {
        let o = Overview::default();
        for i in 0..MAX_RELOADS + 3 {
            o.record_reload(i % 2 == 0, format!("reload {i}"));
        }
        let v: serde_json::Value =
            serde_json::from_str(&o.json(Phase::Ready)).expect("status is JSON");
        let reloads = v["reloads"].as_array().expect("reloads");
        assert_eq!(reloads.len(), MAX_RELOADS);
        assert_eq!(reloads[0]["detail"], format!("reload {}", MAX_RELOADS + 2));
        assert_eq!(reloads[MAX_RELOADS - 1]["detail"], "reload 3");
        assert_eq!(v["phase"], "ready");
    }

    #[test]
    fn page_loads_nothing_from_elsewhere() {
        for needle in ["http://", "https://", "//cdn", "@import", "<link", "src=\""] {
            assert!(!PAGE.contains(needle), "status.html contains {needle:?}");
        }
    }
}
