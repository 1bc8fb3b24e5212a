//! `compare service`: the example service's shape (issue 43), side by side
//! in one run.
//!
//! Two replicas (two tokio managers, each over its own connection to one
//! `redis-server`), `pages` demo pages on one relay (in this process, on a
//! runtime of their own, so what each page saw can be counted), one
//! conversation per page, all called concurrently: each conversation's
//! calls alternate between the two replicas, as a load balancer spreads
//! them. Four rows, measured in alternating windows (kept, cold, floor,
//! store, kept, ...):
//!
//! * **kept**: the managers as a service builds them now, with the
//!   defaults (legs kept, bounded);
//! * **cold**: the same with `TransportConfig::warm(false)`, the shipped
//!   default before issue 43: one leg per operation;
//! * **floor**: a bare relay client keeping one leg per page
//!   ([`KeptFloor`]), no store;
//! * **store**: the kept row's stores alone, each call's store work of a
//!   warm read (`lock_and_get`, then `release`) and nothing else: the
//!   store's share of a kept call.
//!
//! Per row: p50 and p99 of a call, the `tools/list` and `tools/call` the
//! pages received per call, the presence changes they saw per call
//! (`peer_joined` and `peer_left`), and the Redis commands (the scripts'
//! own included) and round trips per call. Ratios, never timed assertions.
//!
//! And the heap the replicas hold, apart from the relay and the pages in
//! the same process: each row's pair runs on a tokio runtime of its own,
//! whose threads (and the main thread while it drives them) carry that
//! row's tag in the counting allocator ([`crate::heap`], installed by
//! `compare`). [`ServiceOpts::memory_steps`] samples it as conversations
//! are added, with the kept legs the relay holds open at each step.

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use human_plus_core::{ManagerConfig, Participant, TransportConfig, TrustPolicy};
use human_plus_relay::{DemoSurface, RelayHandle, RelayServer};
use human_plus_tokio::{AsyncRedisAttachmentStore, HumanPlus, Keyring, RedisConfig};

use crate::heap;
use crate::kept::{KeptFloor, Route};
use crate::net::{LegKind, TOKEN, TOOL, tool_args};
use crate::redis_server::{RedisServer, RedisStats};
use crate::timing::percentile;

/// What `compare service` runs.
#[derive(Debug, Clone)]
pub struct ServiceOpts {
    /// Pages (default 20).
    pub pages: usize,
    /// Conversations, on the pages in turn (default: one per page). More
    /// than the replicas keep legs for shows the bound at work.
    pub conversations: usize,
    /// The replicas' bound on kept legs (default: the library's).
    pub kept_legs: Option<usize>,
    /// Windows per row (default 4).
    pub rounds: usize,
    /// Calls per conversation per window (default 10).
    pub calls: usize,
    /// The receive leg.
    pub leg: LegKind,
    /// Each conversation called on one replica only (sticky routing)
    /// instead of alternating: what the two replicas' alternation costs.
    pub sticky: bool,
    /// At most this many conversations called at once (default: all), as
    /// a service's own request concurrency bounds them.
    pub concurrency: usize,
    /// Every measured call a pinned write (`sheet_set_cell`) instead of a
    /// read: the store's write path (the record put back with the lock).
    /// Needs one conversation per page (each conversation's writes move
    /// its page's revision). Before each window, every conversation reads
    /// once, unmeasured, so its first write is pinned to what the other
    /// rows' writes left.
    pub write: bool,
    /// After how many conversations (each attached and called once on
    /// each replica) to sample the replicas' heap and the kept legs open
    /// at the relay, in the set-up, before the windows; the last step is
    /// always every conversation. Empty: only that one.
    pub memory_steps: Vec<usize>,
}

type Replica = HumanPlus<AsyncRedisAttachmentStore>;

const OWNER: &str = "agent-service";

/// The counting allocator's tags of the rows (everything else, the relay,
/// the pages and this benchmark's own tables, is [`heap::OTHER`]).
const KEPT: usize = 1;
const COLD: usize = 2;
const FLOOR: usize = 3;

/// A tokio runtime whose threads, and the thread that drives it
/// ([`Part::block_on`]), allocate under one tag.
struct Part {
    rt: tokio::runtime::Runtime,
    tag: usize,
}

impl Part {
    fn new(tag: usize, workers: usize) -> Part {
        let _t = heap::tagged(tag);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .on_thread_start(move || {
                heap::set_tag(tag);
            })
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        Part { rt, tag }
    }

