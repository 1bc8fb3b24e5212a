//! The egress policy where the connection is made: a name that resolves to
//! a private address is refused with no connection at all, and no error or
//! `Debug` output carries the token.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use human_plus_relay::SurfaceLeg;
use human_plus_tokio::core::{EgressRule, TransportErrorKind};
use human_plus_tokio::{
    EgressPolicy, Error, HumanPlus, ManagerConfig, ReceiveLeg, StaticResolver, SurfaceInvitation,
    TransportConfig,
};
use serde_json::json;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(TOKEN), "{what} leaks the token: {text}");
}

/// Names the test's resolver answers with hostile addresses; each must be
/// refused before any connection.
fn hostile_names() -> Vec<(&'static str, Vec<IpAddr>)> {
    vec![
        ("private.test", vec![ip("10.0.0.1")]),
        ("metadata.test", vec![ip("169.254.169.254")]),
        ("loopback6.test", vec![ip("::1")]),
        ("loopback4.test", vec![ip("127.0.0.1")]),
        ("mapped.test", vec![ip("::ffff:127.0.0.1")]),
        ("mixed.test", vec![ip("93.184.215.14"), ip("10.0.0.1")]),
        ("cgnat.test", vec![ip("100.64.0.7")]),
        ("empty.test", vec![]),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn names_resolving_to_private_addresses_are_refused_without_a_connection() {
    let listener = CountingListener::start().await;
    let mut resolver = StaticResolver::new();
    for (name, addrs) in hostile_names() {
        resolver.insert(name, addrs);
    }
    resolver.insert("control.test", [LOCALHOST]);
    let resolver = Arc::new(resolver);
    let mut errors = Vec::new();

    for leg in legs() {
        for (name, _) in hostile_names() {
            let policy = EgressPolicy::new([name])
                .allow_ports([listener.port])
                .allow_unverified_egress(true);
            let config = ManagerConfig::new(policy, trust())
                .transport(TransportConfig::default().receive_leg(leg.clone()));
            let hp = HumanPlus::builder(config)
                .resolver(resolver.clone())
                .build()
                .unwrap();
            let invitation = SurfaceInvitation::new(
                format!("https://{name}:{}", listener.port),
                "hostile",
                TOKEN,
                "sheet:one",
                "Demo",
            )
            .unwrap();
            let id = hp
                .attach(OWNER, invitation, participant())
                .await
                .unwrap()
                .id()
                .to_owned();
            let err = bounded(
                name,
                hp.call(OWNER, &id, "sheet_get_cell", json!({"address": "A1"})),
            )
            .await
            .unwrap_err();
            let Error::EgressRefused(refusal) = &err else {
                panic!("{name}: {err:?}")
            };
            let expected = if name == "empty.test" {
                EgressRule::NotResolved
            } else {
                EgressRule::PrivateAddress
            };
            assert_eq!(refusal.rule, expected, "{name} {leg:?}");
            assert!(hp.status(OWNER, &id).await.unwrap().is_attached());
            errors.push(err);
        }
    }
    assert_eq!(
        listener.count(),
        0,
        "no connection was made for a refused name"
    );

    // An unknown name fails as DNS, still without a connection.
    let policy = EgressPolicy::new(["nowhere.test"])
        .allow_ports([listener.port])
        .allow_unverified_egress(true);
    let hp = HumanPlus::builder(ManagerConfig::new(policy, trust()))
        .resolver(resolver.clone())
        .build()
        .unwrap();
    let inv = SurfaceInvitation::new(
        format!("https://nowhere.test:{}", listener.port),
        "hostile",
        TOKEN,
        "s",
        "a",
    )
    .unwrap();
    let id = hp
        .attach(OWNER, inv, participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    let err = bounded("dns", hp.tools(OWNER, &id)).await.unwrap_err();
    let Error::Transport(t) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(t.kind(), TransportErrorKind::Dns);
    errors.push(err);
    assert_eq!(listener.count(), 0);

    // The control: an allowed address is dialled (and the TLS handshake
    // with a listener that hangs up fails), so the count above is real.
    let policy = EgressPolicy::new(["control.test"])
        .allow_ports([listener.port])
        .allow_addresses(["127.0.0.1/32".parse().unwrap()])
        .allow_unverified_egress(true);
    let config = ManagerConfig::new(policy, trust())
        .transport(TransportConfig::default().timeout(Duration::from_secs(10)));
    let hp = HumanPlus::builder(config)
        .resolver(resolver.clone())
        .build()
        .unwrap();
    let inv = SurfaceInvitation::new(
        format!("https://control.test:{}", listener.port),
        "control",
        TOKEN,
        "s",
        "a",
    )
    .unwrap();
    let id = hp
        .attach(OWNER, inv, participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    let err = bounded("control", hp.tools(OWNER, &id)).await.unwrap_err();
    assert!(
        matches!(err, Error::Transport(_) | Error::Timeout),
        "{err:?}"
    );
    assert!(listener.count() >= 1, "the control connection was made");
    errors.push(err);

    for e in &errors {
        assert_clean("error", &e.to_string());
        assert_clean("error Debug", &format!("{e:?}"));
    }
}

/// With the real relay: the relay's own name resolving to a private address
/// sends nothing to it.
#[tokio::test(flavor = "multi_thread")]
async fn relay_name_rebound_to_a_private_address_reaches_nothing() {
    let relay = Relay::start(Wire::Tls).await;
    let surface = relay.surface("rebound", SurfaceLeg::Sse).await;
    for private in ["10.0.0.1", "169.254.169.254", "::1"] {
        for leg in legs() {
            let hp = HumanPlus::builder(relay.config(leg.clone(), Duration::from_secs(10)))
                .resolver(Arc::new(
                    StaticResolver::new().with("relay.test", [ip(private)]),
                ))
                .tls_roots(human_plus_tokio::TlsRoots::only([relay
                    .cert
                    .as_ref()
                    .unwrap()
                    .ca_der()
                    .clone()]))
                .build()
                .unwrap();
            let id = hp
                .attach(OWNER, relay.invitation("rebound", TOKEN), participant())
                .await
                .unwrap()
                .id()
                .to_owned();
            let err = bounded("rebound", hp.tools(OWNER, &id)).await.unwrap_err();
            assert_eq!(err.code(), "egress_refused", "{private} {leg:?}: {err:?}");
        }
    }
    assert!(surface.calls().is_empty());
    assert!(surface.notifications().is_empty());
    // Only the page subscribes; no agent ever reached the relay.
    assert_eq!(relay.handle.subscribers("rebound").len(), 1);
    surface.shutdown().await;
    relay.handle.shutdown().await;
}

/// Hostile invitations (literal addresses, non-canonical spellings, plain
/// HTTP to a non-loopback host) are refused at attach: nothing is stored.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_invitations_are_refused_at_attach() {
    let cases: &[(&str, &str)] = &[
        ("https://169.254.169.254", "169.254.169.254"),
        ("https://10.0.0.1", "10.0.0.1"),
        ("https://192.168.1.1", "192.168.1.1"),
        ("https://[::1]", "[::1]"),
        ("https://[::ffff:127.0.0.1]", "[::ffff:7f00:1]"),
        ("https://0x7f.1", "127.0.0.1"),
        ("https://2130706433", "127.0.0.1"),
        ("https://017700000001", "127.0.0.1"),
        ("https://100.64.0.1", "100.64.0.1"),
        ("https://relay.example:8443", "relay.example"),
        ("https://undeclared.example", "relay.example"),
    ];
    for (url, host) in cases {
        let policy = EgressPolicy::new([*host]).allow_unverified_egress(true);
        let hp = HumanPlus::new(ManagerConfig::new(policy, trust()));
        let Ok(inv) = SurfaceInvitation::new(*url, "hostile", TOKEN, "s", "a") else {
            continue; // refused even earlier, by the invitation itself
        };
        let err = hp.attach(OWNER, inv, participant()).await.unwrap_err();
        assert_eq!(err.code(), "egress_refused", "{url}: {err:?}");
        assert_clean(url, &err.to_string());
        assert_clean(url, &format!("{err:?}"));
        assert!(hp.store().is_empty());
    }
    // Plain HTTP to a host that is not loopback.
    let policy = EgressPolicy::new(["relay.example"]).allow_unverified_egress(true);
    let hp = HumanPlus::new(ManagerConfig::new(policy, trust()));
    let inv = SurfaceInvitation::new_insecure_loopback(
        "http://relay.example",
        "hostile",
        TOKEN,
        "s",
        "a",
    );
    if let Ok(inv) = inv {
        let err = hp.attach(OWNER, inv, participant()).await.unwrap_err();
        assert_eq!(err.code(), "egress_refused");
    }
    // No proxy and no opt-in to unverified egress.
    let hp = HumanPlus::new(ManagerConfig::new(
        EgressPolicy::new(["relay.example"]),
        trust(),
    ));
    let inv = SurfaceInvitation::new("https://relay.example", "hostile", TOKEN, "s", "a").unwrap();
    let err = hp.attach(OWNER, inv, participant()).await.unwrap_err();
    assert_eq!(err.code(), "egress_refused");
}

/// Undeclared trust touches nothing: not the store lock, not the network.
#[tokio::test(flavor = "multi_thread")]
async fn undeclared_trust_sends_nothing() {
    let listener = CountingListener::start().await;
    let policy = EgressPolicy::new(["127.0.0.1"])
        .allow_ports([listener.port])
        .allow_unverified_egress(true);
    let hp = HumanPlus::new(ManagerConfig::new(
        policy,
        human_plus_tokio::TrustPolicy::undeclared(),
    ));
    let inv = SurfaceInvitation::new_insecure_loopback(
        format!("http://127.0.0.1:{}", listener.port),
        "undeclared",
        TOKEN,
        "s",
        "a",
    )
    .unwrap();
    let id = hp
        .attach(OWNER, inv, participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    for result in [
        hp.tools(OWNER, &id).await.map(|_| ()),
        hp.call(OWNER, &id, "sheet_get_cell", json!({}))
            .await
            .map(|_| ()),
        hp.changes_since(OWNER, &id).await.map(|_| ()),
    ] {
        assert_eq!(result.unwrap_err().code(), "tool_refused");
    }
    assert_eq!(listener.count(), 0);
}

/// `Debug` of everything a user holds is free of the token.
#[tokio::test(flavor = "multi_thread")]
async fn debug_output_never_carries_the_token() {
    let relay = Relay::start(Wire::Plain).await;
    let surface = relay.surface("debugged", SurfaceLeg::Sse).await;
    let hp = relay.manager(relay.config(ReceiveLeg::Sse, Duration::from_secs(30)));
    let invitation = relay.invitation("debugged", TOKEN);
    assert_clean("invitation", &format!("{invitation:?}"));
    let record = hp.attach(OWNER, invitation, participant()).await.unwrap();
    assert_clean("record", &format!("{record:?}"));
    assert_clean("manager", &format!("{hp:?}"));
    assert_clean("store", &format!("{:?}", hp.store()));
    let r = bounded(
        "call",
        hp.call(
            OWNER,
            record.id(),
            "sheet_get_cell",
            json!({"address": "A1"}),
        ),
    )
    .await
    .unwrap();
    assert_clean("result", &format!("{r:?}"));
    let status = hp.status(OWNER, record.id()).await.unwrap();
    assert_clean("status", &format!("{status:?}"));
    surface.shutdown().await;
    relay.handle.shutdown().await;
}
