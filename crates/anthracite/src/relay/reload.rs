//! Configuration reload (SIGHUP, `anthracite reload`, [`RelayHandle::reload`]): the design.
//!
//! ## What is swapped, what is kept
//!
//! The routing state is one immutable generation ([`Routing`]): the router (ring, rules,
//! aggregation rules), the destination queues it indexes, the white/blacklists, the replica
//! pools and the per-name settings (timestamp resolution, tag normalisation, cache sizes). A
//! reload builds the next generation and installs it in one step, so the ring, the rules,
//! the aggregation rules and the lists switch together for new data. When the router's inputs
//! (`[router]`, `[[rules]]`, the destination list and order) are unchanged, the new generation
//! keeps the same router and the ingestors keep their route caches.
//!
//! | part | on reload |
//! |---|---|
//! | destination with the same address and settings | kept: same queue, same task, same connection |
//! | same address, other connection settings (protocol, TLS, timeouts, batching, backoff) | same queue; its task restarts (in-flight data back to the queue, reconnect) |
//! | same address, other queue or spill settings | **rejected**: needs a restart (the queue's bounds and its spill log are fixed while it runs) |
//! | added | queue opened (its spill log recovered: what a previous run or a removal left there is replayed first), task started |
//! | removed | retired: takes no new data; delivers what it holds; with a spill log, what is left after the grace period (or at once if the destination is known dead) is written to the log and kept for when it comes back |
//! | added back while retiring | revived: the same queue takes data again, a fresh task serves it |
//! | listener whose address changed | the new socket is bound first, then the old one stops accepting (after taking its backlog); open connections stay |
//! | other listener settings | the same sockets are served again with them; open connections keep theirs |
//! | `[admin] listen` | rebound the same way |
//! | `[telemetry]` | the reporter restarts |
//! | white/blacklist files | re-read now (a new generation carries them) |
//! | a carbon-c-relay configuration's routing | the new program routes new data; each aggregation that stays unchanged (interval, expiry, timestamp, computes, output names) keeps its open buckets: when the list of aggregations is the same, both generations feed one state; when it changed, the kept aggregations' series move to the new state, and a read routed by the old generation during the switch feeds the old state, which is no longer written; `statistics` start, stop or change with it |
//! | `[shutdown]` | applies to the next shutdown |
//! | a section of an extension (`[[kinesis]]`, `[[kafka]]`) | **rejected**: needs a restart |
//! | `[log]` | applies at the next start (logged) |
//!
//! ## Ordering guarantees
//!
//! An ingestor's pending batches are indexed by the destinations of one generation, so it
//! moves to a new generation only at a flush boundary: the datapoints of one batch are routed
//! by the generation that was current when the batch began, and go to that generation's
//! queues ([`crate::ingest::routing`]). A datapoint a client sent after the reload was applied
//! is therefore routed by the new configuration; one received before it, by the old one.
//! Per destination, FIFO order is unchanged (kept queues are untouched). A removed
//! destination's queue is closed only once every earlier generation that indexes it is idle,
//! so no push into it is ever refused: nothing accepted is lost or dropped by the switch.
//!
//! ## Failure cases
//!
//! The new configuration is applied whole or not at all. In order: the file must load and
//! validate (the caller's loader); nothing that needs a restart may change; then the fallible
//! steps, none of them visible to the data path: build the router, bind changed listener and
//! admin addresses, revive retiring destinations and open the added ones' queues (spill logs).
//! If any of these fails, what they did is undone (sockets closed, opened queues shut down,
//! revived destinations retired again) and the reload is rejected. Only then is the change
//! committed: tasks started or restarted, the generation installed, removed destinations
//! retired, listeners and background tasks switched. A rejected reload is logged with its
//! reason and counted (`anthracite_config_reloads_total{result="rejected"}`,
//! `configReloads.rejected`); the relay goes on with the configuration it had. One reload
//! runs at a time; shutdown waits for a reload in progress.

use std::sync::Arc;

use serde::Serialize;
use tracing::{error, info, warn};

use super::RelayError;
use super::destinations::{self, Live, Retiring};
use super::listeners::{Kind, Socket};
use super::running::{Admin, Running};
use super::shared::Shared;
use crate::config::{Config, ConfigError};
use crate::filter::ListWatcher;
use crate::ingest::Routing;
use crate::queue::DestinationQueue;
use crate::router::{ReplicaPools, Router, RouterError};
use crate::telemetry::reporter::Books;

