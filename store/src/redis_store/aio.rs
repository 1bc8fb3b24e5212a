//! The async flavour, on a redis-rs `ConnectionManager` (one server) or a
//! redis-rs async cluster connection.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use human_plus_core::{Error, SurfaceAttachment};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterConfig;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::config::{RedisConfig, millis};
use super::conn::{Backend, primary_of, wait_command};
use super::errors::{classify, redis_error, store_error};
use super::keys::RESERVED_ID_PREFIX;
use super::pause::FailoverPause;
use super::release::{self, Releases};
use super::shared::{
    AcquireReply, Attempt, Attempted, Fields, PUT_RELEASE_OP, PutReply, Shared, WriteTrail,
    lock_token, lock_unconfirmed, put_release_status,
};
use super::wake;
use crate::{AsyncAttachmentStore, LockGuard};

/// A live async connection: a clone of the store's shared one.
#[derive(Clone)]
enum Live {
    Single(ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Live {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Live::Single(c) => c.req_packed_command(cmd),
            Live::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Live::Single(c) => c.req_packed_commands(cmd, offset, count),
            Live::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Live::Single(c) => c.get_db(),
            Live::Cluster(c) => c.get_db(),
        }
    }
}

impl Live {
    /// `WAIT n timeout_ms` where `key` was written.
    async fn wait_replicas(
        &mut self,
        key: &str,
        n: i64,
        timeout_ms: u64,
    ) -> redis::RedisResult<i64> {
        let wait = wait_command(n, timeout_ms);
        match self {
            Live::Single(c) => wait.query_async(c).await,
            Live::Cluster(c) => {
                let value = c.route_command(wait, primary_of(key)).await?;
                Ok(redis::FromRedisValue::from_redis_value(value)?)
            }
        }
    }
}

/// The store's connection, and for a cluster the means to replace it
/// with one that has read the slot map again.
struct Connection {
    live: Mutex<Live>,
    /// When the cluster connection was last replaced (at most once per
    /// 250 ms, however many tasks fail at once).
    replaced: Mutex<Instant>,
}

impl Connection {
    fn get(&self) -> Option<Live> {
        self.live.lock().ok().map(|l| l.clone())
    }
}

async fn connect(shared: &Shared) -> redis::RedisResult<Live> {
    match &shared.backend {
        Backend::Single(client) => {
            let manager_config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(shared.connect_timeout))
                .set_response_timeout(Some(shared.response_timeout))
                .set_number_of_retries(3);
            Ok(Live::Single(
                client
                    .get_connection_manager_with_config(manager_config)
                    .await?,
            ))
        }
        Backend::Cluster(client) => {
            let config = ClusterConfig::new()
                .set_connection_timeout(shared.connect_timeout)
                .set_response_timeout(shared.response_timeout);
            Ok(Live::Cluster(
                client.get_async_connection_with_config(config).await?,
            ))
        }
    }
}

/// A `lock` call in progress. Dropped before it returns a guard (the
/// caller's wait ran out, or Redis failed), it queues the compare-and-
/// delete of its token from the lock (in case its last attempt went
/// through unseen) and from the place next in line (in case it held it).
/// Both are no-ops when the token is not there.
struct Pending<'a> {
    releases: &'a Arc<Releases>,
    shared: &'a Arc<Shared>,
    key: &'a str,
    token: &'a str,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let wait = self.shared.failover_wait;
        self.releases
            .push_retry(self.key.to_owned(), self.token.to_owned(), wait);
        self.releases
            .push_retry(Shared::next_key(self.key), self.token.to_owned(), wait);
        release::ensure_worker(self.releases, self.shared);
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
/// data layout, the scripts, the locks, failover, TLS, the encryption, and
/// how a dropped guard is released without blocking the executor.
///
/// It runs on one redis-rs `ConnectionManager` (a multiplexed connection:
/// commands of every task pipelined on one socket, reconnecting after a
/// failure) or, for a cluster, one redis-rs async cluster connection (one
/// multiplexed socket per node, replaced when a failover leaves it
/// pointing at a primary that stopped). Build it inside the runtime that
/// will use it: with the `redis-tokio` feature in a tokio runtime (with
/// its timer enabled), with `redis-smol` under smol, async-std or any
/// async-io executor. When both features are on, redis-rs and this store
/// pick tokio inside a tokio runtime and async-io elsewhere.
///
/// Cloning it shares the connection.
///
/// ```no_run
/// use std::time::Duration;
/// use human_plus_store::{AsyncAttachmentStore, AsyncRedisAttachmentStore, Keyring, RedisConfig};
///
/// # async fn run() -> Result<(), human_plus_core::Error> {
/// let store = AsyncRedisAttachmentStore::connect(
///     RedisConfig::cluster(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"], Keyring::generate("k1")?),
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
    conn: Arc<Connection>,
    releases: Arc<Releases>,
}

