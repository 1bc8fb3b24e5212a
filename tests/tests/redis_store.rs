//! The Redis attachment store end to end: many workers, in threads and in
//! separate OS processes, on every runtime, making pinned writes to one
//! attachment through the demo surface.
//!
//! Compiled only with the `redis` feature:
//!
//! ```text
//! cargo test -p human-plus-conformance --features redis --test redis_store
//! ```
//!
//! The Redis server is read from `HUMAN_PLUS_REDIS_URL` (default
//! `redis://127.0.0.1:6379/`; `.ci/redis` starts one). A test that cannot
//! reach it FAILS; none passes by skipping. The heavy runs are serialised
//! (one at a time) so the Redis command counts they print are their own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use human_plus_conformance::{Env, LegKind, random_hex};
use human_plus_core::{
    CallResult, EgressPolicy, Error, ManagerConfig, Participant, SurfaceAttachment,
    SurfaceInvitation, TransportConfig, TrustPolicy,
};
use human_plus_relay::CallOutcome;
use human_plus_store::{
    AsyncAttachmentStore, AsyncRedisAttachmentStore, AttachmentStore, Keyring, LockGuard,
    RedisAttachmentStore, RedisConfig,
};
use serde_json::{Value, json};

const OWNER: &str = "session:redis";
const CALLS: usize = 200;
const WORKERS: usize = 8;

fn redis_url() -> String {
    std::env::var("HUMAN_PLUS_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned())
}

/// One heavy run at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn raw() -> redis::Connection {
    redis::Client::open(redis_url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap_or_else(|e| {
            panic!(
                "Redis is required at HUMAN_PLUS_REDIS_URL (default redis://127.0.0.1:6379/; run .ci/redis): {e}"
            )
        })
}

/// How many times Redis has run `command` (INFO commandstats).
fn command_calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Every key under `prefix`, and deletes them when dropped.
struct Keys {
    prefix: String,
}

impl Keys {
    fn new() -> Keys {
        Keys {
            prefix: format!("human-plus-conformance:{}:", random_hex(6)),
        }
    }

    fn list(&self) -> Vec<String> {
        redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix))
            .query(&mut raw())
            .unwrap()
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let keys = self.list();
        if !keys.is_empty() {
            let _: Result<i64, _> = redis::cmd("DEL").arg(keys).query(&mut raw());
        }
    }
}

fn config(prefix: &str, key_hex: &str) -> RedisConfig {
    RedisConfig::new(
        redis_url(),
        Keyring::new("test", Keyring::key_from_hex(key_hex).unwrap()).unwrap(),
    )
    .prefix(prefix)
}

/// What a worker's store saw: each successful put, each conflict, and
/// how long each lock took.
#[derive(Debug, Default)]
struct Log {
    /// `(expected, new)` generations of every successful put.
    puts: Vec<(Option<u64>, u64)>,
    conflicts: usize,
    lock_waits: Vec<Duration>,
}

/// A store that records what it does, around the Redis store.
#[derive(Clone)]
struct Recording<S> {
    inner: S,
    log: Arc<Mutex<Log>>,
}

impl<S> Recording<S> {
    fn new(inner: S) -> Self {
        Recording {
            inner,
            log: Arc::default(),
        }
    }

    fn note_put(&self, record: &SurfaceAttachment, expected: Option<u64>, r: &Result<(), Error>) {
        let mut log = self.log.lock().unwrap();
        match r {
            Ok(()) => log.puts.push((expected, record.generation())),
            Err(Error::StoreConflict { .. }) => log.conflicts += 1,
            Err(_) => {}
        }
    }
}

