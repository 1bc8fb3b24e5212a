//! The Redis store against a real Redis: one server, a TLS server or a
//! cluster, whichever `HUMAN_PLUS_REDIS_URL` names (see `common`; default
//! `redis://127.0.0.1:6379/`; `.ci/redis` starts all three and CI runs
//! these tests against each). These tests are compiled only with the
//! `redis` feature, and a test that cannot reach Redis FAILS: it never
//! passes by skipping. Every test works under its own random key prefix and
//! deletes its keys at the end.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{Raw, Target};
use human_plus_core::{
    Entropy, Error, OwnerKey, Participant, SeededEntropy, SurfaceAttachment, SurfaceInvitation,
    SurfaceRevision,
};
use human_plus_store::{AttachmentStore, Keyring, RedisAttachmentStore, RedisConfig};

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).unwrap();
    human_plus_core::hex(&b)
}

/// A test's own key prefix; its keys are deleted when it ends.
struct Scope {
    prefix: String,
    target: Target,
    raw: Raw,
}

impl Scope {
    fn new() -> Scope {
        let target = Target::generic();
        let raw = target.raw();
        Scope {
            prefix: format!("human-plus-test:{}:", random_hex(6)),
            target,
            raw,
        }
    }

    fn config(&self, keyring: Keyring) -> RedisConfig {
        self.target.config(keyring).prefix(self.prefix.clone())
    }

    fn store(&self, keyring: Keyring) -> RedisAttachmentStore {
        RedisAttachmentStore::open(self.config(keyring)).unwrap()
    }

    /// Every key under the prefix.
    fn keys(&mut self) -> Vec<String> {
        let pattern = format!("{}*", self.prefix);
        self.raw.keys(&pattern)
    }

    /// The raw bytes of every key under the prefix, whatever its type.
    fn raw_bytes(&mut self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for key in self.keys() {
            let kind: String = redis::cmd("TYPE").arg(&key).query(self.raw.like()).unwrap();
            let bytes: Vec<u8> = match kind.as_str() {
                "hash" => {
                    let pairs: Vec<Vec<u8>> = redis::cmd("HGETALL")
                        .arg(&key)
                        .query(self.raw.like())
                        .unwrap();
                    pairs.concat()
                }
                "string" => redis::cmd("GET").arg(&key).query(self.raw.like()).unwrap(),
                other => panic!("unexpected type {other} at {key}"),
            };
            out.push((key, bytes));
        }
        out
    }

    /// A record's generation (`"g"`), trail of write ids (`"t"`) or
    /// envelope (`"v"`), from its one string
    /// `<generation>:<trail>:<envelope>`.
    fn part(&mut self, key: &str, which: &str) -> Vec<u8> {
        let raw: Vec<u8> = redis::cmd("GET").arg(key).query(self.raw.like()).unwrap();
        let (g, t, v) = split_record(&raw);
        match which {
            "g" => g.to_vec(),
            "t" => t.to_vec(),
            _ => v.to_vec(),
        }
    }

    /// Replaces a record's generation or envelope in place (its trail and
    /// TTL kept); a missing record starts as `::`.
    fn set_part(&mut self, key: &str, which: &str, value: &[u8]) {
        let raw: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(self.raw.like()).unwrap();
        let raw = raw.unwrap_or_else(|| b"::".to_vec());
        let (g, t, v) = split_record(&raw);
        let joined = match which {
            "g" => [value, b":", t, b":", v].concat(),
            _ => [g, b":", t, b":", value].concat(),
        };
        self.set_raw(key, &joined);
    }

    fn set_raw(&mut self, key: &str, value: &[u8]) {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("KEEPTTL")
            .query(self.raw.like())
            .unwrap();
    }

    fn pttl(&mut self, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query(self.raw.like()).unwrap()
    }
}

/// A record string's generation, trail and envelope.
fn split_record(raw: &[u8]) -> (&[u8], &[u8], &[u8]) {
    let first = raw.iter().position(|b| *b == b':').expect("a generation");
    let second = first
        + 1
        + raw[first + 1..]
            .iter()
            .position(|b| *b == b':')
            .expect("a trail");
    (&raw[..first], &raw[first + 1..second], &raw[second + 1..])
}

impl Drop for Scope {
    fn drop(&mut self) {
        let keys = self.keys();
        self.raw.del(&keys);
    }
}

/// A record carrying a distinctive random token.
fn record(token: &str) -> SurfaceAttachment {
    let inv = SurfaceInvitation::new(
        "https://relay.example",
        "demo_001",
        token,
        "sheet:one",
        "Demo",
    )
    .unwrap();
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed).unwrap();
    SurfaceAttachment::mint(
        OwnerKey::of("owner:one").unwrap(),
        inv,
        Participant::new("agent:one", "One", "#000"),
        &mut SeededEntropy::new(u64::from_le_bytes(seed)),
    )
}

fn secret_token() -> String {
    format!("SECRET-{}", random_hex(20))
}

fn revise(r: &mut SurfaceAttachment, token: &str) {
    assert!(r.record_revision(SurfaceRevision::observed(token, "t").unwrap()));
}

fn key1() -> Keyring {
    Keyring::new("k1", [0x11; 32]).unwrap()
}

#[test]
fn put_is_compare_and_set_with_a_sliding_ttl() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let store =
        RedisAttachmentStore::open(scope.config(key1()).ttl(Duration::from_secs(60))).unwrap();
    let mut r = record(&secret_token());
    assert_eq!(store.get(r.id()).unwrap(), None);
    assert!(matches!(
        store.put(&r, Some(0)),
        Err(Error::StoreConflict {
            expected: Some(0),
            found: None
        })
    ));
    store.put(&r, None).unwrap();
    assert!(matches!(
        store.put(&r, None),
        Err(Error::StoreConflict {
            expected: None,
            found: Some(0)
        })
    ));
    assert_eq!(store.get(r.id()).unwrap().unwrap(), r);
    let key = store.record_key(r.id());
    let ttl = scope.pttl(&key);
    assert!(ttl > 59_000 && ttl <= 60_000, "{ttl}");

    revise(&mut r, "r1");
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(5_000)
        .query(scope.raw.like())
        .unwrap();
    store.put(&r, Some(0)).unwrap();
    let ttl = scope.pttl(&key);
    assert!(ttl > 59_000, "every write re-sets the TTL: {ttl}");
    assert_eq!(scope.part(&key, "g"), b"1");
    assert_eq!(store.get(r.id()).unwrap().unwrap().generation(), 1);

    // A stale writer never overwrites.
    let mut stale = r.clone();
    revise(&mut stale, "r-stale");
    assert!(matches!(
        store.put(&stale, Some(0)),
        Err(Error::StoreConflict {
            expected: Some(0),
            found: Some(1)
        })
    ));
    assert_eq!(store.get(r.id()).unwrap().unwrap(), r);
}

