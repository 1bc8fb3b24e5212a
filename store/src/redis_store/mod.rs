//! # The Redis attachment store
//!
//! For workers on more than one machine: the record of an attachment (its
//! revision above all) lives in Redis, encrypted, and every runtime's
//! manager holds a Redis lock of the attachment for the whole operation
//! and compare-and-sets the record on the generation it loaded.
//!
//! * [`RedisAttachmentStore`] is the blocking flavour
//!   ([`AttachmentStore`]), on synchronous redis-rs connections: feature
//!   `redis`, no async runtime at all.
//! * `AsyncRedisAttachmentStore` is the async flavour
//!   ([`AsyncAttachmentStore`](crate::AsyncAttachmentStore)), on a redis-rs
//!   `ConnectionManager` (a multiplexed connection that reconnects):
//!   feature `redis-tokio` and/or `redis-smol` (async-io, so smol and
//!   async-std). (The redis-rs crate's async layer still depends on the
//!   `tokio` crate for its internal channels under `redis-smol`; no tokio
//!   runtime is started.)
//!
//! ## Data layout
//!
//! With the default prefix `human-plus:` ([`DEFAULT_PREFIX`]):
//!
//! | key | type | content |
//! |---|---|---|
//! | `human-plus:<id>` | hash | `g`: the record's generation (decimal); `v`: the sealed envelope |
//! | `human-plus:lock:<id>` | string | the holder's random token, with a `PX` lease |
//! | `human-plus:lock:<id>#next` | string | the token of the worker next in line for the lock, kept 50 ms + 5 x the longest retry sleep unless renewed |
//!
//! The generation sits beside the ciphertext so the compare-and-set script
//! can read it without the key. Every write re-sets the record's TTL
//! (sliding, 24 h by default: [`DEFAULT_TTL`]); reads do not extend it.
//! An attachment id starting with `lock:` is refused by `put` (its record
//! key would be another attachment's lock key).
//!
//! ## Scripts and locks
//!
//! * `put` is one Lua script (EVALSHA, loaded on demand): it reads `g`,
//!   and only if it equals the expected generation (or, for an insert, the
//!   key does not exist) writes `g` and `v` together and re-sets the TTL.
//!   A mismatch is [`Error::StoreConflict`] with the generation found;
//!   nothing is written.
//! * `lock` is `SET human-plus:lock:<id> <token> NX PX <lease>`, in a Lua
//!   script behind a one-place waiting line, retried after short random
//!   sleeps (1 to 10 ms by default, [`RedisConfig::lock_retry`]) until it
//!   succeeds or the wait runs out. The first waiter to find the lock held
//!   takes the place `#next` and keeps it by retrying; while that place is
//!   someone else's, an attempt does not even try the `SET`. So a holder
//!   that releases and locks again at once (a worker on a loop) cannot
//!   starve the workers already waiting: the lock goes to the one next in
//!   line, which retries every 1 to 2 ms. Among the other waiters the
//!   order is random, not first-come first-served. A place left by a
//!   waiter that gave up or died lapses within 50 ms + 5 x the longest
//!   sleep.
//! * Release is a Lua compare-and-delete: the key is deleted only while it
//!   still holds the releasing guard's token, so a holder whose lease ran
//!   out never frees its successor's lock. A worker that dies without
//!   releasing holds the lock only until its lease ends.
//!
//! ## Fencing: why a holder whose lease expired cannot write
//!
//! The lock is mutual exclusion with a lease, and a lease can run out
//! while its holder is still working (a long pause, a slow network). The
//! fence is the generation: every change to a record bumps it, and every
//! write is a compare-and-set on the generation the writer loaded. Once
//! the lease has expired and the next holder has written, the stored
//! generation is past the one the late holder loaded, so the late
//! holder's write fails with [`Error::StoreConflict`] instead of
//! overwriting. (If the next holder has not written yet, the late write
//! lands first and the next holder's own write is the one refused; either
//! way no update is lost silently.) For callers that hold the guard,
//! [`RedisAttachmentStore::put_holding`] also refuses the write once the
//! lock no longer holds the guard's token.
//!
//! ## Encryption at rest
//!
//! The record is serialised whole (its relay token included) and sealed
//! with XChaCha20-Poly1305 under the [`Keyring`]'s current key. The
//! envelope is `version (1) | key id length (1) | key id | nonce (24) |
//! ciphertext + tag (16)`; the associated data binds the record key
//! (prefix + id), the attachment id, the key id and the generation stored
//! in `g`. Nonces come from the operating system (or an injected source,
//! [`RedisConfig::nonce_source`]). A record that cannot be opened (a key
//! id the keyring does not hold, a wrong key, altered bytes, a truncated
//! envelope, a generation that does not match) is an [`Error::Store`]
//! naming the attachment and the reason, never a silent miss, and never
//! showing the plaintext. A Redis user can still replay an older, intact
//! `(g, v)` pair of the same attachment: authenticity is per record, not
//! a defence against rollback by someone who can write to Redis.
//!
//! ## Releasing an async guard
//!
//! A [`LockGuard`] is released by a synchronous closure, and a network
//! round trip must not block an async executor. The async flavour's
//! release therefore only queues the compare-and-delete; the store's next
//! `lock` call runs the queued releases on its own connection first (so a
//! worker that locks again sees its lock free), and a background thread
//! of the store runs any release still queued on a synchronous connection
//! (so other processes see the lock free within a round trip even if this
//! process locks nothing more). The thread sleeps while the queue is
//! empty and ends within a second of the store and its last guard being
//! dropped. The blocking flavour releases synchronously on drop.
//!
//! ```no_run
//! use std::time::Duration;
//! use human_plus_store::{AttachmentStore, Keyring, RedisAttachmentStore, RedisConfig};
//!
//! let keyring = Keyring::new("2026-11", Keyring::key_from_hex(&std::env::var("HUMAN_PLUS_KEY")?)?)?;
//! let store = RedisAttachmentStore::open(
//!     RedisConfig::new("redis://127.0.0.1:6379/", keyring).ttl(Duration::from_secs(3600)),
//! )?;
//! let guard = store.lock("surface_0123", Duration::from_secs(120), Duration::from_secs(10))?;
//! let record = store.get(guard.id())?;
//! # let _ = record;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