impl<S: AttachmentStore> AttachmentStore for Recording<S> {
    fn get(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        self.inner.get(id)
    }
    fn put(&self, record: &SurfaceAttachment, expected: Option<u64>) -> Result<(), Error> {
        let r = self.inner.put(record, expected);
        self.note_put(record, expected, &r);
        r
    }
    fn lock(&self, id: &str, lease: Duration, wait: Duration) -> Result<LockGuard, Error> {
        let t = Instant::now();
        let g = self.inner.lock(id, lease, wait);
        self.log.lock().unwrap().lock_waits.push(t.elapsed());
        g
    }
}

impl<S: AsyncAttachmentStore> AsyncAttachmentStore for Recording<S> {
    async fn get(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        self.inner.get(id).await
    }
    async fn put(&self, record: &SurfaceAttachment, expected: Option<u64>) -> Result<(), Error> {
        let r = self.inner.put(record, expected).await;
        self.note_put(record, expected, &r);
        r
    }
    async fn lock(&self, id: &str, lease: Duration) -> Result<LockGuard, Error> {
        let t = Instant::now();
        let g = self.inner.lock(id, lease).await;
        self.log.lock().unwrap().lock_waits.push(t.elapsed());
        g
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Blocking,
    Tokio,
    AsyncStd,
}

/// A worker: one runtime's manager over its own Redis store, as a queue
/// worker on another machine would have.
enum Worker {
    Blocking(human_plus_blocking::HumanPlus<Recording<RedisAttachmentStore>>),
    Tokio(
        tokio::runtime::Runtime,
        human_plus_tokio::HumanPlus<Recording<AsyncRedisAttachmentStore>>,
    ),
    AsyncStd(human_plus_async_std::HumanPlus<Recording<AsyncRedisAttachmentStore>>),
}

fn manager_config(port: u16) -> ManagerConfig {
    ManagerConfig::new(
        EgressPolicy::new(["127.0.0.1"])
            .allow_ports([port])
            .allow_unverified_egress(true),
        TrustPolicy::allowing(
            ["sheet_get_cell", "sheet_set_cell"],
            human_plus_core::NO_PINS,
        ),
    )
    .transport(TransportConfig::default().receive_leg(LegKind::Sse.receive_leg()))
}

/// The managers' lock wait. Eight workers queue for one attachment, so a
/// worker waits for up to seven others' calls each time; the default 10 s
/// is enough here (the longest wait seen is about 2 s), but a loaded CI
/// machine is slower and these tests are about correctness, not latency.
const LOCK_WAIT: Duration = Duration::from_secs(60);

impl Worker {
    fn new(kind: Kind, port: u16, prefix: &str, key_hex: &str) -> (Worker, Arc<Mutex<Log>>) {
        let config = manager_config(port);
        match kind {
            Kind::Blocking => {
                let store = Recording::new(
                    RedisAttachmentStore::open(self::config(prefix, key_hex)).unwrap(),
                );
                let log = Arc::clone(&store.log);
                let hp = human_plus_blocking::HumanPlus::builder(config)
                    .store(store)
                    .lock_wait(LOCK_WAIT)
                    .build()
                    .unwrap();
                (Worker::Blocking(hp), log)
            }
            Kind::Tokio => {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap();
                let store = Recording::new(
                    rt.block_on(AsyncRedisAttachmentStore::connect(self::config(
                        prefix, key_hex,
                    )))
                    .unwrap(),
                );
                let log = Arc::clone(&store.log);
                let hp = human_plus_tokio::HumanPlus::builder(config)
                    .store(store)
                    .lock_wait(LOCK_WAIT)
                    .build()
                    .unwrap();
                (Worker::Tokio(rt, hp), log)
            }
            Kind::AsyncStd => {
                let store = Recording::new(
                    async_io::block_on(AsyncRedisAttachmentStore::connect(self::config(
                        prefix, key_hex,
                    )))
                    .unwrap(),
                );
                let log = Arc::clone(&store.log);
                let hp = human_plus_async_std::HumanPlus::builder(config)
                    .store(store)
                    .lock_wait(LOCK_WAIT)
                    .build()
                    .unwrap();
                (Worker::AsyncStd(hp), log)
            }
        }
    }

