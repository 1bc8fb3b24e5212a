//! A stopping manager's word to its operations in flight: no exchange
//! waits past this instant.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often an operation with a [`Halt`] and no halt instant yet asks to
/// be woken, so that a halt set while its driver sleeps is seen.
pub(crate) const HALT_LOOK: Duration = Duration::from_millis(100);

/// The instant a stopping manager gives its operations in flight (its
/// shutdown's grace): shared between the manager, which sets it, and the
/// operations it was handed to ([`Operation::with_halt`](crate::Operation::with_halt)),
/// which end by it. Cloning shares it. Pure data: no clock, no thread.
///
/// ```
/// use std::time::{Duration, Instant};
/// use human_plus_core::Halt;
///
/// let halt = Halt::new();
/// assert_eq!(halt.at(), None);
/// let now = Instant::now();
/// halt.clone().halt_at(now + Duration::from_secs(2));
/// halt.halt_at(now + Duration::from_secs(5)); // a later instant changes nothing
/// assert_eq!(halt.at(), Some(now + Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Halt(Arc<Mutex<Option<Instant>>>);

impl Halt {
    /// A halt with no instant yet.
    #[must_use]
    pub fn new() -> Self {
        Halt::default()
    }

    /// Sets the instant (an earlier one than any set before wins).
    pub fn halt_at(&self, at: Instant) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *slot = Some(slot.map_or(at, |set| set.min(at)));
    }

    /// The instant, once set.
    #[must_use]
    pub fn at(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
