//! # Human+ attachment stores
//!
//! An attachment's record (its revision above all) must follow the
//! conversation from one worker to the next, or the second worker's write
//! goes out unpinned and a person's edit is lost. Every runtime's manager
//! therefore holds the store's per-attachment lock for the whole operation
//! and writes the record back with a compare-and-set on the generation it
//! loaded.
//!
//! The contract comes in two flavours with the same meaning:
//! [`AttachmentStore`] for blocking code and [`AsyncAttachmentStore`] for
//! async code. [`InMemoryAttachmentStore`] implements both, with a real
//! lock.
//!
//! A Redis store, for workers on more than one machine, is behind
//! features (its documentation is the `redis_store` module's, built with them):
//!
//! | feature | adds |
//! |---|---|
//! | `redis` | `RedisAttachmentStore` (blocking), `Keyring`, `RedisConfig`, `KeyLayout`: synchronous redis-rs, no async runtime; one server or a Redis Cluster, `redis://` or `rediss://` (TLS over rustls) |
//! | `redis-tokio` | `AsyncRedisAttachmentStore` on tokio |
//! | `redis-smol` | `AsyncRedisAttachmentStore` on async-io (smol, async-std) |
//!
//! ```
//! use std::time::Duration;
//! use human_plus_core::*;
//! use human_plus_store::{AttachmentStore, InMemoryAttachmentStore};
//!
//! let store = InMemoryAttachmentStore::new();
//! let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
//! let mut record = SurfaceAttachment::mint(OwnerKey::of("o")?, inv, Participant::new("a", "A", "#000"), &mut SeededEntropy::new(1));
//! store.put(&record, None)?;                       // insert: must not exist yet
//! let _guard = store.lock(record.id(), Duration::from_secs(60), Duration::from_secs(1))?;
//! let loaded = store.get(record.id())?.expect("stored");
//! record.record_revision(SurfaceRevision::observed("r1", "sheet_read").unwrap());
//! store.put(&record, Some(loaded.generation()))?; // compare-and-set
//! assert_eq!(store.put(&record, Some(loaded.generation())).unwrap_err().code(), "store_conflict");
//! # Ok::<(), Error>(())
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use event_listener::{Event, Listener};
use human_plus_core::{Busy, Error, StoreError, SurfaceAttachment};

#[cfg(feature = "redis")]
pub mod redis_store;
#[cfg(any(feature = "redis-tokio", feature = "redis-smol"))]
pub use redis_store::AsyncRedisAttachmentStore;
#[cfg(feature = "redis")]
pub use redis_store::{KeyLayout, Keyring, RedisAttachmentStore, RedisConfig};

/// How long a lock is held before another worker may take it over, if its
/// holder stops renewing it (a crash, a process stopped): 6 s. A manager
/// renews the lease of every lock its operations hold at a third of it
/// ([`AttachmentStore::renew`]), however long the operation runs, so a dead
/// holder's conversations free within one lease whatever the exchange
/// timeout.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(6);

/// How long a manager waits for a lock another worker holds before
/// answering [`Error::Busy`]: 10 s (never longer than the operation's own
/// timeout). A queue worker that would rather put a job back than hold a
/// thread sets it shorter (the builder's `lock_wait`).
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(10);

/// How often the holder of a lock leased for `lease` renews it while it
/// works: every third of it (at least every millisecond). This is the
/// lease contract of every store and manager of this project: a manager
/// renews the lock of each running operation at this interval, and a
/// waiter reads a lock whose holder has let an interval and a quarter pass
/// since it last renewed as held by a worker that died or stalled
/// ([`Holder::overdue`]): it waits out that lease instead of polling.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(human_plus_store::renew_interval(Duration::from_secs(6)), Duration::from_secs(2));
/// ```
#[must_use]
pub fn renew_interval(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(1))
}

/// What a lock attempt saw of the lock's holder: the time left on its
/// lease, and the lease it took (when the store knows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    /// The time left on the holder's lease.
    pub left: Duration,
    /// The whole lease the holder took (and renews to), if known.
    pub lease: Option<Duration>,
}

impl Holder {
    /// Whether the holder has let more than an interval and a quarter pass
    /// since it last set its lease (a renewal takes one round trip, so a
    /// holder at work is never that late unless its process stalls): it
    /// died or stalled, and
    /// the lock frees when `left` runs out (unless it wakes and renews).
    /// Never, when its lease is unknown.
    ///
    /// ```
    /// use std::time::Duration;
    /// use human_plus_store::Holder;
    ///
    /// let s = Duration::from_secs;
    /// assert!(!Holder { left: s(5), lease: Some(s(6)) }.overdue(), "renewed a second ago");
    /// assert!(Holder { left: s(3), lease: Some(s(6)) }.overdue(), "three seconds without renewing");
    /// assert!(!Holder { left: s(2), lease: None }.overdue());
    /// ```
    #[must_use]
    pub fn overdue(&self) -> bool {
        self.lease.is_some_and(|lease| {
            let every = renew_interval(lease);
            lease.saturating_sub(self.left) > every + every / 4
        })
    }