    fn attach(&self, invitation: SurfaceInvitation) -> SurfaceAttachment {
        let p = Participant::new("agent:redis", "Redis worker", "#7c3aed");
        match self {
            Worker::Blocking(hp) => hp.attach(OWNER, invitation, p),
            Worker::Tokio(rt, hp) => rt.block_on(hp.attach(OWNER, invitation, p)),
            Worker::AsyncStd(hp) => async_io::block_on(hp.attach(OWNER, invitation, p)),
        }
        .unwrap()
    }

    fn call(&self, id: &str, tool: &str, args: Value) -> Result<CallResult, Error> {
        match self {
            Worker::Blocking(hp) => hp.call(OWNER, id, tool, args),
            Worker::Tokio(rt, hp) => rt.block_on(hp.call(OWNER, id, tool, args)),
            Worker::AsyncStd(hp) => async_io::block_on(hp.call(OWNER, id, tool, args)),
        }
    }
}

/// What one worker (thread or process) reports.
#[derive(Debug, Default)]
struct Report {
    /// The revision each call was pinned to and the one it returned.
    calls: Vec<(String, String)>,
    puts: Vec<(Option<u64>, u64)>,
    conflicts: usize,
    errors: Vec<String>,
    lock_waits: Vec<Duration>,
}

fn run_calls(worker: &Worker, log: &Arc<Mutex<Log>>, id: &str, w: usize, n: usize) -> Report {
    let mut report = Report::default();
    for i in 0..n {
        let args = json!({"address": format!("D{}", w + 1), "value": format!("w{w}-{i}")});
        match worker.call(id, "sheet_set_cell", args) {
            Ok(r) => report.calls.push((
                r.pinned.map(|p| p.token().to_owned()).unwrap_or_default(),
                r.revision.map(|p| p.token().to_owned()).unwrap_or_default(),
            )),
            Err(e) => report.errors.push(format!("{}: {e}", e.code())),
        }
    }
    let log = log.lock().unwrap();
    report.puts.clone_from(&log.puts);
    report.conflicts = log.conflicts;
    report.lock_waits.clone_from(&log.lock_waits);
    report
}

fn revision_number(r: &str) -> u64 {
    r.strip_prefix('r')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("revision {r:?}"))
}

/// One measured run.
struct Run<'a> {
    label: &'a str,
    id: &'a str,
    /// The index of the first call under test in the surface's log.
    first_call: usize,
    /// The record's generation before the run.
    start_generation: u64,
    elapsed: Duration,
    /// How many scripts Redis ran during the run.
    scripts_run: u64,
}

