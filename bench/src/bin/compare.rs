//! `compare`: every benchmark of `BENCHMARKS.md`, side by side, in one run.
//!
//! ```text
//! cargo run -p human-plus-bench --release --bin compare -- [all|micro|e2e|scale|idle|gen|link]
//! ```
//!
//! * `micro`: the core workloads, in Rust and through the Python port (by
//!   `bench/python/run.sh`) on the same inputs, with the ratios;
//! * `e2e`: one pinned call per runtime × receive leg through a relay and a
//!   demo surface on loopback, beside the floor (a bare hyper client, one
//!   connection per request) and the keep-alive floor (one open leg, kept
//!   connections);
//! * `scale`: 1,000 attachments calling concurrently (tokio, cold and warm;
//!   blocking with 64 threads; the floor; the keep-alive floor);
//! * `idle`: 10,000 warm attachments idle in one tokio process (memory per
//!   attachment), then every one of them calling once more;
//! * `all` (the default): all four;
//! * `link`: the `human-plus` command across a simulated link, in round
//!   trips (not part of `all`: it spawns the release `human-plus` binary;
//!   see `BENCHMARKS.md`).
//!
//! Options: `--calls N` (e2e, default 400), `--secs S` (scale, default
//! 20), `--attachments N` (scale default 1000, idle default 10000),
//! `--sessions N` (default 8), `--threads N` (default 64), `--warm` (e2e:
//! also the warm-attachment mode), `--no-python`; idle also takes
//! `--in-flight N` (calls at once, default 1000) and `--idle-secs S`
//! (default 20), and under `all` `--idle-attachments N`.
//!
//! `scale-run blocking SESSIONS ATTACHMENTS SECS THREADS` (one scale row,
//! as JSON) also takes `--redis` (the records in a Redis store, on a
//! `redis-server` it starts on a free loopback port: the queue worker) and
//! `--large-listing` (each surface lists the micro benchmarks' 200 tools
//! besides its own).
//!
//! `queue` (not part of `all`): the queue worker as worker processes on
//! one Redis, each job a cold call on one of a few conversations whose
//! pages take a while to answer, run twice: as is, and with a worker
//! SIGKILLed a third of the way through (`--workers N` default 4,
//! `--threads N` per worker default 4, `--jobs N` default 400,
//! `--conversations N` default 10, `--rate JOBS_PER_SEC` default 20,
//! `--reply-delay-ms MS` default 100, `--kill-after-ms MS`, `--lease-ms`,
//! `--lock-wait-ms` default 250, `--groups`: one job per conversation at a
//! time, as a FIFO queue's message group dispatches them). `long-call` (`--hold-secs S` default
//! 10, `--lease-ms MS` default 6000): the Redis round trips of one call
//! held that long beside a short one's (what lease renewal adds).
//!
//! `service` (not part of `all`; issue 43): the example service's shape,
//! two replicas on one `redis-server` and `--pages N` pages (default 20),
//! one conversation each, called concurrently, in `--rounds N` alternating
//! windows (default 4) of `--calls N` calls per conversation (default 10):
//! kept legs (the defaults), cold legs (`warm(false)`), and a bare client
//! keeping one leg per page; `--poll` for the long-poll leg;
//! `--conversations N` (default: one per page) spreads more conversations
//! over the pages, and `--kept-legs N` sets the replicas' bound;
//! `--sticky` calls each conversation on one replica only; `--write`
//! makes every measured call a pinned write (one conversation per page);
//! `--concurrency N` calls at most N conversations at once. A fourth row
//! times the store alone (a warm read's lock with its record, then the
//! release). It also prints the heap each row's replicas hold (counted by
//! this binary's global allocator, [`human_plus_bench::heap`], apart from
//! the relay and the pages); `--memory-steps N,N,...` samples the kept and
//! cold replicas' heap, and the kept legs open at the relay, after that
//! many conversations have been attached and called.
//!
//! `link` options: `--rtt-ms MS` (default 40), `--calls N` (warm calls per
//! bridge, default 30), `--turns N` (one-shot `call` processes per row,
//! default 5), `--path plain|production|both` (default both), `--runtime
//! LIST` and `--transport LIST` (comma-separated; default every runtime and
//! both legs), `--bin PATH` (default: `human-plus` beside this executable),
//! `--cli-arg ARG` (repeatable: appended to every `mcp` and `call` run).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_precision_loss,
    missing_docs
)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use cpu_time::ProcessTime;
use human_plus_bench::across::{self, LinkOpts, PathKind};
use human_plus_bench::data::{self, Inputs};
use human_plus_bench::kept::{KeptFloor, Route};
use human_plus_bench::net::{self, Client, Floor, LegKind, RuntimeKind, Server};
use human_plus_bench::timing::{self, Timing, percentile, us};
use human_plus_bench::{idle, queue, scale, service, workloads as w};
use human_plus_core::SeededEntropy;
use serde_json::Value;

/// Every block counted under the tag of the part that allocated it: the
/// replicas of `service` apart from the relay and the pages.
#[global_allocator]
static HEAP: human_plus_bench::heap::TaggedHeap = human_plus_bench::heap::TaggedHeap;