    /// When a retry may succeed: once the lease runs out, for a holder
    /// that is overdue (or whose lease is unknown); otherwise within one
    /// renewal interval of its lease, by when a holder still at work has
    /// either finished or renewed again, and one that died shows it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use human_plus_store::Holder;
    ///
    /// let s = Duration::from_secs;
    /// assert_eq!(Holder { left: s(2), lease: Some(s(6)) }.retry_after(), s(2));
    /// assert_eq!(Holder { left: s(6), lease: Some(s(6)) }.retry_after(), s(2));
    /// assert_eq!(Holder { left: s(6), lease: None }.retry_after(), s(6));
    /// ```
    #[must_use]
    pub fn retry_after(&self) -> Duration {
        match self.lease {
            Some(lease) if !self.overdue() => self.left.min(renew_interval(lease)),
            _ => self.left,
        }
    }
}

/// The answer when a lock's wait ran out (or cannot end in time):
/// [`Error::Busy`], a retry possible after [`Holder::retry_after`] (after
/// `lease`, the waiter's own, when nothing was seen of the holder).
#[must_use]
pub fn busy(holder: Option<Holder>, lease: Duration) -> Error {
    Error::Busy(Busy::new(holder.map_or(lease, |h| h.retry_after())))
}

/// A held per-attachment lock. Dropping it releases the lock.
///
/// The lock is mutual exclusion with a lease, not a correctness fence by
/// itself: a holder whose lease expired may still be running. The fence is
/// the generation: every write is a compare-and-set on the generation the
/// holder loaded, so a late holder's write fails with
/// [`Error::StoreConflict`] instead of overwriting.
///
/// Nothing renews a guard's lease by itself: its holder does
/// ([`AttachmentStore::renew`]); a manager renews the locks of its
/// operations while they run.
pub struct LockGuard {
    id: String,
    token: String,
    release: Mutex<Option<Box<dyn FnOnce() + Send + Sync>>>,
    /// What the store noted when the lock was taken (the Redis store: the
    /// record's trail of write ids, so the holder's write leaves the
    /// right one in one command).
    #[cfg_attr(not(feature = "redis"), expect(dead_code))]
    noted: Mutex<String>,
    /// Until when the lock is surely still this guard's by this process's
    /// clock (the Redis store: the instant before the attempt that took or
    /// last renewed it, plus its lease), when the store keeps it.
    #[cfg_attr(not(feature = "redis"), expect(dead_code))]
    held_until: Mutex<Option<std::time::Instant>>,
}

impl LockGuard {
    /// A guard for attachment `id` holding `token`, which runs `release`
    /// once when dropped.
    #[must_use]
    pub fn new(
        id: impl Into<String>,
        token: impl Into<String>,
        release: impl FnOnce() + Send + Sync + 'static,
    ) -> Self {
        LockGuard {
            id: id.into(),
            token: token.into(),
            release: Mutex::new(Some(Box::new(release))),
            noted: Mutex::new(String::new()),
            held_until: Mutex::new(None),
        }
    }

