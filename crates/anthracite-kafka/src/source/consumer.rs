//! The consumer thread of one Kafka source: poll → payload → ingestor → flush → commit, and
//! the rebalance callback that commits before a partition is released.
//!
//! librdkafka runs rebalance callbacks inside `poll`, on the thread that polls. That thread
//! is ours and is not a runtime worker, so the callback can finish the work in hand: flush the
//! ingestor into the destination queues (`Handle::block_on`) and commit synchronously, before
//! librdkafka hands the partition to another member. The state the loop and the callback
//! share sits behind one mutex the loop releases before every `poll`, so it is never
//! contended.
//!
//! ## A member that was stopped
//!
//! A relay stopped longer than its session (SIGSTOP, a frozen container) is dropped from the
//! group while it cannot see it: its partitions go to other members, which read them from its
//! last commit. When it resumes, librdkafka learns it at its next heartbeat, but messages it
//! fetched before the pause, or fetches in the first instants after it, can reach `poll`
//! first, and what was parsed before the pause sits in the ingestor. So the thread watches its
//! own monotonic clock: when more time passed between two of its steps than a member can go
//! unheard without risk (half of what the session leaves after a heartbeat), it delivers
//! nothing more until a synchronous commit of where it stands succeeds — the coordinator
//! accepts a commit only from a current member. If the commit is refused, what it read and
//! did not deliver is dropped (the partitions are sought back to their last delivered
//! message, so nothing is skipped if they turn out to be still its own), fetching pauses,
//! and the check is retried each second until the commit succeeds or the group revokes the
//! partitions as lost. A lost assignment drops what was parsed instead of delivering it: its
//! new owner reads it again.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use tokio::runtime::Handle;
use tracing::{debug, info, warn};

use super::payload::Payloads;
use super::positions::Positions;
use super::stats::{BadMessage, KafkaStats};
use crate::config::{InitialOffset, KafkaConfig};
use anthracite::Ingestor;
use anthracite::episode::{Episode, Line};
use anthracite::extension::SourceContext;

/// Datapoints parsed before an intermediate flush.
const FLUSH_EVERY: u64 = 16_384;
/// Longest a parsed datapoint waits in the ingestor while messages keep coming.
const FLUSH_LINGER: Duration = Duration::from_millis(50);
/// `poll` timeout with nothing in hand: also how soon shutdown is noticed.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// Broker calls made from the rebalance callback and at shutdown.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// With the consumer protocol the session is the brokers' (not known here): a gap this long
/// already makes the thread check its membership before it delivers.
const CONSUMER_PROTOCOL_GAP: Duration = Duration::from_secs(2);
/// How often a suspended member tries again to confirm its membership.
const CONFIRM_RETRY: Duration = Duration::from_secs(1);
/// One watermark request while fetching is paused.
const WATERMARK_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether the thread may deliver what it reads (see the module documentation).
struct Membership {
    /// The last time the thread looked at the clock.
    alive: Instant,
    /// The longest gap seen since the membership was last confirmed; `None` while none went
    /// over the limit.
    gap: Option<Duration>,
    /// A check failed: nothing is delivered, fetching is paused.
    suspended: Option<Suspension>,
}

struct Suspension {
    last_try: Instant,
    /// Messages dropped since.
    messages: u64,
    /// Datapoints parsed and dropped since.
    datapoints: u64,
}

/// What the loop and the rebalance callback share.
struct State {
    ingestor: Ingestor,
    payloads: Payloads,
    positions: Positions,
    /// Datapoints in the ingestor not yet flushed since this instant.
    pending_since: Option<Instant>,
    bad: Episode,
    membership: Membership,
}

/// Log episodes of client-level conditions.
#[derive(Default)]
struct Episodes {
    unreachable: Episode,
    missing_topic: Episode,
    other: Episode,
}

/// librdkafka's view of our source: callbacks for rebalances, statistics, errors and logs.
pub(crate) struct Context {
    config: Arc<KafkaConfig>,
    stats: Arc<KafkaStats>,
    runtime: Handle,
    state: Mutex<State>,
    episodes: Mutex<Episodes>,
    /// A gap longer than this between two steps of the thread makes it check its membership.
    gap_limit: Duration,
    /// Fetching is paused (a destination queue over its high-water mark, or a suspended
    /// membership): librdkafka's statistics then carry a stale end offset, and the lag comes
    /// from the watermarks instead.
    fetch_paused: AtomicBool,
}

