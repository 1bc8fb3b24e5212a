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
//!   `ConnectionManager` (a multiplexed connection that reconnects) or, for
//!   a cluster, redis-rs's async cluster connection: feature `redis-tokio`
//!   and/or `redis-smol` (async-io, so smol and async-std). (The redis-rs
//!   crate's async layer still depends on the `tokio` crate for its
//!   internal channels under `redis-smol`; no tokio runtime is started.)
//!
//! Both speak to one server ([`RedisConfig::new`]) or to a Redis Cluster
//! ([`RedisConfig::cluster`]), over plain TCP (`redis://`) or TLS
//! (`rediss://`, see [TLS](#tls)).
//!
//! ## Data layout
//!
//! With the default prefix `human-plus:` ([`DEFAULT_PREFIX`]) and the
//! single-server default layout, [`KeyLayout::Plain`]:
//!
//! | key | type | content |
//! |---|---|---|
//! | `human-plus:<id>` | hash | `g`: the record's generation (decimal); `v`: the sealed envelope |
//! | `human-plus:lock:<id>` | string | the holder's random token, with a `PX` lease |
//! | `human-plus:lock:<id>#next` | string | the token of the worker next in line for the lock, kept 50 ms + 5 x the longest retry sleep unless renewed |
//!
//! A cluster needs an attachment's record and lock in one hash slot (the
//! scripts touch both), so it uses [`KeyLayout::HashTagged`]: the id is
//! wrapped in a hash tag, `human-plus:{<id>}`, `human-plus:lock:{<id>}` and
//! `human-plus:lock:{<id>}#next`. Every key of one attachment hashes on
//! `<id>` alone; different attachments spread over the slots. A single
//! server can use the tagged layout too (to move to a cluster later without
//! renaming); a cluster refuses the plain one, and the tagged layout
//! refuses a prefix holding `{` or `}` (it would move the tag).
//!
//! The generation sits beside the ciphertext so the compare-and-set script
//! can read it without the key. Every write re-sets the record's TTL
//! (sliding, 24 h by default: [`DEFAULT_TTL`]); reads do not extend it.
//! An attachment id starting with `lock:` is refused by `put` (in the
//! plain layout its record key would be another attachment's lock key).
//!
//! **Moving records between layouts** (a single server to a cluster): the
//! envelope is bound to the prefix and id, not to the key's shape (see
//! [Encryption at rest](#encryption-at-rest)), so a record moved from
//! `human-plus:<id>` to `human-plus:{<id>}` with its two fields intact
//! (`DUMP` + `RESTORE` with its `PTTL`, or `MIGRATE`, or `RENAME` on one
//! server) opens unchanged. Locks are not moved: stop the workers, copy
//! the records, start them on the cluster. A record not moved is simply
//! not found (the attachment must be attached again), never misread.
//!
//! ## Scripts and locks
//!
//! * `put` is one Lua script (EVALSHA, loaded on demand): it reads `g`,
//!   and only if it equals the expected generation (or, for an insert, the
//!   key does not exist) writes `g` and `v` together and re-sets the TTL.
//!   A mismatch is [`Error::StoreConflict`] with the generation found;
//!   nothing is written. A replay of a write already applied (the same new
//!   generation and the same envelope, whose nonce is random: an answer
//!   lost and the command sent again) answers "written" instead of a
//!   conflict, so a retried write is applied once and reported once.
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
//!   sleep. An attempt that finds the lock already holding its own token
//!   (a replay) has it.
//! * Release is a Lua compare-and-delete: the key is deleted only while it
//!   still holds the releasing guard's token, so a holder whose lease ran
//!   out never frees its successor's lock. A worker that dies without
//!   releasing holds the lock only until its lease ends; a release that
//!   fails (the server is failing over) is retried in the background
//!   until it succeeds or [`RedisConfig::failover_wait`] has passed.
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
//! ## Failover
//!
//! Redis replicates asynchronously: a primary can acknowledge a write and
//! die before its replica has it, and the promoted replica would then
//! serve the generation before it, so the next writer's compare-and-set
//! would succeed on a generation already used. The store closes that gap
//! with `WAIT` ([`RedisConfig::replica_acks`]; on by default for a
//! cluster): a lock taken and a record written count only once as many
//! replicas as asked (at most as many as are connected, so a shard that
//! has just lost its replica keeps serving) have them. A lock that cannot
//! be confirmed is given back and refused; a write that cannot be
//! confirmed is reported as [`StoreErrorKind::Unconfirmed`] (it is on the
//! primary and may or may not survive a failover; the generation fences
//! whatever comes next).
//!
//! An operation that meets a server that does not answer, a connection
//! reset, or a cluster in the middle of a failover (`CLUSTERDOWN`,
//! `TRYAGAIN`, `MASTERDOWN`, `READONLY`, `LOADING`, `MOVED`/`ASK` beyond
//! what redis-rs follows itself) is retried, on a fresh connection (for a
//! cluster, with the slot map read again, so a promoted replica is found),
//! with growing sleeps, for up to [`RedisConfig::failover_wait`] (10 s for
//! one server and 30 s for a cluster by default). Because every script is safe to replay, an operation in
//! flight when its primary stops either succeeds once, after the
//! promotion, or fails with a typed error once the wait is spent: never
//! twice, never silently lost.
//!
//! ## TLS
//!
//! `rediss://` URLs connect over rustls with the `ring` provider (the one
//! the runtimes use; it is installed as the process's default provider
//! unless the application installed one first, since redis-rs builds its
//! TLS configuration from the process default). The server's certificate
//! is checked against the bundled web PKI roots, or only against the CAs
//! given with [`RedisConfig::tls_ca_pem`]; [`RedisConfig::tls_client_cert_pem`]
//! adds a client certificate for servers that ask for one. There is no
//! way to turn the checks off: a `rediss://` URL with redis-rs's
//! `#insecure` fragment is refused, TLS settings given for a `redis://`
//! URL are refused (never a silent plain connection), and every
//! certificate failure is [`StoreErrorKind::Tls`].
//!
//! ## Encryption at rest
//!
//! The record is serialised whole (its relay token included) and sealed
//! with XChaCha20-Poly1305 under the [`Keyring`]'s current key. The
//! envelope is `version (1) | key id length (1) | key id | nonce (24) |
//! ciphertext + tag (16)`; the associated data binds the record's name
//! (prefix + id, whatever the layout), the attachment id, the key id and
//! the generation stored in `g`. Nonces come from the operating system (or
//! an injected source, [`RedisConfig::nonce_source`]). A record that cannot
//! be opened (a key id the keyring does not hold, a wrong key, altered
//! bytes, a truncated envelope, a generation that does not match) is an
//! [`Error::Store`] naming the attachment and the reason, never a silent
//! miss, and never showing the plaintext. A Redis user can still replay an
//! older, intact `(g, v)` pair of the same attachment: authenticity is per
//! record, not a defence against rollback by someone who can write to
//! Redis. Keys rotate with [`Keyring::rotate`]: see the [`Keyring`].
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
//! dropped. The blocking flavour releases synchronously on drop (and hands
//! a release that failed to the same kind of thread).
//!
//! ```no_run
//! use std::time::Duration;
//! use human_plus_store::{AttachmentStore, Keyring, RedisAttachmentStore, RedisConfig};
//!
//! let keyring = Keyring::new("2026-11", Keyring::key_from_hex(&std::env::var("HUMAN_PLUS_KEY")?)?)?;
//! let store = RedisAttachmentStore::open(
//!     RedisConfig::new("rediss://:secret@redis.internal:6380/", keyring)
//!         .tls_ca_pem(std::fs::read("/etc/human-plus/redis-ca.pem")?)
//!         .ttl(Duration::from_secs(3600)),
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
mod conn;
mod crypto;
mod release;
mod scripts;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use human_plus_core::{
    Entropy, Error, SeededEntropy, StoreError, StoreErrorKind, SurfaceAttachment,
};
use zeroize::Zeroizing;

