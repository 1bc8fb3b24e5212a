//! End-to-end plumbing: a relay and demo surfaces in a child process, the
//! three runtimes' managers behind one synchronous API (as the conformance
//! suite does it), and the floor: the same exchanges done by a bare hyper
//! client with no Human+ work.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use human_plus_any::{AgentSetup, build_agent};
use human_plus_core::{
    EgressPolicy, ManagerConfig, Participant, ReceiveLeg, SurfaceInvitation, TransportConfig,
    TrustPolicy,
};
use human_plus_relay::{DemoSurface, RelayServer};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// The tool every end-to-end call uses (a pinned read).
pub const TOOL: &str = "sheet_get_cell";

/// Its arguments.
#[must_use]
pub fn tool_args() -> Value {
    json!({"address": "B4"})
}

/// The session token every benchmark session is registered with.
pub const TOKEN: &str = "benchtoken0123456789abcdef";

/// What each demo surface lists on `tools/list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Listing {
    /// The demo surface's own handful of tools (the default).
    #[default]
    Demo,
    /// The demo surface's tools and, after them, the 200-tool listing the
    /// micro benchmarks admit ([`crate::data::listing`]; its
    /// `sheet_confirm_edit`, which the demo surface offers already, left
    /// out): about 190 KiB a page, 196 pinned tools.
    Large,
}

impl Listing {
    /// The flag `serve` and `scale-run` take for it (none for the demo's).
    #[must_use]
    pub fn flag(self) -> Option<&'static str> {
        match self {
            Listing::Demo => None,
            Listing::Large => Some("--large-listing"),
        }
    }

    /// The listing `args` ask for: [`Listing::Large`] when they hold its
    /// flag.
    #[must_use]
    pub fn from_args(args: &[String]) -> Listing {
        if args
            .iter()
            .any(|a| Some(a.as_str()) == Listing::Large.flag())
        {
            Listing::Large
        } else {
            Listing::Demo
        }
    }

    /// The tools a surface adds to its own for this listing.
    fn extra_tools(self, own: &[Value]) -> Vec<Value> {
        if self == Listing::Demo {
            return Vec::new();
        }
        let name = |t: &Value| t.get("name").and_then(Value::as_str).map(str::to_owned);
        let own: Vec<String> = own.iter().filter_map(name).collect();
        let (tools, _) = crate::data::listing();
        tools
            .get("tools")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter(|t| name(t).is_none_or(|n| !own.contains(&n)))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The flag `serve` takes for the time each page takes to answer:
/// `--reply-delay-ms MS` (the relay holds every answer a page posts that
/// long, so each page answers one message at a time, that slowly).
pub const REPLY_DELAY_FLAG: &str = "--reply-delay-ms";

/// The reply delay `args` ask for ([`REPLY_DELAY_FLAG`]).
#[must_use]
pub fn reply_delay_from_args(args: &[String]) -> Duration {
    args.iter()
        .position(|a| a == REPLY_DELAY_FLAG)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .map_or(Duration::ZERO, Duration::from_millis)
}

/// `serve`: a relay and `sessions` demo surfaces on a tokio runtime with
/// two workers, each listing `listing` and taking `reply_delay` to answer
/// each message; prints `{"port", "sessions", "pid"}` on one line, then
/// runs until its standard input closes.
///
/// # Panics
/// When the relay or a surface cannot start.
pub fn serve(sessions: usize, listing: Listing, reply_delay: Duration) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let (relay, surfaces, names) = rt.block_on(async {
        let relay = RelayServer::builder()
            .start()
            .await
            .unwrap_or_else(|e| panic!("relay: {e}"));
        let mut surfaces = Vec::new();
        let mut names = Vec::new();
        for i in 0..sessions {
            let name = format!("bench_{i:03}");
            let surface = DemoSurface::builder(relay.base_url(), &name, TOKEN)
                .cells([("A1", "alpha"), ("B2", "beta"), ("B4", "4")])
                .start()
                .await
                .unwrap_or_else(|e| panic!("surface: {e}"));
            // Before any agent is attached: the list_changed each posts
            // reaches no one.
            for tool in listing.extra_tools(&surface.tool_definitions()) {
                surface
                    .add_tool(tool)
                    .await
                    .unwrap_or_else(|e| panic!("add_tool: {e}"));
            }
            if !reply_delay.is_zero() {
                relay.set_faults(
                    &name,
                    human_plus_relay::Faults::new()
                        .delay(human_plus_relay::Leg::Outbox, reply_delay),
                );
            }
            surfaces.push(surface);
            names.push(name);
        }
        (relay, surfaces, names)
    });
    let line = json!({
        "port": relay.addr().port(),
        "sessions": names,
        "pid": std::process::id(),
    });
    println!("{line}");
    let _ = std::io::stdout().flush();
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {
        sink.clear();
    }
    rt.block_on(async {
        for s in surfaces {
            s.shutdown().await;
        }
        relay.shutdown().await;
    });
}