impl fmt::Debug for AsyncRedisAttachmentStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncRedisAttachmentStore")
            .field("prefix", &self.shared.prefix)
            .field("layout", &self.shared.layout)
            .field("keyring", &self.shared.keyring)
            .finish_non_exhaustive()
    }
}

impl AsyncRedisAttachmentStore {
    /// Connects (the first connection is made here, so a wrong URL, an
    /// unreachable server or a certificate that is not trusted fails now;
    /// not retried) and starts the store's release thread.
    ///
    /// # Errors
    /// As [`RedisAttachmentStore::open`](super::RedisAttachmentStore::open),
    /// and when the release thread cannot be started.
    pub async fn connect(config: RedisConfig) -> Result<Self, Error> {
        let shared = Arc::new(Shared::new(config)?);
        let mut live = connect(&shared)
            .await
            .map_err(|e| redis_error("connect", &e))?;
        // A cluster connection connects lazily in part: one PING proves
        // the slot map was read and a primary answers.
        let _: String = redis::cmd("PING")
            .query_async(&mut live)
            .await
            .map_err(|e| redis_error("PING", &e))?;
        let releases = Arc::new(Releases::default());
        release::ensure_worker(&releases, &shared);
        Ok(AsyncRedisAttachmentStore {
            shared,
            conn: Arc::new(Connection {
                live: Mutex::new(live),
                replaced: Mutex::new(Instant::now()),
            }),
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

    fn live(&self) -> Result<Live, Error> {
        self.conn
            .get()
            .ok_or_else(|| store_error("the Redis connection is poisoned"))
    }

    /// After a retryable failure on a cluster: a new cluster connection,
    /// which reads the slot map from the seeds again (redis-rs does not
    /// leave a primary that stopped answering on its own).
    async fn replace_cluster_connection(&self) {
        if !matches!(self.shared.backend, Backend::Cluster(_)) {
            return;
        }
        {
            let Ok(mut replaced) = self.conn.replaced.lock() else {
                return;
            };
            if replaced.elapsed() < Duration::from_millis(250) {
                return;
            }
            *replaced = Instant::now();
        }
        if let Ok(fresh) = connect(&self.shared).await
            && let Ok(mut live) = self.conn.live.lock()
        {
            *live = fresh;
        }
    }

    /// Runs `f` on the store's connection, again after a retryable
    /// failure (for a cluster on a replaced connection), until it
    /// succeeds, fails for good, or the failover wait has passed since the
    /// first failure. Every `f` here is safe to replay.
    async fn retrying<T, F, Fut>(&self, op: &str, mut f: F) -> Result<T, Error>
    where
        F: FnMut(Live) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let mut first_failure: Option<Instant> = None;
        let mut pause = FailoverPause::new(op);
        loop {
            match f(self.live()?).await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let failed_at = *first_failure.get_or_insert_with(Instant::now);
                    let left = self
                        .shared
                        .failover_wait
                        .saturating_sub(failed_at.elapsed());
                    if !classify(&e).retryable || left.is_zero() {
                        return Err(redis_error(op, &e));
                    }
                    tracing::debug!(op, error = %e, "redis failed; retrying");
                    self.replace_cluster_connection().await;
                    sleep(pause.next().min(left)).await;
                }
            }
        }
    }

