//! The relay and the demo surface on a background tokio runtime, and the
//! helpers every scenario shares. Each scenario is an `async fn` run under
//! async-std's executor and under smol's (`both!`).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use human_plus_async_std::{
    EgressPolicy, Error, HumanPlus, InMemoryAttachmentStore, ManagerConfig, NO_PINS, Participant,
    ReceiveLeg, StaticResolver, SurfaceInvitation, TlsRoots, TransportConfig, TrustPolicy,
};
use human_plus_relay::{
    CertificateDer, DemoSurface, Direction, Faults, RelayHandle, RelayServer, TlsConfig,
};

/// The session token. Searched for in every error, `Debug` output and log.
pub const TOKEN: &str = "tok-7f3a9c1e5b2d4f60-secret";

/// Generous: the machine may be loaded; no test asserts speed.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Runs a scenario under async-std's executor and under smol's.
#[macro_export]
macro_rules! both {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn under_async_std() {
                // async-std is a dev-dependency only (RUSTSEC-2025-0052).
                async_std::task::block_on(super::$name());
            }

            #[test]
            fn under_smol() {
                smol::block_on(super::$name());
            }
        }
    )+};
}

/// The background tokio runtime the relay and the surface run on.
pub fn tokio_rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("relay")
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

/// Runs `f` on the tokio runtime and awaits it from any executor (a tokio
/// `JoinHandle` is a plain future).
pub async fn on_tokio<F>(f: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio_rt().spawn(f).await.expect("tokio task")
}

/// A relay with one session and the demo surface (the person's page) on it.
pub struct Relay {
    pub handle: RelayHandle,
    pub surface: Arc<DemoSurface>,
    pub session: String,
    pub port: u16,
    /// The CA to trust, with TLS.
    pub ca: Option<CertificateDer<'static>>,
}

impl Relay {
    /// Over plain HTTP on 127.0.0.1.
    pub async fn plain(session: &str) -> Relay {
        Relay::start(session, false).await
    }

    /// Over TLS, its certificate for `relay.test` (and 127.0.0.1 for the
    /// surface).
    pub async fn tls(session: &str) -> Relay {
        Relay::start(session, true).await
    }

    async fn start(session: &str, tls: bool) -> Relay {
        let session = session.to_owned();
        on_tokio(async move {
            let mut builder = RelayServer::builder();
            let mut ca = None;
            if tls {
                let (config, cert) =
                    TlsConfig::generate_for(&["relay.test", "localhost", "127.0.0.1"]).unwrap();
                builder = builder.tls(config);
                ca = Some(cert.ca_der().clone());
            }
            let handle = builder.start().await.unwrap();
            let mut surface = DemoSurface::builder(handle.base_url(), &session, TOKEN);
            if let Some(ca) = &ca {
                surface = surface.tls_roots([ca.clone()]);
            }
            let surface = surface.start().await.unwrap();
            let port = handle.addr().port();
            Relay {
                handle,
                surface: Arc::new(surface),
                session,
                port,
                ca,
            }
        })
        .await
    }

    pub fn is_tls(&self) -> bool {
        self.ca.is_some()
    }

    /// The relay URL an invitation names.
    pub fn relay_url(&self) -> String {
        if self.is_tls() {
            format!("https://relay.test:{}", self.port)
        } else {
            format!("http://127.0.0.1:{}", self.port)
        }
    }

    /// An invitation to the session, with `token`.
    pub fn invitation_with(&self, token: &str) -> SurfaceInvitation {
        if self.is_tls() {
            SurfaceInvitation::new(self.relay_url(), &self.session, token, "sheet:one", "Demo")
                .unwrap()
        } else {
            SurfaceInvitation::new_insecure_loopback(
                self.relay_url(),
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

    /// The egress policy the tests use for this relay.
    pub fn egress(&self) -> EgressPolicy {
        if self.is_tls() {
            EgressPolicy::new(["relay.test"])
                .allow_ports([self.port])
                .allow_addresses(["127.0.0.1/32".parse::<ipnet::IpNet>().unwrap()])
                .allow_unverified_egress(true)
        } else {
            EgressPolicy::new(["127.0.0.1"])
                .allow_ports([self.port])
                .allow_unverified_egress(true)
        }
    }

    /// A configuration on `leg` with exchange timeout `timeout`.
    pub fn config(&self, leg: ReceiveLeg, timeout: Duration) -> ManagerConfig {
        ManagerConfig::new(self.egress(), trust())
            .transport(TransportConfig::default().receive_leg(leg).timeout(timeout))
    }

    /// The builder of a manager for this relay (TLS roots and the test
    /// resolver set).
    pub fn builder(
        &self,
        config: ManagerConfig,
    ) -> human_plus_async_std::HumanPlusBuilder<InMemoryAttachmentStore> {
        let mut builder = HumanPlus::builder(config);
        if let Some(ca) = &self.ca {
            builder = builder
                .tls_roots(TlsRoots::only([ca.clone()]))
                .resolver(Arc::new(
                    StaticResolver::new().with("relay.test", [IpAddr::V4(Ipv4Addr::LOCALHOST)]),
                ));
        }
        builder
    }

    pub fn manager(&self, config: ManagerConfig) -> HumanPlus {
        self.builder(config).build().unwrap()
    }

    pub fn set_faults(&self, faults: Faults) {
        self.handle.set_faults(&self.session, faults);
    }

    /// Whether any agent (outbound subscriber) is on the session.
    pub fn agents_subscribed(&self) -> usize {
        self.handle
            .subscribers(&self.session)
            .iter()
            .filter(|s| s.direction == Direction::Outbound)
            .count()
    }
}

/// Every tool of the demo sheet, the reserved one included on purpose:
/// it must be withheld all the same.
pub fn trust() -> TrustPolicy {
    TrustPolicy::allowing(
        [
            "sheet_describe",
            "sheet_get_cell",
            "sheet_get_range",
            "sheet_set_cell",
            "sheet_delete_row",
            "changes_since",
            "sheet_confirm_edit",
        ],
        NO_PINS,
    )
}

pub fn participant(id: &str) -> Participant {
    Participant::new(id, "Assistant", "#7c3aed")
}

/// Sleeps on the async-io timer.
pub async fn sleep(d: Duration) {
    async_io::Timer::after(d).await;
}

/// Waits until `pred` holds, up to [`PATIENCE`].
pub async fn eventually(mut pred: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + PATIENCE;
    loop {
        if pred() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        sleep(Duration::from_millis(25)).await;
    }
}

/// Asserts neither the `Display` nor the `Debug` of `e` carries the token.
pub fn assert_no_token(e: &Error) {
    let shown = format!("{e} / {e:?}");
    assert!(!shown.contains(TOKEN), "the token leaked: {shown}");
}

/// A tracing subscriber writing every span and event (down to TRACE) into
/// a buffer, for the current thread.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        let sink = self.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || sink.clone())
            .finish()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
