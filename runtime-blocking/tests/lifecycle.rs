//! The whole lifecycle of an attachment, on both receive legs, over plain
//! loopback HTTP and over TLS, against the relay and the demo surface.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use human_plus_blocking::core::{AttachmentState, ToolRefusal};
use human_plus_blocking::{
    Activity, ConflictDetection, Error, Priority, ReceiveLeg, SurfaceAttachment, TrustPolicy,
};
use human_plus_relay::CallOutcome;
use serde_json::json;

fn lifecycle(world: &World, leg: &ReceiveLeg) {
    let hp = world.manager(leg);
    let a: SurfaceAttachment = hp.attach(OWNER, world.invitation(), participant()).unwrap();
    let id = a.id().to_owned();
    assert!(a.is_attached());

    // Discovery: the reserved confirmation tool is withheld.
    let d = hp.tools(OWNER, &id).unwrap();
    let names: Vec<&str> = d.tools.iter().map(|t| t.name()).collect();
    assert!(names.contains(&"sheet_get_cell"), "{names:?}");
    assert!(names.contains(&"sheet_set_cell"));
    assert!(names.contains(&"changes_since"));
    assert!(!names.contains(&"sheet_confirm_edit"));
    assert!(
        d.withheld
            .iter()
            .any(|w| w.name == "sheet_confirm_edit" && matches!(w.reason, ToolRefusal::Reserved(_))),
        "{:?}",
        d.withheld
    );
    assert!(matches!(
        hp.call(OWNER, &id, "sheet_confirm_edit", json!({"pendingId": "p1"})),
        Err(Error::ToolRefused(ToolRefusal::NotOffered(_)))
    ));

    // A read returns the surface's revision.
    let read = hp
        .call(OWNER, &id, "sheet_get_cell", json!({"address": "B4"}))
        .unwrap();
    assert!(
        read.text.contains("<untrusted-tool-output"),
        "{}",
        read.text
    );
    let seen = read
        .revision
        .clone()
        .expect("the demo surface mints revisions");
    assert_eq!(seen.token(), world.surface().revision());

    // The person edits; the agent's write, pinned to what it read, is refused.
    world.surface().person().set_cell("B4", "12").unwrap();
    let refused = hp
        .call(
            OWNER,
            &id,
            "sheet_set_cell",
            json!({"address": "B4", "value": "99"}),
        )
        .unwrap_err();
    let Error::SurfaceChangedUnderYou(refusal) = &refused else {
        panic!("{refused:?}")
    };
    assert_eq!(refusal.pinned().map(|r| r.token()), Some(seen.token()));
    assert_eq!(world.surface().cell("B4").as_deref(), Some("12"));
    assert!(world.surface().writes().is_empty(), "nothing was written");
    assert!(world.surface().calls().iter().any(|c| c.tool == "sheet_set_cell"
        && matches!(c.outcome, CallOutcome::Refused { .. })));
    assert_eq!(
        hp.conflict_detection(OWNER, &id).unwrap(),
        ConflictDetection::Enforced
    );

    // The change feed defers to the person's edit.
    let changes = hp.changes_since(OWNER, &id).unwrap();
    assert!(changes.answered());
    let defer: Vec<&str> = changes.defer_to().iter().map(|c| c.handle()).collect();
    assert!(defer.contains(&"B4"), "{defer:?}");

    // Re-read, then the write goes through.
    let again = hp
        .call(OWNER, &id, "sheet_get_cell", json!({"address": "B4"}))
        .unwrap();
    assert!(again.text.contains("12"));
    let written = hp
        .call(
            OWNER,
            &id,
            "sheet_set_cell",
            json!({"address": "B4", "value": "99"}),
        )
        .unwrap();
    assert!(written.revision.is_some());
    assert_eq!(world.surface().cell("B4").as_deref(), Some("99"));
    assert_eq!(world.surface().writes().len(), 1);

    // Activity reaches the surface.
    hp.announce(
        OWNER,
        &id,
        &Activity::new("editing")
            .target("cell:B4")
            .priority(Priority::Attention),
    )
    .unwrap();
    assert!(world.wait_for(|s| {
        s.activity()
            .iter()
            .any(|p| p["action"] == "editing" && p["target"] == "cell:B4")
    }));

    // Detach leaves the person's session alive.
    let detached = hp.detach(OWNER, &id).unwrap();
    assert_eq!(detached.state(), AttachmentState::Detached);
    assert_eq!(
        hp.status(OWNER, &id).unwrap().state(),
        AttachmentState::Detached
    );
    assert!(world.relay().sessions().contains(&world.session));
    assert_eq!(world.surface().ended(), None);
    assert_eq!(
        hp.call(OWNER, &id, "sheet_get_cell", json!({"address": "A1"}))
            .unwrap_err(),
        Error::NotAttached(AttachmentState::Detached)
    );
}

#[test]
fn lifecycle_over_http_sse() {
    let world = World::http("http-sse");
    lifecycle(&world, &ReceiveLeg::Sse);
}

