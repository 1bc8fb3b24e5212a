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
//! | `human-plus:<id>` | string | `<generation>:<trail>:<sealed envelope>`: the record's generation in decimal; the ids of its last writes (up to 64, newest first, comma-separated, 12 hex digits each); the envelope's bytes; with a `PX` TTL |
//! | `human-plus:lock:<id>` | string | the holder's token (`<random>.<lease ms>`, followed by `~<lease ms>` once a renewal gave it another lease, and by `\|` once a waiter is next in line), with a `PX` lease; or `>` and the token of the waiter it was given back to, for as long as a place in line is kept |
//! | `human-plus:lock:<id>#next` | string | the token of the worker next in line for the lock, kept 50 ms + 5 x the longest sleep between attempts unless renewed |
//! | `human-plus:lock:<id>#refused` | string | the ids of the last writes (up to 16) `put_and_release` refused, kept twice [`RedisConfig::failover_wait`] (at least 10 s): a retry of a write whose answer was lost tells a refusal from a write applied under more writes than the trail keeps (see the scripts) |
//!
//! A cluster needs an attachment's record and lock in one hash slot (the
//! scripts touch both), so it uses [`KeyLayout::HashTagged`]: the id is
//! wrapped in a hash tag, `human-plus:{<id>}`, `human-plus:lock:{<id>}`,
//! `human-plus:lock:{<id>}#next` and `human-plus:lock:{<id>}#refused`. Every key of one attachment hashes on
//! `<id>` alone; different attachments spread over the slots. A single
//! server can use the tagged layout too (to move to a cluster later without
//! renaming); a cluster refuses the plain one, and the tagged layout
//! refuses a prefix holding `{` or `}` (it would move the tag).
//!
//! The generation sits beside the ciphertext so the compare-and-set script
//! can read it without the key. Every write re-sets the record's TTL
//! (sliding, 24 h by default: [`DEFAULT_TTL`]); reads do not extend it.
//! The record is one string so that one `SET … PX … GET` writes it, sets
//! its TTL and reads what it replaces (the fence) together, and one `GET`
//! reads it. Earlier builds stored it as a hash (`g` and `v` fields): such
//! a record is still read (one `HMGET` more) and is written over as a
//! string by its next write, so an upgrade needs no migration. This needs
//! Redis 6.2 or later (`SET … PX … GET`).
//! An attachment id starting with `lock:` is refused by `put` (in the
//! plain layout its record key would be another attachment's lock key).
//!
//! **Moving records between layouts** (a single server to a cluster): the
//! envelope is bound to the prefix and id, not to the key's shape (see
//! [Encryption at rest](#encryption-at-rest)), so a record moved from
//! `human-plus:<id>` to `human-plus:{<id>}` intact
//! (`DUMP` + `RESTORE` with its `PTTL`, or `MIGRATE`, or `RENAME` on one
//! server) opens unchanged. Locks are not moved: stop the workers, copy
//! the records, start them on the cluster. A record not moved is simply
//! not found (the attachment must be attached again), never misread.
//!
//! ## Scripts and locks
//!
//! * `put` is one Lua script (EVALSHA, loaded on demand): it writes the
//!   record and re-sets the TTL only if the generation it replaces equals
//!   the expected one (or, for an insert, the key does not exist). The
//!   script writes and reads what it replaced in one `SET … GET`, and on a
//!   mismatch puts that back before anyone can see it (atomic, as a script
//!   is). A mismatch is [`Error::StoreConflict`] with the generation found;
//!   the record is left as it was (its TTL re-set). Each write has an id
//!   of its own, chosen once and kept across its retries, and the record
//!   keeps the ids of its last 64 writes: a write sent again after its
//!   answer was lost (a failover, a timeout) finds its id there and answers
//!   "written" instead of a conflict, even when other workers wrote on top
//!   of it meanwhile, so a retried write is applied once and reported once.
//!   Past 64 writes on top (a failover: the retry waits while the others
//!   write at once), `put_and_release` tells its own applied write from a
//!   refusal by the refusals noted under `#refused` and by its lock no
//!   longer being its own, while its lease cannot have run out.
//! * `lock` is `SET human-plus:lock:<id> <token> NX PX <lease>` in a Lua
//!   script, behind a one-place waiting line; `lock_and_get` (what a
//!   manager calls) reads the record's `g` and `v` in the same script once
//!   the lock is taken, and `put_and_release` writes the record as `put`
//!   does and gives the lock back in one script: a warm call is two round
//!   trips, a read five commands counting the scripts' own (`EVALSHA`,
//!   `SET`, `GET`; `EVALSHA`, `GETDEL`), a write six (the second
//!   script's `SET … PX … GET` added: the record, its TTL and its fence in
//!   one command; a refused write puts back what it found). An attempt that finds the
//!   lock held learns the holder's lease left (`PTTL`). Waiting is cheap:
//!   a release made by any store of this process wakes that lock's
//!   waiters in this process at once (workers of one process hand a lock
//!   over without polling); otherwise a waiter sleeps between attempts,
//!   the sleeps growing from `min` to `max` ([`RedisConfig::lock_retry`],
//!   1 ms to 100 ms by default), never past the moment the holder's lease
//!   runs out (when a holder that died frees it). When the wait runs out
//!   the answer is [`Error::Busy`], a retry
//!   possible once the holder's lease has run out. The first waiter to
//!   find the lock held takes the place `#next` and keeps it by retrying;
//!   while that place is someone else's, an attempt does not even try the
//!   `SET`. So a holder that releases and locks again at once (a worker
//!   on a loop) cannot starve the workers already waiting: the lock goes
//!   to the one next in line. Among the other waiters the order is
//!   random, not first-come first-served. A place left by a waiter that
//!   gave up or died lapses within 50 ms + 5 x the longest sleep. An
//!   attempt that finds the lock already holding its own token (a replay)
//!   has it. The waiter that takes the place also marks the lock's value
//!   (`<token>|`), so the holder's release, seeing the mark, hands the lock
//!   to it (`><waiter's token>`, kept as long as a place) instead of
//!   deleting it, and an attempt on a free lock is one `SET NX` with no
//!   look at the line; a lock freed by its lease running out (its holder
//!   died) goes to whichever attempt comes first.
//! * `renew` extends the lease only while the lock holds the guard's
//!   token, in one script: a holder whose lease ran out never extends its
//!   successor's. The lock's value then names the new lease
//!   (`<token>~<lease ms>`), so the lock says the lease its holder last
//!   asked for. The manager renews the locks of its running
//!   operations at a third of their lease, so a holder that dies frees its
//!   conversations within one lease; nothing else renews a lease.
//! * Release is a Lua compare-and-delete: the key is given back only while
//!   it still holds the releasing guard's token, so a holder whose lease
//!   ran out never frees its successor's lock. The usual case is one
//!   `GETDEL`; a value found to be another's is put back in the same
//!   atomic step with the whole lease it names (its holder's last), so a
//!   late release never shortens a successor's lease, and lengthens it by
//!   at most one lease. A worker that dies without
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
//!
//! [`StoreErrorKind::Unconfirmed`]: human_plus_core::StoreErrorKind::Unconfirmed
//! [`StoreErrorKind::Tls`]: human_plus_core::StoreErrorKind::Tls

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

