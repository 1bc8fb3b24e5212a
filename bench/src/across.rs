//! Round trips across a link: the `human-plus` command as its users run
//! it, with the relay and the page on the far side of a simulated network
//! ([`crate::link`]), reported in round trips (elapsed ÷ RTT).
//!
//! Two paths, each with a relay ([`RelayServer`]) and a demo sheet
//! ([`DemoSurface`]) that talks to the relay directly; only the agent's
//! traffic crosses the link:
//!
//! * **plain**: the relay over HTTP; agent → link → relay;
//! * **production**: the relay over TLS with a throwaway CA, and an HTTP
//!   CONNECT egress proxy ([`crate::proxy`]) on the agent's side; agent →
//!   proxy → link → relay. The command has no option mapping a host name to
//!   an address, so the relay URL is an IP-literal TLS host
//!   (`https://127.0.0.1:<link port>`, with `--allow-address 127.0.0.1/32`);
//!   the certificate covers it. The round trips are the same as for a named
//!   host (the runtime resolves a name itself, beside the link).
//!
//! Drivers, per runtime × receive leg: a real MCP client (rmcp) over the
//! stdio of the release `human-plus mcp` binary (bridge start-up: spawn to
//! the end of the client's `initialize` and first `tools/list`; the first
//! call; warm calls of `sheet_get_cell`, p50 and p90), one-shot
//! `human-plus call` processes (a queue worker's turn: the whole process's
//! wall time), the connections the link accepted for each, and beside them
//! the keep-alive floor ([`crate::kept`]) on the same link.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use human_plus_relay::{DemoSurface, GeneratedCert, RelayHandle, RelayServer, TlsConfig};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::transport::TokioChildProcess;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use crate::kept::{KeptFloor, Route};
use crate::link::Link;
use crate::net::{LegKind, RuntimeKind, TOKEN, TOOL, tool_args};
use crate::proxy::ConnectProxy;
use crate::timing::percentile;

/// The tools the agent declares (`--allow`).
const ALLOW: &str = "sheet_get_cell,sheet_set_cell,changes_since";

/// Stale writes measured per bridge row.
const REFUSALS: usize = 10;

/// The environment variable the command reads the token from.
const TOKEN_ENV: &str = "HUMAN_PLUS_TOKEN";

/// How long any one step (a call, a start-up, a process) may take.
const STEP: Duration = Duration::from_secs(120);

/// Which path the agent's traffic takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// HTTP, agent → link → relay.
    Plain,
    /// HTTPS through a CONNECT egress proxy, agent → proxy → link → relay.
    Production,
}

impl PathKind {
    /// Its name in tables and options.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Plain => "plain",
            PathKind::Production => "production",
        }
    }

    /// The aim for a warm call's p50 through the bridge, in RTT.
    #[must_use]
    pub fn warm_aim(self) -> f64 {
        match self {
            PathKind::Plain => 1.1,
            PathKind::Production => 1.2,
        }
    }
}

/// The command's `--transport` value for `leg`.
#[must_use]
pub fn transport_flag(leg: LegKind) -> &'static str {
    match leg {
        LegKind::Sse => "sse",
        LegKind::Poll => "poll",
    }
}

/// The aim for bridge start-up, in RTT.
pub const STARTUP_AIM: f64 = 6.0;

/// The aim for a one-shot turn, in RTT.
pub const TURN_AIM: f64 = 7.0;

/// What `compare link` measures.
#[derive(Debug, Clone)]
pub struct LinkOpts {
    /// The link's round-trip time.
    pub rtt: Duration,
    /// Warm calls per bridge (and per floor).
    pub calls: usize,
    /// One-shot `human-plus call` processes per runtime × leg.
    pub turns: usize,
    /// The paths measured.
    pub paths: Vec<PathKind>,
    /// The runtimes measured.
    pub runtimes: Vec<RuntimeKind>,
    /// The receive legs measured.
    pub legs: Vec<LegKind>,
    /// The `human-plus` binary (a release build).
    pub bin: PathBuf,
    /// Extra arguments for every `human-plus mcp` and `call` run.
    pub cli_args: Vec<String>,
}

