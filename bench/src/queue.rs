//! The queue worker with a worker killed: worker processes of a few
//! threads each (one blocking manager per process) on one Redis, jobs over
//! a few conversations arriving at a fixed rate from a dispatcher (this
//! process), and, in the run with a kill, one worker SIGKILLed mid-run.
//!
//! Each job is a cold call (`sheet_get_cell`) on its conversation; each
//! page takes a fixed time to answer each message (the relay holds its
//! answers), so a call takes a few hundred milliseconds and a worker holds
//! conversations' locks when it dies. The dispatcher sends a job to the
//! worker with the fewest jobs in flight (at most its threads); a job a
//! worker answers `attachment_busy` is put back, due after the busy
//! answer's `retry_after` (the queue re-schedules instead of holding a
//! thread), and up to half of it again at random unless `groups` is set:
//! with `groups`, a conversation's jobs are dispatched one at a time (a
//! FIFO queue's message group); a dead worker's jobs in flight are put back at once (a queue's
//! redelivery). A job's delay is from when it arrived to when it was done.
//!
//! A conversation is "dead" when the killed worker held its lock at the
//! kill (its lock key still holds a token just after); the others are
//! healthy. The takeover time of a dead conversation runs from the kill to
//! its first job done.
//!
//! `long_call` measures what renewal adds to one call that runs longer
//! than the renewal interval: its Redis round trips beside a short call's.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use human_plus_blocking::{Keyring, RedisAttachmentStore, RedisConfig};
use human_plus_core::{NO_PINS, TrustPolicy};
use serde_json::{Value, json};

use crate::net::{self, LegKind, Listing, Server, participant};
use crate::redis_server::RedisServer;
use crate::timing::{percentile, us};

/// A queue run.
#[derive(Debug, Clone)]
pub struct QueueRun {
    /// Worker processes.
    pub workers: usize,
    /// Threads per worker (sharing its manager).
    pub threads: usize,
    /// Jobs in all.
    pub jobs: usize,
    /// Conversations (attachments), one page each; job `i` is on
    /// conversation `i % conversations`.
    pub conversations: usize,
    /// Jobs arriving per second.
    pub rate: f64,
    /// How long each page takes to answer each message.
    pub reply_delay: Duration,
    /// When to kill a worker (none: no kill).
    pub kill_after: Option<Duration>,
    /// The managers' lock lease.
    pub lease: Duration,
    /// The managers' lock wait.
    pub lock_wait: Duration,
    /// One job per conversation at a time (a FIFO queue's message group):
    /// the next job of a conversation is dispatched once the one before is
    /// done.
    pub groups: bool,
}

impl Default for QueueRun {
    fn default() -> Self {
        QueueRun {
            workers: 4,
            threads: 4,
            jobs: 400,
            conversations: 10,
            rate: 20.0,
            reply_delay: Duration::from_millis(100),
            kill_after: None,
            lease: human_plus_blocking::DEFAULT_LEASE,
            lock_wait: Duration::from_millis(250),
            groups: false,
        }
    }
}

/// The trust every worker declares: the one tool the jobs call.
fn trust() -> TrustPolicy {
    TrustPolicy::allowing([net::TOOL], NO_PINS)
}

/// A worker process, from this very executable (`queue-worker SPEC`).
struct WorkerProc {
    child: Child,
    stdin: Option<ChildStdin>,
    in_flight: BTreeSet<usize>,
    alive: bool,
    cpu_at_death: Option<Duration>,
}

impl WorkerProc {
    fn cpu(&self) -> Duration {
        self.cpu_at_death
            .unwrap_or_else(|| net::process_cpu(&format!("/proc/{}/stat", self.child.id())))
    }