impl Context {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Flushes what was parsed into the queues, then commits every accepted offset.
    fn flush_and_commit(&self, consumer: &BaseConsumer<Context>, st: &mut State) {
        self.flush(st);
        self.commit(consumer, st);
    }

    /// Notes the time: a gap since the last look may have cost the membership.
    fn tick(&self, st: &mut State) {
        let now = Instant::now();
        let gap = now.saturating_duration_since(st.membership.alive);
        if gap > self.gap_limit {
            let longest = st.membership.gap.get_or_insert(gap);
            *longest = (*longest).max(gap);
        }
        st.membership.alive = now;
    }

    /// Whether what the thread holds (and `in_hand`, a message not fed yet) may be delivered.
    /// Always, unless a gap was seen since the membership was last confirmed; then a
    /// synchronous commit of where each partition stands decides. Refused: what was read and
    /// not delivered is dropped and the partitions sought back, and the membership is
    /// suspended (checked again each [`CONFIRM_RETRY`]).
    fn may_deliver(
        &self,
        consumer: &BaseConsumer<Context>,
        st: &mut State,
        in_hand: Option<(&str, i32, i64)>,
    ) -> bool {
        let m = &st.membership;
        if m.gap.is_none() && m.suspended.is_none() {
            return true;
        }
        if m.suspended
            .as_ref()
            .is_some_and(|s| s.last_try.elapsed() < CONFIRM_RETRY)
        {
            self.drop_held(consumer, st, in_hand);
            return false;
        }
        let standing = st.positions.standing(in_hand);
        let refused = if standing.is_empty() {
            None
        } else {
            self.commit_offsets(consumer, &standing).err()
        };
        let group = &self.config.group_id;
        match refused {
            None => {
                if let Some(s) = st.membership.suspended.take() {
                    info!(%group, dropped_messages = s.messages, dropped_datapoints = s.datapoints, "kafka: the group confirms this member's partitions: delivering again");
                } else if let Some(gap) = st.membership.gap {
                    debug!(%group, gap_ms = gap.as_millis() as u64, "kafka: membership confirmed after a gap");
                }
                st.membership.gap = None;
                true
            }
            Some(e) => {
                self.stats.error();
                let now = Instant::now();
                match &mut st.membership.suspended {
                    Some(s) => s.last_try = now,
                    None => {
                        let gap = st.membership.gap.unwrap_or_default();
                        warn!(%group, gap_ms = gap.as_millis() as u64, error = %e, "kafka: this relay did not run for longer than its group session allows (stopped, or starved), and the group refused the commit that checks its membership: what it read and did not deliver is dropped, fetching pauses, until the group confirms its partitions or gives them to another member");
                        st.membership.suspended = Some(Suspension {
                            last_try: now,
                            messages: 0,
                            datapoints: 0,
                        });
                    }
                }
                self.drop_held(consumer, st, in_hand);
                false
            }
        }
    }

    /// Drops what was parsed and not flushed, and `in_hand`, seeking their partitions back so
    /// that nothing is skipped if they are still this member's.
    fn drop_held(
        &self,
        consumer: &BaseConsumer<Context>,
        st: &mut State,
        in_hand: Option<(&str, i32, i64)>,
    ) {
        let datapoints = st.ingestor.discard();
        st.pending_since = None;
        for (topic, partition, offset) in st.positions.rewind_targets(in_hand) {
            if let Err(e) = consumer.seek(&topic, partition, Offset::Offset(offset), Duration::ZERO)
            {
                debug!(group = %self.config.group_id, %topic, partition, error = %e, "kafka: seek back failed");
            }
        }
        st.positions.rewound();
        if let Some(s) = &mut st.membership.suspended {
            s.datapoints += datapoints;
            s.messages += u64::from(in_hand.is_some());
        }
    }

