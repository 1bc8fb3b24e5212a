//! How a request failed, as a runtime reports it to the core: before any of
//! it was written, or after some of it may have been. The core decides what
//! follows (a request that provably never left may go again); the runtimes
//! that drive hyper's connection (tokio, async-std) classify its errors here,
//! once.

use human_plus_core::{Error, HttpEvent};

/// How a request failed: before any of it was written (and whether on a
/// kept connection found closed), or after some of it may have been.
#[derive(Debug)]
pub enum RequestFailure {
    /// Nothing of the request was written.
    NotSent {
        /// What went wrong.
        error: Error,
        /// Whether it was tried on a kept connection (found closed).
        kept_connection: bool,
    },
    /// Some of the request may have been written, or its answer was lost.
    Lost(Error),
}

impl RequestFailure {
    /// A failure before the request was written: opening the connection,
    /// building the request.
    #[must_use]
    pub fn before_writing(error: Error) -> Self {
        RequestFailure::NotSent {
            error,
            kept_connection: false,
        }
    }

    /// A failure while sending on a connection: `never_left` when the HTTP
    /// connection handed the request back unsent (it was found closed
    /// before a byte left), `kept_connection` when that connection was a
    /// kept one.
    #[must_use]
    pub fn sending(error: Error, never_left: bool, kept_connection: bool) -> Self {
        if never_left {
            RequestFailure::NotSent {
                error,
                kept_connection,
            }
        } else {
            RequestFailure::Lost(error)
        }
    }

    /// The event the core is told.
    #[must_use]
    pub fn into_event(self) -> HttpEvent {
        match self {
            RequestFailure::NotSent {
                error,
                kept_connection,
            } => HttpEvent::NotSent {
                error,
                kept_connection,
            },
            RequestFailure::Lost(error) => HttpEvent::Failed(error),
        }
    }
}