    fn block_on<F: Future>(&self, f: F) -> F::Output {
        let _t = heap::tagged(self.tag);
        self.rt.block_on(f)
    }
}

/// The heap a row's pair of replicas holds, and the legs the relay holds
/// open for it, after some conversations.
#[derive(Clone, Copy)]
struct Step {
    conversations: usize,
    heap: heap::Live,
    legs: usize,
}

/// The legs the relay holds open for the attachments of `labels` (its
/// subscribers labelled with their client ids; a poll subscriber stays
/// until the relay reaps it).
fn legs_open(relay: &RelayHandle, sessions: &[String], labels: &HashSet<String>) -> usize {
    sessions
        .iter()
        .flat_map(|s| relay.subscribers(s))
        .filter(|sub| sub.client.as_ref().is_some_and(|c| labels.contains(c)))
        .count()
}

/// A row's heap and legs once what its last calls closed has settled.
fn step(
    relay: &RelayHandle,
    sessions: &[String],
    labels: &HashSet<String>,
    tag: usize,
    conversations: usize,
) -> Step {
    std::thread::sleep(Duration::from_millis(200));
    Step {
        conversations,
        heap: heap::live(tag),
        legs: legs_open(relay, sessions, labels),
    }
}

fn kib(bytes: usize) -> f64 {
    bytes as f64 / 1024.0
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// One row's totals.
#[derive(Default)]
struct Row {
    samples: Vec<Duration>,
    errors: usize,
    lists: usize,
    calls_seen: usize,
    presence: usize,
    redis: RedisStats,
}

impl Row {
    fn add_redis(&mut self, d: &RedisStats) {
        for (name, n) in &d.calls {
            *self.redis.calls.entry(name.clone()).or_default() += n;
        }
    }
}

/// What the pages saw so far: `tools/list`, `tools/call`, presence changes.
fn page_counts(pages: &[DemoSurface]) -> (usize, usize, usize) {
    let mut out = (0, 0, 0);
    for p in pages {
        out.0 += p.requests("tools/list");
        out.1 += p.requests("tools/call");
        out.2 += p
            .notifications()
            .iter()
            .filter(|n| {
                n.method == "notifications/peer_joined" || n.method == "notifications/peer_left"
            })
            .count();
    }
    out
}

fn replicas(
    rt: &Part,
    redis_url: &str,
    prefix: &str,
    config: &ManagerConfig,
    kept_legs: Option<usize>,
) -> [Replica; 2] {
    let _t = heap::tagged(rt.tag);
    let key = [7u8; 32];
    let one = || {
        let keyring = Keyring::new("bench", key).unwrap_or_else(|e| panic!("keyring: {e}"));
        let store = rt
            .block_on(AsyncRedisAttachmentStore::connect(
                RedisConfig::new(redis_url, keyring).prefix(prefix),
            ))
            .unwrap_or_else(|e| panic!("redis store: {e}"));
        let builder = HumanPlus::builder(config.clone()).store(store);
        match kept_legs {
            Some(max) => builder.kept_legs(max),
            None => builder,
        }
        .build()
        .unwrap_or_else(|e| panic!("manager: {e}"))
    };
    [one(), one()]
}

/// Runs the comparison and returns it as a Markdown table.
///
/// # Panics
/// When the relay, a page, `redis-server` or a manager cannot start.
#[must_use]
#[allow(clippy::too_many_lines)]
pub fn run(opts: &ServiceOpts) -> String {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let (relay, pages, sessions) = server_rt.block_on(async {
        let relay = RelayServer::builder()
            .start()
            .await
            .unwrap_or_else(|e| panic!("relay: {e}"));
        let mut pages = Vec::new();
        let mut sessions = Vec::new();
        for i in 0..opts.pages {
            let session = format!("svc_{i:03}");
            let page = DemoSurface::builder(relay.base_url(), &session, TOKEN)
                .cells([("A1", "alpha"), ("B2", "beta"), ("B4", "4")])
                .start()
                .await
                .unwrap_or_else(|e| panic!("page: {e}"));
            pages.push(page);
            sessions.push(session);
        }
        (relay, pages, sessions)
    });
    let port = relay.addr().port();
    let mut redis = RedisServer::start().unwrap_or_else(|e| panic!("redis-server: {e}"));
    // One runtime per row, each under its own tag: what each row's pair
    // holds is counted apart. Only one row runs at a time.
    let kept_rt = Part::new(KEPT, 2);
    let cold_rt = Part::new(COLD, 2);
    let floor_rt = Part::new(FLOOR, 2);
    let egress = human_plus_core::EgressPolicy::new(["127.0.0.1"])
        .allow_ports([port])
        .allow_unverified_egress(true);
    assert!(
        !opts.write || opts.conversations <= opts.pages,
        "--write needs one conversation per page at most"
    );
    let trust = TrustPolicy::allowing([TOOL, WRITE_TOOL], human_plus_core::NO_PINS);
    let defaults = ManagerConfig::new(egress, trust)
        .transport(TransportConfig::default().receive_leg(opts.leg.receive_leg()));
    let mut cold_config = defaults.clone();
    cold_config.transport.warm = false;
    let kept = replicas(
        &kept_rt,
        &redis.url(),
        "svc-kept:",
        &defaults,
        opts.kept_legs,
    );
    let cold = replicas(&cold_rt, &redis.url(), "svc-cold:", &cold_config, None);
    let invitation = |i: usize| {
        human_plus_core::SurfaceInvitation::new_insecure_loopback(
            format!("http://127.0.0.1:{port}"),
            &sessions[i],
            TOKEN,
            "sheet:one",
            "Demo",
        )
        .unwrap_or_else(|e| panic!("invitation: {e}"))
    };
    // Each conversation attached once per row (verified), then called once
    // on each replica: the kept row's legs are open from here. What the
    // replicas hold is sampled after each memory step; the bench's own
    // tables (the ids, the labels) are allocated outside the row's tag.
    let mut steps: Vec<usize> = opts
        .memory_steps
        .iter()
        .copied()
        .filter(|&n| n > 0 && n < opts.conversations)
        .chain([opts.conversations])
        .collect();
    steps.sort_unstable();
    steps.dedup();
    let mut ids: Vec<Vec<String>> = Vec::new();
    let mut clients: Vec<HashSet<String>> = Vec::new();
    let mut sampled: Vec<Vec<Step>> = Vec::new();
    for (pair, part) in [(&kept, &kept_rt), (&cold, &cold_rt)] {
        let mut row = Vec::with_capacity(opts.conversations);
        let mut labels = HashSet::with_capacity(opts.conversations);
        let mut samples = Vec::with_capacity(steps.len());
        for i in 0..opts.conversations {
            let attached = {
                let _t = heap::tagged(part.tag);
                let p = Participant::new(format!("agent:{i}"), "Assistant", "#7c3aed");
                let page = invitation(i % opts.pages);
                let attached = part
                    .block_on(pair[0].attach_as(OWNER, &format!("c-{i}"), page, p))
                    .unwrap_or_else(|e| panic!("attach: {e}"));
                for r in pair {
                    part.block_on(r.call(OWNER, attached.attachment.id(), TOOL, tool_args()))
                        .unwrap_or_else(|e| panic!("first call: {e}"));
                }
                attached
            };
            row.push(attached.attachment.id().to_owned());
            labels.insert(attached.attachment.client_id().to_owned());
            drop(attached);
            if steps.contains(&(i + 1)) {
                samples.push(step(&relay, &sessions, &labels, part.tag, i + 1));
            }
        }
        ids.push(row);
        clients.push(labels);
        sampled.push(samples);
    }
    let relay_addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut floors: Vec<Option<KeptFloor>> = floor_rt.block_on(async {
        let mut out = Vec::new();
        for (i, session) in sessions.iter().enumerate() {
            let mut f = KeptFloor::open(
                &Route::Direct(relay_addr),
                session,
                &format!("floor_{i:03}"),
                opts.leg,
            )
            .await
            .unwrap_or_else(|e| panic!("floor: {e}"));
            f.initialize_and_list()
                .await
                .unwrap_or_else(|e| panic!("floor: {e}"));
            out.push(Some(f));
        }
        out
    });
    let mut rows: [Row; 4] = Default::default();
    for _ in 0..opts.rounds {
        for (r, row) in rows.iter_mut().enumerate() {
            if opts.write {
                // The other rows' writes moved the pages' revisions: each
                // conversation reads once, unmeasured and uncounted.
                match r {
                    0 => refresh_window(&kept_rt, &kept, &ids[0]),
                    1 => refresh_window(&cold_rt, &cold, &ids[1]),
                    2 => floors
                        .iter_mut()
                        .flatten()
                        .for_each(KeptFloor::forget_revision),
                    _ => {}
                }
            }
            let before = page_counts(&pages);
            let redis_before = redis.stats().unwrap_or_default();
            let (samples, errors) = match r {
                0 | 1 => {
                    let (pair, part) = if r == 0 {
                        (&kept, &kept_rt)
                    } else {
                        (&cold, &cold_rt)
                    };
                    managers_window(
                        part,
                        pair,
                        &ids[r],
                        opts.calls,
                        opts.sticky,
                        opts.concurrency,
                        opts.write,
                    )
                }
                2 => floor_window(&floor_rt, &mut floors, opts.calls, opts.write),
                _ => store_window(&kept_rt, &kept, &ids[0], opts.calls, opts.concurrency),
            };
            let redis_after = redis.stats().unwrap_or_default();
            let after = page_counts(&pages);
            row.samples.extend(samples);
            row.errors += errors;
            row.lists += after.0 - before.0;
            row.calls_seen += after.1 - before.1;
            row.presence += after.2 - before.2;
            row.add_redis(&redis_after.since(&redis_before));
        }
    }
    let mut out = format!(
        "{} pages, {} conversations called concurrently ({} at once; kept legs bound: {}); two replicas on one redis-server{}; {} leg; \
         {} windows per row of {} calls per conversation, alternating kept, cold, floor, store (the floor: one client per page)\n\n",
        opts.pages,
        opts.conversations,
        opts.concurrency.min(opts.conversations),
        opts.kept_legs
            .map_or_else(|| "the default".to_owned(), |n| n.to_string()),
        if opts.sticky {
            ", each conversation on one of them (sticky)"
        } else {
            ", each conversation's calls alternating between them"
        },
        opts.leg.name(),
        opts.rounds,
        opts.calls,
    );
    out.push_str("| row | calls | p50 ms | p99 ms | p50 / floor | tools/list per call | tools/call per call | presence changes per call | Redis commands per call | Redis round trips per call | errors |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    // What the last calls closed, settled (as at each memory step).
    std::thread::sleep(Duration::from_millis(200));
    let rss_kib = crate::net::status_kib("VmRSS");
    let end: Vec<heap::Live> = [KEPT, COLD, FLOOR, heap::OTHER]
        .into_iter()
        .map(heap::live)
        .collect();
    // No floor calls (its bare clients do not reconnect once the relay
    // closed their idle connections): no ratio.
    let floor_p50 = {
        let mut s = rows[2].samples.clone();
        s.sort_unstable();
        (!s.is_empty()).then(|| percentile(&s, 50.0))
    };
    let names = [
        "kept (the defaults)",
        "cold (`warm(false)`, the default before)",
        "floor (bare client, one kept leg per page)",
        "store alone (a warm read's `lock_and_get` + `release`, no relay)",
    ];
    for (row, name) in rows.iter_mut().zip(names) {
        row.samples.sort_unstable();
        let n = row.samples.len().max(1) as f64;
        let (p50, p99) = (
            percentile(&row.samples, 50.0),
            percentile(&row.samples, 99.0),
        );
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let ratio = match floor_p50 {
            Some(floor) if !row.samples.is_empty() => {
                format!("{:.2}x", ms(p50) / ms(floor).max(f64::MIN_POSITIVE))
            }
            _ => "—".to_owned(),
        };
        out.push_str(&format!(
            "| {name} | {} | {:.2} | {:.2} | {ratio} | {:.3} | {:.2} | {:.3} | {:.2} | {:.2} | {} |\n",
            row.samples.len(),
            ms(p50),
            ms(p99),
            row.lists as f64 / n,
            row.calls_seen as f64 / n,
            row.presence as f64 / n,
            row.redis.commands() as f64 / n,
            row.redis.round_trips() as f64 / n,
            row.errors,
        ));
    }
    out.push_str(&format!(
        "\nThis process (relay, pages, both rows' replicas, the floor) at the end: {:.1} MiB resident\n",
        rss_kib as f64 / 1024.0
    ));
    if heap::installed() {
        out.push_str(&format!(
            "Heap held at the end (live blocks' requested bytes, by who allocated them): \
             kept replicas {:.2} MiB each ({} blocks each), cold replicas {:.2} MiB each ({} blocks each) \
             (each a pair's runtime and its two managers, halved); the floor {:.2} MiB; \
             everything else (relay, pages, this benchmark's tables) {:.2} MiB\n",
            mib(end[0].bytes / 2),
            end[0].blocks / 2,
            mib(end[1].bytes / 2),
            end[1].blocks / 2,
            mib(end[2].bytes),
            mib(end[3].bytes),
        ));
        out.push_str(&memory_table(
            &sampled,
            opts.kept_legs
                .unwrap_or(human_plus_tokio::DEFAULT_KEPT_LEGS),
        ));
    } else {
        out.push_str(
            "(the replicas' heap is not counted: the counting allocator is not installed)\n",
        );
    }
    let open: Vec<usize> = clients
        .iter()
        .map(|labels| legs_open(&relay, &sessions, labels))
        .collect();
    out.push_str(&format!(
        "Legs open at the relay at the end: kept row {} (two replicas, each keeping at most {}), cold row {}\n",
        open[0],
        opts.kept_legs
            .unwrap_or(human_plus_tokio::DEFAULT_KEPT_LEGS),
        open[1],
    ));
    for (row, name) in rows.iter().zip(["kept", "cold"]) {
        let n = row.samples.len().max(1) as f64;
        let per: Vec<String> = row
            .redis
            .calls
            .iter()
            .map(|(c, k)| format!("{c} {:.2}", *k as f64 / n))
            .collect();
        out.push_str(&format!("\nRedis per call, {name}: {}\n", per.join(", ")));
    }
    drop(floors);
    drop((kept, cold));
    drop((kept_rt, cold_rt, floor_rt));
    server_rt.block_on(async {
        for p in pages {
            p.shutdown().await;
        }
        relay.shutdown().await;
    });
    out
}

/// The write `--write` calls.
const WRITE_TOOL: &str = "sheet_set_cell";

/// The `k`th call of a conversation's window: the read, or a write of a
/// value of its own (a page applies it, and its revision moves).
fn call_of(write: bool, k: usize) -> (&'static str, serde_json::Value) {
    if write {
        (
            WRITE_TOOL,
            serde_json::json!({"address": "C3", "value": format!("w{k}")}),
        )
    } else {
        (TOOL, tool_args())
    }
}

/// Every conversation reads once on its first replica, unmeasured: its
/// record takes the revision the other rows' writes left on its page.
fn refresh_window(rt: &Part, pair: &[Replica; 2], ids: &[String]) {
    rt.block_on(async {
        for id in ids {
            if let Err(e) = pair[0].call(OWNER, id, TOOL, tool_args()).await {
                eprintln!("service refresh: {}", e.code());
            }
        }
    });
}

/// Every conversation at once (at most `concurrency` at a time), each
/// running `calls_of(i, id)` on a task of its own: their latencies and
/// errors, gathered.
async fn every_conversation<F, Fut>(
    ids: &[String],
    concurrency: usize,
    calls_of: F,
) -> (Vec<Duration>, usize)
where
    F: Fn(usize, String) -> Fut,
    Fut: std::future::Future<Output = (Vec<Duration>, usize)> + Send + 'static,
{
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(
        concurrency.clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
    ));
    let mut tasks = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let permits = std::sync::Arc::clone(&permits);
        let calls = calls_of(i, id.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            calls.await
        }));
    }
    let mut all = (Vec::new(), 0);
    for t in tasks {
        if let Ok((s, e)) = t.await {
            all.0.extend(s);
            all.1 += e;
        }
    }
    all
}