    fn send(&mut self, line: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = stdin.write_all(line.as_bytes());
            let _ = stdin.write_all(b"\n");
            let _ = stdin.flush();
        }
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a worker process reports, one line each.
enum Event {
    Ready,
    Done {
        job: usize,
        code: String,
        retry: Duration,
    },
    Ended,
}

/// `queue-worker SPEC`: a worker process. `SPEC` is JSON: `port`,
/// `redis`, `key`, `threads`, `lease_ms`, `lock_wait_ms`. Prints `READY`,
/// then reads `JOB <n> <owner> <attachment>` lines, runs each on one of its
/// threads and prints `DONE <n> <code> <retry_after_ms>` (`ok` for a
/// success); ends when its standard input closes.
///
/// # Panics
/// When the spec is malformed or the store cannot connect.
pub fn worker(spec: &str) {
    let spec: Value = serde_json::from_str(spec).unwrap_or_else(|e| panic!("spec: {e}"));
    let n = |k: &str| spec[k].as_u64().unwrap_or_else(|| panic!("spec.{k}"));
    let port = u16::try_from(n("port")).unwrap_or_else(|e| panic!("port: {e}"));
    let threads = usize::try_from(n("threads")).unwrap_or(1);
    let keyring = Keyring::new(
        "bench",
        Keyring::key_from_hex(spec["key"].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("key: {e}")),
    )
    .unwrap_or_else(|e| panic!("keyring: {e}"));
    let store = RedisAttachmentStore::open(
        RedisConfig::new(spec["redis"].as_str().unwrap_or_default(), keyring)
            .max_idle_connections(threads),
    )
    .unwrap_or_else(|e| panic!("redis store: {e}"));
    let config = net::config_for(port, LegKind::Sse.receive_leg(), trust());
    let hp = human_plus_blocking::HumanPlus::builder(config)
        .store(store)
        .lock_lease(Duration::from_millis(n("lease_ms")))
        .lock_wait(Duration::from_millis(n("lock_wait_ms")))
        .build()
        .unwrap_or_else(|e| panic!("manager: {e}"));
    let (tx, rx) = mpsc::channel::<(usize, String, String)>();
    let rx = std::sync::Mutex::new(rx);
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let job = rx
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .recv();
                    let Ok((job, owner, id)) = job else { return };
                    let r = hp.call(owner.as_str(), &id, net::TOOL, net::tool_args());
                    let (code, retry) = match &r {
                        Ok(_) => ("ok", 0),
                        Err(e) => (
                            e.code(),
                            e.retry_after().map_or(0, |d| d.as_millis() as u64),
                        ),
                    };
                    let mut out = out
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let _ = writeln!(out, "DONE {job} {code} {retry}");
                    let _ = out.flush();
                }
            });
        }
        {
            let mut out = out
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = writeln!(out, "READY");
            let _ = out.flush();
        }
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let mut words = line.split_whitespace();
            if words.next() != Some("JOB") {
                continue;
            }
            let (Some(job), Some(owner), Some(id)) = (words.next(), words.next(), words.next())
            else {
                continue;
            };
            let Ok(job) = job.parse() else { continue };
            if tx.send((job, owner.to_owned(), id.to_owned())).is_err() {
                break;
            }
        }
        drop(tx);
    });
}

