//! Releases that could not run at once: queued by async guards (a network
//! round trip must not block an executor) and by any guard whose release
//! failed, and run by a background thread on a blocking connection.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::pause::FailoverPause;
use super::shared::Shared;

/// One queued compare-and-delete.
struct Queued {
    key: String,
    token: String,
    /// Not before this instant (a failed release waits a little).
    not_before: Instant,
    /// Given up after this instant (the lease takes over).
    give_up: Instant,
    pause: FailoverPause,
}

/// The queue of releases: `(lock key, token)`.
#[derive(Default)]
pub(crate) struct Releases {
    queue: Mutex<VecDeque<Queued>>,
    ready: Condvar,
    worker: AtomicBool,
}

impl Releases {
    /// Queues a release that is retried after failures until `for_` has
    /// passed.
    pub(crate) fn push_retry(&self, key: String, token: String, for_: Duration) {
        let now = Instant::now();
        let pause = FailoverPause::new(&token);
        self.requeue(Queued {
            key,
            token,
            not_before: now,
            give_up: now + for_,
            pause,
        });
    }

    fn requeue(&self, queued: Queued) {
        if let Ok(mut q) = self.queue.lock() {
            q.push_back(queued);
        }
        self.ready.notify_one();
    }

    /// Every release due now, taken off the queue: `(key, token)`.
    #[cfg(any(feature = "redis-tokio", feature = "redis-smol"))]
    pub(crate) fn take_due(&self) -> Vec<(String, String)> {
        let now = Instant::now();
        let Ok(mut q) = self.queue.lock() else {
            return Vec::new();
        };
        let (due, later): (VecDeque<Queued>, VecDeque<Queued>) =
            q.drain(..).partition(|r| r.not_before <= now);
        *q = later;
        due.into_iter().map(|r| (r.key, r.token)).collect()
    }

    /// A queue whose release thread counts as started (so none is), for
    /// tests that look at the queue itself.
    #[cfg(all(test, any(feature = "redis-tokio", feature = "redis-smol")))]
    pub(crate) fn without_worker() -> Self {
        let r = Releases::default();
        r.worker.store(true, Ordering::SeqCst);
        r
    }

    /// How many releases are queued.
    #[cfg(all(test, any(feature = "redis-tokio", feature = "redis-smol")))]
    pub(crate) fn len(&self) -> usize {
        self.queue.lock().map(|q| q.len()).unwrap_or_default()
    }
}

/// Starts the release thread of `releases` unless it runs already.
pub(crate) fn ensure_worker(releases: &Arc<Releases>, shared: &Arc<Shared>) {
    if releases.worker.swap(true, Ordering::SeqCst) {
        return;
    }
    let (releases, shared) = (Arc::clone(releases), Arc::clone(shared));
    let started = std::thread::Builder::new()
        .name("human-plus-redis-release".to_owned())
        .spawn({
            let releases = Arc::clone(&releases);
            move || worker(&releases, &shared)
        });
    if started.is_err() {
        // No thread: queued releases are left to their leases.
        releases.worker.store(false, Ordering::SeqCst);
    }
}

/// Runs queued releases on a blocking connection until the store and
/// every guard are gone (then it is the last owner of the queue). A
/// release that fails is tried again, with growing pauses, until it gives
/// up and leaves the lock to its lease.
pub(crate) fn worker(releases: &Arc<Releases>, shared: &Arc<Shared>) {
    loop {
        let next = {
            let Ok(mut q) = releases.queue.lock() else {
                return;
            };
            let now = Instant::now();
            match q.iter().position(|r| r.not_before <= now) {
                Some(i) => q.remove(i),
                None => {
                    if q.is_empty() && Arc::strong_count(releases) == 1 {
                        return;
                    }
                    let wait = q
                        .iter()
                        .map(|r| r.not_before.saturating_duration_since(now))
                        .min()
                        .unwrap_or(Duration::from_secs(1))
                        .min(Duration::from_secs(1));
                    drop(releases.ready.wait_timeout(q, wait));
                    continue;
                }
            }
        };
        if let Some(mut queued) = next
            && shared.release_blocking(&queued.key, &queued.token).is_err()
            && Instant::now() < queued.give_up
        {
            queued.not_before = Instant::now() + queued.pause.next();
            releases.requeue(queued);
        }
    }
}
