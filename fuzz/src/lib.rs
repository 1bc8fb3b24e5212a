//! Helpers shared by the fuzz targets: fuzzer-chosen split points, and JSON
//! values built from raw bytes (parsed when the bytes are JSON text, built
//! structurally from a dictionary of the protocol's keys otherwise).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use arbitrary::Unstructured;
use serde_json::{Map, Number, Value};

/// Keys the core reads somewhere: revisions, change rows, feed envelopes,
/// JSON-RPC, poll envelopes, tool listings. Biasing object keys toward them
/// gets generated values past the first `get`.
pub const KEYS: &[&str] = &[
    "_meta",
    "revision",
    "surfaceRevision",
    "surface_revision",
    "version",
    "etag",
    "changes",
    "change_log",
    "changeLog",
    "events",
    "screens",
    "items",
    "complete",
    "is_complete",
    "isComplete",
    "partial",
    "is_partial",
    "isPartial",
    "truncated",
    "handle",
    "id",
    "screen_id",
    "screenId",
    "node_id",
    "nodeId",
    "key",
    "change",
    "change_kind",
    "changeKind",
    "event",
    "action",
    "op",
    "kind",
    "actor_type",
    "actorType",
    "actor",
    "by",
    "author",
    "changed_by",
    "changedBy",
    "actor_id",
    "label",
    "title",
    "name",
    "component",
    "component_kind",
    "code",
    "data",
    "reason",
    "message",
    "jsonrpc",
    "method",
    "result",
    "error",
    "params",
    "frames",
    "subscriber",
    "cursor",
    "next",
    "last_event_id",
    "messages",
    "description",
    "inputSchema",
    "type",
    "properties",
    "required",
    "content",
    "text",
    "isError",
    "structuredContent",
    "nextCursor",
    "tools",
    "protocolVersion",
];

/// String values the core matches against.
pub const WORDS: &[&str] = &[
    "",
    " ",
    "2.0",
    "r1",
    "r9",
    "  r42 ",
    "created",
    "updated",
    " Removed ",
    "moved",
    "reparented",
    "chart",
    "human",
    "Human",
    "agent",
    "assistant",
    "other",
    "sales-team",
    "conflict",
    " Conflict ",
    "revision_mismatch",
    "revision_stale",
    "stale_revision",
    "precondition_failed",
    "409",
    "screen_7",
    "s1",
    "c-n-1",
    "rs_1-ab-3",
    "Budget",
    "object",
    "text",
    "session_gone",
    "\u{0}",
    "\u{b}",
    "\u{2028}",
    "\u{10000}",
    "\u{feff}",
    "é",
];

/// Builds a JSON value from fuzz bytes, at most `depth` levels deep.
pub fn arb_json(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<Value> {
    let tag: u8 = u.arbitrary()?;
    let leaf = depth == 0;
    Ok(match tag % 12 {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::Number(Number::from(u.arbitrary::<i64>()?)),
        3 => Value::Number(Number::from(u.arbitrary::<u64>()?)),
        4 => {
            let f: f64 = u.arbitrary()?;
            Number::from_f64(f).map_or(Value::Null, Value::Number)
        }
        5 => Value::Number(Number::from(i64::from(u.arbitrary::<i16>()?))),
        6 | 7 => Value::String(arb_string(u)?),
        8 | 9 if !leaf => {
            let n = u.int_in_range(0..=6)?;
            let mut map = Map::new();
            for _ in 0..n {
                let key = arb_key(u)?;
                let value = arb_json(u, depth - 1)?;
                map.insert(key, value);
            }
            Value::Object(map)
        }
        10 | 11 if !leaf => {
            let n = u.int_in_range(0..=5)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(arb_json(u, depth - 1)?);
            }
            Value::Array(items)
        }
        _ => Value::String(arb_string(u)?),
    })
}

/// A key: usually one of [`KEYS`], sometimes anything.
pub fn arb_key(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    if u.ratio(7, 8)? {
        Ok((*u.choose(KEYS)?).to_owned())
    } else {
        u.arbitrary()
    }
}