    /// Runs a write script (retried as every operation is) and, when it
    /// wrote (`status_and_replicas` of its reply says status 1), `WAIT`s
    /// for as many of the replicas it reported as are asked for: the reply,
    /// and `(asked, acknowledged)` when it waited. `make` gives each
    /// attempt's invocation, told whether an attempt was sent before it.
    async fn write_acked<R>(
        &self,
        op: &str,
        make: &(dyn Fn(bool) -> redis::ScriptInvocation<'static> + Sync),
        key: &str,
        status_and_replicas: fn(&R) -> (i64, i64),
    ) -> Result<(R, Option<(i64, i64)>), Error>
    where
        R: redis::FromRedisValue + Send,
    {
        let shared = &self.shared;
        let mut sent = false;
        self.retrying(op, |mut conn| {
            // The invocation of this attempt: `true` once one was sent.
            let inv = make(std::mem::replace(&mut sent, true));
            async move {
                let reply: R = inv.invoke_async(&mut conn).await?;
                let acked = match status_and_replicas(&reply) {
                    (1, replicas) => match shared.wait_for(replicas) {
                        Some((n, ms)) => Some((n, conn.wait_replicas(key, n, ms).await?)),
                        None => None,
                    },
                    _ => None,
                };
                Ok((reply, acked))
            }
        })
        .await
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
        let trail = WriteTrail::new(fence)?;
        let make = |_| {
            self.shared.put_invocation(
                &key,
                expected,
                &generation,
                &envelope,
                lock_key.as_ref().map(|(k, t)| (k.as_str(), t.as_str())),
                &trail,
            )
        };
        let (reply, acked) = self
            .write_acked("put script", &make, &key, |r: &PutReply| (r.0, r.2))
            .await?;
        Shared::put_outcome(record.id(), expected, &reply, acked)
    }

    /// Runs the releases queued by dropped guards, on this task; one that
    /// fails is left to the release thread. A lock freed wakes the waiters
    /// of this process.
    async fn flush_releases(&self) {
        for (key, token) in self.releases.take_due() {
            let released = match self.live() {
                Ok(mut conn) => self
                    .shared
                    .release_any_invocation(&key, &token)
                    .invoke_async::<i64>(&mut conn)
                    .await
                    .ok(),
                Err(_) => None,
            };
            match released {
                Some(deleted) => {
                    if deleted == 1 {
                        wake::released(&key);
                    }
                }
                None => {
                    self.releases
                        .push_retry(key, token, self.shared.failover_wait);
                    release::ensure_worker(&self.releases, &self.shared);
                }
            }
        }
    }

    /// One attempt to take the lock, and with `record_key` to read the
    /// record once taken (see the blocking flavour).
    async fn acquire(
        &self,
        key: &str,
        record_key: Option<&str>,
        token: &str,
        lease_ms: u64,
        in_line: bool,
    ) -> Result<(Attempt, Fields), Error> {
        let inv = self
            .shared
            .acquire_invocation(key, record_key, token, lease_ms, in_line);
        let shared = &self.shared;
        let (attempt, fields, acked) = self
            .retrying("lock script", |mut conn| {
                let inv = &inv;
                async move {
                    let reply: AcquireReply = inv.invoke_async(&mut conn).await?;
                    let attempt = Attempt::from_reply(&reply);
                    let acked = match shared.wait_for(reply.1) {
                        Some((n, ms)) if attempt.attempted == Attempted::Taken => {
                            Some((n, conn.wait_replicas(key, n, ms).await?))
                        }
                        _ => None,
                    };
                    Ok((attempt, (reply.3, reply.4, reply.5), acked))
                }
            })
            .await?;
        match acked {
            Some((asked, got)) if got < asked => {
                self.releases
                    .push_retry(key.to_owned(), token.to_owned(), shared.failover_wait);
                release::ensure_worker(&self.releases, shared);
                Err(lock_unconfirmed(key, asked, got))
            }
            _ => Ok((attempt, fields)),
        }
    }

    /// Takes the lock, waiting until `deadline` at most (for ever without
    /// one): [`Error::Busy`] when it runs out.
    async fn lock_until(
        &self,
        id: &str,
        lease: Duration,
        deadline: Option<Instant>,
        load: bool,
    ) -> Result<(LockGuard, Fields), Error> {
        let key = self.shared.lock_key(id);
        // A reserved id has no record (see the blocking flavour).
        let record_key =
            (load && !id.starts_with(RESERVED_ID_PREFIX)).then(|| self.shared.record_key(id));
        let lease_ms = millis(lease);
        let token = lock_token(lease_ms)?;
        let mut backoff = self.shared.backoff(&token);
        let freed = wake::event(&key);
        let pending = Pending {
            releases: &self.releases,
            shared: &self.shared,
            key: &key,
            token: &token,
        };
        let mut in_line = false;
        loop {
            // Listening before the attempt: a release in this process
            // between the attempt and the sleep still wakes it.
            let listener = freed.listen();
            self.flush_releases().await;
            let sent = Instant::now();
            let (attempt, fields) = self
                .acquire(&key, record_key.as_deref(), &token, lease_ms, in_line)
                .await?;
            in_line |= attempt.attempted == Attempted::NextInLine;
            if attempt.attempted == Attempted::Taken {
                std::mem::forget(pending);
                let releases = Arc::clone(&self.releases);
                let release_token = token.clone();
                let wait = self.shared.failover_wait;
                let guard = LockGuard::new(id, token, move || {
                    // Run by this store's next lock call or by the release
                    // thread, whichever comes first; retried after a
                    // failure, as long as a failover may last.
                    releases.push_retry(key, release_token, wait);
                });
                guard.note(&fields.2);
                guard.held_until_at_least(sent + lease);
                return Ok((guard, fields));
            }
            let Some(sleep_for) = attempt.next_wait(&mut backoff, Instant::now(), deadline) else {
                // Dropping `pending` gives up the place in line.
                return Err(crate::busy(attempt.holder, lease));
            };
            // Woken at once by a release in this process.
            futures_lite::future::or(listener, sleep(sleep_for)).await;
        }
    }
}

impl AsyncAttachmentStore for AsyncRedisAttachmentStore {
    async fn get(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        if id.starts_with(RESERVED_ID_PREFIX) {
            return Ok(None);
        }
        let key = self.shared.record_key(id);
        let inv = Shared::read_invocation(&key);
        let fields: Fields = self
            .retrying("read script", |mut conn| {
                let inv = &inv;
                async move { inv.invoke_async(&mut conn).await }
            })
            .await?;
        self.shared.decode(id, fields)
    }

