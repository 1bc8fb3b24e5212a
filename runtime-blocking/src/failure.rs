//! Where a request's failure below ureq is kept, so it can be reported
//! exactly.

use std::sync::{Mutex, PoisonError};

use human_plus_core::{EgressRefusal, Error, TransportError, TransportErrorKind};

/// What went wrong below ureq, kept aside so it can be reported exactly
/// (ureq wraps resolver and connector errors in its own types).
#[derive(Debug, Default)]
pub(crate) struct FailureSlot {
    refusal: Mutex<Option<EgressRefusal>>,
    failure: Mutex<Option<Error>>,
}

impl FailureSlot {
    pub(crate) fn refuse(&self, refusal: EgressRefusal) {
        *self.refusal.lock().unwrap_or_else(PoisonError::into_inner) = Some(refusal);
    }

    pub(crate) fn fail(&self, kind: TransportErrorKind, message: &str) {
        self.set(Error::Transport(TransportError::new(kind, message)));
    }

    /// Records `error`, unless an earlier one is already recorded.
    pub(crate) fn set(&self, error: Error) {
        let mut slot = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(error);
        }
    }

    /// The recorded error, the refusal first.
    pub(crate) fn take(&self) -> Option<Error> {
        if let Some(r) = self
            .refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            return Some(Error::EgressRefused(r));
        }
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}