/// One measured row, in RTT (and connections the link accepted).
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// Who: `bridge`, `floor`.
    pub client: String,
    /// The runtime (empty for the floor).
    pub runtime: String,
    /// The receive leg.
    pub leg: String,
    /// Start-up, RTT.
    pub startup: f64,
    /// Connections opened during start-up.
    pub startup_conns: u64,
    /// The first call, RTT.
    pub first: f64,
    /// Connections opened by the first call.
    pub first_conns: u64,
    /// Warm calls' p50, RTT.
    pub warm_p50: f64,
    /// Warm calls' p90, RTT.
    pub warm_p90: f64,
    /// Connections per warm call.
    pub warm_conns: f64,
    /// A stale write's refusal (the person edited first), p50 in RTT: the
    /// refused call, and the change feed asked what changed since its pin
    /// (the bridge only; 0 for the floor).
    pub refusal_p50: f64,
    /// A write right after a refusal, pinned to the revision it reported,
    /// p50 in RTT (the bridge only).
    pub after_refusal_p50: f64,
    /// The one-shot turn's median, RTT.
    pub turn: f64,
    /// Its fastest and slowest, RTT.
    pub turn_range: (f64, f64),
    /// Connections per turn.
    pub turn_conns: f64,
    /// Failed calls or turns.
    pub errors: usize,
}

/// A relay and a demo sheet for one path, the CA and pins files the
/// command reads, and (production) the egress proxy.
struct World {
    path: PathKind,
    relay: RelayHandle,
    surface: DemoSurface,
    session: String,
    cert: Option<GeneratedCert>,
    proxy: Option<ConnectProxy>,
    dir: PathBuf,
    pins: PathBuf,
    bin: PathBuf,
    cli_args: Vec<String>,
    /// Connections every link of this world accepted, summed when each
    /// measurement ends (checked against the proxy's tunnels).
    linked: std::sync::atomic::AtomicU64,
    /// The proxy's tunnels before the measurements (recording the pins).
    tunnels_before: u64,
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl World {
    async fn start(path: PathKind, opts: &LinkOpts, n: usize) -> std::io::Result<World> {
        let dir =
            std::env::temp_dir().join(format!("human-plus-bench-link-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let session = format!("bench_link_{}", path.name());
        let (relay, cert) = match path {
            PathKind::Plain => (RelayServer::builder().start().await?, None),
            PathKind::Production => {
                let (tls, cert) =
                    TlsConfig::generate_for(&["relay.test", "127.0.0.1", "localhost"])
                        .map_err(io_err)?;
                std::fs::write(dir.join("ca.pem"), cert.ca_pem())?;
                (RelayServer::builder().tls(tls).start().await?, Some(cert))
            }
        };
        let mut page = DemoSurface::builder(relay.base_url(), &session, TOKEN).cells([
            ("A1", "alpha"),
            ("B2", "beta"),
            ("B4", "4"),
        ]);
        if let Some(cert) = &cert {
            page = page.tls_roots([cert.ca_der().clone()]);
        }
        let surface = page.start().await.map_err(io_err)?;
        let proxy = match path {
            PathKind::Plain => None,
            PathKind::Production => Some(ConnectProxy::start().await?),
        };
        let mut world = World {
            path,
            relay,
            surface,
            session,
            cert,
            proxy,
            pins: dir.join("pins.json"),
            dir,
            bin: opts.bin.clone(),
            cli_args: opts.cli_args.clone(),
            linked: std::sync::atomic::AtomicU64::new(0),
            tunnels_before: 0,
        };
        world.record_pins().await?;
        world.tunnels_before = world.proxy.as_ref().map_or(0, ConnectProxy::tunnels);
        Ok(world)
    }

    /// The connection options reaching the relay through `port` (the
    /// link's, or the relay's own).
    fn connect_args(&self, port: u16, runtime: RuntimeKind, leg: LegKind) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--session".into(),
            self.session.clone(),
            "--surface".into(),
            "sheet:one".into(),
            "--allow".into(),
            ALLOW.into(),
            "--pins".into(),
            self.pins.display().to_string(),
            "--allow-host".into(),
            "127.0.0.1".into(),
            "--allow-port".into(),
            port.to_string(),
            "--runtime".into(),
            runtime.as_str().into(),
            "--transport".into(),
            transport_flag(leg).into(),
            "--timeout".into(),
            "60".into(),
        ];
        match (&self.proxy, self.path) {
            (Some(proxy), PathKind::Production) => args.extend([
                "--relay".into(),
                format!("https://127.0.0.1:{port}"),
                "--allow-address".into(),
                "127.0.0.1/32".into(),
                "--ca-cert".into(),
                self.dir.join("ca.pem").display().to_string(),
                "--egress-proxy".into(),
                proxy.url(),
            ]),
            _ => args.extend([
                "--relay".into(),
                format!("http://127.0.0.1:{port}"),
                "--allow-unverified-egress".into(),
                "--allow-insecure-loopback".into(),
            ]),
        }
        args
    }

    fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.env(TOKEN_ENV, TOKEN).env("NO_COLOR", "1");
        cmd
    }

