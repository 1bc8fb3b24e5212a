//! Sleeps between attempts: between lock attempts (growing, within the
//! holder's lease), and during a failover.

use std::time::Duration;

use human_plus_core::{Entropy, SeededEntropy};

/// Sleeps between lock attempts: growing, random, and never past the
/// holder's lease.
pub(crate) struct Backoff {
    pub(super) min: Duration,
    pub(super) max: Duration,
    /// The step the next sleep is drawn under.
    pub(super) step: Duration,
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
            step: min,
            jitter: SeededEntropy::new(seed),
        }
    }

    /// A number in [0, 1).
    pub(super) fn fraction(&mut self) -> f64 {
        let mut b = [0u8; 4];
        self.jitter.fill_bytes(&mut b);
        f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0)
    }

    /// The next sleep: random between half the step and the step, the
    /// step starting at `min` and doubling after each attempt up to `max`
    /// for the waiter next in line (the one the lock goes to when it is
    /// released), up to four times `max` for the others (who cannot have it
    /// before that one: they only need to take the place in line once it
    /// is free); and never past the moment the holder's lease runs out
    /// (`left`, plus a millisecond), when a holder that died frees the lock.
    pub(crate) fn next(&mut self, next_in_line: bool, left: Option<Duration>) -> Duration {
        let cap = if next_in_line { self.max } else { self.max * 4 };
        let step = self.step.min(cap);
        self.step = (step * 2).min(cap);
        let frac = self.fraction();
        let sleep = (step / 2 + (step / 2).mul_f64(frac)).max(self.min);
        match left {
            Some(left) => sleep.min(left + Duration::from_millis(1)),
            None => sleep,
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
