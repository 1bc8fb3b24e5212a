//! Terminal answers, silence, transport failures, and the token kept out of
//! every error and `Debug` output.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use human_plus_blocking::core::{AttachmentState, TransportErrorKind, Unauthorized};
use human_plus_blocking::{EgressPolicy, Error, HumanPlus, ManagerConfig, ReceiveLeg, TlsRoots};
use human_plus_relay::{Faults, Leg};
use serde_json::json;

fn read(hp: &HumanPlus, id: &str) -> Result<human_plus_blocking::CallResult, Error> {
    hp.call(OWNER, id, "sheet_get_cell", json!({"address": "A1"}))
}

#[test]
fn a_gone_session_is_terminal_on_both_legs() {
    for (i, leg) in legs().iter().enumerate() {
        let world = World::http(&format!("gone-{i}"));
        let hp = world.manager(leg);
        let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
        read(&hp, a.id()).unwrap();
        assert!(world.relay().drop_session(&world.session));
        assert_eq!(
            read(&hp, a.id()).unwrap_err(),
            Error::SurfaceUnavailable,
            "{leg:?}"
        );
        assert_eq!(
            hp.status(OWNER, a.id()).unwrap().state(),
            AttachmentState::SurfaceUnavailable
        );
        assert_eq!(read(&hp, a.id()).unwrap_err(), Error::SurfaceUnavailable);
    }
}

#[test]
fn an_injected_410_is_terminal_too() {
    for (i, leg) in legs().iter().enumerate() {
        let world = World::http(&format!("gone410-{i}"));
        let hp = world.manager(leg);
        let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
        world.set_faults(Faults::new().status(Leg::Inbox, 410));
        assert_eq!(
            hp.tools(OWNER, a.id()).unwrap_err(),
            Error::SurfaceUnavailable,
            "{leg:?}"
        );
        assert!(!hp.status(OWNER, a.id()).unwrap().is_attached());
    }
}

#[test]
fn a_wrong_token_is_unauthorized_and_terminal_on_both_legs() {
    for (i, leg) in legs().iter().enumerate() {
        let world = World::http(&format!("unauth-{i}"));
        let hp = world.manager(leg);
        let a = hp
            .attach(
                OWNER,
                world.invitation_with("WrongToken-0000000000000"),
                participant(),
            )
            .unwrap();
        assert_eq!(
            hp.tools(OWNER, a.id()).unwrap_err(),
            Error::AttachmentUnauthorized(Unauthorized::Relay),
            "{leg:?}"
        );
        assert_eq!(
            hp.status(OWNER, a.id()).unwrap().state(),
            AttachmentState::AttachmentUnauthorized
        );
        assert_eq!(
            hp.tools(OWNER, a.id()).unwrap_err(),
            Error::AttachmentUnauthorized(Unauthorized::Relay)
        );
    }
}

#[test]
fn a_silent_page_ends_the_exchange_within_its_timeout() {
    for (i, leg) in legs().iter().enumerate() {
        for tls in [false, true] {
            let session = format!("silent-{i}-{tls}");
            let world = if tls {
                World::tls(&session)
            } else {
                World::http(&session)
            };
            // The page receives every frame and its replies are dropped.
            world.set_faults(Faults::new().drop_replies());
            let hp = world.manager_with(world.config(leg, Duration::from_secs(2)));
            let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
            let started = Instant::now();
            assert_eq!(
                hp.tools(OWNER, a.id()).unwrap_err(),
                Error::Timeout,
                "{leg:?}"
            );
            assert!(started.elapsed() >= Duration::from_secs(2));
            // Still attached: silence is not terminal.
            assert!(hp.status(OWNER, a.id()).unwrap().is_attached());
        }
    }
}

#[test]
fn relay_failures_are_typed_errors() {
    let world = World::http("fivehundred");
    for leg in legs() {
        let hp = world.manager(&leg);
        let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
        world.set_faults(Faults::new().status(Leg::Inbox, 503));
        assert_eq!(
            hp.tools(OWNER, a.id()).unwrap_err(),
            Error::RelayFailed { status: 503 },
            "{leg:?}"
        );
        world.set_faults(Faults::new());
        hp.tools(OWNER, a.id()).unwrap();
    }
}

#[test]
fn sse_faults_never_hang_or_panic() {
    let world = World::http("sse-faults");
    // Trickling a tools/list reply a byte per millisecond takes seconds.
    let patient = world.manager_with(world.config(&ReceiveLeg::Sse, Duration::from_secs(60)));
    let hp = world.manager_with(world.config(&ReceiveLeg::Sse, Duration::from_secs(5)));
    let cases = [
        Faults::new().sse_crlf(),
        Faults::new().sse_garbage(),
        Faults::new().sse_trickle(Duration::from_millis(1)),
        Faults::new().duplicate_replies(),
        Faults::new().delay(Leg::Inbox, Duration::from_millis(300)),
    ];
    for faults in cases {
        world.set_faults(faults.clone());
        let a = patient
            .attach(OWNER, world.invitation(), participant())
            .unwrap();
        read(&patient, a.id()).unwrap_or_else(|e| panic!("{faults:?}: {e:?}"));
    }
    for faults in [
        Faults::new().sse_cut_after(0),
        Faults::new().sse_gone_after(0),
    ] {
        world.set_faults(faults.clone());
        let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
        let e = read(&hp, a.id()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Protocol(_) | Error::SurfaceUnavailable | Error::Timeout
            ),
            "{faults:?}: {e:?}"
        );
    }
    world.set_faults(Faults::new().sse_oversize(300_000));
    let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
    assert_eq!(read(&hp, a.id()).unwrap_err().code(), "protocol_error");
}