#[cfg(any(feature = "redis-tokio", feature = "redis-smol"))]
mod aio;
mod config;
mod conn;
mod crypto;
mod errors;
mod keys;
mod pause;
mod release;
mod scripts;
mod shared;
mod wake;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use human_plus_core::{Error, SurfaceAttachment};

use event_listener::Listener;

use crate::{AttachmentStore, LockGuard};

#[cfg(any(feature = "redis-tokio", feature = "redis-smol"))]
pub use aio::AsyncRedisAttachmentStore;
pub use config::{
    DEFAULT_CLUSTER_FAILOVER_WAIT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FAILOVER_WAIT,
    DEFAULT_MAX_IDLE, DEFAULT_PREFIX, DEFAULT_REPLICA_ACK_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT,
    DEFAULT_TTL, RedisConfig,
};
pub use crypto::{ENVELOPE_VERSION, Keyring, MAX_KEY_ID_LEN};
pub use keys::KeyLayout;

use config::millis;
use release::Releases;
use shared::{Attempted, Shared, lock_token};

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
    ///
    /// [`StoreErrorKind::Config`]: human_plus_core::StoreErrorKind::Config
    /// [`StoreErrorKind::Tls`]: human_plus_core::StoreErrorKind::Tls
    /// [`StoreErrorKind::Connect`]: human_plus_core::StoreErrorKind::Connect
    /// [`StoreErrorKind::Timeout`]: human_plus_core::StoreErrorKind::Timeout
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
        self.lock_loading(id, lease, wait, false)
            .map(|(guard, _)| guard)
    }

    fn renew(&self, guard: &LockGuard, lease: Duration) -> Result<bool, Error> {
        let sent = Instant::now();
        let renewed = self.shared.renew_blocking(
            &self.shared.lock_key(guard.id()),
            guard.token(),
            millis(lease),
        )?;
        if renewed {
            guard.held_until_at_least(sent + lease);
        } else {
            guard.not_surely_held();
        }
        Ok(renewed)
    }

    fn release(&self, guard: &LockGuard) -> Result<(), Error> {
        // From here a write of this guard's cannot tell its own release
        // from this one (see the put-and-release script).
        guard.not_surely_held();
        self.shared
            .release_blocking(&self.shared.lock_key(guard.id()), guard.token())?;
        // Given back (or no longer this guard's): its drop does nothing.
        guard.disarm();
        Ok(())
    }

    /// One script takes the lock and reads the record (one round trip).
    fn lock_and_get(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<(LockGuard, Option<SurfaceAttachment>), Error> {
        let (guard, fields) = self.lock_loading(id, lease, wait, true)?;
        Ok((guard, self.shared.decode(id, fields)?))
    }

    /// One script writes the record and gives the lock back (one round
    /// trip).
    fn put_and_release(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<(), Error> {
        self.shared.put_release_blocking(guard, record, expected)
    }
}

impl RedisAttachmentStore {
    /// Takes the lock of `id` within `wait`; with `load`, the record's
    /// fields are read by the same script once it is taken.
    fn lock_loading(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
        load: bool,
    ) -> Result<(LockGuard, shared::Fields), Error> {
        let key = self.shared.lock_key(id);
        // A reserved id has no record (in the plain layout its record key
        // would be another attachment's lock).
        let record_key =
            (load && !id.starts_with(keys::RESERVED_ID_PREFIX)).then(|| self.shared.record_key(id));
        let lease_ms = millis(lease);
        let token = lock_token(lease_ms)?;
        let deadline = Instant::now() + wait;
        let mut backoff = self.shared.backoff(&token);
        let freed = wake::event(&key);
        let mut in_line = false;
        loop {
            // Listening before the attempt: a release in this process
            // between the attempt and the sleep still wakes it.
            let listener = freed.listen();
            let sent = Instant::now();
            let (attempt, fields) = self.shared.acquire_blocking(
                &key,
                record_key.as_deref(),
                &token,
                lease_ms,
                in_line,
            )?;
            in_line |= attempt.attempted == Attempted::NextInLine;
            if attempt.attempted == Attempted::Taken {
                let shared = Arc::clone(&self.shared);
                let releases = Arc::clone(&self.releases);
                let release_token = token.clone();
                let guard = LockGuard::new(id, token, move || {
                    // A release that fails is retried in the background
                    // (and, failing that, left to the lease).
                    if shared.release_blocking(&key, &release_token).is_err() {
                        releases.push_retry(key, release_token, shared.failover_wait);
                        release::ensure_worker(&releases, &shared);
                    }
                });
                guard.note(&fields.2);
                guard.held_until_at_least(sent + lease);
                return Ok((guard, fields));
            }
            let Some(sleep) = attempt.next_wait(&mut backoff, Instant::now(), Some(deadline))
            else {
                if attempt.attempted == Attempted::NextInLine {
                    // Give up the place in line at once.
                    let _ = self
                        .shared
                        .release_blocking(&Shared::next_key(&key), &token);
                }
                return Err(crate::busy(attempt.holder, lease));
            };
            // Woken at once by a release in this process.
            let _ = listener.wait_timeout(sleep);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::errors::classify;
    use super::pause::{Backoff, FailoverPause};
    use super::*;
    use human_plus_core::StoreErrorKind;

    #[test]
    fn lock_sleeps_grow_within_their_bounds_and_the_holders_lease() {
        let (min, max) = (Duration::from_millis(1), Duration::from_millis(80));
        let mut b = Backoff::new(min, max, "t");
        let waiting: Vec<_> = (0..64).map(|_| b.next(true, None)).collect();
        assert!(
            waiting.iter().all(|s| *s >= min && *s <= max),
            "{waiting:?}"
        );
        assert!(waiting[0] <= min * 2, "the first sleep is short");
        assert!(
            waiting[32..].iter().all(|s| *s >= max / 2),
            "grown to the cap: {waiting:?}"
        );
        assert!(
            waiting[32..].iter().any(|s| *s < max * 9 / 10),
            "random under the cap"
        );
        // Never past the moment the holder's lease runs out.
        assert_eq!(b.next(true, Some(Duration::ZERO)), Duration::from_millis(1));
        assert!(b.next(true, Some(Duration::from_millis(5))) <= Duration::from_millis(6));
        // The other waiters sleep up to four times longer.
        let mut other = Backoff::new(min, max, "o");
        let others: Vec<_> = (0..64).map(|_| other.next(false, None)).collect();
        assert!(others.iter().all(|s| *s <= max * 4), "{others:?}");
        assert!(others[32..].iter().all(|s| *s >= max * 2), "{others:?}");
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
            assert_eq!(slot(&r), slot(&Shared::refused_key(&l)), "{id}");
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
        assert!(
            shared
                .decode("a", (None, None, String::new()))
                .unwrap()
                .is_none()
        );
        let e = shared
            .decode("a", (Some("1".into()), None, String::new()))
            .unwrap_err();
        assert!(e.to_string().contains("malformed"));
        let e = shared
            .decode("a", (Some("x".into()), Some(vec![1]), String::new()))
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
