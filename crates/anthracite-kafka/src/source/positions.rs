//! Where each assigned partition stands: parsed, accepted by the destination queues, and
//! committed to the group.
//!
//! Offsets here are Kafka's *next* offsets (the last message's offset + 1), the value a
//! commit carries. A partition's messages are fed in order by one thread, so "every earlier
//! message of the partition is accepted" is simply: the ingestor was flushed after the
//! message was parsed. [`Positions::accept_all`] runs after each flush, and only accepted
//! offsets are ever committed.

use std::sync::Arc;

use super::stats::{PartitionCounters, PartitionCounts};

/// One assigned partition.
#[derive(Debug)]
pub(crate) struct Part {
    pub topic: String,
    pub partition: i32,
    /// Next offset after the last message fed to the ingestor.
    parsed: Option<i64>,
    /// Next offset after the last message whose datapoints the queues took.
    accepted: Option<i64>,
    /// The last committed offset.
    committed: Option<i64>,
    /// Counts since the last flush (published then).
    pub counts: PartitionCounts,
    pub counters: Arc<PartitionCounters>,
}

/// Every partition assigned to this relay.
#[derive(Debug, Default)]
pub(crate) struct Positions {
    parts: Vec<Part>,
    /// Index of the partition the last message came from (messages come in runs).
    last: usize,
}

impl Positions {
    /// A partition joins (a rebalance assigned it).
    pub(crate) fn assign(&mut self, topic: &str, partition: i32, counters: Arc<PartitionCounters>) {
        if self.find(topic, partition).is_none() {
            counters.set_assigned(true);
            self.parts.push(Part {
                topic: topic.to_string(),
                partition,
                parsed: None,
                accepted: None,
                committed: None,
                counts: PartitionCounts::default(),
                counters,
            });
        }
    }

    /// A partition leaves (revoked or lost); what it had accepted is committed before.
    pub(crate) fn revoke(&mut self, topic: &str, partition: i32) {
        self.parts.retain(|p| {
            let gone = p.topic == topic && p.partition == partition;
            if gone {
                p.counters.set_assigned(false);
            }
            !gone
        });
        self.last = 0;
    }

    fn find(&self, topic: &str, partition: i32) -> Option<usize> {
        if let Some(p) = self.parts.get(self.last)
            && p.partition == partition
            && p.topic == topic
        {
            return Some(self.last);
        }
        self.parts
            .iter()
            .position(|p| p.partition == partition && p.topic == topic)
    }

    /// Records that the message at `offset` was fed; `None` for a partition not assigned
    /// (cannot happen with librdkafka's assignment; such a message is still delivered, its
    /// offset never committed).
    pub(crate) fn parsed(&mut self, topic: &str, partition: i32, offset: i64) -> Option<&mut Part> {
        let i = self.find(topic, partition)?;
        self.last = i;
        let p = self.parts.get_mut(i)?;
        p.parsed = Some(offset + 1);
        Some(p)
    }

    /// After a flush: everything parsed is accepted. Returns the parts, to publish counts.
    pub(crate) fn accept_all(&mut self) -> &mut [Part] {
        for p in &mut self.parts {
            p.accepted = p.parsed;
        }
        &mut self.parts
    }

    /// Accepted offsets not yet committed, as `(topic, partition, next offset)`.
    pub(crate) fn to_commit(&self) -> Vec<(String, i32, i64)> {
        self.parts
            .iter()
            .filter_map(|p| match (p.accepted, p.committed) {
                (Some(a), Some(c)) if a <= c => None,
                (Some(a), _) => Some((p.topic.clone(), p.partition, a)),
                (None, _) => None,
            })
            .collect()
    }

    /// `offsets` (from [`to_commit`](Self::to_commit)) were committed.
    pub(crate) fn committed(&mut self, offsets: &[(String, i32, i64)]) {
        for (topic, partition, offset) in offsets {
            if let Some(i) = self.find(topic, *partition)
                && let Some(p) = self.parts.get_mut(i)
            {
                p.committed = Some(*offset);
                p.counters.committed_now();
            }
        }
    }

    /// Partitions assigned now.
    pub(crate) fn len(&self) -> usize {
        self.parts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::KafkaStats;

    #[test]
    fn only_accepted_offsets_are_committed_once() {
        let stats = KafkaStats::new("g");
        let mut p = Positions::default();
        p.assign("t", 0, stats.partition("t", 0));
        p.assign("t", 1, stats.partition("t", 1));
        assert!(p.parsed("t", 0, 41).is_some());
        // Parsed but not flushed: nothing to commit.
        assert!(p.to_commit().is_empty());
        p.accept_all();
        let c = p.to_commit();
        assert_eq!(c, vec![("t".to_string(), 0, 42)]);
        p.committed(&c);
        assert!(p.to_commit().is_empty(), "committed once");
        assert!(p.parsed("t", 1, 7).is_some());
        assert!(p.parsed("u", 0, 7).is_none(), "not assigned");
        p.revoke("t", 1);
        p.accept_all();
        assert!(
            p.to_commit().is_empty(),
            "a revoked partition is not committed"
        );
        assert_eq!(p.len(), 1);
    }
}
