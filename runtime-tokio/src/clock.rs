//! The monotonic clock of the tokio runtime.

use std::time::Instant;

/// The monotonic clock, from tokio so a paused test clock is honoured.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}
