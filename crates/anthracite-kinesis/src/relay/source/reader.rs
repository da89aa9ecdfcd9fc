//! One task per shard: GetRecords → user records → lines → the pipeline.
//!
//! The loop: wait while the destination queues are over their high-water mark; pace
//! (≥ `poll_busy` between calls); GetRecords; de-aggregate, decode and parse every user
//! record after the skip position; flush into the queues; publish the shard's position to
//! the coordinator's shared checkpoint (only now — after the flush — so a checkpoint never
//! runs ahead of delivery). `NextShardIterator` absent means SHARD_END: the reader marks the
//! shard ended and returns the children the server named.
//!
//! With a lease table, the reader checks its [`LeaseGuard`] before every GetRecords call and
//! right before every hand-over to the queues (parse, check, flush, with no wait between the
//! check and the flush): a lease lost, or not renewed within the lease duration by this
//! worker's monotonic clock (which runs on while the process is stopped), stops the reader,
//! and what it fetched and parsed is discarded, not delivered. So a worker paused past its
//! lease (SIGSTOP, a frozen container) never delivers, after it resumes, a batch it fetched
//! before or during the pause: the shard's new owner reads it from the last checkpoint. Only
//! a pause that falls inside a flush already under way can still deliver that flush late.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::error::SdkError;
use aws_sdk_kinesis::operation::get_records::GetRecordsError;
use aws_sdk_kinesis::operation::get_shard_iterator::GetShardIteratorError;
use aws_sdk_kinesis::primitives::DateTime;
use aws_sdk_kinesis::types::ShardIteratorType;
use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::checkpoint::{Position, SequenceNumber, StreamCheckpoint};
use super::decode::PayloadDecoder;
use super::leases::LeaseGuard;
use super::stats::{BatchCounts, KinesisStats, LeaseLoss, ShardMetrics, log_lease_loss};
use crate::config::InitialPosition;
use crate::config::KinesisConfig;
use crate::relay::error_text;

use crate::kpl::{Deaggregated, deaggregate};
use anthracite::Ingestor;
use anthracite::extension::SourceContext;

/// Where a reader starts when its shard has no checkpoint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum StartAt {
    /// The oldest retained record.
    TrimHorizon,
    /// After the newest record at the time of the call.
    Latest,
    /// The first record at or after this many seconds since the epoch.
    Timestamp(f64),
}

impl StartAt {
    /// The configured initial position.
    pub(crate) fn initial(config: &KinesisConfig) -> Self {
        match (config.initial_position, config.initial_timestamp) {
            (InitialPosition::TrimHorizon, _) => StartAt::TrimHorizon,
            (InitialPosition::Latest, _) => StartAt::Latest,
            (InitialPosition::AtTimestamp, Some(t)) => StartAt::Timestamp(t),
            (InitialPosition::AtTimestamp, None) => StartAt::TrimHorizon,
        }
    }
}

/// How a reader finished.
#[derive(Debug)]
pub(crate) enum ReaderExit {
    /// SHARD_END: everything was delivered; `children` as returned by GetRecords (may be
    /// empty when the server does not report them).
    Ended {
        /// Child shard ids with their parents.
        children: Vec<(String, Vec<String>)>,
    },
    /// Shutdown.
    Stopped,
    /// The shard's lease was lost or expired: the batch in hand was not delivered.
    LeaseLost,
}

/// The lease check failed while the reader held data: it was discarded, not delivered.
struct Dropped;

/// What a reader needs; one per shard.
pub(crate) struct ShardReader {
    pub(crate) config: Arc<KinesisConfig>,
    pub(crate) control: Client,
    pub(crate) data: Client,
    pub(crate) relay: SourceContext,
    pub(crate) stats: Arc<KinesisStats>,
    pub(crate) progress: Arc<Mutex<StreamCheckpoint>>,
    pub(crate) shard_id: String,
    /// Last delivered user record, from the checkpoint.
    pub(crate) resume: Option<Position>,
    /// Without a checkpoint.
    pub(crate) start: StartAt,
    /// Lease mode: the shard's lease.
    pub(crate) lease: Option<Arc<LeaseGuard>>,
}

