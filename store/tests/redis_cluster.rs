//! The Redis store on a Redis Cluster (`HUMAN_PLUS_REDIS_CLUSTER_URL`, the
//! 3 primaries and 3 replicas `.ci/redis` starts): one attachment's keys in
//! one slot and attachments spread over the primaries; a slot migrated
//! while the store works (`ASK`, then `MOVED` once the slot map it holds
//! is stale); and records moved from a single server's plain layout.
//! (A primary stopped during a run of pinned writes is the conformance
//! suite's `redis_failover` test.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Node, Raw, Target, keyslot, node_conn, nodes, owner_of};
use human_plus_core::{OwnerKey, Participant, SeededEntropy, SurfaceAttachment, SurfaceInvitation};
use human_plus_store::{AttachmentStore, KeyLayout, Keyring, RedisAttachmentStore, RedisConfig};

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).unwrap();
    human_plus_core::hex(&b)
}

fn keyring() -> Keyring {
    Keyring::new("k1", [0x24; 32]).unwrap()
}

fn record(seed: u64) -> SurfaceAttachment {
    let inv = SurfaceInvitation::new(
        "https://relay.example",
        "demo_001",
        format!("SECRET-{}", random_hex(12)),
        "sheet:one",
        "Demo",
    )
    .unwrap();
    SurfaceAttachment::mint(
        OwnerKey::of("owner:one").unwrap(),
        inv,
        Participant::new("agent:one", "One", "#000"),
        &mut SeededEntropy::new(seed),
    )
}

