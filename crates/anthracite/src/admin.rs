//! The admin HTTP listener (`[admin] listen`): what an operator or a monitoring system asks a
//! running relay.
//!
//! - `GET /metrics`: every self-metric series as Prometheus text, plus process series
//!   ([`telemetry::prometheus`](crate::telemetry::prometheus));
//! - `GET /healthz`: 200 while the process runs its event loop;
//! - `GET /ready`: 200 once every listener is bound and while the relay is not shutting down,
//!   503 otherwise, with a one-line reason;
//! - `GET /destinations`: JSON, per destination: address, connection, memory and disk queue,
//!   oldest spilled record, last error;
//! - `GET /`: the status page ([`status`]), a picture of the running relay for a browser;
//! - `GET /status`: JSON, what the page shows besides the figures: build, phase, the
//!   configuration in brief, the recent reloads.
//!
//! HTTP/1.1 through hyper, one task per connection, at most [`MAX_CONNECTIONS`] at once. No
//! client can keep the listener from an orchestrator's probe or a scrape: a client must send
//! each request's headers within [`HEADER_TIMEOUT`], a connection lasts at most
//! [`CONNECTION_DEADLINE`], and at the limit the connection silent the longest (at least
//! [`MIN_IDLE_TO_EVICT`]) is closed to admit the new one; only when every connection was
//! active that recently is the new one refused (the receivers' admission,
//! [`crate::receiver::admission`], with the admin listener's own limit). Evictions and refusals are counted
//! (`anthracite_admin_connections_evicted_total`, `…_refused_total`). The listener is the
//! first thing a relay starts and the last it stops, so `/ready` can say "starting" and
//! "shutting down".

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::figure::Figure;
use crate::metric_names::facade;
use crate::queue::DestinationSnapshot;
use crate::receiver::Admission;
use crate::telemetry::prometheus;
use crate::telemetry::reporter::{Books, all_components};

mod status;

pub(crate) use status::Overview;

/// Most admin connections served at once; more are closed at accept.
pub(crate) const MAX_CONNECTIONS: usize = 64;

/// How long a client may take to send a request's headers.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest an admin connection stays open, however it is used.
pub(crate) const CONNECTION_DEADLINE: Duration = Duration::from_secs(60);

/// How long a connection must have been silent (no request) before a newcomer at the limit
/// may close it.
pub const MIN_IDLE_TO_EVICT: Duration = Duration::from_millis(500);

/// How long a newcomer waits for an evicted connection's slot.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// The admin listener's own counters, rendered with `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct AdminCounters {
    evicted: AtomicU64,
    refused: AtomicU64,
}

/// Where a relay is in its life, as `/ready` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Listeners not bound yet (startup: spill logs, checkpoints, sockets).
    Starting,
    /// Every listener bound, destinations and receivers running.
    Ready,
    /// Shutdown began: receivers stopped or stopping, queues draining.
    ShuttingDown,
}

impl Phase {
    const ALL: [Phase; 3] = [Phase::Starting, Phase::Ready, Phase::ShuttingDown];

    /// The phase's name in `/status`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Ready => "ready",
            Phase::ShuttingDown => "shutting_down",
        }
    }

    /// The one-line reason `/ready` gives.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Phase::Starting => "starting: listeners not bound yet",
            Phase::Ready => "ready",
            Phase::ShuttingDown => "shutting down",
        }
    }
}

/// A relay's phase, shared by the relay (which moves it) and the admin listener.
#[derive(Debug, Default)]
pub(crate) struct Health {
    phase: AtomicU8,
}

impl Health {
    /// The current phase.
    pub(crate) fn phase(&self) -> Phase {
        Phase::ALL
            .get(usize::from(self.phase.load(Ordering::Acquire)))
            .copied()
            .unwrap_or(Phase::Starting)
    }

    /// Moves to `phase`.
    pub(crate) fn set(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Release);
    }
}

/// What the admin listener reads.
#[derive(Clone)]
pub(crate) struct AdminState {
    /// The relay's books.
    pub books: Arc<dyn Books>,
    /// The relay's phase.
    pub health: Arc<Health>,
    /// Evictions and refusals at the admin connection limit.
    pub counters: Arc<AdminCounters>,
    /// The configuration in brief and the reload history, for `/status`.
    pub overview: Arc<Overview>,
}