#[cfg(any(feature = "redis-tokio", feature = "redis-smol"))]
mod aio;
mod crypto;
mod scripts;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use human_plus_core::{Entropy, Error, SeededEntropy, StoreError, SurfaceAttachment};
use zeroize::Zeroizing;

use crate::{AttachmentStore, LockGuard};

#[cfg(any(feature = "redis-tokio", feature = "redis-smol"))]
pub use aio::AsyncRedisAttachmentStore;
pub use crypto::{ENVELOPE_VERSION, Keyring, MAX_KEY_ID_LEN};

use crypto::Nonces;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "human-plus:";

/// The default sliding TTL of a record: 24 hours, re-set by every write.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The default timeout of a connection attempt.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default timeout of one command's response (the scripts included).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How many idle connections the blocking flavour keeps by default.
pub const DEFAULT_MAX_IDLE: usize = 16;

const RESERVED_ID_PREFIX: &str = "lock:";

fn store_error(message: impl AsRef<str>) -> Error {
    Error::Store(StoreError::new(message))
}

fn redis_error(op: &str, e: &redis::RedisError) -> Error {
    store_error(format!("redis {op} failed: {e}"))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// How a Redis store connects, names its keys and seals its records.
///
/// ```
/// use std::time::Duration;
/// use human_plus_store::{Keyring, RedisConfig};
///
/// let config = RedisConfig::new("redis://:secret@redis.internal:6379/2", Keyring::generate("k1")?)
///     .prefix("tenant-a:human-plus:")
///     .ttl(Duration::from_secs(6 * 3600))
///     .response_timeout(Duration::from_secs(2));
/// assert_eq!(config.record_key("surface_1"), "tenant-a:human-plus:surface_1");
/// assert_eq!(config.lock_key("surface_1"), "tenant-a:human-plus:lock:surface_1");
/// assert!(!format!("{config:?}").contains("secret"));
/// # Ok::<(), human_plus_core::Error>(())
/// ```
pub struct RedisConfig {
    url: Zeroizing<String>,
    keyring: Keyring,
    nonces: Nonces,
    prefix: String,
    ttl: Duration,
    connect_timeout: Duration,
    response_timeout: Duration,
    retry_min: Duration,
    retry_max: Duration,
    max_idle: usize,
}

impl RedisConfig {
    /// A configuration for the Redis at `url` (`redis://[:password@]host:port/db`,
    /// or `rediss://` for TLS when redis-rs is built with a TLS feature)
    /// sealing records with `keyring`, and the defaults for the rest.
    #[must_use]
    pub fn new(url: impl Into<String>, keyring: Keyring) -> Self {
        RedisConfig {
            url: Zeroizing::new(url.into()),
            keyring,
            nonces: Nonces::Os,
            prefix: DEFAULT_PREFIX.to_owned(),
            ttl: DEFAULT_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            retry_min: Duration::from_millis(1),
            retry_max: Duration::from_millis(10),
            max_idle: DEFAULT_MAX_IDLE,
        }
    }

    /// The key prefix (default [`DEFAULT_PREFIX`]).
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The sliding TTL of a record, re-set by every write (default
    /// [`DEFAULT_TTL`]; at least 1 ms).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The timeout of a connection attempt (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]; redis-rs's async default of 1 s is
    /// replaced).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The timeout of one command's response, the scripts included
    /// (default [`DEFAULT_RESPONSE_TIMEOUT`]; redis-rs's async default of
    /// 500 ms is replaced).
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The sleeps between attempts to take a held lock: random between
    /// `min` and `max` (default 1 ms to 10 ms); the waiter next in line
    /// sleeps between `min` and twice `min`.
    #[must_use]
    pub fn lock_retry(mut self, min: Duration, max: Duration) -> Self {
        self.retry_min = min.max(Duration::from_micros(100));
        self.retry_max = max.max(self.retry_min);
        self
    }

    /// How many idle connections the blocking flavour keeps for reuse
    /// (default [`DEFAULT_MAX_IDLE`]; more are opened when needed).
    #[must_use]
    pub fn max_idle_connections(mut self, n: usize) -> Self {
        self.max_idle = n;
        self
    }

    /// Draws envelope nonces from `source` instead of the operating system
    /// (for deterministic tests; never use a predictable source in
    /// production: XChaCha20's 24-byte nonces are safe to draw at random,
    /// not to repeat).
    #[must_use]
    pub fn nonce_source(mut self, source: impl Entropy + Send + 'static) -> Self {
        self.nonces = Nonces::Injected(Mutex::new(Box::new(source)));
        self
    }

    /// The key of attachment `id`'s record.
    #[must_use]
    pub fn record_key(&self, id: &str) -> String {
        format!("{}{id}", self.prefix)
    }

    /// The key of attachment `id`'s lock.
    #[must_use]
    pub fn lock_key(&self, id: &str) -> String {
        format!("{}{RESERVED_ID_PREFIX}{id}", self.prefix)
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &"<redacted>")
            .field("keyring", &self.keyring)
            .field("nonces", &self.nonces)
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("lock_retry", &(self.retry_min, self.retry_max))
            .field("max_idle", &self.max_idle)
            .finish()
    }
}

/// Random sleeps between lock attempts.
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    jitter: SeededEntropy,
}

