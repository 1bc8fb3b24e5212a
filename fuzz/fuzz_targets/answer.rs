//! Result framing and the change feed's answer over arbitrary results:
//! `ResultGuard::frame`, `outside_frames`, `feed_answer`,
//! `SurfaceChanges::read_from` / `read_from_bytes` / the feed-frame reader
//! (the path an SSE reply takes), `with_framed_labels`, and
//! `SurfaceChange`'s constructors.
//!
//! Input: byte 0 = the budget (0: none, else a few hundred bytes to 64
//! KiB), byte 1 = the surface id, tool name and feed kind; the rest is the
//! surface's text (lossy UTF-8), and the result when it is JSON (else a
//! value built from it).
//!
//! Properties:
//! - a framed result is within the budget, holds the text verbatim, and
//!   nothing of it is outside the frame: `outside_frames` of the framed text
//!   is its opening line alone, which quotes only escaped attribute values;
//!   over the budget is the only refusal;
//! - the feed's answer is Human+'s sentences, then one frame: outside the
//!   frame there is `describe()` and the deference list (a handle only when
//!   it is a plain identifier, else its place in the list), never a label;
//!   it is within the budget;
//! - the result read from its bytes is the result read from its value; a
//!   reply frame holding it is read as the value way reads its `result`;
//! - `to_json` is JSON and equals the `Serialize` output;
//! - every label framed by `with_framed_labels` is one whole frame;
//! - `SurfaceChange::new` and `from_row` keep only non-blank, trimmed
//!   handles and trimmed labels.

#![no_main]

