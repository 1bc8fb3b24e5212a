//! The async flavour, on a redis-rs `ConnectionManager`.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use human_plus_core::{Error, SurfaceAttachment};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::{
    Attempted, RESERVED_ID_PREFIX, RedisConfig, Shared, lock_token, millis, redis_error, scripts,
};
use crate::{AsyncAttachmentStore, LockGuard};

/// Releases queued by dropped guards: `(lock key, token)`.
#[derive(Default)]
struct Releases {
    queue: Mutex<VecDeque<(String, String)>>,
    ready: Condvar,
}

impl Releases {
    fn push(&self, key: String, token: String) {
        if let Ok(mut q) = self.queue.lock() {
            q.push_back((key, token));
        }
        self.ready.notify_one();
    }

    fn take_all(&self) -> Vec<(String, String)> {
        self.queue
            .lock()
            .map(|mut q| q.drain(..).collect())
            .unwrap_or_default()
    }
}

/// A `lock` call in progress. Dropped before it returns a guard (the
/// caller's wait ran out, or Redis failed), it queues the compare-and-
/// delete of its token from the lock (in case its last attempt went
/// through unseen) and from the place next in line (in case it held it).
/// Both are no-ops when the token is not there.
struct Pending<'a> {
    releases: &'a Releases,
    key: &'a str,
    token: &'a str,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.releases
            .push(self.key.to_owned(), self.token.to_owned());
        self.releases
            .push(Shared::next_key(self.key), self.token.to_owned());
    }
}

/// Runs queued releases on a blocking connection until the store and
/// every guard are gone (then it is the last owner of the queue).
fn release_worker(releases: Arc<Releases>, shared: Arc<Shared>) {
    loop {
        let next = {
            let Ok(mut q) = releases.queue.lock() else {
                return;
            };
            if q.is_empty() {
                if Arc::strong_count(&releases) == 1 {
                    return;
                }
                q = match releases.ready.wait_timeout(q, Duration::from_secs(1)) {
                    Ok((q, _)) => q,
                    Err(_) => return,
                };
            }
            q.pop_front()
        };
        if let Some((key, token)) = next {
            // A failed release leaves the lock to its lease.
            let _ = shared.release_blocking(&key, &token);
        }
    }
}

/// Sleeps on the runtime the store runs under: tokio's timer inside a
/// tokio runtime, async-io's timer otherwise (smol, async-std, or any
/// executor: async-io drives its timers itself).
async fn sleep(d: Duration) {
    #[cfg(all(feature = "redis-tokio", feature = "redis-smol"))]
    {
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::time::sleep(d).await;
        } else {
            async_io::Timer::after(d).await;
        }
    }
    #[cfg(all(feature = "redis-tokio", not(feature = "redis-smol")))]
    tokio::time::sleep(d).await;
    #[cfg(all(feature = "redis-smol", not(feature = "redis-tokio")))]
    {
        async_io::Timer::after(d).await;
    }
}

/// The async Redis store: see the [module documentation](super) for the
/// data layout, the scripts, the locks, the encryption, and how a dropped
/// guard is released without blocking the executor.
///
/// It runs on one redis-rs `ConnectionManager`: a multiplexed connection
/// (commands of every task pipelined on one socket) that reconnects after
/// a failure. Build it inside the runtime that will use it: with the
/// `redis-tokio` feature in a tokio runtime (with its timer enabled), with
/// `redis-smol` under smol, async-std or any async-io executor. When both
/// features are on, redis-rs and this store pick tokio inside a tokio
/// runtime and async-io elsewhere.
///
/// Cloning it shares the connection.
///
/// ```no_run
/// use std::time::Duration;
/// use human_plus_store::{AsyncAttachmentStore, AsyncRedisAttachmentStore, Keyring, RedisConfig};
///
/// # async fn run() -> Result<(), human_plus_core::Error> {
/// let store = AsyncRedisAttachmentStore::connect(
///     RedisConfig::new("redis://127.0.0.1:6379/", Keyring::generate("k1")?),
/// )
/// .await?;
/// let guard = store.lock("surface_0123", Duration::from_secs(120)).await?;
/// let record = store.get(guard.id()).await?;
/// # let _ = record;
/// guard.release(); // queued; runs before this store's next lock attempt
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AsyncRedisAttachmentStore {
    shared: Arc<Shared>,
    conn: ConnectionManager,
    releases: Arc<Releases>,
}

impl fmt::Debug for AsyncRedisAttachmentStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncRedisAttachmentStore")
            .field("prefix", &self.shared.prefix)
            .field("keyring", &self.shared.keyring)
            .finish_non_exhaustive()
    }
}

