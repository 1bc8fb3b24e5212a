//! The egress policy where the connection is made: hostile resolutions
//! refused with no connection at all, and the CONNECT proxy handed the
//! vetted IP address, never the name.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::IpAddr;
use std::sync::Arc;

use common::*;
use human_plus_blocking::core::{EgressRule, TransportErrorKind};
use human_plus_blocking::{
    EgressPolicy, Error, HumanPlus, ManagerConfig, StaticResolver, SurfaceInvitation, TlsRoots,
};
use serde_json::json;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn names_resolving_to_private_addresses_are_refused_before_any_connection() {
    let listener = CountingListener::start();
    let port = listener.port;
    let answers: Vec<(&str, Vec<IpAddr>)> = vec![
        ("private.test", vec![ip("10.0.0.1")]),
        ("metadata.test", vec![ip("169.254.169.254")]),
        ("six.test", vec![ip("::1")]),
        ("mapped.test", vec![ip("::ffff:127.0.0.1")]),
        // A mixed answer is refused whole, even though 127.0.0.1 is
        // excepted by the policy and is where the listener is.
        ("mixed.test", vec![ip("127.0.0.1"), ip("10.0.0.1")]),
        (
            "mixed-meta.test",
            vec![ip("127.0.0.1"), ip("169.254.169.254")],
        ),
    ];
    let mut dns = StaticResolver::new();
    for (name, addrs) in &answers {
        dns.insert(*name, addrs.iter().copied());
    }
    let dns = Arc::new(dns);
    for leg in legs() {
        for (name, _) in &answers {
            let policy = EgressPolicy::new([*name])
                .allow_ports([port])
                .allow_unverified_egress(true)
                .allow_addresses(["127.0.0.1/32".parse().unwrap()]);
            let config = ManagerConfig::new(policy, trust()).transport(
                human_plus_blocking::TransportConfig::default().receive_leg(leg.clone()),
            );
            let hp = HumanPlus::builder(config)
                .resolver(dns.clone())
                .tls_roots(TlsRoots::only([]))
                .build()
                .unwrap();
            let inv = SurfaceInvitation::new(
                format!("https://{name}:{port}"),
                "hostile",
                TOKEN,
                "sheet:one",
                "Demo",
            )
            .unwrap();
            // The name passes attach (it is declared); its addresses do not.
            let a = hp.attach(OWNER, inv, participant()).unwrap();
            for result in [
                hp.tools(OWNER, a.id()).map(|_| ()),
                hp.call(OWNER, a.id(), "sheet_get_cell", json!({}))
                    .map(|_| ()),
                hp.announce(OWNER, a.id(), &human_plus_blocking::Activity::new("x")),
            ] {
                match result {
                    Err(Error::EgressRefused(r)) => {
                        assert_eq!(r.rule, EgressRule::PrivateAddress, "{name}");
                        assert!(!r.to_string().contains(TOKEN));
                    }
                    other => panic!("{name} {leg:?}: {other:?}"),
                }
            }
            // Refusal is not terminal: it is a local decision.
            assert!(hp.status(OWNER, a.id()).unwrap().is_attached());
        }
    }
    assert_eq!(listener.count(), 0, "no connection was made");
}

#[test]
fn an_unresolvable_name_is_a_dns_error_and_an_empty_answer_is_refused() {
    let dns = Arc::new(StaticResolver::new().with("empty.test", []));
    for (name, expect_refusal) in [("unknown.test", false), ("empty.test", true)] {
        let policy = EgressPolicy::new([name]).allow_unverified_egress(true);
        let hp = HumanPlus::builder(ManagerConfig::new(policy, trust()))
            .resolver(dns.clone())
            .build()
            .unwrap();
        let inv =
            SurfaceInvitation::new(format!("https://{name}"), "dns-test", TOKEN, "s", "a").unwrap();
        let a = hp.attach(OWNER, inv, participant()).unwrap();
        let e = hp.tools(OWNER, a.id()).unwrap_err();
        match (&e, expect_refusal) {
            (Error::EgressRefused(r), true) => assert_eq!(r.rule, EgressRule::NotResolved),
            (Error::Transport(t), false) => assert_eq!(t.kind(), TransportErrorKind::Dns),
            _ => panic!("{name}: {e:?}"),
        }
    }
}

