//! What the request running on this thread needs below ureq.
//!
//! Connections are kept in ureq's pool (one agent per connection key), so
//! the connector, the resolver and a kept transport serve many requests;
//! what belongs to one request — its cancel switch, where its connection
//! failures are recorded, the token to put back into its request line —
//! is set here, on the request thread, for the time the request runs. A
//! request runs on one thread from its first byte to the end of its body.

use std::cell::RefCell;
use std::sync::Arc;

use crate::ctl::RequestCtl;
use crate::failure::FailureSlot;

/// The request running on this thread.
pub(crate) struct Current {
    pub(crate) ctl: Arc<RequestCtl>,
    pub(crate) failures: Arc<FailureSlot>,
    /// The token to put back where ureq was given
    /// [`TOKEN_MARKER`](human_plus_core::TOKEN_MARKER): taken by the first
    /// write of the request (its request line).
    pub(crate) token: Option<String>,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// Sets the request running on this thread until the guard is dropped.
pub(crate) fn enter(current: Current) -> Entered {
    CURRENT.with(|c| *c.borrow_mut() = Some(current));
    Entered(())
}

/// Clears the thread's request when dropped.
pub(crate) struct Entered(());

impl Drop for Entered {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

/// The running request's cancel switch.
pub(crate) fn ctl() -> Option<Arc<RequestCtl>> {
    CURRENT.with(|c| c.borrow().as_ref().map(|c| Arc::clone(&c.ctl)))
}

/// Whether the running request was cancelled.
pub(crate) fn cancelled() -> bool {
    ctl().is_some_and(|c| c.is_cancelled())
}

/// The running request's failure slot.
pub(crate) fn failures() -> Option<Arc<FailureSlot>> {
    CURRENT.with(|c| c.borrow().as_ref().map(|c| Arc::clone(&c.failures)))
}

/// The token to unmask in the running request's first write, once.
pub(crate) fn take_token() -> Option<String> {
    CURRENT.with(|c| c.borrow_mut().as_mut().and_then(|c| c.token.take()))
}