/// A manager configuration reaching the local relay on `port` directly, on
/// `leg`, under `trust`, cold (no warm leg): what a worker process with no
/// [`Server`] of its own builds.
#[must_use]
pub fn config_for(port: u16, leg: ReceiveLeg, trust: TrustPolicy) -> ManagerConfig {
    let mut transport = TransportConfig::default().receive_leg(leg);
    transport.warm = false;
    ManagerConfig::new(
        EgressPolicy::new(["127.0.0.1"])
            .allow_ports([port])
            .allow_unverified_egress(true),
        trust,
    )
    .transport(transport)
}

/// A relay and its surfaces in a child process (so their memory and CPU
/// are not the client's).
pub struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The relay's port on 127.0.0.1.
    pub port: u16,
    /// The session ids, one demo surface each.
    pub sessions: Vec<String>,
    /// The child's process id.
    pub pid: u32,
    /// What each surface lists.
    pub listing: Listing,
}

impl Server {
    /// Starts `compare serve <sessions>` from this very executable.
    ///
    /// # Panics
    /// When the child cannot start or does not say where it listens.
    #[must_use]
    pub fn start(sessions: usize) -> Server {
        Server::start_listing(sessions, Listing::Demo)
    }

    /// [`Server::start`] with surfaces that list `listing`.
    ///
    /// # Panics
    /// When the child cannot start or does not say where it listens.
    #[must_use]
    pub fn start_listing(sessions: usize, listing: Listing) -> Server {
        Server::start_with(sessions, listing, Duration::ZERO)
    }

