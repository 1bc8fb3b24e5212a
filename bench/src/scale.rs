//! Scale: many attachments calling concurrently against one relay and a
//! few demo surfaces (in a child process), on one tokio runtime, on the
//! blocking runtime with a pool of worker threads, and for the floor.
//!
//! Memory: `VmRSS` is read once every attachment exists and before any
//! exchange is sent; `VmHWM` (the peak resident set) once the measured
//! wave has ended. (peak − before) ÷ the peak number of operations in
//! flight is the memory per in-flight exchange: each operation has exactly
//! one exchange in flight at a time. It is an upper bound: it includes
//! whatever the allocator kept, the runtime's sockets and buffers, and for
//! the blocking runtime the worker threads' touched stacks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use human_plus_blocking::{AttachmentStore, Keyring, RedisAttachmentStore, RedisConfig};

use crate::kept::{KeptFloor, Route};
use crate::net::{self, Floor, LegKind, Listing, Server, participant, pinned_policy, status_kib};
use crate::redis_server::{RedisServer, RedisStats};
use crate::timing::{percentile, us};

/// What one scale run measured.
#[derive(Debug, Default)]
struct Tally {
    latencies: Vec<Duration>,
    errors: BTreeMap<String, u64>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.latencies.extend(other.latencies);
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
    }

    fn error(&mut self, e: &dyn std::fmt::Display) {
        let mut kind = e.to_string();
        kind.truncate(80);
        *self.errors.entry(kind).or_default() += 1;
    }
}

/// Tracks operations in flight and their peak.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl InFlight {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(n, Ordering::Relaxed);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::Relaxed);
    }

    /// Runs one call counted in flight, records its latency or its error
    /// in `tally`; true when the wave is over (`deadline` passed, or none:
    /// the warm-up wave makes one call each).
    async fn time<T, E: std::fmt::Display>(
        &self,
        tally: &mut Tally,
        deadline: Option<Instant>,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> bool {
        self.enter();
        let t = Instant::now();
        let r = call.await;
        let took = t.elapsed();
        self.leave();
        match r {
            Ok(_) => tally.latencies.push(took),
            Err(e) => tally.error(&e),
        }
        deadline.is_none_or(|d| Instant::now() >= d)
    }
}

fn report(
    name: &str,
    attachments: usize,
    tally: &mut Tally,
    elapsed: Duration,
    rss_before: u64,
    peak_inflight: usize,
    cpu: (Duration, Duration),
) -> Value {
    tally.latencies.sort_unstable();
    let ops = tally.latencies.len();
    let hwm = status_kib("VmHWM");
    let per = hwm.saturating_sub(rss_before) as f64 / peak_inflight.max(1) as f64;
    json!({
        "name": name,
        "attachments": attachments,
        "peak_in_flight": peak_inflight,
        "ops": ops,
        "errors": tally.errors.values().sum::<u64>(),
        "error_kinds": tally.errors,
        "secs": elapsed.as_secs_f64(),
        "ops_per_sec": ops as f64 / elapsed.as_secs_f64(),
        "p50_us": us(percentile(&tally.latencies, 50.0)),
        "p99_us": us(percentile(&tally.latencies, 99.0)),
        "rss_before_kib": rss_before,
        "hwm_kib": hwm,
        "kib_per_in_flight": per,
        "client_cpu_us_per_op": cpu.0.as_secs_f64() * 1e6 / ops.max(1) as f64,
        "server_cpu_us_per_op": cpu.1.as_secs_f64() * 1e6 / ops.max(1) as f64,
    })
}

/// What a scale run reports besides its waves.
struct Measured<'a> {
    name: String,
    attachments: usize,
    rss_before: u64,
    server: &'a Server,
    inflight: &'a InFlight,
    duration: Duration,
}