use crate::{AttachmentStore, LockGuard};

#[cfg(any(feature = "redis-tokio", feature = "redis-smol"))]
pub use aio::AsyncRedisAttachmentStore;
pub use crypto::{ENVELOPE_VERSION, Keyring, MAX_KEY_ID_LEN};

use conn::{Backend, Conn};
use crypto::Nonces;
use release::Releases;

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

/// How long an operation keeps retrying a server that does not answer, by
/// default: 10 s.
pub const DEFAULT_FAILOVER_WAIT: Duration = Duration::from_secs(10);

/// How long an operation keeps retrying a cluster that is failing over, by
/// default: 30 s (Redis's default `cluster-node-timeout` is 15 s, and the
/// election follows it).
pub const DEFAULT_CLUSTER_FAILOVER_WAIT: Duration = Duration::from_secs(30);

/// How long a `WAIT` for replicas waits by default: 1 s.
pub const DEFAULT_REPLICA_ACK_TIMEOUT: Duration = Duration::from_secs(1);

const RESERVED_ID_PREFIX: &str = "lock:";

fn store_error(message: impl AsRef<str>) -> Error {
    Error::Store(StoreError::new(message))
}

fn store_error_of(kind: StoreErrorKind, message: impl AsRef<str>) -> Error {
    Error::Store(StoreError::with_kind(kind, message))
}

fn config_error(message: impl AsRef<str>) -> Error {
    store_error_of(StoreErrorKind::Config, message)
}

/// What a redis-rs error is, for the caller and for the retry loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Classified {
    pub(crate) kind: StoreErrorKind,
    /// Worth another attempt on a fresh connection: the server did not
    /// answer, the connection broke, or the cluster is failing over.
    pub(crate) retryable: bool,
}