impl Backoff {
    fn new(min: Duration, max: Duration, seed: &str) -> Self {
        let seed = seed.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Backoff {
            min,
            max,
            jitter: SeededEntropy::new(seed),
        }
    }

    /// The next sleep: uniform in [min, 2 min] for the waiter next in
    /// line, in [min, max] for the others.
    pub(crate) fn next(&mut self, next_in_line: bool) -> Duration {
        let mut b = [0u8; 4];
        self.jitter.fill_bytes(&mut b);
        let frac = f64::from(u32::from_le_bytes(b)) / f64::from(u32::MAX);
        if next_in_line {
            self.min + self.min.mul_f64(frac)
        } else {
            self.min + (self.max - self.min).mul_f64(frac)
        }
    }
}

/// What one attempt to take a lock found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempted {
    /// The lock is ours.
    Taken,
    /// Held; we are next in line.
    NextInLine,
    /// Held, or promised to another waiter.
    Waiting,
}

impl Attempted {
    fn from_reply(reply: i64) -> Self {
        match reply {
            1 => Attempted::Taken,
            2 => Attempted::NextInLine,
            _ => Attempted::Waiting,
        }
    }
}

/// What both flavours share: the client, the keyring, the key names, the
/// record codec, and the blocking connections.
pub(crate) struct Shared {
    client: redis::Client,
    keyring: Keyring,
    nonces: Nonces,
    prefix: String,
    ttl_ms: u64,
    connect_timeout: Duration,
    response_timeout: Duration,
    retry_min: Duration,
    retry_max: Duration,
    line_ms: u64,
    max_idle: usize,
    idle: Mutex<Vec<redis::Connection>>,
}