impl Measured<'_> {
    /// Runs the warm-up wave (one call each; its errors join `warmup`'s),
    /// then the measured wave until the duration has passed; reports.
    fn run(self, mut warmup: Tally, mut wave: impl FnMut(Option<Instant>) -> Tally) -> Value {
        warmup.merge(wave(None));
        let cpu0 = (self_cpu(), self.server.cpu());
        let start = Instant::now();
        let mut tally = wave(Some(start + self.duration));
        let elapsed = start.elapsed();
        let cpu = (self_cpu() - cpu0.0, self.server.cpu() - cpu0.1);
        let mut out = report(
            &self.name,
            self.attachments,
            &mut tally,
            elapsed,
            self.rss_before,
            self.inflight.peak.load(Ordering::Relaxed),
            cpu,
        );
        out["warmup_errors"] = json!(warmup.errors.values().sum::<u64>());
        out
    }
}

fn self_cpu() -> Duration {
    net::process_cpu("/proc/self/stat")
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}

/// Mints `n` attachments on `hp` (owners `owner-<i>`, spread over the
/// server's sessions); no network. Returns (owner, attachment id) pairs.
///
/// # Panics
/// When an invitation is refused (it is not).
#[must_use]
pub fn attach_all(
    rt: &tokio::runtime::Runtime,
    hp: &human_plus_tokio::HumanPlus,
    server: &Server,
    n: usize,
) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let owner = format!("owner-{i}");
            let att = rt
                .block_on(hp.attach(owner.as_str(), server.invitation(i), participant()))
                .unwrap_or_else(|e| panic!("attach: {e}"));
            (owner, att.id().to_owned())
        })
        .collect()
}

/// `attachments` attachments spread over `sessions` surfaces, each calling
/// in a loop for `duration` after one warm-up call each, as tasks on one
/// tokio runtime (two workers); `warm`: in warm-attachment mode (each
/// attachment's leg stays open between its calls).
///
/// # Panics
/// When the setup fails.
#[must_use]
pub fn run_tokio(
    sessions: usize,
    attachments: usize,
    duration: Duration,
    leg: LegKind,
    warm: bool,
) -> Value {
    let server = Server::start(sessions);
    let policy = pinned_policy(&server);
    let rt = tokio_rt();
    let hp = human_plus_tokio::HumanPlus::new(server.config(leg.receive_leg(), policy, warm));
    let ids = attach_all(&rt, &hp, &server, attachments);
    let rss_before = status_kib("VmRSS");
    let inflight = Arc::new(InFlight::default());
    let wave = |deadline: Option<Instant>| -> Tally {
        rt.block_on(async {
            let mut tasks = Vec::with_capacity(ids.len());
            for (owner, id) in &ids {
                let hp = hp.clone();
                let (owner, id) = (owner.clone(), id.clone());
                let inflight = Arc::clone(&inflight);
                tasks.push(tokio::spawn(async move {
                    let mut tally = Tally::default();
                    while !inflight
                        .time(
                            &mut tally,
                            deadline,
                            hp.call(owner.as_str(), &id, net::TOOL, net::tool_args()),
                        )
                        .await
                    {}
                    tally
                }));
            }
            let mut all = Tally::default();
            for t in tasks {
                if let Ok(t) = t.await {
                    all.merge(t);
                }
            }
            all
        })
    };
    Measured {
        name: format!(
            "tokio{} ({} leg)",
            if warm { ", warm" } else { "" },
            leg.name()
        ),
        attachments,
        rss_before,
        server: &server,
        inflight: &inflight,
        duration,
    }
    .run(Tally::default(), wave)
}

/// The same on the blocking runtime: `threads` worker threads, each owning
/// every `threads`-th attachment and calling them in turn.
///
/// # Panics
/// When the setup fails.
#[must_use]
pub fn run_blocking(
    sessions: usize,
    attachments: usize,
    threads: usize,
    duration: Duration,
) -> Value {
    run_blocking_with(&BlockingRun {
        sessions,
        attachments,
        threads,
        duration,
        store: StoreKind::Memory,
        listing: Listing::Demo,
    })
}

/// Where the blocking run's manager keeps its attachment records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreKind {
    /// The in-memory store (the default).
    #[default]
    Memory,
    /// A Redis store on a `redis-server` this run starts on a free
    /// loopback port and kills at its end ([`RedisServer`]): every call
    /// takes the attachment's lock, loads its record and stores it back
    /// when it changed, each a round trip to that server.
    Redis,
}