impl AsyncRedisAttachmentStore {
    /// Connects (the first connection is made here, so a wrong URL or an
    /// unreachable server fails now) and starts the store's release
    /// thread.
    ///
    /// # Errors
    /// [`Error::Store`] when the URL is not valid, Redis does not answer,
    /// or the release thread cannot be started.
    pub async fn connect(config: RedisConfig) -> Result<Self, Error> {
        let shared = Arc::new(Shared::new(config)?);
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(shared.connect_timeout))
            .set_response_timeout(Some(shared.response_timeout))
            .set_number_of_retries(3);
        let conn = shared
            .client
            .get_connection_manager_with_config(manager_config)
            .await
            .map_err(|e| redis_error("connect", &e))?;
        let releases = Arc::new(Releases::default());
        let (worker_releases, worker_shared) = (Arc::clone(&releases), Arc::clone(&shared));
        std::thread::Builder::new()
            .name("human-plus-redis-release".to_owned())
            .spawn(move || release_worker(worker_releases, worker_shared))
            .map_err(|e| {
                super::store_error(format!("the release thread could not be started: {e}"))
            })?;
        Ok(AsyncRedisAttachmentStore {
            shared,
            conn,
            releases,
        })
    }

    /// The key of attachment `id`'s record.
    #[must_use]
    pub fn record_key(&self, id: &str) -> String {
        self.shared.record_key(id)
    }

    /// The key of attachment `id`'s lock.
    #[must_use]
    pub fn lock_key(&self, id: &str) -> String {
        self.shared.lock_key(id)
    }

    /// [`AsyncAttachmentStore::put`], refused also when `guard`'s lock is
    /// no longer held (see
    /// [`RedisAttachmentStore::put_holding`](super::RedisAttachmentStore::put_holding)).
    ///
    /// # Errors
    /// As [`RedisAttachmentStore::put_holding`](super::RedisAttachmentStore::put_holding).
    pub async fn put_holding(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<(), Error> {
        self.put_async(record, expected, Some(guard)).await
    }

    async fn put_async(
        &self,
        record: &SurfaceAttachment,
        expected: Option<u64>,
        fence: Option<&LockGuard>,
    ) -> Result<(), Error> {
        if let Some(guard) = fence {
            Shared::check_fence(record, guard)?;
        }
        let (generation, envelope) = self.shared.encode(record)?;
        let key = self.shared.record_key(record.id());
        let lock_key = fence.map(|g| (self.shared.lock_key(g.id()), g.token().to_owned()));
        let reply = {
            let inv = self.shared.put_invocation(
                &key,
                expected,
                &generation,
                &envelope,
                lock_key.as_ref().map(|(k, t)| (k.as_str(), t.as_str())),
            );
            let mut conn = self.conn.clone();
            inv.invoke_async(&mut conn)
                .await
                .map_err(|e| redis_error("put script", &e))?
        };
        Shared::put_outcome(record.id(), expected, reply)
    }

    /// Runs the releases queued by dropped guards, on this task.
    async fn flush_releases(&self, conn: &mut ConnectionManager) {
        for (key, token) in self.releases.take_all() {
            let released: Result<i64, _> = scripts::RELEASE
                .key(&key)
                .arg(&token)
                .invoke_async(conn)
                .await;
            if released.is_err() {
                // Leave it to the release thread (and, failing that, the
                // lease).
                self.releases.push(key, token);
            }
        }
    }
}

impl AsyncAttachmentStore for AsyncRedisAttachmentStore {
    async fn get(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        if id.starts_with(RESERVED_ID_PREFIX) {
            return Ok(None);
        }
        let key = self.shared.record_key(id);
        let mut conn = self.conn.clone();
        let fields: (Option<String>, Option<Vec<u8>>) = redis::cmd("HMGET")
            .arg(&key)
            .arg("g")
            .arg("v")
            .query_async(&mut conn)
            .await
            .map_err(|e| redis_error("HMGET", &e))?;
        self.shared.decode(id, fields)
    }

    async fn put(&self, record: &SurfaceAttachment, expected: Option<u64>) -> Result<(), Error> {
        self.put_async(record, expected, None).await
    }

    async fn lock(&self, id: &str, lease: Duration) -> Result<LockGuard, Error> {
        let key = self.shared.lock_key(id);
        let token = lock_token()?;
        let lease_ms = millis(lease);
        let mut backoff = self.shared.backoff(&token);
        let mut conn = self.conn.clone();
        let pending = Pending {
            releases: &self.releases,
            key: &key,
            token: &token,
        };
        loop {
            self.flush_releases(&mut conn).await;
            let reply: i64 = self
                .shared
                .acquire_invocation(&key, &token, lease_ms)
                .invoke_async(&mut conn)
                .await
                .map_err(|e| redis_error("lock script", &e))?;
            let attempted = Attempted::from_reply(reply);
            if attempted == Attempted::Taken {
                std::mem::forget(pending);
                let releases = Arc::clone(&self.releases);
                let release_token = token.clone();
                return Ok(LockGuard::new(id, token, move || {
                    releases.push(key, release_token);
                }));
            }
            sleep(backoff.next(attempted == Attempted::NextInLine)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::redis_store::Keyring;

    /// A store on a port nothing listens on: releases fail fast.
    fn shared() -> Arc<Shared> {
        Arc::new(
            Shared::new(
                RedisConfig::new("redis://127.0.0.1:1/", Keyring::generate("k").unwrap())
                    .connect_timeout(Duration::from_millis(200)),
            )
            .unwrap(),
        )
    }

    #[test]
    fn the_release_thread_drains_the_queue_and_ends_with_its_last_owner() {
        let releases = Arc::new(Releases::default());
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let worker = {
            let (releases, shared) = (Arc::clone(&releases), shared());
            std::thread::spawn(move || {
                release_worker(releases, shared);
                done_tx.send(()).unwrap();
            })
        };
        // A guard outliving the store still gets its release run.
        let guard_side = Arc::clone(&releases);
        drop(releases);
        guard_side.push("k".into(), "t".into());
        drop(guard_side);
        done_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the release thread ended");
        worker.join().unwrap();
    }

    #[test]
    fn a_pending_lock_call_queues_the_release_of_its_lock_and_place() {
        let releases = Releases::default();
        drop(Pending {
            releases: &releases,
            key: "p:lock:a",
            token: "t1",
        });
        assert_eq!(
            releases.take_all(),
            vec![
                ("p:lock:a".to_owned(), "t1".to_owned()),
                ("p:lock:a#next".to_owned(), "t1".to_owned())
            ]
        );
        assert!(releases.take_all().is_empty());
    }
}
