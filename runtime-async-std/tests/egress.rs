//! The egress policy where the connection is made: a host name that
//! resolves to a private address is refused with nothing sent; the CONNECT
//! proxy is handed the vetted address, never the name; and no log line
//! carries the token. Every scenario runs under async-std's executor and
//! under smol's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use human_plus_async_std::core::{EgressRule, TransportErrorKind};
use human_plus_async_std::{
    EgressPolicy, Error, ManagerConfig, ReceiveLeg, Resolve, Resolving, StaticResolver,
    SurfaceInvitation, TransportConfig,
};
use serde_json::json;

const OWNER: &str = "tenant:3";

/// A resolver that counts its lookups, so a test can tell that the name
/// was resolved and its answer refused.
struct Counting {
    inner: StaticResolver,
    lookups: Arc<AtomicUsize>,
}

impl Resolve for Counting {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> Resolving<'a> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        self.inner.resolve(host, port)
    }
}

/// `relay.test` resolving to a private, metadata or loopback address is
/// refused before any connection: nothing reaches the relay.
async fn private_resolution_is_refused() {
    let relay = Relay::tls("ssrf-names").await;
    for hostile in ["10.0.0.1", "169.254.169.254", "::1"] {
        let ip: IpAddr = hostile.parse().unwrap();
        let lookups = Arc::new(AtomicUsize::new(0));
        for leg in [ReceiveLeg::Sse, ReceiveLeg::fancy_poll()] {
            let config = ManagerConfig::new(
                EgressPolicy::new(["relay.test"])
                    .allow_ports([relay.port])
                    .allow_unverified_egress(true),
                trust(),
            )
            .transport(TransportConfig::default().receive_leg(leg));
            let hp = relay
                .builder(config)
                .connect_timeout(Duration::from_secs(2))
                .resolver(Arc::new(Counting {
                    inner: StaticResolver::new().with("relay.test", [ip]),
                    lookups: Arc::clone(&lookups),
                }))
                .build()
                .unwrap();
            let a = hp
                .attach(OWNER, relay.invitation(), participant("agent-1"))
                .await
                .unwrap();
            let e = hp.tools(OWNER, a.id()).await.unwrap_err();
            let Error::EgressRefused(refusal) = &e else {
                panic!("{hostile}: {e:?}")
            };
            assert_eq!(refusal.rule, EgressRule::PrivateAddress, "{hostile}");
            assert_no_token(&e);
            let e = hp
                .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
                .await
                .unwrap_err();
            assert_eq!(e.code(), "egress_refused");
        }
        assert!(
            lookups.load(Ordering::SeqCst) >= 4,
            "{hostile} was resolved"
        );
    }
    // Zero requests reached the relay.
    assert_eq!(relay.agents_subscribed(), 0);
    assert!(relay.surface.calls().is_empty());
    assert!(relay.surface.peers().is_empty());
    assert!(
        relay
            .surface
            .notifications()
            .iter()
            .all(|n| !n.method.contains("initialized")),
        "{:?}",
        relay.surface.notifications()
    );
    // A literal metadata address never gets past attach.
    let hostile = SurfaceInvitation::new(
        "https://169.254.169.254",
        "ssrf-names",
        TOKEN,
        "sheet:one",
        "Demo",
    )
    .unwrap();
    let hp = relay.manager(ManagerConfig::new(
        EgressPolicy::new(["169.254.169.254"]).allow_unverified_egress(true),
        trust(),
    ));
    let e = hp
        .attach(OWNER, hostile, participant("agent-1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "egress_refused");
    assert_no_token(&e);
}

/// A tiny CONNECT proxy: records every request head, and tunnels only to
/// `allowed` (answering `refuse` instead when set).
struct Proxy {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    fn start(allowed: SocketAddr, refuse: Option<u16>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&heads);
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let recorded = Arc::clone(&recorded);
                thread::spawn(move || serve(client, allowed, refuse, &recorded));
            }
        });
        Proxy { port, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn serve(
    mut client: TcpStream,
    allowed: SocketAddr,
    refuse: Option<u16>,
    recorded: &Mutex<Vec<String>>,
) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    recorded.lock().unwrap().push(head.clone());
    if let Some(status) = refuse {
        let _ = write!(
            client,
            "HTTP/1.1 {status} Forbidden\r\nContent-Length: 0\r\n\r\n"
        );
        return;
    }
    let target = head
        .strip_prefix("CONNECT ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|t| t.parse::<SocketAddr>().ok());
    // This proxy only ever dials the test relay on loopback.
    if target != Some(allowed) {
        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n");
        return;
    }
    let Ok(upstream) = TcpStream::connect(allowed) else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
        return;
    };
    let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
    let (mut c_read, mut u_write) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let (mut u_read, mut c_write) = (upstream, client);
    let up = thread::spawn(move || {
        let _ = std::io::copy(&mut c_read, &mut u_write);
        let _ = u_write.shutdown(Shutdown::Write);
    });
    let _ = std::io::copy(&mut u_read, &mut c_write);
    let _ = c_write.shutdown(Shutdown::Both);
    let _ = up.join();
}