impl StoreKind {
    /// The flag `scale-run` takes for it (none for the in-memory store).
    #[must_use]
    pub fn flag(self) -> Option<&'static str> {
        match self {
            StoreKind::Memory => None,
            StoreKind::Redis => Some("--redis"),
        }
    }

    /// The store `args` ask for: [`StoreKind::Redis`] when they hold its
    /// flag.
    #[must_use]
    pub fn from_args(args: &[String]) -> StoreKind {
        if args
            .iter()
            .any(|a| Some(a.as_str()) == StoreKind::Redis.flag())
        {
            StoreKind::Redis
        } else {
            StoreKind::Memory
        }
    }
}

/// A blocking scale run: the queue worker's path.
#[derive(Debug, Clone)]
pub struct BlockingRun {
    /// Demo surfaces (sessions) the attachments are spread over.
    pub sessions: usize,
    /// Attachments, each one job's target in turn.
    pub attachments: usize,
    /// Worker threads sharing one manager and one store.
    pub threads: usize,
    /// How long the measured wave lasts.
    pub duration: Duration,
    /// Where the records are kept.
    pub store: StoreKind,
    /// What the surfaces list.
    pub listing: Listing,
}

/// [`run_blocking`] with a store and a listing to choose: `threads` worker
/// threads sharing one blocking manager, each job a cold call (the lock
/// taken, the record loaded, the init cache hit, the surface re-listed,
/// the pinned call, the record stored back when it changed) on one of the
/// attachments. With the Redis store the report also has the server's
/// counters over the measured wave, per call made (calls and errors):
/// `redis_commands_per_call` (the scripts' own commands included),
/// `redis_round_trips_per_call` (the commands the client sent),
/// `redis_per_call` by command, `redis_connections_per_call` and
/// `redis_cpu_us_per_call`; and `redis_keys` and `redis_record_bytes`
/// (one record's envelope) at the end.
///
/// # Panics
/// When the setup fails (no `redis-server` among them).
#[must_use]
pub fn run_blocking_with(run: &BlockingRun) -> Value {
    let server = Server::start_listing(run.sessions, run.listing);
    let policy = pinned_policy(&server);
    let config = server.config(LegKind::Sse.receive_leg(), policy, false);
    let listing = match run.listing {
        Listing::Demo => "",
        Listing::Large => ", 200-tool listing",
    };
    let name = |store: &str| {
        format!(
            "blocking, {} threads (sse leg){store}{listing}",
            run.threads
        )
    };
    match run.store {
        StoreKind::Memory => {
            let hp = human_plus_blocking::HumanPlus::new(config);
            blocking_waves(&server, &hp, run, name(""), None, &|_| None)
        }
        StoreKind::Redis => {
            let mut redis = RedisServer::start().unwrap_or_else(|e| panic!("redis-server: {e}"));
            let keyring = Keyring::generate("bench").unwrap_or_else(|e| panic!("keyring: {e}"));
            // An idle connection kept per worker, as a queue worker of N
            // threads would configure it (the default keeps 16).
            let store = RedisAttachmentStore::open(
                RedisConfig::new(redis.url(), keyring).max_idle_connections(run.threads),
            )
            .unwrap_or_else(|e| panic!("redis store: {e}"));
            let hp = human_plus_blocking::HumanPlus::builder(config)
                .store(store)
                .build()
                .unwrap_or_else(|e| panic!("manager: {e}"));
            let key = |id: &str| Some(hp.store().record_key(id));
            let mut out = blocking_waves(
                &server,
                &hp,
                run,
                name(", redis store"),
                Some(&mut redis),
                &key,
            );
            out["redis_keys"] = json!(redis.keys().ok());
            out
        }
    }
}

/// The counters of a run's Redis around its measured wave.
#[derive(Default)]
struct RedisWave {
    before: Option<RedisStats>,
    after: Option<RedisStats>,
}