/// `calls` calls of one conversation back to back, each timed until `one`
/// ends: the samples of those that succeeded, and how many failed (each
/// failure's code printed after `label`).
async fn timed<F, Fut>(calls: usize, label: &str, mut one: F) -> (Vec<Duration>, usize)
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<(), &'static str>>,
{
    let mut samples = Vec::with_capacity(calls);
    let mut errors = 0;
    for k in 0..calls {
        let start = Instant::now();
        match one(k).await {
            Ok(()) => samples.push(start.elapsed()),
            Err(code) => {
                errors += 1;
                eprintln!("{label}: {code}");
            }
        }
    }
    (samples, errors)
}

/// One window of the managers: every conversation's `calls` calls back to
/// back, all conversations at once, alternating replicas.
fn managers_window(
    rt: &Part,
    pair: &[Replica; 2],
    ids: &[String],
    calls: usize,
    sticky: bool,
    concurrency: usize,
    write: bool,
) -> (Vec<Duration>, usize) {
    rt.block_on(every_conversation(ids, concurrency, |i, id| {
        let pair = [pair[0].clone(), pair[1].clone()];
        async move {
            timed(calls, "service", |k| {
                let replica = &pair[if sticky { i % 2 } else { (i + k) % 2 }];
                let (tool, args) = call_of(write, k);
                let id = &id;
                async move {
                    replica
                        .call(OWNER, id, tool, args)
                        .await
                        .map(drop)
                        .map_err(|e| e.code())
                }
            })
            .await
        }
    }))
}

