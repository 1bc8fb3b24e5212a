//! Waking the waiters of this process when a lock frees: every release a
//! store of this process makes (a guard dropped, the release thread, a
//! shutdown) wakes the waiters of that lock key in any store of this
//! process at once, so workers of one process hand a lock over without
//! polling Redis. Waiters in other processes back off within the
//! holder's lease instead (see `pause.rs`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use event_listener::Event;

/// The events of the lock keys waited on now, by key.
static WAITED: LazyLock<Mutex<HashMap<String, Weak<Event>>>> = LazyLock::new(Mutex::default);

/// The event a waiter on `key` listens to (one per key while anybody
/// waits on it). Listen before each attempt, so a release between the
/// attempt and the wait is not missed.
pub(crate) fn event(key: &str) -> Arc<Event> {
    let Ok(mut waited) = WAITED.lock() else {
        // A poisoned map wakes nobody: the waiters' sleeps still end.
        return Arc::new(Event::new());
    };
    if let Some(event) = waited.get(key).and_then(Weak::upgrade) {
        return event;
    }
    // Forget the keys nobody waits on any more before adding one.
    waited.retain(|_, e| e.strong_count() > 0);
    let event = Arc::new(Event::new());
    waited.insert(key.to_owned(), Arc::downgrade(&event));
    event
}

/// Wakes every waiter of this process on `key`: its lock was just
/// released.
pub(crate) fn released(key: &str) {
    let event = WAITED
        .lock()
        .ok()
        .and_then(|w| w.get(key).and_then(Weak::upgrade));
    if let Some(event) = event {
        event.notify(usize::MAX);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use event_listener::Listener;
    use std::time::Duration;

    #[test]
    fn a_release_wakes_the_waiters_of_its_key_only() {
        let a = event("wake-test:a");
        let b = event("wake-test:b");
        assert!(Arc::ptr_eq(&a, &event("wake-test:a")), "one event per key");
        let on_a = a.listen();
        let on_b = b.listen();
        released("wake-test:a");
        assert!(on_a.wait_timeout(Duration::from_secs(5)).is_some());
        assert!(on_b.wait_timeout(Duration::from_millis(20)).is_none());
        drop((a, b));
        // Nobody waits: a new event, and the old ones are forgotten.
        let again = event("wake-test:c");
        assert!(WAITED.lock().unwrap().get("wake-test:a").is_none());
        drop(again);
    }
}