/// Attaches every attachment through `hp`, then runs the warm-up and the
/// measured waves; with `redis`, reads its counters around the measured
/// wave and reports them per call, and the size of the first attachment's
/// record (at `record_key`) at the end.
fn blocking_waves<S: AttachmentStore + 'static>(
    server: &Server,
    hp: &human_plus_blocking::HumanPlus<S>,
    run: &BlockingRun,
    name: String,
    mut redis: Option<&mut RedisServer>,
    record_key: &dyn Fn(&str) -> Option<String>,
) -> Value {
    let threads = run.threads;
    let mut ids = Vec::with_capacity(run.attachments);
    for i in 0..run.attachments {
        let owner = format!("owner-{i}");
        let att = hp
            .attach(owner.as_str(), server.invitation(i), participant())
            .unwrap_or_else(|e| panic!("attach: {e}"));
        ids.push((owner, att.id().to_owned()));
    }
    let rss_before = status_kib("VmRSS");
    let inflight = InFlight::default();
    let mut counters = RedisWave::default();
    let wave = |deadline: Option<Instant>| -> Tally {
        if deadline.is_some()
            && let Some(r) = redis.as_deref_mut()
        {
            counters.before = r.stats().ok();
        }
        let tally = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let mine: Vec<&(String, String)> =
                        ids.iter().skip(t).step_by(threads).collect();
                    let inflight = &inflight;
                    scope.spawn(move || {
                        let mut tally = Tally::default();
                        'outer: loop {
                            for (owner, id) in &mine {
                                inflight.enter();
                                let t0 = Instant::now();
                                let r = hp.call(owner.as_str(), id, net::TOOL, net::tool_args());
                                let took = t0.elapsed();
                                inflight.leave();
                                match r {
                                    Ok(_) => tally.latencies.push(took),
                                    Err(e) => tally.error(&e),
                                }
                                if deadline.is_some_and(|d| Instant::now() >= d) {
                                    break 'outer;
                                }
                            }
                            if deadline.is_none() {
                                break;
                            }
                        }
                        tally
                    })
                })
                .collect();
            let mut all = Tally::default();
            for h in handles {
                if let Ok(t) = h.join() {
                    all.merge(t);
                }
            }
            all
        });
        if deadline.is_some()
            && let Some(r) = redis.as_deref_mut()
        {
            counters.after = r.stats().ok();
        }
        tally
    };
    let mut out = Measured {
        name,
        attachments: run.attachments,
        rss_before,
        server,
        inflight: &inflight,
        duration: run.duration,
    }
    .run(Tally::default(), wave);
    if let (Some(before), Some(after)) = (&counters.before, &counters.after) {
        let d = after.since(before);
        let calls = out["ops"].as_u64().unwrap_or(0) + out["errors"].as_u64().unwrap_or(0);
        let per = |n: f64| n / calls.max(1) as f64;
        out["redis_commands_per_call"] = json!(per(d.commands() as f64));
        out["redis_round_trips_per_call"] = json!(per(d.round_trips() as f64));
        out["redis_per_call"] = d
            .calls
            .iter()
            .map(|(name, &n)| (name.clone(), json!(per(n as f64))))
            .collect::<serde_json::Map<_, _>>()
            .into();
        out["redis_connections_per_call"] = json!(per(d.connections as f64));
        out["redis_cpu_us_per_call"] = json!(per(d.cpu.as_secs_f64() * 1e6));
    }
    if let (Some(r), Some(key)) = (redis, ids.first().and_then(|(_, id)| record_key(id))) {
        out["redis_record_bytes"] = json!(r.field_len(&key, "v").ok());
    }
    out
}