/// Serves the admin endpoints on `listener` until `stop` is cancelled; open connections are
/// then closed.
pub(crate) async fn serve(listener: TcpListener, state: AdminState, stop: CancellationToken) {
    let admission = Arc::new(Admission::new(MAX_CONNECTIONS, MIN_IDLE_TO_EVICT));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            a = listener.accept() => a,
        };
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                debug!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let admitted = match admission.try_admit() {
            Some(a) => Some(a),
            // At the limit: close the connection silent the longest, if long enough.
            None if admission.evict_idlest() => {
                state.counters.evicted.fetch_add(1, Ordering::Relaxed);
                admission.admit_within(EVICTION_WAIT).await
            }
            None => None,
        };
        let Some(admitted) = admitted else {
            state.counters.refused.fetch_add(1, Ordering::Relaxed);
            debug!(%peer, "admin connection limit reached, every connection active; closing");
            continue;
        };
        let admitted = Arc::new(admitted);
        let state = state.clone();
        connections.spawn(async move {
            let active = admitted.clone();
            let service = hyper::service::service_fn(move |req| {
                active.touch();
                let response = respond(&state, &req);
                async move { Ok::<_, Infallible>(response) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                r = tokio::time::timeout(CONNECTION_DEADLINE, served) => match r {
                    Ok(Err(e)) => debug!(%peer, error = %e, "admin connection ended"),
                    Err(_) => debug!(%peer, "admin connection deadline reached; closed"),
                    Ok(Ok(())) => {}
                },
                _ = admitted.slot().evicted().cancelled() => {
                    debug!(%peer, "admin connection evicted for a newcomer");
                }
            }
        });
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

fn respond(state: &AdminState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    match req.uri().path() {
        "/" => {
            let mut r = text(StatusCode::OK, status::PAGE.into());
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            r
        }
        "/status" => json(state.overview.json(state.health.phase())),
        "/metrics" => {
            let mut figures: Vec<_> = all_components(&*state.books)
                .into_iter()
                .flat_map(|c| c.figures)
                .collect();
            figures.extend(crate::telemetry::process::figures(
                state.overview.features(),
            ));
            let c = &state.counters;
            figures.push(
                Figure::counter(c.evicted.load(Ordering::Relaxed))
                    .series(facade::ADMIN_EVICTED, Vec::new()),
            );
            figures.push(
                Figure::counter(c.refused.load(Ordering::Relaxed))
                    .series(facade::ADMIN_REFUSED, Vec::new()),
            );
            let ready = state.health.phase() == Phase::Ready;
            figures.push(
                Figure::gauge(if ready { 1.0 } else { 0.0 }).series(facade::READY, Vec::new()),
            );
            let mut r = text(StatusCode::OK, prometheus::render(&figures));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/ready" => {
            let phase = state.health.phase();
            let status = if phase == Phase::Ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(status, format!("{}\n", phase.reason()))
        }
        "/destinations" => {
            let s = state.books.snapshot();
            let now = SystemTime::now();
            let list = Destinations {
                destinations: s
                    .destinations
                    .iter()
                    .map(|d| DestinationStatus::of(d, "active", now))
                    .chain(
                        s.removed
                            .iter()
                            .map(|d| DestinationStatus::of(d, "removed", now)),
                    )
                    .collect(),
            };
            json(
                serde_json::to_string_pretty(&list)
                    .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string())),
            )
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /, /metrics, /healthz, /ready, /destinations, /status\n".into(),
        ),
    }
}

fn json(body: String) -> Response<Full<Bytes>> {
    let mut r = text(StatusCode::OK, body + "\n");
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[derive(Serialize)]
struct Destinations {
    destinations: Vec<DestinationStatus>,
}

/// One destination in `GET /destinations`.
#[derive(Serialize)]
struct DestinationStatus {
    address: String,
    /// `active`, or `removed` by a reload and still holding data.
    state: &'static str,
    connected: bool,
    memory_queue: Tier,
    disk_queue: Tier,
    oldest_spilled_age_seconds: f64,
    last_error: Option<ErrorStatus>,
}

#[derive(Serialize)]
struct Tier {
    datapoints: u64,
    bytes: u64,
}

#[derive(Serialize)]
struct ErrorStatus {
    message: String,
    /// Seconds since the Unix epoch.
    at_unix: f64,
    age_seconds: f64,
}

impl DestinationStatus {
    fn of(d: &DestinationSnapshot, state: &'static str, now: SystemTime) -> Self {
        let secs = |t: SystemTime| {
            t.duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0)
        };
        Self {
            address: d.name.clone(),
            state,
            connected: d.connected,
            memory_queue: Tier {
                datapoints: d.queued_memory,
                bytes: d.spill.memory_bytes,
            },
            disk_queue: Tier {
                datapoints: d.queued_disk,
                bytes: d.spill.disk_bytes,
            },
            oldest_spilled_age_seconds: d.spill.oldest_age_ms as f64 / 1000.0,
            last_error: d.last_error.as_ref().map(|e| ErrorStatus {
                message: e.message.clone(),
                at_unix: secs(e.at),
                age_seconds: now
                    .duration_since(e.at)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0),
            }),
        }
    }
}
