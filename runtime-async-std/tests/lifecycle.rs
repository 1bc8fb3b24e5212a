//! The whole lifecycle over real sockets, on both receive legs, over plain
//! HTTP and over TLS; two agents on one session; the futures spawned on
//! multi-threaded executors. Every scenario runs under async-std's
//! executor and under smol's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use common::*;
use futures_lite::future;
use human_plus_async_std::core::{AttachmentState, ToolRefusal};
use human_plus_async_std::{
    Activity, ConflictDetection, Error, HumanPlus, ManagerConfig, Priority, ReceiveLeg,
};
use human_plus_relay::CallOutcome;
use serde_json::json;

const OWNER: &str = "conversation:1";

/// Attach, discover (reserved tool withheld, pinned tool admitted, pin
/// mismatch refused), read with a revision, the person edits, the stale
/// pinned write is refused with nothing written, the change feed defers to
/// the person, re-read and write, announce, detach with the session alive.
async fn lifecycle(relay: Relay, leg: ReceiveLeg) {
    let config = relay.config(leg.clone(), Duration::from_secs(30));
    let hp = relay.manager(config.clone());

    let a = hp
        .attach(OWNER, relay.invitation(), participant("agent-1"))
        .await
        .unwrap();
    assert!(a.is_attached());
    assert!(!format!("{a:?} {hp:?}").contains(TOKEN));
    let id = a.id().to_owned();

    // Discovery: the reserved confirmation tool is withheld even though the
    // allowlist names it.
    let d = hp.tools(OWNER, &id).await.unwrap();
    let names: Vec<&str> = d.tools.iter().map(|t| t.name()).collect();
    for expected in ["sheet_get_cell", "sheet_set_cell", "changes_since"] {
        assert!(names.contains(&expected), "{names:?}");
    }
    assert!(!names.contains(&"sheet_confirm_edit"), "{names:?}");
    let withheld = d
        .withheld
        .iter()
        .find(|w| w.name == "sheet_confirm_edit")
        .expect("withheld");
    assert!(matches!(withheld.reason, ToolRefusal::Reserved(_)));
    let e = hp
        .call(OWNER, &id, "sheet_confirm_edit", json!({"pendingId": "p1"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::ToolRefused(ToolRefusal::NotOffered(_))),
        "{e:?}"
    );

    // Pins: a second worker sharing the store, pinned to the digest just
    // seen, is admitted; a wrong pin refuses the whole discovery.
    let digest = d
        .tools
        .iter()
        .find(|t| t.name() == "sheet_get_cell")
        .unwrap()
        .digest();
    let pinned_config = ManagerConfig {
        trust: trust().with_pin("sheet_get_cell", digest),
        ..config.clone()
    };
    let pinned = relay
        .builder(pinned_config)
        .store(hp.store().clone())
        .build()
        .unwrap();
    let r = pinned
        .call(OWNER, &id, "sheet_get_cell", json!({"address": "A1"}))
        .await
        .unwrap();
    assert!(r.text.contains("untrusted-tool-output"), "{}", r.text);
    let wrong_config = ManagerConfig {
        trust: trust().with_pin("sheet_get_cell", "sha256:00000000000000000000000000000000"),
        ..config.clone()
    };
    let wrong = relay
        .builder(wrong_config)
        .store(hp.store().clone())
        .build()
        .unwrap();
    let e = wrong.tools(OWNER, &id).await.unwrap_err();
    assert_eq!(
        e,
        Error::ToolRefused(ToolRefusal::PinChanged("sheet_get_cell".into()))
    );

    // A read, with its revision.
    let read = hp
        .call(OWNER, &id, "sheet_get_cell", json!({"address": "B4"}))
        .await
        .unwrap();
    let seen = read.revision.clone().expect("the read carries a revision");
    assert_eq!(hp.status(OWNER, &id).await.unwrap().revision(), Some(&seen));

    // The person edits; the agent's write pinned to the old revision is
    // refused and nothing is written.
    relay.surface.person().set_cell("B4", "12").unwrap();
    let e = hp
        .call(
            OWNER,
            &id,
            "sheet_set_cell",
            json!({"address": "B4", "value": "99"}),
        )
        .await
        .unwrap_err();
    let Error::SurfaceChangedUnderYou(refusal) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(refusal.pinned(), Some(&seen));
    assert_eq!(e.code(), "surface_changed_under_you");
    assert_eq!(relay.surface.cell("B4").as_deref(), Some("12"));
    assert!(relay.surface.writes().is_empty());
    // The refusal was completed by the change feed, asked since the
    // refused pin: the write's record is the one before it.
    let calls = relay.surface.calls();
    assert_eq!(calls.last().map(|c| c.tool.as_str()), Some("changes_since"));
    assert!(matches!(
        calls
            .iter()
            .rev()
            .find(|c| c.tool == "sheet_set_cell")
            .map(|c| &c.outcome),
        Some(CallOutcome::Refused { .. })
    ));
    assert_eq!(
        hp.conflict_detection(OWNER, &id).await.unwrap(),
        ConflictDetection::Enforced
    );

    // The change feed defers to the person's edit.
    let changes = hp.changes_since(OWNER, &id).await.unwrap();
    assert!(changes.answered(), "{changes:?}");
    assert!(
        changes.defer_to().iter().any(|c| c.handle() == "B4"),
        "{changes:?}"
    );

    // Re-read, then the write goes through.
    let reread = hp
        .call(OWNER, &id, "sheet_get_cell", json!({"address": "B4"}))
        .await
        .unwrap();
    assert!(reread.text.contains("12"), "{}", reread.text);
    let written = hp
        .call(
            OWNER,
            &id,
            "sheet_set_cell",
            json!({"address": "B4", "value": "99"}),
        )
        .await
        .unwrap();
    assert_eq!(written.pinned, reread.revision);
    assert!(written.revision.is_some());
    assert_eq!(relay.surface.cell("B4").as_deref(), Some("99"));
    assert_eq!(relay.surface.writes().len(), 1);

    // Activity reaches the surface.
    hp.announce(
        OWNER,
        &id,
        &Activity::new("editing")
            .target("B4")
            .priority(Priority::Attention),
    )
    .await
    .unwrap();
    let surface = relay.surface.clone();
    assert!(
        eventually(|| surface
            .activity()
            .iter()
            .any(|p| p.to_string().contains("editing") && p.to_string().contains("agent-1")))
        .await,
        "{:?}",
        relay.surface.activity()
    );

    // Another owner cannot use the attachment.
    let e = hp.status("someone-else", &id).await.unwrap_err();
    assert_eq!(e.code(), "attachment_unauthorized");

    // Detach: the attachment is done, the person's session lives on.
    let detached = hp.detach(OWNER, &id).await.unwrap();
    assert_eq!(detached.state(), AttachmentState::Detached);
    assert_eq!(
        hp.status(OWNER, &id).await.unwrap().state(),
        AttachmentState::Detached
    );
    assert!(relay.handle.sessions().contains(&relay.session));
    assert_eq!(relay.surface.ended(), None);
    let e = hp
        .call(OWNER, &id, "sheet_get_cell", json!({"address": "B4"}))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotAttached(_)), "{e:?}");
    assert_no_token(&e);
}

