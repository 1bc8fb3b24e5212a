//! # The Human+ conformance suite
//!
//! One suite, written once, run against every runtime (`tokio`, `blocking`,
//! `async-std`) and every receive leg (SSE, the Fancy long-poll), over
//! loopback HTTP and over TLS, against [`human_plus_relay::RelayServer`] and
//! [`human_plus_relay::DemoSurface`]. The scenarios are plain functions
//! generic over a [`Runtime`]; `tests/conformance.rs` instantiates them.
//!
//! Every runtime exposes the same manager API; [`Client`] is that API made
//! synchronous so one scenario drives all three.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod channel;
pub mod echo_page;
pub mod hostile;
pub mod kept;
#[cfg(feature = "redis")]
pub mod replica;
pub mod scenarios;
pub mod sockudo;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use human_plus_any::{AgentSetup, RuntimeKind, build_agent};
use human_plus_core::{
    EgressPolicy, Entropy, ManagerConfig, ReceiveLeg, SurfaceInvitation, TransportConfig,
    TrustPolicy,
};
use human_plus_relay::{
    DemoSurface, Faults, GeneratedCert, RelayHandle, RelayServer, RevisionMode, SurfaceLeg,
    TlsConfig,
};
use human_plus_runtime::{OsEntropy, TlsRoots};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The manager API of every runtime, synchronously: the `human-plus-any`
/// facade.
pub use human_plus_any::Agent as Client;

/// What a client is built from.
#[derive(Clone)]
pub struct Setup {
    /// The manager configuration.
    pub config: ManagerConfig,
    /// The TLS roots.
    pub roots: TlsRoots,
    /// Names the test resolver answers (empty: the system resolver).
    pub hosts: Vec<(String, Vec<IpAddr>)>,
}

/// A runtime under test.
pub trait Runtime {
    /// Its name.
    const NAME: &'static str = Self::KIND.as_str();
    /// Which runtime it is.
    const KIND: RuntimeKind;
    /// A client over a manager built from `setup` (tokio: a multi-threaded
    /// runtime with two workers).
    fn client(setup: Setup) -> Box<dyn Client> {
        let mut agent = AgentSetup::new(setup.config);
        agent.roots = setup.roots;
        agent.hosts = setup.hosts;
        agent.tokio_workers = 2;
        build_agent(Self::KIND, agent).unwrap()
    }
}

/// The tokio runtime.
pub struct Tokio;

impl Runtime for Tokio {
    const KIND: RuntimeKind = RuntimeKind::Tokio;
}

/// The blocking runtime.
pub struct Blocking;

impl Runtime for Blocking {
    const KIND: RuntimeKind = RuntimeKind::Blocking;
}

/// The async-std runtime (driven by async-io's executor here; its own
/// tests run it under async-std's and smol's executors).
pub struct AsyncStd;

impl Runtime for AsyncStd {
    const KIND: RuntimeKind = RuntimeKind::AsyncStd;
}

/// How the suite's environment is set up.
#[derive(Debug, Clone)]
pub struct EnvOptions {
    /// Serve the relay over TLS (at `relay.test`, resolved by the test
    /// resolver to 127.0.0.1).
    pub tls: bool,
    /// The page's receive leg.
    pub surface_leg: SurfaceLeg,
    /// How the surface treats revisions.
    pub revisions: RevisionMode,
    /// Whether the surface offers a change feed.
    pub change_feed: bool,
    /// Whether the surface answers a read whatever its pin (the seeds'
    /// surface) instead of refusing a stale one.
    pub stale_reads: bool,
    /// Whether a stale refusal names the current revision.
    pub current_in_refusal: bool,
    /// How long the relay keeps an idle kept connection open (Node's 5 s
    /// by default).
    pub keep_alive_timeout: Duration,
    /// The versions the surface's `initialize` answers with (empty: always
    /// 2025-06-18), as MicroMcpServer's `protocolVersions`.
    pub protocol_versions: Vec<String>,
    /// What the surface posts instead of its replies (a hostile surface).
    pub rewrite: Option<human_plus_relay::Rewrite>,
}

impl Default for EnvOptions {
    fn default() -> Self {
        EnvOptions {
            tls: false,
            surface_leg: SurfaceLeg::Sse,
            revisions: RevisionMode::Enforced,
            change_feed: true,
            stale_reads: false,
            current_in_refusal: true,
            keep_alive_timeout: human_plus_relay::DEFAULT_KEEP_ALIVE_TIMEOUT,
            protocol_versions: Vec::new(),
            rewrite: None,
        }
    }
}