    /// Records the pins as a new user would, `human-plus tools --json`,
    /// straight to the relay (not across the link).
    async fn record_pins(&mut self) -> std::io::Result<()> {
        // No pins file yet: everything but `--pins FILE`.
        let mut args =
            self.connect_args(self.relay.addr().port(), RuntimeKind::Tokio, LegKind::Sse);
        if let Some(at) = args.iter().position(|a| a == "--pins") {
            args.drain(at..at + 2);
        }
        let out = self
            .command()
            .arg("tools")
            .arg("--json")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .await?;
        if !out.status.success() {
            return Err(io_err(format!(
                "{} tools failed ({}): {}",
                self.bin.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let listing: Value = serde_json::from_slice(&out.stdout).map_err(io_err)?;
        let pinned = listing
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| {
                t.iter()
                    .any(|t| t.get("name").and_then(Value::as_str) == Some(TOOL))
            });
        if !pinned {
            return Err(io_err(format!("{TOOL} is not in the tools listing")));
        }
        std::fs::write(&self.pins, &out.stdout)
    }

    fn floor_route(&self, link: &Link) -> std::io::Result<Route> {
        Ok(match (&self.proxy, &self.cert) {
            (Some(proxy), Some(cert)) => Route::Tunnel {
                proxy: proxy.addr(),
                target: link.addr(),
                tls: cert.client_config().map_err(io_err)?,
            },
            _ => Route::Direct(link.addr()),
        })
    }

    /// Adds a finished link's connections to the world's total.
    fn count(&self, link: &Link) {
        self.linked
            .fetch_add(link.connections(), std::sync::atomic::Ordering::Relaxed);
    }

    /// On the production path: the proxy's tunnels for the measurements
    /// and the connections the links accepted (equal when every connection
    /// went through the proxy and every tunnel reached a link).
    fn cross_check(&self) -> Option<(u64, u64)> {
        let proxy = self.proxy.as_ref()?;
        Some((
            proxy.tunnels() - self.tunnels_before,
            self.linked.load(std::sync::atomic::Ordering::Relaxed),
        ))
    }

    async fn shutdown(self) {
        let World {
            relay,
            surface,
            dir,
            proxy,
            ..
        } = self;
        drop(proxy);
        surface.shutdown().await;
        relay.shutdown().await;
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn rtts(d: Duration, rtt: Duration) -> f64 {
    d.as_secs_f64() / rtt.as_secs_f64()
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn call_params() -> CallToolRequestParams {
    let Value::Object(args) = tool_args() else {
        return CallToolRequestParams::new(TOOL);
    };
    CallToolRequestParams::new(TOOL).with_arguments(args)
}

/// One bridge: spawn, initialize + list, a first call, warm calls.
async fn bridge_row(
    world: &World,
    rtt: Duration,
    calls: usize,
    runtime: RuntimeKind,
    leg: LegKind,
) -> std::io::Result<Row> {
    let link = Link::start(world.relay.addr(), rtt).await?;
    let mut cmd = world.command();
    cmd.arg("mcp")
        .args(world.connect_args(link.port(), runtime, leg))
        .args(&world.cli_args);
    let mut row = Row {
        client: "bridge".into(),
        runtime: runtime.as_str().into(),
        leg: transport_flag(leg).into(),
        ..Row::default()
    };
    let start = Instant::now();
    let (transport, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()?;
    let log = tokio::spawn(async move {
        let mut s = String::new();
        if let Some(mut e) = stderr {
            let _ = e.read_to_string(&mut s).await;
        }
        s
    });
    let client = tokio::time::timeout(STEP, ClientConfig::default().serve(transport))
        .await
        .map_err(io_err)?
        .map_err(io_err)?;
    let tools = tokio::time::timeout(STEP, client.list_all_tools())
        .await
        .map_err(io_err)?
        .map_err(io_err)?;
    row.startup = rtts(start.elapsed(), rtt);
    row.startup_conns = link.connections();
    if !tools.iter().any(|t| t.name == TOOL) {
        return Err(io_err(format!("the bridge did not list {TOOL}")));
    }
    let mut warm = Vec::with_capacity(calls);
    let mut first_error = None;
    for i in 0..=calls {
        let t = Instant::now();
        let result = tokio::time::timeout(STEP, client.call_tool(call_params())).await;
        let took = t.elapsed();
        let ok = match &result {
            Ok(Ok(r)) if r.is_error != Some(true) && text(r).contains("<untrusted-tool-output") => {
                true
            }
            Ok(Ok(r)) => {
                first_error.get_or_insert_with(|| text(r));
                false
            }
            Ok(Err(e)) => {
                first_error.get_or_insert_with(|| e.to_string());
                false
            }
            Err(_) => {
                first_error.get_or_insert_with(|| "timed out".to_owned());
                false
            }
        };
        if !ok {
            row.errors += 1;
        }
        if i == 0 {
            row.first = rtts(took, rtt);
            row.first_conns = link.connections() - row.startup_conns;
        } else if ok {
            warm.push(took);
        }
    }
    let warm_conns = link.connections() - row.startup_conns - row.first_conns;
    row.warm_conns = warm_conns as f64 / calls.max(1) as f64;
    warm.sort_unstable();
    row.warm_p50 = rtts(percentile(&warm, 50.0), rtt);
    row.warm_p90 = rtts(percentile(&warm, 90.0), rtt);
    // Stale writes: the person edits, the agent's write is refused (the
    // call, then the feed since its pin), and a write right after it,
    // pinned to the revision the refusal reported, lands.
    let (mut refused, mut after) = (Vec::new(), Vec::new());
    for i in 0..REFUSALS {
        if world
            .surface
            .person()
            .set_cell("C3", &format!("person-{i}"))
            .is_err()
        {
            row.errors += 1;
            continue;
        }
        for (value, expect_refused, into) in [
            ("agent-a", true, &mut refused),
            ("agent-b", false, &mut after),
        ] {
            let params = CallToolRequestParams::new("sheet_set_cell").with_arguments(
                serde_json::Map::from_iter([
                    ("address".to_owned(), Value::from("C3")),
                    ("value".to_owned(), Value::from(value)),
                ]),
            );
            let t = Instant::now();
            let result = tokio::time::timeout(STEP, client.call_tool(params)).await;
            let took = t.elapsed();
            match result {
                Ok(Ok(r)) if (r.is_error == Some(true)) == expect_refused => into.push(took),
                _ => row.errors += 1,
            }
        }
    }
    refused.sort_unstable();
    after.sort_unstable();
    row.refusal_p50 = rtts(percentile(&refused, 50.0), rtt);
    row.after_refusal_p50 = rtts(percentile(&after, 50.0), rtt);
    let _ = client.cancel().await;
    world.count(&link);
    let log = log.await.unwrap_or_default();
    if let Some(e) = first_error {
        eprintln!(
            "bridge {} {} {}: {} failed call(s), the first: {e}\n{log}",
            world.path.name(),
            runtime.as_str(),
            transport_flag(leg),
            row.errors
        );
    }
    Ok(row)
}

/// One-shot `human-plus call` processes, one after the other, on one link.
async fn turns(
    world: &World,
    rtt: Duration,
    n: usize,
    runtime: RuntimeKind,
    leg: LegKind,
    row: &mut Row,
) -> std::io::Result<()> {
    let link = Link::start(world.relay.addr(), rtt).await?;
    let args_json = tool_args().to_string();
    let mut walls = Vec::with_capacity(n);
    for _ in 0..n {
        let mut cmd = world.command();
        cmd.arg("call")
            .arg(TOOL)
            .arg(&args_json)
            .args(world.connect_args(link.port(), runtime, leg))
            .args(&world.cli_args)
            .stdin(Stdio::null());
        let start = Instant::now();
        let out = tokio::time::timeout(STEP, cmd.output())
            .await
            .map_err(io_err)??;
        let wall = start.elapsed();
        if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("\n4\n") {
            walls.push(wall);
        } else {
            row.errors += 1;
            eprintln!(
                "call {} {} {}: {} {}",
                world.path.name(),
                runtime.as_str(),
                transport_flag(leg),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    walls.sort_unstable();
    row.turn = rtts(percentile(&walls, 50.0), rtt);
    row.turn_range = (
        walls.first().map_or(f64::NAN, |w| rtts(*w, rtt)),
        walls.last().map_or(f64::NAN, |w| rtts(*w, rtt)),
    );
    row.turn_conns = link.connections() as f64 / n.max(1) as f64;
    world.count(&link);
    Ok(())
}

/// The keep-alive floor on its own link: start-up, first call, warm calls;
/// then a fresh floor's whole turn (open, initialize, list, one call).
async fn floor_row(
    world: &World,
    rtt: Duration,
    calls: usize,
    leg: LegKind,
) -> std::io::Result<Row> {
    let mut row = Row {
        client: "floor (keep-alive, open leg)".into(),
        runtime: "hyper".into(),
        leg: transport_flag(leg).into(),
        ..Row::default()
    };
    let link = Link::start(world.relay.addr(), rtt).await?;
    let route = world.floor_route(&link)?;
    let client = format!("floor_link_{}", transport_flag(leg));
    let start = Instant::now();
    let mut floor = KeptFloor::open(&route, &world.session, &client, leg)
        .await
        .map_err(io_err)?;
    floor.initialize_and_list().await.map_err(io_err)?;
    row.startup = rtts(start.elapsed(), rtt);
    row.startup_conns = link.connections();
    row.first = rtts(floor.call().await.map_err(io_err)?, rtt);
    row.first_conns = link.connections() - row.startup_conns;
    let mut warm = Vec::with_capacity(calls);
    for _ in 0..calls {
        match floor.call().await {
            Ok(d) => warm.push(d),
            Err(e) => {
                row.errors += 1;
                eprintln!("floor {} {}: {e}", world.path.name(), transport_flag(leg));
            }
        }
    }
    row.warm_conns =
        (link.connections() - row.startup_conns - row.first_conns) as f64 / calls.max(1) as f64;
    warm.sort_unstable();
    row.warm_p50 = rtts(percentile(&warm, 50.0), rtt);
    row.warm_p90 = rtts(percentile(&warm, 90.0), rtt);
    drop(floor);
    world.count(&link);

    let turn_link = Link::start(world.relay.addr(), rtt).await?;
    let route = world.floor_route(&turn_link)?;
    let start = Instant::now();
    let mut fresh = KeptFloor::open(&route, &world.session, &format!("{client}_turn"), leg)
        .await
        .map_err(io_err)?;
    fresh.initialize_and_list().await.map_err(io_err)?;
    fresh.call().await.map_err(io_err)?;
    row.turn = rtts(start.elapsed(), rtt);
    row.turn_range = (row.turn, row.turn);
    row.turn_conns = turn_link.connections() as f64;
    world.count(&turn_link);
    Ok(row)
}

fn mark(value: f64, aim: f64) -> String {
    if value <= aim {
        format!("{value:.2}")
    } else {
        format!("**{value:.2}**")
    }
}

fn print_table(path: PathKind, rows: &[Row], opts: &LinkOpts) {
    println!(
        "### {} path ({}), RTT {} ms",
        path.name(),
        match path {
            PathKind::Plain => "HTTP; agent → link → relay",
            PathKind::Production =>
                "HTTPS with a test CA, through a CONNECT egress proxy; agent → proxy → link → relay",
        },
        opts.rtt.as_millis()
    );
    println!();
    println!(
        "| client | runtime | leg | start-up (aim ≤ {STARTUP_AIM}) | first call | warm call p50 (aim ≤ {}) | warm p90 | stale write refused, p50 of {REFUSALS} | the write after it, p50 | one-shot turn, median [min–max] of {} (aim ≤ {TURN_AIM}) | connections: start-up / first call / per warm call / per turn | errors |",
        path.warm_aim(),
        opts.turns
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let refusal = |v: f64| {
            if r.client == "bridge" {
                format!("{v:.2}")
            } else {
                "—".to_owned()
            }
        };
        println!(
            "| {} | {} | {} | {} | {:.2} | {} | {:.2} | {} | {} | {} [{:.1}–{:.1}] | {} / {} / {:.2} / {:.1} | {} |",
            r.client,
            r.runtime,
            r.leg,
            mark(r.startup, STARTUP_AIM),
            r.first,
            mark(r.warm_p50, path.warm_aim()),
            r.warm_p90,
            refusal(r.refusal_p50),
            refusal(r.after_refusal_p50),
            mark(r.turn, TURN_AIM),
            r.turn_range.0,
            r.turn_range.1,
            r.startup_conns,
            r.first_conns,
            r.warm_conns,
            r.turn_conns,
            r.errors
        );
    }
    println!();
}

/// The wall time of `human-plus --version`: what a process start costs
/// before any round trip.
async fn process_start(bin: &Path) -> Duration {
    let mut walls = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let ok = tokio::process::Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .is_ok_and(|s| s.success());
        if ok {
            walls.push(start.elapsed());
        }
    }
    walls.sort_unstable();
    percentile(&walls, 50.0)
}

/// Runs `compare link`: every path × runtime × leg, printing one table per
/// path. Must be called within a multi-threaded tokio runtime.
///
/// # Errors
/// When a relay, a page, the link, the proxy or the command cannot start.
pub async fn run(opts: &LinkOpts) -> std::io::Result<Vec<(PathKind, Vec<Row>)>> {
    if !opts.bin.is_file() {
        return Err(io_err(format!(
            "no human-plus binary at {}: build it with `cargo build --release -p human-plus-cli` (or pass --bin PATH)",
            opts.bin.display()
        )));
    }
    let spawn = process_start(&opts.bin).await;
    println!(
        "## Round trips across a link: RTT {} ms (one RTT per new connection, RTT/2 per chunk per direction); {} warm calls, {} one-shot turns per row",
        opts.rtt.as_millis(),
        opts.calls,
        opts.turns
    );
    println!();
    println!(
        "Every number is elapsed ÷ RTT. A process start (`human-plus --version`) takes {:.1} ms here ({:.2} RTT), counted in start-up and the turn. **Bold**: the aim is missed. The floor does only the minimum (one kept leg, kept POST connections; a call is one POST and its reply on the leg).",
        spawn.as_secs_f64() * 1e3,
        rtts(spawn, opts.rtt)
    );
    if !opts.cli_args.is_empty() {
        println!();
        println!("Extra command arguments: `{}`.", opts.cli_args.join(" "));
    }
    println!();
    let mut all = Vec::new();
    for (n, &path) in opts.paths.iter().enumerate() {
        let world = World::start(path, opts, n).await?;
        let mut rows = Vec::new();
        for &leg in &opts.legs {
            rows.push(floor_row(&world, opts.rtt, opts.calls, leg).await?);
        }
        for &runtime in &opts.runtimes {
            for &leg in &opts.legs {
                let mut row = bridge_row(&world, opts.rtt, opts.calls, runtime, leg).await?;
                turns(&world, opts.rtt, opts.turns, runtime, leg, &mut row).await?;
                eprintln!(
                    "{} {} {}: start-up {:.1}, warm p50 {:.2}, turn {:.1} RTT",
                    path.name(),
                    runtime.as_str(),
                    transport_flag(leg),
                    row.startup,
                    row.warm_p50,
                    row.turn
                );
                rows.push(row);
            }
        }
        print_table(path, &rows, opts);
        if let Some((tunnels, linked)) = world.cross_check() {
            let verdict = if tunnels == linked {
                "every connection went through the proxy"
            } else {
                "**they differ: some traffic bypassed the proxy or the link**"
            };
            println!(
                "Cross-check: the proxy opened {tunnels} tunnels for these rows, the links accepted {linked} connections: {verdict}."
            );
            println!();
        }
        world.shutdown().await;
        all.push((path, rows));
    }
    Ok(all)
}
