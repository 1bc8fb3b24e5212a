//! The init cache is bounded: a service that served more attachments than
//! it remembers forgets one for each new one, and keeps the newest.

#![allow(clippy::unwrap_used)]

use human_plus_core::*;

#[test]
fn the_init_cache_is_bounded_and_keeps_the_newest() {
    let owner = OwnerKey::of("o").unwrap();
    let policy = EgressPolicy::new(["relay.example"]).egress_proxy("http://egress.internal:3128");
    let inv = SurfaceInvitation::new(
        "https://relay.example",
        "demo_001",
        "0123456789abcdef",
        "s",
        "a",
    )
    .unwrap();
    let mut entropy = SeededEntropy::new(1);
    let template = attach(
        &owner,
        inv,
        Participant::new("a", "A", "#000"),
        &policy,
        &mut entropy,
    )
    .unwrap();
    let mut cache = InitCache::new();
    let mut last = None;
    for n in 0..=MAX_INITIALISED {
        let record = attach_keyed(
            &owner,
            &format!("conversation-{n}"),
            template.invitation().clone(),
            Participant::new("a", "A", "#000"),
            &policy,
            &mut entropy,
        )
        .unwrap();
        cache.apply(&record, InitUpdate::Set(InitInfo { list_changed: true }));
        last = Some(record);
    }
    assert_eq!(cache.len(), MAX_INITIALISED, "bounded");
    assert!(cache.contains(&last.unwrap()), "the newest is kept");
}
