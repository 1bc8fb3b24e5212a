//! The change-feed reader, `SurfaceChanges::read_from`, on any JSON.
//!
//! Input: byte 0 picks the feed state known before the call, the rest is
//! the tool's `result` (JSON text, or built from the bytes).
//!
//! Properties:
//! - `read_from` never panics;
//! - `read_from_bytes` on the value's text (and on the input's rest, when
//!   it is UTF-8) gives `read_from`'s answer, and refuses exactly what
//!   `Value` refuses;
//! - `defer_to()` ⊆ `changes()` (in order, every non-agent change, and
//!   nothing when the feed did not answer);
//! - `handles()` are unique, and are exactly the changes' handles in
//!   first-seen order;
//! - `nothing_changed()` ⇔ answered ∧ complete ∧ no changes;
//! - the feed is never downgraded, and only upgraded to `Attributed`;
//! - handles are non-blank and trimmed, labels trimmed, a revision token
//!   trimmed and ≤ 512 bytes, a refused revision means none;
//! - `to_json()` is valid JSON, equal to the `Serialize` output, and says
//!   what the accessors say.

#![no_main]

use std::collections::BTreeSet;

use human_plus_core::{
    ChangeActor, ChangeFeed, MAX_REVISION_BYTES, SurfaceChange, SurfaceChanges, trim_ascii_php,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let (sel, rest) = data.split_first().unwrap_or((&0, &[]));
    let feed = match sel % 4 {
        0 => ChangeFeed::Offered,
        1 => ChangeFeed::Attributed,
        2 => ChangeFeed::Unavailable,
        _ => ChangeFeed::NotObserved,
    };
    let result = human_plus_fuzz::json_from_bytes(rest);
    let a = SurfaceChanges::read_from(&result, feed);

    // The bytes reader answers as read_from on the same text, and refuses
    // exactly what `Value` refuses.
    let text = result.to_string();
    let from_bytes = SurfaceChanges::read_from_bytes(text.as_bytes(), feed);
    match serde_json::from_str::<Value>(&text) {
        Ok(v) => assert_eq!(from_bytes.ok(), Some(SurfaceChanges::read_from(&v, feed))),
        Err(_) => assert!(from_bytes.is_err()),
    }
    if let Ok(raw) = std::str::from_utf8(rest) {
        let from_raw = SurfaceChanges::read_from_bytes(raw.as_bytes(), feed);
        match serde_json::from_str::<Value>(raw) {
            Ok(v) => assert_eq!(from_raw.ok(), Some(SurfaceChanges::read_from(&v, feed))),
            Err(_) => assert!(from_raw.is_err()),
        }
    }

    // The feed states, kinds and actors as they are shown.
    assert_eq!(feed.to_string(), feed.as_str());
    assert!(!feed.describe().is_empty());
    assert_eq!(feed.is_unavailable(), feed == ChangeFeed::Unavailable);
    let none = SurfaceChanges::unavailable();
    assert_eq!(none.feed(), ChangeFeed::Unavailable);
    assert!(!none.answered() && none.changes().is_empty() && !none.nothing_changed());
    for c in a.changes() {
        assert_eq!(c.kind().to_string(), c.kind().as_str());
        assert_eq!(c.actor().to_string(), c.actor().as_str());
        assert_eq!(
            c.kind().leaves_handle_valid(),
            c.kind() != human_plus_core::ChangeKind::Deleted
        );
    }

    // Feed.
    if feed.is_answerable() {
        assert!(a.feed() == feed || a.feed() == ChangeFeed::Attributed);
    } else {
        assert_eq!(a.feed(), feed, "an unanswerable feed is never upgraded");
    }
    if feed == ChangeFeed::Attributed {
        assert_eq!(a.feed(), ChangeFeed::Attributed, "never downgraded");
    }
    let attributed = a
        .changes()
        .iter()
        .any(|c| matches!(c.actor(), ChangeActor::Human | ChangeActor::Other));
    if feed == ChangeFeed::Offered {
        assert_eq!(a.feed() == ChangeFeed::Attributed, attributed);
    }
    assert_eq!(a.answered(), feed.is_answerable());
    if !result.is_object() {
        assert!(a.changes().is_empty() && !a.complete() && a.revision().is_none());
    }

    // defer_to ⊆ changes.
    let defer = a.defer_to();
    if !a.answered() {
        assert!(defer.is_empty());
    } else {
        let expected: Vec<&SurfaceChange> = a
            .changes()
            .iter()
            .filter(|c| c.actor() != ChangeActor::Agent)
            .collect();
        assert_eq!(defer, expected);
    }
    for d in &defer {
        assert!(
            a.changes().iter().any(|c| std::ptr::eq(c, *d)),
            "defer_to names a change that is not in changes"
        );
    }

    // handles.
    let handles = a.handles();
    let unique: BTreeSet<&str> = handles.iter().copied().collect();
    assert_eq!(unique.len(), handles.len(), "handles are unique");
    let mut seen = BTreeSet::new();
    let first_seen: Vec<&str> = a
        .changes()
        .iter()
        .map(SurfaceChange::handle)
        .filter(|h| seen.insert(*h))
        .collect();
    assert_eq!(handles, first_seen);
    for c in a.changes() {
        assert!(!c.handle().is_empty());
        assert_eq!(trim_ascii_php(c.handle()), c.handle());
        assert_eq!(trim_ascii_php(c.label()), c.label());
    }

    // nothing_changed.
    assert_eq!(
        a.nothing_changed(),
        a.answered() && a.complete() && a.changes().is_empty()
    );

    // Revision.
    if let Some(r) = a.revision() {
        assert!(!a.revision_refused());
        assert!(r.token().len() <= MAX_REVISION_BYTES);
        assert!(!r.token().is_empty());
        assert_eq!(trim_ascii_php(r.token()), r.token());
    }

    // to_json.
    let text = a.to_json();
    let v: Value = serde_json::from_str(&text).expect("to_json is JSON");
    assert_eq!(
        text,
        serde_json::to_string(&a).unwrap(),
        "to_json = Serialize"
    );
    assert_eq!(v["feed"], a.feed().as_str());
    assert_eq!(v["complete"], a.complete());
    assert_eq!(v["answered"], a.answered());
    assert_eq!(v["nothing_changed"], a.nothing_changed());
    assert_eq!(v["attributes"], a.attributes());
    assert_eq!(v["revision"].as_str(), a.revision().map(|r| r.token()));
    let rows = v["changes"].as_array().unwrap();
    assert_eq!(rows.len(), a.changes().len());
    for (row, c) in rows.iter().zip(a.changes()) {
        assert_eq!(row["handle"], c.handle());
        assert_eq!(row["label"], c.label());
        assert_eq!(row["kind"], c.kind().as_str());
        assert_eq!(row["actor"], c.actor().as_str());
    }
    let defer_json: Vec<&str> = v["defer_to"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    let defer_handles: Vec<&str> = defer.iter().map(|c| c.handle()).collect();
    assert_eq!(defer_json, defer_handles);
    let handles_json: Vec<&str> = v["handles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert_eq!(handles_json, handles);

    // Every row alone reads as the change read_from made of it.
    let _ = a.describe();
});
