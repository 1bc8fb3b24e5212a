//! What both flavours share: the client, the keyring, the key names, the
//! record codec, and the blocking connections.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use human_plus_core::{Error, StoreErrorKind, SurfaceAttachment};
use zeroize::Zeroizing;

use super::config::{DEFAULT_REPLICA_ACK_TIMEOUT, RedisConfig, Target, millis};
use super::conn::{Backend, Conn};
use super::crypto::{self, Keyring, Nonces};
use super::errors::{classify, config_error, redis_error, store_error, store_error_of};
use super::keys::{self, KeyLayout, RESERVED_ID_PREFIX};
use super::pause::{Backoff, FailoverPause};
use super::scripts;
use super::wake;
use crate::{Holder, LockGuard};

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
    pub(super) fn from_reply(reply: i64) -> Self {
        match reply {
            1 => Attempted::Taken,
            2 => Attempted::NextInLine,
            _ => Attempted::Waiting,
        }
    }
}

/// What one attempt found, and of a lock found held, its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempt {
    pub(crate) attempted: Attempted,
    /// The holder's lease left and whole lease, for a lock found held
    /// (when Redis said).
    pub(crate) holder: Option<Holder>,
}

impl Attempt {
    /// The acquire script's reply: for a lock taken its second number is
    /// the replicas; otherwise the lease left and the holder's whole lease
    /// (milliseconds, negative for none).
    pub(crate) fn from_reply((status, second, third, _, _, _): &AcquireReply) -> Self {
        let (status, second, third) = (*status, *second, *third);
        let attempted = Attempted::from_reply(status);
        let ms = |n: i64| u64::try_from(n).ok().map(Duration::from_millis);
        let holder = (attempted != Attempted::Taken)
            .then(|| {
                ms(second).map(|left| Holder {
                    left,
                    lease: ms(third).filter(|l| !l.is_zero()),
                })
            })
            .flatten();
        Attempt { attempted, holder }
    }

    /// What the waiter does after this attempt failed, at `now`: sleep
    /// `Some(d)`, or answer busy at once (`None`) when the wait is over or
    /// only an overdue holder's lease running out frees the lock, and not
    /// before `deadline`.
    pub(crate) fn next_wait(
        &self,
        backoff: &mut Backoff,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Option<Duration> {
        let left = deadline.map(|d| d.saturating_duration_since(now));
        if left.is_some_and(|l| l.is_zero()) {
            return None;
        }
        let sleep = match self.holder {
            // A holder that stopped renewing: one attempt when its lease
            // runs out, or none if that is past the wait.
            Some(h) if h.overdue() => {
                let until = h.left + Duration::from_millis(1);
                if left.is_some_and(|l| until > l) {
                    return None;
                }
                until
            }
            h => backoff.next(self.attempted == Attempted::NextInLine, h.map(|h| h.left)),
        };
        Some(left.map_or(sleep, |l| sleep.min(l)))
    }
}

/// The acquire script's reply: the status; for a lock taken the primary's
/// connected replicas (`-1` when not asked), for one found held the
/// holder's lease left and its whole lease, in milliseconds; for a lock
/// taken with the record asked for, the record's `g` and `v` fields.
pub(crate) type AcquireReply = (i64, i64, i64, Option<String>, Option<Vec<u8>>, String);

/// The record's generation, envelope and trail of write ids, as the read
/// and acquire scripts answer them (`read_record`: either layout).
pub(crate) type Fields = (Option<String>, Option<Vec<u8>>, String);

/// The put script's reply: the status, the generation found (or written),
/// and the primary's connected replicas (`-1` when not asked).
pub(crate) type PutReply = (i64, String, i64);

/// The put-and-release script's reply: the put script's, and whether the
/// lock was given back (1) or was not the caller's any more (0).
pub(crate) type PutReleaseReply = (i64, String, i64, i64);

/// What both flavours share: the client, the keyring, the key names, the
/// record codec, and the blocking connections.
pub(crate) struct Shared {
    pub(super) backend: Backend,
    pub(super) keyring: Keyring,
    pub(super) nonces: Nonces,
    pub(super) prefix: String,
    pub(super) layout: KeyLayout,
    /// `WAIT` for this many replicas (at most those connected), this long.
    pub(super) acks: Option<(u32, Duration)>,
    pub(super) failover_wait: Duration,
    pub(super) ttl_ms: u64,
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    pub(super) retry_min: Duration,
    pub(super) retry_max: Duration,
    pub(super) line_ms: u64,
    pub(super) max_idle: usize,
    pub(super) idle: Mutex<Vec<Conn>>,
}

impl Shared {
    pub(super) fn new(config: RedisConfig) -> Result<Self, Error> {
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

    /// The key of a lock's refusals: the ids of the last writes the
    /// put-and-release script refused (see its script), kept as long as a
    /// retry may come.
    pub(crate) fn refused_key(lock_key: &str) -> String {
        format!("{lock_key}#refused")
    }

    /// Whether scripts should report the connected replicas (so the
    /// caller knows how many to `WAIT` for).
    pub(super) fn count_replicas(&self) -> &'static str {
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

    /// The acquire script's invocation; with `record_key`, a lock taken
    /// also reads the record.
    pub(crate) fn acquire_invocation(
        &self,
        lock_key: &str,
        record_key: Option<&str>,
        token: &str,
        lease_ms: u64,
        in_line: bool,
    ) -> redis::ScriptInvocation<'static> {
        let mut inv = scripts::ACQUIRE.prepare_invoke();
        inv.key(lock_key).key(Shared::next_key(lock_key));
        if let Some(record_key) = record_key {
            inv.key(record_key);
        }
        inv.arg(token)
            .arg(lease_ms)
            .arg(self.line_ms)
            .arg(self.count_replicas())
            .arg(if in_line { "1" } else { "0" });
        inv
    }