/// Runs the queue: see the module documentation.
///
/// # Panics
/// When the setup fails (no `redis-server` among them) or a worker the
/// run did not kill dies.
#[must_use]
#[allow(clippy::too_many_lines)]
pub fn run(q: &QueueRun) -> Value {
    let server = Server::start_with(q.conversations, Listing::Demo, q.reply_delay);
    let mut redis = RedisServer::start().unwrap_or_else(|e| panic!("redis-server: {e}"));
    let key_hex = human_plus_core::hex(&rand_bytes());
    let keyring = Keyring::new("bench", Keyring::key_from_hex(&key_hex).unwrap())
        .unwrap_or_else(|e| panic!("keyring: {e}"));
    let store = RedisAttachmentStore::open(RedisConfig::new(redis.url(), keyring))
        .unwrap_or_else(|e| panic!("redis store: {e}"));
    let attach = human_plus_blocking::HumanPlus::builder(net::config_for(
        server.port,
        LegKind::Sse.receive_leg(),
        trust(),
    ))
    .store(store)
    .build()
    .unwrap_or_else(|e| panic!("manager: {e}"));
    let conversations: Vec<(String, String)> = (0..q.conversations)
        .map(|i| {
            let owner = format!("owner-{i}");
            let a = attach
                .attach(owner.as_str(), server.invitation(i), participant())
                .unwrap_or_else(|e| panic!("attach: {e}"));
            (owner, a.id().to_owned())
        })
        .collect();

    // The workers.
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let spec = json!({
        "port": server.port,
        "redis": redis.url(),
        "key": key_hex,
        "threads": q.threads,
        "lease_ms": q.lease.as_millis() as u64,
        "lock_wait_ms": q.lock_wait.as_millis() as u64,
    })
    .to_string();
    let (tx, events) = mpsc::channel::<(usize, Event)>();
    let mut workers: Vec<WorkerProc> = (0..q.workers)
        .map(|w| {
            let mut child = Command::new(&exe)
                .args(["queue-worker", &spec])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn queue-worker: {e}"));
            let out = BufReader::new(child.stdout.take().unwrap_or_else(|| panic!("stdout")));
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in out.lines() {
                    let Ok(line) = line else { break };
                    let mut words = line.split_whitespace();
                    let event = match words.next() {
                        Some("READY") => Event::Ready,
                        Some("DONE") => {
                            let job = words.next().and_then(|j| j.parse().ok()).unwrap_or(0);
                            let code = words.next().unwrap_or("?").to_owned();
                            let retry = words.next().and_then(|r| r.parse().ok()).unwrap_or(0);
                            Event::Done {
                                job,
                                code,
                                retry: Duration::from_millis(retry),
                            }
                        }
                        _ => continue,
                    };
                    if tx.send((w, event)).is_err() {
                        return;
                    }
                }
                let _ = tx.send((w, Event::Ended));
            });
            WorkerProc {
                stdin: child.stdin.take(),
                child,
                in_flight: BTreeSet::new(),
                alive: true,
                cpu_at_death: None,
            }
        })
        .collect();
    drop(tx);
    let mut ready = 0;
    while ready < q.workers {
        match events.recv_timeout(Duration::from_secs(30)) {
            Ok((_, Event::Ready)) => ready += 1,
            Ok((w, Event::Ended)) => panic!("worker {w} died before it was ready"),
            Ok(_) => {}
            Err(e) => panic!("the workers were not ready: {e}"),
        }
    }

    // The queue.
    let start = Instant::now();
    let arrival: Vec<Instant> = (0..q.jobs)
        .map(|i| start + Duration::from_secs_f64(i as f64 / q.rate))
        .collect();
    let conversation_of = |job: usize| job % q.conversations;
    let mut due: BinaryHeap<std::cmp::Reverse<(Instant, usize)>> = arrival
        .iter()
        .enumerate()
        .map(|(i, t)| std::cmp::Reverse((*t, i)))
        .collect();
    let mut done: Vec<Option<Instant>> = vec![None; q.jobs];
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut busy_answers = 0_u64;
    let mut redelivered = 0_u64;
    let mut finished = 0;
    let mut killed: Option<(Instant, usize)> = None;
    let mut dead: BTreeSet<usize> = BTreeSet::new();
    let mut jitter_source = Jitter(rand_u64());
    // With groups: the job each conversation has in flight (or put back
    // busy), and the jobs due behind it.
    let mut occupant: BTreeMap<usize, usize> = BTreeMap::new();
    let mut held_back: BTreeMap<usize, VecDeque<(Instant, usize)>> = BTreeMap::new();
    let before = redis.stats().unwrap_or_else(|e| panic!("redis stats: {e}"));
    let limit = start + Duration::from_secs_f64(q.jobs as f64 / q.rate) + Duration::from_secs(120);
    while finished < q.jobs {
        let now = Instant::now();
        assert!(
            now < limit,
            "the queue did not drain: {finished} of {} jobs done",
            q.jobs
        );
        // The kill: the live worker with the most jobs in flight.
        if let Some(after) = q.kill_after
            && killed.is_none()
            && now >= start + after
            && let Some((victim, _)) = workers
                .iter()
                .enumerate()
                .filter(|(_, w)| w.alive)
                .max_by_key(|(_, w)| w.in_flight.len())
                .filter(|(_, w)| w.in_flight.len() >= 2)
        {
            let w = &mut workers[victim];
            w.cpu_at_death = Some(w.cpu());
            let _ = w.child.kill();
            let _ = w.child.wait();
            let at = Instant::now();
            w.alive = false;
            killed = Some((at, victim));
            // Which conversations it still holds.
            for &job in &w.in_flight {
                let c = conversation_of(job);
                let key = attach.store().lock_key(&conversations[c].1);
                if redis_get(&mut redis, &key).is_some() {
                    dead.insert(c);
                }
            }
            for job in std::mem::take(&mut w.in_flight) {
                redelivered += 1;
                due.push(std::cmp::Reverse((at, job)));
            }
        }
        // Dispatch what is due to the least busy live worker (with groups,
        // a job whose conversation has another in flight waits its turn).
        while let Some(std::cmp::Reverse((when, job))) = due.peek().copied() {
            if when > now {
                break;
            }
            let c = conversation_of(job);
            if q.groups && occupant.get(&c).is_some_and(|&o| o != job) {
                due.pop();
                held_back.entry(c).or_default().push_back((when, job));
                continue;
            }
            let Some(w) = workers
                .iter_mut()
                .filter(|w| w.alive && w.in_flight.len() < q.threads)
                .min_by_key(|w| w.in_flight.len())
            else {
                break;
            };
            due.pop();
            let (owner, id) = &conversations[c];
            w.send(&format!("JOB {job} {owner} {id}"));
            w.in_flight.insert(job);
            occupant.insert(c, job);
        }
        let next_due = due
            .peek()
            .map_or(Duration::from_millis(5), |std::cmp::Reverse((t, _))| {
                t.saturating_duration_since(now)
            })
            .min(Duration::from_millis(5));
        match events.recv_timeout(next_due) {
            Ok((w, Event::Done { job, code, retry })) => {
                if !workers[w].in_flight.remove(&job) {
                    continue; // a dead worker's late line
                }
                *outcomes.entry(code.clone()).or_default() += 1;
                if code != "attachment_busy" {
                    // Its conversation's next job may go.
                    let c = conversation_of(job);
                    occupant.remove(&c);
                    if let Some(next) = held_back.get_mut(&c).and_then(VecDeque::pop_front) {
                        due.push(std::cmp::Reverse(next));
                    }
                }
                if code == "ok" {
                    done[job] = Some(Instant::now());
                    finished += 1;
                } else if code == "attachment_busy" {
                    // Put back after the busy answer's retry_after; without
                    // groups with up to half of it again at random (the
                    // jobs a dead worker's conversation collected would
                    // all come back at the same instant otherwise).
                    busy_answers += 1;
                    let jitter = if q.groups {
                        Duration::ZERO
                    } else {
                        retry.mul_f64(jitter_source.fraction() / 2.0)
                    };
                    due.push(std::cmp::Reverse((Instant::now() + retry + jitter, job)));
                } else {
                    // Failed for good: counted, not retried.
                    finished += 1;
                }
            }
            Ok((w, Event::Ended)) => {
                assert!(!workers[w].alive, "worker {w} died on its own");
            }
            Ok((_, Event::Ready)) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("every worker is gone"),
        }
    }
    let elapsed = start.elapsed();
    let after = redis.stats().unwrap_or_else(|e| panic!("redis stats: {e}"));
    let cpu: Duration = workers.iter().map(WorkerProc::cpu).sum();
    drop(workers);

    let ok = done.iter().filter(|d| d.is_some()).count();
    let delays = |dead_ones: bool| -> Vec<Duration> {
        let mut v: Vec<Duration> = done
            .iter()
            .enumerate()
            .filter(|(j, _)| dead.contains(&conversation_of(*j)) == dead_ones)
            .filter_map(|(j, d)| d.map(|d| d - arrival[j]))
            .collect();
        v.sort_unstable();
        v
    };
    let (healthy, dead_delays) = (delays(false), delays(true));
    let takeovers: Vec<f64> = match killed {
        Some((at, _)) => dead
            .iter()
            .filter_map(|c| {
                done.iter()
                    .enumerate()
                    .filter(|(j, d)| conversation_of(*j) == *c && d.is_some_and(|d| d > at))
                    .filter_map(|(_, d)| *d)
                    .min()
                    .map(|d| (d - at).as_secs_f64())
            })
            .collect(),
        None => Vec::new(),
    };
    let d = after.since(&before);
    let per = |n: f64| n / ok.max(1) as f64;
    json!({
        "workers": q.workers,
        "threads": q.threads,
        "jobs": q.jobs,
        "conversations": q.conversations,
        "rate": q.rate,
        "reply_delay_ms": q.reply_delay.as_millis() as u64,
        "lease_ms": q.lease.as_millis() as u64,
        "lock_wait_ms": q.lock_wait.as_millis() as u64,
        "groups": q.groups,
        "killed": killed.is_some(),
        "secs": elapsed.as_secs_f64(),
        "jobs_done": ok,
        "outcomes": outcomes,
        "busy_answers": busy_answers,
        "redelivered": redelivered,
        "dead_conversations": dead.len(),
        "takeover_secs": takeovers,
        "healthy_delay_p50_ms": us(percentile(&healthy, 50.0)) / 1000.0,
        "healthy_delay_p99_ms": us(percentile(&healthy, 99.0)) / 1000.0,
        "healthy_delay_max_ms": healthy.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        "dead_delay_max_ms": dead_delays.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        "redis_commands_per_job": per(d.commands() as f64),
        "redis_round_trips_per_job": per(d.round_trips() as f64),
        "redis_per_job": d.calls.iter().map(|(k, &n)| (k.clone(), json!(per(n as f64)))).collect::<serde_json::Map<_, _>>(),
        "worker_cpu_us_per_job": per(cpu.as_secs_f64() * 1e6),
    })
}