/// A relay and a demo surface on a background tokio runtime.
pub struct Env {
    rt: tokio::runtime::Runtime,
    relay: Option<RelayHandle>,
    surface: Option<DemoSurface>,
    /// The generated certificate, with TLS.
    pub cert: Option<GeneratedCert>,
    /// The session id.
    pub session: String,
    /// The session token (unique per environment, so leaks can be searched
    /// for).
    pub token: String,
    /// The relay's port.
    pub port: u16,
    /// The options.
    pub options: EnvOptions,
}

/// The name the TLS relay is reached at.
pub const RELAY_HOST: &str = "relay.test";

/// A fresh random hex string.
#[must_use]
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    OsEntropy.fill_bytes(&mut buf);
    human_plus_core::hex(&buf)
}

impl Env {
    /// Starts a relay and a surface with the default options.
    #[must_use]
    pub fn start() -> Env {
        Env::with(EnvOptions::default())
    }

    /// Starts a relay and a surface.
    #[must_use]
    pub fn with(options: EnvOptions) -> Env {
        watch();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let session = format!("conf_{}", random_hex(6));
        let token = format!("tok{}", random_hex(16));
        let (relay, cert) = rt.block_on(async {
            if options.tls {
                let (tls, cert) = TlsConfig::generate_for(&[RELAY_HOST, "127.0.0.1"]).unwrap();
                (
                    RelayServer::builder()
                        .tls(tls)
                        .keep_alive_timeout(options.keep_alive_timeout)
                        .start()
                        .await
                        .unwrap(),
                    Some(cert),
                )
            } else {
                (
                    RelayServer::builder()
                        .keep_alive_timeout(options.keep_alive_timeout)
                        .start()
                        .await
                        .unwrap(),
                    None,
                )
            }
        });
        let port = relay.addr().port();
        let mut b = DemoSurface::builder(relay.base_url(), &session, &token)
            .leg(options.surface_leg)
            .revisions(options.revisions)
            .change_feed(options.change_feed)
            .stale_reads(options.stale_reads)
            .current_in_refusal(options.current_in_refusal)
            .protocol_versions(options.protocol_versions.clone())
            .cells([("A1", "alpha"), ("B2", "beta"), ("B4", "4")]);
        if let Some(cert) = &cert {
            b = b.tls_roots([cert.ca_der().clone()]);
        }
        if let Some(rewrite) = &options.rewrite {
            b = b.rewrite(rewrite.clone());
        }
        let surface = rt.block_on(b.start()).unwrap();
        Env {
            rt,
            relay: Some(relay),
            surface: Some(surface),
            cert,
            session,
            token,
            port,
            options,
        }
    }

    /// The relay.
    #[must_use]
    pub fn relay(&self) -> &RelayHandle {
        self.relay.as_ref().unwrap()
    }

    /// The surface.
    #[must_use]
    pub fn surface(&self) -> &DemoSurface {
        self.surface.as_ref().unwrap()
    }

    /// Runs a future on the environment's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Injects faults into this session.
    pub fn faults(&self, faults: Faults) {
        self.relay().set_faults(&self.session, faults);
    }

    /// The relay's base URL as clients use it.
    #[must_use]
    pub fn client_url(&self) -> String {
        if self.options.tls {
            format!("https://{RELAY_HOST}:{}", self.port)
        } else {
            format!("http://127.0.0.1:{}", self.port)
        }
    }

    /// The invitation for this session.
    #[must_use]
    pub fn invitation(&self) -> SurfaceInvitation {
        self.invitation_with_token(&self.token)
    }

    /// An invitation with another token.
    #[must_use]
    pub fn invitation_with_token(&self, token: &str) -> SurfaceInvitation {
        if self.options.tls {
            SurfaceInvitation::new(self.client_url(), &self.session, token, "sheet:one", "Demo")
                .unwrap()
        } else {
            SurfaceInvitation::new_insecure_loopback(
                self.client_url(),
                &self.session,
                token,
                "sheet:one",
                "Demo",
            )
            .unwrap()
        }
    }

    /// The egress policy that reaches this relay directly.
    #[must_use]
    pub fn egress(&self) -> EgressPolicy {
        if self.options.tls {
            EgressPolicy::new([RELAY_HOST])
                .allow_ports([self.port])
                .allow_unverified_egress(true)
                .allow_addresses(["127.0.0.1/32".parse().unwrap()])
        } else {
            EgressPolicy::new(["127.0.0.1"])
                .allow_ports([self.port])
                .allow_unverified_egress(true)
        }
    }

    /// A setup for `leg` with `trust`.
    #[must_use]
    pub fn setup(&self, leg: ReceiveLeg, trust: TrustPolicy) -> Setup {
        let config = ManagerConfig::new(self.egress(), trust)
            .transport(TransportConfig::default().receive_leg(leg));
        self.setup_with(config)
    }