/// Whether a rustls error sits anywhere in `e`'s chain of sources (redis-rs
/// keeps its cause behind an `Arc`, and an `io::Error` carries a rustls
/// error as its inner error).
fn is_tls_failure(e: &redis::RedisError) -> bool {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    fn is_rustls(err: &(dyn std::error::Error + 'static)) -> bool {
        if err.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(arc) = err.downcast_ref::<Shared>() {
            return is_rustls(&**arc);
        }
        err.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .is_some_and(|inner| is_rustls(inner))
    }
    let mut current: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = current {
        if is_rustls(err) {
            return true;
        }
        current = err.source();
    }
    false
}

pub(crate) fn classify(e: &redis::RedisError) -> Classified {
    use redis::{ErrorKind as K, ServerErrorKind as S};
    let of = |kind, retryable| Classified { kind, retryable };
    if is_tls_failure(e) {
        return of(StoreErrorKind::Tls, false);
    }
    match e.kind() {
        K::InvalidClientConfig => of(StoreErrorKind::Config, false),
        K::Server(
            S::ClusterDown
            | S::TryAgain
            | S::MasterDown
            | S::ReadOnly
            | S::BusyLoading
            | S::Moved
            | S::Ask,
        )
        | K::ClusterConnectionNotFound => of(StoreErrorKind::Other, true),
        _ if e.is_timeout() => of(StoreErrorKind::Timeout, true),
        _ if e.is_connection_refusal() || e.is_connection_dropped() || e.is_io_error() => {
            of(StoreErrorKind::Connect, true)
        }
        _ => of(StoreErrorKind::Other, false),
    }
}

pub(crate) fn redis_error(op: &str, e: &redis::RedisError) -> Error {
    store_error_of(classify(e).kind, format!("redis {op} failed: {e}"))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// How an attachment's keys are named: see the [module documentation](self#data-layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyLayout {
    /// `<prefix><id>`, `<prefix>lock:<id>`: the single-server default
    /// (and the layout of every store before cluster support).
    Plain,
    /// `<prefix>{<id>}`, `<prefix>lock:{<id>}`: one attachment's keys in
    /// one cluster hash slot. Required for a cluster.
    HashTagged,
}

/// Where the store connects.
enum Target {
    Single(Zeroizing<String>),
    Cluster(Vec<Zeroizing<String>>),
}

/// TLS material: the CAs to trust instead of the web PKI roots, and a
/// client certificate chain with its key.
#[derive(Default)]
struct TlsMaterial {
    ca_pem: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Zeroizing<Vec<u8>>)>,
}

impl TlsMaterial {
    fn is_set(&self) -> bool {
        self.ca_pem.is_some() || self.client.is_some()
    }
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
///
/// // A cluster, over TLS with a private CA and a client certificate.
/// # let (ca, cert, key) = (Vec::new(), Vec::new(), Vec::new());
/// let cluster = RedisConfig::cluster(
///     ["rediss://:secret@redis-0.internal:6380", "rediss://:secret@redis-1.internal:6380"],
///     Keyring::generate("k1")?,
/// )
/// .tls_ca_pem(ca)
/// .tls_client_cert_pem(cert, key);
/// assert_eq!(cluster.record_key("surface_1"), "human-plus:{surface_1}");
/// assert_eq!(cluster.lock_key("surface_1"), "human-plus:lock:{surface_1}");
/// # Ok::<(), human_plus_core::Error>(())
/// ```
pub struct RedisConfig {
    target: Target,
    tls: TlsMaterial,
    layout: Option<KeyLayout>,
    replica_acks: Option<(u32, Duration)>,
    failover_wait: Option<Duration>,
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
    fn with_target(target: Target, keyring: Keyring) -> Self {
        RedisConfig {
            target,
            tls: TlsMaterial::default(),
            layout: None,
            replica_acks: None,
            failover_wait: None,
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

    /// A configuration for the single Redis at `url`
    /// (`redis://[[user]:password@]host:port/db`, or `rediss://` for TLS)
    /// sealing records with `keyring`, and the defaults for the rest: the
    /// [`KeyLayout::Plain`] layout, no `WAIT` for replicas.
    #[must_use]
    pub fn new(url: impl Into<String>, keyring: Keyring) -> Self {
        RedisConfig::with_target(Target::Single(Zeroizing::new(url.into())), keyring)
    }

    /// A configuration for a Redis Cluster reached through these seed
    /// nodes (`redis://` or `rediss://` URLs, all of one scheme and one
    /// password; the rest of the cluster is discovered from them), with
    /// the [`KeyLayout::HashTagged`] layout and `WAIT` for one replica
    /// (see [`RedisConfig::replica_acks`]).
    #[must_use]
    pub fn cluster<I, S>(seeds: I, keyring: Keyring) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let seeds = seeds
            .into_iter()
            .map(|s| Zeroizing::new(s.into()))
            .collect();
        RedisConfig::with_target(Target::Cluster(seeds), keyring)
    }

    /// Trusts exactly the CA certificates in `pem` (one or more PEM
    /// `CERTIFICATE` blocks) for the server's certificate, instead of the
    /// bundled web PKI roots. Needs `rediss://`.
    #[must_use]
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.ca_pem = Some(pem.into());
        self
    }

