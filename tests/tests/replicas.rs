//! Replicas of a service on one Redis (a plain server and a cluster), each
//! replica a process of its own (the `replica` binary), writing to one
//! attachment of the demo surface: what happens when one dies (SIGKILL),
//! stalls (SIGSTOP) or is stopped on purpose (SIGTERM) in the middle of a
//! call, and what a call behind another replica's lock answers.
//!
//! The surface loses the answer to a write whose value starts with
//! `held:` (it applies the write; the relay delivers the answer to
//! nobody): a replica making one holds the attachment's lock mid-call, as
//! long as its manager renews the lease.
//!
//! Redis as the store's tests find it (`store/tests/common`): started on
//! free loopback ports unless `HUMAN_PLUS_REDIS_URL` (plain `redis://`
//! only here) and `HUMAN_PLUS_REDIS_CLUSTER_URL` name one; without
//! `redis-server` each test is skipped with a message (a failure under
//! `HUMAN_PLUS_REQUIRE_REDIS=1` or `CI=true`). One scenario runs at a time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../store/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use common::Target;
use human_plus_any::RuntimeKind;
use human_plus_conformance::replica::{Replica, ReplicaSetup, lose_held_replies};
use human_plus_conformance::{Env, EnvOptions, random_hex};
use human_plus_relay::{CallOutcome, Faults, Leg};
use human_plus_store::{AttachmentStore, RedisAttachmentStore};
use serde_json::json;

/// One scenario at a time: their timings are the point.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Which Redis a scenario runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    Plain,
    Cluster,
}

/// The relay, the surface (losing the answers to `held:` writes), Redis,
/// and one attachment with its first revision.
struct Stage {
    env: Env,
    redis: String,
    prefix: String,
    key_hex: String,
    id: String,
    /// What the test looks at Redis with.
    store: RedisAttachmentStore,
    raw: common::Raw,
}

impl Stage {
    /// `None` (the test skipped, with a message) when that Redis cannot be
    /// had.
    fn new(on: On) -> Option<Stage> {
        let kind = match on {
            On::Plain => common::Kind::Plain,
            On::Cluster => common::Kind::Cluster,
        };
        if !common::available(kind) {
            return None;
        }
        let target = match on {
            On::Plain => Target::generic(),
            On::Cluster => Target::cluster(),
        };
        if target.is_tls() {
            common::servers::skip(
                "replicas",
                common::Kind::Plain,
                "the replica processes speak plain redis:// only",
            );
            return None;
        }
        let env = Env::with(EnvOptions {
            rewrite: Some(lose_held_replies()),
            ..EnvOptions::default()
        });
        let redis = target.urls().join(",");
        let prefix = format!("human-plus-replicas:{}:", random_hex(6));
        let key_hex = random_hex(32);
        let setup = ReplicaSetup {
            kind: RuntimeKind::Blocking,
            port: env.port,
            redis: redis.clone(),
            prefix: prefix.clone(),
            key_hex: key_hex.clone(),
            lease: human_plus_store::DEFAULT_LEASE,
            lock_wait: Duration::from_secs(10),
        };
        // The attachment, and the unpinned read that gives it its first
        // revision.
        let first = Replica::new(&setup);
        let record = first.attach(env.invitation()).unwrap();
        first
            .call(record.id(), "sheet_get_cell", json!({"address": "A1"}))
            .unwrap();
        Some(Stage {
            store: RedisAttachmentStore::open(setup.store_config()).unwrap(),
            raw: target.raw(),
            id: record.id().to_owned(),
            env,
            redis,
            prefix,
            key_hex,
        })
    }

    fn setup(&self, kind: RuntimeKind, lease: Duration) -> ReplicaSetup {
        ReplicaSetup {
            kind,
            port: self.env.port,
            redis: self.redis.clone(),
            prefix: self.prefix.clone(),
            key_hex: self.key_hex.clone(),
            lease,
            lock_wait: Duration::from_secs(10),
        }
    }

    /// The token the attachment's lock holds, if it is held.
    fn lock_holder(&mut self) -> Option<String> {
        redis::cmd("GET")
            .arg(self.store.lock_key(&self.id))
            .query(self.raw.like())
            .unwrap()
    }