    /// A setup with a whole configuration.
    #[must_use]
    pub fn setup_with(&self, config: ManagerConfig) -> Setup {
        let (roots, hosts) = match &self.cert {
            Some(cert) => (
                TlsRoots::only([cert.ca_der().clone()]),
                vec![(RELAY_HOST.to_owned(), vec!["127.0.0.1".parse().unwrap()])],
            ),
            None => (TlsRoots::webpki(), Vec::new()),
        };
        Setup {
            config,
            roots,
            hosts,
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let surface = self.surface.take();
        let relay = self.relay.take();
        self.rt.block_on(async {
            if let Some(s) = surface {
                s.shutdown().await;
            }
            if let Some(r) = relay {
                r.shutdown().await;
            }
        });
    }
}

/// A TCP listener that counts the connections it accepts: the target of
/// hostile invitations, which must never be reached.
pub struct Trap {
    /// Its port on 127.0.0.1.
    pub port: u16,
    accepted: Arc<AtomicUsize>,
    _rt: tokio::runtime::Runtime,
}

impl Trap {
    /// Starts a trap.
    #[must_use]
    pub fn start() -> Trap {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepted);
        let rt2 = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let std_listener = listener.into_std().unwrap();
        rt2.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            while let Ok((_sock, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        });
        drop(rt);
        Trap {
            port,
            accepted,
            _rt: rt2,
        }
    }

    /// How many connections reached it.
    #[must_use]
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// An HTTP CONNECT proxy written for the tests: it records every CONNECT
/// target and head, splices bytes, and keeps what went from the client
/// into the tunnel (the requests that reach the relay). Started with
/// [`ConnectProxy::requiring`], it answers 407 unless the CONNECT carries
/// the right `Proxy-Authorization: Basic`.
pub struct ConnectProxy {
    /// Its port on 127.0.0.1.
    pub port: u16,
    targets: Arc<Mutex<Vec<String>>>,
    heads: Arc<Mutex<Vec<String>>>,
    tunneled: Arc<Mutex<Vec<u8>>>,
    expected: Option<String>,
    _rt: tokio::runtime::Runtime,
}

impl ConnectProxy {
    /// Starts a proxy that asks for no credentials.
    #[must_use]
    pub fn start() -> ConnectProxy {
        ConnectProxy::serve(None)
    }

    /// Starts a proxy that tunnels only a CONNECT carrying
    /// `Proxy-Authorization: Basic` of `user:password`, and answers any
    /// other with `407` and `Proxy-Authenticate: Basic`.
    #[must_use]
    pub fn requiring(user: &str, password: &str) -> ConnectProxy {
        let pair = format!("{user}:{password}");
        ConnectProxy::serve(Some(format!("Basic {}", base64(pair.as_bytes()))))
    }

    fn serve(expected: Option<String>) -> ConnectProxy {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let targets = Arc::new(Mutex::new(Vec::new()));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let tunneled = Arc::new(Mutex::new(Vec::new()));
        let (seen, seen_heads, seen_bytes) = (
            Arc::clone(&targets),
            Arc::clone(&heads),
            Arc::clone(&tunneled),
        );
        let wanted = expected.clone();
        rt.spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let seen = Arc::clone(&seen);
                let seen_heads = Arc::clone(&seen_heads);
                let seen_bytes = Arc::clone(&seen_bytes);
                let wanted = wanted.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                        if client.read_exact(&mut byte).await.is_err() {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    seen_heads.lock().unwrap().push(text.clone());
                    let mut words = text.split_whitespace();
                    if words.next() != Some("CONNECT") {
                        let _ = client
                            .write_all(
                                b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n",
                            )
                            .await;
                        return;
                    }
                    let target = words.next().unwrap_or_default().to_owned();
                    seen.lock().unwrap().push(target.clone());
                    if let Some(wanted) = &wanted {
                        let given: Vec<&str> = text
                            .lines()
                            .filter_map(|l| {
                                let (name, value) = l.split_once(':')?;
                                name.eq_ignore_ascii_case("proxy-authorization")
                                    .then_some(value.trim())
                            })
                            .collect();
                        if given != [wanted.as_str()] {
                            let _ = client
                                .write_all(
                                    b"HTTP/1.1 407 Proxy Authentication Required\r\n\
                                      Proxy-Authenticate: Basic realm=\"human-plus-test\"\r\n\
                                      content-length: 0\r\n\r\n",
                                )
                                .await;
                            return;
                        }
                    }
                    let Ok(upstream) = tokio::net::TcpStream::connect(&target).await else {
                        let _ = client
                            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
                            .await;
                        return;
                    };
                    if client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .is_err()
                    {
                        return;
                    }
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_upstream, mut to_upstream) = upstream.into_split();
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut from_upstream, &mut to_client).await;
                        let _ = to_client.shutdown().await;
                    });
                    let mut buf = [0u8; 8192];
                    loop {
                        match from_client.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                {
                                    let mut kept = seen_bytes.lock().unwrap();
                                    if kept.len() < (4 << 20) {
                                        kept.extend_from_slice(&buf[..n]);
                                    }
                                }
                                if to_upstream.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = to_upstream.shutdown().await;
                });
            }
        });
        ConnectProxy {
            port,
            targets,
            heads,
            tunneled,
            expected,
            _rt: rt,
        }
    }

    /// The CONNECT targets asked for, in order.
    #[must_use]
    pub fn targets(&self) -> Vec<String> {
        self.targets.lock().unwrap().clone()
    }

    /// Every request head the proxy read, in order.
    #[must_use]
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    /// Every byte a client sent into a tunnel (what reached the relay),
    /// up to 4 MiB.
    #[must_use]
    pub fn tunneled(&self) -> Vec<u8> {
        self.tunneled.lock().unwrap().clone()
    }

    /// The `Proxy-Authorization` value it accepts, for a proxy started
    /// with [`ConnectProxy::requiring`].
    #[must_use]
    pub fn expected_authorization(&self) -> Option<&str> {
        self.expected.as_deref()
    }

    /// Its URL, for [`EgressPolicy::egress_proxy`].
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its URL with `user:password` in it, percent-encoded.
    #[must_use]
    pub fn url_with(&self, user: &str, password: &str) -> String {
        let encode = |s: &str| {
            s.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
        };
        format!(
            "http://{}:{}@127.0.0.1:{}",
            encode(user),
            encode(password),
            self.port
        )
    }
}