/// The floor at the same concurrency: `clients` bare hyper clients doing a
/// `tools/list` then a pinned `tools/call` exchange in a loop, on one tokio
/// runtime: what the relay and the surfaces can serve.
///
/// # Panics
/// When the setup fails.
#[must_use]
pub fn run_floor(sessions: usize, clients: usize, duration: Duration, leg: LegKind) -> Value {
    let server = Server::start(sessions);
    let rt = tokio_rt();
    let floors: Vec<Arc<Floor>> = (0..clients)
        .map(|i| {
            Arc::new(Floor::new(
                server.port,
                &server.sessions[i % server.sessions.len()],
                &format!("floor_{i:04}"),
            ))
        })
        .collect();
    let rss_before = status_kib("VmRSS");
    let inflight = Arc::new(InFlight::default());
    let wave = |deadline: Option<Instant>| -> Tally {
        rt.block_on(async {
            let mut tasks = Vec::with_capacity(floors.len());
            for floor in &floors {
                let floor = Arc::clone(floor);
                let inflight = Arc::clone(&inflight);
                tasks.push(tokio::spawn(async move {
                    let mut tally = Tally::default();
                    while !inflight
                        .time(&mut tally, deadline, floor.operation(leg))
                        .await
                    {}
                    tally
                }));
            }
            let mut all = Tally::default();
            for t in tasks {
                if let Ok(t) = t.await {
                    all.merge(t);
                }
            }
            all
        })
    };
    Measured {
        name: format!("floor, bare hyper on tokio ({} leg)", leg.name()),
        attachments: clients,
        rss_before,
        server: &server,
        inflight: &inflight,
        duration,
    }
    .run(Tally::default(), wave)
}

/// The keep-alive floor at the same concurrency: `clients` keep-alive floor
/// clients ([`KeptFloor`]: one leg open for the whole run, kept POST
/// connections), each doing a `tools/list` then a pinned `tools/call`
/// exchange in a loop, on one tokio runtime. Their legs and connections
/// are opened (and `initialize` run) after the "before" RSS is read, as
/// the Human+ rows open theirs in the warm-up wave.
///
/// # Panics
/// When the setup fails.
#[must_use]
pub fn run_kept_floor(sessions: usize, clients: usize, duration: Duration, leg: LegKind) -> Value {
    let server = Server::start(sessions);
    let rt = tokio_rt();
    let relay = std::net::SocketAddr::from(([127, 0, 0, 1], server.port));
    let rss_before = status_kib("VmRSS");
    let inflight = Arc::new(InFlight::default());
    // Open every client (at most 64 opening at once), then hand each to
    // its own task.
    let (floors, open_errors) = rt.block_on(async {
        let gate = Arc::new(tokio::sync::Semaphore::new(64));
        let mut tasks = Vec::with_capacity(clients);
        for i in 0..clients {
            let session = server.sessions[i % server.sessions.len()].clone();
            let gate = Arc::clone(&gate);
            tasks.push(tokio::spawn(async move {
                let _permit = gate.acquire().await;
                let mut k = KeptFloor::open(
                    &Route::Direct(relay),
                    &session,
                    &format!("kept_{i:05}"),
                    leg,
                )
                .await?;
                k.initialize_and_list().await?;
                Ok::<_, crate::kept::FloorError>(k)
            }));
        }
        let mut floors = Vec::with_capacity(clients);
        let mut errors = Tally::default();
        for t in tasks {
            match t.await {
                Ok(Ok(k)) => floors.push(k),
                Ok(Err(e)) => errors.error(&e),
                Err(e) => errors.error(&e),
            }
        }
        (floors, errors)
    });
    let mut floors: Vec<Option<KeptFloor>> = floors.into_iter().map(Some).collect();
    let wave = |deadline: Option<Instant>| -> Tally {
        rt.block_on(async {
            let mut tasks = Vec::with_capacity(floors.len());
            for slot in &mut floors {
                let Some(mut floor) = slot.take() else {
                    continue;
                };
                let inflight = Arc::clone(&inflight);
                tasks.push(tokio::spawn(async move {
                    let mut tally = Tally::default();
                    while !inflight.time(&mut tally, deadline, floor.operation()).await {}
                    (floor, tally)
                }));
            }
            let mut all = Tally::default();
            let mut back = Vec::with_capacity(tasks.len());
            for t in tasks {
                if let Ok((floor, t)) = t.await {
                    back.push(Some(floor));
                    all.merge(t);
                }
            }
            floors = back;
            all
        })
    };
    Measured {
        name: format!("keep-alive floor, bare hyper on tokio ({} leg)", leg.name()),
        attachments: clients,
        rss_before,
        server: &server,
        inflight: &inflight,
        duration,
    }
    .run(open_errors, wave)
}