/// One window of the store alone: each conversation's `calls` warm reads' store work
/// (the lock taken with the record, then given back), on the
/// kept row's replicas' stores, alternating as the calls do.
fn store_window(
    rt: &Part,
    pair: &[Replica; 2],
    ids: &[String],
    calls: usize,
    concurrency: usize,
) -> (Vec<Duration>, usize) {
    use human_plus_tokio::AsyncAttachmentStore;
    rt.block_on(every_conversation(ids, concurrency, |i, id| {
        let pair = [pair[0].clone(), pair[1].clone()];
        async move {
            timed(calls, "store", |k| {
                let store = pair[(i + k) % 2].store();
                let id = &id;
                async move {
                    let lease = human_plus_tokio::DEFAULT_LEASE;
                    let wait = human_plus_tokio::DEFAULT_LOCK_WAIT;
                    let (guard, _) = store
                        .lock_and_get(id, lease, wait)
                        .await
                        .map_err(|e| e.code())?;
                    let _ = store.release(&guard).await;
                    Ok(())
                }
            })
            .await
        }
    }))
}

/// One window of the bare clients.
fn floor_window(
    rt: &Part,
    floors: &mut Vec<Option<KeptFloor>>,
    calls: usize,
    write: bool,
) -> (Vec<Duration>, usize) {
    rt.block_on(async {
        let mut tasks = Vec::new();
        for slot in floors.iter_mut() {
            let Some(mut floor) = slot.take() else {
                continue;
            };
            tasks.push(tokio::spawn(async move {
                let mut samples = Vec::with_capacity(calls);
                let mut errors = 0;
                for k in 0..calls {
                    let done = if write {
                        let (tool, args) = call_of(true, k);
                        floor.call_tool(tool, args).await
                    } else {
                        floor.call().await
                    };
                    match done {
                        Ok(took) => samples.push(took),
                        Err(e) => {
                            errors += 1;
                            eprintln!("floor: {e}");
                        }
                    }
                }
                (floor, samples, errors)
            }));
        }
        let mut all = (Vec::new(), 0);
        let mut back = Vec::new();
        for t in tasks {
            if let Ok((floor, s, e)) = t.await {
                back.push(Some(floor));
                all.0.extend(s);
                all.1 += e;
            }
        }
        *floors = back;
        all
    })
}