#[test]
fn the_token_is_not_readable_in_redis() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let store = scope.store(key1());
    let token = secret_token();
    let mut r = record(&token);
    store.put(&r, None).unwrap();
    let guard = store
        .lock(r.id(), Duration::from_secs(30), Duration::from_secs(1))
        .unwrap();
    revise(&mut r, "r1");
    store.put_holding(&guard, &r, Some(0)).unwrap();

    let raw = scope.raw_bytes();
    assert_eq!(raw.len(), 2, "the record and its lock: {raw:?}");
    for (key, bytes) in &raw {
        for needle in [token.as_bytes(), b"SECRET-", b"relay.example", b"owner:one"] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{key} holds {:?} in the clear",
                String::from_utf8_lossy(needle)
            );
        }
        assert!(!key.contains(&token));
    }
    // And the store still reads it back whole.
    let back = store.get(r.id()).unwrap().unwrap();
    assert_eq!(back.invitation().token().expose(), token);
}

#[test]
fn a_record_that_cannot_be_opened_is_an_error_never_a_miss() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let store = scope.store(key1());
    let token = secret_token();
    let r = record(&token);
    store.put(&r, None).unwrap();
    let key = store.record_key(r.id());
    let refused = |store: &RedisAttachmentStore, why: &str| {
        let e = store.get(r.id()).unwrap_err();
        assert!(matches!(e, Error::Store(_)), "{why}: {e:?}");
        let text = e.to_string();
        assert!(text.contains(r.id()), "{why}: {text}");
        assert!(!text.contains(&token), "{why}: the token leaked");
        text
    };

    // A wrong key under the same id.
    let wrong = scope.store(Keyring::new("k1", [0x22; 32]).unwrap());
    assert!(refused(&wrong, "wrong key").contains("authentication failed"));
    // A keyring without the record's key id.
    let unknown = scope.store(Keyring::new("k7", [0x11; 32]).unwrap());
    assert!(
        refused(&unknown, "unknown key id").contains("\"k1\", which this keyring does not hold")
    );

    let original = scope.part(&key, "v");
    // A flipped byte anywhere in the nonce, the ciphertext or the tag.
    for i in [4, 4 + 24 + 3, original.len() - 1] {
        let mut tampered = original.clone();
        tampered[i] ^= 0x40;
        scope.set_part(&key, "v", &tampered);
        assert!(refused(&store, "tampered").contains("authentication failed"));
    }
    // A truncated envelope.
    scope.set_part(&key, "v", &original[..20]);
    assert!(refused(&store, "truncated").contains("truncated"));
    // Another generation beside intact bytes (bound by the AAD).
    scope.set_part(&key, "v", &original);
    scope.set_part(&key, "g", b"5");
    assert!(refused(&store, "generation").contains("authentication failed"));
    scope.set_part(&key, "g", b"0");
    assert_eq!(store.get(r.id()).unwrap().unwrap(), r);

    // A record moved under another attachment's key.
    let other = record(&secret_token());
    let other_key = store.record_key(other.id());
    scope.set_part(&other_key, "g", b"0");
    scope.set_part(&other_key, "v", &original);
    let e = store.get(other.id()).unwrap_err();
    assert!(e.to_string().contains("authentication failed"), "{e}");

    // Half a record, and a key of another type: errors, and never
    // overwritten by an insert.
    scope.set_raw(&key, b"0");
    assert!(refused(&store, "half").contains("malformed"));
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("not ours")
        .query(scope.raw.like())
        .unwrap();
    assert!(matches!(store.get(r.id()), Err(Error::Store(_))));
    assert!(matches!(store.put(&r, None), Err(Error::Store(_))));
    let still: String = redis::cmd("GET").arg(&key).query(scope.raw.like()).unwrap();
    assert_eq!(still, "not ours");
}

#[test]
fn a_record_of_the_earlier_layout_is_read_and_written_over_as_one_string() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let store = scope.store(key1());
    let r = record(&secret_token());
    store.put(&r, None).unwrap();
    let key = store.record_key(r.id());
    let kind = |scope: &mut Scope| -> String {
        redis::cmd("TYPE")
            .arg(&key)
            .query(scope.raw.like())
            .unwrap()
    };
    assert_eq!(kind(&mut scope), "string");
    // The same record as a release before issue 43 stored it: a hash.
    let (g, v) = (scope.part(&key, "g"), scope.part(&key, "v"));
    let _: i64 = redis::cmd("DEL").arg(&key).query(scope.raw.like()).unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg(&key)
        .arg("g")
        .arg(&g)
        .arg("v")
        .arg(&v)
        .query(scope.raw.like())
        .unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(5_000)
        .query(scope.raw.like())
        .unwrap();

    // Read by a get and by the lock's script.
    assert_eq!(store.get(r.id()).unwrap().as_ref(), Some(&r));
    let lease = Duration::from_secs(30);
    let (guard, loaded) = store.lock_and_get(r.id(), lease, Duration::ZERO).unwrap();
    assert_eq!(loaded.as_ref(), Some(&r));
    // A write on another generation is refused, the hash left as it was.
    let mut next = r.clone();
    revise(&mut next, "r1");
    assert!(matches!(
        store.put(&next, Some(5)),
        Err(Error::StoreConflict {
            expected: Some(5),
            found: Some(0)
        })
    ));
    assert_eq!(kind(&mut scope), "hash");
    // The next write writes it over as one string, with the record's TTL.
    store.put_and_release(&guard, &next, Some(0)).unwrap();
    drop(guard);
    assert_eq!(kind(&mut scope), "string");
    assert_eq!(scope.part(&key, "g"), b"1");
    let ttl = scope.pttl(&key);
    assert!(ttl > 59_000, "{ttl}");
    assert_eq!(store.get(r.id()).unwrap().as_ref(), Some(&next));

    // A hash that holds no generation is an error, and left as it was.
    let other = record(&secret_token());
    let other_key = store.record_key(other.id());
    let _: i64 = redis::cmd("HSET")
        .arg(&other_key)
        .arg("x")
        .arg("1")
        .query(scope.raw.like())
        .unwrap();
    assert!(matches!(store.put(&other, None), Err(Error::Store(_))));
    let x: String = redis::cmd("HGET")
        .arg(&other_key)
        .arg("x")
        .query(scope.raw.like())
        .unwrap();
    assert_eq!(x, "1");
}