fn proxied_config(relay: &Relay, proxy: &Proxy, leg: ReceiveLeg) -> ManagerConfig {
    ManagerConfig::new(
        EgressPolicy::new(["relay.test"])
            .allow_ports([relay.port])
            .allow_addresses(["127.0.0.1/32".parse::<ipnet::IpNet>().unwrap()])
            .egress_proxy(format!("http://127.0.0.1:{}", proxy.port)),
        trust(),
    )
    .transport(
        TransportConfig::default()
            .receive_leg(leg)
            .timeout(Duration::from_secs(30)),
    )
}

/// Through the proxy over TLS: the CONNECT target is the vetted address,
/// `127.0.0.1:<port>`, never `relay.test`; the call succeeds.
async fn proxy_is_handed_the_vetted_address() {
    let relay = Relay::tls("via-proxy").await;
    let allowed = SocketAddr::from(([127, 0, 0, 1], relay.port));
    let proxy = Proxy::start(allowed, None);
    for leg in [ReceiveLeg::Sse, ReceiveLeg::fancy_poll()] {
        let hp = relay.manager(proxied_config(&relay, &proxy, leg));
        let a = hp
            .attach(OWNER, relay.invitation(), participant("agent-1"))
            .await
            .unwrap();
        let r = hp
            .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
            .await
            .unwrap();
        assert!(r.text.contains("untrusted-tool-output"));
        assert!(r.revision.is_some());
    }
    let heads = proxy.heads();
    assert!(heads.len() >= 4, "{heads:?}");
    let expected = format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n", relay.port);
    for head in &heads {
        assert!(head.starts_with(&expected), "{head:?}");
        // The name only ever appears as the Host header.
        let first_line = head.lines().next().unwrap();
        assert!(!first_line.contains("relay.test"), "{head:?}");
        assert!(!head.contains(TOKEN));
    }
}

/// A proxy that refuses the tunnel gives a typed proxy error, and nothing
/// reaches the relay.
async fn proxy_refusal_is_typed() {
    let relay = Relay::tls("proxy-refuses").await;
    let allowed = SocketAddr::from(([127, 0, 0, 1], relay.port));
    let proxy = Proxy::start(allowed, Some(403));
    let hp = relay.manager(proxied_config(&relay, &proxy, ReceiveLeg::Sse));
    let a = hp
        .attach(OWNER, relay.invitation(), participant("agent-1"))
        .await
        .unwrap();
    let e = hp.tools(OWNER, a.id()).await.unwrap_err();
    let Error::Transport(t) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(t.kind(), TransportErrorKind::Proxy);
    assert!(e.to_string().contains("403"), "{e}");
    assert_no_token(&e);
    assert!(!proxy.heads().is_empty());
    assert_eq!(relay.agents_subscribed(), 0);
    assert!(relay.surface.calls().is_empty());
}

both!(
    private_resolution_is_refused,
    proxy_is_handed_the_vetted_address,
    proxy_refusal_is_typed,
);

/// Calls, a refused write, a 401 and a timeout with every span and event
/// captured: the spans are there, the token never is.
async fn logged_operations() {
    let relay = Relay::plain("logged-ops").await;
    let hp = relay.manager(relay.config(ReceiveLeg::Sse, Duration::from_secs(30)));
    let a = hp
        .attach(OWNER, relay.invitation(), participant("agent-1"))
        .await
        .unwrap();
    hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "B4"}))
        .await
        .unwrap();
    relay.surface.person().set_cell("B4", "7").unwrap();
    let e = hp
        .call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "B4", "value": "8"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "surface_changed_under_you");
    let poll = relay.manager(relay.config(ReceiveLeg::fancy_poll(), Duration::from_secs(30)));
    let bad = poll
        .attach(
            OWNER,
            relay.invitation_with(&format!("{TOKEN}-wrong")),
            participant("agent-2"),
        )
        .await
        .unwrap();
    assert!(poll.tools(OWNER, bad.id()).await.is_err());
    relay.set_faults(human_plus_relay::Faults::new().drop_replies());
    let short = relay.manager(relay.config(ReceiveLeg::Sse, Duration::from_millis(800)));
    let c = short
        .attach(OWNER, relay.invitation(), participant("agent-3"))
        .await
        .unwrap();
    assert_eq!(
        short.tools(OWNER, c.id()).await.unwrap_err(),
        Error::Timeout
    );
}

fn check_log(log: &str) {
    if std::env::var_os("SHOW_LOG").is_some() {
        eprintln!("{log}");
    }
    assert!(log.contains("human_plus.call"), "{log}");
    assert!(log.contains("human_plus.tools"), "{log}");
    assert!(log.contains("relay request"), "{log}");
    assert!(log.contains("[redacted]"), "{log}");
    assert!(!log.contains(TOKEN), "the token leaked into a log line");
}

#[test]
fn no_log_line_carries_the_token_under_async_std() {
    let capture = LogCapture::default();
    tracing::subscriber::with_default(capture.subscriber(), || {
        async_std::task::block_on(logged_operations());
    });
    check_log(&capture.text());
}

#[test]
fn no_log_line_carries_the_token_under_smol() {
    let capture = LogCapture::default();
    tracing::subscriber::with_default(capture.subscriber(), || {
        smol::block_on(logged_operations());
    });
    check_log(&capture.text());
}