#[test]
fn an_untrusted_certificate_is_a_tls_error() {
    let world = World::tls("untrusted");
    let hp = human_plus_blocking::HumanPlus::builder(world.config(&ReceiveLeg::Sse, SOON))
        .tls_roots(TlsRoots::only([]))
        .resolver(std::sync::Arc::new(
            human_plus_blocking::StaticResolver::new()
                .with("relay.test", ["127.0.0.1".parse().unwrap()]),
        ))
        .build()
        .unwrap();
    let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
    let e = hp.tools(OWNER, a.id()).unwrap_err();
    let Error::Transport(t) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(t.kind(), TransportErrorKind::Tls, "{e}");
    assert!(hp.status(OWNER, a.id()).unwrap().is_attached());
}

#[test]
fn a_closed_port_is_a_connect_error() {
    // A socket bound to the port and never listening: connecting to it is
    // refused, and while it lives no other test's listener can take the port
    // (binding and dropping a listener instead raced with parallel tests).
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    let policy = EgressPolicy::new(["127.0.0.1"])
        .allow_ports([port])
        .allow_unverified_egress(true);
    let hp = HumanPlus::new(ManagerConfig::new(policy, trust()));
    let inv = human_plus_blocking::SurfaceInvitation::new_insecure_loopback(
        format!("http://127.0.0.1:{port}"),
        "closed",
        TOKEN,
        "sheet:one",
        "Demo",
    )
    .unwrap();
    let a = hp.attach(OWNER, inv, participant()).unwrap();
    let e = hp.tools(OWNER, a.id()).unwrap_err();
    let Error::Transport(t) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(t.kind(), TransportErrorKind::Connect, "{e}");
    drop(socket);
}

#[test]
fn no_error_or_debug_output_carries_the_token() {
    let mut outputs: Vec<String> = Vec::new();
    fn record(outputs: &mut Vec<String>, e: &Error) {
        outputs.push(format!("{e}"));
        outputs.push(format!("{e:?}"));
    }
    for tls in [false, true] {
        let world = if tls {
            World::tls("leaks-tls")
        } else {
            World::http("leaks")
        };
        for leg in legs() {
            // One leg per operation, so the receive leg's faults below
            // reach each read (a kept leg would not be opened again).
            let mut config = world.config(&leg, Duration::from_secs(3));
            config.transport.warm = false;
            let hp = world.manager_with(config);
            outputs.push(format!("{hp:?}"));
            let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
            outputs.push(format!("{a:?}"));
            outputs.push(format!("{:?}", world.invitation()));
            outputs.push(format!("{:?}", hp.config()));
            read(&hp, a.id()).unwrap();
            outputs.push(format!("{:?}", hp.status(OWNER, a.id()).unwrap()));
            let leg_fault = if leg.is_poll() {
                Leg::Poll
            } else {
                Leg::Events
            };
            for faults in [
                Faults::new().drop_replies(),
                Faults::new().status(Leg::Inbox, 500),
                Faults::new().status(leg_fault, 502),
            ] {
                world.set_faults(faults);
                record(&mut outputs, &read(&hp, a.id()).unwrap_err());
            }
            world.set_faults(Faults::new());
        }
        // 401 with the wrong token: neither token may show.
        let hp = world.manager(&ReceiveLeg::Sse);
        let wrong = "WrongToken-1111111111111";
        let b = hp
            .attach(OWNER, world.invitation_with(wrong), participant())
            .unwrap();
        let e = hp.tools(OWNER, b.id()).unwrap_err();
        assert!(!format!("{e} {e:?}").contains(wrong));
        record(&mut outputs, &e);
    }
    // A transport failure (nothing listening), in query and bearer mode.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    for bearer in [false, true] {
        let mut policy = EgressPolicy::new(["127.0.0.1"])
            .allow_ports([port])
            .allow_unverified_egress(true);
        if bearer {
            policy = policy.auth(human_plus_blocking::RelayAuth::Bearer);
        }
        let hp = HumanPlus::new(ManagerConfig::new(policy, trust()));
        let inv = human_plus_blocking::SurfaceInvitation::new_insecure_loopback(
            format!("http://127.0.0.1:{port}"),
            "nowhere",
            TOKEN,
            "sheet:one",
            "Demo",
        )
        .unwrap();
        let a = hp.attach(OWNER, inv, participant()).unwrap();
        record(&mut outputs, &hp.tools(OWNER, a.id()).unwrap_err());
    }
    assert!(outputs.len() > 20);
    for out in &outputs {
        assert!(!out.contains(TOKEN), "the token leaked: {out}");
    }
}