struct Opts {
    calls: usize,
    secs: u64,
    attachments: usize,
    sessions: usize,
    threads: usize,
    warm: bool,
    python: bool,
    idle: idle::IdleOpts,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cmd = args.first().map_or("all", String::as_str);
    let flag = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let opts = Opts {
        calls: flag("--calls", 400),
        secs: flag("--secs", 20) as u64,
        attachments: flag("--attachments", 1000),
        sessions: flag("--sessions", 8),
        threads: flag("--threads", 64),
        warm: args.iter().any(|a| a == "--warm"),
        python: !args.iter().any(|a| a == "--no-python"),
        idle: idle::IdleOpts {
            sessions: flag("--sessions", 8),
            attachments: if cmd == "idle" || cmd == "idle-run" {
                flag("--attachments", 10_000)
            } else {
                flag("--idle-attachments", 10_000)
            },
            in_flight: flag("--in-flight", 1000).max(1),
            idle: Duration::from_secs(flag("--idle-secs", 20) as u64),
        },
    };
    match cmd {
        "serve" => {
            // As many sockets as the clients' legs need (idle: 10,000).
            let _ = idle::raise_nofile();
            net::serve(
                args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1),
                net::Listing::from_args(&args),
                net::reply_delay_from_args(&args),
            );
        }
        "scale-run" => scale_run(&args),
        "queue-worker" => queue::worker(args.get(1).map_or("{}", String::as_str)),
        "queue" => {
            machine();
            queue_all(&args);
        }
        "long-call" => {
            let hold = Duration::from_secs(flag("--hold-secs", 10) as u64);
            let lease = Duration::from_millis(flag("--lease-ms", 6_000) as u64);
            println!("{}", queue::long_call(hold, lease));
        }
        "idle-run" => println!("{}", idle::run(&opts.idle)),
        "idle" => {
            machine();
            idle_all(&opts);
        }
        "gen" => {
            data::ensure(&data::default_dir()).unwrap();
            println!("inputs in bench/data");
        }
        "micro" => {
            machine();
            micro(&opts);
        }
        "e2e" => {
            machine();
            e2e(&opts);
        }
        "scale" => {
            machine();
            scale_all(&opts);
        }
        "link" => {
            machine();
            link(&args);
        }
        "channel" => {
            machine();
            println!(
                "{}",
                human_plus_bench::channel::run(
                    flag("--windows", 6),
                    flag("--calls", 50),
                    flag("--client-events", 1000) as u32,
                )
            );
        }
        "decisions" => {
            machine();
            let rtt = Duration::from_millis(flag("--rtt-ms", 40) as u64);
            println!(
                "{}",
                human_plus_bench::decisions::run(rtt, flag("--rounds", 5), flag("--calls", 10))
            );
        }
        "service" => {
            machine();
            // Thousands of conversations: as many sockets as their legs need.
            let _ = idle::raise_nofile();
            let opts = service::ServiceOpts {
                pages: flag("--pages", 20).max(1),
                conversations: flag("--conversations", flag("--pages", 20)).max(1),
                kept_legs: args
                    .iter()
                    .position(|a| a == "--kept-legs")
                    .and_then(|i| args.get(i + 1))
                    .and_then(|v| v.parse().ok()),
                rounds: flag("--rounds", 4),
                calls: flag("--calls", 10),
                leg: if args.iter().any(|a| a == "--poll") {
                    LegKind::Poll
                } else {
                    LegKind::Sse
                },
                sticky: args.iter().any(|a| a == "--sticky"),
                write: args.iter().any(|a| a == "--write"),
                concurrency: flag("--concurrency", usize::MAX),
                memory_steps: args
                    .iter()
                    .position(|a| a == "--memory-steps")
                    .and_then(|i| args.get(i + 1))
                    .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
                    .unwrap_or_default(),
            };
            println!("{}", service::run(&opts));
        }
        "all" => {
            machine();
            micro(&opts);
            e2e(&opts);
            scale_all(&opts);
            idle_all(&opts);
        }
        other => {
            eprintln!("unknown command {other}; use all, micro, e2e, scale, idle, gen or link");
            std::process::exit(2);
        }
    }
}

fn machine() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .nth(1)
        .and_then(|k| k.parse::<f64>().ok())
        .map_or(0.0, |k| k / 1024.0 / 1024.0);
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let rustc = Command::new("rustc")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    println!(
        "# Machine: {cores} cores ({cpu}), {mem:.1} GiB RAM, {rustc}; load average at start: {}",
        load()
    );
    println!();
}

/// The 1, 5 and 15 minute load averages.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Says how long a part took and the load average at its start and end.
fn part_done(name: &str, started: Instant, load_at_start: &str) {
    println!(
        "({name} took {:.0} s; load average at its start {load_at_start}, at its end {})",
        started.elapsed().as_secs_f64(),
        load()
    );
    println!();
}

// ---------------------------------------------------------------------------
// micro

