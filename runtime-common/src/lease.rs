//! Leases: how a manager keeps the store locks of its running operations,
//! once for every runtime and store.
//!
//! The rule: an operation's lock is leased for a short time (the store's
//! `DEFAULT_LEASE`, 6 s) and renewed every third of it
//! ([`renew_every`], the store's lease contract) for as long as the
//! operation runs, so a holder that
//! dies (or is stopped) frees its conversation within one lease, whatever
//! the exchange timeout. Renewal stops when the lock is given back (the
//! operation ended, or the manager shut down). A renewal that fails (the
//! lock no longer holds the guard's token, or the store failed after its
//! own retries) means the lock is lost: renewal stops, the operation runs
//! on, and the record's generation fences its write (a worker that took the
//! lock over and wrote first wins; the late write is refused as
//! `store_conflict`).
//!
//! Where renewal runs is the one thing that differs by flavour. An async
//! manager renews beside the operation, in the same future
//! ([`keep_beside`]), on the runtime's timer. A blocking manager's futures
//! never return pending (its driver and store block the calling thread), so
//! nothing beside the operation would ever be polled: its leases are kept
//! by one thread per manager ([`Keeper`]), the way etcd's client keeps its
//! leases alive, started with the first lock and ending after 5 s without
//! one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use human_plus_store::{AsyncAttachmentStore, LockGuard};

use crate::driver::Driver;

/// How often a lease is renewed while its holder works: the store's lease
/// contract, a third of it ([`human_plus_store::renew_interval`]), so one
/// renewal may fail and the next still come in time, and a waiter can tell
/// a holder that stopped renewing.
#[must_use]
pub(crate) fn renew_every(lease: Duration) -> Duration {
    human_plus_store::renew_interval(lease)
}

/// How long the keeper thread of a blocking manager waits for a lock to
/// keep before it ends (the next lock starts it again).
const KEEPER_IDLE: Duration = Duration::from_secs(5);

/// A store lock an operation of this manager holds: its guard (released
/// when the last handle to it drops), its lease, and whether renewal has
/// stopped.
pub(crate) struct Held {
    pub(crate) guard: LockGuard,
    lease: Duration,
    stopped: AtomicBool,
    /// When the operation holding it is promised to end (its timeout): what
    /// a call of this manager waiting behind it is told to retry after.
    pub(crate) deadline: std::time::Instant,
    /// A stopping manager's instant for the operation holding it.
    pub(crate) halt: human_plus_core::Halt,
}

impl Held {
    pub(crate) fn new(guard: LockGuard, lease: Duration, deadline: std::time::Instant) -> Self {
        Held {
            guard,
            lease,
            stopped: AtomicBool::new(false),
            deadline,
            halt: human_plus_core::Halt::new(),
        }
    }

    /// No more renewals: the lock was given back, or lost.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// One renewal: whether the lease is still kept (false once renewal
    /// has stopped, or when this renewal finds the lock lost).
    pub(crate) async fn renew<S: AsyncAttachmentStore>(&self, store: &S) -> bool {
        if self.stopped() {
            return false;
        }
        let renewed = store.renew(&self.guard, self.lease).await;
        if self.stopped() {
            // Given back meanwhile: whatever the renewal found is moot.
            return false;
        }
        match renewed {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(
                    attachment = %self.guard.id(),
                    "the attachment's lock was lost (its lease ran out before it was renewed); \
                     the record's generation fences this operation's write"
                );
                self.stop();
                false
            }
            Err(e) => {
                tracing::warn!(
                    attachment = %self.guard.id(),
                    code = e.code(),
                    "the attachment's lease could not be renewed: taken as lost; \
                     the record's generation fences this operation's write"
                );
                self.stop();
                false
            }
        }
    }
}

/// Renews `held` every [`renew_every`] of its lease on `D`'s timer, until
/// renewal stops: an async manager runs this beside the operation.
pub(crate) async fn keep_beside<D: Driver, S: AsyncAttachmentStore>(store: &S, held: &Held) {
    loop {
        D::sleep(renew_every(held.lease)).await;
        if !held.renew(store).await {
            return;
        }
    }
}

/// One lease the keeper thread renews.
pub(crate) trait Keep: Send + Sync {
    /// Renews it once (blocking the keeper thread): whether to go on.
    fn renew_blocking(&self) -> bool;
    /// How often.
    fn every(&self) -> Duration;
}

/// A lease of a blocking manager's store, renewed on its keeper thread.
pub(crate) struct Kept<S> {
    pub(crate) store: Arc<S>,
    pub(crate) held: Arc<Held>,
}

impl<S: AsyncAttachmentStore> Keep for Kept<S> {
    fn renew_blocking(&self) -> bool {
        // A blocking store's future never returns pending.
        crate::block::block_on(self.held.renew(&*self.store))
    }

    fn every(&self) -> Duration {
        renew_every(self.held.lease)
    }
}

struct Entry {
    id: u64,
    due: Instant,
    keep: Arc<dyn Keep>,
}

#[derive(Default)]
struct KeeperState {
    entries: Vec<Entry>,
    next_id: u64,
    running: bool,
    closed: bool,
}

#[derive(Default)]
struct KeeperShared {
    state: Mutex<KeeperState>,
    changed: Condvar,
}

