//! Shared fixtures: a relay (plain or TLS) with the demo surface, and
//! managers configured for it.

#![allow(dead_code, missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use human_plus_relay::{
    DemoSurface, GeneratedCert, RelayHandle, RelayServer, SurfaceLeg, TlsConfig,
};
use human_plus_tokio::{
    EgressPolicy, HumanPlus, ManagerConfig, NO_PINS, Participant, ReceiveLeg, StaticResolver,
    SurfaceInvitation, TlsRoots, TransportConfig, TrustPolicy,
};
use tokio::net::TcpListener;

/// The relay token of every test session (query auth puts it in URLs:
/// the redaction tests look for it everywhere).
pub const TOKEN: &str = "tok_9f8e7d6c5b4a39281706";
/// The owner of every attachment.
pub const OWNER: &str = "conversation:one";
/// A bound for anything that must finish; never an assertion of speed.
pub const PATIENCE: Duration = Duration::from_secs(120);

pub const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Plain HTTP or TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Plain,
    Tls,
}

/// The two receive legs of the agent.
pub fn legs() -> [ReceiveLeg; 2] {
    [ReceiveLeg::Sse, ReceiveLeg::fancy_poll()]
}

/// The page's leg to pair with an agent leg (varied, so both page legs run).
pub fn page_leg(leg: &ReceiveLeg) -> SurfaceLeg {
    if leg.is_poll() {
        SurfaceLeg::Poll
    } else {
        SurfaceLeg::Sse
    }
}

/// The trust of the tests: the demo sheet's tools, the reserved
/// confirmation tool included (it must be withheld anyway).
pub fn trust() -> TrustPolicy {
    TrustPolicy::allowing(
        [
            "sheet_describe",
            "sheet_get_cell",
            "sheet_set_cell",
            "changes_since",
            "sheet_confirm_edit",
        ],
        NO_PINS,
    )
}

pub fn participant() -> Participant {
    Participant::new("agent-1", "Assistant", "#7c3aed")
}

/// A running relay, its certificate when on TLS.
pub struct Relay {
    pub handle: RelayHandle,
    pub wire: Wire,
    pub cert: Option<GeneratedCert>,
}

impl Relay {
    pub async fn start(wire: Wire) -> Relay {
        match wire {
            Wire::Plain => Relay {
                handle: RelayServer::builder().start().await.unwrap(),
                wire,
                cert: None,
            },
            Wire::Tls => {
                let (tls, cert) =
                    TlsConfig::generate_for(&["relay.test", "localhost", "127.0.0.1"]).unwrap();
                Relay {
                    handle: RelayServer::builder().tls(tls).start().await.unwrap(),
                    wire,
                    cert: Some(cert),
                }
            }
        }
    }

    pub fn port(&self) -> u16 {
        self.handle.addr().port()
    }

    /// The base URL the agent is invited to: `http://127.0.0.1:P` or
    /// `https://relay.test:P`.
    pub fn agent_base(&self) -> String {
        match self.wire {
            Wire::Plain => self.handle.base_url().to_owned(),
            Wire::Tls => format!("https://relay.test:{}", self.port()),
        }
    }

    /// The page of `session`, registered with `token`.
    pub async fn surface(&self, session: &str, leg: SurfaceLeg) -> DemoSurface {
        let mut b = DemoSurface::builder(self.handle.base_url(), session, TOKEN).leg(leg);
        if let Some(cert) = &self.cert {
            b = b.tls_roots([cert.ca_der().clone()]);
        }
        b.start().await.unwrap()
    }

    /// An invitation to `session` with `token`.
    pub fn invitation(&self, session: &str, token: &str) -> SurfaceInvitation {
        match self.wire {
            Wire::Plain => SurfaceInvitation::new_insecure_loopback(
                self.agent_base(),
                session,
                token,
                "sheet:one",
                "Demo",
            )
            .unwrap(),
            Wire::Tls => {
                SurfaceInvitation::new(self.agent_base(), session, token, "sheet:one", "Demo")
                    .unwrap()
            }
        }
    }

    /// The egress policy for this relay.
    pub fn policy(&self) -> EgressPolicy {
        match self.wire {
            Wire::Plain => EgressPolicy::new(["127.0.0.1"])
                .allow_ports([self.port()])
                .allow_unverified_egress(true),
            Wire::Tls => EgressPolicy::new(["relay.test"])
                .allow_ports([self.port()])
                .allow_addresses(["127.0.0.1/32".parse().unwrap()])
                .allow_unverified_egress(true),
        }
    }

    pub fn config(&self, leg: ReceiveLeg, timeout: Duration) -> ManagerConfig {
        ManagerConfig::new(self.policy(), trust())
            .transport(TransportConfig::default().receive_leg(leg).timeout(timeout))
    }

    /// A manager for this relay.
    pub fn manager(&self, config: ManagerConfig) -> HumanPlus {
        let mut b = HumanPlus::builder(config)
            .resolver(Arc::new(
                StaticResolver::new().with("relay.test", [LOCALHOST]),
            ))
            .connect_timeout(Duration::from_secs(20));
        if let Some(cert) = &self.cert {
            b = b.tls_roots(TlsRoots::only([cert.ca_der().clone()]));
        }
        b.build().unwrap()
    }
}

/// A TCP listener that counts the connections it accepts (and closes them).
pub struct CountingListener {
    pub port: u16,
    pub accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingListener {
    pub async fn start() -> CountingListener {
        let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        CountingListener {
            port,
            accepted,
            task,
        }
    }

    pub fn count(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for CountingListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs `f` with a generous bound, so a hang fails the test instead of
/// stalling the suite.
pub async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(PATIENCE, f).await {
        Ok(out) => out,
        Err(_) => panic!("{what} did not finish within {PATIENCE:?}"),
    }
}