/// The outcome the put script reported.
type PutReply = (i64, String);

impl Shared {
    fn new(config: RedisConfig) -> Result<Self, Error> {
        let info = redis::IntoConnectionInfo::into_connection_info(config.url.as_str())
            .map_err(|_| store_error("the Redis URL is not valid"))?
            .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let client =
            redis::Client::open(info).map_err(|_| store_error("the Redis URL is not valid"))?;
        Ok(Shared {
            client,
            keyring: config.keyring,
            nonces: config.nonces,
            prefix: config.prefix,
            ttl_ms: millis(config.ttl),
            connect_timeout: config.connect_timeout,
            response_timeout: config.response_timeout,
            retry_min: config.retry_min,
            retry_max: config.retry_max,
            line_ms: millis(Duration::from_millis(50) + config.retry_max * 5),
            max_idle: config.max_idle,
            idle: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn record_key(&self, id: &str) -> String {
        format!("{}{id}", self.prefix)
    }

    pub(crate) fn lock_key(&self, id: &str) -> String {
        format!("{}{RESERVED_ID_PREFIX}{id}", self.prefix)
    }

    /// The next-in-line key of a lock key (`#` is never in an attachment
    /// id, so it names no other lock or record).
    pub(crate) fn next_key(lock_key: &str) -> String {
        format!("{lock_key}#next")
    }

    /// The acquire script's invocation.
    pub(crate) fn acquire_invocation(
        &self,
        lock_key: &str,
        token: &str,
        lease_ms: u64,
    ) -> redis::ScriptInvocation<'static> {
        let mut inv = scripts::ACQUIRE.prepare_invoke();
        inv.key(lock_key)
            .key(Shared::next_key(lock_key))
            .arg(token)
            .arg(lease_ms)
            .arg(self.line_ms);
        inv
    }

    pub(crate) fn backoff(&self, seed: &str) -> Backoff {
        Backoff::new(self.retry_min, self.retry_max, seed)
    }

    /// The record's generation and envelope, sealed for its key.
    pub(crate) fn encode(&self, record: &SurfaceAttachment) -> Result<(String, Vec<u8>), Error> {
        let id = record.id();
        if id.starts_with(RESERVED_ID_PREFIX) {
            return Err(store_error(format!(
                "attachment id {id} is reserved: ids starting with {RESERVED_ID_PREFIX:?} name lock keys"
            )));
        }
        let plaintext = Zeroizing::new(serde_json::to_vec(record).map_err(|_| {
            store_error(format!(
                "the record of attachment {id} could not be serialised"
            ))
        })?);
        let generation = record.generation();
        let envelope = crypto::seal(
            &self.keyring,
            &self.nonces,
            &self.record_key(id),
            id,
            generation,
            &plaintext,
        )?;
        Ok((generation.to_string(), envelope))
    }

    /// The record from the hash's `g` and `v` fields.
    pub(crate) fn decode(
        &self,
        id: &str,
        fields: (Option<String>, Option<Vec<u8>>),
    ) -> Result<Option<SurfaceAttachment>, Error> {
        let malformed = |why: &str| {
            store_error(format!(
                "the stored record of attachment {id} is malformed: {why}"
            ))
        };
        let (generation, envelope) = match fields {
            (None, None) => return Ok(None),
            (Some(g), Some(v)) => (g, v),
            _ => return Err(malformed("its generation or its envelope is missing")),
        };
        let generation: u64 = generation
            .parse()
            .map_err(|_| malformed("its generation is not a number"))?;
        let plaintext = crypto::open(
            &self.keyring,
            &self.record_key(id),
            id,
            generation,
            &envelope,
        )?;
        let record: SurfaceAttachment = serde_json::from_slice(&plaintext)
            .map_err(|_| malformed("it decrypted, but is not an attachment record"))?;
        if record.id() != id || record.generation() != generation {
            return Err(malformed("it belongs to another attachment or generation"));
        }
        Ok(Some(record))
    }

    /// The put script's invocation.
    pub(crate) fn put_invocation(
        &self,
        record_key: &str,
        expected: Option<u64>,
        generation: &str,
        envelope: &[u8],
        fence: Option<(&str, &str)>,
    ) -> redis::ScriptInvocation<'static> {
        let mut inv = scripts::PUT.prepare_invoke();
        inv.key(record_key);
        if let Some((lock_key, _)) = fence {
            inv.key(lock_key);
        }
        inv.arg(expected.map(|g| g.to_string()).unwrap_or_default())
            .arg(generation)
            .arg(envelope)
            .arg(self.ttl_ms);
        if let Some((_, token)) = fence {
            inv.arg(token);
        }
        inv
    }

    /// What the put script's reply means.
    pub(crate) fn put_outcome(
        id: &str,
        expected: Option<u64>,
        reply: PutReply,
    ) -> Result<(), Error> {
        let (status, found) = reply;
        let found_generation = || -> Result<Option<u64>, Error> {
            if found.is_empty() {
                Ok(None)
            } else {
                found.parse().map(Some).map_err(|_| {
                    store_error(format!(
                        "the stored record of attachment {id} is malformed: its generation is not a number"
                    ))
                })
            }
        };
        match status {
            1 => Ok(()),
            0 => Err(Error::StoreConflict {
                expected,
                found: found_generation()?,
            }),
            2 => Err(store_error(format!(
                "this worker no longer holds the lock of attachment {id} (its lease expired); nothing was written"
            ))),
            other => Err(store_error(format!(
                "the put script returned an unknown status {other}"
            ))),
        }
    }

    fn check_fence(record: &SurfaceAttachment, guard: &LockGuard) -> Result<(), Error> {
        if guard.id() == record.id() {
            Ok(())
        } else {
            Err(store_error(format!(
                "the lock held is for attachment {}, not {}",
                guard.id(),
                record.id()
            )))
        }
    }

    /// Runs `f` on an idle blocking connection, or a new one. A connection
    /// that failed is dropped rather than reused.
    fn with_conn<T>(
        &self,
        op: &str,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, Error> {
        let pooled = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut conn = match pooled {
            Some(conn) => conn,
            None => self.connect_blocking()?,
        };
        let result = f(&mut conn).map_err(|e| redis_error(op, &e))?;
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.max_idle
        {
            idle.push(conn);
        }
        Ok(result)
    }

    fn connect_blocking(&self) -> Result<redis::Connection, Error> {
        let conn = self
            .client
            .get_connection_with_timeout(self.connect_timeout)
            .map_err(|e| redis_error("connect", &e))?;
        let timeout = Some(self.response_timeout.max(Duration::from_millis(1)));
        conn.set_read_timeout(timeout)
            .and_then(|()| conn.set_write_timeout(timeout))
            .map_err(|e| redis_error("connect", &e))?;
        Ok(conn)
    }

    pub(crate) fn get_blocking(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        if id.starts_with(RESERVED_ID_PREFIX) {
            return Ok(None);
        }
        let key = self.record_key(id);
        let fields = self.with_conn("HMGET", |c| {
            redis::cmd("HMGET").arg(&key).arg("g").arg("v").query(c)
        })?;
        self.decode(id, fields)
    }

    fn put_blocking(
        &self,
        record: &SurfaceAttachment,
        expected: Option<u64>,
        fence: Option<&LockGuard>,
    ) -> Result<(), Error> {
        if let Some(guard) = fence {
            Shared::check_fence(record, guard)?;
        }
        let (generation, envelope) = self.encode(record)?;
        let key = self.record_key(record.id());
        let lock_key = fence.map(|g| (self.lock_key(g.id()), g.token()));
        let inv = self.put_invocation(
            &key,
            expected,
            &generation,
            &envelope,
            lock_key.as_ref().map(|(k, t)| (k.as_str(), *t)),
        );
        let reply = self.with_conn("put script", |c| inv.invoke(c))?;
        Shared::put_outcome(record.id(), expected, reply)
    }

    /// One attempt to take the lock.
    fn acquire_blocking(&self, key: &str, token: &str, lease_ms: u64) -> Result<Attempted, Error> {
        let inv = self.acquire_invocation(key, token, lease_ms);
        let reply: i64 = self.with_conn("lock script", |c| inv.invoke(c))?;
        Ok(Attempted::from_reply(reply))
    }

    /// The compare-and-delete release.
    pub(crate) fn release_blocking(&self, key: &str, token: &str) -> Result<bool, Error> {
        let deleted: i64 = self.with_conn("release script", |c| {
            scripts::RELEASE.key(key).arg(token).invoke(c)
        })?;
        Ok(deleted == 1)
    }

    fn ping_blocking(&self) -> Result<(), Error> {
        let _: String = self.with_conn("PING", |c| redis::cmd("PING").query(c))?;
        Ok(())
    }
}

/// A fresh lock token: 16 random bytes, hex.
pub(crate) fn lock_token() -> Result<String, Error> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|_| store_error("the operating system's random generator failed"))?;
    Ok(human_plus_core::hex(&b))
}