    /// A synchronous commit of `offsets`.
    fn commit_offsets(
        &self,
        consumer: &BaseConsumer<Context>,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (topic, partition, offset) in offsets {
            tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset))?;
        }
        consumer.commit(&tpl, CommitMode::Sync)
    }

    /// While fetching is paused librdkafka's end offsets go stale: the lag is read from the
    /// partitions' watermarks instead (one request each; the first failure ends the round).
    fn refresh_lag(&self, consumer: &BaseConsumer<Context>, st: &State) {
        for (topic, partition, base, counters) in st.positions.lag_bases() {
            let Some(base) = base.or_else(|| counters.stats_committed()) else {
                continue;
            };
            match consumer.fetch_watermarks(&topic, partition, WATERMARK_TIMEOUT) {
                Ok((_, high)) => counters.lag((high - base).max(0)),
                Err(e) => {
                    debug!(group = %self.config.group_id, %topic, partition, error = %e, "kafka: watermarks unavailable; the lag stays as it was");
                    return;
                }
            }
        }
    }

    fn flush(&self, st: &mut State) {
        if st.pending_since.take().is_some() {
            self.runtime.block_on(st.ingestor.flush());
        }
        for p in st.positions.accept_all() {
            let c = std::mem::take(&mut p.counts);
            if c.messages > 0 {
                self.stats.read(&p.counters, c);
            }
        }
    }

    fn commit(&self, consumer: &BaseConsumer<Context>, st: &mut State) {
        let offsets = st.positions.to_commit();
        if offsets.is_empty() {
            return;
        }
        match self.commit_offsets(consumer, &offsets) {
            Ok(()) => {
                st.positions.committed(&offsets);
                self.stats.committed();
            }
            Err(e) => {
                self.stats.error();
                self.client_episode(Condition::Other, &format!("offset commit failed: {e}"));
            }
        }
    }

    fn on_assign(&self, consumer: &BaseConsumer<Context>, tpl: &mut TopicPartitionList) {
        if self.config.initial_offset == InitialOffset::Timestamp {
            self.start_at_timestamp(consumer, tpl);
        }
        let assigned = match consumer.rebalance_protocol() {
            RebalanceProtocol::Cooperative => consumer.incremental_assign(tpl),
            _ => consumer.assign(tpl),
        };
        if let Err(e) = assigned {
            self.stats.error();
            warn!(group = %self.config.group_id, error = %e, "kafka: assigning partitions failed");
            return;
        }
        // New partitions fetch unless the loop has paused fetching. Set either way: librdkafka
        // keeps a partition's pause across its release, and the loop resumes only what is
        // assigned, so a partition paused, then lost or revoked, would come back paused and
        // never be read.
        let result = if self.fetch_paused.load(Relaxed) {
            consumer.pause(tpl)
        } else {
            consumer.resume(tpl)
        };
        if let Err(e) = result {
            debug!(group = %self.config.group_id, error = %e, "kafka: pausing or resuming new partitions failed");
        }
        let mut st = self.state();
        // An assignment is the group's word that this member is current.
        st.membership.gap = None;
        if st.membership.suspended.take().is_some() {
            info!(group = %self.config.group_id, "kafka: assigned partitions again: delivering");
        }
        for e in tpl.elements() {
            st.positions.assign(
                e.topic(),
                e.partition(),
                self.stats.partition(e.topic(), e.partition()),
            );
        }
        let n = st.positions.len();
        drop(st);
        self.stats.rebalanced(true, tpl.count(), n);
        info!(group = %self.config.group_id, partitions = %names(tpl), assigned = n, "kafka: partitions assigned");
    }

    /// Partitions without a committed offset start at the first message at or after the
    /// configured timestamp (a backfill); the others resume where the group left them.
    fn start_at_timestamp(&self, consumer: &BaseConsumer<Context>, tpl: &mut TopicPartitionList) {
        let Some(ts) = self.config.initial_timestamp_ms else {
            return;
        };
        let committed = match consumer.committed_offsets(tpl.clone(), CALL_TIMEOUT) {
            Ok(c) => c,
            Err(e) => {
                self.stats.error();
                warn!(group = %self.config.group_id, error = %e, "kafka: cannot read committed offsets; partitions without one start at the earliest message");
                return;
            }
        };
        let mut query = TopicPartitionList::new();
        for e in committed.elements() {
            if !matches!(e.offset(), Offset::Offset(_)) {
                let _ = query.add_partition_offset(e.topic(), e.partition(), Offset::Offset(ts));
            }
        }
        if query.count() == 0 {
            return;
        }
        match consumer.offsets_for_times(query, CALL_TIMEOUT) {
            Ok(found) => {
                for e in found.elements() {
                    let _ = tpl.set_partition_offset(e.topic(), e.partition(), e.offset());
                }
            }
            Err(e) => {
                self.stats.error();
                warn!(group = %self.config.group_id, error = %e, "kafka: cannot look up offsets for the initial timestamp; those partitions start at the earliest message");
            }
        }
    }

    fn on_revoke(&self, consumer: &BaseConsumer<Context>, tpl: &TopicPartitionList) {
        let mut st = self.state();
        self.tick(&mut st);
        if consumer.assignment_lost() {
            // The group already moved them: a commit would be refused, and what was parsed
            // is not this member's to deliver any more. Its new owner reads it again from the
            // last commit.
            let datapoints = st.ingestor.discard();
            st.pending_since = None;
            st.positions.rewound();
            warn!(group = %self.config.group_id, partitions = %names(tpl), dropped_datapoints = datapoints, "kafka: partitions lost (session expired): what was read from them and not delivered is dropped; their new owner reads their uncommitted messages again");
        } else if self.may_deliver(consumer, &mut st, None) {
            self.flush_and_commit(consumer, &mut st);
        }
        for e in tpl.elements() {
            st.positions.revoke(e.topic(), e.partition());
        }
        let n = st.positions.len();
        drop(st);
        let released = match consumer.rebalance_protocol() {
            RebalanceProtocol::Cooperative => consumer.incremental_unassign(tpl),
            _ => consumer.unassign(),
        };
        if let Err(e) = released {
            self.stats.error();
            warn!(group = %self.config.group_id, error = %e, "kafka: releasing partitions failed");
        }
        self.stats.rebalanced(false, tpl.count(), n);
        info!(group = %self.config.group_id, partitions = %names(tpl), assigned = n, "kafka: partitions released after committing what was delivered");
    }

    /// Logs a client-level condition once per episode.
    fn client_episode(&self, condition: Condition, what: &str) {
        let mut e = self.episodes.lock().unwrap_or_else(|p| p.into_inner());
        let episode = match condition {
            Condition::Unreachable => &mut e.unreachable,
            Condition::MissingTopic => &mut e.missing_topic,
            Condition::Other => &mut e.other,
        };
        let group = &self.config.group_id;
        match episode.occurred(1, Instant::now()) {
            Some(Line::Started(_)) => {
                warn!(%group, brokers = %self.config.brokers, "kafka: {what} (retrying; repeats are counted)")
            }
            Some(Line::Ongoing(c)) => {
                warn!(%group, brokers = %self.config.brokers, occurrences = c.occurrences, seconds = c.over.as_secs(), "kafka: still failing: {what}")
            }
            _ => debug!(%group, "kafka: {what}"),
        }
    }

    fn clear_unreachable(&self) {
        let mut e = self.episodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Line::Ended(c)) = e.unreachable.cleared(Instant::now()) {
            info!(group = %self.config.group_id, failures = c.occurrences, "kafka: brokers reachable again");
        }
    }
}