/// A string: usually one of [`WORDS`] (sometimes padded), sometimes anything.
pub fn arb_string(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    match u.int_in_range(0..=5)? {
        0..=2 => Ok((*u.choose(WORDS)?).to_owned()),
        3 => {
            let w = *u.choose(WORDS)?;
            let n = u.int_in_range(0..=600)?;
            Ok(format!("{w}{}", "x".repeat(n)))
        }
        _ => u.arbitrary(),
    }
}

/// A JSON value from `data`: the bytes parsed as JSON when they are JSON
/// text (so the committed corpus is readable JSON), else built with
/// [`arb_json`].
pub fn json_from_bytes(data: &[u8]) -> Value {
    if let Ok(v) = serde_json::from_slice::<Value>(data) {
        return v;
    }
    let mut u = Unstructured::new(data);
    arb_json(&mut u, 5).unwrap_or(Value::Null)
}

/// Sorted split points into `0..=len` from fuzz bytes.
pub fn cuts(u: &mut Unstructured<'_>, len: usize, max_cuts: usize) -> Vec<usize> {
    let n = u.int_in_range(0..=max_cuts).unwrap_or(0);
    let mut out: Vec<usize> = (0..n)
        .map(|_| {
            u.arbitrary::<u16>()
                .map_or(0, |c| usize::from(c) % (len + 1))
        })
        .collect();
    out.sort_unstable();
    out
}

/// The pieces of `bytes` between `cuts` (sorted points in `0..=len`).
pub fn pieces<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for &c in cuts {
        let c = c.clamp(start, bytes.len());
        out.push(&bytes[start..c]);
        start = c;
    }
    out.push(&bytes[start..]);
    out
}

/// The long-poll dialect a poll target exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Fancy,
    Broker,
}