pub(crate) fn lock_timeout(id: &str, wait: Duration) -> Error {
    store_error(format!(
        "the lock of attachment {id} was not free within {wait:?}"
    ))
}

/// The blocking Redis store: see the [module documentation](self) for the
/// data layout, the scripts, the locks and the encryption.
///
/// Cloning it shares its connections. Each call takes an idle connection
/// (or opens one, with [`RedisConfig::connect_timeout`]) and gives it back
/// afterwards, so any number of threads can share one store; up to
/// [`RedisConfig::max_idle_connections`] idle connections are kept.
///
/// ```no_run
/// use std::time::Duration;
/// use human_plus_core::*;
/// use human_plus_store::{AttachmentStore, Keyring, RedisAttachmentStore, RedisConfig};
///
/// let store = RedisAttachmentStore::open(RedisConfig::new("redis://127.0.0.1:6379/", Keyring::generate("k1")?))?;
/// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
/// let mut record = SurfaceAttachment::mint(OwnerKey::of("o")?, inv, Participant::new("a", "A", "#000"), &mut SeededEntropy::new(1));
/// store.put(&record, None)?;
/// let guard = store.lock(record.id(), Duration::from_secs(60), Duration::from_secs(5))?;
/// let loaded = store.get(record.id())?.expect("stored");
/// record.record_revision(SurfaceRevision::observed("r1", "sheet_read").unwrap());
/// store.put_holding(&guard, &record, Some(loaded.generation()))?;
/// assert_eq!(store.put(&record, Some(loaded.generation())).unwrap_err().code(), "store_conflict");
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone)]
pub struct RedisAttachmentStore {
    shared: Arc<Shared>,
}

