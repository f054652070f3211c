//! A fixed-memory latency histogram: log-linear buckets of atomics, recorded with relaxed
//! atomics (no lock), read by snapshot.
//!
//! Values are microseconds. Below 8 µs each value has its own bucket; above, every power of
//! two is split in 8 linear sub-buckets, so a bucket is at most 12.5% wide relative to its
//! lower edge (the error of a reported percentile). Values from 2^40 µs (about 12.7 days) on
//! share the last bucket. 304 buckets of 8 bytes: about 2.4 KB per histogram, whatever the
//! number of samples (the same scheme as HdrHistogram with 3 significant bits), allocated at
//! the first sample: a producer that never sends holds none of it (issue #39).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Sub-buckets per power of two: 2^SUB_BITS.
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Values are clamped below 2^MAX_EXP µs.
const MAX_EXP: u32 = 40;
/// Number of buckets: SUB exact buckets, then SUB per power of two from 2^SUB_BITS on.
pub(crate) const BUCKETS: usize = ((MAX_EXP - SUB_BITS + 1) * SUB as u32) as usize;

/// The bucket of a value (µs).
fn bucket_of(v: u64) -> usize {
    let v = v.min((1 << MAX_EXP) - 1);
    if v < SUB {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let sub = (v >> (exp - SUB_BITS)) & (SUB - 1);
    ((exp - SUB_BITS + 1) as u64 * SUB + sub) as usize
}

/// The highest value (µs) that falls in bucket `b`.
fn bucket_high(b: usize) -> u64 {
    let b = b as u64;
    if b < SUB {
        return b;
    }
    let exp = (b / SUB) as u32 + SUB_BITS - 1;
    let sub = b % SUB;
    let low = (1u64 << exp) + (sub << (exp - SUB_BITS));
    low + (1u64 << (exp - SUB_BITS)) - 1
}

/// The recording side (shared by the task that records and the handles that read).
pub(crate) struct LatencyHistogram {
    /// Allocated at the first sample (one atomic load per sample after that).
    buckets: OnceLock<Box<[AtomicU64]>>,
    max_us: AtomicU64,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram").finish_non_exhaustive()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: OnceLock::new(),
            max_us: AtomicU64::new(0),
        }
    }
}

impl LatencyHistogram {
    /// Records `n` samples of `latency` (a batch's messages share its receipt).
    pub(crate) fn record_n(&self, latency: Duration, n: u64) {
        if n == 0 {
            return;
        }
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let buckets = self
            .buckets
            .get_or_init(|| (0..BUCKETS).map(|_| AtomicU64::new(0)).collect());
        buckets[bucket_of(us)].fetch_add(n, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// Copies the counts (each bucket read on its own: a snapshot taken while recording may
    /// miss the latest samples, never invents any).
    pub(crate) fn snapshot(&self) -> HistogramCounts {
        let Some(buckets) = self.buckets.get() else {
            return HistogramCounts::default();
        };
        HistogramCounts {
            buckets: buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            max_us: self.max_us.load(Ordering::Relaxed),
        }
    }
}

/// Bucket counts copied out of a [`LatencyHistogram`]; they add up across partitions.
#[derive(Clone)]
pub(crate) struct HistogramCounts {
    buckets: Vec<u64>,
    max_us: u64,
}

impl Default for HistogramCounts {
    fn default() -> Self {
        HistogramCounts {
            buckets: vec![0; BUCKETS],
            max_us: 0,
        }
    }
}

impl HistogramCounts {
    pub(crate) fn merge(&mut self, other: &HistogramCounts) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.max_us = self.max_us.max(other.max_us);
    }

    /// The smallest recorded value (µs, a bucket's upper edge, never above the maximum) with
    /// at least `q` of the samples at or below it.
    fn quantile(&self, total: u64, q: f64) -> u64 {
        let rank = ((total as f64 * q).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return bucket_high(b).min(self.max_us);
            }
        }
        self.max_us
    }

    pub(crate) fn summary(&self) -> super::LatencySummary {
        let count: u64 = self.buckets.iter().sum();
        let d = Duration::from_micros;
        if count == 0 {
            return super::LatencySummary::default();
        }
        super::LatencySummary {
            count,
            p50: d(self.quantile(count, 0.50)),
            p95: d(self.quantile(count, 0.95)),
            p99: d(self.quantile(count, 0.99)),
            max: d(self.max_us),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order_within_an_eighth() {
        let mut last = 0;
        for v in (0..5000u64).chain([1 << 20, (1 << 40) - 1, u64::MAX]) {
            let b = bucket_of(v);
            assert!(b < BUCKETS, "{v} -> {b}");
            assert!(b >= last || v > 5000, "bucket order at {v}");
            last = b;
            let high = bucket_high(b);
            if v < (1 << 40) {
                assert!(high >= v, "{v} above its bucket's edge {high}");
                assert!(high - v <= v / 8, "{v}: bucket edge {high} too far");
            }
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles_and_max_of_a_known_distribution() {
        let h = LatencyHistogram::default();
        // 1..=1000 ms, one sample each.
        for ms in 1..=1000u64 {
            h.record_n(Duration::from_millis(ms), 1);
        }
        let s = h.snapshot().summary();
        assert_eq!(s.count, 1000);
        assert_eq!(s.max, Duration::from_millis(1000));
        for (got, want) in [(s.p50, 500), (s.p95, 950), (s.p99, 990)] {
            let want = Duration::from_millis(want);
            assert!(got >= want && got <= want + want / 8, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn merged_counts_add_up() {
        let a = LatencyHistogram::default();
        let b = LatencyHistogram::default();
        a.record_n(Duration::from_millis(1), 3);
        b.record_n(Duration::from_secs(2), 1);
        let mut m = a.snapshot();
        m.merge(&b.snapshot());
        let s = m.summary();
        assert_eq!(s.count, 4);
        assert_eq!(s.max, Duration::from_secs(2));
        assert!(s.p50 <= Duration::from_micros(1125));
        assert_eq!(HistogramCounts::default().summary().count, 0);
    }

    #[test]
    fn extremes_saturate_and_percentiles_stay_ordered() {
        let h = LatencyHistogram::default();
        assert_eq!(
            h.snapshot().summary(),
            super::super::LatencySummary::default()
        );
        h.record_n(Duration::ZERO, 1);
        let s = h.snapshot().summary();
        assert_eq!(
            (s.count, s.p50, s.p99, s.max),
            (1, Duration::ZERO, Duration::ZERO, Duration::ZERO)
        );
        // Beyond u64 microseconds: saturates, never panics; the maximum is kept.
        h.record_n(Duration::MAX, 1);
        h.record_n(Duration::from_micros(u64::MAX), u64::MAX / 4);
        let s = h.snapshot().summary();
        assert_eq!(s.max, Duration::from_micros(u64::MAX));
        assert!(s.p50 <= s.p95 && s.p95 <= s.p99 && s.p99 <= s.max, "{s:?}");
        // Mixed small and huge values: still ordered.
        let h = LatencyHistogram::default();
        for us in [0, 1, 7, 8, 9, 1000, 1 << 39, 1 << 41, u64::MAX] {
            h.record_n(Duration::from_micros(us), 3);
        }
        let s = h.snapshot().summary();
        assert_eq!(s.count, 27);
        assert!(s.p50 <= s.p95 && s.p95 <= s.p99 && s.p99 <= s.max, "{s:?}");
    }
}