#[test]
fn lifecycle_over_http_fancy_poll() {
    let world = World::http("http-poll");
    lifecycle(&world, &legs()[1]);
}

#[test]
fn lifecycle_over_tls_sse() {
    let world = World::tls("tls-sse");
    lifecycle(&world, &ReceiveLeg::Sse);
}

#[test]
fn lifecycle_over_tls_fancy_poll() {
    let world = World::tls("tls-poll");
    lifecycle(&world, &legs()[1]);
}

#[test]
fn pinned_definitions_are_admitted_and_a_changed_pin_refuses_discovery() {
    let world = World::http("pins");
    for leg in legs() {
        let hp = world.manager(&leg);
        let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
        let digest = hp
            .tools(OWNER, a.id())
            .unwrap()
            .tools
            .iter()
            .find(|t| t.name() == "sheet_set_cell")
            .unwrap()
            .digest();

        let mut config = world.config(&leg, SOON);
        config.trust = TrustPolicy::allowing(TOOLS, [("sheet_set_cell", digest.as_str())]);
        let pinned = world.manager_with(config.clone());
        let b = pinned
            .attach(OWNER, world.invitation(), participant())
            .unwrap();
        let d = pinned.tools(OWNER, b.id()).unwrap();
        assert!(d.tools.iter().any(|t| t.name() == "sheet_set_cell"));

        config.trust = TrustPolicy::allowing(
            TOOLS,
            [("sheet_set_cell", "sha256:00000000000000000000000000000000")],
        );
        let wrong = world.manager_with(config);
        let c = wrong
            .attach(OWNER, world.invitation(), participant())
            .unwrap();
        let before = world.surface().calls().len();
        assert_eq!(
            wrong
                .call(
                    OWNER,
                    c.id(),
                    "sheet_set_cell",
                    json!({"address": "A1", "value": "x"})
                )
                .unwrap_err(),
            Error::ToolRefused(ToolRefusal::PinChanged("sheet_set_cell".into()))
        );
        assert_eq!(world.surface().calls().len(), before, "never called");
    }
}

#[test]
fn undeclared_trust_touches_nothing() {
    let world = World::http("undeclared");
    let mut config = world.config(&ReceiveLeg::Sse, SOON);
    config.trust = TrustPolicy::undeclared();
    let hp = world.manager_with(config);
    let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
    assert_eq!(
        hp.tools(OWNER, a.id()).unwrap_err(),
        Error::ToolRefused(ToolRefusal::Undeclared)
    );
    assert_eq!(
        world.relay().subscribers(&world.session).len(),
        1,
        "only the page is subscribed"
    );
}

#[test]
fn another_owner_and_a_missing_attachment() {
    let world = World::http("owners");
    let hp = world.manager(&ReceiveLeg::Sse);
    let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
    assert_eq!(
        hp.status("session:other", a.id()).unwrap_err().code(),
        "attachment_unauthorized"
    );
    assert_eq!(
        hp.tools("session:other", a.id()).unwrap_err().code(),
        "attachment_unauthorized"
    );
    assert_eq!(
        hp.tools(OWNER, "surface_missing").unwrap_err(),
        Error::AttachmentMissing
    );
    assert_eq!(
        hp.status(OWNER, "surface_missing").unwrap_err(),
        Error::AttachmentMissing
    );
    assert_eq!(
        hp.attach("  ", world.invitation(), participant())
            .unwrap_err(),
        Error::InvalidOwner
    );
}

#[test]
fn a_second_manager_over_the_same_store_stays_pinned() {
    let world = World::http("two-workers");
    let first = world.manager(&ReceiveLeg::Sse);
    let a = first
        .attach(OWNER, world.invitation(), participant())
        .unwrap();
    first
        .call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    // Another worker, same store: it has not initialised, but it carries
    // the revision the first one read.
    let second = human_plus_blocking::HumanPlus::builder(first.config().clone())
        .store(first.store().clone())
        .build()
        .unwrap();
    world.surface().person().set_cell("A1", "changed").unwrap();
    assert_eq!(
        second
            .call(
                OWNER,
                a.id(),
                "sheet_set_cell",
                json!({"address": "A1", "value": "agent"})
            )
            .unwrap_err()
            .code(),
        "surface_changed_under_you"
    );
    assert_eq!(world.surface().cell("A1").as_deref(), Some("changed"));
}

#[test]
fn the_manager_is_send_sync_and_cheap_to_share() {
    fn shared<T: Send + Sync + Clone + 'static>() {}
    shared::<human_plus_blocking::HumanPlus>();
    let world = World::http("shared");
    let hp = world.manager(&ReceiveLeg::Sse);
    let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
    // Two threads on one attachment: the store's lock serialises them.
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let (hp, id) = (hp.clone(), a.id().to_owned());
            std::thread::spawn(move || {
                hp.call(OWNER, &id, "sheet_get_cell", json!({"address": "A1"}))
                    .map(|r| r.revision.is_some())
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), Ok(true));
    }
}