#[test]
fn rotation_reads_old_records_and_reseals_on_write() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let old_ring = key1();
    let old = scope.store(old_ring.clone());
    let mut r = record(&secret_token());
    old.put(&r, None).unwrap();
    let key = old.record_key(r.id());
    assert_eq!(&scope.part(&key, "v")[1..4], b"\x02k1");

    let rotated = scope.store(old_ring.rotate("k2", [0x33; 32]).unwrap());
    let loaded = rotated.get(r.id()).unwrap().unwrap();
    assert_eq!(loaded, r);
    revise(&mut r, "r1");
    rotated.put(&r, Some(loaded.generation())).unwrap();
    assert_eq!(&scope.part(&key, "v")[1..4], b"\x02k2");
    assert_eq!(rotated.get(r.id()).unwrap().unwrap(), r);

    // A worker still on the old keyring refuses the new record loudly.
    let e = old.get(r.id()).unwrap_err();
    assert!(e.to_string().contains("\"k2\""), "{e}");
}

#[test]
fn deterministic_nonces_can_be_injected() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let seeded = |seed| {
        RedisAttachmentStore::open(scope.config(key1()).nonce_source(SeededEntropy::new(seed)))
            .unwrap()
    };
    let (a, b) = (seeded(7), seeded(7));
    let r = record(&secret_token());
    a.put(&r, None).unwrap();
    let key = a.record_key(r.id());
    let first = scope.part(&key, "v");
    let _: i64 = redis::cmd("DEL").arg(&key).query(scope.raw.like()).unwrap();
    b.put(&r, None).unwrap();
    assert_eq!(scope.part(&key, "v"), first);
    let mut expected_nonce = [0u8; 24];
    SeededEntropy::new(7).fill_bytes(&mut expected_nonce);
    assert_eq!(&first[4..28], &expected_nonce);
}

#[test]
fn lock_is_mutual_exclusion_released_by_compare_and_delete() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let store = scope.store(key1());
    let g = store
        .lock("a", Duration::from_secs(30), Duration::from_secs(1))
        .unwrap();
    let held: String = redis::cmd("GET")
        .arg(store.lock_key("a"))
        .query(scope.raw.like())
        .unwrap();
    assert_eq!(held, g.token());
    let pttl = scope.pttl(&store.lock_key("a"));
    assert!(pttl > 29_000 && pttl <= 30_000, "{pttl}");

    let t = Instant::now();
    let e = store
        .lock("a", Duration::from_secs(30), Duration::from_millis(150))
        .unwrap_err();
    assert!(t.elapsed() >= Duration::from_millis(150));
    assert!(t.elapsed() < Duration::from_secs(2));
    // Busy; the holder took its lock a moment ago, so a retry may succeed
    // within one renewal interval of its lease (a third of it).
    assert_eq!(e.code(), "attachment_busy", "{e}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(10)));
    let other = store
        .lock("b", Duration::from_secs(30), Duration::ZERO)
        .unwrap();
    drop(g);
    assert_eq!(scope.keys(), vec![store.lock_key("b")]);
    let again = store
        .lock("a", Duration::from_secs(30), Duration::ZERO)
        .unwrap();
    drop((other, again));
    assert!(scope.keys().is_empty());
}

#[test]
fn a_holder_that_locks_again_at_once_does_not_starve_a_waiter() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let (busy, patient) = (scope.store(key1()), scope.store(key1()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hog = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut held = 0;
            // Locks again the moment it releases, as a worker on a loop.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _g = busy
                    .lock("hot", Duration::from_secs(30), Duration::from_secs(30))
                    .unwrap();
                thread::sleep(Duration::from_millis(5));
                held += 1;
            }
            held
        })
    };
    thread::sleep(Duration::from_millis(20));
    let mut waits = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        // The hog locks again within a round trip of releasing, while a
        // waiter polls every few ms; the place next in line gives the
        // waiter the lock at the hog's next release (a wait of about one
        // hold), instead of whenever its poll lands in the gap.
        let g = patient
            .lock("hot", Duration::from_secs(30), Duration::from_secs(1))
            .unwrap();
        waits.push(t.elapsed());
        thread::sleep(Duration::from_millis(5));
        drop(g);
        thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let held = hog.join().unwrap();
    assert!(held >= 20, "the hog ran between the waiter's turns: {held}");
    println!(
        "waiter's lock waits against a hog: max {:?}",
        waits.iter().max().unwrap()
    );
    assert!(scope.keys().is_empty(), "no lock or place in line is left");
}

/// Issue 43: the manager's two store steps. The lock is taken with the
/// record read in the same script, and the record is written with the lock
/// given back in the same script; the generation fences the write as
/// before (a conflict still gives the lock back), a lost lock is not given
/// back (it is another worker's), and a waiter next in line is handed the
/// lock by the put, as by a release.
#[test]
fn the_lock_loads_the_record_and_the_put_gives_the_lock_back() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let (one, two) = (scope.store(key1()), scope.store(key1()));
    let r = record(&secret_token());
    one.put(&r, None).unwrap();
    let lease = Duration::from_secs(30);

    // Taken and loaded in one step; the lock is held.
    let (g, loaded) = one.lock_and_get(r.id(), lease, Duration::ZERO).unwrap();
    assert_eq!(loaded.as_ref(), Some(&r));
    assert!(
        two.lock(r.id(), lease, Duration::ZERO)
            .unwrap_err()
            .is_busy()
    );
    // Written and given back in one step.
    let mut next = loaded.unwrap();
    revise(&mut next, "r1");
    one.put_and_release(&g, &next, Some(0)).unwrap();
    drop(g);
    assert_eq!(two.get(r.id()).unwrap().as_ref(), Some(&next));

    // A conflict is answered, and the lock given back all the same.
    let (g, _) = two.lock_and_get(r.id(), lease, Duration::ZERO).unwrap();
    let e = two.put_and_release(&g, &next, Some(0)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::StoreConflict {
                expected: Some(0),
                found: Some(1)
            }
        ),
        "{e}"
    );
    let (g, _) = one.lock_and_get(r.id(), lease, Duration::ZERO).unwrap();
    // A missing record: the lock is taken, nothing is loaded.
    let (other, none) = two
        .lock_and_get("surface_missing", lease, Duration::ZERO)
        .unwrap();
    assert!(none.is_none());
    drop(other);

    // A waiter next in line is handed the lock by the put (not whoever
    // asks first), and the put's own lock is not left behind.
    let waiter = {
        let (two, id) = (two.clone(), r.id().to_owned());
        thread::spawn(move || {
            let (w, seen) = two
                .lock_and_get(&id, lease, Duration::from_secs(10))
                .unwrap();
            (w, seen.unwrap().generation())
        })
    };
    thread::sleep(Duration::from_millis(150));
    revise(&mut next, "r2");
    one.put_and_release(&g, &next, Some(1)).unwrap();
    drop(g);
    let (w, seen) = waiter.join().unwrap();
    assert_eq!(seen, 2, "the waiter loads what the put wrote");

    // A holder whose lock was taken over: its put is fenced by the
    // generation alone (as a manager's put was), and it gives back nothing.
    two.release(&w).unwrap();
    drop(w);
    let (late, _) = one
        .lock_and_get(r.id(), Duration::from_millis(100), Duration::ZERO)
        .unwrap();
    thread::sleep(Duration::from_millis(200));
    let (current, _) = two.lock_and_get(r.id(), lease, Duration::ZERO).unwrap();
    let e = one.put_and_release(&late, &next, Some(1)).unwrap_err();
    assert!(matches!(e, Error::StoreConflict { .. }), "{e}");
    drop(late);
    assert!(
        one.lock(r.id(), lease, Duration::ZERO)
            .unwrap_err()
            .is_busy()
    );
    revise(&mut next, "r3");
    two.put_and_release(&current, &next, Some(2)).unwrap();
    drop(current);
    // No lock or place left; the late write's refusal noted, for a retry
    // of it to find (it expires).
    let refusals = format!("{}#refused", one.lock_key(r.id()));
    assert!(scope.pttl(&refusals) > 0);
    let mut expected = vec![one.record_key(r.id()), refusals];
    expected.sort();
    let mut left = scope.keys();
    left.sort();
    assert_eq!(left, expected, "no lock or place left");
}

