//! Idle: many warm attachments in one tokio process, each with its receive
//! leg open, against the local relay and demo surfaces (in a child process,
//! as [`crate::scale`] runs them).
//!
//! Every attachment makes its first call (with at most `in_flight` calls at
//! once), then all of them sit idle for a while with their warm SSE legs
//! open (the relay writes `: keepalive` on each every 15 s), then every one
//! of them calls once more (again at most `in_flight` at once).
//!
//! Memory: `VmRSS` (from `/proc/self/status`) is read once the runtime and
//! the manager exist and before the first attachment is made, and again
//! after the idle period; (idle − before) ÷ attachments is the memory per
//! idle warm attachment. It is an upper bound: it holds the attachment
//! records, the init cache, the kept listings, each leg's socket, task and
//! buffers, and whatever the allocator kept from the first calls (freed
//! memory is not always given back).
//!
//! Sockets: each warm leg is one socket on each side, so the process needs
//! about one file descriptor per attachment, and the relay's process as
//! many again. [`raise_nofile`] lifts the soft `RLIMIT_NOFILE` to the hard
//! limit; when even the hard limit is too low, the run measures the
//! largest count that fits and says why.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::net::{self, LegKind, Server, pinned_policy, status_kib};
use crate::timing::{percentile, us};

/// What an idle run is asked to do.
#[derive(Debug, Clone)]
pub struct IdleOpts {
    /// Demo surfaces (sessions) the attachments are spread over.
    pub sessions: usize,
    /// Warm attachments (10,000 by default).
    pub attachments: usize,
    /// The most calls in flight at once, in either wave.
    pub in_flight: usize,
    /// How long every attachment sits idle between its two calls.
    pub idle: Duration,
}

impl Default for IdleOpts {
    fn default() -> Self {
        IdleOpts {
            sessions: 8,
            attachments: 10_000,
            in_flight: 1_000,
            idle: Duration::from_secs(20),
        }
    }
}

/// File descriptors one side needs beyond one per attachment: the calls in
/// flight (a POST connection each, and during the first calls up to three
/// opened ahead), the surfaces' own connections, and a margin.
#[must_use]
pub fn descriptors_needed(attachments: usize, in_flight: usize, sessions: usize) -> u64 {
    (attachments + 4 * in_flight + 8 * sessions + 256) as u64
}

