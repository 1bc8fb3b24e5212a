//! The world the blocking runtime's tests run against: the relay and the
//! demo surface on a tokio runtime of their own (its worker threads serve
//! them in the background), and managers built for them.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use human_plus_blocking::{
    EgressPolicy, HumanPlus, ManagerConfig, Participant, ReceiveLeg, StaticResolver,
    SurfaceInvitation, TlsRoots, TransportConfig, TrustPolicy,
};
use human_plus_relay::{CertificateDer, DemoSurface, Faults, RelayHandle, RelayServer, TlsConfig};

/// A token distinctive enough to be searched for in every output.
pub const TOKEN: &str = "S3cr3tT0k3n-9f8e7d6c5b4a3928";
pub const OWNER: &str = "session:worker-1";
/// Generous: the machine may be loaded.
pub const SOON: Duration = Duration::from_secs(20);

/// The sheet's tools an agent is trusted with in these tests.
pub const TOOLS: [&str; 6] = [
    "sheet_describe",
    "sheet_get_cell",
    "sheet_get_range",
    "sheet_set_cell",
    "changes_since",
    // Reserved: withheld whatever the allowlist says.
    "sheet_confirm_edit",
];

pub fn trust() -> TrustPolicy {
    TrustPolicy::allowing(TOOLS, human_plus_blocking::core::NO_PINS)
}

pub fn participant() -> Participant {
    Participant::new("agent-1", "Assistant", "#7c3aed")
}

/// Both receive legs the relay offers.
pub fn legs() -> [ReceiveLeg; 2] {
    [
        ReceiveLeg::Sse,
        ReceiveLeg::FancyPoll {
            wait: Duration::from_secs(5),
        },
    ]
}

pub struct World {
    pub rt: tokio::runtime::Runtime,
    relay: Option<RelayHandle>,
    surface: Option<DemoSurface>,
    pub session: String,
    pub port: u16,
    /// The relay's base URL as the agent sees it.
    pub base: String,
    /// The CA to trust, for a TLS world.
    pub ca: Option<CertificateDer<'static>>,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

impl World {
    /// A plain-HTTP loopback relay with a demo surface on `session`.
    pub fn http(session: &str) -> World {
        let rt = runtime();
        let (relay, surface) = rt.block_on(async {
            let relay = RelayServer::builder().start().await.unwrap();
            let surface = DemoSurface::builder(relay.base_url(), session, TOKEN)
                .start()
                .await
                .unwrap();
            (relay, surface)
        });
        let port = relay.addr().port();
        World {
            rt,
            base: relay.base_url().to_owned(),
            relay: Some(relay),
            surface: Some(surface),
            session: session.to_owned(),
            port,
            ca: None,
        }
    }

    /// An HTTPS relay with a generated certificate for `relay.test`; the
    /// agent reaches it as `https://relay.test:<port>`.
    pub fn tls(session: &str) -> World {
        let rt = runtime();
        let (tls, cert) =
            TlsConfig::generate_for(&["relay.test", "localhost", "127.0.0.1"]).unwrap();
        let ca = cert.ca_der().clone();
        let (relay, surface) = rt.block_on(async {
            let relay = RelayServer::builder().tls(tls).start().await.unwrap();
            let surface = DemoSurface::builder(relay.base_url(), session, TOKEN)
                .tls_roots([ca.clone()])
                .start()
                .await
                .unwrap();
            (relay, surface)
        });
        let port = relay.addr().port();
        World {
            rt,
            base: format!("https://relay.test:{port}"),
            relay: Some(relay),
            surface: Some(surface),
            session: session.to_owned(),
            port,
            ca: Some(ca),
        }
    }

    pub fn relay(&self) -> &RelayHandle {
        self.relay.as_ref().unwrap()
    }

    pub fn surface(&self) -> &DemoSurface {
        self.surface.as_ref().unwrap()
    }

    pub fn set_faults(&self, faults: Faults) {
        self.relay().set_faults(&self.session, faults);
    }

    pub fn is_tls(&self) -> bool {
        self.ca.is_some()
    }