impl fmt::Debug for RedisAttachmentStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisAttachmentStore")
            .field("prefix", &self.shared.prefix)
            .field("keyring", &self.shared.keyring)
            .finish_non_exhaustive()
    }
}

impl RedisAttachmentStore {
    /// Connects (one `PING`, so a wrong URL or an unreachable server fails
    /// here rather than at the first operation).
    ///
    /// # Errors
    /// [`Error::Store`] when the URL is not valid or Redis does not answer.
    pub fn open(config: RedisConfig) -> Result<Self, Error> {
        let shared = Arc::new(Shared::new(config)?);
        shared.ping_blocking()?;
        Ok(RedisAttachmentStore { shared })
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

    /// [`AttachmentStore::put`], refused also when `guard`'s lock is no
    /// longer held (its lease expired and the lock is free or another
    /// worker's): the compare-and-set script checks the lock's token in
    /// the same atomic step.
    ///
    /// # Errors
    /// [`Error::StoreConflict`] on a generation mismatch; [`Error::Store`]
    /// when the lock is no longer held, `guard` is for another attachment,
    /// or Redis fails.
    pub fn put_holding(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<(), Error> {
        self.shared.put_blocking(record, expected, Some(guard))
    }
}

impl AttachmentStore for RedisAttachmentStore {
    fn get(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        self.shared.get_blocking(id)
    }

    fn put(&self, record: &SurfaceAttachment, expected: Option<u64>) -> Result<(), Error> {
        self.shared.put_blocking(record, expected, None)
    }

    fn lock(&self, id: &str, lease: Duration, wait: Duration) -> Result<LockGuard, Error> {
        let key = self.shared.lock_key(id);
        let token = lock_token()?;
        let lease_ms = millis(lease);
        let deadline = Instant::now() + wait;
        let mut backoff = self.shared.backoff(&token);
        loop {
            let attempted = self.shared.acquire_blocking(&key, &token, lease_ms)?;
            if attempted == Attempted::Taken {
                let shared = Arc::clone(&self.shared);
                let release_token = token.clone();
                return Ok(LockGuard::new(id, token, move || {
                    // A failed release leaves the lock to its lease.
                    let _ = shared.release_blocking(&key, &release_token);
                }));
            }
            let now = Instant::now();
            if now >= deadline {
                if attempted == Attempted::NextInLine {
                    // Give up the place in line at once.
                    let _ = self
                        .shared
                        .release_blocking(&Shared::next_key(&key), &token);
                }
                return Err(lock_timeout(id, wait));
            }
            let sleep = backoff.next(attempted == Attempted::NextInLine);
            std::thread::sleep(sleep.min(deadline - now));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn backoff_is_random_within_its_bounds() {
        let (min, max) = (Duration::from_millis(1), Duration::from_millis(8));
        let mut b = Backoff::new(min, max, "t");
        let waiting: Vec<_> = (0..64).map(|_| b.next(false)).collect();
        assert!(waiting.iter().all(|s| *s >= min && *s <= max));
        assert!(
            waiting.iter().any(|s| *s > min * 4),
            "spread over the range"
        );
        assert!(
            (0..64)
                .map(|_| b.next(true))
                .all(|s| s >= min && s <= min * 2)
        );
    }

    #[test]
    fn a_bad_url_is_refused_without_echoing_it() {
        let e = RedisAttachmentStore::open(RedisConfig::new(
            "nota://:hunter2@x",
            Keyring::generate("k").unwrap(),
        ))
        .unwrap_err();
        assert_eq!(e.code(), "store_failed");
        assert!(!e.to_string().contains("hunter2"));
    }

    #[test]
    fn reserved_ids_and_malformed_hashes() {
        let shared = Shared::new(RedisConfig::new(
            "redis://127.0.0.1:1/",
            Keyring::generate("k").unwrap(),
        ))
        .unwrap();
        assert!(shared.get_blocking("lock:x").unwrap().is_none());
        assert!(shared.decode("a", (None, None)).unwrap().is_none());
        let e = shared.decode("a", (Some("1".into()), None)).unwrap_err();
        assert!(e.to_string().contains("malformed"));
        let e = shared
            .decode("a", (Some("x".into()), Some(vec![1])))
            .unwrap_err();
        assert!(e.to_string().contains("not a number"));
        assert!(matches!(
            Shared::put_outcome("a", Some(1), (0, "2".into())),
            Err(Error::StoreConflict {
                expected: Some(1),
                found: Some(2)
            })
        ));
        assert!(matches!(
            Shared::put_outcome("a", None, (0, "0".into())),
            Err(Error::StoreConflict {
                expected: None,
                found: Some(0)
            })
        ));
        assert!(
            Shared::put_outcome("a", Some(1), (2, "1".into()))
                .unwrap_err()
                .to_string()
                .contains("no longer holds the lock")
        );
    }
}