/// The heap per replica at each memory step (a pair's, halved), kept
/// beside cold: what keeping legs adds, per leg open at the relay, and
/// what each conversation added since the step before.
fn memory_table(sampled: &[Vec<Step>], bound: usize) -> String {
    let mut out = format!(
        "\nThe replicas' heap as conversations are added (set-up: each attached, then called once on each replica; \
         per replica = the pair's / 2; the kept bound {bound} legs per replica)\n\n\
         | conversations | kept: heap per replica (KiB) | kept: blocks per replica | kept legs open at the relay | cold: heap per replica (KiB) | \
         kept − cold, per replica (KiB) | kept − cold, per kept leg (KiB) | kept: added per conversation since the step before (bytes, per replica) | \
         cold: the same (bytes) |\n|---|---|---|---|---|---|---|---|---|\n"
    );
    let (kept, cold) = (&sampled[0], &sampled[1]);
    let mut last: Option<(Step, Step)> = None;
    for (k, c) in kept.iter().zip(cold) {
        let diff = k.heap.bytes.cast_signed() - c.heap.bytes.cast_signed();
        let per_leg = if k.legs > 0 {
            format!("{:.1}", diff as f64 / 1024.0 / k.legs as f64)
        } else {
            "—".to_owned()
        };
        let added = |now: &Step, before: Option<&Step>| {
            let (b0, n0) = before.map_or((0, 0), |b| (b.heap.bytes, b.conversations));
            let dn = now.conversations - n0;
            (now.heap.bytes.cast_signed() - b0.cast_signed()) as f64 / 2.0 / dn.max(1) as f64
        };
        out.push_str(&format!(
            "| {} | {:.1} | {} | {} | {:.1} | {:.1} | {per_leg} | {:.0} | {:.0} |\n",
            k.conversations,
            kib(k.heap.bytes / 2),
            k.heap.blocks / 2,
            k.legs,
            kib(c.heap.bytes / 2),
            diff as f64 / 2.0 / 1024.0,
            added(k, last.as_ref().map(|l| &l.0)),
            added(c, last.as_ref().map(|l| &l.1)),
        ));
        last = Some((*k, *c));
    }
    out
}
