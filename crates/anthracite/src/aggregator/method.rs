//! carbon's `AGGREGATION_METHODS`, computed bit for bit as Python 3.11 computes them.

use std::cmp::Ordering;

use super::values::Chain;

/// One of carbon 1.1.10's aggregation methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggregationMethod {
    /// `sum(values)`.
    Sum,
    /// `float(sum(values)) / len(values)`.
    Avg,
    /// `min(values)`.
    Min,
    /// `max(values)`.
    Max,
    /// `len(values)`.
    Count,
    /// carbon's `percentile(factor)`; the factor in thousandths (`p999` is 999).
    Percentile(u16),
}

impl AggregationMethod {
    /// The method named as in `aggregation-rules.conf`.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "sum" => Self::Sum,
            "avg" => Self::Avg,
            "min" => Self::Min,
            "max" => Self::Max,
            "count" => Self::Count,
            "p50" => Self::Percentile(500),
            "p75" => Self::Percentile(750),
            "p80" => Self::Percentile(800),
            "p90" => Self::Percentile(900),
            "p95" => Self::Percentile(950),
            "p99" => Self::Percentile(990),
            "p999" => Self::Percentile(999),
            _ => return None,
        })
    }

    /// The name as written in `aggregation-rules.conf`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sum => "sum",
            Self::Avg => "avg",
            Self::Min => "min",
            Self::Max => "max",
            Self::Count => "count",
            Self::Percentile(500) => "p50",
            Self::Percentile(750) => "p75",
            Self::Percentile(800) => "p80",
            Self::Percentile(900) => "p90",
            Self::Percentile(950) => "p95",
            Self::Percentile(990) => "p99",
            Self::Percentile(_) => "p999",
        }
    }

    /// True when the method needs every value (the percentiles).
    pub fn keeps_values(self) -> bool {
        matches!(self, Self::Percentile(_))
    }

    /// carbon's factor as the Python float literal it writes (`0.999`, not `999 / 1000`, which
    /// may differ in the last bit).
    fn factor(thousandths: u16) -> f64 {
        match thousandths {
            500 => 0.50,
            750 => 0.75,
            800 => 0.80,
            900 => 0.90,
            950 => 0.95,
            990 => 0.99,
            _ => 0.999,
        }
    }
}

/// One interval's running state: what carbon computes from its list of values, kept as
/// running values (the left-to-right fold is Python's order) plus, for the percentiles, the
/// values themselves (in the aggregator's value store; not `Clone`, so that no two intervals
/// share those blocks).
#[derive(Debug, Default)]
pub(super) struct Accumulator {
    /// `0 + v1 + v2 + …`, in arrival order.
    pub sum: f64,
    /// Values received.
    pub count: u64,
    /// Python's `min` so far (the first of equals).
    pub min: f64,
    /// Python's `max` so far (the first of equals).
    pub max: f64,
    /// Every value, in arrival order (percentile methods only; empty otherwise).
    pub values: Chain,
}

impl Accumulator {
    /// Adds one value to the running values (a percentile's caller stores it in `values`).
    #[inline]
    pub(super) fn add(&mut self, value: f64) {
        if self.count == 0 {
            // Python's sum starts from the integer 0: `0 + -0.0` is `0.0`.
            self.sum = 0.0 + value;
            self.min = value;
            self.max = value;
        } else {
            self.sum += value;
            // `min`/`max` replace the kept value only when strictly below/above it.
            if value < self.min {
                self.min = value;
            }
            if value > self.max {
                self.max = value;
            }
        }
        self.count += 1;
    }

    /// The method's value over what was added; `None` when nothing was (carbon's functions
    /// return `None` for an empty list; an emitted interval is never empty). For a percentile
    /// `values` holds a copy of the interval's values, sorted here (one sort per emission).
    pub(super) fn value(&self, method: AggregationMethod, values: &mut [f64]) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        Some(match method {
            AggregationMethod::Sum => self.sum,
            AggregationMethod::Avg => self.sum / self.count as f64,
            AggregationMethod::Min => self.min,
            AggregationMethod::Max => self.max,
            AggregationMethod::Count => self.count as f64,
            AggregationMethod::Percentile(t) => {
                // Python's `sorted` is stable and compares with `<`: equal values (0.0 and
                // -0.0) keep their arrival order. NaN never reaches here (dropped at receive).
                sort_stable(values);
                percentile(values, AggregationMethod::factor(t))?
            }
        })
    }
}