/// Delay after a queue-full check that said "wait".
const PAUSE_POLL: Duration = Duration::from_millis(100);
/// Datapoints parsed before an intermediate flush inside one large GetRecords batch.
const FLUSH_EVERY: u64 = 16_384;

enum Outcome<T> {
    Ok(T),
    Stop,
}

impl ShardReader {
    /// Reads the shard until SHARD_END or shutdown.
    pub(crate) async fn run(self, shutdown: CancellationToken) -> ReaderExit {
        let mut st = State {
            ingestor: self.relay.ingestor(),
            decoder: PayloadDecoder::new(self.config.content_encoding),
            metrics: ShardMetrics::new(&self.stats, &self.shard_id),
            last: self.resume.clone(),
            backoff: self.config.backoff_min,
        };
        info!(stream = %self.config.stream_name, shard = %self.shard_id, resume = ?st.last, "shard reader started");
        let Outcome::Ok(mut iterator) = self.new_iterator(&mut st, &shutdown).await else {
            return ReaderExit::Stopped;
        };
        let mut next_call = Instant::now();
        loop {
            if !self.lease_valid() {
                return self.lease_lost(&mut st, 0);
            }
            // Downstream full: stop reading, commit nothing new.
            if self.relay.backlogged(self.config.queue_high_water) {
                self.stats.paused();
                while self.relay.backlogged(self.config.queue_high_water) {
                    if sleep_or_stop(PAUSE_POLL, &shutdown).await {
                        return ReaderExit::Stopped;
                    }
                }
            }
            if sleep_until_or_stop(next_call, &shutdown).await {
                return ReaderExit::Stopped;
            }
            // The sleeps above are where a paused process resumes: never fetch on a lease
            // that may be another worker's by now.
            if !self.lease_valid() {
                return self.lease_lost(&mut st, 0);
            }
            let call = self
                .data
                .get_records()
                .shard_iterator(&iterator)
                .limit(self.config.max_records);
            let call = match &self.config.stream_arn {
                Some(arn) => call.stream_arn(arn),
                None => call,
            };
            let response = tokio::select! {
                r = call.send() => r,
                _ = shutdown.cancelled() => return ReaderExit::Stopped,
            };
            let out = match response {
                Ok(out) => out,
                Err(e) => {
                    let (expired, throttled) = classify(&e);
                    if throttled {
                        st.metrics.throttled(&self.stats);
                        debug!(shard = %self.shard_id, "GetRecords throttled; backing off");
                    } else if expired {
                        st.metrics.expired(&self.stats);
                        info!(shard = %self.shard_id, "shard iterator expired; resuming after the last processed record");
                        match self.new_iterator(&mut st, &shutdown).await {
                            Outcome::Ok(it) => iterator = it,
                            Outcome::Stop => return ReaderExit::Stopped,
                        }
                        continue;
                    } else {
                        self.stats.error();
                        warn!(stream = %self.config.stream_name, shard = %self.shard_id, error = %error_text(&e), "GetRecords failed; retrying");
                    }
                    next_call = Instant::now() + st.next_backoff(self.config.backoff_max);
                    continue;
                }
            };
            st.backoff = self.config.backoff_min;
            let aws_sdk_kinesis::operation::get_records::GetRecordsOutput {
                records,
                next_shard_iterator,
                millis_behind_latest,
                child_shards,
                ..
            } = out;
            let count = records.len();
            // The lease may have expired while the call was out (a pause, a partition): a
            // batch delivered now could duplicate the new owner's.
            if !self.lease_valid() {
                return self.lease_lost(&mut st, count);
            }
            if self
                .process(&mut st, records, millis_behind_latest)
                .await
                .is_err()
            {
                return self.lease_lost(&mut st, count);
            }
            let busy = count > 0 && millis_behind_latest.is_some_and(|ms| ms > 0);
            next_call = Instant::now()
                + if busy {
                    self.config.poll_busy
                } else {
                    self.config.poll_idle
                };
            match next_shard_iterator {
                Some(it) => iterator = it,
                None => {
                    let children = child_shards
                        .unwrap_or_default()
                        .into_iter()
                        .map(|c| (c.shard_id, c.parent_shards))
                        .collect();
                    self.publish(&st.last, true);
                    info!(stream = %self.config.stream_name, shard = %self.shard_id, "shard end reached");
                    return ReaderExit::Ended { children };
                }
            }
        }
    }

