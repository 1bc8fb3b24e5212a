//! The receive legs a manager keeps between operations, bounded like a
//! connection pool: at most so many, each closed once idle for so long,
//! the least recently used closed first.
//!
//! A kept leg is what makes a service's call one exchange (the POST and
//! its reply on a leg already open, the listing reused while provably
//! current) and what the person's page sees as the agent being there (one
//! `peer_joined` per leg, not one per call). Keeping one costs a socket
//! and its buffers here and a subscriber at the relay, so a replica that
//! served 100,000 conversations once must not keep 100,000: the bound and
//! the idle time are what hyper's pool (`pool_max_idle_per_host`,
//! `pool_idle_timeout`) and database pools (sqlx's `max_connections`,
//! `idle_timeout`) bound.
//!
//! [`KeptLegs`] is the data structure alone, clock-free: every method is
//! told the time (the manager passes its driver's clock, `D::now()`), and
//! hands back what it closed, so the caller drops it (closing the stream)
//! outside its lock.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// How many receive legs a manager keeps between operations by default:
/// 512.
///
/// A kept leg costs one socket and about 42 KiB in the process (about
/// 25 KiB at the relay). 512 is about 21 MiB per replica, and half of the
/// usual soft limit of 1,024 open files, leaving the rest for the POSTs'
/// kept connections, the store and the service's own sockets. hyper's
/// pool keeps any number per host (`pool_max_idle_per_host` unbounded),
/// bounded by its idle time alone; a database pool keeps few (sqlx: 10),
/// each connection being a server process. A relay leg is cheap at the
/// relay and dear only in file descriptors, hence a bound in between.
pub const DEFAULT_KEPT_LEGS: usize = 512;

/// How long a kept receive leg may go unused before it is closed by
/// default: 90 s, hyper's `pool_idle_timeout` (and so reqwest's).
///
/// Longer than the pause between the tool calls of one model turn (the
/// model's own latency, seconds to tens of seconds), so a turn's calls
/// share one leg and the page sees the agent join once; short enough that
/// an agent which stopped working leaves the person's page within a
/// minute and a half, instead of showing as present for as long as the
/// process runs. sqlx closes idle connections after 10 minutes, but a
/// database connection shows on nobody's screen.
pub const DEFAULT_KEPT_LEG_IDLE: Duration = Duration::from_secs(90);

/// The bounds on the receive legs a manager keeps between operations
/// (`HumanPlusBuilder::kept_legs`, `HumanPlusBuilder::kept_leg_idle`).
///
/// ```
/// use std::time::Duration;
/// use human_plus_runtime::{DEFAULT_KEPT_LEG_IDLE, DEFAULT_KEPT_LEGS, KeptLegBounds};
///
/// let bounds = KeptLegBounds::default();
/// assert_eq!((bounds.max, bounds.idle), (DEFAULT_KEPT_LEGS, DEFAULT_KEPT_LEG_IDLE));
/// assert!(!bounds.keeps_none());
/// assert!(KeptLegBounds { max: 0, idle: Duration::from_secs(90) }.keeps_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptLegBounds {
    /// At most this many legs are kept between operations (default
    /// [`DEFAULT_KEPT_LEGS`]); beyond it the least recently used is
    /// closed. Legs in use by a running operation are not counted.
    pub max: usize,
    /// A leg unused for this long is closed (default
    /// [`DEFAULT_KEPT_LEG_IDLE`]).
    pub idle: Duration,
}

impl Default for KeptLegBounds {
    fn default() -> Self {
        KeptLegBounds {
            max: DEFAULT_KEPT_LEGS,
            idle: DEFAULT_KEPT_LEG_IDLE,
        }
    }
}

impl KeptLegBounds {
    /// Whether these bounds keep no leg at all (a bound or an idle time of
    /// zero): every operation then opens its own leg and closes it.
    #[must_use]
    pub fn keeps_none(&self) -> bool {
        self.max == 0 || self.idle.is_zero()
    }
}

/// One kept value, with when it was last used and its place in the order
/// of use.
struct Slot<V> {
    value: V,
    used: Instant,
    seq: u64,
}

/// Values kept by key (a leg by attachment id), at most `max`, each for
/// at most `idle` since it was last put back, the least recently used
/// dropped first. Every method that may close something returns what it
/// closed.
pub(crate) struct KeptLegs<V> {
    bounds: KeptLegBounds,
    slots: HashMap<String, Slot<V>>,
    /// The keys in the order they were put back: the first is the least
    /// recently used.
    order: BTreeMap<u64, String>,
    next: u64,
}

impl<V> KeptLegs<V> {
    /// An empty set under `bounds`.
    pub(crate) fn new(bounds: KeptLegBounds) -> Self {
        KeptLegs {
            bounds,
            slots: HashMap::new(),
            order: BTreeMap::new(),
            next: 0,
        }
    }