/// The keeper of a blocking manager's leases: one thread (named
/// `human-plus-lease`), started with the first lease to keep, renewing each
/// at its interval, ending after [`KEEPER_IDLE`] without a lease or when
/// the manager is dropped.
#[derive(Default)]
pub(crate) struct Keeper {
    shared: Arc<KeeperShared>,
}

/// A lease the keeper renews until this is dropped.
pub(crate) struct Ticket {
    shared: Arc<KeeperShared>,
    id: u64,
}

impl Keeper {
    /// Renews `keep` until the ticket is dropped (or a renewal finds the
    /// lease lost). Without a thread (the system refused one) the lease is
    /// left to run out, as a dead holder's would: logged once per lease.
    pub(crate) fn keep(&self, keep: Arc<dyn Keep>) -> Ticket {
        let mut state = lock(&self.shared.state);
        state.next_id += 1;
        let id = state.next_id;
        let due = Instant::now() + keep.every();
        state.entries.push(Entry { id, due, keep });
        if !state.running {
            let shared = Arc::clone(&self.shared);
            let started = std::thread::Builder::new()
                .name("human-plus-lease".to_owned())
                .spawn(move || run(&shared));
            match started {
                Ok(_) => state.running = true,
                Err(e) => tracing::warn!(
                    error = %e,
                    "no thread to renew the attachment's lease: it runs out after one lease"
                ),
            }
        }
        drop(state);
        self.shared.changed.notify_all();
        Ticket {
            shared: Arc::clone(&self.shared),
            id,
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        lock(&self.shared.state).closed = true;
        self.shared.changed.notify_all();
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let removed = {
            let mut state = lock(&self.shared.state);
            let at = state.entries.iter().position(|e| e.id == self.id);
            at.map(|i| state.entries.swap_remove(i))
        };
        // The lease's last handles may be in the entry: dropped here, out
        // of the keeper's lock.
        drop(removed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The keeper thread: renews each lease when it is due, sleeping until the
/// next one is.
fn run(shared: &KeeperShared) {
    let mut state = lock(&shared.state);
    loop {
        if state.closed {
            state.running = false;
            return;
        }
        let now = Instant::now();
        let Some(next) = state.entries.iter_mut().min_by_key(|e| e.due) else {
            let (s, timeout) = shared
                .changed
                .wait_timeout(state, KEEPER_IDLE)
                .unwrap_or_else(PoisonError::into_inner);
            state = s;
            if timeout.timed_out() && state.entries.is_empty() {
                state.running = false;
                return;
            }
            continue;
        };
        if next.due > now {
            let wait = next.due - now;
            state = shared
                .changed
                .wait_timeout(state, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            continue;
        }
        next.due = now + next.keep.every();
        let (id, keep) = (next.id, Arc::clone(&next.keep));
        drop(state);
        let go_on = keep.renew_blocking();
        drop(keep);
        state = lock(&shared.state);
        if !go_on {
            state.entries.retain(|e| e.id != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Counting {
        renewals: AtomicUsize,
        every: Duration,
        go_on: bool,
    }

    impl Keep for Counting {
        fn renew_blocking(&self) -> bool {
            self.renewals.fetch_add(1, Ordering::SeqCst);
            self.go_on
        }
        fn every(&self) -> Duration {
            self.every
        }
    }

    fn counting(every_ms: u64, go_on: bool) -> Arc<Counting> {
        Arc::new(Counting {
            renewals: AtomicUsize::new(0),
            every: Duration::from_millis(every_ms),
            go_on,
        })
    }

    fn wait_for(what: &str, f: impl Fn() -> bool) {
        let start = Instant::now();
        while !f() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_third_of_the_lease() {
        assert_eq!(renew_every(Duration::from_secs(6)), Duration::from_secs(2));
        assert_eq!(renew_every(Duration::ZERO), Duration::from_millis(1));
    }

    #[test]
    fn the_keeper_renews_until_the_ticket_drops_and_stops_on_a_lost_lease() {
        let keeper = Keeper::default();
        let kept = counting(20, true);
        let ticket = keeper.keep(Arc::clone(&kept) as Arc<dyn Keep>);
        wait_for("renewed three times", || {
            kept.renewals.load(Ordering::SeqCst) >= 3
        });
        drop(ticket);
        // Let a renewal that was running end, then nothing more.
        std::thread::sleep(Duration::from_millis(50));
        let after = kept.renewals.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(kept.renewals.load(Ordering::SeqCst), after, "stopped");
        assert_eq!(Arc::strong_count(&kept), 1, "the keeper let go of it");

        let lost = counting(10, false);
        let _ticket = keeper.keep(Arc::clone(&lost) as Arc<dyn Keep>);
        wait_for("renewed once", || lost.renewals.load(Ordering::SeqCst) >= 1);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(lost.renewals.load(Ordering::SeqCst), 1, "lost: no retry");
    }

    #[test]
    fn the_keeper_thread_ends_with_its_manager() {
        let keeper = Keeper::default();
        let shared = Arc::clone(&keeper.shared);
        let _ticket = keeper.keep(counting(1_000, true) as Arc<dyn Keep>);
        assert!(lock(&shared.state).running);
        drop(keeper);
        wait_for("the thread ended", || !lock(&shared.state).running);
    }
}