#[test]
fn a_holder_whose_lease_expired_cannot_write() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let worker_one = scope.store(key1());
    let worker_two = scope.store(key1());
    let r = record(&secret_token());
    worker_one.put(&r, None).unwrap();

    // Worker one locks with a short lease, loads, and stalls past it.
    let late = worker_one
        .lock(r.id(), Duration::from_millis(200), Duration::ZERO)
        .unwrap();
    let mut late_view = worker_one.get(r.id()).unwrap().unwrap();
    revise(&mut late_view, "r-late");

    // Worker two waits for the lease to run out, takes over and writes.
    let t = Instant::now();
    let current = worker_two
        .lock(r.id(), Duration::from_secs(30), Duration::from_secs(5))
        .unwrap();
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(150), "{waited:?}");
    let mut fresh = worker_two.get(r.id()).unwrap().unwrap();
    revise(&mut fresh, "r-fresh");
    worker_two.put_holding(&current, &fresh, Some(0)).unwrap();

    // Worker one's write is fenced by the generation ...
    assert!(matches!(
        worker_one.put(&late_view, Some(0)),
        Err(Error::StoreConflict {
            expected: Some(0),
            found: Some(1)
        })
    ));
    // ... and, holding its stale guard, by the lock token as well (even
    // were the generation to match).
    let e = worker_one.put_holding(&late, &fresh, Some(1)).unwrap_err();
    assert!(e.to_string().contains("no longer holds the lock"), "{e}");
    // Its late release does not free worker two's lock.
    drop(late);
    assert!(
        worker_one
            .lock(r.id(), Duration::from_secs(30), Duration::ZERO)
            .is_err()
    );
    assert_eq!(worker_two.get(r.id()).unwrap().unwrap(), fresh);
    drop(current);
    assert!(scope.keys().len() == 1);
}

#[test]
fn a_crashed_holders_lock_frees_after_its_lease() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let scope = Scope::new();
    let store = scope.store(key1());
    let lease = Duration::from_millis(400);
    let t = Instant::now();
    // A worker that dies holding the lock never runs its release.
    std::mem::forget(store.lock("crashed", lease, Duration::ZERO).unwrap());
    assert!(store.lock("crashed", lease, Duration::ZERO).is_err());
    let next = store
        .lock("crashed", Duration::from_secs(30), Duration::from_secs(5))
        .unwrap();
    let freed = t.elapsed();
    assert!(freed >= Duration::from_millis(350), "{freed:?}");
    assert!(freed < Duration::from_secs(2), "{freed:?}");
    drop(next);
}

/// Every `EVALSHA` naming `key` that one server runs while this lives,
/// read from `MONITOR` on a connection of its own (so other tests'
/// commands on the same server are not counted). One server only.
struct Monitor {
    seen: Arc<std::sync::Mutex<Vec<String>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    reader: Option<thread::JoinHandle<()>>,
}

impl Monitor {
    fn start(url: &str, key: &str) -> Monitor {
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        let _: String = redis::cmd("MONITOR").query(&mut conn).unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let quoted = format!("\"{key}\"");
        let reader = {
            let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
            thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    match conn.recv_response() {
                        Ok(redis::Value::SimpleString(line)) => {
                            let sent = line.contains("\"EVALSHA\"") || line.contains("\"evalsha\"");
                            if sent && line.contains(&quoted) {
                                seen.lock().unwrap().push(line);
                            }
                        }
                        Ok(_) => {}
                        Err(e) if e.is_timeout() => {}
                        Err(e) => panic!("MONITOR: {e}"),
                    }
                }
            })
        };
        Monitor {
            seen,
            stop,
            reader: Some(reader),
        }
    }

    /// How many were seen (waiting a moment for the last lines). The
    /// reader's timeout is long: one that fires inside a line loses it.
    fn count(&mut self) -> usize {
        thread::sleep(Duration::from_millis(200));
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        self.seen.lock().unwrap().len()
    }
}

#[test]
fn a_lease_is_renewed_only_while_its_holder_has_the_lock() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let store = scope.store(key1());
    let key = store.lock_key("a");
    let g = store
        .lock("a", Duration::from_secs(2), Duration::ZERO)
        .unwrap();
    assert!(scope.pttl(&key) <= 2_000);
    assert!(store.renew(&g, Duration::from_secs(30)).unwrap());
    let renewed = scope.pttl(&key);
    assert!(renewed > 29_000 && renewed <= 30_000, "{renewed}");
    // Its lease ran out and another worker took the lock: the late holder
    // can neither renew nor free its successor's lock.
    let _: i64 = redis::cmd("DEL").arg(&key).query(scope.raw.like()).unwrap();
    let next = store
        .lock("a", Duration::from_secs(10), Duration::ZERO)
        .unwrap();
    assert!(!store.renew(&g, Duration::from_secs(30)).unwrap());
    assert!(
        scope.pttl(&key) <= 10_000,
        "the successor's lease is untouched"
    );
    store.release(&g).unwrap();
    drop(g);
    let held: String = redis::cmd("GET").arg(&key).query(scope.raw.like()).unwrap();
    assert_eq!(held, next.token());
    // (The release took it and put it back in one step, with the whole
    // lease its value names: never less than it had left, never without
    // one.)
    let left = scope.pttl(&key);
    assert!(left > 9_000 && left <= 10_000, "{left}");
    // Given back explicitly: free at once; its drop frees nothing more.
    store.release(&next).unwrap();
    assert!(scope.keys().is_empty());
    let third = store
        .lock("a", Duration::from_secs(10), Duration::ZERO)
        .unwrap();
    drop(next);
    assert_eq!(scope.keys(), vec![key]);
    drop(third);
}