#[derive(Clone, Copy)]
enum Condition {
    Unreachable,
    MissingTopic,
    Other,
}

fn names(tpl: &TopicPartitionList) -> String {
    tpl.elements()
        .iter()
        .map(|e| format!("{}/{}", e.topic(), e.partition()))
        .collect::<Vec<_>>()
        .join(",")
}

fn is_unreachable(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::Resolve
            | RDKafkaErrorCode::BrokerNotAvailable
    )
}

impl ClientContext for Context {
    // librdkafka's own lines go to debug: what an operator needs is logged once per episode
    // by `error` below.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        debug!(target: "librdkafka", ?level, facility = fac, "{message}");
    }

    fn stats(&self, statistics: Statistics) {
        let paused = self.fetch_paused.load(Relaxed);
        for (name, topic) in &statistics.topics {
            for (&partition, p) in &topic.partitions {
                // -1 is librdkafka's internal "unassigned" partition.
                if partition < 0 {
                    continue;
                }
                let counters = self.stats.partition(name, partition);
                counters.set_stats_committed(p.committed_offset);
                // While fetching is paused the end offset here is the last fetched one: the
                // loop reads the watermarks instead.
                if !paused && p.consumer_lag >= 0 {
                    counters.lag(p.consumer_lag);
                }
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.stats.error();
        match error.rdkafka_error_code() {
            Some(code) if is_unreachable(code) => self.client_episode(
                Condition::Unreachable,
                &format!("brokers unreachable: {reason}"),
            ),
            _ => self.client_episode(Condition::Other, &format!("{error}: {reason}")),
        }
    }
}

impl ConsumerContext for Context {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => self.on_assign(consumer, tpl),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => self.on_revoke(consumer, tpl),
            other => {
                self.stats.error();
                warn!(group = %self.config.group_id, error = ?other, "kafka: rebalance failed; releasing every partition");
                let mut st = self.state();
                self.tick(&mut st);
                if self.may_deliver(consumer, &mut st, None) {
                    self.flush(&mut st);
                }
                drop(st);
                let _ = consumer.unassign();
            }
        }
    }
}

