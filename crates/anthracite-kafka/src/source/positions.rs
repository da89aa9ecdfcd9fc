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
    /// Offset of the first message fed since the assignment: where reading started.
    first: Option<i64>,
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
                first: None,
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
        p.first.get_or_insert(offset);
        p.parsed = Some(offset + 1);
        Some(p)
    }

    /// Where each partition stands for a commit that only proves this member still owns its
    /// partitions: what was accepted, else committed, else where reading started, else (for
    /// the partition of `in_hand`, a message not fed yet) that message's offset. Committing
    /// any of these skips nothing.
    pub(crate) fn standing(&self, in_hand: Option<(&str, i32, i64)>) -> Vec<(String, i32, i64)> {
        let out: Vec<(String, i32, i64)> = self
            .parts
            .iter()
            .filter_map(|p| {
                let at = p.accepted.or(p.committed).or(p.first)?;
                Some((p.topic.clone(), p.partition, at))
            })
            .collect();
        self.and_in_hand(out, in_hand)
    }

    /// `out` with the partition of `in_hand` at that message, when it is one of ours and not
    /// already in `out`.
    fn and_in_hand(
        &self,
        mut out: Vec<(String, i32, i64)>,
        in_hand: Option<(&str, i32, i64)>,
    ) -> Vec<(String, i32, i64)> {
        if let Some((topic, partition, offset)) = in_hand
            && self.find(topic, partition).is_some()
            && !out.iter().any(|(t, p, _)| t == topic && *p == partition)
        {
            out.push((topic.to_string(), partition, offset));
        }
        out
    }

    /// Where to seek so that nothing fed but not flushed, and not the message `in_hand`, is
    /// skipped when it is dropped instead of delivered: each partition with messages fed since
    /// its last accepted one goes back to that one (or to where reading started), and the
    /// partition of `in_hand`, if not among them, to that message.
    pub(crate) fn rewind_targets(
        &self,
        in_hand: Option<(&str, i32, i64)>,
    ) -> Vec<(String, i32, i64)> {
        let out: Vec<(String, i32, i64)> = self
            .parts
            .iter()
            .filter(|p| p.parsed.is_some() && p.parsed != p.accepted)
            .filter_map(|p| Some((p.topic.clone(), p.partition, p.accepted.or(p.first)?)))
            .collect();
        self.and_in_hand(out, in_hand)
    }

    /// What was fed since the last flush was dropped: each partition is back at its last
    /// accepted message, its unpublished counts zero.
    pub(crate) fn rewound(&mut self) {
        for p in &mut self.parts {
            p.parsed = p.accepted;
            p.counts = PartitionCounts::default();
        }
    }

    /// Every assigned partition with the offset its lag is counted from (committed, else
    /// accepted), as `(topic, partition, offset, counters)`.
    pub(crate) fn lag_bases(&self) -> Vec<(String, i32, Option<i64>, Arc<PartitionCounters>)> {
        self.parts
            .iter()
            .map(|p| {
                (
                    p.topic.clone(),
                    p.partition,
                    p.committed.or(p.accepted),
                    p.counters.clone(),
                )
            })
            .collect()
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

    #[test]
    fn a_drop_rewinds_to_the_last_accepted_message_and_skips_nothing() {
        let stats = KafkaStats::new("g");
        let mut p = Positions::default();
        for part in 0..3 {
            p.assign("t", part, stats.partition("t", part));
        }
        // Partition 0: 10 and 11 delivered, 12 fed. Partition 1: 5 fed, nothing delivered.
        // Partition 2: nothing read.
        for o in [10, 11] {
            assert!(p.parsed("t", 0, o).is_some());
        }
        p.accept_all();
        assert!(p.parsed("t", 0, 12).is_some());
        assert!(p.parsed("t", 1, 5).is_some());
        assert_eq!(
            p.standing(Some(("t", 2, 40))),
            vec![
                ("t".to_string(), 0, 12),
                ("t".to_string(), 1, 5),
                ("t".to_string(), 2, 40)
            ],
            "accepted, else where reading started, else the message in hand"
        );
        assert_eq!(
            p.rewind_targets(Some(("t", 2, 40))),
            vec![
                ("t".to_string(), 0, 12),
                ("t".to_string(), 1, 5),
                ("t".to_string(), 2, 40)
            ]
        );
        assert_eq!(
            p.rewind_targets(Some(("t", 0, 13))),
            vec![("t".to_string(), 0, 12), ("t".to_string(), 1, 5)],
            "the message in hand comes after what is rewound"
        );
        p.rewound();
        assert!(p.rewind_targets(None).is_empty());
        p.accept_all();
        assert_eq!(p.to_commit(), vec![("t".to_string(), 0, 12)]);
        // Fed again after the rewind, from where it started.
        assert!(p.parsed("t", 1, 5).is_some());
        assert_eq!(p.standing(None)[1], ("t".to_string(), 1, 5));
    }
}