#[test]
fn a_waiter_behind_a_dead_holder_waits_cheaply_and_takes_over_when_its_lease_ends() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let store = scope.store(key1());
    let key = store.lock_key("dead");
    let single = match &scope.target {
        Target::Single(url) if !scope.target.is_tls() => Some(url.clone()),
        _ => None,
    };
    let mut monitor = single.as_deref().map(|url| Monitor::start(url, &key));
    // Another process's lock, leased for 1.5 s, whose holder died just
    // after taking it: nobody renews it.
    let lease = Duration::from_millis(1_500);
    let _: String = redis::cmd("SET")
        .arg(&key)
        .arg("0123456789abcdef0123456789abcdef.1500")
        .arg("PX")
        .arg(1_500)
        .query(scope.raw.like())
        .unwrap();
    let t = Instant::now();
    let g = store
        .lock("dead", Duration::from_secs(30), Duration::from_secs(10))
        .unwrap();
    let took = t.elapsed();
    assert!(took >= lease - Duration::from_millis(100), "{took:?}");
    assert!(took < lease + Duration::from_secs(1), "{took:?}");
    if let Some(m) = &mut monitor {
        // Sleeps growing to 100 ms while the holder could still be
        // renewing (its lease is in its token), then, once it has let a
        // renewal interval and a quarter (625 ms) pass, one sleep to the end
        // of its lease: about 15 attempts, where the old 1-2 ms polling of
        // the waiter next in line made about a thousand.
        let attempts = m.count();
        println!(
            "a waiter behind a dead holder (lease 1.5 s): {attempts} attempts, took over after {took:.2?}"
        );
        assert!(attempts <= 25, "{attempts} lock attempts in {took:?}");
        assert!(attempts >= 2);
    }
    drop(g);
}

#[test]
fn a_holder_that_stopped_renewing_is_answered_busy_at_once_when_its_lease_outlasts_the_wait() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let store = scope.store(key1());
    let key = store.lock_key("stalled");
    // Leased for 6 s, not renewed for 4: 2 s left.
    let _: String = redis::cmd("SET")
        .arg(&key)
        .arg("0123456789abcdef0123456789abcdef.6000")
        .arg("PX")
        .arg(2_000)
        .query(scope.raw.like())
        .unwrap();
    let t = Instant::now();
    let e = store
        .lock("stalled", Duration::from_secs(30), Duration::from_secs(1))
        .unwrap_err();
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "only its lease running out frees it, after the wait: no wait at all ({:?})",
        t.elapsed()
    );
    assert!(e.is_busy());
    let after = e.retry_after().unwrap();
    assert!(
        after > Duration::from_millis(1_500) && after <= Duration::from_secs(2),
        "{after:?}"
    );
    // A holder that renews on time (leased 6 s, 5.5 s left): a retry within
    // one renewal interval.
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(5_500)
        .query(scope.raw.like())
        .unwrap();
    let e = store
        .lock(
            "stalled",
            Duration::from_secs(30),
            Duration::from_millis(100),
        )
        .unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
}

#[test]
fn a_release_in_this_process_wakes_its_waiters_at_once() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let scope = Scope::new();
    let holder = scope.store(key1());
    // A waiter whose sleeps alone would be 2 s and more.
    let waiter = RedisAttachmentStore::open(
        scope
            .config(key1())
            .lock_retry(Duration::from_secs(2), Duration::from_secs(20)),
    )
    .unwrap();
    for round in 0..2 {
        let g = holder
            .lock("woken", Duration::from_secs(30), Duration::ZERO)
            .unwrap();
        let release = thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            drop(g);
        });
        let t = Instant::now();
        let w = waiter
            .lock("woken", Duration::from_secs(30), Duration::from_secs(20))
            .unwrap();
        let took = t.elapsed();
        release.join().unwrap();
        assert!(
            took >= Duration::from_millis(250),
            "round {round}: {took:?}"
        );
        assert!(
            took < Duration::from_millis(1_500),
            "round {round}: woken by the release, not after a 2 s sleep: {took:?}"
        );
        drop(w);
    }
}

#[test]
fn reserved_ids_and_an_unreachable_server() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let scope = Scope::new();
    let store = scope.store(key1());
    let inv = SurfaceInvitation::new(
        "https://relay.example",
        "demo_001",
        secret_token(),
        "s",
        "a",
    )
    .unwrap();
    let r = SurfaceAttachment::new(
        "lock:x",
        OwnerKey::of("o").unwrap(),
        inv,
        Participant::new("a", "A", "#000"),
        "rs_0",
    )
    .unwrap();
    assert!(
        store
            .put(&r, None)
            .unwrap_err()
            .to_string()
            .contains("reserved")
    );
    assert_eq!(store.get("lock:x").unwrap(), None);

    let e = RedisAttachmentStore::open(
        RedisConfig::new("redis://127.0.0.1:1/", key1())
            .connect_timeout(Duration::from_millis(500)),
    )
    .unwrap_err();
    assert_eq!(e.code(), "store_failed");
}

#[test]
fn eight_threads_lose_no_update() {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let scope = Scope::new();
    let r = record(&secret_token());
    scope.store(key1()).put(&r, None).unwrap();
    let id = r.id().to_owned();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|w| {
            // Every worker has its own store, as separate processes would.
            let store = scope.store(key1());
            let (id, barrier) = (id.clone(), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                let mut seen = Vec::new();
                for i in 0..100 {
                    let _g = store
                        .lock(&id, Duration::from_secs(30), Duration::from_secs(30))
                        .unwrap();
                    let mut rec = store.get(&id).unwrap().unwrap();
                    let g = rec.generation();
                    revise(&mut rec, &format!("w{w}-{i}"));
                    store.put(&rec, Some(g)).unwrap();
                    seen.push(rec.generation());
                }
                seen
            })
        })
        .collect();
    let mut all: Vec<u64> = Vec::new();
    for h in handles {
        let seen = h.join().unwrap();
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
        all.extend(seen);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=800).collect::<Vec<_>>(), "every generation once");
    let last = scope.store(key1()).get(&id).unwrap().unwrap();
    assert_eq!(last.generation(), 800);
}