/// Standard base64 with padding, written here so the proxy does not check
/// the core with the core's own encoder.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Everything every runtime logged through `tracing`, at TRACE, across the
/// whole test process.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

static CAPTURED: OnceLock<Captured> = OnceLock::new();

/// Installs the capturing subscriber (once per process).
fn watch() -> &'static Captured {
    CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        captured
    })
}

/// Whether anything logged so far contains `needle`.
#[must_use]
pub fn logged(needle: &str) -> bool {
    let bytes = watch().0.lock().map(|b| b.clone()).unwrap_or_default();
    String::from_utf8_lossy(&bytes).contains(needle)
}

/// How many bytes have been logged so far (to show logging is on).
#[must_use]
pub fn logged_len() -> usize {
    watch().0.lock().map(|b| b.len()).unwrap_or_default()
}

/// Asserts that neither the error's `Display` nor its `Debug` contains
/// `token`.
pub fn assert_no_token<E: std::fmt::Debug + std::fmt::Display>(e: &E, token: &str) {
    assert!(!e.to_string().contains(token), "token in Display: {e}");
    assert!(!format!("{e:?}").contains(token), "token in Debug");
}

pub use human_plus_any::LegKind;

/// Cells of a sheet, as a map, for assertions.
#[must_use]
pub fn cells(env: &Env) -> BTreeMap<String, String> {
    env.surface().cells()
}

/// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The guide's examples (`docs/guide/`, where the README's other examples
/// went), compiled as doc tests: one item per page.
#[cfg(doctest)]
pub mod guide_doctests {
    #[doc = include_str!("../../docs/guide/README.md")]
    pub struct GuideIndex;
    #[doc = include_str!("../../docs/guide/mcp-client.md")]
    pub struct GuideMcpClient;
    #[doc = include_str!("../../docs/guide/agent-service.md")]
    pub struct GuideAgentService;
    #[doc = include_str!("../../docs/guide/queue-worker.md")]
    pub struct GuideQueueWorker;
    #[doc = include_str!("../../docs/guide/persons-page.md")]
    pub struct GuidePersonsPage;
    #[doc = include_str!("../../docs/guide/surface-contract.md")]
    pub struct GuideSurfaceContract;
    #[doc = include_str!("../../docs/guide/transports.md")]
    pub struct GuideTransports;
    #[doc = include_str!("../../docs/guide/operations.md")]
    pub struct GuideOperations;
    #[doc = include_str!("../../docs/guide/security.md")]
    pub struct GuideSecurity;
    #[doc = include_str!("../../docs/guide/performance.md")]
    pub struct GuidePerformance;
}

/// Prints the captured log lines holding any of `needles` (debugging aid:
/// set `HP_DUMP_LOG=1`).
pub fn dump_log(needles: &[&str]) {
    if std::env::var_os("HP_DUMP_LOG").is_none() {
        return;
    }
    let bytes = watch().0.lock().map(|b| b.clone()).unwrap_or_default();
    for line in String::from_utf8_lossy(&bytes).lines() {
        if needles.iter().any(|n| line.contains(n)) {
            eprintln!("{line}");
        }
    }
}