/// What a reload changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reloaded {
    /// One line per change (e.g. `destinations added: 127.0.0.1:2304:c`); empty when the new
    /// configuration is the same.
    pub changes: Vec<String>,
}

/// Why a reload was rejected (the relay goes on with the configuration it had).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The new configuration did not load or validate.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The change cannot be applied while the relay runs.
    #[error("{key}: {message}; restart to apply it")]
    NeedsRestart {
        /// The key at fault.
        key: String,
        /// What cannot change.
        message: String,
    },
    /// The new router could not be built.
    #[error("cannot build router: {0}")]
    Router(#[from] RouterError),
    /// A new listener could not be bound, or an added destination's spill log opened.
    #[error(transparent)]
    Apply(#[from] RelayError),
    /// The relay is not running (not started yet, or shutting down).
    #[error("the relay is not running")]
    NotRunning,
}

/// Loads, applies, logs and counts one reload.
pub(super) async fn reload(
    shared: &Arc<Shared>,
    load: impl FnOnce() -> Result<Config, ConfigError>,
) -> Result<Reloaded, ReloadError> {
    let result = match (load(), shared.runtime.get()) {
        (Err(e), _) => Err(e.into()),
        (Ok(_), None) => Err(ReloadError::NotRunning),
        (Ok(config), Some(runtime)) => {
            // On the relay's runtime: the tasks a reload starts belong to the relay.
            let shared = shared.clone();
            runtime
                .spawn(async move {
                    let mut control = shared.control.lock().await;
                    let running = control.as_mut().ok_or(ReloadError::NotRunning)?;
                    running.reload(&shared, config).await
                })
                .await
                .unwrap_or(Err(ReloadError::NotRunning))
        }
    };
    match &result {
        Ok(r) => {
            let changes = if r.changes.is_empty() {
                "no changes".to_string()
            } else {
                r.changes.join("; ")
            };
            info!(%changes, "configuration reloaded");
            shared.count_reload(true, changes);
        }
        Err(e) => {
            shared.count_reload(false, e.to_string());
            error!(error = %e, "configuration reload rejected; still running on the previous configuration");
        }
    }
    result
}

/// A section of the raw configuration, for comparing two.
fn section<T: Serialize>(t: &T) -> Option<serde_json::Value> {
    serde_json::to_value(t).ok()
}

/// A destination's queue for the new configuration, and where it came from.
enum Slot {
    /// An active destination (index into `Running::active`).
    Active(usize),
    /// A retiring destination, revived.
    Revived(Box<Live>),
    /// A newly opened queue.
    Opened(Arc<DestinationQueue>),
}

/// What the fallible steps of a reload prepared, for the commit that cannot fail.
struct Prepared {
    /// The new configuration.
    new: Config,
    /// Its router (the running one when the routing did not change).
    router: Arc<Router>,
    /// Per destination of `new`, where its queue comes from.
    slots: Vec<Slot>,
    /// Sockets bound for changed receiver addresses (a kind with none is turned off).
    fresh: Vec<(Kind, Option<Socket>)>,
    /// `Some` when the admin address changed: the new listener, or none to turn it off.
    admin: Option<Option<tokio::net::TcpListener>>,
    /// What changed so far, one line each.
    changes: Vec<String>,
}

impl Running {
    /// Applies `new`, or changes nothing (see the module documentation).
    pub(super) async fn reload(
        &mut self,
        shared: &Arc<Shared>,
        mut new: Config,
    ) -> Result<Reloaded, ReloadError> {
        self.check_reloadable(&new)?;
        let old = &self.config;
        let mut changes = Vec::new();

        // Fallible steps; nothing the data path sees changes.
        let current = self.pipeline.routing();
        let c_relay_changed = match (&old.router.c_relay, &mut new.router.c_relay) {
            (Some(o), Some(n)) => {
                n.share_aggregates(o);
                o.printed() != n.printed()
            }
            (o, n) => o.is_some() != n.is_some(),
        };
        let routing_changed = section(&old.resolved.router) != section(&new.resolved.router)
            || section(&old.resolved.rules) != section(&new.resolved.rules)
            || old.destination_names() != new.destination_names()
            || c_relay_changed;
        let router = if routing_changed {
            changes.push("routing changed (router, rules, aggregation rules or ring)".into());
            Arc::new(Router::new(new.router.clone())?)
        } else {
            current.router.clone()
        };
        let mut fresh = Vec::new();
        for (kind, addr) in self.listeners.rebinds(&new.listen) {
            let socket = match addr {
                Some(a) => Some(Socket::bind(kind, a, &new.listen).await?),
                None => None,
            };
            changes.push(format!(
                "{} {} → {}",
                kind.what(),
                kind.configured(&old.listen)
                    .map_or("off".into(), |a| a.to_string()),
                addr.map_or("off".into(), |a| a.to_string())
            ));
            fresh.push((kind, socket));
        }
        let admin = if new.admin_listen != self.admin.configured {
            let listener = match new.admin_listen {
                Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(
                    |source| RelayError::Bind {
                        what: "admin listener",
                        addr,
                        source,
                    },
                )?),
                None => None,
            };
            Some(listener)
        } else {
            None
        };
        let slots = self.queues_for(shared, &new).await?;

        // Commit.
        if let (Some(o), Some(n)) = (&self.config.router.c_relay, &new.router.c_relay) {
            n.take_aggregates(o);
        }
        let prepared = Prepared {
            new,
            router,
            slots,
            fresh,
            admin,
            changes,
        };
        Ok(self.commit(shared, prepared).await)
    }

    /// Rejects what cannot change while the relay runs.
    fn check_reloadable(&self, new: &Config) -> Result<(), ReloadError> {
        let old = &self.config;
        let (a, b) = (&old.resolved.extensions, &new.resolved.extensions);
        if let Some(name) = a.keys().chain(b.keys()).find(|k| a.get(*k) != b.get(*k)) {
            return Err(ReloadError::NeedsRestart {
                key: name.clone(),
                message: format!("the sources of [{name}] cannot change while the relay runs"),
            });
        }
        // A finished retirement closed its queue: the destination may come back with other
        // queue settings.
        let running = self.active.iter().map(|l| &l.config).chain(
            self.retiring
                .iter()
                .filter(|r| !r.is_finished())
                .map(|r| &r.config),
        );
        for prev in running {
            let Some((i, d)) = new
                .destinations
                .iter()
                .enumerate()
                .find(|(_, d)| d.spec == prev.spec)
            else {
                continue;
            };
            if d.queue != prev.queue || d.spill != prev.spill {
                return Err(ReloadError::NeedsRestart {
                    key: format!("destinations.servers[{i}]"),
                    message: format!(
                        "the queue or spill settings of {} cannot change while it holds a queue",
                        d.spec
                    ),
                });
            }
        }
        Ok(())
    }

    /// One queue per destination of `new`: kept, revived or opened. On a failure, what was
    /// revived is retired again and what was opened is shut down.
    async fn queues_for(
        &mut self,
        shared: &Shared,
        new: &Config,
    ) -> Result<Vec<Slot>, ReloadError> {
        let mut slots = Vec::with_capacity(new.destinations.len());
        let mut failure = None;
        for d in &new.destinations {
            if let Some(i) = self.active.iter().position(|l| l.config.spec == d.spec) {
                slots.push(Slot::Active(i));
                continue;
            }
            if let Some(r) = self.retiring.iter().position(|r| r.config.spec == d.spec)
                && let Some(live) = self.retiring.swap_remove(r).revive().await
            {
                slots.push(Slot::Revived(Box::new(live)));
                continue;
            }
            match destinations::open_queue(d) {
                Ok(q) => slots.push(Slot::Opened(q)),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let Some(e) = failure else {
            return Ok(slots);
        };
        for slot in slots {
            match slot {
                Slot::Active(_) => {}
                Slot::Revived(live) => self.retire(*live, &shared.removed),
                Slot::Opened(q) => {
                    q.shut_down().await;
                }
            }
        }
        Err(e.into())
    }

    /// Retires `live`; `removed` is the relay's list of removed destinations' queues.
    fn retire(&mut self, live: Live, removed: &Arc<std::sync::Mutex<Vec<Arc<DestinationQueue>>>>) {
        let generations = self
            .past
            .iter()
            .filter(|g| g.has_queue(&live.queue))
            .cloned()
            .collect();
        self.retiring.push(Retiring::start(
            live,
            generations,
            self.config.shutdown_grace,
            &self.destination_signals,
            removed.clone(),
        ));
    }

    /// Makes `prepared.new` the running configuration (no step here can fail).
    async fn commit(&mut self, shared: &Arc<Shared>, prepared: Prepared) -> Reloaded {
        let Prepared {
            new,
            router,
            slots,
            fresh,
            admin,
            mut changes,
        } = prepared;
        // Destinations: kept, restarted, revived, started; the rest retire below.
        let mut old_active: Vec<Option<Live>> = std::mem::take(&mut self.active)
            .into_iter()
            .map(Some)
            .collect();
        let (mut added, mut revived, mut reconfigured) = (Vec::new(), Vec::new(), Vec::new());
        for (d, slot) in new.destinations.iter().zip(slots) {
            let name = d.spec.to_string();
            let live = match slot {
                Slot::Active(i) => match old_active.get_mut(i).and_then(Option::take) {
                    Some(live) if live.config == *d => live,
                    Some(live) => {
                        reconfigured.push(name);
                        live.restart(d.clone(), &self.destination_signals).await
                    }
                    // Each active destination has one slot.
                    None => continue,
                },
                Slot::Revived(live) => {
                    shared
                        .removed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .retain(|q| !Arc::ptr_eq(q, &live.queue));
                    live.queue.reopen();
                    revived.push(name);
                    live.restart(d.clone(), &self.destination_signals).await
                }
                Slot::Opened(q) => {
                    added.push(name);
                    Live::start(d.clone(), q, &self.destination_signals)
                }
            };
            self.active.push(live);
        }
        // The next generation, installed in one step.
        let lists = new.ingest.lists.as_ref().map(ListWatcher::new);
        let queues: Arc<[Arc<DestinationQueue>]> =
            self.active.iter().map(|l| l.queue.clone()).collect();
        let current = self.pipeline.routing();
        let mut next = Routing::new(router, queues, new.route_cache_bytes);
        // Caches of what did not change are kept (their names stay hot); the lists are read
        // anew, so their verdicts are too.
        if next.route_cache_bytes == current.route_cache_bytes {
            if Arc::ptr_eq(&next.router, &current.router) {
                next.routes = current.routes.clone();
            }
            next.tag_memo = current.tag_memo.clone();
        }
        next.lists = lists.as_ref().map(ListWatcher::shared);
        next.pools = if new.pool_replicas {
            ReplicaPools::new(next.router.destinations()).map(Arc::new)
        } else {
            None
        };
        next.min_timestamp_resolution = new.ingest.min_timestamp_resolution;
        next.tag_relay_normalized = new.ingest.tag_relay_normalized;
        next.max_name_length = new.listen.max_name_length;
        // The aggregator's open series outlive a reload; its rule files reload themselves.
        next.aggregation = current.aggregation.clone();
        let replaced = self.pipeline.install(next);
        self.past.push(replaced);
        // Retire what the new configuration no longer names.
        let mut removed = Vec::new();
        for live in old_active.into_iter().flatten() {
            removed.push(live.config.spec.to_string());
            shared
                .removed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(live.queue.clone());
            self.retire(live, &shared.removed);
        }
        self.retiring.retain(|r| !r.is_finished());
        self.past
            .retain(|g| Arc::strong_count(g) > 1 || !g.is_idle());
        for (what, list) in [
            ("destinations added", added),
            ("destinations removed", removed),
            ("destinations added back", revived),
            ("destinations reconfigured", reconfigured),
        ] {
            if !list.is_empty() {
                changes.push(format!("{what}: {}", list.join(", ")));
            }
        }
        // Listeners, admin, background.
        let old = &self.config;
        let listen_changed = old.listen != new.listen;
        if listen_changed && fresh.is_empty() {
            changes.push("listener settings changed (new connections)".into());
        }
        self.listeners.reload(fresh, listen_changed, &new).await;
        if let Some(listener) = admin {
            changes.push(format!(
                "admin listener {} → {}",
                self.admin
                    .configured
                    .map_or("off".into(), |a| a.to_string()),
                new.admin_listen.map_or("off".into(), |a| a.to_string())
            ));
            let fresh_admin = Admin::start(new.admin_listen, listener, shared);
            std::mem::replace(&mut self.admin, fresh_admin).stop().await;
        }
        if section(&old.resolved.telemetry) != section(&new.resolved.telemetry) {
            changes.push("telemetry changed".into());
            self.background
                .start_reporter(&self.pipeline, shared.clone() as Arc<dyn Books>, &new)
                .await;
        }
        if lists.is_some() {
            changes.push("white/blacklists re-read".into());
        }
        self.background.start_lists(lists).await;
        self.background.start_c_relay_statistics(&self.pipeline);
        if section(&old.resolved.ingest) != section(&new.resolved.ingest) {
            changes.push("ingest settings changed".into());
        }
        if section(&old.resolved.shutdown) != section(&new.resolved.shutdown) {
            changes.push("shutdown grace changed".into());
        }
        if old.log_format() != new.log_format() {
            warn!("log.format changes only at the next start");
        }
        self.config = new;
        shared.overview.set_config(self.summary());
        Reloaded { changes }
    }
}