    /// How many are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Takes the value kept for `key` for an operation (it is not kept
    /// while the operation runs), unless it was idle too long: then it is
    /// closed, with every other one idle too long, and `None` is taken.
    pub(crate) fn take(&mut self, key: &str, now: Instant) -> (Option<V>, Vec<V>) {
        let closed = self.expire(now);
        let taken = self.slots.remove(key).map(|slot| {
            self.order.remove(&slot.seq);
            slot.value
        });
        (taken, closed)
    }

    /// Keeps `value` for `key`, used `now` (the most recently used). What
    /// is closed: a value already kept for `key`, those idle too long, and
    /// the least recently used beyond the bound.
    pub(crate) fn put(&mut self, key: String, value: V, now: Instant) -> Vec<V> {
        let mut closed = self.expire(now);
        if self.bounds.keeps_none() {
            closed.push(value);
            return closed;
        }
        let seq = self.next;
        self.next += 1;
        self.order.insert(seq, key.clone());
        let slot = Slot {
            value,
            used: now,
            seq,
        };
        if let Some(old) = self.slots.insert(key, slot) {
            self.order.remove(&old.seq);
            closed.push(old.value);
        }
        while self.slots.len() > self.bounds.max {
            match self.pop_oldest() {
                Some(value) => closed.push(value),
                None => break,
            }
        }
        closed
    }

    /// The value kept for `key`, unless it was idle too long (then it is
    /// closed, as [`KeptLegs::take`] closes it). Looking does not count as
    /// a use.
    pub(crate) fn peek(&mut self, key: &str, now: Instant) -> (Option<&mut V>, Vec<V>) {
        let closed = self.expire(now);
        (self.slots.get_mut(key).map(|slot| &mut slot.value), closed)
    }