use human_plus_core::{
    ChangeActor, ChangeFeed, ChangeKind, DEFER_HEADING, ResultGuard, SeededEntropy, SurfaceChange,
    SurfaceChanges, feed_answer, fuzz_read_feed_frame, is_plain_identifier, outside_frames,
    trim_ascii_php,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const SURFACES: [&str; 4] = ["sheet:one", "a\"b<c>&'d", "", "two\nlines"];
const TOOLS: [&str; 4] = ["changes_since", "bad name", "x\"><y", "sheet_read"];
const FEEDS: [ChangeFeed; 4] = [
    ChangeFeed::Offered,
    ChangeFeed::Attributed,
    ChangeFeed::Unavailable,
    ChangeFeed::NotObserved,
];

/// The opening line of a frame, as `outside_frames` leaves it.
fn opening(framed: &str) -> &str {
    framed.split('\n').next().unwrap_or_default()
}

fn check_frame(framed: &str, text: &str, guard: &ResultGuard) {
    if guard.max_bytes() > 0 {
        assert!(framed.len() <= guard.max_bytes(), "over the budget");
    }
    assert!(framed.contains(text), "the text is not in its frame");
    let open = opening(framed);
    assert_eq!(
        outside_frames(framed),
        open,
        "surface text outside the frame"
    );
    assert_eq!(open.matches('"').count(), 6, "an unescaped quote: {open}");
    assert_eq!(open.matches('<').count(), 1, "an unescaped <: {open}");
    assert_eq!(open.matches('>').count(), 1, "an unescaped >: {open}");
}

fuzz_target!(|data: &[u8]| {
    let budget = match data.first().copied().unwrap_or(0) {
        0 => 0,
        b => 200 + usize::from(b) * 256,
    };
    let sel = data.get(1).copied().unwrap_or(0);
    let rest = data.get(2..).unwrap_or_default();
    let text = String::from_utf8_lossy(rest);
    let surface = SURFACES[usize::from(sel & 3)];
    let tool = TOOLS[usize::from((sel >> 2) & 3)];
    let feed = FEEDS[usize::from((sel >> 4) & 3)];
    let guard = ResultGuard::new(budget);
    let mut entropy = SeededEntropy::new(u64::from(sel));

    // Framing.
    match guard.frame(surface, tool, &text, &mut entropy) {
        Ok(framed) => check_frame(&framed, &text, &guard),
        Err(e) => {
            assert!(budget > 0, "refused without a budget: {e:?}");
            let whole = ResultGuard::new(0)
                .frame(surface, tool, &text, &mut entropy)
                .expect("no budget, no refusal");
            assert!(whole.len() > budget, "refused within the budget");
        }
    }

    // The feed.
    let value = human_plus_fuzz::json_from_bytes(rest);
    let changes = SurfaceChanges::read_from(&value, feed);
    if serde_json::from_slice::<Value>(rest).is_ok() {
        let by_bytes = SurfaceChanges::read_from_bytes(rest, feed)
            .expect("JSON Value reads is JSON read_from_bytes reads");
        assert_eq!(
            by_bytes, changes,
            "read_from_bytes disagrees with read_from"
        );
    }
    let value_text = serde_json::to_string(&value).expect("a value is JSON");
    let frame = format!(r#"{{"jsonrpc":"2.0","id":"x","result":{value_text}}}"#);
    let value_way = value
        .is_object()
        .then_some(&value)
        .filter(|r| r.get("isError") != Some(&Value::Bool(true)))
        .map(|r| SurfaceChanges::read_from(r, feed));
    assert_eq!(
        fuzz_read_feed_frame(&frame, feed),
        value_way,
        "the feed frame is read otherwise than its result"
    );
    if let Ok(raw) = std::str::from_utf8(rest) {
        let value_way = serde_json::from_str::<Value>(raw).ok().and_then(|v| {
            v.get("result")
                .filter(|r| r.is_object())
                .filter(|r| r.get("isError") != Some(&Value::Bool(true)))
                .map(|r| SurfaceChanges::read_from(r, feed))
        });
        assert_eq!(fuzz_read_feed_frame(raw, feed), value_way, "{raw}");
    }

    let json = changes.to_json();
    let parsed: Value = serde_json::from_str(&json).expect("to_json is JSON");
    assert_eq!(parsed, serde_json::to_value(&changes).unwrap());

    for c in changes.changes() {
        assert!(!c.handle().is_empty());
        assert_eq!(trim_ascii_php(c.handle()), c.handle());
        assert_eq!(trim_ascii_php(c.label()), c.label());
    }

    // The answer a model reads.
    match feed_answer(&changes, &guard, surface, tool, &mut entropy) {
        Ok(answer) => {
            if budget > 0 {
                assert!(answer.len() <= budget, "the answer is over the budget");
            }
            let mut said = changes.describe();
            let defer = changes.defer_to();
            if !defer.is_empty() {
                said.push('\n');
                said.push_str(DEFER_HEADING);
                for c in &defer {
                    said.push_str("\n- ");
                    if is_plain_identifier(c.handle()) {
                        said.push_str(c.handle());
                    } else {
                        let place = changes
                            .changes()
                            .iter()
                            .position(|x| std::ptr::eq(x, *c))
                            .expect("defer_to is a part of changes")
                            + 1;
                        said.push_str(&format!("change {place} of the list below"));
                    }
                    said.push_str(&format!(
                        " ({} by {})",
                        c.kind().as_str(),
                        c.actor().as_str()
                    ));
                }
            }
            said.push('\n');
            let framed = answer
                .strip_prefix(said.as_str())
                .unwrap_or_else(|| panic!("the answer does not start with {said:?}: {answer:?}"));
            assert_eq!(
                outside_frames(&answer),
                format!("{said}{}", opening(framed)),
                "surface text outside the answer's frame"
            );
        }
        Err(e) => assert!(budget > 0, "an answer refused without a budget: {e:?}"),
    }

    // Labels framed one by one.
    let label_guard = ResultGuard::new(0);
    let framed = changes
        .clone()
        .with_framed_labels(|l| label_guard.frame(surface, tool, l, &mut entropy))
        .expect("no budget, no refusal");
    for (c, f) in changes.changes().iter().zip(framed.changes()) {
        assert_eq!(c.handle(), f.handle());
        if c.label().is_empty() {
            assert!(f.label().is_empty());
        } else {
            check_frame(f.label(), c.label(), &label_guard);
        }
    }

    // The constructors.
    let handle: String = text.chars().take(16).collect();
    let handle = handle.as_str();
    let made = SurfaceChange::new(
        handle,
        ChangeKind::parse(&value),
        ChangeActor::parse(&value),
        &*text,
    );
    match made {
        Some(c) => {
            assert_eq!(c.handle(), trim_ascii_php(handle));
            assert!(!c.handle().is_empty());
            assert_eq!(c.label(), trim_ascii_php(&text));
        }
        None => assert!(trim_ascii_php(handle).is_empty()),
    }
    if let Some(rows) = value.get("changes").and_then(Value::as_array) {
        for row in rows {
            if let Some(c) = SurfaceChange::from_row(row) {
                assert!(row.is_object());
                assert!(!c.handle().is_empty());
                assert_eq!(trim_ascii_php(c.handle()), c.handle());
            }
        }
    }
});