fn ms(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn micro(opts: &Opts) {
    let dir = data::default_dir();
    let inputs = data::load(&dir).unwrap();
    sanity(&inputs);
    let python = if opts.python {
        run_python()
    } else {
        BTreeMap::new()
    };
    println!(
        "## 1–2. Core costs, Rust vs the Python port (same inputs, same harness: per-call thread CPU time, best of {} batches of ≥ {} ms; median batch in brackets)",
        timing::REPEATS,
        timing::BATCH_TARGET.as_millis()
    );
    println!();
    println!("| workload | Rust | Python 0.2.0 | Python ÷ Rust | aim | met |");
    println!("|---|---|---|---|---|---|");
    let sse_len = inputs.sse.len() as f64;
    let gib = |t: &Timing| sse_len / (t.min_ns * 1e-9) / (1u64 << 30) as f64;
    let row = |name: &str, t: &Timing, py: Option<&Timing>, aim: &str, met: Option<bool>| {
        let (p, ratio) = match py {
            Some(p) => (
                format!("{} ({})", ms(p.min_ns), ms(p.median_ns)),
                format!("{:.1}x", p.min_ns / t.min_ns),
            ),
            None => ("—".to_owned(), "—".to_owned()),
        };
        let met = match met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        println!(
            "| {name} | {} ({}) | {p} | {ratio} | {aim} | {met} |",
            ms(t.min_ns),
            ms(t.median_ns)
        );
    };
    let py = |k: &str| python.get(k);
    let ratio_ok = |t: &Timing, k: &str, x: f64| py(k).map(|p| p.min_ns / t.min_ns >= x);

    // SSE.
    for chunk in [8192usize, 65_536] {
        let t = timing::time(|| w::sse_decode(&inputs.sse, chunk));
        row(
            &format!(
                "SSE decode only, {} KiB chunks ({:.0} KiB stream, 64 events 1–64 KiB + keepalives): {:.2} GiB/s",
                chunk / 1024,
                sse_len / 1024.0,
                gib(&t)
            ),
            &t,
            None,
            "≥ 1 GiB/s",
            Some(gib(&t) >= 1.0),
        );
    }
    for (chunk, key) in [(8192usize, "sse_receive_8k"), (65_536, "sse_receive_64k")] {
        let t = timing::time(|| w::sse_receive(&inputs.sse, chunk));
        let both = match (ratio_ok(&t, key, 3.0), gib(&t) >= 1.0) {
            (Some(r), g) => Some(r && g),
            (None, g) => Some(g),
        };
        row(
            &format!(
                "SSE receive leg (decode + correlate to the reply), {} KiB chunks: {:.2} GiB/s",
                chunk / 1024,
                gib(&t)
            ),
            &t,
            py(key),
            "≥ 3x, ≥ 1 GiB/s",
            both,
        );
    }
    // Admission.
    let t = timing::time(|| w::admit(&inputs.tools, &inputs.policy));
    let met = ratio_ok(&t, "admit", 10.0).map(|r| r && t.min_ns < 150_000.0);
    row(
        "admission + digest, 200-tool tools/list (from_listing ×200, admit with 196 pins)",
        &t,
        py("admit"),
        "< 0.15 ms, ≥ 10x",
        met,
    );
    let full = timing::time(|| w::admit_bytes(&inputs.tools_bytes, &inputs.policy));
    row(
        &format!(
            "the same from bytes, the full path ({:.0} KiB: hash, borrowed parse, admit, 196 digests streamed; admitted names)",
            inputs.tools_bytes.len() as f64 / 1024.0
        ),
        &full,
        py("admit_bytes"),
        "—",
        None,
    );
    let t = timing::time(|| w::admit_bytes_definitions(&inputs.tools_bytes, &inputs.policy));
    row(
        "the same from bytes, also building the admitted definitions (a tools() answer)",
        &t,
        None,
        "—",
        None,
    );
    let t = timing::time(|| w::admit_bytes_value(&inputs.tools_bytes, &inputs.policy));
    row(
        "the same from bytes, the path before issue 21 (parse to Value, from_listing ×200, admit)",
        &t,
        None,
        "—",
        None,
    );
    let (pretty, reversed) = w::listing_not_canonical(&inputs.tools_bytes);
    for (how, bytes) in [
        ("indented", &pretty),
        (
            "compact, every object's members in reverse order",
            &reversed,
        ),
    ] {
        let new = timing::time(|| w::admit_bytes(bytes, &inputs.policy));
        let old = timing::time(|| w::admit_bytes_value(bytes, &inputs.policy));
        row(
            &format!(
                "the same listing not in canonical form ({how}, {:.0} KiB): the full path, {:.2}x faster than the path before issue 21 on the same bytes ({})",
                bytes.len() as f64 / 1024.0,
                old.min_ns / new.min_ns,
                ms(old.min_ns)
            ),
            &new,
            None,
            "not slower than before",
            Some(new.min_ns <= old.min_ns),
        );
    }
    let kept = w::first_verdict(&inputs.tools_bytes, &inputs.policy);
    let reuse = timing::time(|| w::readmit_unchanged(&inputs.tools_bytes, &inputs.policy, &kept));
    let within = reuse.min_ns / full.min_ns;
    row(
        &format!(
            "re-admitting the unchanged listing from its bytes (page hashed, kept verdict served): {within:.3}x the full path"
        ),
        &reuse,
        None,
        "≤ 0.1x the full path",
        Some(within <= 0.1),
    );
    let t = timing::time(|| w::digest_all(&inputs.tools));
    row(
        "digest only, 200 tools (from_listing + digest)",
        &t,
        py("digest_all"),
        "—",
        None,
    );
    // Change feed.
    let t = timing::time(|| w::read_changes(&inputs.changes));
    let met = ratio_ok(&t, "changes", 20.0).map(|r| r && t.min_ns < 200_000.0);
    row(
        "change feed, 1,000 rows (read_from on a parsed Value)",
        &t,
        py("changes"),
        "< 0.2 ms, ≥ 20x",
        met,
    );
    let t = timing::time(|| w::read_changes_bytes(&inputs.changes_bytes));
    row(
        &format!(
            "the same from bytes ({:.0} KiB: one parse, each row read as it is parsed)",
            inputs.changes_bytes.len() as f64 / 1024.0
        ),
        &t,
        py("changes_bytes"),
        "—",
        None,
    );
    let t = timing::time(|| w::read_changes_bytes_value(&inputs.changes_bytes));
    row(
        "the same from bytes, the path before issue 21 (parse to Value, read_from)",
        &t,
        None,
        "—",
        None,
    );
    // Framing.
    let mut entropy = SeededEntropy::new(7);
    let frame = timing::time(|| w::frame(&inputs.result, &mut entropy));
    let copy = timing::time(|| w::copy_string(&inputs.result));
    let copy_vec = timing::time(|| w::copy_bytes(&inputs.result));
    let within = frame.min_ns / copy.min_ns;
    row(
        &format!("framing a 64 KiB result (ResultGuard::frame): {within:.2}x its copy"),
        &frame,
        py("frame"),
        "≤ 2x the copy",
        Some(within <= 2.0),
    );
    row(
        "copying the same 64 KiB (String::push_str)",
        &copy,
        py("copy"),
        "—",
        None,
    );
    row(
        "copying the same 64 KiB (Vec::extend_from_slice)",
        &copy_vec,
        None,
        "—",
        None,
    );
    if let (Some(pf), Some(pc)) = (py("frame"), py("copy")) {
        println!(
            "| Python: framing ÷ its copy | — | {:.2}x | — | — | — |",
            pf.min_ns / pc.min_ns
        );
    }
    // JSON-RPC.
    let t = timing::time(|| w::encode(&inputs.request_id, &inputs.call_params));
    row(
        "JSON-RPC encode, pinned tools/call",
        &t,
        py("encode"),
        "—",
        None,
    );
    let t = timing::time(|| w::correlate_noisy(&inputs.noisy));
    row(
        &format!(
            "correlate_bytes over a 64-frame noisy stream ({:.0} KiB, reply last)",
            inputs.noisy.iter().map(Vec::len).sum::<usize>() as f64 / 1024.0
        ),
        &t,
        py("correlate_noisy"),
        "—",
        None,
    );
    println!();
}

fn sanity(inputs: &Inputs) {
    assert!(
        w::sse_receive(&inputs.sse, 8192).is_some(),
        "no reply in the SSE stream"
    );
    assert!(
        w::correlate_noisy(&inputs.noisy).is_some(),
        "no reply in the noisy stream"
    );
    let a = w::admit(&inputs.tools, &inputs.policy);
    assert_eq!(a.admitted.len(), inputs.policy.pins().len());
    let names: Vec<String> = a.admitted_names().map(str::to_owned).collect();
    assert_eq!(w::admit_bytes(&inputs.tools_bytes, &inputs.policy), names);
    assert_eq!(
        w::admit_bytes_definitions(&inputs.tools_bytes, &inputs.policy),
        w::admit_bytes_value(&inputs.tools_bytes, &inputs.policy)
    );
    assert_eq!(
        w::read_changes(&inputs.changes).changes().len(),
        data::CHANGE_ROWS
    );
}

fn run_python() -> BTreeMap<String, Timing> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/run.sh");
    let out = Command::new("bash").arg(script).output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            eprintln!(
                "python side failed:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            return BTreeMap::new();
        }
        Err(e) => {
            eprintln!("python side did not run: {e}");
            return BTreeMap::new();
        }
    };
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let mut map = BTreeMap::new();
    if let Some(o) = v.as_object() {
        for (k, t) in o {
            if let (Some(min), Some(med)) = (
                t.get("min_ns").and_then(Value::as_f64),
                t.get("median_ns").and_then(Value::as_f64),
            ) {
                map.insert(
                    k.clone(),
                    Timing {
                        min_ns: min,
                        median_ns: med,
                        iters: t.get("iters").and_then(Value::as_u64).unwrap_or(0),
                    },
                );
            }
        }
        println!(
            "Python side: {} on Python {}",
            o.get("_package").and_then(Value::as_str).unwrap_or("?"),
            o.get("_python").and_then(Value::as_str).unwrap_or("?")
        );
        println!();
    }
    map
}