    /// Closes every value idle for at least the idle time at `now`, the
    /// least recently used first.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<V> {
        let mut closed = Vec::new();
        while let Some((_, key)) = self.order.first_key_value() {
            let idle = self
                .slots
                .get(key)
                .is_none_or(|slot| now.saturating_duration_since(slot.used) >= self.bounds.idle);
            if !idle {
                break;
            }
            if let Some(value) = self.pop_oldest() {
                closed.push(value);
            }
        }
        closed
    }

    /// When the least recently used value falls idle (and is closed by
    /// the next [`KeptLegs::expire`] at or after it); `None` when none is
    /// kept, or the idle time never ends.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        let (_, key) = self.order.first_key_value()?;
        self.slots.get(key)?.used.checked_add(self.bounds.idle)
    }

    /// Whether none is kept.
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Closes everything (a shutdown).
    pub(crate) fn drain(&mut self) -> Vec<V> {
        self.order.clear();
        self.slots.drain().map(|(_, slot)| slot.value).collect()
    }

    /// Removes the least recently used.
    fn pop_oldest(&mut self) -> Option<V> {
        let (_, key) = self.order.pop_first()?;
        self.slots.remove(&key).map(|slot| slot.value)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn legs(max: usize, idle_s: u64) -> KeptLegs<&'static str> {
        KeptLegs::new(KeptLegBounds {
            max,
            idle: Duration::from_secs(idle_s),
        })
    }

    fn at(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn a_kept_value_is_taken_once() {
        let t0 = Instant::now();
        let mut k = legs(4, 90);
        assert!(k.put("a".into(), "leg a", t0).is_empty());
        assert_eq!(k.take("a", at(t0, 1)), (Some("leg a"), vec![]));
        assert_eq!(k.take("a", at(t0, 1)), (None, vec![]));
        assert_eq!(k.len(), 0);
    }

    #[test]
    fn idle_past_the_bound_is_closed_not_taken() {
        let t0 = Instant::now();
        let mut k = legs(4, 90);
        k.put("a".into(), "leg a", t0);
        k.put("b".into(), "leg b", at(t0, 60));
        // At 89 s a is still kept.
        assert_eq!(k.peek("a", at(t0, 89)).0.copied(), Some("leg a"));
        // At 90 s it is closed; b is not.
        assert_eq!(k.take("a", at(t0, 90)), (None, vec!["leg a"]));
        assert_eq!(k.len(), 1);
        assert_eq!(k.expire(at(t0, 149)), Vec::<&str>::new());
        assert_eq!(k.expire(at(t0, 150)), vec!["leg b"]);
        assert_eq!(k.len(), 0);
    }

    #[test]
    fn a_use_resets_the_idle_time() {
        let t0 = Instant::now();
        let mut k = legs(4, 90);
        k.put("a".into(), "leg a", t0);
        let (leg, _) = k.take("a", at(t0, 80));
        k.put("a".into(), leg.unwrap(), at(t0, 81));
        assert_eq!(k.take("a", at(t0, 170)), (Some("leg a"), vec![]));
    }

    #[test]
    fn looking_is_not_a_use() {
        let t0 = Instant::now();
        let mut k = legs(4, 90);
        k.put("a".into(), "leg a", t0);
        assert!(k.peek("a", at(t0, 80)).0.is_some());
        let (seen, closed) = k.peek("a", at(t0, 95));
        assert!(seen.is_none());
        assert_eq!(closed, vec!["leg a"]);
    }

    #[test]
    fn the_least_recently_used_is_closed_at_the_bound() {
        let t0 = Instant::now();
        let mut k = legs(2, 90);
        k.put("a".into(), "leg a", t0);
        k.put("b".into(), "leg b", at(t0, 1));
        // a is used again: b is now the least recently used.
        let (a, _) = k.take("a", at(t0, 2));
        k.put("a".into(), a.unwrap(), at(t0, 3));
        assert_eq!(k.put("c".into(), "leg c", at(t0, 4)), vec!["leg b"]);
        assert_eq!(k.len(), 2);
        assert_eq!(k.take("b", at(t0, 5)).0, None);
        assert_eq!(k.take("a", at(t0, 5)).0, Some("leg a"));
        assert_eq!(k.take("c", at(t0, 5)).0, Some("leg c"));
    }

    #[test]
    fn a_second_leg_for_one_key_replaces_the_first() {
        let t0 = Instant::now();
        let mut k = legs(2, 90);
        k.put("a".into(), "old", t0);
        assert_eq!(k.put("a".into(), "new", at(t0, 1)), vec!["old"]);
        assert_eq!(k.len(), 1);
        // The stale order entry of the old one is gone: b and c fit.
        k.put("b".into(), "leg b", at(t0, 2));
        assert_eq!(k.put("c".into(), "leg c", at(t0, 3)), vec!["new"]);
    }

    #[test]
    fn zero_keeps_none() {
        let t0 = Instant::now();
        let mut k = legs(0, 90);
        assert_eq!(k.put("a".into(), "leg a", t0), vec!["leg a"]);
        let mut k = legs(4, 0);
        assert_eq!(k.put("a".into(), "leg a", t0), vec!["leg a"]);
        assert_eq!(k.len(), 0);
    }

    #[test]
    fn a_huge_idle_time_never_overflows() {
        let t0 = Instant::now();
        let mut k = KeptLegs::new(KeptLegBounds {
            max: 1,
            idle: Duration::MAX,
        });
        k.put("a".into(), "leg a", t0);
        assert_eq!(k.take("a", at(t0, 1_000_000)).0, Some("leg a"));
    }

    #[test]
    fn the_next_expiry_is_the_least_recently_used_ones() {
        let t0 = Instant::now();
        let mut k = legs(4, 10);
        assert_eq!(k.next_expiry(), None);
        assert!(k.is_empty());
        assert!(k.put("a".into(), "A", at(t0, 0)).is_empty());
        assert!(k.put("b".into(), "B", at(t0, 3)).is_empty());
        assert_eq!(k.next_expiry(), Some(at(t0, 10)));
        assert_eq!(k.expire(at(t0, 10)), vec!["A"]);
        assert_eq!(k.next_expiry(), Some(at(t0, 13)));
        let mut forever = KeptLegs::new(KeptLegBounds {
            max: 4,
            idle: Duration::MAX,
        });
        assert!(forever.put("a".into(), "A", t0).is_empty());
        assert_eq!(forever.next_expiry(), None);
    }

    #[test]
    fn drain_closes_everything() {
        let t0 = Instant::now();
        let mut k = legs(4, 90);
        k.put("a".into(), "leg a", t0);
        k.put("b".into(), "leg b", t0);
        let mut all = k.drain();
        all.sort_unstable();
        assert_eq!(all, vec!["leg a", "leg b"]);
        assert_eq!(k.len(), 0);
        assert!(k.put("c".into(), "leg c", t0).is_empty());
    }

    #[test]
    fn many_keys_stay_within_the_bound() {
        let t0 = Instant::now();
        let mut k: KeptLegs<u32> = KeptLegs::new(KeptLegBounds {
            max: 100,
            idle: Duration::from_secs(90),
        });
        let mut closed = 0;
        for i in 0..10_000u32 {
            closed += k.put(format!("conversation:{i}"), i, t0).len();
        }
        assert_eq!(k.len(), 100);
        assert_eq!(closed, 9_900);
        // The most recent hundred are the ones kept.
        assert_eq!(k.take("conversation:9999", t0).0, Some(9_999));
        assert_eq!(k.take("conversation:9899", t0).0, None);
        assert_eq!(k.take("conversation:9900", t0).0, Some(9_900));
    }
}