#[cfg(feature = "redis-tokio")]
mod tokio_flavour {
    use super::*;
    use human_plus_store::{AsyncAttachmentStore, AsyncRedisAttachmentStore};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_store_on_tokio() {
        if !common::available(common::Kind::Plain) {
            return;
        }
        let scope = Scope::new();
        let store = AsyncRedisAttachmentStore::connect(scope.config(key1()))
            .await
            .unwrap();
        let blocking = scope.store(key1());
        let mut r = record(&secret_token());
        store.put(&r, None).await.unwrap();
        assert_eq!(store.get(r.id()).await.unwrap().unwrap(), r);
        // Records are interchangeable between the flavours.
        assert_eq!(blocking.get(r.id()).unwrap().unwrap(), r);

        let g = store.lock(r.id(), Duration::from_secs(30)).await.unwrap();
        // The caller bounds the wait with its own timer; giving up leaves
        // no lock behind.
        let waited = tokio::time::timeout(
            Duration::from_millis(100),
            store.lock(r.id(), Duration::from_secs(30)),
        )
        .await;
        assert!(waited.is_err());
        revise(&mut r, "r1");
        store.put_holding(&g, &r, Some(0)).await.unwrap();
        assert!(matches!(
            store.put(&r, Some(0)).await,
            Err(Error::StoreConflict {
                expected: Some(0),
                found: Some(1)
            })
        ));

        // A dropped guard is released by the release thread: another
        // process (here the blocking flavour) takes the lock within its
        // wait, long before the 30 s lease could have expired, and without
        // this store locking again.
        drop(g);
        let other = blocking
            .lock(r.id(), Duration::from_secs(30), Duration::from_secs(5))
            .unwrap();
        // And this store's lock waits until that one is released.
        let released = tokio::task::spawn_blocking(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(other);
        });
        let t = Instant::now();
        let g = store.lock(r.id(), Duration::from_secs(30)).await.unwrap();
        assert!(t.elapsed() >= Duration::from_millis(50));
        released.await.unwrap();
        // A guard released and re-taken at once by the same store (the
        // manager's sequence) finds its own release already run.
        g.release();
        let t = Instant::now();
        for _ in 0..50 {
            let g = store.lock(r.id(), Duration::from_secs(30)).await.unwrap();
            g.release();
        }
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    /// The async flavour: busy with the holder's lease left when its own
    /// wait runs out; renewal; and a guard dropped by an async task (its
    /// release run by the store's release thread) wakes a waiter of this
    /// process at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn busy_renew_and_wake_on_tokio() {
        if !common::available(common::Kind::Plain) {
            return;
        }
        let mut scope = Scope::new();
        let store = AsyncRedisAttachmentStore::connect(scope.config(key1()))
            .await
            .unwrap();
        let key = store.lock_key("a");
        let g = store.lock("a", Duration::from_secs(3)).await.unwrap();
        let t = Instant::now();
        let e = store
            .lock_within("a", Duration::from_secs(30), Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(t.elapsed() >= Duration::from_millis(200));
        assert!(e.is_busy(), "{e}");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
        assert!(store.renew(&g, Duration::from_secs(30)).await.unwrap());
        assert!(scope.pttl(&key) > 29_000);

        let waiter = scope
            .config(key1())
            .lock_retry(Duration::from_secs(2), Duration::from_secs(20));
        let waiter = RedisAttachmentStore::open(waiter).unwrap();
        let woken = tokio::task::spawn_blocking(move || {
            let t = Instant::now();
            let w = waiter
                .lock("a", Duration::from_secs(30), Duration::from_secs(20))
                .unwrap();
            (t.elapsed(), w)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(g);
        let (took, w) = woken.await.unwrap();
        assert!(took >= Duration::from_millis(250), "{took:?}");
        assert!(took < Duration::from_millis(1_500), "{took:?}");
        store.release(&w).await.unwrap();
        drop(w);
        assert!(scope.keys().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn eight_tasks_lose_no_update() {
        if !common::available(common::Kind::Plain) {
            return;
        }
        let scope = Scope::new();
        let r = record(&secret_token());
        scope.store(key1()).put(&r, None).unwrap();
        let mut tasks = Vec::new();
        for w in 0..8 {
            let store = AsyncRedisAttachmentStore::connect(scope.config(key1()))
                .await
                .unwrap();
            let id = r.id().to_owned();
            tasks.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                for i in 0..50 {
                    let g = tokio::time::timeout(
                        Duration::from_secs(30),
                        store.lock(&id, Duration::from_secs(30)),
                    )
                    .await
                    .unwrap()
                    .unwrap();
                    let mut rec = store.get(&id).await.unwrap().unwrap();
                    let gen_loaded = rec.generation();
                    revise(&mut rec, &format!("w{w}-{i}"));
                    store.put(&rec, Some(gen_loaded)).await.unwrap();
                    seen.push(rec.generation());
                    g.release();
                }
                seen
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all.sort_unstable();
        assert_eq!(all, (1..=400).collect::<Vec<_>>());
    }
}

#[cfg(feature = "redis-smol")]
mod smol_flavour {
    use super::*;
    use human_plus_store::{AsyncAttachmentStore, AsyncRedisAttachmentStore};

    #[test]
    fn async_store_on_async_io() {
        if !common::available(common::Kind::Plain) {
            return;
        }
        let scope = Scope::new();
        async_io::block_on(async {
            let store = AsyncRedisAttachmentStore::connect(scope.config(key1()))
                .await
                .unwrap();
            let mut r = record(&secret_token());
            store.put(&r, None).await.unwrap();
            let g = store.lock(r.id(), Duration::from_secs(30)).await.unwrap();
            let loaded = store.get(r.id()).await.unwrap().unwrap();
            revise(&mut r, "r1");
            store.put(&r, Some(loaded.generation())).await.unwrap();
            // The wait is bounded by the caller's timer (async-io here).
            let lock = store.lock(r.id(), Duration::from_secs(30));
            let timeout = async {
                async_io::Timer::after(Duration::from_millis(100)).await;
                Err(Error::Timeout)
            };
            assert!(futures_lite::future::or(lock, timeout).await.is_err());
            g.release();
            let g = store.lock(r.id(), Duration::from_secs(30)).await.unwrap();
            assert_eq!(store.get(r.id()).await.unwrap().unwrap(), r);
            drop(g);
        });
    }
}

/// One step of a history over one attachment (the seeded model below).
#[derive(Debug, Clone)]
enum Step {
    /// Worker `w` takes the lock and loads the record (no wait).
    Take(usize),
    /// Worker `w`, holding a guard, writes the record on the generation it
    /// loaded: `0` put-and-release, `1` put holding the lock, `2` a plain
    /// put (the generation alone the fence).
    Write(usize, u8),
    /// Worker `w` gives its lock back.
    Release(usize),
    /// The holder's lease runs out (the lock key disappears; the holder
    /// still has its guard: a late holder).
    Expire,
    /// An attach writes the record without the lock.
    Attach,
    /// Worker `w` renews its lock for a longer lease than it took.
    Renew(usize),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0..3usize).prop_map(Step::Take),
        4 => (0..3usize, 0..3u8).prop_map(|(w, k)| Step::Write(w, k)),
        2 => (0..3usize).prop_map(Step::Release),
        1 => Just(Step::Expire),
        1 => Just(Step::Attach),
        1 => (0..3usize).prop_map(Step::Renew),
    ]
}

/// A worker of the model: its guard, and the generation it loaded.
#[derive(Default)]
struct ModelWorker {
    guard: Option<human_plus_store::LockGuard>,
    loaded: u64,
    view: Option<SurfaceAttachment>,
}

#[test]
fn the_lock_and_the_fence_follow_a_model_over_seeded_histories() {
    use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
    use proptest::{prop_assert, prop_assert_eq};
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut runner = TestRunner::new(Config {
        cases: 256,
        rng_seed: RngSeed::Fixed(43),
        failure_persistence: None,
        ..Config::default()
    });
    let lease = Duration::from_secs(30);
    let totals = std::cell::RefCell::new([0usize; 6]);
    let strategy = proptest::collection::vec(step(), 1..40);
    let result = runner.run(&strategy, |steps| {
        let mut scope = Scope::new();
        let stores: Vec<_> = (0..3).map(|_| scope.store(key1())).collect();
        let mut record = record(&secret_token());
        stores[0].put(&record, None).unwrap();
        let id = record.id().to_owned();
        let (key, lock_key) = (stores[0].record_key(&id), stores[0].lock_key(&id));
        let mut workers: Vec<ModelWorker> = (0..3).map(|_| ModelWorker::default()).collect();
        // The model: who holds the lock, the record's generation.
        let mut holder: Option<usize> = None;
        let mut lease_ms = 0i64;
        let mut generation = 0u64;
        let mut n = 0;
        for s in steps {
            n += 1;
            match s {
                Step::Take(w) => {
                    if workers[w].guard.is_some() {
                        continue;
                    }
                    match stores[w].lock_and_get(&id, lease, Duration::ZERO) {
                        Ok((g, loaded)) => {
                            prop_assert!(holder.is_none(), "taken while held by {holder:?}");
                            let loaded = loaded.unwrap();
                            prop_assert_eq!(loaded.generation(), generation);
                            prop_assert_eq!(&loaded, &record);
                            holder = Some(w);
                            lease_ms = 30_000;
                            workers[w] = ModelWorker {
                                guard: Some(g),
                                loaded: generation,
                                view: Some(loaded),
                            };
                            totals.borrow_mut()[0] += 1;
                        }
                        Err(e) => {
                            prop_assert!(e.is_busy(), "{e}");
                            prop_assert!(holder.is_some(), "busy while free");
                        }
                    }
                }
                Step::Write(w, kind) => {
                    let Some(g) = workers[w].guard.take() else {
                        continue;
                    };
                    let mut next = workers[w].view.clone().unwrap();
                    revise(&mut next, &format!("r{n}"));
                    let expected = Some(workers[w].loaded);
                    let fresh = generation == workers[w].loaded;
                    let outcome = match kind {
                        0 => stores[w].put_and_release(&g, &next, expected),
                        1 => stores[w].put_holding(&g, &next, expected),
                        _ => stores[w].put(&next, expected),
                    };
                    let lock_ok = kind != 1 || holder == Some(w);
                    match (&outcome, fresh, lock_ok) {
                        (Ok(()), true, true) => {
                            generation += 1;
                            record = next.clone();
                            workers[w].loaded = generation;
                            workers[w].view = Some(next);
                            totals.borrow_mut()[1] += 1;
                        }
                        (Err(Error::StoreConflict { expected: e, found }), false, _) => {
                            prop_assert_eq!(*e, expected);
                            prop_assert_eq!(*found, Some(generation));
                            totals.borrow_mut()[2] += 1;
                        }
                        (Err(Error::Store(m)), true, false) => {
                            prop_assert!(m.to_string().contains("no longer holds the lock"), "{m}");
                            totals.borrow_mut()[3] += 1;
                        }
                        (other, fresh, lock_ok) => {
                            return Err(TestCaseError::fail(format!(
                                "step {n}: {other:?}, model says fresh={fresh} lock_ok={lock_ok}"
                            )));
                        }
                    }
                    if kind == 0 {
                        // Given back whatever the write answered (the
                        // guard disarmed).
                        if holder == Some(w) {
                            holder = None;
                        }
                        drop(g);
                    } else {
                        workers[w].guard = Some(g);
                    }
                }
                Step::Release(w) => {
                    let Some(g) = workers[w].guard.take() else {
                        continue;
                    };
                    stores[w].release(&g).unwrap();
                    drop(g);
                    if holder == Some(w) {
                        holder = None;
                    } else {
                        totals.borrow_mut()[4] += 1;
                    }
                }
                Step::Expire => {
                    let _: i64 = redis::cmd("DEL")
                        .arg(&lock_key)
                        .query(scope.raw.like())
                        .unwrap();
                    holder = None;
                }
                Step::Renew(w) => {
                    let Some(g) = workers[w].guard.as_ref() else {
                        continue;
                    };
                    let renewed = stores[w].renew(g, Duration::from_secs(60)).unwrap();
                    prop_assert_eq!(renewed, holder == Some(w));
                    if renewed {
                        lease_ms = 60_000;
                    }
                }
                Step::Attach => {
                    let mut next = record.clone();
                    revise(&mut next, &format!("a{n}"));
                    stores[0].put(&next, Some(generation)).unwrap();
                    generation += 1;
                    record = next;
                    totals.borrow_mut()[5] += 1;
                }
            }
            // Redis holds what the model says: the lock's holder (its token,
            // marked or not) with a lease, and the record at its generation
            // as one string with a TTL.
            let held: Option<String> = redis::cmd("GET")
                .arg(&lock_key)
                .query(scope.raw.like())
                .unwrap();
            match (holder, &held) {
                (None, None) => {}
                (Some(w), Some(v)) => {
                    // The token, then the lease a renewal gave it when
                    // another than the token names, then the waiter's flag.
                    let mut token = workers[w].guard.as_ref().unwrap().token().to_owned();
                    if lease_ms != 30_000 {
                        token = format!("{token}~{lease_ms}");
                    }
                    prop_assert!(v == &token || *v == format!("{token}|"), "step {n}: {v}");
                    // Never shortened (a late release put it back with
                    // the whole lease its holder last asked for).
                    let left = scope.pttl(&lock_key);
                    prop_assert!(
                        left > lease_ms - 5_000 && left <= lease_ms,
                        "step {n}: lease left {left} of {lease_ms}"
                    );
                }
                (h, v) => {
                    return Err(TestCaseError::fail(format!(
                        "step {n}: the model's holder {h:?}, the lock {v:?}"
                    )));
                }
            }
            prop_assert_eq!(scope.part(&key, "g"), generation.to_string().into_bytes());
            prop_assert!(scope.pttl(&key) > 0);
        }
        let last = stores[1].get(&id).unwrap();
        prop_assert_eq!(last.as_ref(), Some(&record));
        Ok(())
    });
    let totals = totals.into_inner();
    println!(
        "taken {}, written {}, refused stale {}, refused late holder {}, late releases {}, attaches {}",
        totals[0], totals[1], totals[2], totals[3], totals[4], totals[5]
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        totals.iter().all(|t| *t > 0),
        "every path was walked: {totals:?}"
    );
}

/// A TCP proxy in front of one Redis that can swallow Redis's answers
/// (what a store sees when a server stops after running a command and
/// before its answer arrives: a failover, a frozen process).
struct Swallow {
    addr: std::net::SocketAddr,
    swallowing: Arc<std::sync::atomic::AtomicBool>,
}

impl Swallow {
    fn start(upstream: String) -> Swallow {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let swallowing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&swallowing);
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(&upstream) else {
                    continue;
                };
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n @ 1..) = c_in.read(&mut buf) {
                        if s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(std::net::Shutdown::Both);
                });
                let (mut s_in, mut c_out, flag) = (server, client, Arc::clone(&flag));
                thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n @ 1..) = s_in.read(&mut buf) {
                        if flag.load(Ordering::SeqCst) {
                            continue;
                        }
                        if c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Swallow { addr, swallowing }
    }

