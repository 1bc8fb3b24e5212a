//! Random sleeps between attempts: between lock attempts, and during a
//! failover.

use std::time::Duration;

use human_plus_core::{Entropy, SeededEntropy};

/// Random sleeps between lock attempts.
pub(crate) struct Backoff {
    pub(super) min: Duration,
    pub(super) max: Duration,
    pub(super) jitter: SeededEntropy,
}

impl Backoff {
    pub(super) fn new(min: Duration, max: Duration, seed: &str) -> Self {
        let seed = seed.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Backoff {
            min,
            max,
            jitter: SeededEntropy::new(seed),
        }
    }

    /// A number in [0, 1).
    pub(super) fn fraction(&mut self) -> f64 {
        let mut b = [0u8; 4];
        self.jitter.fill_bytes(&mut b);
        f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0)
    }

    /// The next sleep: uniform in [min, 2 min] for the waiter next in
    /// line, in [min, max] for the others.
    pub(crate) fn next(&mut self, next_in_line: bool) -> Duration {
        let frac = self.fraction();
        if next_in_line {
            self.min + self.min.mul_f64(frac)
        } else {
            self.min + (self.max - self.min).mul_f64(frac)
        }
    }
}

/// Sleeps between attempts during a failover: 50 ms doubling to 1 s, with
/// jitter, so many workers do not hammer a recovering cluster in step.
pub(crate) struct FailoverPause {
    pub(super) next: Duration,
    pub(super) jitter: Backoff,
}

impl FailoverPause {
    pub(crate) fn new(seed: &str) -> Self {
        FailoverPause {
            next: Duration::from_millis(50),
            jitter: Backoff::new(Duration::ZERO, Duration::ZERO, seed),
        }
    }

    pub(crate) fn next(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(Duration::from_secs(1));
        base.mul_f64(0.5 + self.jitter.fraction() / 2.0)
    }
}