/// `INFO errorstats`' count for `code` on one node.
fn error_count(conn: &mut redis::Connection, code: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("errorstats").query(conn).unwrap();
    let prefix = format!("errorstat_{code}:count=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

struct Cleanup {
    raw: Raw,
    prefix: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let keys = self.raw.keys(&format!("{}*", self.prefix));
        self.raw.del(&keys);
    }
}

fn scope(name: &str) -> (String, Cleanup) {
    let prefix = format!("human-plus-cluster-{name}:{}:", random_hex(4));
    let cleanup = Cleanup {
        raw: Target::cluster().raw(),
        prefix: prefix.clone(),
    };
    (prefix, cleanup)
}

#[test]
fn one_attachments_keys_share_a_slot_and_attachments_spread() {
    if !common::available(common::Kind::Cluster) {
        return;
    }
    let (prefix, mut cleanup) = scope("slots");
    let store =
        RedisAttachmentStore::open(Target::cluster().config(keyring()).prefix(&prefix)).unwrap();
    let mut primaries = BTreeSet::new();
    for seed in 0..24 {
        let r = record(seed);
        store.put(&r, None).unwrap();
        let guard = store
            .lock(r.id(), Duration::from_secs(30), Duration::from_secs(5))
            .unwrap();
        let record_slot = keyslot(&mut cleanup.raw, &store.record_key(r.id()));
        // The server's own hash agrees: record, lock and place in line.
        assert_eq!(
            record_slot,
            keyslot(&mut cleanup.raw, &store.lock_key(r.id()))
        );
        assert_eq!(
            record_slot,
            keyslot(
                &mut cleanup.raw,
                &format!("{}#next", store.lock_key(r.id()))
            )
        );
        assert_eq!(store.get(r.id()).unwrap().unwrap(), r);
        drop(guard);
        primaries.insert(owner_of(record_slot).id);
    }
    assert!(
        primaries.len() >= 2,
        "24 attachments on one primary: {primaries:?}"
    );
}

/// Moves every key of `slot` from `from` to `to` and gives `to` the slot,
/// the way `redis-cli --cluster reshard` does; `during` runs while the
/// slot is half moved (`from` answers ASK for keys it no longer has).
fn migrate(slot: u16, from: &Node, to: &Node, first: &[String], during: impl FnOnce()) {
    let mut src = node_conn(&from.host, from.port);
    let mut dst = node_conn(&to.host, to.port);
    let setslot = |conn: &mut redis::Connection, how: &str, id: &str| {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(id)
            .query(conn)
            .unwrap();
    };
    setslot(&mut dst, "IMPORTING", &from.id);
    setslot(&mut src, "MIGRATING", &to.id);
    let move_keys = |src: &mut redis::Connection, keys: &[String]| {
        if keys.is_empty() {
            return;
        }
        let _: redis::Value = redis::cmd("MIGRATE")
            .arg(&to.host)
            .arg(to.port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(keys)
            .query(src)
            .unwrap();
    };
    move_keys(&mut src, first);
    during();
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query(&mut src)
            .unwrap();
        if keys.is_empty() {
            break;
        }
        move_keys(&mut src, &keys);
    }
    for node in nodes().iter().filter(|n| n.primary) {
        let mut conn = node_conn(&node.host, node.port);
        setslot(&mut conn, "NODE", &to.id);
    }
}

#[test]
fn a_slot_migrated_under_the_store_asks_then_moves() {
    if !common::available(common::Kind::Cluster) {
        return;
    }
    let (prefix, mut cleanup) = scope("migrate");
    let blocking =
        RedisAttachmentStore::open(Target::cluster().config(keyring()).prefix(&prefix)).unwrap();
    let r = record(7);
    blocking.put(&r, None).unwrap();
    let slot = keyslot(&mut cleanup.raw, &blocking.record_key(r.id()));
    let from = owner_of(slot);
    let to = nodes()
        .into_iter()
        .find(|n| n.primary && n.id != from.id)
        .unwrap();
    // A store that does nothing while the slot moves: its connection keeps
    // the slot map it read when it opened.
    let stale =
        RedisAttachmentStore::open(Target::cluster().config(keyring()).prefix(&prefix)).unwrap();
    let (asks, moves) = {
        let mut src = node_conn(&from.host, from.port);
        (error_count(&mut src, "ASK"), error_count(&mut src, "MOVED"))
    };

    // The record moves first; the lock key (absent) and everything else
    // follow after the store has worked on the half-moved slot.
    let record_key = blocking.record_key(r.id());
    let mut writer = None;
    let mut finished_moving = None;
    migrate(slot, &from, &to, &[record_key], || {
        // A read of the moved record: the old owner answers ASK, redis-rs
        // asks the new one.
        assert_eq!(
            blocking.get(r.id()).unwrap().unwrap(),
            r,
            "read through ASK"
        );
        // Taking the lock touches two keys the slot's new owner does not
        // have yet: it answers TRYAGAIN until the move completes, and the
        // store keeps trying (well within its failover wait).
        let (store, r) = (blocking.clone(), r.clone());
        writer =
            Some(std::thread::spawn(move || {
                let guard = store
                    .lock(r.id(), Duration::from_secs(30), Duration::from_secs(10))
                    .unwrap();
                let mut next = r.clone();
                assert!(next.record_revision(
                    human_plus_core::SurfaceRevision::observed("r1", "t").unwrap()
                ));
                store
                    .put_holding(&guard, &next, Some(r.generation()))
                    .unwrap();
                (std::time::Instant::now(), next)
            }));
        std::thread::sleep(Duration::from_millis(300));
        finished_moving = Some(std::time::Instant::now());
    });
    let (wrote_at, next) = writer.unwrap().join().unwrap();
    assert!(
        wrote_at > finished_moving.unwrap(),
        "the lock waited for the move"
    );
    let mut src = node_conn(&from.host, from.port);
    assert!(
        error_count(&mut src, "ASK") > asks,
        "the store was redirected with ASK"
    );

    // The slot is the other primary's now: a connection whose slot map is
    // stale hears MOVED from the old owner, and the store follows.
    for store in [&stale, &blocking] {
        assert_eq!(store.get(r.id()).unwrap().unwrap(), next);
        drop(
            store
                .lock(r.id(), Duration::from_secs(30), Duration::from_secs(10))
                .unwrap(),
        );
    }
    assert!(
        error_count(&mut src, "MOVED") > moves,
        "the store was redirected with MOVED"
    );
    assert_eq!(owner_of(slot).id, to.id);
}

#[test]
fn records_moved_from_a_single_servers_plain_layout_open_unchanged() {
    if !common::available(common::Kind::Cluster) {
        return;
    }
    // The old deployment: the plain server of .ci/redis, plain layout.
    let single = match Target::generic() {
        Target::Single(url) if url.starts_with("redis://") => url,
        other => panic!("HUMAN_PLUS_REDIS_URL must name the plain server here: {other:?}"),
    };
    let (prefix, mut cleanup) = scope("moved");
    let old =
        RedisAttachmentStore::open(RedisConfig::new(single.as_str(), keyring()).prefix(&prefix))
            .unwrap();
    let r = record(11);
    old.put(&r, None).unwrap();
    assert_eq!(old.record_key(r.id()), format!("{prefix}{}", r.id()));

    // DUMP on the old server, RESTORE under the tagged name on the cluster
    // (what MIGRATE or a copy script does).
    let mut src = redis::Client::open(single.as_str())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP")
        .arg(old.record_key(r.id()))
        .query(&mut src)
        .unwrap();
    let ttl: i64 = redis::cmd("PTTL")
        .arg(old.record_key(r.id()))
        .query(&mut src)
        .unwrap();
    let new =
        RedisAttachmentStore::open(Target::cluster().config(keyring()).prefix(&prefix)).unwrap();
    let tagged = new.record_key(r.id());
    assert_eq!(tagged, format!("{prefix}{{{}}}", r.id()));
    let _: () = redis::cmd("RESTORE")
        .arg(&tagged)
        .arg(ttl.max(0))
        .arg(dump)
        .query(cleanup.raw.like())
        .unwrap();
    assert_eq!(new.get(r.id()).unwrap().unwrap(), r);
    // And it goes on from there.
    let mut next = r.clone();
    assert!(next.record_revision(human_plus_core::SurfaceRevision::observed("r2", "t").unwrap()));
    new.put(&next, Some(r.generation())).unwrap();
    assert_eq!(new.get(r.id()).unwrap().unwrap(), next);
    // A single server can take the tagged layout before the move, too.
    let tagged_single = RedisAttachmentStore::open(
        RedisConfig::new(single.as_str(), keyring())
            .prefix(&prefix)
            .key_layout(KeyLayout::HashTagged),
    )
    .unwrap();
    assert_eq!(tagged_single.record_key(r.id()), tagged);
    let _: i64 = redis::cmd("DEL")
        .arg(old.record_key(r.id()))
        .query(&mut src)
        .unwrap();
}