#[test]
fn literal_private_addresses_never_get_an_attachment() {
    let hp = HumanPlus::new(ManagerConfig::new(
        EgressPolicy::new(["10.0.0.1", "169.254.169.254", "[::1]"]).allow_unverified_egress(true),
        trust(),
    ));
    for url in [
        "https://10.0.0.1",
        "https://169.254.169.254",
        "https://[::1]",
    ] {
        let inv = SurfaceInvitation::new(url, "literal", TOKEN, "s", "a").unwrap();
        let e = hp.attach(OWNER, inv, participant()).unwrap_err();
        assert_eq!(e.code(), "egress_refused", "{url}");
    }
    assert!(hp.store().is_empty());
}

#[test]
fn the_connect_proxy_is_given_the_vetted_ip_never_the_name() {
    let world = World::tls("proxied");
    let proxy = ConnectProxy::start(false);
    // The proxy by address, then by name (the proxy's own name is resolved
    // by the system and not vetted: it is trusted configuration).
    let by_name = format!("http://localhost:{}", proxy.port);
    for (leg, proxy_url) in [
        (legs()[0].clone(), proxy.url()),
        (legs()[1].clone(), proxy.url()),
        (legs()[0].clone(), by_name.clone()),
        (legs()[1].clone(), by_name),
    ] {
        let config = ManagerConfig::new(world.policy(Some(&proxy_url)), trust()).transport(
            human_plus_blocking::TransportConfig::default()
                .receive_leg(leg.clone())
                .timeout(SOON),
        );
        let hp = world.manager_with(config);
        let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
        hp.tools(OWNER, a.id()).unwrap();
        let read = hp
            .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
            .unwrap();
        assert!(read.revision.is_some());
    }
    let targets = proxy.targets();
    // Connections are kept: at least a tunnel per manager (the receive leg
    // and the POSTs may share or not), every one to the vetted address.
    assert!(targets.len() >= 4, "{targets:?}");
    let expected = format!("127.0.0.1:{}", world.port);
    assert!(
        targets.iter().all(|t| *t == expected),
        "every CONNECT names the vetted address: {targets:?}"
    );
}

#[test]
fn a_proxy_refusing_the_tunnel_is_a_proxy_error() {
    let world = World::tls("proxy-refused");
    let proxy = ConnectProxy::start(true);
    let config = ManagerConfig::new(world.policy(Some(&proxy.url())), trust());
    let hp = world.manager_with(config);
    let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
    let e = hp.tools(OWNER, a.id()).unwrap_err();
    let Error::Transport(t) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(t.kind(), TransportErrorKind::Proxy);
    assert!(e.to_string().contains("HTTP 403"), "{e}");
    assert!(!proxy.targets().is_empty());
}

#[test]
fn the_proxy_never_sees_a_hostile_resolution() {
    let proxy = ConnectProxy::start(false);
    let dns = Arc::new(StaticResolver::new().with("relay.test", [ip("10.0.0.1")]));
    let policy = EgressPolicy::new(["relay.test"]).egress_proxy(proxy.url());
    let hp = HumanPlus::builder(ManagerConfig::new(policy, trust()))
        .resolver(dns)
        .build()
        .unwrap();
    let inv = SurfaceInvitation::new("https://relay.test", "hostile", TOKEN, "s", "a").unwrap();
    let a = hp.attach(OWNER, inv, participant()).unwrap();
    assert_eq!(
        hp.tools(OWNER, a.id()).unwrap_err().code(),
        "egress_refused"
    );
    assert!(proxy.targets().is_empty(), "{:?}", proxy.targets());
}

#[test]
fn redirects_are_reported_not_followed() {
    // A server answering every request with a redirect to the metadata
    // address (its thread ends with the test process).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&served);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(
                    b"HTTP/1.1 302 Found\r\nlocation: http://169.254.169.254/latest\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            });
        }
    });
    let policy = EgressPolicy::new(["127.0.0.1"])
        .allow_ports([port])
        .allow_unverified_egress(true);
    for leg in legs() {
        let config = ManagerConfig::new(policy.clone(), trust())
            .transport(human_plus_blocking::TransportConfig::default().receive_leg(leg.clone()));
        let hp = HumanPlus::new(config);
        let inv = SurfaceInvitation::new_insecure_loopback(
            format!("http://127.0.0.1:{port}"),
            "redirect",
            TOKEN,
            "s",
            "a",
        )
        .unwrap();
        let a = hp.attach(OWNER, inv, participant()).unwrap();
        let e = hp.tools(OWNER, a.id()).unwrap_err();
        assert_eq!(e, Error::RelayFailed { status: 302 }, "{leg:?}");
    }
    assert!(served.load(std::sync::atomic::Ordering::SeqCst) >= 2);
}
