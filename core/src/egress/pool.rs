//! Kept connections, as bookkeeping: which idle connection a request may
//! take, and which must be closed. A runtime holds the sockets (its `C`);
//! every rule about reusing them is here, once.
//!
//! * Connections are interchangeable only under the same
//!   [`ConnectionKey`].
//! * An idle connection is reused only while it has been idle less than
//!   [`PoolConfig::idle`] and is younger than [`PoolConfig::lifetime`], and
//!   only if the runtime's check (`usable`) finds it still open: a kept
//!   connection found closed before a byte is written is simply not used.
//! * At most [`PoolConfig::per_key`] idle connections are kept per key; the
//!   one idle longest goes first.
//!
//! Dropping a `C` is closing it.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::egress::endpoint::ConnectionKey;
use crate::egress::wire::PoolConfig;

/// The idle connections of one runtime, by key.
///
/// ```
/// use std::time::{Duration, Instant};
/// use human_plus_core::{ConnectionPool, EgressPolicy, PoolConfig, RelayEndpoint, SurfaceInvitation};
///
/// let inv = SurfaceInvitation::new("https://relay.test", "s_one", "0123456789abcdef", "x", "y")?;
/// let policy = EgressPolicy::new(["relay.test"]).egress_proxy("http://egress.internal:3128");
/// let key = RelayEndpoint::new(&inv, "c", &policy)?.connection_key();
///
/// let mut pool: ConnectionPool<&str> = ConnectionPool::new(PoolConfig::default());
/// let t0 = Instant::now();
/// pool.put(key.clone(), "conn-1", t0, t0);
/// // Reused within the idle bound, if the runtime finds it open.
/// assert_eq!(pool.take(&key, t0 + Duration::from_secs(1), |_| true).map(|k| k.conn), Some("conn-1"));
/// pool.put(key.clone(), "conn-1", t0, t0 + Duration::from_secs(1));
/// // Idle too long: closed, never handed out.
/// assert!(pool.take(&key, t0 + Duration::from_secs(10), |_| true).is_none());
/// assert_eq!(pool.idle_count(), 0);
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug)]
pub struct ConnectionPool<C> {
    config: PoolConfig,
    idle: BTreeMap<ConnectionKey, Vec<Kept<C>>>,
    /// Connections being opened ahead, by key.
    ahead: BTreeMap<ConnectionKey, usize>,
}

/// A connection taken from (or to be put back into) a [`ConnectionPool`].
#[derive(Debug)]
pub struct Kept<C> {
    /// The connection.
    pub conn: C,
    /// When it was made (its lifetime runs from here).
    pub created: Instant,
    /// When it last went idle.
    pub idle_since: Instant,
}

impl<C> ConnectionPool<C> {
    /// An empty pool under `config`.
    #[must_use]
    pub fn new(config: PoolConfig) -> Self {
        ConnectionPool {
            config,
            idle: BTreeMap::new(),
            ahead: BTreeMap::new(),
        }
    }

    /// The bounds this pool keeps.
    #[must_use]
    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// Whether a connection made at `created` may still be reused at
    /// `now`.
    #[must_use]
    pub fn within_lifetime(&self, created: Instant, now: Instant) -> bool {
        now.saturating_duration_since(created) < self.config.lifetime
    }

    /// The idle connection for `key` that was used last, if one is within
    /// the bounds and `usable` accepts it (the runtime's check that it is
    /// still open). Every idle connection of `key` found past a bound or
    /// refused by `usable` on the way is closed.
    pub fn take(
        &mut self,
        key: &ConnectionKey,
        now: Instant,
        mut usable: impl FnMut(&mut C) -> bool,
    ) -> Option<Kept<C>> {
        let config = self.config;
        let list = self.idle.get_mut(key)?;
        let mut found = None;
        while let Some(mut kept) = list.pop() {
            let fresh = now.saturating_duration_since(kept.idle_since) < config.idle
                && now.saturating_duration_since(kept.created) < config.lifetime;
            if fresh && usable(&mut kept.conn) {
                found = Some(kept);
                break;
            }
        }
        if list.is_empty() {
            self.idle.remove(key);
        }
        found
    }

    /// Puts `conn` (made at `created`) back for `key`, idle from `now`. It
    /// is closed instead when it is past its lifetime or the pool keeps no
    /// connection; when `per_key` are kept already, the one idle longest is
    /// closed.
    pub fn put(&mut self, key: ConnectionKey, conn: C, created: Instant, now: Instant) {
        if self.config.per_key == 0 || !self.within_lifetime(created, now) {
            return;
        }
        let per_key = self.config.per_key;
        let list = self.idle.entry(key).or_default();
        list.push(Kept {
            conn,
            created,
            idle_since: now,
        });
        if list.len() > per_key {
            let excess = list.len() - per_key;
            list.drain(..excess);
        }
    }

    /// Closes every idle connection past a bound at `now`.
    pub fn purge(&mut self, now: Instant) {
        let config = self.config;
        self.idle.retain(|_, list| {
            list.retain(|k| {
                now.saturating_duration_since(k.idle_since) < config.idle
                    && now.saturating_duration_since(k.created) < config.lifetime
            });
            !list.is_empty()
        });
    }

