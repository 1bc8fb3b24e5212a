//! Terminal answers (410, 401), a silent page, and the relay's injected
//! faults: each ends in a typed result, never a panic or a hang.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use human_plus_relay::{Faults, Leg, SurfaceLeg};
use human_plus_tokio::core::AttachmentState;
use human_plus_tokio::{Error, ReceiveLeg};
use serde_json::json;

async fn gone(wire: Wire, leg: ReceiveLeg) {
    let relay = Relay::start(wire).await;
    let surface = relay.surface("gone-session", page_leg(&leg)).await;
    let hp = relay.manager(relay.config(leg.clone(), Duration::from_secs(30)));
    let id = hp
        .attach(
            OWNER,
            relay.invitation("gone-session", TOKEN),
            participant(),
        )
        .await
        .unwrap()
        .id()
        .to_owned();
    bounded("tools", hp.tools(OWNER, &id)).await.unwrap();
    assert!(relay.handle.drop_session("gone-session"));
    let err = bounded(
        "call",
        hp.call(OWNER, &id, "sheet_get_cell", json!({"address": "A1"})),
    )
    .await
    .unwrap_err();
    assert_eq!(err, Error::SurfaceUnavailable, "{wire:?} {leg:?}");
    assert_eq!(
        hp.status(OWNER, &id).await.unwrap().state(),
        AttachmentState::SurfaceUnavailable
    );
    // Every later operation gives the relay's answer again (issue 39).
    let err = hp.tools(OWNER, &id).await.unwrap_err();
    assert_eq!(err.code(), "surface_unavailable");
    surface.shutdown().await;
    relay.handle.shutdown().await;
}

