//! The request threads: a pool that grows with the requests in flight and
//! keeps a finished thread idle for a while, so a worker calling again and
//! again does not start two or more OS threads per call.
//!
//! There is no cap: every request gets a thread at once, as it did when each
//! had its own, so a slow request can never hold up another (an SSE reader
//! waits for its reply while the POST that produces it runs beside it).
//!
//! Each idle worker owns a channel. A submitter takes an idle worker's
//! sender out of the idle list under the pool's lock and then sends; a
//! worker whose idle wait runs out takes the same lock and leaves only if it
//! is still in the list. If it is not, somebody took it and a job is on its
//! way, so it waits for that job: no job is ever sent to a worker that is
//! leaving.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// One request's work.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long a worker waits for another request before its thread ends.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The name of every request thread.
const THREAD_NAME: &str = "human-plus-request";

struct Idle {
    id: u64,
    jobs: Sender<Job>,
}

#[derive(Default)]
struct Shared {
    idle: Mutex<Vec<Idle>>,
    next_id: AtomicU64,
}

/// The request threads of one manager (shared by its clones).
pub(crate) struct Pool {
    shared: Arc<Shared>,
    idle_timeout: Duration,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// A pool whose idle threads end after `idle_timeout`.
    pub(crate) fn new(idle_timeout: Duration) -> Pool {
        Pool {
            shared: Arc::default(),
            idle_timeout,
        }
    }

    /// Runs `job` on an idle thread, or on a new one if none is idle.
    ///
    /// # Errors
    /// When a new thread is needed and the OS refuses to start it.
    pub(crate) fn execute(&self, job: Job) -> io::Result<()> {
        let idle = self
            .shared
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let job = match idle {
            // Taken out of the list, the worker waits for this send.
            Some(worker) => match worker.jobs.send(job) {
                Ok(()) => return Ok(()),
                // Only a worker whose thread died can refuse (it cannot:
                // jobs catch their panics); start a thread instead.
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        self.spawn(job)
    }

    fn spawn(&self, first: Job) -> io::Result<()> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::clone(&self.shared);
        let idle_timeout = self.idle_timeout;
        std::thread::Builder::new()
            .name(THREAD_NAME.to_owned())
            .spawn(move || work(&shared, id, idle_timeout, first))?;
        Ok(())
    }

    /// How many threads are idle now (for tests).
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.shared
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A worker's life: run the first job, then offer itself for more until an
/// idle wait runs out with nobody having taken it.
fn work(shared: &Shared, id: u64, idle_timeout: Duration, first: Job) {
    let (jobs, inbox) = mpsc::channel::<Job>();
    run(first);
    loop {
        shared
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Idle {
                id,
                jobs: jobs.clone(),
            });
        let job = match inbox.recv_timeout(idle_timeout) {
            Ok(job) => job,
            // The worker holds a sender itself: the channel cannot
            // disconnect, so only the timeout is possible here.
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                let mut idle = shared.idle.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(at) = idle.iter().position(|w| w.id == id) {
                    idle.swap_remove(at);
                    return;
                }
                drop(idle);
                // Taken after the wait ran out: the job is being sent.
                match inbox.recv() {
                    Ok(job) => job,
                    Err(mpsc::RecvError) => return,
                }
            }
        };
        run(job);
    }
}

/// Runs a job; a panic ends the job, never the worker. (A request whose
/// job panicked reports nothing more: its exchange ends at its deadline,
/// as it did when each request had a thread of its own.)
fn run(job: Job) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::mpsc::sync_channel;
    use std::time::Instant;

    fn thread_id_of(pool: &Pool) -> std::thread::ThreadId {
        let (tx, rx) = sync_channel(1);
        pool.execute(Box::new(move || {
            let _ = tx.send(std::thread::current().id());
        }))
        .unwrap();
        rx.recv().unwrap()
    }

    fn wait_for_idle(pool: &Pool, n: usize) {
        let start = Instant::now();
        while pool.idle_count() != n {
            assert!(start.elapsed() < Duration::from_secs(10), "never {n} idle");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_finished_thread_takes_the_next_job() {
        let pool = Pool::new(Duration::from_secs(30));
        let first = thread_id_of(&pool);
        wait_for_idle(&pool, 1);
        assert_eq!(thread_id_of(&pool), first);
    }

    #[test]
    fn concurrent_jobs_each_get_a_thread() {
        // Ten jobs that each wait for all ten to have started: they can
        // only finish if none waits for a thread.
        let pool = Pool::new(Duration::from_secs(30));
        let barrier = Arc::new(std::sync::Barrier::new(10));
        let (tx, rx) = mpsc::channel();
        for _ in 0..10 {
            let barrier = Arc::clone(&barrier);
            let tx = tx.clone();
            pool.execute(Box::new(move || {
                barrier.wait();
                let _ = tx.send(std::thread::current().id());
            }))
            .unwrap();
        }
        let ids: HashSet<_> = (0..10).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(ids.len(), 10);
        wait_for_idle(&pool, 10);
    }

    #[test]
    fn idle_threads_end_and_no_job_is_lost() {
        // A short idle wait, and jobs submitted around the moment workers
        // give up: every job runs.
        let pool = Pool::new(Duration::from_millis(2));
        let (tx, rx) = mpsc::channel();
        for i in 0..2_000u32 {
            let tx = tx.clone();
            pool.execute(Box::new(move || {
                let _ = tx.send(i);
            }))
            .unwrap();
            if i % 7 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let mut got: Vec<u32> = (0..2_000)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        got.sort_unstable();
        assert_eq!(got, (0..2_000).collect::<Vec<_>>());
        wait_for_idle(&pool, 0);
    }

    #[test]
    fn a_panicking_job_does_not_take_its_thread() {
        let pool = Pool::new(Duration::from_secs(30));
        let first = thread_id_of(&pool);
        wait_for_idle(&pool, 1);
        pool.execute(Box::new(|| panic!("a job panicked"))).unwrap();
        wait_for_idle(&pool, 1);
        assert_eq!(thread_id_of(&pool), first);
    }
}