async fn lifecycle_plain_sse() {
    lifecycle(Relay::plain("plain-sse").await, ReceiveLeg::Sse).await;
}

async fn lifecycle_plain_poll() {
    lifecycle(Relay::plain("plain-poll").await, ReceiveLeg::fancy_poll()).await;
}

async fn lifecycle_tls_sse() {
    lifecycle(Relay::tls("tls-sse").await, ReceiveLeg::Sse).await;
}

async fn lifecycle_tls_poll() {
    lifecycle(Relay::tls("tls-poll").await, ReceiveLeg::fancy_poll()).await;
}

/// Two agents on one session, running at once, each on its own leg: each
/// gets its own replies only.
async fn two_agents_never_share_replies() {
    let relay = Relay::plain("two-agents").await;
    let sse = relay.manager(relay.config(ReceiveLeg::Sse, Duration::from_secs(30)));
    let poll = relay.manager(relay.config(ReceiveLeg::fancy_poll(), Duration::from_secs(30)));
    let a = sse
        .attach(OWNER, relay.invitation(), participant("agent-a"))
        .await
        .unwrap();
    let b = poll
        .attach(OWNER, relay.invitation(), participant("agent-b"))
        .await
        .unwrap();
    relay
        .surface
        .person()
        .set_cell("A1", "alpha-value")
        .unwrap();
    relay.surface.person().set_cell("B2", "beta-value").unwrap();
    for _ in 0..4 {
        let (ra, rb) = future::zip(
            sse.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"})),
            poll.call(OWNER, b.id(), "sheet_get_cell", json!({"address": "B2"})),
        )
        .await;
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert!(ra.text.contains("alpha-value") && !ra.text.contains("beta-value"));
        assert!(rb.text.contains("beta-value") && !rb.text.contains("alpha-value"));
    }
    // One manager, two attachments at once.
    let c = sse
        .attach(OWNER, relay.invitation(), participant("agent-c"))
        .await
        .unwrap();
    let (ra, rc) = future::zip(
        sse.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"})),
        sse.call(OWNER, c.id(), "sheet_get_cell", json!({"address": "B2"})),
    )
    .await;
    assert!(ra.unwrap().text.contains("alpha-value"));
    assert!(rc.unwrap().text.contains("beta-value"));
}

both!(
    lifecycle_plain_sse,
    lifecycle_plain_poll,
    lifecycle_tls_sse,
    lifecycle_tls_poll,
    two_agents_never_share_replies,
);

/// The futures are `Send`: a cloned manager moved into a task spawned on
/// a multi-threaded executor.
fn spawnable(hp: &HumanPlus, id: &str) -> impl std::future::Future<Output = ()> + Send + 'static {
    let hp = hp.clone();
    let id = id.to_owned();
    async move {
        let d = hp.tools(OWNER, &id).await.unwrap();
        assert!(!d.tools.is_empty());
        hp.call(OWNER, &id, "sheet_describe", json!({}))
            .await
            .unwrap();
    }
}

#[test]
fn spawned_on_async_std_task_pool() {
    async_std::task::block_on(async {
        let relay = Relay::plain("spawn-async-std").await;
        let hp = relay.manager(relay.config(ReceiveLeg::Sse, Duration::from_secs(30)));
        let a = hp
            .attach(OWNER, relay.invitation(), participant("agent-1"))
            .await
            .unwrap();
        async_std::task::spawn(spawnable(&hp, a.id())).await;
    });
}

#[test]
fn spawned_on_smol_executor() {
    smol::block_on(async {
        let relay = Relay::plain("spawn-smol").await;
        let hp = relay.manager(relay.config(ReceiveLeg::fancy_poll(), Duration::from_secs(30)));
        let a = hp
            .attach(OWNER, relay.invitation(), participant("agent-1"))
            .await
            .unwrap();
        smol::spawn(spawnable(&hp, a.id())).await;
    });
}