    /// [`Server::start_listing`] with pages that take `reply_delay` to
    /// answer each message.
    ///
    /// # Panics
    /// When the child cannot start or does not say where it listens.
    #[must_use]
    pub fn start_with(sessions: usize, listing: Listing, reply_delay: Duration) -> Server {
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
        let delay = reply_delay.as_millis().to_string();
        let mut child = Command::new(exe)
            .args(["serve", &sessions.to_string()])
            .args(listing.flag())
            .args([REPLY_DELAY_FLAG, delay.as_str()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn serve: {e}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("serve: {e}"));
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("serve said {line:?}: {e}"));
        let port = v
            .get("port")
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or_else(|| panic!("no port"));
        let sessions = v
            .get("sessions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let pid = v
            .get("pid")
            .and_then(Value::as_u64)
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or_default();
        Server {
            stdin: child.stdin.take(),
            child,
            port,
            sessions,
            pid,
            listing,
        }
    }

    /// The relay's base URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The invitation to session `i`.
    ///
    /// # Panics
    /// When the invitation is refused (it is not).
    #[must_use]
    pub fn invitation(&self, i: usize) -> SurfaceInvitation {
        let session = &self.sessions[i % self.sessions.len()];
        SurfaceInvitation::new_insecure_loopback(self.url(), session, TOKEN, "sheet:one", "Demo")
            .unwrap_or_else(|e| panic!("invitation: {e}"))
    }

    /// The egress policy reaching this relay directly.
    #[must_use]
    pub fn egress(&self) -> EgressPolicy {
        EgressPolicy::new(["127.0.0.1"])
            .allow_ports([self.port])
            .allow_unverified_egress(true)
    }

    /// A manager configuration for `leg` under `trust`.
    #[must_use]
    pub fn config(&self, leg: ReceiveLeg, trust: TrustPolicy, warm: bool) -> ManagerConfig {
        let mut transport = TransportConfig::default().receive_leg(leg);
        transport.warm = warm;
        ManagerConfig::new(self.egress(), trust).transport(transport)
    }

    /// The child's CPU time so far (user + system).
    #[must_use]
    pub fn cpu(&self) -> Duration {
        process_cpu(&format!("/proc/{}/stat", self.pid))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// User + system CPU time from a `/proc/<pid>/stat` file (Linux's fixed
/// USER_HZ of 100).
#[must_use]
pub fn process_cpu(path: &str) -> Duration {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let after = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command: state is field 3, utime 14, stime 15 (1-based).
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// A line of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`).
#[must_use]
pub fn status_kib(key: &str) -> u64 {
    proc_status_kib("self", key)
}

/// A line of `/proc/<pid>/status` in KiB (`pid` a process id or `self`).
#[must_use]
pub fn proc_status_kib(pid: &str, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .trim_start_matches(':')
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

pub use human_plus_any::LegKind;

pub use human_plus_any::{Agent as Client, RuntimeKind};

/// A client of `kind` over a manager built from `config` (tokio: a
/// multi-threaded runtime with two workers, as the conformance suite runs
/// it).
///
/// # Panics
/// When the runtime cannot be built.
#[must_use]
pub fn client(kind: RuntimeKind, config: ManagerConfig) -> Box<dyn Client> {
    let mut setup = AgentSetup::new(config);
    setup.tokio_workers = 2;
    build_agent(kind, setup).unwrap_or_else(|e| panic!("runtime: {e}"))
}

/// The participant every benchmark agent joins as.
#[must_use]
pub fn participant() -> Participant {
    Participant::new("agent-bench", "Bench", "#7c3aed")
}

/// The pinned policy: the tools the benchmarks use, with `TOOL` pinned to
/// the digest the surface's listing has (read once through the tokio
/// manager under an unpinned policy). With [`Listing::Large`], also the
/// large listing's own allowlist and 196 pins, checked once: the surface's
/// listing is admitted whole under it.
///
/// # Panics
/// When the discovery fails, or the large listing is not admitted.
#[must_use]
pub fn pinned_policy(server: &Server) -> TrustPolicy {
    let own = demo_pinned_policy(server);
    if server.listing == Listing::Demo {
        return own;
    }
    let (_, large) = crate::data::listing();
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut allow: Vec<String> = DEMO_NAMES.iter().map(|&n| n.to_owned()).collect();
    allow.extend(strings(large.get("allow")));
    let mut pins: Vec<(String, String)> = own
        .pins()
        .iter()
        .map(|(n, d)| (n.clone(), d.clone()))
        .collect();
    pins.extend(
        large
            .get("pins")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(n, d)| Some((n.clone(), d.as_str()?.to_owned()))),
    );
    let policy = TrustPolicy::allowing(allow, pins);
    let probe = client(
        RuntimeKind::Tokio,
        server.config(ReceiveLeg::Sse, policy.clone(), false),
    );
    let att = probe
        .attach("pin-check", server.invitation(0), participant())
        .unwrap_or_else(|e| panic!("attach: {e}"));
    let admitted = probe
        .tools("pin-check", att.id())
        .unwrap_or_else(|e| panic!("tools: {e}"))
        .tools
        .len();
    assert!(
        admitted >= 196,
        "the large listing admitted {admitted} tools, not its 196 pinned ones and the demo's"
    );
    policy
}

/// The tools the benchmarks allow on the demo surface.
const DEMO_NAMES: [&str; 3] = ["sheet_get_cell", "sheet_get_range", "sheet_describe"];

/// The demo surface's own part of [`pinned_policy`].
fn demo_pinned_policy(server: &Server) -> TrustPolicy {
    let names = DEMO_NAMES;
    let probe = client(
        RuntimeKind::Tokio,
        server.config(
            ReceiveLeg::Sse,
            TrustPolicy::allowing(names, human_plus_core::NO_PINS),
            false,
        ),
    );
    let att = probe
        .attach("pin-probe", server.invitation(0), participant())
        .unwrap_or_else(|e| panic!("attach: {e}"));
    let found = probe
        .tools("pin-probe", att.id())
        .unwrap_or_else(|e| panic!("tools: {e}"));
    let digest = found
        .tools
        .iter()
        .find(|t| t.name() == TOOL)
        .map(human_plus_core::ToolDefinition::digest)
        .unwrap_or_else(|| panic!("{TOOL} not offered"));
    TrustPolicy::allowing(names, [(TOOL, digest)])
}

// ---------------------------------------------------------------------------
// The floor.

/// A bare hyper HTTP/1.1 client doing the relay exchanges with no Human+
/// work: no egress vetting, no trust, no SSE decoder (a substring search
/// for the reply's id), no correlation beyond that, no framing. Like the
/// runtimes, it opens one connection per request.
pub struct Floor {
    port: u16,
    session: String,
    client: String,
    next: AtomicU64,
    /// The revision pinned on `tools/call` (read from the first reply).
    pub revision: std::sync::Mutex<String>,
}

/// Why a floor exchange failed.
pub type FloorError = Box<dyn std::error::Error + Send + Sync>;

async fn connect(port: u16) -> Result<SendRequest<Full<Bytes>>, FloorError> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Where `needle` (ASCII) first occurs in `hay`: std's vectorised
/// substring search over the UTF-8 prefix of `hay` (a chunk may end inside
/// a character).
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let text = match std::str::from_utf8(hay) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(hay.get(..e.valid_up_to())?).ok()?,
    };
    text.find(std::str::from_utf8(needle).ok()?)
}

impl Floor {
    /// A floor client of session `session` with client id `client`.
    #[must_use]
    pub fn new(port: u16, session: &str, client: &str) -> Floor {
        Floor {
            port,
            session: session.to_owned(),
            client: client.to_owned(),
            next: AtomicU64::new(1),
            revision: std::sync::Mutex::new(String::new()),
        }
    }

    fn path(&self, route: &str, extra: &str) -> String {
        format!(
            "/{}/{route}?token={TOKEN}&client={}{extra}",
            self.session, self.client
        )
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn frame(&self, method: &str, params: Option<&Value>) -> (String, Vec<u8>) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-floor-{n}", self.client);
        let frame = match params {
            Some(p) => {
                format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"{method}","params":{p}}}"#)
            }
            None => format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"{method}"}}"#),
        };
        (id, frame.into_bytes())
    }

    fn post(&self, frame: Vec<u8>) -> tokio::task::JoinHandle<()> {
        let port = self.port;
        let path = self.path("inbox", "");
        let host = self.host();
        tokio::spawn(async move {
            let Ok(mut sender) = connect(port).await else {
                return;
            };
            let len = frame.len();
            let Ok(req) = Request::post(path)
                .header("host", host)
                .header("content-type", "application/json")
                .header("content-length", len)
                .body(Full::new(Bytes::from(frame)))
            else {
                return;
            };
            if let Ok(resp) = sender.send_request(req).await {
                let _ = resp.into_body().collect().await;
            }
        })
    }

    async fn get(
        &self,
        path: String,
        accept: &str,
    ) -> Result<hyper::Response<hyper::body::Incoming>, FloorError> {
        let mut sender = connect(self.port).await?;
        let req = Request::get(path)
            .header("host", self.host())
            .header("accept", accept)
            .body(Full::new(Bytes::new()))?;
        let resp = sender.send_request(req).await?;
        if resp.status() != 200 {
            return Err(format!("GET answered {}", resp.status()).into());
        }
        Ok(resp)
    }

    /// One exchange over SSE: subscribe, POST the frame once the stream is
    /// open, read until the event carrying the id. Returns the event's
    /// bytes.
    ///
    /// # Errors
    /// Connection failures, a non-200 status, the stream ending early.
    pub async fn exchange_sse(
        &self,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Vec<u8>, FloorError> {
        let (id, frame) = self.frame(method, params);
        let needle = format!("\"id\":\"{id}\"").into_bytes();
        let resp = self
            .get(
                self.path("events", "&direction=outbound"),
                "text/event-stream",
            )
            .await?;
        let post = self.post(frame);
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        let mut scanned: usize = 0;
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            buf.extend_from_slice(&data);
            if let Some(at) = find(
                buf.get(scanned.saturating_sub(needle.len())..)
                    .unwrap_or_default(),
                &needle,
            ) {
                let start = scanned.saturating_sub(needle.len()) + at;
                if let Some(end) = find(buf.get(start..).unwrap_or_default(), b"\n\n") {
                    post.abort();
                    return Ok(buf.get(..start + end).unwrap_or_default().to_vec());
                }
            } else {
                scanned = buf.len();
            }
        }
        post.abort();
        Err("the stream ended before the reply".into())
    }

    /// One exchange over the Fancy long-poll: subscribe with `wait=0`,
    /// POST, poll (20 s) until an answer carries the id.
    ///
    /// # Errors
    /// Connection failures, a non-200 status.
    pub async fn exchange_poll(
        &self,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Vec<u8>, FloorError> {
        let (id, frame) = self.frame(method, params);
        let needle = format!("\\\"id\\\":\\\"{id}\\\"").into_bytes();
        let first = self
            .get(
                self.path("poll", "&direction=outbound&wait=0"),
                "application/json",
            )
            .await?
            .into_body()
            .collect()
            .await?
            .to_bytes();
        let key = b"\"subscriber\":\"";
        let subscriber = find(&first, key)
            .and_then(|at| {
                let rest = first.get(at + key.len()..)?;
                let end = rest.iter().position(|&b| b == b'"')?;
                Some(String::from_utf8_lossy(rest.get(..end)?).into_owned())
            })
            .ok_or("no subscriber")?;
        let post = self.post(frame);
        loop {
            let body = self
                .get(
                    self.path(
                        "poll",
                        &format!("&direction=outbound&wait=20000&subscriber={subscriber}"),
                    ),
                    "application/json",
                )
                .await?
                .into_body()
                .collect()
                .await?
                .to_bytes();
            if find(&body, &needle).is_some() {
                post.abort();
                return Ok(body.to_vec());
            }
        }
    }

    /// One exchange over `leg`.
    ///
    /// # Errors
    /// As the leg's exchange.
    pub async fn exchange(
        &self,
        leg: LegKind,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Vec<u8>, FloorError> {
        match leg {
            LegKind::Sse => self.exchange_sse(method, params).await,
            LegKind::Poll => self.exchange_poll(method, params).await,
        }
    }

    /// The params of the pinned `tools/call`.
    #[must_use]
    pub fn call_params(&self) -> Value {
        let revision = self.revision.lock().map(|r| r.clone()).unwrap_or_default();
        if revision.is_empty() {
            json!({"name": TOOL, "arguments": tool_args()})
        } else {
            json!({"name": TOOL, "arguments": tool_args(), "_meta": {"revision": revision}})
        }
    }

    /// What a Human+ `call` does on the wire, minus Human+: a `tools/list`
    /// exchange, then the pinned `tools/call` exchange. Returns the two
    /// exchanges' latencies. The first call learns the revision to pin.
    ///
    /// # Errors
    /// As the exchanges.
    pub async fn operation(&self, leg: LegKind) -> Result<(Duration, Duration), FloorError> {
        let t0 = std::time::Instant::now();
        self.exchange(leg, "tools/list", None).await?;
        let t1 = std::time::Instant::now();
        let params = self.call_params();
        let reply = self.exchange(leg, "tools/call", Some(&params)).await?;
        let t2 = std::time::Instant::now();
        let needs_revision = self.revision.lock().map(|r| r.is_empty()).unwrap_or(false);
        if needs_revision {
            let key: &[u8] = match leg {
                LegKind::Sse => b"\"revision\":\"",
                LegKind::Poll => b"\\\"revision\\\":\\\"",
            };
            if let Some(at) = find(&reply, key) {
                let rest = reply.get(at + key.len()..).unwrap_or_default();
                let end = rest
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\')
                    .unwrap_or(rest.len());
                if let Ok(mut r) = self.revision.lock() {
                    *r = String::from_utf8_lossy(rest.get(..end).unwrap_or_default()).into_owned();
                }
            }
        }
        Ok((t1 - t0, t2 - t1))
    }
}

#[cfg(test)]
mod listing_tests {
    use super::*;

    #[test]
    fn the_large_listing_adds_the_micro_tools_but_not_the_surface_own() {
        assert_eq!(Listing::from_args(&[]), Listing::Demo);
        let args = [
            "serve".to_owned(),
            "8".to_owned(),
            "--large-listing".to_owned(),
        ];
        assert_eq!(Listing::from_args(&args), Listing::Large);
        let own = vec![json!({"name": "sheet_confirm_edit"}), json!({"name": TOOL})];
        assert!(Listing::Demo.extra_tools(&own).is_empty());
        let extra = Listing::Large.extra_tools(&own);
        assert_eq!(extra.len(), crate::data::TOOL_COUNT - 1);
        assert!(
            extra
                .iter()
                .all(|t| t.get("name").and_then(Value::as_str) != Some("sheet_confirm_edit"))
        );
    }
}