// ---------------------------------------------------------------------------
// e2e

struct Series {
    name: String,
    samples: Vec<Duration>,
}

impl Series {
    fn new(name: String) -> Self {
        Series {
            name,
            samples: Vec::new(),
        }
    }
    fn p(&self, p: f64) -> Duration {
        let mut s = self.samples.clone();
        s.sort_unstable();
        percentile(&s, p)
    }
}

fn e2e(opts: &Opts) {
    let (started, load_at_start) = (Instant::now(), load());
    println!(
        "## 3. End to end on loopback: one pinned call (`sheet_get_cell`), {} calls per row after 30 warm-up calls, interleaved with the floor",
        opts.calls
    );
    println!();
    println!(
        "A cold Human+ `call` is TWO exchanges (tools/list, then the pinned tools/call: trust is re-checked on every operation) on one receive leg subscribed for the operation, over kept connections. A warm call keeps its leg open between operations and reuses the admitted listing while it is provably current (the demo surface declares `tools.listChanged`): one tools/call exchange. The floor does the same two exchanges with a bare hyper client (one connection per request) and no Human+ work. The keep-alive floor does them too, with nothing opened per call: one receive leg kept open for the whole run (an SSE stream, or a long-poll always parked), kept POST connections; its tools/call exchange alone is the last two columns."
    );
    println!();
    println!(
        "CPU column: the client process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`, all its threads) per call, summed over the measured calls; the relay and the surface run in another process and are not counted."
    );
    println!();
    println!(
        "| runtime | leg | Human+ call p50 / p99 | floor, same 2 exchanges p50 / p99 | overhead at p50 | floor, 1 exchange (tools/call) p50 | Human+ call ÷ 1 floor exchange | client CPU per call: Human+ vs floor | errors | aim ≤ 1.10 at p50 | keep-alive floor (open leg), same 2 exchanges p50 / p99 | Human+ ÷ keep-alive floor at p50 (aim ≤ 1.10) | keep-alive floor, 1 exchange (tools/call) p50 | Human+ ÷ it |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let server = Server::start(1);
    let policy = net::pinned_policy(&server);
    let floor_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The keep-alive floor's connections and parked poll must progress
    // between its operations: one worker thread of its own.
    let kept_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let relay_addr = std::net::SocketAddr::from(([127, 0, 0, 1], server.port));
    let mut cold_warm: Vec<(String, f64, f64, f64, f64)> = Vec::new();
    for leg in [LegKind::Sse, LegKind::Poll] {
        let mut kinds: Vec<(RuntimeKind, bool)> = vec![
            (RuntimeKind::Tokio, false),
            (RuntimeKind::Blocking, false),
            (RuntimeKind::AsyncStd, false),
        ];
        if opts.warm {
            kinds.push((RuntimeKind::Tokio, true));
            kinds.push((RuntimeKind::Blocking, true));
            kinds.push((RuntimeKind::AsyncStd, true));
        }
        for (n, (kind, warm)) in kinds.into_iter().enumerate() {
            let client: Box<dyn Client> =
                net::client(kind, server.config(leg.receive_leg(), policy.clone(), warm));
            let owner = format!("e2e-{}-{n}", leg.name());
            let att = client
                .attach(&owner, server.invitation(0), net::participant())
                .unwrap();
            let floor = Floor::new(
                server.port,
                &server.sessions[0],
                &format!("floor_e2e_{n}_{}", leg.name().len()),
            );
            let mut kept = kept_rt
                .block_on(async {
                    let mut k = KeptFloor::open(
                        &Route::Direct(relay_addr),
                        &server.sessions[0],
                        &format!("kept_e2e_{n}_{}", across::transport_flag(leg)),
                        leg,
                    )
                    .await?;
                    k.initialize_and_list().await?;
                    Ok::<_, human_plus_bench::kept::FloorError>(k)
                })
                .unwrap();
            let mut errors = 0u64;
            for _ in 0..30 {
                let _ = kept_rt.block_on(kept.operation());
                if client
                    .call(&owner, att.id(), net::TOOL, net::tool_args())
                    .is_err()
                {
                    errors += 1;
                }
                let _ = floor_rt.block_on(floor.operation(leg));
            }
            let name = format!("{}{}", kind.as_str(), if warm { " (warm)" } else { "" });
            let mut hp = Series::new(name.clone());
            let mut fl = Series::new("floor".into());
            let mut fl1 = Series::new("floor 1".into());
            let mut kf = Series::new("keep-alive floor".into());
            let mut kf1 = Series::new("keep-alive floor 1".into());
            let (mut hp_cpu, mut fl_cpu) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..opts.calls {
                let c = ProcessTime::now();
                let t = Instant::now();
                let r = client.call(&owner, att.id(), net::TOOL, net::tool_args());
                let took = t.elapsed();
                hp_cpu += c.elapsed();
                match r {
                    Ok(_) => hp.samples.push(took),
                    Err(e) => {
                        errors += 1;
                        eprintln!("{name}: {e}");
                    }
                }
                let c = ProcessTime::now();
                let r = floor_rt.block_on(floor.operation(leg));
                fl_cpu += c.elapsed();
                match r {
                    Ok((a, b)) => {
                        fl.samples.push(a + b);
                        fl1.samples.push(b);
                    }
                    Err(e) => eprintln!("floor: {e}"),
                }
                match kept_rt.block_on(kept.operation()) {
                    Ok((a, b)) => {
                        kf.samples.push(a + b);
                        kf1.samples.push(b);
                    }
                    Err(e) => eprintln!("keep-alive floor: {e}"),
                }
            }
            drop(kept);
            let (h50, h99, f50, f99, g50) =
                (hp.p(50.0), hp.p(99.0), fl.p(50.0), fl.p(99.0), fl1.p(50.0));
            let (k50, k99, k1) = (kf.p(50.0), kf.p(99.0), kf1.p(50.0));
            let over_kept = h50.as_secs_f64() / k50.as_secs_f64();
            let over = h50.as_secs_f64() / f50.as_secs_f64();
            let key = format!("{} {}", kind.as_str(), leg.name());
            match cold_warm.iter_mut().find(|r| r.0 == key) {
                Some(r) if warm => (r.3, r.4) = (us(h50), over),
                None if !warm => cold_warm.push((key, us(h50), over, f64::NAN, f64::NAN)),
                _ => {}
            }
            println!(
                "| {} | {} | {:.0} / {:.0} µs | {:.0} / {:.0} µs | {:.2}x | {:.0} µs | {:.2}x | {:.0} vs {:.0} µs | {} | {} | {:.0} / {:.0} µs | {:.2}x{} | {:.0} µs | {:.2}x |",
                hp.name,
                leg.name(),
                us(h50),
                us(h99),
                us(f50),
                us(f99),
                over,
                us(g50),
                h50.as_secs_f64() / g50.as_secs_f64(),
                us(hp_cpu) / hp.samples.len().max(1) as f64,
                us(fl_cpu) / fl.samples.len().max(1) as f64,
                errors,
                if over <= 1.10 { "yes" } else { "**no**" },
                us(k50),
                us(k99),
                over_kept,
                if over_kept <= 1.10 { "" } else { " **no**" },
                us(k1),
                h50.as_secs_f64() / k1.as_secs_f64(),
            );
        }
    }
    println!();
    for (key, cold, cold_over, warm, warm_over) in &cold_warm {
        if warm.is_nan() {
            continue;
        }
        println!(
            "- warm vs cold, {key}: p50 {cold:.0} → {warm:.0} µs ({:+.0}% raw; {:+.0}% relative to each row's interleaved floor; aim −30%)",
            (warm / cold - 1.0) * 100.0,
            (warm_over / cold_over - 1.0) * 100.0
        );
    }
    if !opts.warm {
        println!(
            "- warm-attachment mode (issue 9 item 5, `TransportConfig::warm`): not measured in this run; pass `--warm`"
        );
    }
    println!();
    part_done("e2e", started, &load_at_start);
}

// ---------------------------------------------------------------------------
// scale

fn scale_run(args: &[String]) {
    let arg = |i: usize| {
        args.get(i)
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or(0)
    };
    let kind = args.get(1).map_or("tokio", String::as_str);
    let (sessions, attachments, secs, threads) = (arg(2), arg(3), arg(4), arg(5));
    let d = Duration::from_secs(secs as u64);
    let v = match kind {
        "tokio" => scale::run_tokio(sessions, attachments, d, LegKind::Sse, false),
        "tokio-warm" => scale::run_tokio(sessions, attachments, d, LegKind::Sse, true),
        "tokio-poll" => scale::run_tokio(sessions, attachments, d, LegKind::Poll, false),
        "blocking" => scale::run_blocking_with(&scale::BlockingRun {
            sessions,
            attachments,
            threads,
            duration: d,
            store: scale::StoreKind::from_args(args),
            listing: net::Listing::from_args(args),
        }),
        "kept" => scale::run_kept_floor(sessions, attachments, d, LegKind::Sse),
        _ => scale::run_floor(sessions, attachments, d, LegKind::Sse),
    };
    println!("{v}");
}

/// `queue`: the queue worker on one Redis, without and with a worker
/// killed mid-run (`--workers N`, `--threads N` per worker, `--jobs N`,
/// `--conversations N`, `--rate JOBS_PER_SEC`, `--reply-delay-ms MS`,
/// `--kill-after-ms MS`, `--lease-ms MS`, `--lock-wait-ms MS`): each run
/// as a JSON line, then the ratios of the run with the kill to the run
/// without.
fn queue_all(args: &[String]) {
    let flag = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let d = queue::QueueRun::default();
    let run = queue::QueueRun {
        workers: flag("--workers", d.workers as u64) as usize,
        threads: flag("--threads", d.threads as u64) as usize,
        jobs: flag("--jobs", d.jobs as u64) as usize,
        conversations: flag("--conversations", d.conversations as u64) as usize,
        rate: flag("--rate", d.rate as u64) as f64,
        reply_delay: Duration::from_millis(flag("--reply-delay-ms", 100)),
        kill_after: None,
        lease: Duration::from_millis(flag("--lease-ms", d.lease.as_millis() as u64)),
        lock_wait: Duration::from_millis(flag("--lock-wait-ms", d.lock_wait.as_millis() as u64)),
        groups: args.iter().any(|a| a == "--groups"),
    };
    let plain = queue::run(&run);
    println!("{plain}");
    let kill_after = Duration::from_millis(flag(
        "--kill-after-ms",
        (run.jobs as f64 / run.rate * 1000.0 / 3.0) as u64,
    ));
    let killed = queue::run(&queue::QueueRun {
        kill_after: Some(kill_after),
        ..run
    });
    println!("{killed}");
    let f = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    println!(
        "with the kill / without: Redis commands per job {:.2}x ({:.1} / {:.1}), round trips per job {:.2}x, worker CPU per job {:.2}x ({:.0} / {:.0} µs); healthy jobs' delay max {:.0} ms (lease {} ms); takeover {:?} s",
        f(&killed, "redis_commands_per_job") / f(&plain, "redis_commands_per_job"),
        f(&killed, "redis_commands_per_job"),
        f(&plain, "redis_commands_per_job"),
        f(&killed, "redis_round_trips_per_job") / f(&plain, "redis_round_trips_per_job"),
        f(&killed, "worker_cpu_us_per_job") / f(&plain, "worker_cpu_us_per_job"),
        f(&killed, "worker_cpu_us_per_job"),
        f(&plain, "worker_cpu_us_per_job"),
        f(&killed, "healthy_delay_max_ms"),
        killed["lease_ms"],
        killed["takeover_secs"],
    );
}

fn scale_all(opts: &Opts) {
    let (started, load_at_start) = (Instant::now(), load());
    println!(
        "## 4. Scale: {} attachments over {} sessions (one relay, {} demo surfaces, in a child process), each calling `sheet_get_cell` in a loop for {} s after one warm-up call each",
        opts.attachments, opts.sessions, opts.sessions, opts.secs
    );
    println!();
    println!(
        "| client | in flight (peak) | calls | calls/s | p50 | p99 | errors | RSS before → peak (VmHWM) | per in-flight exchange | client CPU / call | relay+surfaces CPU / call | aim < 64 KiB, 0 errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let exe = std::env::current_exe().unwrap();
    let runs = [
        ("tokio", opts.attachments),
        ("tokio-warm", opts.attachments),
        ("blocking", opts.attachments),
        ("floor", opts.attachments),
        ("kept", opts.attachments),
    ];
    let mut rates: Vec<(String, f64)> = Vec::new();
    for (kind, n) in runs {
        let out = Command::new(&exe)
            .args([
                "scale-run",
                kind,
                &opts.sessions.to_string(),
                &n.to_string(),
                &opts.secs.to_string(),
                &opts.threads.to_string(),
            ])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            eprintln!(
                "scale-run {kind} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            Value::Null
        });
        if v.is_null() {
            continue;
        }
        let f = |k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
        let errors = f("errors") + f("warmup_errors");
        let per = f("kib_per_in_flight");
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.1} ms | {:.1} ms | {:.0} | {:.1} → {:.1} MiB | {:.1} KiB | {:.0} µs | {:.0} µs | {} |",
            v.get("name").and_then(Value::as_str).unwrap_or(kind),
            f("peak_in_flight"),
            f("ops"),
            f("ops_per_sec"),
            f("p50_us") / 1000.0,
            f("p99_us") / 1000.0,
            errors,
            f("rss_before_kib") / 1024.0,
            f("hwm_kib") / 1024.0,
            per,
            f("client_cpu_us_per_op"),
            f("server_cpu_us_per_op"),
            if per < 64.0 && errors == 0.0 {
                "yes"
            } else {
                "**no**"
            },
        );
        if let Some(kinds) = v.get("error_kinds").and_then(Value::as_object)
            && !kinds.is_empty()
        {
            eprintln!("{kind} errors: {kinds:?}");
        }
        rates.push((kind.to_owned(), f("ops_per_sec")));
    }
    println!();
    let rate = |k: &str| rates.iter().find(|r| r.0 == k).map(|r| r.1);
    for (kind, r) in &rates {
        if let (Some(floor), Some(kept)) = (rate("floor"), rate("kept")) {
            println!(
                "- {kind}: calls/s {:.2}x the floor's, {:.2}x the keep-alive floor's (aim for tokio: ≥ the floor's)",
                r / floor,
                r / kept
            );
        }
    }
    println!();
    part_done("scale", started, &load_at_start);
}