    fn swallow(&self, on: bool) {
        self.swallowing
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `host:port` of a plain single server's URL (`redis://[auth@]host:port/…`).
fn plain_host_port(target: &Target) -> Option<String> {
    let Target::Single(url) = target else {
        return None;
    };
    let rest = url.strip_prefix("redis://")?;
    let rest = rest.split('/').next()?;
    Some(rest.rsplit('@').next()?.to_owned())
}

/// The failover test's rare case made certain: a worker's write is applied
/// and its lock given back, its answer is lost, other workers take the
/// lock and write on top, and only then is the first write sent again.
/// The retry is answered "written" (it was, once), not "another worker
/// wrote first": with a few writes on top it finds its id in the record's
/// trail; with more than the trail keeps (70), it finds it was not refused
/// and its lock is no longer its own, so it gave the lock back itself.
#[test]
fn a_write_whose_answer_was_lost_is_answered_written_after_others_wrote_on_top() {
    lost_answer(1, false);
    lost_answer(70, false);
}

/// The other side of the same case: the write whose answer is lost was
/// refused (a write without the lock moved the record while it was held),
/// and 70 writes came on top before its retry. The retry is answered the
/// conflict it was, never "written".
#[test]
fn a_refused_write_whose_answer_was_lost_is_still_answered_refused() {
    lost_answer(70, true);
}

/// Plays a write whose answer is lost: `on_top` other writes before its
/// retry; `refused`: a write without the lock moved the record first.
fn lost_answer(on_top: u64, refused: bool) {
    if !common::available(common::Kind::Plain) {
        return;
    }
    let mut scope = Scope::new();
    let Some(upstream) = plain_host_port(&scope.target) else {
        // CI runs these tests on each kind; the plain server's run has it.
        eprintln!(
            "a lost answer is played on a plain single server only; this run's Redis is TLS or a cluster"
        );
        return;
    };
    let proxy = Swallow::start(upstream);
    let through = RedisAttachmentStore::open(
        RedisConfig::new(format!("redis://{}/", proxy.addr), key1())
            .prefix(scope.prefix.clone())
            .response_timeout(Duration::from_millis(300))
            .failover_wait(Duration::from_secs(10)),
    )
    .unwrap();
    let direct = scope.store(key1());
    let mut r = record(&secret_token());
    direct.put(&r, None).unwrap();
    let key = direct.record_key(r.id());
    let lease = Duration::from_secs(30);
    // One write as usual first: the server has the scripts (a swallowed
    // NOSCRIPT would leave the write unsent, not lost).
    let (warm, _) = direct.lock_and_get(r.id(), lease, Duration::ZERO).unwrap();
    revise(&mut r, "warm");
    direct.put_and_release(&warm, &r, Some(0)).unwrap();
    drop(warm);

    let (guard, loaded) = through.lock_and_get(r.id(), lease, Duration::ZERO).unwrap();
    let mut mine = loaded.unwrap();
    let mut generation = 1;
    if refused {
        // An attach's write, without the lock, while it is held.
        let mut moved = mine.clone();
        revise(&mut moved, "moved");
        direct.put(&moved, Some(1)).unwrap();
        generation = 2;
    }
    revise(&mut mine, "mine");
    proxy.swallow(true);
    let writer = {
        let mine = mine.clone();
        thread::spawn(move || {
            let outcome = through.put_and_release(&guard, &mine, Some(1));
            drop(guard);
            outcome
        })
    };
    // The write ran (or was refused) and gave the lock back: other workers
    // have it at once, load what it left, and write on top.
    let mut last = None;
    for i in 0..on_top {
        let (other, seen) = direct
            .lock_and_get(r.id(), lease, Duration::from_secs(5))
            .unwrap();
        let mut theirs = seen.unwrap();
        if i == 0 && !refused {
            assert_eq!(theirs, mine, "the first write was applied");
            generation = 2;
        }
        revise(&mut theirs, &format!("theirs{i}"));
        direct
            .put_and_release(&other, &theirs, Some(generation))
            .unwrap();
        generation += 1;
        last = Some(theirs);
    }
    proxy.swallow(false);

    let outcome = writer.join().unwrap();
    if refused {
        match outcome {
            Err(Error::StoreConflict { expected, found }) => {
                assert_eq!((expected, found), (Some(1), Some(generation)));
            }
            other => panic!("a refused write answered {other:?}"),
        }
    } else {
        assert!(
            outcome.is_ok(),
            "the retried write was applied once, and is answered so ({on_top} on top): {outcome:?}"
        );
    }
    assert_eq!(direct.get(r.id()).unwrap(), last);
    assert_eq!(scope.part(&key, "g"), generation.to_string().into_bytes());
    // The attach, the warm write, this write or the one that moved the
    // record first, and those on top.
    let writes = 3 + on_top;
    assert_eq!(
        scope.part(&key, "t").split(|b| *b == b',').count() as u64,
        writes.min(64),
        "every write in the trail, up to the last 64"
    );
    // The refusal noted (for its retry), and nothing else: no lock left.
    let mut left = scope.keys();
    let noted = left.iter().filter(|k| k.ends_with("#refused")).count();
    assert_eq!(noted, usize::from(refused), "{left:?}");
    left.retain(|k| !k.ends_with("#refused"));
    assert_eq!(left, vec![key], "no lock left");
}