/// What renewal adds to a call: the Redis round trips of one call on a
/// page that answers at once, and of one whose page takes `hold / 2` for
/// each of its two answers (the listing and the call), with the lease
/// `lease` (renewed every third of it).
///
/// # Panics
/// When the setup fails.
#[must_use]
pub fn long_call(hold: Duration, lease: Duration) -> Value {
    let mut redis = RedisServer::start().unwrap_or_else(|e| panic!("redis-server: {e}"));
    let mut measure = |reply_delay: Duration| -> (f64, Duration, BTreeMap<String, u64>) {
        let server = Server::start_with(1, Listing::Demo, reply_delay);
        let keyring = Keyring::generate("bench").unwrap_or_else(|e| panic!("keyring: {e}"));
        let store = RedisAttachmentStore::open(RedisConfig::new(redis.url(), keyring))
            .unwrap_or_else(|e| panic!("redis store: {e}"));
        let hp = human_plus_blocking::HumanPlus::builder(net::config_for(
            server.port,
            LegKind::Sse.receive_leg(),
            trust(),
        ))
        .store(store)
        .lock_lease(lease)
        .build()
        .unwrap_or_else(|e| panic!("manager: {e}"));
        let a = hp
            .attach("owner", server.invitation(0), participant())
            .unwrap_or_else(|e| panic!("attach: {e}"));
        // The first call initialises the session; the second is measured.
        hp.call("owner", a.id(), net::TOOL, net::tool_args())
            .unwrap_or_else(|e| panic!("call: {e}"));
        let before = redis.stats().unwrap_or_else(|e| panic!("redis stats: {e}"));
        let t = Instant::now();
        hp.call("owner", a.id(), net::TOOL, net::tool_args())
            .unwrap_or_else(|e| panic!("call: {e}"));
        let took = t.elapsed();
        let d = redis
            .stats()
            .unwrap_or_else(|e| panic!("redis stats: {e}"))
            .since(&before);
        (d.round_trips() as f64, took, d.calls)
    };
    let (short, short_took, short_calls) = measure(Duration::ZERO);
    let (long, long_took, long_calls) = measure(hold / 2);
    json!({
        "lease_ms": lease.as_millis() as u64,
        "short_call_ms": short_took.as_secs_f64() * 1000.0,
        "short_call_round_trips": short,
        "short_call_commands": short_calls,
        "long_call_ms": long_took.as_secs_f64() * 1000.0,
        "long_call_round_trips": long,
        "long_call_commands": long_calls,
    })
}

/// A small xorshift generator for the queue's jitter.
struct Jitter(u64);

impl Jitter {
    /// A number in [0, 1).
    fn fraction(&mut self) -> f64 {
        let mut x = self.0.max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn rand_u64() -> u64 {
    let b = rand_bytes();
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

fn redis_get(redis: &mut RedisServer, key: &str) -> Option<String> {
    redis.get(key).ok().flatten()
}

fn rand_bytes() -> [u8; 32] {
    let mut b = [0u8; 32];
    getrandom_fill(&mut b);
    b
}

fn getrandom_fill(b: &mut [u8]) {
    use human_plus_core::Entropy;
    human_plus_runtime::OsEntropy.fill_bytes(b);
}
