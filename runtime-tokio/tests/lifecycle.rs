//! The whole lifecycle of an attachment over real sockets, on both receive
//! legs, over plain HTTP (loopback development mode) and over TLS.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use human_plus_relay::{CallOutcome, SurfaceLeg};
use human_plus_tokio::core::{AttachmentState, ToolRefusal};
use human_plus_tokio::{
    Activity, ConflictDetection, Error, HumanPlus, NO_PINS, Priority, ReceiveLeg, TrustPolicy,
};
use serde_json::json;

async fn lifecycle(wire: Wire, leg: ReceiveLeg) {
    let relay = Relay::start(wire).await;
    let session = "life-cycle";
    let surface = relay.surface(session, page_leg(&leg)).await;
    let hp = relay.manager(relay.config(leg.clone(), Duration::from_secs(30)));
    let ctx = format!("{wire:?} {leg:?}");

    // attach: no network.
    let record = hp
        .attach(OWNER, relay.invitation(session, TOKEN), participant())
        .await
        .unwrap();
    assert!(record.is_attached());
    let id = record.id().to_owned();

    // tools: the reserved confirmation tool is withheld, even though the
    // allowlist names it.
    let discovery = bounded("tools", hp.tools(OWNER, &id)).await.unwrap();
    let names: Vec<&str> = discovery.tools.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "sheet_describe",
            "sheet_get_cell",
            "sheet_set_cell",
            "changes_since"
        ],
        "{ctx}"
    );
    assert!(
        discovery
            .withheld
            .iter()
            .any(|w| w.name == "sheet_confirm_edit" && matches!(w.reason, ToolRefusal::Reserved(_))),
        "{ctx}: {:?}",
        discovery.withheld
    );
    let err = bounded(
        "confirm",
        hp.call(OWNER, &id, "sheet_confirm_edit", json!({})),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "tool_refused", "{ctx}");

    // A read, with its revision.
    let read = bounded(
        "read",
        hp.call(OWNER, &id, "sheet_get_cell", json!({"address": "B4"})),
    )
    .await
    .unwrap();
    assert!(read.text.contains("<untrusted-tool-output"), "{ctx}");
    assert!(read.text.contains('7'), "{ctx}: {}", read.text);
    assert_eq!(
        read.revision.as_ref().map(|r| r.token()),
        Some("r1"),
        "{ctx}"
    );

    // The person edits; the agent's pinned write is refused, nothing written.
    assert_eq!(surface.person().set_cell("B4", "12").unwrap(), "r2");
    let err = bounded(
        "stale write",
        hp.call(
            OWNER,
            &id,
            "sheet_set_cell",
            json!({"address": "B4", "value": "99"}),
        ),
    )
    .await
    .unwrap_err();
    let Error::SurfaceChangedUnderYou(refusal) = &err else {
        panic!("{ctx}: {err:?}")
    };
    assert_eq!(refusal.pinned().map(|r| r.token()), Some("r1"), "{ctx}");
    assert_eq!(surface.cell("B4").as_deref(), Some("12"), "{ctx}");
    assert!(surface.writes().is_empty(), "{ctx}: nothing was written");
    assert!(
        surface
            .calls()
            .iter()
            .any(|c| matches!(c.outcome, CallOutcome::Refused { .. })),
        "{ctx}"
    );
    assert_eq!(
        hp.conflict_detection(OWNER, &id).await.unwrap(),
        ConflictDetection::Enforced,
        "{ctx}"
    );

    // changes_since defers to the person's change.
    let changes = bounded("changes", hp.changes_since(OWNER, &id))
        .await
        .unwrap();
    assert!(changes.answered(), "{ctx}");
    let defer: Vec<&str> = changes.defer_to().iter().map(|c| c.handle()).collect();
    assert!(defer.contains(&"B4"), "{ctx}: {}", changes.describe());

    // Re-read, then a successful write.
    let reread = bounded(
        "re-read",
        hp.call(OWNER, &id, "sheet_get_cell", json!({"address": "B4"})),
    )
    .await
    .unwrap();
    assert!(reread.text.contains("12"), "{ctx}: {}", reread.text);
    let wrote = bounded(
        "write",
        hp.call(
            OWNER,
            &id,
            "sheet_set_cell",
            json!({"address": "B4", "value": "13"}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        wrote.pinned.as_ref().map(|r| r.token()),
        Some("r2"),
        "{ctx}"
    );
    assert_eq!(surface.cell("B4").as_deref(), Some("13"), "{ctx}");
    assert_eq!(surface.writes().len(), 1, "{ctx}");

    // announce: seen by the surface, as an agent.
    bounded(
        "announce",
        hp.announce(
            OWNER,
            &id,
            &Activity::new("editing")
                .target("B4")
                .priority(Priority::Attention),
        ),
    )
    .await
    .unwrap();
    assert!(
        surface
            .wait_for(PATIENCE, |s| !s.activity().is_empty())
            .await,
        "{ctx}: the activity reached the surface"
    );
    let activity = surface.activity();
    assert_eq!(activity[0]["actor"]["type"], "agent", "{ctx}");
    assert_eq!(activity[0]["action"], "editing", "{ctx}");
    assert_eq!(activity[0]["target"], "B4", "{ctx}");

    // detach leaves the person's session alive.
    let detached = bounded("detach", hp.detach(OWNER, &id)).await.unwrap();
    assert_eq!(detached.state(), AttachmentState::Detached);
    assert_eq!(
        hp.status(OWNER, &id).await.unwrap().state(),
        AttachmentState::Detached
    );
    assert_eq!(relay.handle.sessions(), vec![session.to_owned()], "{ctx}");
    assert_eq!(surface.ended(), None, "{ctx}");
    let err = hp.tools(OWNER, &id).await.unwrap_err();
    assert_eq!(err.code(), "attachment_not_attached", "{ctx}");

    // Another owner never sees the attachment.
    let err = hp.status("conversation:two", &id).await.unwrap_err();
    assert_eq!(err.code(), "attachment_unauthorized", "{ctx}");

    surface.shutdown().await;
    relay.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_plain_sse() {
    lifecycle(Wire::Plain, ReceiveLeg::Sse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_plain_fancy_poll() {
    lifecycle(Wire::Plain, ReceiveLeg::fancy_poll()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_tls_sse() {
    lifecycle(Wire::Tls, ReceiveLeg::Sse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_tls_fancy_poll() {
    lifecycle(Wire::Tls, ReceiveLeg::fancy_poll()).await;
}

/// A pinned definition is admitted; a changed one refuses the whole
/// operation before any call.
#[tokio::test(flavor = "multi_thread")]
async fn pins_admit_and_refuse() {
    let relay = Relay::start(Wire::Plain).await;
    let surface = relay.surface("pinned-tools", SurfaceLeg::Sse).await;
    let hp = relay.manager(relay.config(ReceiveLeg::Sse, Duration::from_secs(30)));
    let id = hp
        .attach(
            OWNER,
            relay.invitation("pinned-tools", TOKEN),
            participant(),
        )
        .await
        .unwrap()
        .id()
        .to_owned();
    let discovery = bounded("tools", hp.tools(OWNER, &id)).await.unwrap();
    let digest = discovery
        .tools
        .iter()
        .find(|t| t.name() == "sheet_get_cell")
        .unwrap()
        .digest();

    let mut config = relay.config(ReceiveLeg::Sse, Duration::from_secs(30));
    config.trust = TrustPolicy::allowing(["sheet_get_cell"], [("sheet_get_cell", digest.as_str())]);
    let pinned = relay.manager(config);
    let id = pinned
        .attach(
            OWNER,
            relay.invitation("pinned-tools", TOKEN),
            participant(),
        )
        .await
        .unwrap()
        .id()
        .to_owned();
    let ok = bounded(
        "pinned read",
        pinned.call(OWNER, &id, "sheet_get_cell", json!({"address": "A2"})),
    )
    .await
    .unwrap();
    assert!(ok.text.contains("Apples"));

    let mut config = relay.config(ReceiveLeg::Sse, Duration::from_secs(30));
    config.trust = TrustPolicy::every_tool(NO_PINS)
        .with_pin("sheet_get_cell", "sha256:00000000000000000000000000000000");
    let wrong = relay.manager(config);
    let id = wrong
        .attach(
            OWNER,
            relay.invitation("pinned-tools", TOKEN),
            participant(),
        )
        .await
        .unwrap()
        .id()
        .to_owned();
    let calls_before = surface.calls().len();
    let err = bounded(
        "mismatched pin",
        wrong.call(OWNER, &id, "sheet_get_cell", json!({"address": "A2"})),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err,
        Error::ToolRefused(ToolRefusal::PinChanged("sheet_get_cell".into()))
    );
    assert_eq!(surface.calls().len(), calls_before, "nothing was called");

    surface.shutdown().await;
    relay.handle.shutdown().await;
}

/// Two agents on one session, calling at the same time, each get their
/// own replies.
#[tokio::test(flavor = "multi_thread")]
async fn two_agents_never_receive_each_others_replies() {
    for leg in legs() {
        let relay = Relay::start(Wire::Plain).await;
        let surface = relay.surface("two-agents", page_leg(&leg)).await;
        let config = relay.config(leg.clone(), Duration::from_secs(30));
        let a = relay.manager(config.clone());
        let b = relay.manager(config);
        let ida = a
            .attach(OWNER, relay.invitation("two-agents", TOKEN), participant())
            .await
            .unwrap()
            .id()
            .to_owned();
        let idb = b
            .attach(OWNER, relay.invitation("two-agents", TOKEN), participant())
            .await
            .unwrap()
            .id()
            .to_owned();
        for round in 0..3 {
            let (ra, rb) = tokio::join!(
                bounded(
                    "a",
                    a.call(OWNER, &ida, "sheet_get_cell", json!({"address": "A2"}))
                ),
                bounded(
                    "b",
                    b.call(OWNER, &idb, "sheet_get_cell", json!({"address": "A3"}))
                ),
            );
            let (ra, rb) = (ra.unwrap(), rb.unwrap());
            assert!(
                ra.text.contains("Apples") && !ra.text.contains("Pears"),
                "{leg:?} {round}"
            );
            assert!(
                rb.text.contains("Pears") && !rb.text.contains("Apples"),
                "{leg:?} {round}"
            );
        }
        surface.shutdown().await;
        relay.handle.shutdown().await;
    }
}

/// A manager is shared across spawned tasks: every operation's future is
/// `Send`.
#[tokio::test(flavor = "multi_thread")]
async fn operations_spawn_on_a_multi_threaded_runtime() {
    fn assert_send<T: Send>(t: T) -> T {
        t
    }
    let relay = Relay::start(Wire::Plain).await;
    let surface = relay.surface("spawned", SurfaceLeg::Sse).await;
    let hp: HumanPlus = relay.manager(relay.config(ReceiveLeg::Sse, Duration::from_secs(30)));
    let id = hp
        .attach(OWNER, relay.invitation("spawned", TOKEN), participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    let tasks: Vec<_> = ["A2", "A3", "A4"]
        .into_iter()
        .map(|cell| {
            let hp = hp.clone();
            let id = id.clone();
            tokio::spawn(assert_send(async move {
                hp.call(OWNER, &id, "sheet_get_cell", json!({ "address": cell }))
                    .await
            }))
        })
        .collect();
    for task in tasks {
        let r = bounded("spawned call", task).await.unwrap().unwrap();
        assert!(r.text.contains("<untrusted-tool-output"));
    }
    // The store lock serialised them: three calls, one record, no conflict.
    assert_eq!(
        surface
            .calls()
            .iter()
            .filter(|c| c.tool == "sheet_get_cell")
            .count(),
        3
    );
    surface.shutdown().await;
    relay.handle.shutdown().await;
}