    /// Presents this client certificate (a PEM chain, leaf first) with its
    /// private key (PEM: PKCS#8, PKCS#1 or SEC1) to a server that asks for
    /// one (`tls-auth-clients`). Needs `rediss://`. The key is wiped from
    /// memory when the configuration is dropped.
    #[must_use]
    pub fn tls_client_cert_pem(
        mut self,
        cert_chain_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((cert_chain_pem.into(), Zeroizing::new(key_pem.into())));
        self
    }

    /// The key layout (default: [`KeyLayout::Plain`] for one server,
    /// [`KeyLayout::HashTagged`] for a cluster, which refuses the plain
    /// layout).
    #[must_use]
    pub fn key_layout(mut self, layout: KeyLayout) -> Self {
        self.layout = Some(layout);
        self
    }

    /// After taking a lock and after writing a record, `WAIT` until
    /// `replicas` replicas have it (at most as many as the primary has
    /// connected), for up to `timeout`; `0` turns it off. Default: 1
    /// replica and [`DEFAULT_REPLICA_ACK_TIMEOUT`] for a cluster, off for
    /// one server (turn it on for a server with replicas that can be
    /// promoted). See the [module documentation](self#failover).
    #[must_use]
    pub fn replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_acks = Some((replicas, timeout));
        self
    }