    /// Notes what the store read when it took the lock.
    #[cfg(feature = "redis")]
    pub(crate) fn note(&self, what: &str) {
        what.clone_into(&mut self.noted.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// Notes that the lock is this guard's until `until` at least (taken
    /// or renewed by an attempt sent after `until - lease`).
    #[cfg(feature = "redis")]
    pub(crate) fn held_until_at_least(&self, until: std::time::Instant) {
        *self
            .held_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(until);
    }

    /// Forgets when the lock is surely this guard's: it is being given back
    /// by another way than the guard's write (a release, a shutdown), or a
    /// renewal found it gone.
    #[cfg(feature = "redis")]
    pub(crate) fn not_surely_held(&self) {
        *self
            .held_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Whether the lock is surely still this guard's at `now`, with
    /// `margin` to spare (false when the store never said).
    #[cfg(feature = "redis")]
    pub(crate) fn surely_held_at(
        &self,
        now: std::time::Instant,
        margin: std::time::Duration,
    ) -> bool {
        self.held_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|until| now + margin < until)
    }

    /// What the store noted when it took the lock (empty when nothing).
    #[cfg(feature = "redis")]
    pub(crate) fn noted(&self) -> String {
        self.noted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The attachment id the lock is for.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The holder's token (unique per acquisition).
    #[must_use]
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Releases the lock now (dropping the guard does the same).
    pub fn release(mut self) {
        self.run_release();
    }

    /// The lock was given back through its store (`release`, awaited):
    /// dropping the guard then does nothing more. Without it, the drop
    /// would give the lock back a second time (harmless, since a release
    /// deletes only its own token, but one more store round trip, queued).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use human_plus_store::LockGuard;
    ///
    /// let released = Arc::new(AtomicUsize::new(0));
    /// let counter = Arc::clone(&released);
    /// let guard = LockGuard::new("surface_1", "t1", move || {
    ///     counter.fetch_add(1, Ordering::SeqCst);
    /// });
    /// guard.disarm();
    /// drop(guard);
    /// assert_eq!(released.load(Ordering::SeqCst), 0);
    /// ```
    pub fn disarm(&self) {
        let release = self
            .release
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(release);
    }

    fn run_release(&mut self) {
        let release = self
            .release
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(f) = release {
            f();
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.run_release();
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("id", &self.id)
            .field("token", &self.token)
            .finish()
    }
}

/// The blocking store contract.
pub trait AttachmentStore: Send + Sync {
    /// The record stored under `id`, if any.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails (a record that cannot be read
    /// back is an error, never a silent miss).
    fn get(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error>;

    /// Stores `record`. With `expected: None` the id must be free (an
    /// insert); with `Some(g)` the stored record must be at generation `g`.
    ///
    /// # Errors
    /// [`Error::StoreConflict`] on a mismatch (nothing is written), or
    /// [`Error::Store`].
    fn put(&self, record: &SurfaceAttachment, expected: Option<u64>) -> Result<(), Error>;

    /// Takes the lock of attachment `id` for `lease`, waiting at most
    /// `wait` for it. A waiter wakes when the lock frees (a release in this
    /// process) or backs off within the holder's lease: it does not poll
    /// the store in a tight loop.
    ///
    /// # Errors
    /// [`Error::Busy`] when the wait runs out (with the time left on the
    /// holder's lease), [`Error::Store`] when the store fails.
    fn lock(&self, id: &str, lease: Duration, wait: Duration) -> Result<LockGuard, Error>;

    /// Extends `guard`'s lease to `lease` from now, if the lock still holds
    /// `guard`'s token: `Ok(true)`. `Ok(false)` when it does not (the lease
    /// ran out and the lock is free or another worker's): the lock is lost,
    /// and only the generation fences the holder's writes from then on.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails (after its own retries).
    fn renew(&self, guard: &LockGuard, lease: Duration) -> Result<bool, Error>;

    /// Gives `guard`'s lock back now, before the guard is dropped (what a
    /// manager's shutdown does with the locks its running operations hold);
    /// dropping the guard later frees nothing more (a release compares the
    /// token). The default leaves it to the drop.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    fn release(&self, guard: &LockGuard) -> Result<(), Error> {
        let _ = guard;
        Ok(())
    }

    /// Takes the lock of attachment `id` as [`AttachmentStore::lock`]
    /// does, and loads its record once the lock is held, in one step
    /// where the store can (the in-memory store: one pass through its map;
    /// the Redis store: one script, one round trip). What a manager does
    /// at the start of every operation. The default locks, then gets.
    ///
    /// ```
    /// use std::time::Duration;
    /// use human_plus_core::*;
    /// use human_plus_store::{AttachmentStore, InMemoryAttachmentStore};
    ///
    /// let store = InMemoryAttachmentStore::new();
    /// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
    /// let record = SurfaceAttachment::mint(OwnerKey::of("o")?, inv, Participant::new("a", "A", "#000"), &mut SeededEntropy::new(1));
    /// store.put(&record, None)?;
    /// let (guard, loaded) = store.lock_and_get(record.id(), Duration::from_secs(6), Duration::from_secs(1))?;
    /// assert_eq!(loaded.as_ref().map(SurfaceAttachment::generation), Some(0));
    /// assert!(store.lock(record.id(), Duration::from_secs(6), Duration::ZERO).is_err(), "held");
    /// # drop(guard);
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`AttachmentStore::lock`] and [`AttachmentStore::get`]; when the
    /// record cannot be read, the lock is given back (the guard dropped).
    fn lock_and_get(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<(LockGuard, Option<SurfaceAttachment>), Error> {
        let guard = self.lock(id, lease, wait)?;
        let record = self.get(id)?;
        Ok((guard, record))
    }

    /// Stores `record` with [`AttachmentStore::put`]'s compare-and-set on
    /// `expected` (the generation is the fence: the lock is not checked
    /// for the write), then gives `guard`'s lock back whatever the put
    /// answered (a conflict included), in one step where the store can.
    /// What a manager does at the end of an operation that changed the
    /// record. The default puts, then releases (a release that fails is
    /// left to the guard's drop).
    ///
    /// ```
    /// use std::time::Duration;
    /// use human_plus_core::*;
    /// use human_plus_store::{AttachmentStore, InMemoryAttachmentStore};
    ///
    /// let store = InMemoryAttachmentStore::new();
    /// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
    /// let record = SurfaceAttachment::mint(OwnerKey::of("o")?, inv, Participant::new("a", "A", "#000"), &mut SeededEntropy::new(1));
    /// store.put(&record, None)?;
    /// let (guard, loaded) = store.lock_and_get(record.id(), Duration::from_secs(6), Duration::ZERO)?;
    /// let mut changed = loaded.expect("stored");
    /// changed.record_revision(SurfaceRevision::observed("r1", "sheet_read").unwrap());
    /// store.put_and_release(&guard, &changed, Some(0))?;
    /// let again = store.lock(record.id(), Duration::from_secs(6), Duration::ZERO)?; // given back
    /// # drop(again);
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`AttachmentStore::put`].
    fn put_and_release(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<(), Error> {
        let put = self.put(record, expected);
        let _ = self.release(guard);
        put
    }
}

/// The async store contract: the same meaning as [`AttachmentStore`].
pub trait AsyncAttachmentStore: Send + Sync {
    /// The record stored under `id`, if any.
    fn get(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<SurfaceAttachment>, Error>> + Send;

    /// Stores `record` under the same compare-and-set rule as
    /// [`AttachmentStore::put`].
    fn put(
        &self,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Takes the lock of attachment `id` for `lease`. The future resolves
    /// once the lock is held; the caller bounds the wait with its own
    /// runtime's timer (dropping the future gives up cleanly).
    fn lock(
        &self,
        id: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send;

    /// [`AsyncAttachmentStore::lock`], for a caller that will wait at most
    /// `wait`: a store that can should answer [`Error::Busy`] with the time
    /// left on the holder's lease when the wait runs out. A store whose
    /// future blocks the thread that polls it (a blocking store seen
    /// through this contract) must bound its own wait; the default leaves
    /// the bound to the caller's timer.
    fn lock_within(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send {
        let _ = wait;
        self.lock(id, lease)
    }

    /// Extends `guard`'s lease, as [`AttachmentStore::renew`].
    fn renew(
        &self,
        guard: &LockGuard,
        lease: Duration,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// Gives `guard`'s lock back now, as [`AttachmentStore::release`]
    /// (resolved once the store has done it). The default leaves it to the
    /// drop.
    fn release(&self, guard: &LockGuard) -> impl Future<Output = Result<(), Error>> + Send {
        let _ = guard;
        std::future::ready(Ok(()))
    }

    /// Takes the lock as [`AsyncAttachmentStore::lock_within`] does and
    /// loads the record once it is held, in one step where the store can,
    /// as [`AttachmentStore::lock_and_get`]. The default locks, then gets.
    ///
    /// ```
    /// use std::time::Duration;
    /// use human_plus_core::*;
    /// use human_plus_store::{AsyncAttachmentStore, InMemoryAttachmentStore};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = InMemoryAttachmentStore::new();
    /// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
    /// let record = SurfaceAttachment::mint(OwnerKey::of("o")?, inv, Participant::new("a", "A", "#000"), &mut SeededEntropy::new(1));
    /// store.put(&record, None).await?;
    /// let (guard, loaded) = store.lock_and_get(record.id(), Duration::from_secs(6), Duration::ZERO).await?;
    /// assert!(loaded.is_some());
    /// store.release(&guard).await?;
    /// # Ok::<(), Error>(())
    /// # }).unwrap();
    /// ```
    fn lock_and_get(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> impl Future<Output = Result<(LockGuard, Option<SurfaceAttachment>), Error>> + Send {
        async move {
            let guard = self.lock_within(id, lease, wait).await?;
            let record = self.get(id).await?;
            Ok((guard, record))
        }
    }

    /// Stores `record` (compare-and-set on `expected`) and gives `guard`'s
    /// lock back whatever the put answered, in one step where the store
    /// can, as [`AttachmentStore::put_and_release`]. The default puts,
    /// then releases.
    ///
    /// ```
    /// use std::time::Duration;
    /// use human_plus_core::*;
    /// use human_plus_store::{AsyncAttachmentStore, InMemoryAttachmentStore};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = InMemoryAttachmentStore::new();
    /// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
    /// let record = SurfaceAttachment::mint(OwnerKey::of("o")?, inv, Participant::new("a", "A", "#000"), &mut SeededEntropy::new(1));
    /// store.put(&record, None).await?;
    /// let (guard, _) = store.lock_and_get(record.id(), Duration::from_secs(6), Duration::ZERO).await?;
    /// let err = store.put_and_release(&guard, &record, Some(7)).await.unwrap_err();
    /// assert_eq!(err.code(), "store_conflict");
    /// let again = store.lock_within(record.id(), Duration::from_secs(6), Duration::ZERO).await?; // given back all the same
    /// # drop(again);
    /// # Ok::<(), Error>(())
    /// # }).unwrap();
    /// ```
    fn put_and_release(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        async move {
            let put = self.put(record, expected).await;
            let _ = self.release(guard).await;
            put
        }
    }
}

#[derive(Debug)]
struct Held {
    token: u64,
    expires: Instant,
    lease: Duration,
}

/// An attachment's record and lock, under one key of one map: taking the
/// lock and loading the record (or storing it and giving the lock back) is
/// one pass through the map.
#[derive(Debug, Default)]
struct Entry {
    record: Option<SurfaceAttachment>,
    lock: Option<Held>,
}

#[derive(Debug, Default)]
struct Entries {
    map: BTreeMap<String, Entry>,
    /// How many entries hold a record.
    records: usize,
}

impl Entries {
    /// Drops `id`'s entry once it holds neither a record nor a lock (a
    /// second pass only then).
    fn forget_if_empty(&mut self, id: &str, emptied: bool) {
        if emptied {
            self.map.remove(id);
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    entries: Mutex<Entries>,
    released: Event,
    next_token: AtomicU64,
}

/// An in-memory store for tests and single processes, with a real lock.
///
/// Cloning it shares the same records.
#[derive(Debug, Clone, Default)]
pub struct InMemoryAttachmentStore {
    inner: Arc<Inner>,
}

fn lock_poisoned() -> Error {
    Error::Store(StoreError::new("the in-memory store's mutex was poisoned"))
}

impl InMemoryAttachmentStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        InMemoryAttachmentStore::default()
    }

    /// How many records it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries().map(|e| e.records).unwrap_or(0)
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn entries(&self) -> Result<MutexGuard<'_, Entries>, Error> {
        self.inner.entries.lock().map_err(|_| lock_poisoned())
    }

    fn get_now(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        Ok(self.entries()?.map.get(id).and_then(|e| e.record.clone()))
    }

    fn put_now(&self, record: &SurfaceAttachment, expected: Option<u64>) -> Result<(), Error> {
        let mut entries = self.entries()?;
        Self::put_in(&mut entries, record, expected)
    }

    /// The compare-and-set of `record`, one pass through the map on the
    /// usual path (a record that is there, or an insert of a new id).
    fn put_in(
        entries: &mut Entries,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<(), Error> {
        let slot = match entries.map.get_mut(record.id()) {
            Some(entry) => &mut entry.record,
            None if expected.is_none() => {
                entries.map.insert(
                    record.id().to_owned(),
                    Entry {
                        record: Some(record.clone()),
                        lock: None,
                    },
                );
                entries.records += 1;
                return Ok(());
            }
            None => {
                return Err(Error::StoreConflict {
                    expected,
                    found: None,
                });
            }
        };
        let found = slot.as_ref().map(SurfaceAttachment::generation);
        if found != expected {
            return Err(Error::StoreConflict { expected, found });
        }
        match slot {
            Some(stored) => stored.clone_from(record),
            None => {
                *slot = Some(record.clone());
                entries.records += 1;
            }
        }
        Ok(())
    }

    /// One attempt to take the lock (and, with `load`, to read the record
    /// in the same pass): the guard, or when the holder's lease runs out
    /// and what it is.
    #[allow(clippy::type_complexity)]
    fn try_lock(
        &self,
        id: &str,
        lease: Duration,
        load: bool,
    ) -> Result<Result<(LockGuard, Option<SurfaceAttachment>), (Instant, Duration)>, Error> {
        let mut entries = self.entries()?;
        let now = Instant::now();
        let token = self.inner.next_token.fetch_add(1, Ordering::Relaxed) + 1;
        let taken = Held {
            token,
            expires: now + lease,
            lease,
        };
        // One pass through the map: a lock whose lease ran out is taken
        // over in place, and the record read beside it.
        let record = match entries.map.get_mut(id) {
            Some(Entry {
                lock: Some(held), ..
            }) if held.expires > now => return Ok(Err((held.expires, held.lease))),
            Some(entry) => {
                entry.lock = Some(taken);
                if load { entry.record.clone() } else { None }
            }
            None => {
                entries.map.insert(
                    id.to_owned(),
                    Entry {
                        record: None,
                        lock: Some(taken),
                    },
                );
                None
            }
        };
        drop(entries);
        let inner = Arc::clone(&self.inner);
        let key = id.to_owned();
        let guard = LockGuard::new(id, token.to_string(), move || {
            Inner::free(&inner, &key, token);
        });
        Ok(Ok((guard, record)))
    }

    /// One attempt within a wait that ends at `deadline`: the guard (and
    /// the record, with `load`), or when to try again (a release wakes the
    /// waiter earlier). Busy once the wait is over, or when only the
    /// holder's lease running out would free the lock, and not within the
    /// wait.
    #[allow(clippy::type_complexity)]
    fn attempt(
        &self,
        id: &str,
        lease: Duration,
        deadline: Instant,
        load: bool,
    ) -> Result<Result<(LockGuard, Option<SurfaceAttachment>), Instant>, Error> {
        let (expires, held_for) = match self.try_lock(id, lease, load)? {
            Ok(taken) => return Ok(Ok(taken)),
            Err(held) => held,
        };
        let now = Instant::now();
        let holder = Holder {
            left: expires - now,
            lease: Some(held_for),
        };
        if now >= deadline || (holder.overdue() && expires > deadline) {
            return Err(busy(Some(holder), lease));
        }
        Ok(Err(expires
            .min(deadline)
            .max(now + Duration::from_millis(1))))
    }

    /// Takes the lock within `wait`, blocking the thread (and loads the
    /// record, with `load`).
    fn lock_blocking(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
        load: bool,
    ) -> Result<(LockGuard, Option<SurfaceAttachment>), Error> {
        let deadline = Instant::now() + wait;
        loop {
            let listener = self.inner.released.listen();
            let wake = match self.attempt(id, lease, deadline, load)? {
                Ok(taken) => return Ok(taken),
                Err(wake) => wake,
            };
            // Woken by a release, or when the holder's lease runs out.
            listener.wait_deadline(wake);
        }
    }

    /// Takes the lock within `wait`, waiting for releases (and loads the
    /// record, with `load`).
    async fn lock_waiting(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
        load: bool,
    ) -> Result<(LockGuard, Option<SurfaceAttachment>), Error> {
        let deadline = Instant::now() + wait;
        loop {
            let listener = self.inner.released.listen();
            if let Ok(taken) = self.attempt(id, lease, deadline, load)? {
                return Ok(taken);
            }
            listener.await;
        }
    }

    fn renew_now(&self, guard: &LockGuard, lease: Duration) -> Result<bool, Error> {
        let mut entries = self.entries()?;
        let now = Instant::now();
        match entries
            .map
            .get_mut(guard.id())
            .and_then(|e| e.lock.as_mut())
        {
            Some(held) if held.token.to_string() == guard.token() && held.expires > now => {
                held.expires = now + lease;
                held.lease = lease;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Frees the lock `guard` holds, if it still does.
    fn release_now(&self, guard: &LockGuard) {
        if let Ok(token) = guard.token().parse() {
            Inner::free(&self.inner, guard.id(), token);
            guard.disarm();
        }
    }

    /// Stores `record` (compare-and-set) and frees `guard`'s lock, if it
    /// still holds it, in one pass through the map.
    fn put_release_now(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<(), Error> {
        if guard.id() != record.id() {
            return Err(Error::Store(StoreError::new(format!(
                "the lock held is for attachment {}, not {}",
                guard.id(),
                record.id()
            ))));
        }
        let Ok(token) = guard.token().parse::<u64>() else {
            return self.put_now(record, expected);
        };
        let mut entries = self.entries()?;
        let put = Self::put_in(&mut entries, record, expected);
        let emptied = match entries.map.get_mut(record.id()) {
            Some(entry) if entry.lock.as_ref().is_some_and(|held| held.token == token) => {
                entry.lock = None;
                entry.record.is_none()
            }
            _ => false,
        };
        entries.forget_if_empty(record.id(), emptied);
        drop(entries);
        guard.disarm();
        self.inner.released.notify(usize::MAX);
        put
    }
}

impl Inner {
    /// Frees lock `key` if it holds `token`, and wakes every waiter.
    fn free(inner: &Inner, key: &str, token: u64) {
        if let Ok(mut entries) = inner.entries.lock() {
            let emptied = match entries.map.get_mut(key) {
                Some(entry) if entry.lock.as_ref().is_some_and(|held| held.token == token) => {
                    entry.lock = None;
                    entry.record.is_none()
                }
                _ => false,
            };
            entries.forget_if_empty(key, emptied);
        }
        inner.released.notify(usize::MAX);
    }
}

impl AttachmentStore for InMemoryAttachmentStore {
    fn get(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        self.get_now(id)
    }

    fn put(&self, record: &SurfaceAttachment, expected: Option<u64>) -> Result<(), Error> {
        self.put_now(record, expected)
    }

    fn lock(&self, id: &str, lease: Duration, wait: Duration) -> Result<LockGuard, Error> {
        self.lock_blocking(id, lease, wait, false)
            .map(|(guard, _)| guard)
    }

    fn renew(&self, guard: &LockGuard, lease: Duration) -> Result<bool, Error> {
        self.renew_now(guard, lease)
    }

    fn release(&self, guard: &LockGuard) -> Result<(), Error> {
        self.release_now(guard);
        Ok(())
    }

    /// The lock and the record in one pass through the map.
    fn lock_and_get(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<(LockGuard, Option<SurfaceAttachment>), Error> {
        self.lock_blocking(id, lease, wait, true)
    }

    /// The compare-and-set and the release in one pass through the map.
    fn put_and_release(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<(), Error> {
        self.put_release_now(guard, record, expected)
    }
}

impl AsyncAttachmentStore for InMemoryAttachmentStore {
    async fn get(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        self.get_now(id)
    }

    async fn put(&self, record: &SurfaceAttachment, expected: Option<u64>) -> Result<(), Error> {
        self.put_now(record, expected)
    }

    async fn lock(&self, id: &str, lease: Duration) -> Result<LockGuard, Error> {
        loop {
            let listener = self.inner.released.listen();
            if let Ok((guard, _)) = self.try_lock(id, lease, false)? {
                return Ok(guard);
            }
            // Woken by the next release. An expired lease is taken over at
            // the next attempt; in one process a holder always releases on
            // drop, so expiry only matters to leaked guards.
            listener.await;
        }
    }

    /// Waits for releases, as [`AsyncAttachmentStore::lock`]; with no
    /// timer of its own it answers [`Error::Busy`] (with the time left on
    /// the holder's lease) only at an attempt made once `wait` has run out:
    /// a zero `wait` is one attempt, and the caller's timer bounds the
    /// rest.
    async fn lock_within(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<LockGuard, Error> {
        self.lock_waiting(id, lease, wait, false)
            .await
            .map(|(guard, _)| guard)
    }

    async fn renew(&self, guard: &LockGuard, lease: Duration) -> Result<bool, Error> {
        self.renew_now(guard, lease)
    }

    async fn release(&self, guard: &LockGuard) -> Result<(), Error> {
        self.release_now(guard);
        Ok(())
    }

    /// The lock and the record in one pass through the map (waiting as
    /// [`AsyncAttachmentStore::lock_within`] does).
    async fn lock_and_get(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<(LockGuard, Option<SurfaceAttachment>), Error> {
        self.lock_waiting(id, lease, wait, true).await
    }

    /// The compare-and-set and the release in one pass through the map.
    async fn put_and_release(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<(), Error> {
        self.put_release_now(guard, record, expected)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::{AttachmentStore, DEFAULT_LEASE, InMemoryAttachmentStore};
    use human_plus_core::{Error, SurfaceAttachment};
    use human_plus_core::{
        OwnerKey, Participant, SeededEntropy, SurfaceInvitation, SurfaceRevision,
    };
    use std::sync::Arc;
    use std::sync::Barrier;
    use std::thread;
    use std::time::Duration;

    fn record(seed: u64) -> SurfaceAttachment {
        let inv = SurfaceInvitation::new(
            "https://relay.example",
            "demo_001",
            "0123456789abcdef",
            "s",
            "a",
        )
        .unwrap();
        SurfaceAttachment::mint(
            OwnerKey::of("o").unwrap(),
            inv,
            Participant::new("a", "A", "#000"),
            &mut SeededEntropy::new(seed),
        )
    }

    #[test]
    fn put_is_compare_and_set() {
        let s = InMemoryAttachmentStore::new();
        let mut r = record(1);
        s.put(&r, None).unwrap();
        assert!(matches!(
            s.put(&r, None),
            Err(Error::StoreConflict {
                expected: None,
                found: Some(0)
            })
        ));
        r.record_revision(SurfaceRevision::observed("r1", "t").unwrap());
        s.put(&r, Some(0)).unwrap();
        assert_eq!(AttachmentStore::get(&s, r.id()).unwrap().unwrap(), r);
        assert!(
            s.put(&r, Some(0)).is_err(),
            "a stale writer never overwrites"
        );
        assert_eq!(AttachmentStore::get(&s, "surface_missing").unwrap(), None);
    }

    #[test]
    fn lock_is_mutual_exclusion_released_on_drop() {
        let s = InMemoryAttachmentStore::new();
        let g = s.lock("a", DEFAULT_LEASE, Duration::from_secs(1)).unwrap();
        assert!(
            s.lock("a", DEFAULT_LEASE, Duration::from_millis(50))
                .is_err()
        );
        assert!(
            s.lock("b", DEFAULT_LEASE, Duration::from_millis(50))
                .is_ok()
        );
        drop(g);
        assert!(
            s.lock("a", DEFAULT_LEASE, Duration::from_millis(50))
                .is_ok()
        );
    }

    #[test]
    fn an_expired_lease_is_taken_over_and_its_holder_cannot_write() {
        let s = InMemoryAttachmentStore::new();
        let r = record(2);
        s.put(&r, None).unwrap();
        let old = s
            .lock(r.id(), Duration::from_millis(30), Duration::ZERO)
            .unwrap();
        let old_view = AttachmentStore::get(&s, r.id()).unwrap().unwrap();
        // The second worker waits past the lease and takes the lock over.
        let new = s
            .lock(r.id(), DEFAULT_LEASE, Duration::from_secs(2))
            .unwrap();
        let mut newer = AttachmentStore::get(&s, r.id()).unwrap().unwrap();
        newer.record_revision(SurfaceRevision::observed("r2", "t").unwrap());
        s.put(&newer, Some(0)).unwrap();
        // The expired holder's write is fenced by the generation.
        let mut stale = old_view.clone();
        stale.record_revision(SurfaceRevision::observed("r1", "t").unwrap());
        assert!(matches!(
            s.put(&stale, Some(old_view.generation())),
            Err(Error::StoreConflict { .. })
        ));
        // Its late release does not free the new holder's lock.
        drop(old);
        assert!(
            s.lock(r.id(), DEFAULT_LEASE, Duration::from_millis(20))
                .is_err()
        );
        drop(new);
    }

    #[test]
    fn a_lock_held_elsewhere_is_busy_with_the_lease_left() {
        let s = InMemoryAttachmentStore::new();
        let _g = s.lock("a", Duration::from_secs(5), Duration::ZERO).unwrap();
        let e = s
            .lock("a", DEFAULT_LEASE, Duration::from_millis(30))
            .unwrap_err();
        assert_eq!(e.code(), "attachment_busy", "{e}");
        assert!(e.is_retryable());
        // A holder that renews on time: a retry within one renewal
        // interval of its lease.
        let after = e.retry_after().unwrap();
        assert_eq!(after, super::renew_interval(Duration::from_secs(5)));
        // The async flavour's zero wait: one attempt, the same answer.
        let e = futures_lite::future::block_on(super::AsyncAttachmentStore::lock_within(
            &s,
            "a",
            DEFAULT_LEASE,
            Duration::ZERO,
        ))
        .unwrap_err();
        assert!(e.is_busy(), "{e}");
    }

    #[test]
    fn a_holder_that_stopped_renewing_is_waited_out_or_answered_busy_at_once() {
        let s = InMemoryAttachmentStore::new();
        let lease = Duration::from_millis(300);
        let held = s.lock("a", lease, Duration::ZERO).unwrap();
        // Not renewed for more than an interval and a quarter: overdue.
        thread::sleep(Duration::from_millis(200));
        let t = std::time::Instant::now();
        let e = s
            .lock("a", DEFAULT_LEASE, Duration::from_millis(50))
            .unwrap_err();
        assert!(
            t.elapsed() < Duration::from_millis(40),
            "its lease outlasts the wait: busy at once"
        );
        let after = e.retry_after().unwrap();
        assert!(after <= Duration::from_millis(100), "{after:?}");
        // With a wait that outlasts it, the lock is taken when it runs out.
        let next = s.lock("a", DEFAULT_LEASE, Duration::from_secs(2)).unwrap();
        drop(held);
        drop(next);
    }

    #[test]
    fn a_renewed_lease_outlives_its_first_term_and_a_lost_one_is_not_renewed() {
        let s = InMemoryAttachmentStore::new();
        let lease = Duration::from_millis(60);
        let g = s.lock("a", lease, Duration::ZERO).unwrap();
        for _ in 0..4 {
            thread::sleep(Duration::from_millis(25));
            assert!(AttachmentStore::renew(&s, &g, lease).unwrap());
        }
        // Held past its first lease: another worker is still refused.
        assert!(s.lock("a", lease, Duration::ZERO).unwrap_err().is_busy());
        // Not renewed: it runs out, another takes it, and the old guard
        // can no longer renew (nor free the new holder's lock).
        thread::sleep(Duration::from_millis(80));
        let next = s.lock("a", DEFAULT_LEASE, Duration::ZERO).unwrap();
        assert!(!AttachmentStore::renew(&s, &g, lease).unwrap());
        AttachmentStore::release(&s, &g).unwrap();
        drop(g);
        assert!(s.lock("a", lease, Duration::ZERO).unwrap_err().is_busy());
        // Given back explicitly: free at once, and the drop frees nothing.
        AttachmentStore::release(&s, &next).unwrap();
        let third = s.lock("a", DEFAULT_LEASE, Duration::ZERO).unwrap();
        drop(next);
        assert!(s.lock("a", lease, Duration::ZERO).unwrap_err().is_busy());
        drop(third);
    }

    #[test]
    fn threads_serialise_read_modify_write() {
        let s = InMemoryAttachmentStore::new();
        let r = record(3);
        s.put(&r, None).unwrap();
        let id = r.id().to_owned();
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|w| {
                let s = s.clone();
                let id = id.clone();
                let barrier = Arc::clone(&barrier);
                thread::spawn(move || {
                    barrier.wait();
                    for i in 0..50 {
                        let _g = s.lock(&id, DEFAULT_LEASE, Duration::from_secs(10)).unwrap();
                        let mut rec = AttachmentStore::get(&s, &id).unwrap().unwrap();
                        let g = rec.generation();
                        rec.record_revision(
                            SurfaceRevision::observed(format!("w{w}-{i}"), "t").unwrap(),
                        );
                        s.put(&rec, Some(g)).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let last = AttachmentStore::get(&s, &id).unwrap().unwrap();
        assert_eq!(last.generation(), 400, "no lost update");
    }

    #[test]
    fn async_flavour_waits_for_release() {
        let s = InMemoryAttachmentStore::new();
        futures_lite::future::block_on(async {
            let g = super::AsyncAttachmentStore::lock(&s, "a", DEFAULT_LEASE)
                .await
                .unwrap();
            let s2 = s.clone();
            let t = thread::spawn(move || {
                futures_lite::future::block_on(super::AsyncAttachmentStore::lock(
                    &s2,
                    "a",
                    DEFAULT_LEASE,
                ))
                .map(|g| g.token().to_owned())
            });
            thread::sleep(Duration::from_millis(30));
            let first = g.token().to_owned();
            drop(g);
            let second = t.join().unwrap().unwrap();
            assert_ne!(first, second);
        });
    }
}

/// The README's examples, compiled as doc tests (they need the Redis
/// features).
#[cfg(all(doctest, feature = "redis"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
