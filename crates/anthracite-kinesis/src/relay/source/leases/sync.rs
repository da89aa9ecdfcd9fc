//! Shard sync: the shards `ListShards` returns → lease rows. Any worker may run it; every
//! write is idempotent (create if absent, add to a set, delete an ended row).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::lease::{Checkpoint, Lease};
use crate::relay::source::checkpoint::StreamCheckpoint;
use crate::relay::source::shards::ListedShard;

/// What one sync writes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SyncPlan {
    /// Rows to create (if still absent).
    pub create: Vec<Lease>,
    /// `(parent, child)` pairs to add to the parent's `childShardIds`.
    pub add_children: Vec<(String, String)>,
    /// Ended rows whose shard aged out of the stream.
    pub delete: Vec<String>,
    /// Rows whose checkpoint comes from the local checkpoint file.
    pub migrated: usize,
}

/// How new rows start.
#[derive(Clone, Debug)]
pub(crate) struct Initial<'a> {
    /// The configured initial position as a checkpoint (`TRIM_HORIZON`, `LATEST`,
    /// `AT_TIMESTAMP`).
    pub checkpoint: Checkpoint,
    /// With `latest`: shards already closed when the table is first filled are skipped
    /// (created as `SHARD_END`), as a single relay skips them on its first listing.
    pub skip_closed: bool,
    /// A local checkpoint file's positions, used when the table is first filled.
    pub migrate: Option<&'a StreamCheckpoint>,
}

/// Plans a sync of `listed` (a complete listing) against the table's `rows`.
///
/// When the table holds no row yet (a new fleet), rows start at the configured initial
/// position, or at the local checkpoint file's positions (migrating a single relay). Later,
/// a shard without a row is a child of a reshard and starts at `TRIM_HORIZON`, so nothing
/// written to it is missed.
pub(crate) fn plan(listed: &[ListedShard], rows: &[Lease], initial: &Initial<'_>) -> SyncPlan {
    let existing: HashMap<&str, &Lease> = rows.iter().map(|r| (r.key.as_str(), r)).collect();
    let first_fill = rows.is_empty();
    let mut children: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for s in listed {
        for p in &s.parents {
            children.entry(p.as_str()).or_default().push(s.id.clone());
        }
    }
    let mut out = SyncPlan::default();
    for s in listed {
        if existing.contains_key(s.id.as_str()) {
            continue;
        }
        let from_file = initial
            .migrate
            .filter(|_| first_fill)
            .and_then(|m| m.shards.get(&s.id));
        let checkpoint = match from_file {
            Some(f) if f.ended => Some(Checkpoint::ShardEnd),
            Some(f) => f.position.clone().map(Checkpoint::At),
            None => None,
        };
        if checkpoint.is_some() {
            out.migrated += 1;
        }
        let checkpoint = checkpoint.unwrap_or_else(|| {
            if !first_fill {
                Checkpoint::TrimHorizon
            } else if initial.skip_closed && s.closed {
                Checkpoint::ShardEnd
            } else {
                initial.checkpoint.clone()
            }
        });
        let mut kids = children.get(s.id.as_str()).cloned().unwrap_or_default();
        kids.sort();
        let mut parents = s.parents.clone();
        parents.sort();
        out.create.push(Lease {
            parents,
            children: kids,
            hash_range: s.hash_range.clone(),
            ..Lease::new(&s.id, checkpoint)
        });
    }
    for (parent, kids) in &children {
        if let Some(row) = existing.get(parent) {
            for k in kids {
                if !row.children.contains(k) {
                    out.add_children.push((parent.to_string(), k.clone()));
                }
            }
        }
    }
    if !listed.is_empty() {
        let listed_ids: HashSet<&str> = listed.iter().map(|s| s.id.as_str()).collect();
        out.delete = rows
            .iter()
            .filter(|r| r.ended() && !listed_ids.contains(r.key.as_str()))
            .map(|r| r.key.clone())
            .collect();
    }
    out.create.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::source::checkpoint::{Position, SequenceNumber, ShardCheckpoint};

    fn shard(id: &str, parents: &[&str], closed: bool) -> ListedShard {
        ListedShard {
            id: id.into(),
            parents: parents.iter().map(|p| p.to_string()).collect(),
            closed,
            hash_range: Some(("0".into(), "9".into())),
        }
    }

    #[test]
    fn first_fill_uses_initial_position_or_the_file_later_shards_trim_horizon() {
        let listed = vec![
            shard("s0", &[], true),
            shard("s1", &["s0"], false),
            shard("s2", &["s0"], false),
        ];
        let mut file = StreamCheckpoint::default();
        file.shards.insert(
            "s1".into(),
            ShardCheckpoint {
                position: Some(Position {
                    sequence: SequenceNumber::new("42").unwrap_or_else(|e| panic!("{e}")),
                    sub_sequence: 1,
                }),
                ended: false,
            },
        );
        let initial = Initial {
            checkpoint: Checkpoint::Latest,
            skip_closed: true,
            migrate: Some(&file),
        };
        let p = plan(&listed, &[], &initial);
        assert_eq!(p.migrated, 1);
        let cps: Vec<String> = p.create.iter().map(|l| l.checkpoint.to_string()).collect();
        assert_eq!(cps, ["SHARD_END", "42/1", "LATEST"]);
        assert_eq!(p.create[0].children, ["s1", "s2"]);
        assert_eq!(p.create[1].parents, ["s0"]);
        // The table is filled: a new child starts at TRIM_HORIZON, the file is ignored, the
        // parent learns its child.
        let rows = p.create.clone();
        let mut later = listed.clone();
        later.push(shard("s3", &["s1", "s2"], false));
        let p = plan(&later, &rows, &initial);
        assert_eq!(p.create.len(), 1);
        assert_eq!(p.create[0].checkpoint, Checkpoint::TrimHorizon);
        assert_eq!(p.create[0].parents, ["s1", "s2"]);
        assert_eq!(
            p.add_children,
            [
                ("s1".to_string(), "s3".to_string()),
                ("s2".into(), "s3".into())
            ]
        );
        assert_eq!(p.migrated, 0);
    }

    #[test]
    fn ended_rows_of_shards_past_retention_are_deleted() {
        let mut gone = Lease::new("old", Checkpoint::ShardEnd);
        gone.children = vec!["s1".into()];
        let rows = vec![gone, Lease::new("s1", Checkpoint::TrimHorizon)];
        let initial = Initial {
            checkpoint: Checkpoint::TrimHorizon,
            skip_closed: false,
            migrate: None,
        };
        let p = plan(&[shard("s1", &["old"], false)], &rows, &initial);
        assert_eq!(p.delete, ["old"]);
        assert!(
            plan(&[], &rows, &initial).delete.is_empty(),
            "no listing, no delete"
        );
    }
}
