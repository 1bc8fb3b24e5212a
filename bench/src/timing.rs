//! A small timing harness for the `compare` binary, mirrored by
//! `bench/python/bench.py`: calibrate a batch to at least
//! [`BATCH_TARGET`] of CPU time, run [`REPEATS`] batches, report the
//! per-call time of the fastest batch (the least disturbed on a shared
//! machine) and of the median batch.
//!
//! Time is the calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`; Python:
//! `time.thread_time_ns`), not wall time: on a machine shared with other
//! builds, wall time counts the slices other processes ran in, CPU time
//! does not (it still pays for the caches they disturb).

use std::hint::black_box;
use std::time::Duration;

use cpu_time::ThreadTime;

/// The least time one timed batch takes.
pub const BATCH_TARGET: Duration = Duration::from_millis(10);

/// How many batches are timed.
pub const REPEATS: usize = 21;

/// Per-call times of one workload, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The fastest batch's per-call time.
    pub min_ns: f64,
    /// The median batch's per-call time.
    pub median_ns: f64,
    /// Calls per batch.
    pub iters: u64,
}

/// Times `f`.
pub fn time<T>(mut f: impl FnMut() -> T) -> Timing {
    // Warm up and calibrate: double until a batch reaches the target.
    let mut iters: u64 = 1;
    loop {
        let start = ThreadTime::now();
        for _ in 0..iters {
            black_box(f());
        }
        if start.elapsed() >= BATCH_TARGET || iters >= 1 << 30 {
            break;
        }
        iters *= 2;
    }
    let mut per_call: Vec<f64> = (0..REPEATS)
        .map(|_| {
            let start = ThreadTime::now();
            for _ in 0..iters {
                black_box(f());
            }
            start.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    Timing {
        min_ns: per_call.first().copied().unwrap_or(f64::NAN),
        median_ns: per_call.get(REPEATS / 2).copied().unwrap_or(f64::NAN),
        iters,
    }
}

/// Percentile `p` (0..=100) of sorted samples, nearest rank.
#[must_use]
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.saturating_sub(1).min(sorted.len() - 1))
        .copied()
        .unwrap_or_default()
}

/// A duration in microseconds, for tables.
#[must_use]
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
