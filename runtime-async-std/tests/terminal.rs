//! Terminal answers (410, 401), a silent page ending within its timeout,
//! the store lock's bounded wait, and cancellation by dropping an
//! operation's future. Every scenario runs under async-std's executor and
//! under smol's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures_lite::future;
use human_plus_async_std::core::{AttachmentState, Unauthorized};
use human_plus_async_std::{AsyncAttachmentStore, DEFAULT_LEASE, Error, ReceiveLeg};
use human_plus_relay::Faults;
use serde_json::json;

const OWNER: &str = "worker:7";

fn legs() -> [ReceiveLeg; 2] {
    [ReceiveLeg::Sse, ReceiveLeg::fancy_poll()]
}

/// 410: the session is gone; the attachment becomes surface_unavailable
/// and refuses further operations.
async fn gone_session_is_terminal() {
    let relay = Relay::plain("gone-410").await;
    let mut ids = Vec::new();
    for leg in legs() {
        let hp = relay.manager(relay.config(leg.clone(), Duration::from_secs(30)));
        let a = hp
            .attach(OWNER, relay.invitation(), participant("agent-1"))
            .await
            .unwrap();
        hp.tools(OWNER, a.id()).await.unwrap();
        ids.push((hp, a.id().to_owned(), leg));
    }
    assert!(relay.handle.drop_session(&relay.session));
    for (hp, id, leg) in ids {
        let e = hp
            .call(OWNER, &id, "sheet_get_cell", json!({"address": "A1"}))
            .await
            .unwrap_err();
        assert_eq!(e, Error::SurfaceUnavailable, "{leg:?}");
        assert_no_token(&e);
        assert_eq!(
            hp.status(OWNER, &id).await.unwrap().state(),
            AttachmentState::SurfaceUnavailable
        );
        let e = hp.tools(OWNER, &id).await.unwrap_err();
        // Every later operation gives the relay's answer again.
        assert_eq!(e, Error::SurfaceUnavailable, "{e:?}");
    }
}

/// 401: the relay refuses the token; the attachment becomes
/// attachment_unauthorized.
async fn refused_token_is_terminal() {
    let relay = Relay::plain("unauth-401").await;
    for leg in legs() {
        let hp = relay.manager(relay.config(leg.clone(), Duration::from_secs(30)));
        let a = hp
            .attach(
                OWNER,
                relay.invitation_with("not-the-token-0123456789"),
                participant("agent-1"),
            )
            .await
            .unwrap();
        let e = hp.tools(OWNER, a.id()).await.unwrap_err();
        assert_eq!(
            e,
            Error::AttachmentUnauthorized(Unauthorized::Relay),
            "{leg:?}"
        );
        assert!(!format!("{e} {e:?}").contains("not-the-token-0123456789"));
        assert_eq!(
            hp.status(OWNER, a.id()).await.unwrap().state(),
            AttachmentState::AttachmentUnauthorized
        );
    }
    assert!(relay.surface.calls().is_empty());
}

/// A page that never answers: the exchange ends with `Error::Timeout`
/// within its (short) timeout, and the agent's stream is closed.
async fn silent_page_times_out() {
    let relay = Relay::plain("silent-page").await;
    relay.set_faults(Faults::new().drop_replies());
    for leg in legs() {
        let timeout = Duration::from_millis(1500);
        let hp = relay.manager(relay.config(leg.clone(), timeout));
        let a = hp
            .attach(OWNER, relay.invitation(), participant("agent-1"))
            .await
            .unwrap();
        let started = Instant::now();
        let e = hp.tools(OWNER, a.id()).await.unwrap_err();
        assert_eq!(e, Error::Timeout, "{leg:?}");
        let took = started.elapsed();
        assert!(took >= timeout, "{took:?}");
        assert!(took < timeout + PATIENCE, "no hang: {took:?}");
        assert!(hp.status(OWNER, a.id()).await.unwrap().is_attached());
    }
    // The SSE stream was closed when the exchange ended.
    let handle = &relay;
    assert!(
        eventually(|| handle
            .handle
            .subscribers(&handle.session)
            .iter()
            .all(|s| s.leg != human_plus_relay::ReceiveLeg::Sse
                || s.direction != human_plus_relay::Direction::Outbound))
        .await
    );
}

/// The store lock's wait is bounded by the runtime's timer, and a lock
/// held elsewhere is `attachment_busy`.
async fn lock_wait_is_bounded() {
    let relay = Relay::plain("lock-wait").await;
    let hp = relay
        .builder(relay.config(ReceiveLeg::Sse, Duration::from_secs(30)))
        .lock_wait(Duration::from_millis(300))
        .build()
        .unwrap();
    let a = hp
        .attach(OWNER, relay.invitation(), participant("agent-1"))
        .await
        .unwrap();
    let held = AsyncAttachmentStore::lock(hp.store(), a.id(), DEFAULT_LEASE)
        .await
        .unwrap();
    let e = hp.tools(OWNER, a.id()).await.unwrap_err();
    assert_eq!(e.code(), "attachment_busy", "{e:?}");
    assert!(e.retry_after().is_some_and(|d| d <= DEFAULT_LEASE));
    assert!(relay.surface.calls().is_empty());
    assert_eq!(relay.agents_subscribed(), 0, "nothing reached the relay");
    // status and conflict_detection take no lock.
    assert!(hp.status(OWNER, a.id()).await.unwrap().is_attached());
    drop(held);
    hp.tools(OWNER, a.id()).await.unwrap();
}

/// Dropping an operation's future cancels it: its connections close and
/// the store lock is released at once.
async fn dropping_the_future_cancels() {
    let relay = Relay::plain("cancel-drop").await;
    relay.set_faults(Faults::new().drop_replies());
    let hp = relay
        .builder(relay.config(ReceiveLeg::Sse, Duration::from_secs(60)))
        .lock_wait(Duration::from_secs(5))
        .build()
        .unwrap();
    let a = hp
        .attach(OWNER, relay.invitation(), participant("agent-1"))
        .await
        .unwrap();
    let raced = future::or(
        async {
            Some(
                hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
                    .await,
            )
        },
        async {
            // Let the exchange get going: its SSE stream is subscribed.
            let relay = &relay;
            assert!(eventually(|| relay.agents_subscribed() > 0).await);
            sleep(Duration::from_millis(200)).await;
            None
        },
    )
    .await;
    assert!(raced.is_none(), "the silent page cannot have answered");
    // The lock is free again at once.
    let guard = future::or(
        async { Some(AsyncAttachmentStore::lock(hp.store(), a.id(), DEFAULT_LEASE).await) },
        async {
            sleep(Duration::from_secs(2)).await;
            None
        },
    )
    .await;
    assert!(matches!(guard, Some(Ok(_))), "the lock was released");
    drop(guard);
    // The stream was closed, and the attachment still works.
    let relay_ref = &relay;
    assert!(eventually(|| relay_ref.agents_subscribed() == 0).await);
    relay.handle.clear_faults(&relay.session);
    hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .await
        .unwrap();
}

both!(
    gone_session_is_terminal,
    refused_token_is_terminal,
    silent_page_times_out,
    lock_wait_is_bounded,
    dropping_the_future_cancels,
);