/// Checks the properties every run must have, and prints its numbers.
fn check(run: &Run<'_>, env: &Env, store: &RedisAttachmentStore, reports: &[Report]) {
    let Run {
        label,
        id,
        first_call,
        start_generation,
        elapsed,
        scripts_run,
    } = *run;
    let total: usize = reports.iter().map(|r| r.calls.len() + r.errors.len()).sum();
    let errors: Vec<_> = reports.iter().flat_map(|r| r.errors.iter()).collect();
    assert!(errors.is_empty(), "{label}: calls failed: {errors:?}");
    let conflicts: usize = reports.iter().map(|r| r.conflicts).sum();
    assert_eq!(
        conflicts, 0,
        "{label}: with the lock held, no compare-and-set conflicts"
    );

    // The surface: every write pinned to the revision it was at, none
    // refused, none applied stale.
    let calls = env.surface().calls();
    let writes = &calls[first_call..];
    assert_eq!(
        writes.len(),
        total,
        "{label}: every call reached the surface once"
    );
    // The sheet starts at r1 and every applied write moves it by one.
    let mut at = 1 + u64::try_from(
        calls[..first_call]
            .iter()
            .filter(|c| c.outcome == CallOutcome::Written)
            .count(),
    )
    .unwrap();
    for (i, c) in writes.iter().enumerate() {
        assert_eq!(c.tool, "sheet_set_cell");
        let pinned = c
            .pinned
            .as_ref()
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{label}: write {i} went out unpinned"));
        assert_eq!(
            pinned,
            format!("r{at}"),
            "{label}: write {i} was pinned to {pinned} while the sheet was at r{at}"
        );
        assert_eq!(
            c.outcome,
            CallOutcome::Written,
            "{label}: write {i}: {:?}",
            c.outcome
        );
        at += 1;
    }
    assert_eq!(env.surface().revision(), format!("r{at}"));

    // The store: the final revision is the surface's, and the generations
    // add up: one per write, each written exactly once, in a chain.
    let last = store.get(id).unwrap().unwrap();
    assert_eq!(
        last.revision().map(|r| r.token().to_owned()),
        Some(env.surface().revision()),
        "{label}: no lost revision update"
    );
    assert_eq!(
        last.generation(),
        start_generation + u64::try_from(total).unwrap()
    );
    let mut chain: Vec<(Option<u64>, u64)> = reports.iter().flat_map(|r| r.puts.clone()).collect();
    chain.sort_by_key(|p| p.1);
    assert_eq!(chain.len(), total);
    for (i, (expected, new)) in chain.iter().enumerate() {
        let g = start_generation + u64::try_from(i).unwrap();
        assert_eq!(
            (*expected, *new),
            (Some(g), g + 1),
            "{label}: put {i} breaks the chain"
        );
    }
    for (w, r) in reports.iter().enumerate() {
        assert!(
            r.puts.windows(2).all(|p| p[0].1 < p[1].1),
            "{label}: worker {w} saw generations go back"
        );
        // Each call was pinned to the revision just before the one it got.
        for (pinned, got) in &r.calls {
            assert_eq!(
                revision_number(pinned) + 1,
                revision_number(got),
                "{label}: worker {w}"
            );
        }
    }

    let mut waits: Vec<Duration> = reports.iter().flat_map(|r| r.lock_waits.clone()).collect();
    waits.sort_unstable();
    let mean = waits.iter().sum::<Duration>() / u32::try_from(waits.len().max(1)).unwrap();
    let p99 = waits[waits.len() * 99 / 100];
    let locks = u64::try_from(waits.len()).unwrap();
    // Every call runs one put script and one release script; the other
    // scripts run were lock attempts.
    let attempts = scripts_run.saturating_sub(2 * locks);
    println!(
        "{label}: {total} pinned writes by {} workers in {elapsed:.2?} ({:.0} calls/s); \
         store conflicts 0, surface refusals 0, failed calls 0; \
         lock waits mean {mean:.2?} p99 {p99:.2?} max {:.2?}; \
         {attempts} lock attempts for {locks} locks ({} retries)",
        reports.len(),
        f64::from(u32::try_from(total).unwrap()) / elapsed.as_secs_f64(),
        waits.last().unwrap(),
        attempts.saturating_sub(locks),
    );
}