/// Intervals of at most this many values are sorted by insertion: the few values a short
/// interval holds (ten at a write-back of 2 s and a datapoint every 0.2 s) take a fraction of
/// the general stable sort's time, which sets up runs and buffers first.
const INSERTION_SORT_MAX: usize = 24;

/// Sorts `values` as Python's `sorted` does: stable, compared with `<`.
fn sort_stable(values: &mut [f64]) {
    if values.len() > INSERTION_SORT_MAX {
        values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
        return;
    }
    for i in 1..values.len() {
        let v = values[i];
        let mut j = i;
        // Strictly below: an equal value stays after the ones that came before it.
        while j > 0 && v < values[j - 1] {
            values[j] = values[j - 1];
            j -= 1;
        }
        values[j] = v;
    }
}

/// carbon's `percentile(factor)` over sorted values.
fn percentile(sorted: &[f64], factor: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let rank = factor * (n - 1) as f64;
    let left = rank.floor();
    let right = rank.ceil();
    let (l, r) = (left as usize, right as usize);
    if l == r {
        return sorted.get(l).copied();
    }
    Some(sorted.get(l)? * (right - rank) + sorted.get(r)? * (rank - left))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(method: &str, values: &[f64]) -> f64 {
        let method = AggregationMethod::parse(method).expect("method");
        let mut acc = Accumulator::default();
        for &v in values {
            acc.add(v);
        }
        acc.value(method, &mut values.to_vec()).expect("a value")
    }

    /// Expected values computed by carbon 1.1.10's `AGGREGATION_METHODS` under Python 3.11.
    #[test]
    fn methods_match_python() {
        let v = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6];
        assert_eq!(value("sum", &v), 21.1);
        assert_eq!(value("avg", &v), 3.516666666666667);
        assert_eq!(value("min", &v), 1.0);
        assert_eq!(value("max", &v), 9.0);
        assert_eq!(value("count", &v), 6.0);
        assert_eq!(value("p50", &v), 2.8);
        assert_eq!(value("p75", &v), 3.75);
        assert_eq!(value("p80", &v), 4.0);
        assert_eq!(value("p90", &v), 6.5);
        assert_eq!(value("p95", &v), 7.75);
        assert_eq!(value("p99", &v), 8.75);
        assert_eq!(value("p999", &v), 8.975000000000001);
        assert_eq!(value("p50", &[7.0]), 7.0);
    }

    #[test]
    fn sum_is_left_to_right_from_integer_zero() {
        // sum([1e16, 1.0, -1e16]) == 0.0 but sum([1e16, -1e16, 1.0]) == 1.0 in Python 3.11.
        assert_eq!(value("sum", &[1e16, 1.0, -1e16]), 0.0);
        assert_eq!(value("sum", &[1e16, -1e16, 1.0]), 1.0);
        // sum([-0.0]) is 0.0 (0 + -0.0); min/max keep -0.0.
        assert!(value("sum", &[-0.0]).is_sign_positive());
        assert!(value("min", &[-0.0]).is_sign_negative());
        assert!(value("min", &[-0.0, 0.0]).is_sign_negative());
        assert!(value("min", &[0.0, -0.0]).is_sign_positive());
        assert!(value("max", &[-0.0, 0.0]).is_sign_negative());
        assert_eq!(value("avg", &[0.1, 0.2, 0.3]), (0.1 + 0.2 + 0.3) / 3.0);
    }

    #[test]
    fn short_intervals_sort_as_the_general_stable_sort() {
        // Equal values of either sign keep their arrival order, as in Python's `sorted`.
        let mut v = [0.0, -0.0, -1.0, 0.0, -0.0];
        sort_stable(&mut v);
        let signs: Vec<bool> = v.iter().map(|x| x.is_sign_negative()).collect();
        assert_eq!(signs, [true, false, true, false, true]);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in 0..=INSERTION_SORT_MAX + 2 {
            let mut values: Vec<f64> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    // Few distinct values, so that ties are common.
                    (seed % 7) as f64 - 3.0
                })
                .collect();
            let mut expected = values.clone();
            expected.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
            sort_stable(&mut values);
            assert_eq!(values, expected, "{len} values");
        }
    }

    #[test]
    fn every_method_name_round_trips() {
        for name in crate::router::aggregation::METHODS {
            let m = AggregationMethod::parse(name).expect("known");
            assert_eq!(m.name(), name);
        }
        assert_eq!(AggregationMethod::parse("median"), None);
    }
}