    /// Valid to fetch and deliver now: not lost, renewed within the lease duration (always
    /// without a lease table).
    fn lease_valid(&self) -> bool {
        self.lease.as_ref().is_none_or(|l| l.valid())
    }

    /// The lease check failed holding `records` fetched records (and whatever of them was
    /// parsed): discards it all, counts the loss unless the renewer already did, logs the
    /// stream's episode, and stops.
    fn lease_lost(&self, st: &mut State, records: usize) -> ReaderExit {
        let datapoints = st.ingestor.discard();
        if let Some(guard) = &self.lease
            && guard.first_to_count_loss()
            && let Some(line) = self.stats.lease_lost(LeaseLoss::Expired, 1)
        {
            let worker = self
                .config
                .leases
                .as_ref()
                .map_or("", |l| l.worker_id.as_str());
            log_lease_loss(
                &self.config.stream_name,
                worker,
                &self.shard_id,
                "not renewed within the lease duration when its reader went to fetch or deliver (paused, or cut off from the lease table)",
                line,
            );
        }
        debug!(stream = %self.config.stream_name, shard = %self.shard_id, records, datapoints, "lease no longer valid: the reader stops; what it held is dropped, not delivered (the shard's new owner reads it from the last checkpoint)");
        ReaderExit::LeaseLost
    }

    /// Checks the lease right before a hand-over to the queues: nothing awaits between this
    /// check and the flush. On failure what was parsed is left for [`Self::lease_lost`].
    async fn deliver(&self, st: &mut State) -> Result<(), Dropped> {
        if !self.lease_valid() {
            return Err(Dropped);
        }
        st.ingestor.flush().await;
        self.publish(&st.last, false);
        Ok(())
    }

    /// Parses one batch, flushing into the queues; publishes the position after each flush.
    /// `Err` when the lease check before a flush failed: the rest is not delivered.
    async fn process(
        &self,
        st: &mut State,
        records: Vec<aws_sdk_kinesis::types::Record>,
        behind: Option<i64>,
    ) -> Result<(), Dropped> {
        let skip = st.last.clone();
        let mut counts = BatchCounts::default();
        for record in records {
            let Ok(sequence) = SequenceNumber::new(record.sequence_number) else {
                self.stats.error();
                continue;
            };
            let data = Bytes::from(record.data.into_inner());
            counts.records += 1;
            counts.bytes += data.len() as u64;
            // Everything at or before `skip` was delivered before a restart or re-fetch.
            let seen = |sub: u64| {
                skip.as_ref()
                    .is_some_and(|s| (&sequence, sub) <= (&s.sequence, s.sub_sequence))
            };
            let mut last_sub = None;
            match deaggregate(&data) {
                Deaggregated::Aggregated(agg) => {
                    counts.kpl_aggregated += 1;
                    for (sub, user) in agg.records.iter().enumerate() {
                        let sub = sub as u64;
                        if !seen(sub) {
                            self.user_record(st, &user.data, &mut counts);
                            last_sub = Some(sub);
                        }
                    }
                }
                Deaggregated::Plain(data) | Deaggregated::Corrupt(data, _) => {
                    if data.starts_with(&crate::kpl::MAGIC) {
                        counts.kpl_corrupt += 1;
                    }
                    if !seen(0) {
                        self.user_record(st, &data, &mut counts);
                        last_sub = Some(0);
                    }
                }
            }
            if let Some(sub) = last_sub {
                st.last = Some(Position {
                    sequence,
                    sub_sequence: sub,
                });
            }
            if st.ingestor.pending_datapoints() >= FLUSH_EVERY {
                self.deliver(st).await?;
            }
        }
        self.deliver(st).await?;
        st.metrics.batch(&self.stats, &counts, behind);
        Ok(())
    }

