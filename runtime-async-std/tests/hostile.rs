//! Servers that misbehave: a redirect is reported, never followed; bytes
//! that are not HTTP are a transport error, never a panic; an SSE stream
//! trickled a byte at a time with CRLF line ends still completes. Every
//! scenario runs under async-std's executor and under smol's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use common::*;
use human_plus_async_std::core::TransportErrorKind;
use human_plus_async_std::{
    EgressPolicy, Error, HumanPlus, ManagerConfig, ReceiveLeg, SurfaceInvitation, TransportConfig,
};
use human_plus_relay::Faults;
use serde_json::json;

const OWNER: &str = "owner:9";

/// A loopback server answering every connection with `answer`, counting
/// connections.
fn canned(answer: &'static [u8]) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counted.fetch_add(1, Ordering::SeqCst);
            thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let _ = stream.write_all(answer);
                let _ = stream.flush();
            });
        }
    });
    (port, hits)
}

fn loopback_manager(port: u16, leg: ReceiveLeg) -> (HumanPlus, SurfaceInvitation) {
    let config = ManagerConfig::new(
        EgressPolicy::new(["127.0.0.1"])
            .allow_ports([port])
            .allow_unverified_egress(true),
        trust(),
    )
    .transport(
        TransportConfig::default()
            .receive_leg(leg)
            .timeout(Duration::from_secs(10)),
    );
    let invitation = SurfaceInvitation::new_insecure_loopback(
        format!("http://127.0.0.1:{port}"),
        "hostile",
        TOKEN,
        "sheet:one",
        "Demo",
    )
    .unwrap();
    (HumanPlus::new(config), invitation)
}

/// A 302 is reported as its status; its `Location` is never visited.
async fn redirects_are_not_followed() {
    let (elsewhere, elsewhere_hits) = canned(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    let answer: &'static [u8] = format!(
        "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{elsewhere}/steal\r\nContent-Length: 0\r\n\r\n"
    )
    .leak()
    .as_bytes();
    let (port, hits) = canned(answer);
    for leg in [ReceiveLeg::Sse, ReceiveLeg::fancy_poll()] {
        let (hp, invitation) = loopback_manager(port, leg.clone());
        let a = hp
            .attach(OWNER, invitation, participant("agent-1"))
            .await
            .unwrap();
        let e = hp.tools(OWNER, a.id()).await.unwrap_err();
        assert_eq!(e, Error::RelayFailed { status: 302 }, "{leg:?}");
        assert_no_token(&e);
    }
    assert!(hits.load(Ordering::SeqCst) >= 2);
    assert_eq!(elsewhere_hits.load(Ordering::SeqCst), 0, "never followed");
}

/// Bytes that are not HTTP become a transport error.
async fn garbage_is_a_transport_error() {
    let (port, _) = canned(b"SSH-2.0-OpenSSH_9.6\r\n\r\n\x00\xff");
    for leg in [ReceiveLeg::Sse, ReceiveLeg::fancy_poll()] {
        let (hp, invitation) = loopback_manager(port, leg.clone());
        let a = hp
            .attach(OWNER, invitation, participant("agent-1"))
            .await
            .unwrap();
        let e = hp.tools(OWNER, a.id()).await.unwrap_err();
        let Error::Transport(t) = &e else {
            panic!("{leg:?}: {e:?}")
        };
        assert_eq!(t.kind(), TransportErrorKind::Io);
        assert_no_token(&e);
    }
}

/// Nothing listening: a connect error, typed.
async fn refused_connection_is_typed() {
    // Bound and never listening: refused, and no parallel test's listener can
    // take the port while the socket lives.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    let (hp, invitation) = loopback_manager(port, ReceiveLeg::Sse);
    let a = hp
        .attach(OWNER, invitation, participant("agent-1"))
        .await
        .unwrap();
    let e = hp.tools(OWNER, a.id()).await.unwrap_err();
    let Error::Transport(t) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(t.kind(), TransportErrorKind::Connect);
    drop(socket);
}

/// An SSE stream trickled a byte at a time, with CRLF line ends, over TLS.
async fn trickled_sse_completes() {
    let relay = Relay::tls("trickle").await;
    relay.set_faults(
        Faults::new()
            .sse_trickle(Duration::from_millis(1))
            .sse_crlf(),
    );
    let hp = relay.manager(relay.config(ReceiveLeg::Sse, Duration::from_secs(60)));
    let a = hp
        .attach(OWNER, relay.invitation(), participant("agent-1"))
        .await
        .unwrap();
    let r = hp
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .await
        .unwrap();
    assert!(r.revision.is_some());
}

both!(
    redirects_are_not_followed,
    garbage_is_a_transport_error,
    refused_connection_is_typed,
    trickled_sse_completes,
);