async fn unauthorized(wire: Wire, leg: ReceiveLeg) {
    let relay = Relay::start(wire).await;
    let surface = relay.surface("locked-out", page_leg(&leg)).await;
    let hp = relay.manager(relay.config(leg.clone(), Duration::from_secs(30)));
    let id = hp
        .attach(
            OWNER,
            relay.invitation("locked-out", "tok_not_the_right_one_42"),
            participant(),
        )
        .await
        .unwrap()
        .id()
        .to_owned();
    let err = bounded("tools", hp.tools(OWNER, &id)).await.unwrap_err();
    assert_eq!(
        err.code(),
        "attachment_unauthorized",
        "{wire:?} {leg:?}: {err:?}"
    );
    assert_eq!(
        hp.status(OWNER, &id).await.unwrap().state(),
        AttachmentState::AttachmentUnauthorized
    );
    assert!(surface.calls().is_empty());
    surface.shutdown().await;
    relay.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gone_session_is_terminal() {
    for wire in [Wire::Plain, Wire::Tls] {
        for leg in legs() {
            gone(wire, leg).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_token_is_terminal() {
    for wire in [Wire::Plain, Wire::Tls] {
        for leg in legs() {
            unauthorized(wire, leg).await;
        }
    }
}

/// The page stopped reading: the relay accepts the frames and nobody
/// answers. The exchange ends with a timeout, within its budget.
#[tokio::test(flavor = "multi_thread")]
async fn a_silent_page_times_out() {
    for leg in legs() {
        let relay = Relay::start(Wire::Plain).await;
        let surface = relay.surface("silent-page", SurfaceLeg::Sse).await;
        surface.shutdown().await;
        let hp = relay.manager(relay.config(leg.clone(), Duration::from_secs(2)));
        let id = hp
            .attach(OWNER, relay.invitation("silent-page", TOKEN), participant())
            .await
            .unwrap()
            .id()
            .to_owned();
        let err = bounded("silent call", hp.tools(OWNER, &id))
            .await
            .unwrap_err();
        assert_eq!(err, Error::Timeout, "{leg:?}");
        assert!(hp.status(OWNER, &id).await.unwrap().is_attached());
        relay.handle.shutdown().await;
    }
}

/// What a fault must produce.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Success,
    Code(&'static str),
    /// The relay's status, reported as it is (a 3xx is never followed).
    Relay(u16),
    /// Any typed error (the core decides which).
    SomeError,
}

#[tokio::test(flavor = "multi_thread")]
async fn injected_faults_end_typed() {
    let cases: Vec<(&str, Faults, Expect, bool)> = vec![
        // (name, faults, expectation, applies to the SSE leg only)
        ("crlf", Faults::new().sse_crlf(), Expect::Success, true),
        (
            "garbage",
            Faults::new().sse_garbage(),
            Expect::Success,
            true,
        ),
        (
            "duplicates",
            Faults::new().duplicate_replies(),
            Expect::Success,
            false,
        ),
        (
            "gone on the stream",
            Faults::new().sse_gone_after(0),
            Expect::Code("surface_unavailable"),
            true,
        ),
        (
            "cut stream",
            Faults::new().sse_cut_after(0),
            Expect::SomeError,
            true,
        ),
        (
            "oversize frame",
            Faults::new().sse_oversize(300_000),
            Expect::SomeError,
            true,
        ),
        (
            "dropped replies",
            Faults::new().drop_replies(),
            Expect::Code("timeout"),
            false,
        ),
        (
            "slow inbox",
            Faults::new().delay(Leg::Inbox, Duration::from_secs(8)),
            Expect::Code("timeout"),
            false,
        ),
        (
            "inbox 503",
            Faults::new().status(Leg::Inbox, 503),
            Expect::Relay(503),
            false,
        ),
        (
            "events 503",
            Faults::new().status(Leg::Events, 503),
            Expect::Relay(503),
            true,
        ),
        (
            "poll 502",
            Faults::new().status(Leg::Poll, 502),
            Expect::Relay(502),
            false,
        ),
        (
            "inbox redirect",
            Faults::new().status(Leg::Inbox, 307),
            Expect::Relay(307),
            false,
        ),
    ];
    for leg in legs() {
        for (n, (name, faults, expect, sse_only)) in cases.iter().enumerate() {
            if *sse_only && leg.is_poll() {
                continue;
            }
            if name.starts_with("poll") && !leg.is_poll() {
                continue;
            }
            let relay = Relay::start(Wire::Plain).await;
            let session = format!("fault-{n}");
            // The page reads on the leg the fault does not touch.
            let page = if leg.is_poll() {
                SurfaceLeg::Sse
            } else {
                SurfaceLeg::Poll
            };
            let surface = relay.surface(&session, page).await;
            relay.handle.set_faults(&session, faults.clone());
            let hp = relay.manager(relay.config(leg.clone(), Duration::from_secs(4)));
            let id = hp
                .attach(OWNER, relay.invitation(&session, TOKEN), participant())
                .await
                .unwrap()
                .id()
                .to_owned();
            let result = bounded(
                name,
                hp.call(OWNER, &id, "sheet_get_cell", json!({"address": "A2"})),
            )
            .await;
            let ctx = format!("{name} on {leg:?}: {result:?}");
            match (expect, &result) {
                (Expect::Success, Ok(r)) => assert!(r.text.contains("Apples"), "{ctx}"),
                (Expect::Code(code), Err(e)) => assert_eq!(e.code(), *code, "{ctx}"),
                (Expect::Relay(status), Err(e)) => {
                    assert_eq!(*e, Error::RelayFailed { status: *status }, "{ctx}");
                }
                (Expect::SomeError, Err(e)) => {
                    assert!(!e.to_string().contains(TOKEN), "{ctx}");
                    assert!(!format!("{e:?}").contains(TOKEN), "{ctx}");
                }
                _ => panic!("unexpected: {ctx}"),
            }
            surface.shutdown().await;
            relay.handle.shutdown().await;
        }
    }
}

/// SSE bytes written one at a time (a millisecond apart) are reassembled.
#[tokio::test(flavor = "multi_thread")]
async fn a_trickling_stream_is_reassembled() {
    let relay = Relay::start(Wire::Plain).await;
    let surface = relay.surface("trickle", SurfaceLeg::Poll).await;
    relay.handle.set_faults(
        "trickle",
        Faults::new().sse_trickle(Duration::from_millis(1)),
    );
    let hp = relay.manager(relay.config(ReceiveLeg::Sse, Duration::from_secs(60)));
    let id = hp
        .attach(OWNER, relay.invitation("trickle", TOKEN), participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    let r = bounded(
        "trickled call",
        hp.call(OWNER, &id, "sheet_get_cell", json!({"address": "A2"})),
    )
    .await
    .unwrap();
    assert!(r.text.contains("Apples"));
    surface.shutdown().await;
    relay.handle.shutdown().await;
}