    /// How many connections to open ahead for `key` (see
    /// [`Transmit::Connect`](crate::Transmit::Connect)) so that `wanted`
    /// are idle within their bounds or being opened, never more than the
    /// pool keeps per key; they count as being opened until
    /// [`ConnectionPool::ahead_done`].
    ///
    /// ```
    /// use std::time::Instant;
    /// use human_plus_core::{ConnectionPool, EgressPolicy, PoolConfig, RelayEndpoint, SurfaceInvitation};
    ///
    /// let inv = SurfaceInvitation::new("https://relay.test", "s_one", "0123456789abcdef", "x", "y")?;
    /// let policy = EgressPolicy::new(["relay.test"]).egress_proxy("http://egress.internal:3128");
    /// let key = RelayEndpoint::new(&inv, "c", &policy)?.connection_key();
    /// let mut pool: ConnectionPool<&str> = ConnectionPool::new(PoolConfig::default());
    /// let now = Instant::now();
    /// pool.put(key.clone(), "kept", now, now);
    /// assert_eq!(pool.reserve_ahead(&key, 2, now), 1, "one is kept already");
    /// assert_eq!(pool.reserve_ahead(&key, 2, now), 0, "one is being opened");
    /// pool.ahead_done(&key);
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    pub fn reserve_ahead(&mut self, key: &ConnectionKey, wanted: usize, now: Instant) -> usize {
        self.purge(now);
        let idle = self.idle.get(key).map_or(0, Vec::len);
        let opening = self.ahead.get(key).copied().unwrap_or(0);
        let open = wanted
            .min(self.config.per_key)
            .saturating_sub(idle + opening);
        if open > 0 {
            *self.ahead.entry(key.clone()).or_default() += open;
        }
        open
    }

    /// One connection reserved by [`ConnectionPool::reserve_ahead`] was
    /// opened (and put back) or could not be.
    pub fn ahead_done(&mut self, key: &ConnectionKey) {
        if let Some(n) = self.ahead.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.ahead.remove(key);
            }
        }
    }

    /// Closes every idle connection (what a manager's shutdown does).
    ///
    /// ```
    /// use std::time::Instant;
    /// use human_plus_core::{ConnectionPool, EgressPolicy, PoolConfig, RelayEndpoint, SurfaceInvitation};
    ///
    /// let inv = SurfaceInvitation::new("https://relay.test", "s_one", "0123456789abcdef", "x", "y")?;
    /// let policy = EgressPolicy::new(["relay.test"]).egress_proxy("http://egress.internal:3128");
    /// let key = RelayEndpoint::new(&inv, "c", &policy)?.connection_key();
    /// let mut pool: ConnectionPool<&str> = ConnectionPool::new(PoolConfig::default());
    /// let now = Instant::now();
    /// pool.put(key, "kept", now, now);
    /// pool.clear();
    /// assert_eq!(pool.idle_count(), 0);
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    pub fn clear(&mut self) {
        self.idle.clear();
    }

    /// How many idle connections are kept.
    #[must_use]
    pub fn idle_count(&self) -> usize {
        self.idle.values().map(Vec::len).sum()
    }

    /// When the next idle connection passes its idle bound (for a runtime
    /// that closes idle connections on a timer).
    #[must_use]
    pub fn next_expiry(&self) -> Option<Instant> {
        self.idle
            .values()
            .flatten()
            .map(|k| k.idle_since + self.config.idle)
            .min()
    }
}

#[cfg(test)]
mod tests {
    // A test's clock origin; the pool itself never reads the clock.
    #![allow(clippy::unwrap_used, clippy::disallowed_methods)]
    use std::time::Duration;

    use super::*;
    use crate::{EgressPolicy, RelayEndpoint, SurfaceInvitation};

    fn key(host: &str) -> ConnectionKey {
        let inv = SurfaceInvitation::new(
            format!("https://{host}"),
            "s_one",
            "0123456789abcdef",
            "x",
            "y",
        )
        .unwrap();
        let policy = EgressPolicy::new([host]).egress_proxy("http://egress.internal:3128");
        RelayEndpoint::new(&inv, "c", &policy)
            .unwrap()
            .connection_key()
    }

    #[test]
    fn keys_keep_connections_apart() {
        let t = Instant::now();
        let mut pool = ConnectionPool::new(PoolConfig::default());
        pool.put(key("a.test"), 1, t, t);
        assert!(pool.take(&key("b.test"), t, |_| true).is_none());
        assert_eq!(pool.take(&key("a.test"), t, |_| true).unwrap().conn, 1);
    }

    #[test]
    fn a_connection_found_closed_is_dropped_and_the_next_is_tried() {
        let t = Instant::now();
        let mut pool = ConnectionPool::new(PoolConfig::default());
        pool.put(key("a.test"), "old", t, t);
        pool.put(key("a.test"), "closed", t, t);
        let got = pool.take(&key("a.test"), t, |c| *c != "closed").unwrap();
        assert_eq!(got.conn, "old");
        assert_eq!(pool.idle_count(), 0);
    }

    #[test]
    fn lifetime_and_idle_bounds_and_the_cap_hold() {
        let t = Instant::now();
        let config = PoolConfig {
            idle: Duration::from_secs(4),
            lifetime: Duration::from_secs(60),
            per_key: 2,
        };
        let mut pool = ConnectionPool::new(config);
        // Past its lifetime: not even kept.
        pool.put(key("a.test"), 0, t, t + Duration::from_secs(61));
        assert_eq!(pool.idle_count(), 0);
        for n in 1..=3 {
            pool.put(key("a.test"), n, t, t);
        }
        assert_eq!(pool.idle_count(), 2, "the cap closes the oldest idle one");
        assert_eq!(pool.next_expiry(), Some(t + Duration::from_secs(4)));
        pool.purge(t + Duration::from_secs(5));
        assert_eq!(pool.idle_count(), 0);
        // Young enough to be idle, too old to be reused.
        pool.put(key("a.test"), 9, t, t + Duration::from_secs(58));
        assert!(
            pool.take(&key("a.test"), t + Duration::from_secs(60), |_| true)
                .is_none()
        );
        let mut none: ConnectionPool<u8> = ConnectionPool::new(PoolConfig::disabled());
        none.put(key("a.test"), 1, t, t);
        assert_eq!(none.idle_count(), 0);
    }
}