    /// Waits until the surface applied the write of `value`.
    fn wait_applied(&self, value: &str) {
        let start = Instant::now();
        while !self
            .env
            .surface()
            .calls()
            .iter()
            .any(|c| c.arguments["value"] == value && c.outcome == CallOutcome::Written)
        {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the surface never applied {value}"
            );
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// What the surface did with each `sheet_set_cell` value, in order.
    fn writes(&self) -> Vec<(String, CallOutcome)> {
        self.env
            .surface()
            .calls()
            .into_iter()
            .filter(|c| c.tool == "sheet_set_cell")
            .map(|c| (c.arguments["value"].as_str().unwrap().to_owned(), c.outcome))
            .collect()
    }

    /// Nothing applied twice, and the store's revision is the surface's.
    fn check_applied_once(&self) -> BTreeMap<String, usize> {
        let mut applied: BTreeMap<String, usize> = BTreeMap::new();
        for (value, outcome) in self.writes() {
            if outcome == CallOutcome::Written {
                *applied.entry(value).or_default() += 1;
            }
        }
        assert!(
            applied.values().all(|n| *n == 1),
            "a write was applied twice: {applied:?}"
        );
        let record = self.store.get(&self.id).unwrap().unwrap();
        assert_eq!(
            record.revision().map(|r| r.token().to_owned()),
            Some(self.env.surface().revision()),
            "the store's revision is the surface's"
        );
        applied
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let keys = self.raw.keys(&format!("{}*", self.prefix));
        self.raw.del(&keys);
    }
}

/// A replica process.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn spawn(mode: &str, setup: &ReplicaSetup, id: &str, value: &str) -> Proc {
        let spec = json!({"mode": mode, "setup": setup.to_json(), "id": id, "value": value});
        let mut child = Command::new(env!("CARGO_BIN_EXE_replica"))
            .arg(spec.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// The next line starting with `prefix` (others are skipped), within
    /// `limit`.
    fn expect(&mut self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(e) => panic!("no {prefix} line within {limit:?}: {e}"),
            }
        }
    }

    fn go(&mut self) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`, `TERM`) with the shell's
    /// `kill`.
    fn signal(&self, signal: &str) {
        let status = Command::new("sh")
            .args(["-c", &format!("kill -{signal} {}", self.child.id())])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal}");
    }

    /// A `takeover` replica's answers: (microseconds since its go, code).
    fn answers(&mut self, limit: Duration) -> Vec<(Duration, String)> {
        let mut out = Vec::new();
        let deadline = Instant::now() + limit;
        loop {
            let line = self.expect("", deadline.saturating_duration_since(Instant::now()));
            if line == "DONE" {
                return out;
            }
            if let Some(rest) = line.strip_prefix("ANSWER ") {
                let (us, code) = rest.split_once(' ').unwrap();
                out.push((Duration::from_micros(us.parse().unwrap()), code.to_owned()));
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A replica that dies (SIGKILL) while it holds the attachment mid-call
/// (its write applied, its answer lost): it renewed its short lease while
/// it lived, in its own process, so the lock outlived several leases; once
/// it is dead, another replica serves the attachment within one lease plus
/// a second. The write that was in flight was applied once: the other
/// replica's write, pinned to the revision stored before it, is refused
/// (nothing applied), and after reading again it writes.
fn killed_mid_call(on: On, dying: RuntimeKind, taking_over: RuntimeKind) {
    let _serial = serial();
    let Some(mut stage) = Stage::new(on) else {
        return;
    };
    let lease = Duration::from_secs(2);
    let mut a = Proc::spawn("hold", &stage.setup(dying, lease), &stage.id, "held:A");
    let mut b = Proc::spawn(
        "takeover",
        &stage.setup(taking_over, lease),
        &stage.id,
        "from-B",
    );
    a.expect("READY", Duration::from_secs(30));
    b.expect("READY", Duration::from_secs(30));
    a.go();
    stage.wait_applied("held:A");
    let token = stage
        .lock_holder()
        .expect("the replica holds the lock mid-call");
    // Two leases on, the lock is still its: renewed from its process.
    thread::sleep(lease * 2);
    assert_eq!(stage.lock_holder().as_deref(), Some(token.as_str()));

    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let killed = Instant::now();
    b.go();
    let went = killed.elapsed();
    let answers = b.answers(Duration::from_secs(30));
    let codes: Vec<&str> = answers.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(
        codes,
        ["surface_changed_under_you", "ok", "ok"],
        "refused (the held write was applied), read again, written"
    );
    let first = went + answers[0].0;
    assert!(
        first <= lease + Duration::from_secs(1),
        "served {first:?} after the kill; the lease is {lease:?}"
    );
    let applied = stage.check_applied_once();
    assert_eq!(applied.get("held:A"), Some(&1));
    assert_eq!(applied.get("from-B"), Some(&1));
    let writes = stage.writes();
    assert!(matches!(
        writes[writes.len() - 2].1,
        CallOutcome::Refused { .. }
    ));
    println!(
        "{on:?}: a replica on {dying} killed mid-call (lease {lease:?}); one on {taking_over} served the attachment {first:.2?} after the kill (refused: the held write was applied once), wrote {:.2?} after",
        went + answers[2].0
    );
}

#[test]
fn a_replica_killed_mid_call_is_taken_over_within_a_lease_plain() {
    killed_mid_call(On::Plain, RuntimeKind::Tokio, RuntimeKind::Blocking);
}

#[test]
fn a_replica_killed_mid_call_is_taken_over_within_a_lease_cluster() {
    killed_mid_call(On::Cluster, RuntimeKind::Blocking, RuntimeKind::AsyncStd);
}

/// A replica stopped (SIGSTOP) mid-call for longer than its lease, and
/// then resumed: meanwhile another replica took the attachment over and
/// wrote; the stopped one's answer arrives when it resumes, and its write
/// of the record is refused by the generation (`store_conflict`). Its
/// write to the surface was applied once; the other's stale write was
/// refused, then made again after reading.
fn stopped_past_its_lease(on: On, stalling: RuntimeKind, taking_over: RuntimeKind) {
    let _serial = serial();
    let Some(mut stage) = Stage::new(on) else {
        return;
    };
    let lease = Duration::from_secs(2);
    let mut a = Proc::spawn("hold", &stage.setup(stalling, lease), &stage.id, "late-A");
    let mut b = Proc::spawn(
        "takeover",
        &stage.setup(taking_over, lease),
        &stage.id,
        "from-B",
    );
    a.expect("READY", Duration::from_secs(30));
    b.expect("READY", Duration::from_secs(30));
    // The relay holds every answer the page posts for a second and a half:
    // the replica is stopped before its call's answer reaches it.
    stage
        .env
        .faults(Faults::new().delay(Leg::Outbox, Duration::from_millis(1_500)));
    a.go();
    stage.wait_applied("late-A");
    a.signal("STOP");
    let stopped = Instant::now();
    stage.env.faults(Faults::new());
    assert!(stage.lock_holder().is_some());
    b.go();
    let answers = b.answers(Duration::from_secs(30));
    let codes: Vec<&str> = answers.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(codes, ["surface_changed_under_you", "ok", "ok"]);
    // Stopped longer than a whole lease (its lock ran out within one).
    thread::sleep((lease * 3 / 2).saturating_sub(stopped.elapsed()));
    let stalled = stopped.elapsed();
    a.signal("CONT");
    let result = a.expect("RESULT", Duration::from_secs(30));
    // Its write to the page was applied: the fence's refusal of its
    // record is reported as outcome unknown, never as "not applied"
    // (issue 39).
    assert_eq!(
        result, "RESULT call_unrecorded",
        "the late holder's record write is refused by the fence"
    );
    let applied = stage.check_applied_once();
    assert_eq!(applied.get("late-A"), Some(&1));
    assert_eq!(applied.get("from-B"), Some(&1));
    println!(
        "{on:?}: a replica on {stalling} stopped {stalled:.2?} mid-call (lease {lease:?}) was fenced on resuming ({result}); one on {taking_over} wrote meanwhile"
    );
}

#[test]
fn a_stopped_replica_resumed_past_its_lease_is_fenced_plain() {
    stopped_past_its_lease(On::Plain, RuntimeKind::Blocking, RuntimeKind::AsyncStd);
}

#[test]
fn a_stopped_replica_resumed_past_its_lease_is_fenced_cluster() {
    stopped_past_its_lease(On::Cluster, RuntimeKind::Tokio, RuntimeKind::Blocking);
}

/// A replica told to stop (SIGTERM) mid-call, its call's answer lost: its
/// handler shuts the manager down, which keeps the lock for its grace (one
/// writer: the other replica waits), then ends the call as outcome unknown
/// (`call_timeout`, never as not applied), gives the lock back and exits;
/// another replica serves the attachment then, long before the lease
/// (renewed a moment ago) could have run out (issue 39).
fn terminated_mid_call(on: On, stopping: RuntimeKind, taking_over: RuntimeKind) {
    let _serial = serial();
    let Some(mut stage) = Stage::new(on) else {
        return;
    };
    let lease = Duration::from_secs(6);
    let mut a = Proc::spawn("hold", &stage.setup(stopping, lease), &stage.id, "held:A");
    let mut b = Proc::spawn(
        "takeover",
        &stage.setup(taking_over, lease),
        &stage.id,
        "from-B",
    );
    a.expect("READY", Duration::from_secs(30));
    b.expect("READY", Duration::from_secs(30));
    a.go();
    stage.wait_applied("held:A");
    assert!(stage.lock_holder().is_some());
    a.signal("TERM");
    let terminated = Instant::now();
    b.go();
    let went = terminated.elapsed();
    assert_eq!(
        a.expect("RESULT", Duration::from_secs(10)),
        "RESULT call_timeout",
        "the held call, ended by the grace: outcome unknown"
    );
    a.expect("SHUTDOWN", Duration::from_secs(10));
    assert!(a.child.wait().unwrap().success(), "a clean exit");
    let answers = b.answers(Duration::from_secs(30));
    let codes: Vec<&str> = answers.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(codes, ["surface_changed_under_you", "ok", "ok"]);
    let first = went + answers[0].0;
    // One writer: nothing served before the grace ended. A lease renewed
    // every 2 s has at least 4 s left: only the release explains an answer
    // sooner than that.
    let grace = human_plus_conformance::replica::REPLICA_GRACE;
    assert!(
        first >= grace - Duration::from_millis(200),
        "served {first:?} after SIGTERM, inside the stopping replica's grace"
    );
    assert!(
        first < grace + Duration::from_millis(1_500),
        "served {first:?} after SIGTERM"
    );
    let applied = stage.check_applied_once();
    assert_eq!(applied.get("held:A"), Some(&1));
    println!(
        "{on:?}: a replica on {stopping} stopped with SIGTERM mid-call (lease {lease:?}); one on {taking_over} served the attachment {first:.2?} after"
    );
}

#[test]
fn a_replica_stopped_with_sigterm_keeps_one_writer_then_frees_plain() {
    terminated_mid_call(On::Plain, RuntimeKind::AsyncStd, RuntimeKind::Tokio);
}

#[test]
fn a_replica_stopped_with_sigterm_keeps_one_writer_then_frees_cluster() {
    terminated_mid_call(On::Cluster, RuntimeKind::Blocking, RuntimeKind::Tokio);
}

/// A call behind another replica's lock (a process holding the attachment
/// mid-call) is `attachment_busy` in every runtime: after the lock wait,
/// or after the call's own timeout when that is shorter; with the other
/// replica's lease left as when a retry may succeed; nothing sent.
fn busy_behind_another_replica(on: On) {
    let _serial = serial();
    let Some(mut stage) = Stage::new(on) else {
        return;
    };
    let lease = Duration::from_secs(3);
    let mut a = Proc::spawn(
        "hold",
        &stage.setup(RuntimeKind::Blocking, lease),
        &stage.id,
        "held:A",
    );
    a.expect("READY", Duration::from_secs(30));
    a.go();
    stage.wait_applied("held:A");
    assert!(stage.lock_holder().is_some());
    let calls = stage.env.surface().calls().len();
    for kind in RuntimeKind::ALL {
        let mut setup = stage.setup(kind, lease);
        setup.lock_wait = Duration::from_millis(500);
        let short = Replica::new(&setup);
        let start = Instant::now();
        let e = short
            .call(&stage.id, "sheet_get_cell", json!({"address": "A1"}))
            .unwrap_err();
        let took = start.elapsed();
        assert_eq!(e.code(), "attachment_busy", "{kind}: {e}");
        assert!(e.retry_after().unwrap() <= lease, "{kind}: {e:?}");
        assert!(took >= setup.lock_wait, "{kind}: {took:?}");
        assert!(
            took < setup.lock_wait + Duration::from_millis(1_500),
            "{kind}: {took:?}"
        );

        setup.lock_wait = Duration::from_secs(30);
        let patient = Replica::new(&setup);
        let timeout = Duration::from_secs(1);
        let start = Instant::now();
        let e = patient
            .call_with_timeout(
                &stage.id,
                "sheet_get_cell",
                json!({"address": "A1"}),
                timeout,
            )
            .unwrap_err();
        let took = start.elapsed();
        assert_eq!(e.code(), "attachment_busy", "{kind}: {e}");
        assert!(
            took >= timeout - Duration::from_millis(50),
            "{kind}: {took:?}"
        );
        assert!(
            took < timeout + Duration::from_millis(800),
            "{kind}: ended {took:?} after it asked, its timeout is {timeout:?}"
        );
        println!("{on:?}, {kind}: busy after {took:.2?} (timeout {timeout:?}): {e}");
    }
    assert_eq!(stage.env.surface().calls().len(), calls, "nothing was sent");
}

#[test]
fn a_call_behind_another_replicas_lock_is_busy_in_every_runtime_plain() {
    busy_behind_another_replica(On::Plain);
}

#[test]
fn a_call_behind_another_replicas_lock_is_busy_in_every_runtime_cluster() {
    busy_behind_another_replica(On::Cluster);
}