/// Attaches through `first`, makes the one unpinned read that gives the
/// attachment its first revision, and returns `(id, first write's call
/// index, generation)`.
fn prepare(env: &Env, first: &Worker, store: &RedisAttachmentStore) -> (String, usize, u64) {
    let record = first.attach(env.invitation());
    let id = record.id().to_owned();
    first
        .call(&id, "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    let loaded = store.get(&id).unwrap().unwrap();
    assert_eq!(loaded.revision().map(|r| r.token()), Some("r1"));
    (id, env.surface().calls().len(), loaded.generation())
}

fn threads(label: &str, kinds: &[Kind]) {
    let _serial = serial();
    let env = Env::start();
    let keys = Keys::new();
    let key_hex = random_hex(32);
    let store = RedisAttachmentStore::open(config(&keys.prefix, &key_hex)).unwrap();
    let workers: Vec<_> = kinds
        .iter()
        .map(|k| Worker::new(*k, env.port, &keys.prefix, &key_hex))
        .collect();
    let (id, first_call, start_generation) = prepare(&env, &workers[0].0, &store);
    let mut conn = raw();
    let scripts_before = command_calls(&mut conn, "evalsha");
    let barrier = Arc::new(Barrier::new(workers.len()));
    let t = Instant::now();
    let handles: Vec<_> = workers
        .into_iter()
        .enumerate()
        .map(|(w, (worker, log))| {
            let (id, barrier) = (id.clone(), Arc::clone(&barrier));
            // The first call's lock is already logged; count from here.
            *log.lock().unwrap() = Log::default();
            thread::spawn(move || {
                barrier.wait();
                run_calls(&worker, &log, &id, w, CALLS)
            })
        })
        .collect();
    let reports: Vec<Report> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let elapsed = t.elapsed();
    let scripts_run = command_calls(&mut conn, "evalsha") - scripts_before;
    check(
        &Run {
            label,
            id: &id,
            first_call,
            start_generation,
            elapsed,
            scripts_run,
        },
        &env,
        &store,
        &reports,
    );
}

#[test]
fn eight_blocking_threads_x200_pinned_writes() {
    threads("blocking x8", &[Kind::Blocking; WORKERS]);
}

// The mixed run below covers every runtime in CI; these give each async
// runtime's own numbers: `cargo test ... --test redis_store -- --ignored`.
#[test]
#[ignore = "per-runtime numbers; the mixed-runtime run covers tokio in CI"]
fn eight_tokio_workers_x200_pinned_writes() {
    threads("tokio x8", &[Kind::Tokio; WORKERS]);
}

#[test]
#[ignore = "per-runtime numbers; the mixed-runtime run covers async-std in CI"]
fn eight_async_std_workers_x200_pinned_writes() {
    threads("async-std x8", &[Kind::AsyncStd; WORKERS]);
}

#[test]
fn eight_workers_of_mixed_runtimes_x200_pinned_writes() {
    use Kind::{AsyncStd, Blocking, Tokio};
    threads(
        "mixed x8",
        &[
            Blocking, Tokio, AsyncStd, Blocking, Tokio, AsyncStd, Blocking, Tokio,
        ],
    );
}

// ---------------------------------------------------------------------
// Separate OS processes: the test binary re-runs itself as a worker.
// ---------------------------------------------------------------------

const WORKER_ENV: &str = "HUMAN_PLUS_REDIS_WORKER";

/// What a worker process is told, as JSON in [`WORKER_ENV`].
fn worker_spec(
    mode: &str,
    port: u16,
    prefix: &str,
    key_hex: &str,
    id: &str,
    w: usize,
    n: usize,
) -> String {
    json!({"mode": mode, "port": port, "prefix": prefix, "key": key_hex, "id": id, "w": w, "n": n})
        .to_string()
}

fn spawn_worker(spec: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "worker_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER_ENV, spec)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The worker process's entry point: does nothing unless the parent set
/// [`WORKER_ENV`].
#[test]
fn worker_process() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let spec: Value = serde_json::from_str(&spec).unwrap();
    let s = |k: &str| spec[k].as_str().unwrap().to_owned();
    let u = |k: &str| usize::try_from(spec[k].as_u64().unwrap()).unwrap();
    match s("mode").as_str() {
        "calls" => {
            let port = u16::try_from(u("port")).unwrap();
            let (worker, log) = Worker::new(Kind::Blocking, port, &s("prefix"), &s("key"));
            println!("READY");
            // Start together: wait for the parent's go on stdin's close.
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            let r = run_calls(&worker, &log, &s("id"), u("w"), u("n"));
            let out = json!({
                "calls": r.calls,
                "puts": r.puts,
                "conflicts": r.conflicts,
                "errors": r.errors,
                "lock_waits_us": r.lock_waits.iter().map(|d| u64::try_from(d.as_micros()).unwrap()).collect::<Vec<_>>(),
            });
            println!("REPORT {out}");
        }
        "hold-lock" => {
            let store = RedisAttachmentStore::open(config(&s("prefix"), &s("key"))).unwrap();
            let lease = Duration::from_millis(spec["lease_ms"].as_u64().unwrap());
            let guard = store.lock(&s("id"), lease, Duration::ZERO).unwrap();
            println!("LOCKED {}", guard.token());
            // Killed here, holding the lock.
            thread::sleep(Duration::from_secs(600));
        }
        other => panic!("unknown worker mode {other}"),
    }
}

fn parse_report(line: &str) -> Report {
    let v: Value = serde_json::from_str(line).unwrap();
    let pair = |p: &Value| {
        (
            p[0].as_str().unwrap().to_owned(),
            p[1].as_str().unwrap().to_owned(),
        )
    };
    Report {
        calls: v["calls"].as_array().unwrap().iter().map(pair).collect(),
        puts: v["puts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64(), p[1].as_u64().unwrap()))
            .collect(),
        conflicts: usize::try_from(v["conflicts"].as_u64().unwrap()).unwrap(),
        errors: v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap().to_owned())
            .collect(),
        lock_waits: v["lock_waits_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| Duration::from_micros(d.as_u64().unwrap()))
            .collect(),
    }
}

#[test]
fn two_blocking_processes_x200_pinned_writes() {
    let _serial = serial();
    let env = Env::start();
    let keys = Keys::new();
    let key_hex = random_hex(32);
    let store = RedisAttachmentStore::open(config(&keys.prefix, &key_hex)).unwrap();
    let (first, _) = Worker::new(Kind::Blocking, env.port, &keys.prefix, &key_hex);
    let (id, first_call, start_generation) = prepare(&env, &first, &store);
    drop(first);

    let mut children: Vec<_> = (0..2)
        .map(|w| {
            spawn_worker(&worker_spec(
                "calls",
                env.port,
                &keys.prefix,
                &key_hex,
                &id,
                w,
                CALLS,
            ))
        })
        .collect();
    let mut outputs: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().unwrap()))
        .collect();
    for out in &mut outputs {
        let mut line = String::new();
        // The harness may print "test worker_process ... " on the same line.
        while !line.contains("READY") {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "a worker died before it was ready"
            );
        }
    }
    let mut conn = raw();
    let scripts_before = command_calls(&mut conn, "evalsha");
    let t = Instant::now();
    // Go: closing their stdin releases both at once.
    for c in &mut children {
        drop(c.stdin.take());
    }
    let reports: Vec<Report> = outputs
        .into_iter()
        .map(|out| {
            // Read to the end: the child's harness still writes after it.
            let lines: Vec<String> = out.lines().map(Result::unwrap).collect();
            let report = lines
                .iter()
                .find_map(|l| l.split_once("REPORT ").map(|(_, r)| r.to_owned()))
                .expect("a worker process ended without its report");
            parse_report(&report)
        })
        .collect();
    let elapsed = t.elapsed();
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
    let scripts_run = command_calls(&mut conn, "evalsha") - scripts_before;
    check(
        &Run {
            label: "2 blocking processes",
            id: &id,
            first_call,
            start_generation,
            elapsed,
            scripts_run,
        },
        &env,
        &store,
        &reports,
    );
    // Both processes really shared the work.
    assert!(reports.iter().all(|r| r.calls.len() == CALLS));
}