// ---------------------------------------------------------------------------
// idle

fn idle_all(opts: &Opts) {
    let (started, load_at_start) = (Instant::now(), load());
    let o = &opts.idle;
    println!(
        "## 5. Idle: {} warm attachments in one tokio process (two workers) over {} sessions (one relay, {} demo surfaces, in a child process): each calls `sheet_get_cell` once (at most {} at once), all sit idle {} s with their SSE legs open, then each calls once more (at most {} at once)",
        o.attachments,
        o.sessions,
        o.sessions,
        o.in_flight,
        o.idle.as_secs(),
        o.in_flight
    );
    println!();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(&exe)
        .args([
            "idle-run",
            "--attachments",
            &o.attachments.to_string(),
            "--sessions",
            &o.sessions.to_string(),
            "--in-flight",
            &o.in_flight.to_string(),
            "--idle-secs",
            &o.idle.as_secs().to_string(),
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if v.is_null() {
        eprintln!(
            "idle-run failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        part_done("idle", started, &load_at_start);
        return;
    }
    let f = |k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    let w = |wave: &str, k: &str| {
        v.get(wave)
            .and_then(|w| w.get(k))
            .and_then(Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    if let Some(why) = v.get("limited_by").and_then(Value::as_str) {
        println!("**Fewer attachments than asked**: {why}.");
        println!();
    }
    println!(
        "RLIMIT_NOFILE: soft {} / hard {} (the soft limit raised to the hard one, here and in the relay's process).",
        f("nofile_soft"),
        f("nofile_hard")
    );
    println!();
    println!(
        "| attachments | RSS before → idle (peak) | memory per idle warm attachment (aim ≤ 48 KiB) | relay+surfaces RSS before → idle (per attachment) | sockets open while idle: client / relay process | idle sockets still open after the second call | first call: errors, p50 / p99, wave time | second call: errors, p50 / p99, wave time (aim 0 errors) | CPU while idle: client / relay (ms per s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let per = f("kib_per_attachment");
    let errors2 = w("second", "errors");
    println!(
        "| {:.0} | {:.1} → {:.1} MiB ({:.1}) | {:.1} KiB {} | {:.1} → {:.1} MiB ({:.1} KiB) | {:.0} / {:.0} | {:.0} | {:.0}, {:.1} / {:.1} ms, {:.1} s | {:.0}, {:.1} / {:.1} ms, {:.1} s {} | {:.1} / {:.1} |",
        f("attachments"),
        f("rss_before_kib") / 1024.0,
        f("rss_idle_kib") / 1024.0,
        f("hwm_kib") / 1024.0,
        per,
        if per <= 48.0 { "yes" } else { "**no**" },
        f("server_rss_before_kib") / 1024.0,
        f("server_rss_idle_kib") / 1024.0,
        f("server_kib_per_attachment"),
        f("sockets_idle"),
        f("server_sockets_idle"),
        f("idle_sockets_still_open_after"),
        w("first", "errors"),
        w("first", "p50_us") / 1000.0,
        w("first", "p99_us") / 1000.0,
        w("first", "secs"),
        errors2,
        w("second", "p50_us") / 1000.0,
        w("second", "p99_us") / 1000.0,
        w("second", "secs"),
        if errors2 == 0.0 { "yes" } else { "**no**" },
        f("idle_client_cpu_ms_per_s"),
        f("idle_server_cpu_ms_per_s"),
    );
    for wave in ["first", "second"] {
        if let Some(kinds) = v
            .get(wave)
            .and_then(|w| w.get("error_kinds"))
            .and_then(Value::as_object)
            && !kinds.is_empty()
        {
            println!("- {wave} call errors: {kinds:?}");
        }
    }
    println!();
    part_done("idle", started, &load_at_start);
}

// ---------------------------------------------------------------------------
// link

fn link(args: &[String]) {
    let value = |name: &str| -> Option<&str> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let number = |name: &str, default: u64| -> u64 {
        value(name).map_or(default, |v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("{name} {v}: expected a whole number");
                std::process::exit(2);
            })
        })
    };
    let paths = match value("--path").unwrap_or("both") {
        "plain" => vec![PathKind::Plain],
        "production" => vec![PathKind::Production],
        "both" => vec![PathKind::Plain, PathKind::Production],
        other => {
            eprintln!("--path {other}: expected plain, production or both");
            std::process::exit(2);
        }
    };
    let runtimes: Vec<RuntimeKind> = match value("--runtime") {
        None => RuntimeKind::ALL.to_vec(),
        Some(list) => list
            .split(',')
            .map(|name| {
                RuntimeKind::ALL
                    .into_iter()
                    .find(|k| k.as_str() == name)
                    .unwrap_or_else(|| {
                        eprintln!("--runtime {name}: expected tokio, blocking or async-std");
                        std::process::exit(2);
                    })
            })
            .collect(),
    };
    let legs: Vec<LegKind> = match value("--transport") {
        None => LegKind::ALL.to_vec(),
        Some(list) => list
            .split(',')
            .map(|name| {
                LegKind::ALL
                    .into_iter()
                    .find(|k| across::transport_flag(*k) == name)
                    .unwrap_or_else(|| {
                        eprintln!("--transport {name}: expected sse or poll");
                        std::process::exit(2);
                    })
            })
            .collect(),
    };
    let bin = value("--bin").map_or_else(
        || {
            std::env::current_exe()
                .unwrap()
                .with_file_name(format!("human-plus{}", std::env::consts::EXE_SUFFIX))
        },
        PathBuf::from,
    );
    let cli_args: Vec<String> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i > 0 && args.get(i - 1).is_some_and(|p| p == "--cli-arg"))
        .map(|(_, a)| a.clone())
        .collect();
    let opts = LinkOpts {
        rtt: Duration::from_millis(number("--rtt-ms", 40).max(1)),
        calls: number("--calls", 30).max(1) as usize,
        turns: number("--turns", 5).max(1) as usize,
        paths,
        runtimes,
        legs,
        bin,
        cli_args,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    if let Err(e) = rt.block_on(across::run(&opts)) {
        eprintln!("compare link: {e}");
        std::process::exit(1);
    }
    println!(
        "Run took {:.0} s; load average at the end: {}",
        started.elapsed().as_secs_f64(),
        load()
    );
}