    async fn put(&self, record: &SurfaceAttachment, expected: Option<u64>) -> Result<(), Error> {
        self.put_async(record, expected, None).await
    }

    async fn lock(&self, id: &str, lease: Duration) -> Result<LockGuard, Error> {
        self.lock_until(id, lease, None, false)
            .await
            .map(|(guard, _)| guard)
    }

    async fn lock_within(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<LockGuard, Error> {
        self.lock_until(id, lease, Some(Instant::now() + wait), false)
            .await
            .map(|(guard, _)| guard)
    }

    async fn renew(&self, guard: &LockGuard, lease: Duration) -> Result<bool, Error> {
        let sent = Instant::now();
        let inv = Shared::renew_invocation(
            &self.shared.lock_key(guard.id()),
            guard.token(),
            millis(lease),
        );
        let renewed: i64 = self
            .retrying("renew script", |mut conn| {
                let inv = &inv;
                async move { inv.invoke_async(&mut conn).await }
            })
            .await?;
        if renewed == 1 {
            guard.held_until_at_least(sent + lease);
        } else {
            guard.not_surely_held();
        }
        Ok(renewed == 1)
    }

    /// Runs the compare-and-delete now, on the store's connection (the
    /// guard's own release, queued when it is dropped, then finds nothing).
    async fn release(&self, guard: &LockGuard) -> Result<(), Error> {
        // From here a write of this guard's cannot tell its own release
        // from this one (see the put-and-release script).
        guard.not_surely_held();
        let key = self.shared.lock_key(guard.id());
        let inv = self.shared.release_invocation(&key, guard.token());
        let deleted: i64 = self
            .retrying("release script", |mut conn| {
                let inv = &inv;
                async move { inv.invoke_async(&mut conn).await }
            })
            .await?;
        if deleted == 1 {
            wake::released(&key);
        }
        // Given back (or no longer this guard's): its drop queues nothing.
        guard.disarm();
        Ok(())
    }

    /// One script takes the lock and reads the record (one round trip).
    async fn lock_and_get(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<(LockGuard, Option<SurfaceAttachment>), Error> {
        let (guard, fields) = self
            .lock_until(id, lease, Some(Instant::now() + wait), true)
            .await?;
        Ok((guard, self.shared.decode(id, fields)?))
    }

    /// One script writes the record and gives the lock back (one round
    /// trip). When Redis fails, the guard's drop gives the lock back.
    async fn put_and_release(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<(), Error> {
        let write = self.shared.put_release(guard, record, expected)?;
        let make = |retry| write.invocation(&self.shared, guard, retry);
        let answer = self
            .write_acked(PUT_RELEASE_OP, &make, &write.key, put_release_status)
            .await?;
        write.answered(guard, answer)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::redis_store::Keyring;

    /// A store on a port nothing listens on: releases fail fast, and are
    /// not retried.
    fn shared() -> Arc<Shared> {
        Arc::new(
            Shared::new(
                RedisConfig::new("redis://127.0.0.1:1/", Keyring::generate("k").unwrap())
                    .connect_timeout(Duration::from_millis(200))
                    .failover_wait(Duration::ZERO),
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
                release::worker(&releases, &shared);
                done_tx.send(()).unwrap();
            })
        };
        // A guard outliving the store still gets its release run.
        let guard_side = Arc::clone(&releases);
        drop(releases);
        guard_side.push_retry("k".into(), "t".into(), Duration::ZERO);
        drop(guard_side);
        done_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the release thread ended");
        worker.join().unwrap();
    }

    #[test]
    fn a_failed_release_is_retried_until_it_gives_up() {
        let releases = Arc::new(Releases::default());
        let shared = shared();
        releases.push_retry("k".into(), "t".into(), Duration::from_millis(300));
        let t = Instant::now();
        let worker = {
            let releases = Arc::clone(&releases);
            std::thread::spawn(move || release::worker(&releases, &shared))
        };
        drop(releases);
        worker.join().unwrap();
        // Tried at once, then again after pauses, until 300 ms had passed.
        assert!(
            t.elapsed() >= Duration::from_millis(250),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn a_pending_lock_call_queues_the_release_of_its_lock_and_place() {
        let releases = Arc::new(Releases::without_worker());
        let shared = shared();
        drop(Pending {
            releases: &releases,
            shared: &shared,
            key: "p:lock:a",
            token: "t1",
        });
        assert_eq!(
            releases.take_due(),
            vec![
                ("p:lock:a".to_owned(), "t1".to_owned()),
                ("p:lock:a#next".to_owned(), "t1".to_owned())
            ]
        );
        assert_eq!(releases.len(), 0);
    }
}
