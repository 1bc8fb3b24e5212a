//! The egress proxy path: a tiny HTTP CONNECT proxy written for the test
//! records what it is asked to reach. The target is always the vetted IP,
//! never the name, and TLS to the relay runs through the tunnel.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use human_plus_relay::SurfaceLeg;
use human_plus_tokio::core::TransportErrorKind;
use human_plus_tokio::{Error, HumanPlus, ReceiveLeg, StaticResolver, TlsRoots};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One CONNECT request as the proxy saw it.
#[derive(Debug, Clone)]
struct Seen {
    target: String,
    host: Option<String>,
}

/// A minimal CONNECT proxy: answers `answer` and, on a 200, splices bytes
/// to the target (which it dials only if it is an `ip:port`).
struct ConnectProxy {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl ConnectProxy {
    async fn start(answer: &'static str) -> ConnectProxy {
        let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (seen2, connections2) = (Arc::clone(&seen), Arc::clone(&connections));
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                connections2.fetch_add(1, Ordering::SeqCst);
                let seen = Arc::clone(&seen2);
                tokio::spawn(serve(client, answer, seen));
            }
        });
        ConnectProxy {
            port,
            seen,
            connections,
            task,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut client: TcpStream, answer: &'static str, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 || client.read(&mut byte).await.unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    if parts.next() != Some("CONNECT") {
        let _ = client
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            .await;
        return;
    }
    let target = parts.next().unwrap_or_default().to_owned();
    let host = lines
        .find_map(|l| {
            l.strip_prefix("Host: ")
                .or_else(|| l.strip_prefix("host: "))
        })
        .map(str::to_owned);
    seen.lock().unwrap().push(Seen {
        target: target.clone(),
        host,
    });
    if !answer.starts_with("HTTP/1.1 200") {
        let _ = client.write_all(answer.as_bytes()).await;
        return;
    }
    // Only an address: this proxy never resolves names.
    let Ok(addr) = target.parse::<SocketAddr>() else {
        let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        return;
    };
    let Ok(mut upstream) = TcpStream::connect(addr).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    if client.write_all(answer.as_bytes()).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

const ESTABLISHED: &str = "HTTP/1.1 200 Connection established\r\n\r\n";

fn manager_via(relay: &Relay, proxy_port: u16, leg: ReceiveLeg, resolve_to: IpAddr) -> HumanPlus {
    let mut config = relay.config(leg, Duration::from_secs(30));
    config.egress = config
        .egress
        .clone()
        .egress_proxy(format!("http://127.0.0.1:{proxy_port}"));
    HumanPlus::builder(config)
        .resolver(Arc::new(
            StaticResolver::new().with("relay.test", [resolve_to]),
        ))
        .tls_roots(TlsRoots::only([relay
            .cert
            .as_ref()
            .unwrap()
            .ca_der()
            .clone()]))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_succeed_through_the_tunnel_to_the_vetted_address() {
    let relay = Relay::start(Wire::Tls).await;
    let proxy = ConnectProxy::start(ESTABLISHED).await;
    for leg in legs() {
        let session = if leg.is_poll() {
            "proxied-poll"
        } else {
            "proxied-sse"
        };
        let surface = relay.surface(session, page_leg(&leg)).await;
        let hp = manager_via(&relay, proxy.port, leg.clone(), LOCALHOST);
        let id = hp
            .attach(OWNER, relay.invitation(session, TOKEN), participant())
            .await
            .unwrap()
            .id()
            .to_owned();
        let r = bounded(
            "proxied call",
            hp.call(OWNER, &id, "sheet_get_cell", json!({"address": "A2"})),
        )
        .await
        .unwrap();
        assert!(r.text.contains("Apples"), "{leg:?}: {}", r.text);
        let w = bounded(
            "proxied write",
            hp.call(
                OWNER,
                &id,
                "sheet_set_cell",
                json!({"address": "D1", "value": "via proxy"}),
            ),
        )
        .await
        .unwrap();
        assert!(w.revision.is_some());
        assert_eq!(surface.cell("D1").as_deref(), Some("via proxy"));
        surface.shutdown().await;
    }
    let seen = proxy.seen();
    assert!(!seen.is_empty());
    let expected = format!("127.0.0.1:{}", relay.port());
    for s in &seen {
        assert_eq!(
            s.target, expected,
            "the CONNECT target is the vetted IP: {s:?}"
        );
        assert!(!s.target.contains("relay.test"), "{s:?}");
        assert_eq!(
            s.host.as_deref(),
            Some(format!("relay.test:{}", relay.port()).as_str()),
            "the Host header names the relay for the proxy's policy"
        );
    }
    relay.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusing_proxy_is_a_typed_error() {
    let relay = Relay::start(Wire::Tls).await;
    let surface = relay.surface("proxy-refused", SurfaceLeg::Sse).await;
    for answer in [
        "HTTP/1.1 403 Forbidden\r\n\r\n",
        "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n",
        "SSH-2.0-not-a-proxy\r\n\r\n",
    ] {
        let proxy = ConnectProxy::start(answer).await;
        for leg in legs() {
            let hp = manager_via(&relay, proxy.port, leg.clone(), LOCALHOST);
            let id = hp
                .attach(
                    OWNER,
                    relay.invitation("proxy-refused", TOKEN),
                    participant(),
                )
                .await
                .unwrap()
                .id()
                .to_owned();
            let err = bounded("refused", hp.tools(OWNER, &id)).await.unwrap_err();
            assert!(!err.to_string().contains(TOKEN));
            if answer.contains(" 407 ") {
                // Credentials wanted: its own error, not a transport failure.
                assert!(matches!(err, Error::ProxyAuthRequired(_)), "{err:?}");
                assert_eq!(err.code(), "proxy_auth_required");
                continue;
            }
            let Error::Transport(t) = &err else {
                panic!("{answer:?} {leg:?}: {err:?}")
            };
            assert_eq!(t.kind(), TransportErrorKind::Proxy, "{err:?}");
        }
        assert!(!proxy.seen().is_empty());
    }
    assert!(surface.calls().is_empty(), "nothing reached the surface");
    surface.shutdown().await;
    relay.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_answer_is_refused_before_the_proxy_is_asked() {
    let relay = Relay::start(Wire::Tls).await;
    let proxy = ConnectProxy::start(ESTABLISHED).await;
    for private in ["10.0.0.1", "169.254.169.254", "::1"] {
        let hp = manager_via(
            &relay,
            proxy.port,
            ReceiveLeg::Sse,
            private.parse().unwrap(),
        );
        let id = hp
            .attach(
                OWNER,
                relay.invitation("never-reached", TOKEN),
                participant(),
            )
            .await
            .unwrap()
            .id()
            .to_owned();
        let err = bounded("private", hp.tools(OWNER, &id)).await.unwrap_err();
        assert_eq!(err.code(), "egress_refused", "{private}: {err:?}");
    }
    assert_eq!(proxy.connections.load(Ordering::SeqCst), 0);
    relay.handle.shutdown().await;
}