    /// The egress policy for this world (plus `proxy`, if given).
    pub fn policy(&self, proxy: Option<&str>) -> EgressPolicy {
        if self.is_tls() {
            let p = EgressPolicy::new(["relay.test"])
                .allow_ports([self.port])
                .allow_addresses(["127.0.0.1/32".parse().unwrap()]);
            match proxy {
                Some(url) => p.egress_proxy(url),
                None => p.allow_unverified_egress(true),
            }
        } else {
            EgressPolicy::new(["127.0.0.1"])
                .allow_ports([self.port])
                .allow_unverified_egress(true)
        }
    }

    pub fn config(&self, leg: &ReceiveLeg, timeout: Duration) -> ManagerConfig {
        ManagerConfig::new(self.policy(None), trust()).transport(
            TransportConfig::default()
                .receive_leg(leg.clone())
                .timeout(timeout),
        )
    }

    pub fn manager(&self, leg: &ReceiveLeg) -> HumanPlus {
        self.manager_with(self.config(leg, SOON))
    }

    /// A manager for this world with `config` (TLS roots and DNS set up).
    pub fn manager_with(&self, config: ManagerConfig) -> HumanPlus {
        let builder = HumanPlus::builder(config);
        match &self.ca {
            Some(ca) => builder
                .tls_roots(TlsRoots::only([ca.clone()]))
                .resolver(Arc::new(
                    StaticResolver::new().with("relay.test", [IpAddr::V4(Ipv4Addr::LOCALHOST)]),
                ))
                .build()
                .unwrap(),
            None => builder.build().unwrap(),
        }
    }

    pub fn invitation_with(&self, token: &str) -> SurfaceInvitation {
        if self.is_tls() {
            SurfaceInvitation::new(&self.base, &self.session, token, "sheet:one", "Demo").unwrap()
        } else {
            SurfaceInvitation::new_insecure_loopback(
                &self.base,
                &self.session,
                token,
                "sheet:one",
                "Demo",
            )
            .unwrap()
        }
    }

    pub fn invitation(&self) -> SurfaceInvitation {
        self.invitation_with(TOKEN)
    }

    /// Waits (on the relay's runtime) until `predicate` holds of the surface.
    pub fn wait_for(&self, predicate: impl FnMut(&DemoSurface) -> bool) -> bool {
        self.rt.block_on(self.surface().wait_for(SOON, predicate))
    }
}

impl Drop for World {
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

/// A TCP listener that counts the connections it accepts and answers none.
pub struct CountingListener {
    pub port: u16,
    pub accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CountingListener {
    pub fn start() -> CountingListener {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (Arc::clone(&accepted), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok(_) => {
                        a.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        CountingListener {
            port,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    pub fn count(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for CountingListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A tiny HTTP CONNECT proxy: records each CONNECT target, tunnels to it
/// when it is a loopback address (answering `200 Connection established`),
/// refuses anything else with 403, or refuses everything when built with
/// `refuse_all`.
pub struct ConnectProxy {
    pub port: u16,
    pub targets: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 || stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).ok()
}

fn splice(from: TcpStream, mut to: TcpStream) {
    let mut from = from;
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Write);
}

fn serve_connect(mut client: TcpStream, targets: &Mutex<Vec<String>>, refuse_all: bool) {
    client.set_read_timeout(Some(SOON)).unwrap();
    let Some(head) = read_head(&mut client) else {
        return;
    };
    let target = head
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("CONNECT "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_default()
        .to_owned();
    targets.lock().unwrap().push(target.clone());
    let addr: Option<SocketAddr> = target.parse().ok();
    let upstream = match addr {
        Some(a) if a.ip().is_loopback() && !refuse_all => TcpStream::connect(a).ok(),
        _ => None,
    };
    let Some(upstream) = upstream else {
        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n");
        return;
    };
    client.set_read_timeout(None).unwrap();
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let up = std::thread::spawn(move || splice(c2, u2));
    splice(upstream, client);
    let _ = up.join();
}

impl ConnectProxy {
    pub fn start(refuse_all: bool) -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let targets = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, s) = (Arc::clone(&targets), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let t = Arc::clone(&t);
                        std::thread::spawn(move || serve_connect(client, &t, refuse_all));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        ConnectProxy {
            port,
            targets,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn targets(&self) -> Vec<String> {
        self.targets.lock().unwrap().clone()
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