/// The librdkafka configuration of a source: the relay's keys, then the pass-through ones.
fn client_config(config: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &config.brokers)
        .set("group.id", &config.group_id)
        .set("client.id", &config.client_id)
        .set("group.protocol", config.group_protocol.as_str());
    if let Some(session) = config.session {
        // The classic protocol's member timeouts are the client's: a relay's default is
        // seconds, not librdkafka's 45 s (the brokers' own minimum is 6 s).
        c.set("partition.assignment.strategy", "cooperative-sticky")
            .set(
                "session.timeout.ms",
                session.timeout.as_millis().to_string(),
            )
            .set(
                "heartbeat.interval.ms",
                session.heartbeat.as_millis().to_string(),
            );
    }
    c.set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set(
            "auto.offset.reset",
            match config.initial_offset {
                InitialOffset::Latest => "latest",
                InitialOffset::Earliest | InitialOffset::Timestamp => "earliest",
            },
        )
        .set("allow.auto.create.topics", "false")
        .set(
            "statistics.interval.ms",
            crate::config::DEFAULT_STATISTICS_INTERVAL_MS.to_string(),
        );
    for (k, v) in &config.properties {
        c.set(k, v);
    }
    c
}

/// The gap after which the thread checks its membership before delivering: with the classic
/// protocol, half of what the session leaves after a heartbeat (a member is dropped once
/// unheard for the session timeout, and heartbeats go every heartbeat interval); with the
/// consumer protocol, whose session the brokers set, [`CONSUMER_PROTOCOL_GAP`].
fn gap_limit(config: &KafkaConfig) -> Duration {
    match config.session {
        Some(s) => (s.timeout.saturating_sub(s.heartbeat) / 2).max(Duration::from_millis(200)),
        None => CONSUMER_PROTOCOL_GAP,
    }
}

/// What a consumer thread needs.
pub(crate) struct Parts {
    pub config: Arc<KafkaConfig>,
    pub stats: Arc<KafkaStats>,
    pub relay: SourceContext,
    pub runtime: Handle,
}

/// Creates the consumer and subscribes; an error here is a configuration problem
/// (an unknown property, a value librdkafka refuses).
pub(crate) fn create(parts: Parts) -> Result<BaseConsumer<Context>, KafkaError> {
    let Parts {
        config,
        stats,
        relay,
        runtime,
    } = parts;
    let context = Context {
        state: Mutex::new(State {
            ingestor: relay.ingestor(),
            payloads: Payloads::new(config.format, config.max_line_length),
            positions: Positions::default(),
            pending_since: None,
            bad: Episode::default(),
            membership: Membership {
                alive: Instant::now(),
                gap: None,
                suspended: None,
            },
        }),
        episodes: Mutex::new(Episodes::default()),
        gap_limit: gap_limit(&config),
        fetch_paused: AtomicBool::new(false),
        config: config.clone(),
        stats,
        runtime,
    };
    let consumer: BaseConsumer<Context> = client_config(&config).create_with_context(context)?;
    let topics: Vec<&str> = config.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics)?;
    Ok(consumer)
}