#[test]
fn a_killed_processs_lock_frees_after_its_lease() {
    let keys = Keys::new();
    let key_hex = random_hex(32);
    let store = RedisAttachmentStore::open(config(&keys.prefix, &key_hex)).unwrap();
    let lease_ms = 1500;
    let mut spec: Value = serde_json::from_str(&worker_spec(
        "hold-lock",
        0,
        &keys.prefix,
        &key_hex,
        "surface_crashed",
        0,
        0,
    ))
    .unwrap();
    spec["lease_ms"] = json!(lease_ms);
    let mut child = spawn_worker(&spec.to_string());
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("LOCKED ") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the worker died before locking"
        );
    }
    let locked_at = Instant::now();
    let token = line.trim().rsplit("LOCKED ").next().unwrap().to_owned();
    child.kill().unwrap();
    child.wait().unwrap();

    // Dead, but its lock is held until the lease runs out.
    let held: Option<String> = redis::cmd("GET")
        .arg(store.lock_key("surface_crashed"))
        .query(&mut raw())
        .unwrap();
    assert_eq!(held.as_deref(), Some(token.as_str()));
    assert!(
        store
            .lock("surface_crashed", Duration::from_secs(30), Duration::ZERO)
            .is_err()
    );
    let g = store
        .lock(
            "surface_crashed",
            Duration::from_secs(30),
            Duration::from_secs(10),
        )
        .unwrap();
    let freed = locked_at.elapsed();
    println!("a killed process's lock (lease {lease_ms} ms) was taken over after {freed:.2?}");
    assert!(freed >= Duration::from_millis(lease_ms - 300), "{freed:?}");
    assert!(freed < Duration::from_millis(lease_ms + 2000), "{freed:?}");
    assert_ne!(g.token(), token);
}