    /// How long an operation keeps retrying a server that does not answer,
    /// a broken connection or a cluster that is failing over (default
    /// [`DEFAULT_FAILOVER_WAIT`] for one server,
    /// [`DEFAULT_CLUSTER_FAILOVER_WAIT`] for a cluster; `ZERO` tries once).
    /// Keep it above the time your deployment takes to fail over
    /// (`cluster-node-timeout` plus the election, or your provider's
    /// figure): an operation still failing when it runs out ends with a
    /// typed error.
    #[must_use]
    pub fn failover_wait(mut self, wait: Duration) -> Self {
        self.failover_wait = Some(wait);
        self
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

    /// The timeout of a connection attempt, the TLS handshake included
    /// (default [`DEFAULT_CONNECT_TIMEOUT`]; redis-rs's async default of
    /// 1 s is replaced).
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

    fn effective_layout(&self) -> KeyLayout {
        self.layout.unwrap_or(match self.target {
            Target::Single(_) => KeyLayout::Plain,
            Target::Cluster(_) => KeyLayout::HashTagged,
        })
    }

    fn effective_failover_wait(&self) -> Duration {
        self.failover_wait.unwrap_or(match self.target {
            Target::Single(_) => DEFAULT_FAILOVER_WAIT,
            Target::Cluster(_) => DEFAULT_CLUSTER_FAILOVER_WAIT,
        })
    }

    /// The key of attachment `id`'s record.
    #[must_use]
    pub fn record_key(&self, id: &str) -> String {
        keys::record(self.effective_layout(), &self.prefix, id)
    }

    /// The key of attachment `id`'s lock.
    #[must_use]
    pub fn lock_key(&self, id: &str) -> String {
        keys::lock(self.effective_layout(), &self.prefix, id)
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match &self.target {
            Target::Single(_) => "single server".to_owned(),
            Target::Cluster(seeds) => format!("cluster ({} seeds)", seeds.len()),
        };
        f.debug_struct("RedisConfig")
            .field("target", &target)
            .field("url", &"<redacted>")
            .field("tls_ca", &self.tls.ca_pem.is_some())
            .field("tls_client_cert", &self.tls.client.is_some())
            .field("layout", &self.effective_layout())
            .field("replica_acks", &self.replica_acks)
            .field("failover_wait", &self.effective_failover_wait())
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

/// Key names, per layout.
mod keys {
    use super::{KeyLayout, RESERVED_ID_PREFIX};

    pub(super) fn record(layout: KeyLayout, prefix: &str, id: &str) -> String {
        match layout {
            KeyLayout::Plain => format!("{prefix}{id}"),
            KeyLayout::HashTagged => format!("{prefix}{{{id}}}"),
        }
    }

    pub(super) fn lock(layout: KeyLayout, prefix: &str, id: &str) -> String {
        match layout {
            KeyLayout::Plain => format!("{prefix}{RESERVED_ID_PREFIX}{id}"),
            KeyLayout::HashTagged => format!("{prefix}{RESERVED_ID_PREFIX}{{{id}}}"),
        }
    }

    /// The record's name in the envelope's associated data: the same in
    /// both layouts, so a record moved between them still opens.
    pub(super) fn name(prefix: &str, id: &str) -> String {
        format!("{prefix}{id}")
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

    /// A number in [0, 1).
    fn fraction(&mut self) -> f64 {
        let mut b = [0u8; 4];
        self.jitter.fill_bytes(&mut b);
        f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0)
    }

    /// The next sleep: uniform in [min, 2 min] for the waiter next in
    /// line, in [min, max] for the others.
    pub(crate) fn next(&mut self, next_in_line: bool) -> Duration {
        let frac = self.fraction();
        if next_in_line {
            self.min + self.min.mul_f64(frac)
        } else {
            self.min + (self.max - self.min).mul_f64(frac)
        }
    }
}

/// Sleeps between attempts during a failover: 50 ms doubling to 1 s, with
/// jitter, so many workers do not hammer a recovering cluster in step.
pub(crate) struct FailoverPause {
    next: Duration,
    jitter: Backoff,
}

impl FailoverPause {
    pub(crate) fn new(seed: &str) -> Self {
        FailoverPause {
            next: Duration::from_millis(50),
            jitter: Backoff::new(Duration::ZERO, Duration::ZERO, seed),
        }
    }

    pub(crate) fn next(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(Duration::from_secs(1));
        base.mul_f64(0.5 + self.jitter.fraction() / 2.0)
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

/// The acquire script's reply: the status, and the primary's connected
/// replicas (`-1` when not asked).
pub(crate) type AcquireReply = (i64, i64);

/// The put script's reply: the status, the generation found (or written),
/// and the primary's connected replicas (`-1` when not asked).
pub(crate) type PutReply = (i64, String, i64);

/// What both flavours share: the client, the keyring, the key names, the
/// record codec, and the blocking connections.
pub(crate) struct Shared {
    backend: Backend,
    keyring: Keyring,
    nonces: Nonces,
    prefix: String,
    layout: KeyLayout,
    /// `WAIT` for this many replicas (at most those connected), this long.
    acks: Option<(u32, Duration)>,
    failover_wait: Duration,
    ttl_ms: u64,
    connect_timeout: Duration,
    response_timeout: Duration,
    retry_min: Duration,
    retry_max: Duration,
    line_ms: u64,
    max_idle: usize,
    idle: Mutex<Vec<Conn>>,
}

impl Shared {
    fn new(config: RedisConfig) -> Result<Self, Error> {
        let layout = config.effective_layout();
        let failover_wait = config.effective_failover_wait();
        let cluster = matches!(config.target, Target::Cluster(_));
        if cluster && layout == KeyLayout::Plain {
            return Err(config_error(
                "a Redis Cluster needs the hash-tagged key layout (an attachment's record and lock in one slot)",
            ));
        }
        if layout == KeyLayout::HashTagged && config.prefix.contains(['{', '}']) {
            return Err(config_error(
                "the key prefix must not contain '{' or '}' with the hash-tagged layout (it would move the hash tag)",
            ));
        }
        let acks = match config.replica_acks {
            Some((0, _)) => None,
            Some(acks) => Some(acks),
            None if cluster => Some((1, DEFAULT_REPLICA_ACK_TIMEOUT)),
            None => None,
        };
        let backend = Backend::new(
            &config.target,
            &config.tls,
            config.connect_timeout,
            config.response_timeout,
        )?;
        Ok(Shared {
            backend,
            keyring: config.keyring,
            nonces: config.nonces,
            prefix: config.prefix,
            layout,
            acks,
            failover_wait,
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
        keys::record(self.layout, &self.prefix, id)
    }

    pub(crate) fn lock_key(&self, id: &str) -> String {
        keys::lock(self.layout, &self.prefix, id)
    }

    /// The next-in-line key of a lock key (`#` is never in an attachment
    /// id, so it names no other lock or record; in the tagged layout it
    /// follows the tag, so it shares the lock's slot).
    pub(crate) fn next_key(lock_key: &str) -> String {
        format!("{lock_key}#next")
    }

    /// Whether scripts should report the connected replicas (so the
    /// caller knows how many to `WAIT` for).
    fn count_replicas(&self) -> &'static str {
        if self.acks.is_some() { "1" } else { "0" }
    }

    /// How many replicas to `WAIT` for after a script reported
    /// `connected` of them, and for how long: `None` when there is nothing
    /// to wait for.
    pub(crate) fn wait_for(&self, connected: i64) -> Option<(i64, u64)> {
        let (want, timeout) = self.acks?;
        let n = i64::from(want).min(connected);
        (n > 0).then(|| (n, millis(timeout)))
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
            .arg(self.line_ms)
            .arg(self.count_replicas());
        inv
    }

    /// The release script's invocation.
    pub(crate) fn release_invocation(key: &str, token: &str) -> redis::ScriptInvocation<'static> {
        let mut inv = scripts::RELEASE.prepare_invoke();
        inv.key(key).arg(token);
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
            &keys::name(&self.prefix, id),
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
            &keys::name(&self.prefix, id),
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
            .arg(self.ttl_ms)
            .arg(self.count_replicas());
        if let Some((_, token)) = fence {
            inv.arg(token);
        }
        inv
    }

    /// What the put script's reply (and the `WAIT` after it: `(asked,
    /// acknowledged)`) means.
    pub(crate) fn put_outcome(
        id: &str,
        expected: Option<u64>,
        reply: &PutReply,
        acked: Option<(i64, i64)>,
    ) -> Result<(), Error> {
        let (status, found, _) = reply;
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
            1 => match acked {
                Some((asked, got)) if got < asked => Err(store_error_of(
                    StoreErrorKind::Unconfirmed,
                    format!(
                        "the record of attachment {id} was written on the primary, but {got} of {asked} replicas acknowledged it in time: it may not survive a failover"
                    ),
                )),
                _ => Ok(()),
            },
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

    /// Runs `f` once on an idle blocking connection, or a new one. A
    /// connection that failed is dropped rather than reused.
    fn with_conn<T>(
        &self,
        f: &mut impl FnMut(&mut Conn) -> redis::RedisResult<T>,
    ) -> Result<T, redis::RedisError> {
        let pooled = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut conn = match pooled {
            Some(conn) => conn,
            None => self
                .backend
                .connect_blocking(self.connect_timeout, self.response_timeout)?,
        };
        let result = f(&mut conn)?;
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.max_idle
        {
            idle.push(conn);
        }
        Ok(result)
    }

    /// Runs `f` as [`Shared::with_conn`] does, again on a fresh connection
    /// after a retryable failure (see [`classify`]), until it succeeds,
    /// fails for good, or [`RedisConfig::failover_wait`] has passed since
    /// the first failure. Every `f` here is safe to replay.
    fn retrying<T>(
        &self,
        op: &str,
        mut f: impl FnMut(&mut Conn) -> redis::RedisResult<T>,
    ) -> Result<T, Error> {
        let mut first_failure: Option<Instant> = None;
        let mut pause = FailoverPause::new(op);
        loop {
            match self.with_conn(&mut f) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let failed_at = *first_failure.get_or_insert_with(Instant::now);
                    let left = self.failover_wait.saturating_sub(failed_at.elapsed());
                    if !classify(&e).retryable || left.is_zero() {
                        return Err(redis_error(op, &e));
                    }
                    // Every pooled connection may point at the node that
                    // failed: start again from the cluster's slot map.
                    if let Ok(mut idle) = self.idle.lock() {
                        idle.clear();
                    }
                    tracing::debug!(op, error = %e, "redis failed; retrying");
                    std::thread::sleep(pause.next().min(left));
                }
            }
        }
    }

    pub(crate) fn get_blocking(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        if id.starts_with(RESERVED_ID_PREFIX) {
            return Ok(None);
        }
        let key = self.record_key(id);
        let fields = self.retrying("HMGET", |c| {
            redis::cmd("HMGET")
                .arg(&key)
                .arg("g")
                .arg("v")
                .query(c.like())
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
        let (reply, acked) = self.retrying("put script", |c| {
            let reply: PutReply = inv.invoke(c.like())?;
            let acked = match self.wait_for(reply.2) {
                Some((n, ms)) if reply.0 == 1 => Some((n, c.wait_replicas(&key, n, ms)?)),
                _ => None,
            };
            Ok((reply, acked))
        })?;
        Shared::put_outcome(record.id(), expected, &reply, acked)
    }

    /// One attempt to take the lock. A lock taken but not confirmed on
    /// the replicas asked for is given back and refused.
    fn acquire_blocking(&self, key: &str, token: &str, lease_ms: u64) -> Result<Attempted, Error> {
        let inv = self.acquire_invocation(key, token, lease_ms);
        let (attempted, acked) = self.retrying("lock script", |c| {
            let (status, replicas): AcquireReply = inv.invoke(c.like())?;
            let attempted = Attempted::from_reply(status);
            let acked = match self.wait_for(replicas) {
                Some((n, ms)) if attempted == Attempted::Taken => {
                    Some((n, c.wait_replicas(key, n, ms)?))
                }
                _ => None,
            };
            Ok((attempted, acked))
        })?;
        match acked {
            Some((asked, got)) if got < asked => {
                let _ = self.release_blocking(key, token);
                Err(lock_unconfirmed(key, asked, got))
            }
            _ => Ok(attempted),
        }
    }

    /// The compare-and-delete release: one attempt.
    pub(crate) fn release_blocking(&self, key: &str, token: &str) -> Result<bool, Error> {
        let inv = Shared::release_invocation(key, token);
        let deleted: i64 = self
            .with_conn(&mut |c| inv.invoke(c.like()))
            .map_err(|e| redis_error("release script", &e))?;
        Ok(deleted == 1)
    }

    fn ping_blocking(&self) -> Result<(), Error> {
        let _: String = self
            .with_conn(&mut |c| redis::cmd("PING").query(c.like()))
            .map_err(|e| redis_error("PING", &e))?;
        Ok(())
    }
}

pub(crate) fn lock_unconfirmed(key: &str, asked: i64, got: i64) -> Error {
    store_error_of(
        StoreErrorKind::Unconfirmed,
        format!(
            "the lock {key} was taken on the primary, but {got} of {asked} replicas acknowledged it in time; it was given back"
        ),
    )
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
/// data layout, the scripts, the locks, failover, TLS and the encryption.
///
/// Cloning it shares its connections. Each call takes an idle connection
/// (or opens one, with [`RedisConfig::connect_timeout`]) and gives it back
/// afterwards, so any number of threads can share one store; up to
/// [`RedisConfig::max_idle_connections`] idle connections are kept (for a
/// cluster, each is a cluster connection with one socket per primary).
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
    releases: Arc<Releases>,
}

impl fmt::Debug for RedisAttachmentStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisAttachmentStore")
            .field("prefix", &self.shared.prefix)
            .field("layout", &self.shared.layout)
            .field("keyring", &self.shared.keyring)
            .finish_non_exhaustive()
    }
}

impl RedisAttachmentStore {
    /// Connects (one `PING`, so a wrong URL, an unreachable server or a
    /// certificate that is not trusted fails here rather than at the
    /// first operation; not retried).
    ///
    /// # Errors
    /// [`Error::Store`]: of kind [`StoreErrorKind::Config`] when the
    /// configuration cannot work (a bad URL, TLS settings for a
    /// `redis://` URL, `#insecure`, an unusable PEM, the plain layout for a
    /// cluster, a brace in a tagged prefix), [`StoreErrorKind::Tls`] when
    /// the server's certificate is not trusted (or it refused ours),
    /// [`StoreErrorKind::Connect`] or [`StoreErrorKind::Timeout`] when
    /// Redis does not answer.
    pub fn open(config: RedisConfig) -> Result<Self, Error> {
        let shared = Arc::new(Shared::new(config)?);
        shared.ping_blocking()?;
        Ok(RedisAttachmentStore {
            shared,
            releases: Arc::new(Releases::default()),
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
                let releases = Arc::clone(&self.releases);
                let release_token = token.clone();
                return Ok(LockGuard::new(id, token, move || {
                    // A release that fails is retried in the background
                    // (and, failing that, left to the lease).
                    if shared.release_blocking(&key, &release_token).is_err() {
                        releases.push_retry(key, release_token, shared.failover_wait);
                        release::ensure_worker(&releases, &shared);
                    }
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
        let mut pause = FailoverPause::new("x");
        let pauses: Vec<_> = (0..8).map(|_| pause.next()).collect();
        assert!(pauses[0] >= Duration::from_millis(25) && pauses[0] <= Duration::from_millis(50));
        assert!(pauses.iter().all(|p| *p <= Duration::from_secs(1)));
        assert!(pauses[7] >= Duration::from_millis(500));
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

    fn kind(e: &Error) -> StoreErrorKind {
        match e {
            Error::Store(s) => s.kind(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn configurations_that_cannot_work_are_refused_before_connecting() {
        let k = || Keyring::generate("k").unwrap();
        let pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec();
        for (case, config) in [
            (
                "TLS material for a plain URL",
                RedisConfig::new("redis://:hunter2@127.0.0.1:1/", k()).tls_ca_pem(pem.clone()),
            ),
            (
                "a client certificate for a plain URL",
                RedisConfig::new("redis://127.0.0.1:1/", k())
                    .tls_client_cert_pem(pem.clone(), pem.clone()),
            ),
            (
                "#insecure",
                RedisConfig::new("rediss://:hunter2@127.0.0.1:1/#insecure", k()),
            ),
            (
                "a CA file without a certificate",
                RedisConfig::new("rediss://127.0.0.1:1/", k()).tls_ca_pem(b"not a pem".to_vec()),
            ),
            (
                "a client key that is no key",
                RedisConfig::new("rediss://127.0.0.1:1/", k())
                    .tls_client_cert_pem(pem.clone(), b"x".to_vec()),
            ),
            (
                "the plain layout on a cluster",
                RedisConfig::cluster(["redis://127.0.0.1:1"], k()).key_layout(KeyLayout::Plain),
            ),
            (
                "a brace in a tagged prefix",
                RedisConfig::cluster(["redis://127.0.0.1:1"], k()).prefix("a{b}:"),
            ),
            (
                "mixed schemes",
                RedisConfig::cluster(["redis://127.0.0.1:1", "rediss://127.0.0.1:2"], k()),
            ),
            ("no seed", RedisConfig::cluster(Vec::<String>::new(), k())),
        ] {
            let e = RedisAttachmentStore::open(config).unwrap_err();
            assert_eq!(kind(&e), StoreErrorKind::Config, "{case}: {e}");
            assert!(!e.to_string().contains("hunter2"), "{case}");
        }
        // A brace in a plain-layout prefix is fine (nothing hashes on it).
        assert!(Shared::new(RedisConfig::new("redis://127.0.0.1:1/", k()).prefix("a{b}:")).is_ok());
    }

    #[test]
    fn layouts_name_keys_and_share_the_record_name() {
        let k = || Keyring::generate("k").unwrap();
        let plain = RedisConfig::new("redis://x/", k());
        assert_eq!(plain.record_key("s_1"), "human-plus:s_1");
        assert_eq!(plain.lock_key("s_1"), "human-plus:lock:s_1");
        let tagged = RedisConfig::new("redis://x/", k()).key_layout(KeyLayout::HashTagged);
        assert_eq!(tagged.record_key("s_1"), "human-plus:{s_1}");
        assert_eq!(tagged.lock_key("s_1"), "human-plus:lock:{s_1}");
        assert_eq!(
            Shared::next_key(&tagged.lock_key("s_1")),
            "human-plus:lock:{s_1}#next"
        );
        let slot = |k: &str| {
            redis::cluster_routing::Route::with_key(k, redis::cluster_routing::SlotAddr::Master)
        };
        // One attachment's keys in one slot, whatever the id holds.
        // (An attachment id is never empty and holds no brace.)
        for id in ["s_1", "lock:x", "a.b-c:D_9"] {
            let (r, l) = (tagged.record_key(id), tagged.lock_key(id));
            assert_eq!(slot(&r), slot(&l), "{id}");
            assert_eq!(slot(&r), slot(&Shared::next_key(&l)), "{id}");
        }
        assert_eq!(keys::name("p:", "s_1"), "p:s_1");
        assert!(format!("{tagged:?}").contains("HashTagged"));
        assert_eq!(
            RedisConfig::cluster(["redis://x"], k()).effective_layout(),
            KeyLayout::HashTagged
        );
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
            Shared::put_outcome("a", Some(1), &(0, "2".into(), -1), None),
            Err(Error::StoreConflict {
                expected: Some(1),
                found: Some(2)
            })
        ));
        assert!(matches!(
            Shared::put_outcome("a", None, &(0, "0".into(), -1), None),
            Err(Error::StoreConflict {
                expected: None,
                found: Some(0)
            })
        ));
        assert!(
            Shared::put_outcome("a", Some(1), &(2, "1".into(), -1), None)
                .unwrap_err()
                .to_string()
                .contains("no longer holds the lock")
        );
        assert!(Shared::put_outcome("a", Some(1), &(1, "2".into(), 1), Some((1, 1))).is_ok());
        let e = Shared::put_outcome("a", Some(1), &(1, "2".into(), 1), Some((1, 0))).unwrap_err();
        assert_eq!(kind(&e), StoreErrorKind::Unconfirmed, "{e}");
    }

    #[test]
    fn replica_acks_never_wait_for_more_than_are_connected() {
        let k = || Keyring::generate("k").unwrap();
        let cluster = Shared::new(RedisConfig::cluster(["redis://127.0.0.1:1"], k())).unwrap();
        assert_eq!(cluster.wait_for(1), Some((1, 1000)));
        assert_eq!(cluster.wait_for(3), Some((1, 1000)));
        assert_eq!(
            cluster.wait_for(0),
            None,
            "a shard without a replica keeps serving"
        );
        assert_eq!(cluster.wait_for(-1), None);
        let single = Shared::new(RedisConfig::new("redis://127.0.0.1:1/", k())).unwrap();
        assert_eq!(single.wait_for(2), None, "off by default on one server");
        let two = Shared::new(
            RedisConfig::new("redis://127.0.0.1:1/", k())
                .replica_acks(2, Duration::from_millis(50)),
        )
        .unwrap();
        assert_eq!(two.wait_for(1), Some((1, 50)));
        let off = Shared::new(
            RedisConfig::cluster(["redis://127.0.0.1:1"], k()).replica_acks(0, Duration::ZERO),
        )
        .unwrap();
        assert_eq!(off.wait_for(1), None);
    }

    #[test]
    fn errors_are_classified() {
        let io = |kind| redis::RedisError::from(std::io::Error::new(kind, "x"));
        let c = classify(&io(std::io::ErrorKind::ConnectionRefused));
        assert_eq!((c.kind, c.retryable), (StoreErrorKind::Connect, true));
        let c = classify(&io(std::io::ErrorKind::TimedOut));
        assert_eq!((c.kind, c.retryable), (StoreErrorKind::Timeout, true));
        let tls = redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        ));
        let c = classify(&tls);
        assert_eq!((c.kind, c.retryable), (StoreErrorKind::Tls, false));
        let down = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
            "down",
        ));
        assert!(classify(&down).retryable);
        let other = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "ERR",
        ));
        assert!(!classify(&other).retryable);
    }
}