/// The largest attachment count whose [`descriptors_needed`] fits in
/// `limit`.
#[must_use]
pub fn fitting(limit: u64, in_flight: usize, sessions: usize) -> usize {
    let fixed = descriptors_needed(0, in_flight, sessions);
    usize::try_from(limit.saturating_sub(fixed)).unwrap_or(usize::MAX)
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (children
/// inherit it). Returns the (soft, hard) limits in force afterwards;
/// `u64::MAX` stands for unlimited.
#[must_use]
pub fn raise_nofile() -> (u64, u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    // An unlimited hard limit still stops at the kernel's `nr_open`.
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let target = match (now.maximum, nr_open) {
        (Some(hard), Some(cap)) => Some(hard.min(cap)),
        (Some(hard), None) => Some(hard),
        (None, cap) => cap,
    };
    let raised = Rlimit {
        current: target.or(now.current),
        maximum: now.maximum,
    };
    if raised != now && setrlimit(Resource::Nofile, raised).is_err() {
        eprintln!("idle: could not raise RLIMIT_NOFILE's soft limit to its hard limit");
    }
    let after = getrlimit(Resource::Nofile);
    (
        after.current.unwrap_or(u64::MAX),
        after.maximum.unwrap_or(u64::MAX),
    )
}

/// The socket inodes open in process `pid` (`/proc/<pid>/fd` entries that
/// link to `socket:[inode]`).
#[must_use]
pub fn sockets(pid: u32) -> BTreeSet<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return BTreeSet::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|target| {
            let t = target.to_string_lossy().into_owned();
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// One wave's latencies and errors.
#[derive(Debug, Default)]
struct Wave {
    latencies: Vec<Duration>,
    errors: BTreeMap<String, u64>,
    took: Duration,
}

impl Wave {
    fn summary(&mut self) -> Value {
        self.latencies.sort_unstable();
        json!({
            "calls": self.latencies.len(),
            "errors": self.errors.values().sum::<u64>(),
            "error_kinds": self.errors,
            "secs": self.took.as_secs_f64(),
            "p50_us": us(percentile(&self.latencies, 50.0)),
            "p99_us": us(percentile(&self.latencies, 99.0)),
        })
    }
}

/// Runs the idle measurement (see the [module documentation](self)) and
/// returns what it measured as JSON.
///
/// # Panics
/// When the setup fails (the relay cannot start, the pin probe fails).
#[must_use]
pub fn run(opts: &IdleOpts) -> Value {
    let (soft, hard) = raise_nofile();
    let wanted = opts.attachments;
    let need = descriptors_needed(wanted, opts.in_flight, opts.sessions);
    let (attachments, limited) = if soft >= need {
        (wanted, None)
    } else {
        let n = fitting(soft, opts.in_flight, opts.sessions);
        let why = format!(
            "RLIMIT_NOFILE is {soft} (hard limit {hard}): {wanted} warm legs need about {need} \
             descriptors on each side; measuring the largest count that fits, {n}"
        );
        eprintln!("idle: {why}");
        (n, Some(why))
    };
    let server = Server::start(opts.sessions);
    let policy = pinned_policy(&server);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let hp =
        human_plus_tokio::HumanPlus::new(server.config(LegKind::Sse.receive_leg(), policy, true));
    let me = std::process::id();
    let rss_before = status_kib("VmRSS");
    let server_rss_before = net::proc_status_kib(&server.pid.to_string(), "VmRSS");
    let sockets_before = sockets(me).len();
    let ids = Arc::new(crate::scale::attach_all(&rt, &hp, &server, attachments));
    let wave = || -> Wave {
        let started = Instant::now();
        let mut wave = rt.block_on(async {
            let gate = Arc::new(tokio::sync::Semaphore::new(opts.in_flight.max(1)));
            let mut tasks = Vec::with_capacity(ids.len());
            for i in 0..ids.len() {
                let (hp, ids, gate) = (hp.clone(), Arc::clone(&ids), Arc::clone(&gate));
                tasks.push(tokio::spawn(async move {
                    let _permit = gate.acquire().await;
                    let (owner, id) = &ids[i];
                    let t = Instant::now();
                    let r = hp
                        .call(owner.as_str(), id, net::TOOL, net::tool_args())
                        .await;
                    r.map(|_| t.elapsed()).map_err(|e| e.code().to_owned())
                }));
            }
            let mut wave = Wave::default();
            for t in tasks {
                match t.await {
                    Ok(Ok(took)) => wave.latencies.push(took),
                    Ok(Err(code)) => *wave.errors.entry(code).or_default() += 1,
                    Err(e) => *wave.errors.entry(format!("task: {e}")).or_default() += 1,
                }
            }
            wave
        });
        wave.took = started.elapsed();
        wave
    };
    let mut first = wave();
    let cpu0 = (net::process_cpu("/proc/self/stat"), server.cpu());
    std::thread::sleep(opts.idle);
    let idle_cpu = (
        net::process_cpu("/proc/self/stat") - cpu0.0,
        server.cpu() - cpu0.1,
    );
    let rss_idle = status_kib("VmRSS");
    let server_rss_idle = net::proc_status_kib(&server.pid.to_string(), "VmRSS");
    let idle_sockets = sockets(me);
    let server_sockets_idle = sockets(server.pid).len();
    let mut second = wave();
    let after = sockets(me);
    let kept = idle_sockets.intersection(&after).count();
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / attachments.max(1) as f64;
    json!({
        "attachments": attachments,
        "asked": wanted,
        "limited_by": limited,
        "nofile_soft": soft,
        "nofile_hard": hard,
        "sessions": opts.sessions,
        "in_flight": opts.in_flight,
        "idle_secs": opts.idle.as_secs_f64(),
        "first": first.summary(),
        "second": second.summary(),
        "rss_before_kib": rss_before,
        "rss_idle_kib": rss_idle,
        "hwm_kib": status_kib("VmHWM"),
        "kib_per_attachment": per(rss_idle, rss_before),
        "server_rss_before_kib": server_rss_before,
        "server_rss_idle_kib": server_rss_idle,
        "server_kib_per_attachment": per(server_rss_idle, server_rss_before),
        "sockets_before": sockets_before,
        "sockets_idle": idle_sockets.len(),
        "server_sockets_idle": server_sockets_idle,
        "sockets_after": after.len(),
        "idle_sockets_still_open_after": kept,
        "idle_client_cpu_ms_per_s": idle_cpu.0.as_secs_f64() * 1e3 / opts.idle.as_secs_f64(),
        "idle_server_cpu_ms_per_s": idle_cpu.1.as_secs_f64() * 1e3 / opts.idle.as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_budget() {
        let need = descriptors_needed(10_000, 1_000, 8);
        assert_eq!(need, 10_000 + 4_000 + 64 + 256);
        assert_eq!(fitting(need, 1_000, 8), 10_000);
        assert_eq!(fitting(100, 1_000, 8), 0);
    }

    #[test]
    fn raising_keeps_the_hard_limit_and_counts_sockets() {
        use rustix::process::{Resource, getrlimit};
        let before = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
        let (soft, hard) = raise_nofile();
        assert!(
            soft >= before && soft <= hard,
            "{before} → {soft} (hard {hard})"
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = sockets(std::process::id());
        assert!(!open.is_empty());
        drop(listener);
    }
}