/// Polls until the relay's stop signal; then flushes, commits what was delivered and leaves
/// the group (dropping the consumer revokes its partitions through the callback above).
pub(crate) fn run(consumer: BaseConsumer<Context>, relay: &SourceContext) {
    let shutdown = relay.stop();
    let ctx = consumer.context().clone();
    let config = ctx.config.clone();
    let mut last_commit = Instant::now();
    let mut backlogged = false;
    let mut lag_refreshed = Instant::now();
    while !shutdown.is_cancelled() {
        let wait = if ctx.state().pending_since.is_some() {
            Duration::ZERO
        } else {
            IDLE_POLL
        };
        let polled = consumer.poll(wait);
        let idle = polled.is_none();
        let mut st = ctx.state();
        ctx.tick(&mut st);
        match polled {
            Some(Ok(message)) => {
                ctx.clear_unreachable();
                let at = (message.topic(), message.partition(), message.offset());
                if ctx.may_deliver(&consumer, &mut st, Some(at)) {
                    feed(&ctx, &mut st, &message);
                }
            }
            Some(Err(e)) => {
                ctx.stats.error();
                match e.rdkafka_error_code() {
                    Some(
                        RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic,
                    ) => ctx.client_episode(
                        Condition::MissingTopic,
                        &format!(
                            "a subscribed topic does not exist ({:?}): {e}",
                            config.topics
                        ),
                    ),
                    Some(code) if is_unreachable(code) => ctx.client_episode(
                        Condition::Unreachable,
                        &format!("brokers unreachable: {e}"),
                    ),
                    _ => ctx.client_episode(Condition::Other, &format!("consume failed: {e}")),
                }
            }
            None => {}
        }
        // Flush when idle, when enough is pending, or when the oldest pending datapoint has
        // waited long enough; then see whether the queues want us to stop fetching.
        let due = match st.pending_since {
            Some(since) => {
                idle || st.ingestor.pending_datapoints() >= FLUSH_EVERY
                    || since.elapsed() >= FLUSH_LINGER
            }
            None => idle,
        };
        if due {
            ctx.tick(&mut st);
            if st.pending_since.is_none() || ctx.may_deliver(&consumer, &mut st, None) {
                ctx.flush(&mut st);
            }
            ctx.tick(&mut st);
            backlogged = relay.backlogged(config.queue_high_water);
        }
        // A suspended membership is checked again on its own, messages or not.
        if st.membership.suspended.is_some() {
            ctx.may_deliver(&consumer, &mut st, None);
        }
        let pause_now = backlogged || st.membership.suspended.is_some();
        if pause_now != ctx.fetch_paused.load(Relaxed) {
            ctx.fetch_paused.store(pause_now, Relaxed);
            pause(&consumer, pause_now);
            lag_refreshed = Instant::now();
        }
        if pause_now && lag_refreshed.elapsed() >= config.statistics_interval {
            ctx.refresh_lag(&consumer, &st);
            lag_refreshed = Instant::now();
            ctx.tick(&mut st);
        }
        if last_commit.elapsed() >= config.commit_interval && st.membership.suspended.is_none() {
            ctx.commit(&consumer, &mut st);
            last_commit = Instant::now();
            ctx.tick(&mut st);
        }
    }
    let mut st = ctx.state();
    ctx.tick(&mut st);
    if ctx.may_deliver(&consumer, &mut st, None) {
        ctx.flush_and_commit(&consumer, &mut st);
    }
    drop(st);
    info!(group = %config.group_id, "kafka: delivered offsets committed; leaving the group");
    // Leaving runs the revoke callback (nothing left to commit) and closes the client.
    drop(consumer);
}

fn feed(ctx: &Context, st: &mut State, message: &BorrowedMessage<'_>) {
    let payload = message.payload().unwrap_or_default();
    let State {
        ingestor,
        payloads,
        positions,
        pending_since,
        bad,
        ..
    } = st;
    let fed = payloads.feed(payload, ingestor);
    if ingestor.pending_datapoints() > 0 && pending_since.is_none() {
        *pending_since = Some(Instant::now());
    }
    if let Some(p) = positions.parsed(message.topic(), message.partition(), message.offset()) {
        p.counts.messages += 1;
        p.counts.lines += fed.lines;
        p.counts.bytes += payload.len() as u64;
    }
    if let Some(reason) = fed.bad {
        ctx.stats.bad_messages(reason, 1);
        let what = match reason {
            BadMessage::NotGraphite => "held no Graphite line",
            BadMessage::BadPickle => "was not a valid pickle payload",
        };
        if let Some(Line::Started(_) | Line::Ongoing(_)) = bad.occurred(1, Instant::now()) {
            warn!(
                group = %ctx.config.group_id,
                topic = message.topic(),
                partition = message.partition(),
                offset = message.offset(),
                "kafka: a message {what}; dropped and counted (badMessages, invalidDatapoints); further ones are counted, logged at most every 10 s"
            );
        }
    }
}

fn pause(consumer: &BaseConsumer<Context>, on: bool) {
    let Ok(assignment) = consumer.assignment() else {
        return;
    };
    let result = if on {
        consumer.pause(&assignment)
    } else {
        consumer.resume(&assignment)
    };
    if let Err(e) = result {
        debug!(error = %e, "kafka: pause/resume failed");
    }
}
