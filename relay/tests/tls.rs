//! HTTPS with a generated certificate: raw TLS clients, and the demo surface
//! over https.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::*;
use human_plus_relay::{DemoSurface, RelayServer, TlsConfig, client_config_trusting};
use rustls_pki_types::ServerName;
use serde_json::json;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

async fn tls_connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::IpAddress(addr.ip().into());
    TlsConnector::from(config).connect(name, tcp).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_https_with_a_generated_certificate() {
    let (tls, cert) = TlsConfig::generate().unwrap();
    let relay = RelayServer::builder().tls(tls).start().await.unwrap();
    let addr = relay.addr();
    assert!(relay.base_url().starts_with("https://127.0.0.1:"));
    let trusted = cert.client_config().unwrap();

    let stream = tls_connect(addr, trusted.clone()).await.unwrap();
    let r = request_on(stream, addr, "GET", "/healthz", &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"ok": true, "service": "agent-integrations-relay"})
    );

    // A client that does not trust the generated CA is refused.
    let (_, other) = TlsConfig::generate().unwrap();
    let untrusted = other.client_config().unwrap();
    assert!(tls_connect(addr, untrusted).await.is_err());
    // Plain HTTP on the TLS port gets no HTTP answer.
    let plain = TcpStream::connect(addr).await.unwrap();
    let mut reader = RawReader::send(plain, addr, "GET", "/healthz", &[], b"")
        .await
        .unwrap();
    assert!(reader.head(SOON).await.is_none());

    // The demo surface over https, and a raw TLS agent completing a call.
    let surface = DemoSurface::builder(relay.base_url(), "secure", TOKEN)
        .tls_roots([cert.ca_der().clone()])
        .start()
        .await
        .unwrap();
    let stream = tls_connect(addr, trusted.clone()).await.unwrap();
    let mut events = RawReader::send(
        stream,
        addr,
        "GET",
        &format!("/secure/events?token={TOKEN}&direction=outbound&client=tls"),
        &[],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(events.head(SOON).await.unwrap().0, 200);
    assert_eq!(
        events.next_block(SOON).await.as_deref(),
        Some("retry: 2000")
    );
    let stream = tls_connect(addr, trusted.clone()).await.unwrap();
    let frame = json!({"jsonrpc": "2.0", "id": "tls-1", "method": "tools/list"}).to_string();
    let r = request_on(
        stream,
        addr,
        "POST",
        &format!("/secure/inbox?token={TOKEN}&client=tls"),
        &[],
        frame.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200);
    let reply = events.next_mcp(SOON).await.unwrap();
    assert_eq!(reply["id"], "tls-1");
    assert!(reply["result"]["tools"].as_array().unwrap().len() >= 6);
    surface.shutdown().await;

    // PEM round trip: a config from the generated PEM serves as well.
    let from_pem =
        TlsConfig::from_pem(cert.cert_pem().as_bytes(), cert.key_pem().as_bytes()).unwrap();
    let relay2 = RelayServer::builder().tls(from_pem).start().await.unwrap();
    let stream = tls_connect(
        relay2.addr(),
        client_config_trusting(&[cert.ca_der().clone()]).unwrap(),
    )
    .await
    .unwrap();
    let r = request_on(stream, relay2.addr(), "GET", "/", &[], b"").await;
    assert_eq!(r.status, 200);
    assert!(TlsConfig::from_pem(b"no pem here", cert.key_pem().as_bytes()).is_err());
    relay2.shutdown().await;
    relay.shutdown().await;
}