/// The poll targets' shared checks. Input: a 4-byte header (budget
/// selector, split seed), then the body.
///
/// - the same result whether the body is parsed whole, collected in
///   fuzzer-chosen chunks by `PollBodyBuffer`, or parsed with any budget at
///   least its length: the budget is a threshold, nothing else;
/// - over the budget is `FrameTooLarge` and nothing is kept;
/// - the buffer never holds more than its budget;
/// - every frame is a JSON object or array; frames + skipped = the items
///   of the list the body carried.
pub fn poll_check(data: &[u8], dialect: Dialect) {
    use human_plus_core::{
        Error, PollBodyBuffer, ProtocolError, parse_broker_poll, parse_fancy_poll,
    };

    let (header, body) = data.split_at(data.len().min(4));
    let mut h = [0u8; 4];
    h[..header.len()].copy_from_slice(header);
    let sel = u16::from_le_bytes([h[0], h[1]]);
    let max = match sel {
        0xffff => human_plus_core::DEFAULT_MAX_POLL_BODY_BYTES,
        s => usize::from(s) % 8192,
    };
    let cut_points = {
        let seed = u64::from(u16::from_le_bytes([h[2], h[3]]));
        let n = (seed % 9) as usize;
        let mut x = seed | 1;
        let mut v: Vec<usize> = (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 33) as usize) % (body.len() + 1)
            })
            .collect();
        v.sort_unstable();
        v
    };

    type Parsed = Result<(Vec<Value>, usize, Option<String>), Error>;
    let parse = |b: &[u8], m: usize| -> Parsed {
        match dialect {
            Dialect::Fancy => parse_fancy_poll(b, m).map(|p| (p.frames, p.skipped, p.subscriber)),
            Dialect::Broker => parse_broker_poll(b, m).map(|p| (p.frames, p.skipped, p.cursor)),
        }
    };
    let whole = parse(body, max);

    // Chunked through the buffer.
    let mut buf = PollBodyBuffer::new(max);
    let mut refused = false;
    for piece in pieces(body, &cut_points) {
        if buf.push(piece).is_err() {
            refused = true;
        }
        assert!(
            buf.as_bytes().len() <= max,
            "the buffer holds more than its budget"
        );
        if refused {
            assert!(buf.is_over_budget() && buf.as_bytes().is_empty());
        }
    }
    assert_eq!(buf.max_bytes(), max);
    let chunked: Parsed = match dialect {
        Dialect::Fancy => buf
            .parse_fancy()
            .map(|p| (p.frames, p.skipped, p.subscriber)),
        Dialect::Broker => buf.parse_broker().map(|p| (p.frames, p.skipped, p.cursor)),
    };
    assert_eq!(chunked, whole, "chunking changed the result");
    // A cleared buffer takes the body again, and reads the same.
    let mut again = if max == human_plus_core::DEFAULT_MAX_POLL_BODY_BYTES {
        PollBodyBuffer::default()
    } else {
        PollBodyBuffer::new(max)
    };
    let _ = again.push(body);
    again.clear();
    assert!(again.as_bytes().is_empty() && !again.is_over_budget());
    let _ = again.push(body);
    let reread: Parsed = match dialect {
        Dialect::Fancy => again
            .parse_fancy()
            .map(|p| (p.frames, p.skipped, p.subscriber)),
        Dialect::Broker => again
            .parse_broker()
            .map(|p| (p.frames, p.skipped, p.cursor)),
    };
    assert_eq!(reread, whole, "a cleared buffer read otherwise");

    let too_large = Err(Error::Protocol(ProtocolError::FrameTooLarge { limit: max }));
    if body.len() > max {
        assert_eq!(whole, too_large);
        assert!(refused);
        return;
    }
    assert!(!refused);
    // The budget is only a threshold.
    assert_eq!(parse(body, usize::MAX), whole);
    assert_eq!(parse(body, body.len()), {
        match &whole {
            Ok(x) => Ok(x.clone()),
            Err(e) => Err(e.clone()),
        }
    });

    let Ok((frames, skipped, _)) = &whole else {
        assert_eq!(
            whole,
            Err(Error::Protocol(ProtocolError::MalformedPollBody)),
            "the only errors are the budget and a malformed body"
        );
        return;
    };
    for f in frames {
        assert!(
            f.is_object() || f.is_array(),
            "a frame is an object or an array"
        );
    }
    // An independent count of what the body carried.
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let items = match (dialect, parsed) {
        (Dialect::Fancy, Some(Value::Object(m))) => match m.get("frames") {
            Some(Value::Array(a)) => a.len(),
            _ => 0,
        },
        (Dialect::Broker, Some(Value::Array(a))) => a.len(),
        (Dialect::Broker, Some(Value::Object(m))) => {
            let envelope = !m.contains_key("jsonrpc")
                && (m.is_empty()
                    || [
                        "frames",
                        "events",
                        "messages",
                        "cursor",
                        "next",
                        "last_event_id",
                    ]
                    .iter()
                    .any(|k| m.contains_key(*k)));
            if envelope {
                ["frames", "events", "messages"]
                    .iter()
                    .find_map(|k| m.get(*k).and_then(Value::as_array))
                    .map_or(0, Vec::len)
            } else {
                1
            }
        }
        _ => 0,
    };
    assert_eq!(frames.len() + skipped, items, "frames + skipped = items");
}

/// Characters a terminal must never receive from a surface unescaped:
/// controls (but the caller's line breaks), zero-width characters and
/// joiners, direction marks, embeddings, overrides and isolates, the byte
/// order mark, Unicode spaces other than U+0020, variation selectors and
/// tags. Written out here, independently of the core's own list.
pub fn must_be_escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00A0}'
                | '\u{00AD}'
                | '\u{061C}'
                | '\u{1680}'
                | '\u{180E}'
                | '\u{2000}'..='\u{200F}'
                | '\u{2028}'..='\u{202F}'
                | '\u{205F}'..='\u{206F}'
                | '\u{3000}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E007F}'
        )
}
