//! A small log-linear latency histogram (microseconds), mergeable and allocation-free on record.
//!
//! Values below 16 get their own bucket; above, each power of two is split into 16 equal
//! sub-buckets, so a reported percentile is within about 6 % of the true value. That is plenty
//! for p50/p99/p999 of a relay, and it avoids a dependency on hdrhistogram.

/// Sub-buckets per power of two (as a bit count).
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Enough buckets for every `u64`.
const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;

/// Latency histogram in microseconds.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: Box::new([0; BUCKETS]),
            total: 0,
            max: 0,
        }
    }
}

#[inline]
fn index(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS
    let sub = (v >> (e - SUB_BITS)) as usize & (SUB - 1);
    SUB + (e - SUB_BITS) as usize * SUB + sub
}

/// Lowest value that falls into bucket `i`.
fn lower_bound(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let e = (i - SUB) / SUB + SUB_BITS as usize;
    let sub = ((i - SUB) % SUB) as u64;
    (1u64 << e) | (sub << (e - SUB_BITS as usize))
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Largest value recorded (exact).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Empties the histogram.
    pub fn clear(&mut self) {
        self.counts.fill(0);
        self.total = 0;
        self.max = 0;
    }

    /// The value at quantile `q` (0..=1): the lower bound of the bucket holding that rank,
    /// capped by the exact maximum. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(lower_bound(i).min(self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut prev = 0;
        for v in (0..100_000u64).chain([u64::MAX / 3, u64::MAX]) {
            let i = index(v);
            assert!(i >= prev && i < BUCKETS);
            assert!(lower_bound(i) <= v);
            assert!(v - lower_bound(i) <= v / 16 + 1, "{v}");
            prev = i;
        }
    }

    #[test]
    fn quantiles_are_ordered() {
        let mut h = Histogram::new();
        for v in 1..=10_000 {
            h.record(v);
        }
        let (p50, p99, p999) = (
            h.quantile(0.5).unwrap(),
            h.quantile(0.99).unwrap(),
            h.quantile(0.999).unwrap(),
        );
        assert!(p50 <= p99 && p99 <= p999 && p999 <= h.max());
        assert!((4_700..=5_000).contains(&p50), "{p50}");
        let mut g = Histogram::new();
        g.merge(&h);
        assert_eq!(g.count(), 10_000);
        assert_eq!(Histogram::new().quantile(0.5), None);
    }
}
