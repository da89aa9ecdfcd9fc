//! carbon's `DESTINATION_POOL_REPLICAS`: instances that share `host:port` form one pool.
//!
//! carbon's `CarbonClientManager.getFactories` maps every destination the router yields to its
//! pool (`destination[0:2]`, host and port without the instance) and, from each pool, takes the
//! client with the smallest queue; the result is a set, so a datapoint the router sends to two
//! members of one pool is sent once. The ring itself is unchanged: placement still hashes on
//! `(host, instance)`, pooling only changes which connection carries the datapoint.
//!
//! anthracite applies the same rule in two steps: the ingestor maps each routed index to its
//! pool's [`representative`](ReplicaPools::representative) (so duplicates within a pool collapse
//! per datapoint, as carbon's set does), and when it flushes a pending batch it hands the whole
//! batch to the pool member whose queue is shortest at that moment. carbon compares queue
//! lengths per datapoint; per batch keeps locks off the per-datapoint path, and a batch holds
//! one read's worth of data, so the load still spreads across the members.

use super::DestinationSpec;

/// Which destinations share `host:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaPools {
    /// Per destination index: the first destination with the same host and port.
    representative: Vec<u16>,
    /// Per destination index: the members of its pool when it is a representative of a pool
    /// of two or more (in destination order), else empty.
    members: Vec<Vec<u16>>,
}

impl ReplicaPools {
    /// Groups `destinations` by `(host, port)`; `None` when no two share one (pooling then
    /// changes nothing).
    pub fn new(destinations: &[DestinationSpec]) -> Option<Self> {
        let n = destinations.len();
        let mut representative = Vec::with_capacity(n);
        let mut members = vec![Vec::new(); n];
        for (i, d) in destinations.iter().enumerate() {
            let first = destinations
                .iter()
                .position(|e| e.host == d.host && e.port == d.port)
                .unwrap_or(i);
            representative.push(first as u16);
            members[first].push(i as u16);
        }
        for m in &mut members {
            if m.len() < 2 {
                m.clear();
            }
        }
        members.iter().any(|m| !m.is_empty()).then_some(Self {
            representative,
            members,
        })
    }

    /// The pool `destination` belongs to, named by its first member.
    #[inline]
    pub fn representative(&self, destination: u16) -> u16 {
        self.representative
            .get(usize::from(destination))
            .copied()
            .unwrap_or(destination)
    }

    /// The members of the pool `representative` names (empty unless it pools two or more).
    pub fn members(&self, representative: u16) -> &[u16] {
        self.members
            .get(usize::from(representative))
            .map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(list: &str) -> Vec<DestinationSpec> {
        DestinationSpec::parse_list(list).expect("destinations")
    }

    #[test]
    fn instances_sharing_host_and_port_pool_together() {
        let pools = ReplicaPools::new(&specs(
            "foo:2001:0, foo:2001:1, foo:2002:2, bar:2001:3, foo:2001:4",
        ))
        .expect("one pool");
        assert_eq!(
            (0..5).map(|d| pools.representative(d)).collect::<Vec<_>>(),
            vec![0, 0, 2, 3, 0]
        );
        assert_eq!(pools.members(0), &[0, 1, 4]);
        assert!(pools.members(2).is_empty());
        assert!(pools.members(1).is_empty());
        assert_eq!(ReplicaPools::new(&specs("a:1:x, a:2:y, b:1:z")), None);
    }
}