    /// The renew script's invocation.
    pub(crate) fn renew_invocation(
        key: &str,
        token: &str,
        lease_ms: u64,
    ) -> redis::ScriptInvocation<'static> {
        let mut inv = scripts::RENEW.prepare_invoke();
        inv.key(key).arg(token).arg(lease_ms);
        inv
    }

    /// The release script's invocation for a lock key: given back, or
    /// promised to the waiter next in line.
    pub(crate) fn release_invocation(
        &self,
        key: &str,
        token: &str,
    ) -> redis::ScriptInvocation<'static> {
        let mut inv = scripts::RELEASE.prepare_invoke();
        inv.key(key)
            .key(Shared::next_key(key))
            .arg(token)
            .arg(self.line_ms);
        inv
    }

    /// The release script's invocation for a place in line (or any key
    /// compared and deleted, never promised).
    pub(crate) fn release_place_invocation(
        &self,
        key: &str,
        token: &str,
    ) -> redis::ScriptInvocation<'static> {
        let mut inv = scripts::RELEASE.prepare_invoke();
        inv.key(key).arg(token).arg(self.line_ms);
        inv
    }

    /// The read script's invocation: the record's generation and
    /// envelope, in either layout.
    pub(crate) fn read_invocation(key: &str) -> redis::ScriptInvocation<'static> {
        let mut inv = scripts::READ.prepare_invoke();
        inv.key(key);
        inv
    }

    /// The release script's invocation for `key`: a lock key or a place
    /// in line (whose name ends in `#next`).
    pub(crate) fn release_any_invocation(
        &self,
        key: &str,
        token: &str,
    ) -> redis::ScriptInvocation<'static> {
        if key.ends_with("#next") {
            self.release_place_invocation(key, token)
        } else {
            self.release_invocation(key, token)
        }
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

    /// The record from its generation and envelope.
    pub(crate) fn decode(
        &self,
        id: &str,
        (generation, envelope, _): Fields,
    ) -> Result<Option<SurfaceAttachment>, Error> {
        let malformed = |why: &str| {
            store_error(format!(
                "the stored record of attachment {id} is malformed: {why}"
            ))
        };
        let (generation, envelope) = match (generation, envelope) {
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
        trail: &WriteTrail,
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
            .arg(self.count_replicas())
            .arg(&trail.id)
            .arg(&trail.guess);
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

    pub(super) fn check_fence(record: &SurfaceAttachment, guard: &LockGuard) -> Result<(), Error> {
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
    pub(super) fn with_conn<T>(
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
    pub(super) fn retrying<T>(
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

    /// Runs a write script (retried as every operation is) and, when it
    /// wrote (`status_and_replicas` of its reply says status 1), `WAIT`s
    /// for as many of the replicas it reported as are asked for: the reply,
    /// and `(asked, acknowledged)` when it waited. `make` gives each
    /// attempt's invocation, told whether an attempt was sent before it.
    fn write_acked<R: redis::FromRedisValue>(
        &self,
        op: &str,
        make: &dyn Fn(bool) -> redis::ScriptInvocation<'static>,
        key: &str,
        status_and_replicas: fn(&R) -> (i64, i64),
    ) -> Result<(R, Option<(i64, i64)>), Error> {
        let mut sent = false;
        self.retrying(op, |c| {
            // The invocation of this attempt: `true` once one was sent.
            let inv = make(std::mem::replace(&mut sent, true));
            let reply: R = inv.invoke(c.like())?;
            let acked = match status_and_replicas(&reply) {
                (1, replicas) => match self.wait_for(replicas) {
                    Some((n, ms)) => Some((n, c.wait_replicas(key, n, ms)?)),
                    None => None,
                },
                _ => None,
            };
            Ok((reply, acked))
        })
    }

    pub(crate) fn get_blocking(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        if id.starts_with(RESERVED_ID_PREFIX) {
            return Ok(None);
        }
        let key = self.record_key(id);
        let inv = Shared::read_invocation(&key);
        let fields: Fields = self.retrying("read script", |c| inv.invoke(c.like()))?;
        self.decode(id, fields)
    }

    pub(super) fn put_blocking(
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
        let trail = WriteTrail::new(fence)?;
        let make = |_| {
            self.put_invocation(
                &key,
                expected,
                &generation,
                &envelope,
                lock_key.as_ref().map(|(k, t)| (k.as_str(), *t)),
                &trail,
            )
        };
        let (reply, acked) =
            self.write_acked("put script", &make, &key, |r: &PutReply| (r.0, r.2))?;
        Shared::put_outcome(record.id(), expected, &reply, acked)
    }

    /// One attempt to take the lock (and, with `record_key`, to read the
    /// record once it is taken). A lock taken but not confirmed on the
    /// replicas asked for is given back and refused.
    pub(super) fn acquire_blocking(
        &self,
        key: &str,
        record_key: Option<&str>,
        token: &str,
        lease_ms: u64,
        in_line: bool,
    ) -> Result<(Attempt, Fields), Error> {
        let inv = self.acquire_invocation(key, record_key, token, lease_ms, in_line);
        let (attempt, fields, acked) = self.retrying("lock script", |c| {
            let reply: AcquireReply = inv.invoke(c.like())?;
            let attempt = Attempt::from_reply(&reply);
            let acked = match self.wait_for(reply.1) {
                Some((n, ms)) if attempt.attempted == Attempted::Taken => {
                    Some((n, c.wait_replicas(key, n, ms)?))
                }
                _ => None,
            };
            Ok((attempt, (reply.3, reply.4, reply.5), acked))
        })?;
        match acked {
            Some((asked, got)) if got < asked => {
                let _ = self.release_blocking(key, token);
                Err(lock_unconfirmed(key, asked, got))
            }
            _ => Ok((attempt, fields)),
        }
    }

    /// [`Shared::put_blocking`] without a fence on the lock, then `guard`'s
    /// lock given back, in one script: the put's answer. The guard is
    /// disarmed once the script ran (given back, or no longer its lock);
    /// when Redis failed, its drop gives the lock back.
    pub(super) fn put_release_blocking(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<(), Error> {
        let write = self.put_release(guard, record, expected)?;
        let make = |retry| write.invocation(self, guard, retry);
        let answer = self.write_acked(PUT_RELEASE_OP, &make, &write.key, put_release_status)?;
        write.answered(guard, answer)
    }

    /// A put-and-release prepared: the record sealed, its keys, the write's
    /// id and trail, for each attempt's invocation.
    pub(crate) fn put_release(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<PutRelease, Error> {
        Shared::check_fence(record, guard)?;
        let (generation, envelope) = self.encode(record)?;
        Ok(PutRelease {
            id: record.id().to_owned(),
            key: self.record_key(record.id()),
            lock_key: self.lock_key(guard.id()),
            expected,
            generation,
            envelope,
            trail: WriteTrail::new(Some(guard))?,
        })
    }

    /// Extends the lease of `key` while it holds `token` (retried as every
    /// operation is): whether it still held it.
    pub(crate) fn renew_blocking(
        &self,
        key: &str,
        token: &str,
        lease_ms: u64,
    ) -> Result<bool, Error> {
        let inv = Shared::renew_invocation(key, token, lease_ms);
        let renewed: i64 = self.retrying("renew script", |c| inv.invoke(c.like()))?;
        Ok(renewed == 1)
    }

    /// The compare-and-delete release: one attempt. A lock freed wakes the
    /// waiters of this process.
    pub(crate) fn release_blocking(&self, key: &str, token: &str) -> Result<bool, Error> {
        let inv = self.release_any_invocation(key, token);
        let deleted: i64 = self
            .with_conn(&mut |c| inv.invoke(c.like()))
            .map_err(|e| redis_error("release script", &e))?;
        if deleted == 1 {
            wake::released(key);
        }
        Ok(deleted == 1)
    }

    pub(super) fn ping_blocking(&self) -> Result<(), Error> {
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

/// The put-and-release script's name in errors.
pub(crate) const PUT_RELEASE_OP: &str = "put and release script";

/// The put-and-release reply's status and replicas.
pub(crate) fn put_release_status(r: &PutReleaseReply) -> (i64, i64) {
    (r.0, r.2)
}

/// A put-and-release prepared (see [`Shared::put_release`]).
pub(crate) struct PutRelease {
    id: String,
    pub(crate) key: String,
    lock_key: String,
    expected: Option<u64>,
    generation: String,
    envelope: Vec<u8>,
    trail: WriteTrail,
}

impl PutRelease {
    /// An attempt's invocation: the record written as the put script does
    /// (no fence on the lock), then `guard`'s lock given back. `retry`: an
    /// attempt was sent before this one, so a write found under more
    /// writes than the trail keeps may be this one's (asked of the script
    /// only while `guard`'s lease cannot have run out by this process's
    /// clock, with [`LEASE_MARGIN`] to spare).
    pub(crate) fn invocation(
        &self,
        shared: &Shared,
        guard: &LockGuard,
        retry: bool,
    ) -> redis::ScriptInvocation<'static> {
        let lost = retry && guard.surely_held_at(Instant::now(), LEASE_MARGIN);
        let mut inv = scripts::PUT_RELEASE.prepare_invoke();
        inv.key(&self.key)
            .key(&self.lock_key)
            .key(Shared::next_key(&self.lock_key))
            .key(Shared::refused_key(&self.lock_key))
            .arg(self.expected.map(|g| g.to_string()).unwrap_or_default())
            .arg(&self.generation)
            .arg(&self.envelope)
            .arg(shared.ttl_ms)
            .arg(shared.count_replicas())
            .arg(&self.trail.id)
            .arg(&self.trail.guess)
            .arg(guard.token())
            .arg(shared.line_ms)
            .arg(if lost { "1" } else { "0" })
            .arg(millis(shared.failover_wait.max(Duration::from_secs(5)) * 2));
        inv
    }

    /// The write's outcome from the script's answer: the guard disarmed
    /// (given back, or no longer its lock), this process's waiters woken
    /// when it was given back.
    pub(crate) fn answered(
        &self,
        guard: &LockGuard,
        (reply, acked): (PutReleaseReply, Option<(i64, i64)>),
    ) -> Result<(), Error> {
        guard.disarm();
        if reply.3 == 1 {
            wake::released(&self.lock_key);
        }
        Shared::put_outcome(&self.id, self.expected, &(reply.0, reply.1, reply.2), acked)
    }
}

/// A write's id and the trail it expects to leave (see the scripts'
/// `record_fns`): the id is chosen once per write, so the write's retries
/// carry it and a retry finds its own write applied.
pub(crate) struct WriteTrail {
    pub(crate) id: String,
    pub(crate) guess: String,
}

/// How much sooner than its lease a lock counts as possibly lost, by this
/// process's clock: for the time the taking attempt took to arrive and
/// for clocks that differ between a primary and a replica promoted in its
/// place.
pub(crate) const LEASE_MARGIN: Duration = Duration::from_secs(1);

/// How many write ids a record's trail keeps.
const TRAIL_LEN: usize = 64;

impl WriteTrail {
    /// A new write's id, and as its guess the id followed by the trail
    /// `guard`'s lock loaded (right whenever nothing was written since).
    pub(crate) fn new(guard: Option<&LockGuard>) -> Result<Self, Error> {
        let mut b = [0u8; 6];
        getrandom::fill(&mut b)
            .map_err(|_| store_error("the operating system's random generator failed"))?;
        let id = human_plus_core::hex(&b);
        let loaded = guard.map(LockGuard::noted).unwrap_or_default();
        let mut guess = id.clone();
        for w in loaded
            .split(',')
            .filter(|w| !w.is_empty())
            .take(TRAIL_LEN - 1)
        {
            guess.push(',');
            guess.push_str(w);
        }
        Ok(WriteTrail { id, guess })
    }
}

/// A fresh lock token for a lease of `lease_ms`: 16 random bytes, hex,
/// then `.` and the lease in milliseconds, so a waiter can tell from the
/// lock alone whether its holder still renews it (a renewal to another
/// lease adds `~<lease ms>` to the lock's value, see the scripts).
pub(crate) fn lock_token(lease_ms: u64) -> Result<String, Error> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|_| store_error("the operating system's random generator failed"))?;
    Ok(format!("{}.{lease_ms}", human_plus_core::hex(&b)))
}
