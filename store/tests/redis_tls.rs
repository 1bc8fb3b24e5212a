//! The Redis store over TLS, against the TLS-only server `.ci/redis`
//! starts (`HUMAN_PLUS_REDIS_TLS_URL`, with the test CA and a client
//! certificate it made; the server requires one): the right CA and
//! certificate connect every flavour; every certificate failure is a typed
//! TLS error, and nothing ever falls back to plain TCP.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::Target;
use human_plus_core::{Error, StoreErrorKind};
use human_plus_store::{AttachmentStore, Keyring, RedisAttachmentStore, RedisConfig};

fn keyring() -> Keyring {
    Keyring::new("k1", [0x42; 32]).unwrap()
}

fn tls_url() -> String {
    match Target::tls() {
        Target::Single(url) => url,
        Target::Cluster(_) => panic!("HUMAN_PLUS_REDIS_TLS_URL names a cluster"),
    }
}

/// `rediss://127.0.0.1:PORT/` with another host or port.
fn with_authority(authority: &str) -> String {
    let url = tls_url();
    let rest = url.trim_start_matches("rediss://");
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    format!("rediss://{authority}{path}")
}

fn tls_port() -> u16 {
    let url = tls_url();
    let authority = url
        .trim_start_matches("rediss://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    authority.rsplit(':').next().unwrap().parse().unwrap()
}

fn full(url: String) -> RedisConfig {
    let (cert, key) = Target::client_cert();
    RedisConfig::new(url, keyring())
        .tls_ca_pem(Target::ca())
        .tls_client_cert_pem(cert, key)
        .connect_timeout(Duration::from_secs(5))
}

fn kind(e: &Error) -> StoreErrorKind {
    match e {
        Error::Store(s) => s.kind(),
        other => panic!("expected a store error, got {other:?}"),
    }
}

#[test]
fn the_test_ca_and_a_client_certificate_connect() {
    if !common::available(common::Kind::Tls) {
        return;
    }
    let store = RedisAttachmentStore::open(
        full(tls_url()).prefix(format!("human-plus-tls:{}:", std::process::id())),
    )
    .unwrap();
    let guard = store
        .lock(
            "surface_tls",
            Duration::from_secs(5),
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(store.get("surface_tls").unwrap(), None);
    drop(guard);
    // The server really is TLS only: plain TCP on its port gets nowhere.
    let plain = RedisAttachmentStore::open(
        RedisConfig::new(format!("redis://127.0.0.1:{}/", tls_port()), keyring())
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2)),
    )
    .unwrap_err();
    assert_eq!(plain.code(), "store_failed");
}

#[test]
fn every_certificate_failure_is_a_typed_tls_error() {
    if !common::available(common::Kind::Tls) {
        return;
    }
    let (cert, key) = Target::client_cert();
    let cases: Vec<(&str, RedisConfig, &str)> = vec![
        (
            "the bundled web PKI roots do not know the test CA",
            RedisConfig::new(tls_url(), keyring()).tls_client_cert_pem(cert.clone(), key.clone()),
            "UnknownIssuer",
        ),
        (
            "a CA that did not sign the server (the client's own certificate)",
            RedisConfig::new(tls_url(), keyring())
                .tls_ca_pem(cert.clone())
                .tls_client_cert_pem(cert.clone(), key.clone()),
            "UnknownIssuer",
        ),
        (
            "a name the certificate does not hold",
            full(with_authority(&format!("localhost:{}", tls_port()))),
            "not valid for name",
        ),
        (
            "no client certificate for a server that requires one",
            RedisConfig::new(tls_url(), keyring()).tls_ca_pem(Target::ca()),
            "CertificateRequired",
        ),
    ];
    for (case, config, detail) in cases {
        let e =
            RedisAttachmentStore::open(config.connect_timeout(Duration::from_secs(5))).unwrap_err();
        assert_eq!(kind(&e), StoreErrorKind::Tls, "{case}: {e}");
        assert!(e.to_string().contains(detail), "{case}: {e}");
        assert!(e.to_string().contains("(tls)"), "{case}: {e}");
    }
}

#[test]
fn tls_to_a_plain_server_fails_and_plain_is_never_tried() {
    if !common::available(common::Kind::Tls) || !common::available(common::Kind::Plain) {
        return;
    }
    // The plain server of .ci/redis, spoken to with rediss://.
    let plain = match Target::generic() {
        Target::Single(url) if url.starts_with("redis://") => url,
        other => panic!("HUMAN_PLUS_REDIS_URL must name the plain server here: {other:?}"),
    };
    let tls = plain.replacen("redis://", "rediss://", 1);
    // A plain server reads the ClientHello as the start of a command and
    // waits for the rest: the handshake never completes, and the store
    // says so rather than speaking plain TCP.
    let e = RedisAttachmentStore::open(
        RedisConfig::new(tls, keyring())
            .tls_ca_pem(Target::ca())
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2)),
    )
    .unwrap_err();
    assert!(
        matches!(kind(&e), StoreErrorKind::Tls | StoreErrorKind::Timeout),
        "{e}"
    );
    // TLS settings with a plain URL are refused before any connection.
    let e = RedisAttachmentStore::open(RedisConfig::new(plain, keyring()).tls_ca_pem(Target::ca()))
        .unwrap_err();
    assert_eq!(kind(&e), StoreErrorKind::Config, "{e}");
    assert!(
        e.to_string().contains("never falls back to plain TCP"),
        "{e}"
    );
}

#[cfg(feature = "redis-tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_flavour_on_tokio_checks_certificates_too() {
    if !common::available(common::Kind::Tls) {
        return;
    }
    use human_plus_store::{AsyncAttachmentStore, AsyncRedisAttachmentStore};
    let store = AsyncRedisAttachmentStore::connect(full(tls_url()).prefix("human-plus-tls-tokio:"))
        .await
        .unwrap();
    assert_eq!(store.get("surface_none").await.unwrap(), None);
    let e = AsyncRedisAttachmentStore::connect(RedisConfig::new(tls_url(), keyring()))
        .await
        .unwrap_err();
    assert_eq!(kind(&e), StoreErrorKind::Tls, "{e}");
}

#[cfg(feature = "redis-smol")]
#[test]
fn the_async_flavour_on_async_io_checks_certificates_too() {
    if !common::available(common::Kind::Tls) {
        return;
    }
    use human_plus_store::{AsyncAttachmentStore, AsyncRedisAttachmentStore};
    async_io::block_on(async {
        let store =
            AsyncRedisAttachmentStore::connect(full(tls_url()).prefix("human-plus-tls-smol:"))
                .await
                .unwrap();
        assert_eq!(store.get("surface_none").await.unwrap(), None);
        let e = AsyncRedisAttachmentStore::connect(
            RedisConfig::new(
                with_authority(&format!("localhost:{}", tls_port())),
                keyring(),
            )
            .tls_ca_pem(Target::ca()),
        )
        .await
        .unwrap_err();
        assert_eq!(kind(&e), StoreErrorKind::Tls, "{e}");
    });
}