    #[inline]
    fn user_record(&self, st: &mut State, data: &[u8], counts: &mut BatchCounts) {
        counts.user_records += 1;
        match st.decoder.decode(data) {
            Ok(text) => {
                counts.lines += st.ingestor.message(text, self.config.max_line_length).lines;
            }
            Err(_) => counts.decode_errors += 1,
        }
    }

    /// Records the delivered position (and SHARD_END) for the coordinator to commit.
    fn publish(&self, last: &Option<Position>, ended: bool) {
        let Ok(mut p) = self.progress.lock() else {
            return;
        };
        let entry = p.shards.entry(self.shard_id.clone()).or_default();
        if let Some(pos) = last
            && entry.position.as_ref() != Some(pos)
        {
            entry.position = Some(pos.clone());
        }
        if ended {
            entry.ended = true;
        }
    }

    /// A fresh iterator: just after the last delivered record, or the start position.
    async fn new_iterator(&self, st: &mut State, shutdown: &CancellationToken) -> Outcome<String> {
        loop {
            let req = self.control.get_shard_iterator().shard_id(&self.shard_id);
            let req = match &self.config.stream_arn {
                Some(arn) => req.stream_arn(arn),
                None => req.stream_name(&self.config.stream_name),
            };
            let req = match (&st.last, self.start) {
                // AT, not AFTER: the record may be an aggregate only partly delivered; the
                // skip in `process` drops what was.
                (Some(pos), _) => req
                    .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                    .starting_sequence_number(pos.sequence.as_str()),
                (None, StartAt::TrimHorizon) => {
                    req.shard_iterator_type(ShardIteratorType::TrimHorizon)
                }
                (None, StartAt::Latest) => req.shard_iterator_type(ShardIteratorType::Latest),
                (None, StartAt::Timestamp(t)) => req
                    .shard_iterator_type(ShardIteratorType::AtTimestamp)
                    .timestamp(DateTime::from_secs_f64(t)),
            };
            let r = tokio::select! {
                r = req.send() => r,
                _ = shutdown.cancelled() => return Outcome::Stop,
            };
            match r {
                Ok(out) => {
                    if let Some(it) = out.shard_iterator() {
                        st.backoff = self.config.backoff_min;
                        return Outcome::Ok(it.to_string());
                    }
                    self.stats.error();
                    warn!(shard = %self.shard_id, "GetShardIterator returned no iterator; retrying");
                }
                Err(e) => {
                    self.stats.error();
                    let missing = matches!(
                        e.as_service_error(),
                        Some(GetShardIteratorError::ResourceNotFoundException(_))
                    );
                    if missing {
                        warn!(stream = %self.config.stream_name, shard = %self.shard_id, "stream or shard not found (deleted?); retrying");
                    } else {
                        warn!(stream = %self.config.stream_name, shard = %self.shard_id, error = %error_text(&e), "GetShardIterator failed; retrying");
                    }
                }
            }
            if sleep_or_stop(st.next_backoff(self.config.backoff_max), shutdown).await {
                return Outcome::Stop;
            }
        }
    }
}

struct State {
    ingestor: Ingestor,
    decoder: PayloadDecoder,
    metrics: ShardMetrics,
    last: Option<Position>,
    backoff: Duration,
}

impl State {
    /// Exponential back-off with full jitter over the upper half: `[b/2, b]`, then doubles.
    fn next_backoff(&mut self, max: Duration) -> Duration {
        let b = self.backoff;
        self.backoff = (b * 2).min(max);
        let half = b / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

/// `(expired iterator, throttled)`.
fn classify(e: &SdkError<GetRecordsError>) -> (bool, bool) {
    match e.as_service_error() {
        Some(GetRecordsError::ExpiredIteratorException(_)) => (true, false),
        Some(GetRecordsError::ProvisionedThroughputExceededException(_))
        | Some(GetRecordsError::KmsThrottlingException(_)) => (false, true),
        _ => (false, false),
    }
}

/// Sleeps; true when shutdown came first.
pub(crate) async fn sleep_or_stop(d: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = shutdown.cancelled() => true,
    }
}

async fn sleep_until_or_stop(t: Instant, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep_until(t) => false,
        _ = shutdown.cancelled() => true,
    }
}