fn worker_record_key(prefix: &str, id: &str) -> String {
    format!("{prefix}{id}")
}

#[test]
fn the_stored_attachment_never_shows_the_relay_token() {
    let env = Env::start();
    let keys = Keys::new();
    let key_hex = random_hex(32);
    let (worker, _) = Worker::new(Kind::Tokio, env.port, &keys.prefix, &key_hex);
    let record = worker.attach(env.invitation());
    worker
        .call(
            record.id(),
            "sheet_set_cell",
            json!({"address": "A1", "value": "x"}),
        )
        .unwrap();
    let mut conn = raw();
    // The record, and perhaps its lock still (an async guard's release
    // runs just after the call returns).
    let listed = keys.list();
    assert!(
        listed.contains(&worker_record_key(&keys.prefix, record.id())),
        "{listed:?}"
    );
    let mut seen = BTreeMap::new();
    for key in listed {
        let kind: String = redis::cmd("TYPE").arg(&key).query(&mut conn).unwrap();
        let bytes: Vec<u8> = match kind.as_str() {
            "hash" => {
                let fields: Vec<Vec<u8>> =
                    redis::cmd("HGETALL").arg(&key).query(&mut conn).unwrap();
                fields.concat()
            }
            "string" => redis::cmd("GET")
                .arg(&key)
                .query(&mut conn)
                .unwrap_or_default(),
            _ => continue,
        };
        assert!(
            !bytes
                .windows(env.token.len())
                .any(|w| w == env.token.as_bytes()),
            "the relay token is readable at {key}"
        );
        assert!(
            !bytes
                .windows(env.session.len())
                .any(|w| w == env.session.as_bytes())
        );
        seen.insert(key, bytes.len());
    }
    // Another worker with the wrong key refuses the record loudly.
    let wrong = RedisAttachmentStore::open(config(&keys.prefix, &random_hex(32))).unwrap();
    let e = wrong.get(record.id()).unwrap_err();
    assert!(matches!(e, Error::Store(_)), "{e:?}");
    human_plus_conformance::assert_no_token(&e, &env.token);
    let (other, _) = Worker::new(Kind::Blocking, env.port, &keys.prefix, &random_hex(32));
    let e = other
        .call(record.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap_err();
    assert_eq!(e.code(), "store_failed", "{e}");
    human_plus_conformance::assert_no_token(&e, &env.token);
    assert!(!seen.is_empty());
}
