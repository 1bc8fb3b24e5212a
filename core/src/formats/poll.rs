//! Long-poll bodies, in both dialects, parsed purely.
//!
//! * The Fancy relay's `GET /{s}/poll` answers
//!   `{"subscriber":"<id>","frames":["<raw frame>", ...]}`: each frame is a
//!   JSON **string** holding the raw POSTed frame. [`parse_fancy_poll`].
//! * Seed 000's broker dialect (`GET /{s}/outbox`, with an `after` cursor)
//!   answers one of four shapes. [`parse_broker_poll`].
//!
//! Both check the byte budget before anything else, and both skip (and
//! count) a frame that is not JSON rather than failing the poll: a garbage
//! frame from another client on the session must not kill this client's
//! exchange. [`PollBodyBuffer`] collects a body from chunks without ever
//! holding more than the budget.

use serde_json::Value;

use crate::error::{Error, ProtocolError};

/// The default byte budget of one long-poll body: 256 KiB.
pub const DEFAULT_MAX_POLL_BODY_BYTES: usize = 262_144;

/// A parsed Fancy relay poll answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FancyPoll {
    /// The subscriber id to echo on the next poll (`None` when the body had
    /// no string `subscriber`).
    pub subscriber: Option<String>,
    /// The frames, in order. A posted batch stays one `Value::Array`.
    pub frames: Vec<Value>,
    /// How many frames were skipped because they were not a JSON object or
    /// array (or a string holding one).
    pub skipped: usize,
}

/// A parsed broker-dialect poll answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BrokerPoll {
    /// The cursor to send back as `after`: the first of `cursor`, `next`,
    /// `last_event_id` holding a string or an integer (as decimal text).
    /// `None` means the body carried none: keep the previous cursor.
    pub cursor: Option<String>,
    /// The frames, in order.
    pub frames: Vec<Value>,
    /// How many frames were skipped (see [`FancyPoll::skipped`]).
    pub skipped: usize,
}

fn poll_too_large(limit: usize) -> Error {
    Error::Protocol(ProtocolError::FrameTooLarge { limit })
}

fn poll_malformed() -> Error {
    Error::Protocol(ProtocolError::MalformedPollBody)
}

/// Parses a Fancy relay `poll` body.
///
/// * longer than `max_bytes` → [`ProtocolError::FrameTooLarge`];
/// * empty, not JSON, not an object, or `frames` present but not a list →
///   [`ProtocolError::MalformedPollBody`];
/// * `frames` absent or `null` → no frames;
/// * each string frame is parsed as JSON; objects (and arrays, for a
///   batch) are also accepted as they are; anything else is skipped and
///   counted in [`FancyPoll::skipped`].
///
/// ```
/// use human_plus_core::parse_fancy_poll;
///
/// let body = br#"{"subscriber":"0123456789abcdef","frames":["{\"jsonrpc\":\"2.0\",\"id\":\"c-1\",\"result\":{}}","garbage"]}"#;
/// let poll = parse_fancy_poll(body, 1024)?;
/// assert_eq!(poll.subscriber.as_deref(), Some("0123456789abcdef"));
/// assert_eq!(poll.frames[0]["id"], "c-1");
/// assert_eq!(poll.skipped, 1);
/// # Ok::<(), human_plus_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::Protocol`] with `FrameTooLarge` or `MalformedPollBody`.
pub fn parse_fancy_poll(body: &[u8], max_bytes: usize) -> Result<FancyPoll, Error> {
    if body.len() > max_bytes {
        return Err(poll_too_large(max_bytes));
    }
    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(body) else {
        return Err(poll_malformed());
    };
    let subscriber = match map.remove("subscriber") {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    let mut poll = FancyPoll {
        subscriber,
        frames: Vec::new(),
        skipped: 0,
    };
    match map.remove("frames") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => poll_take_frames(items, &mut poll.frames, &mut poll.skipped),
        Some(_) => return Err(poll_malformed()),
    }
    Ok(poll)
}

/// Parses a broker-dialect poll body (seed 000), accepting:
///
/// * an empty or whitespace-only body, or `null` → no frames;
/// * one frame object: `{"jsonrpc":"2.0","id":...}`;
/// * a list of frames: `[{...},{...}]`;
/// * a list plus a cursor: `{"frames":[...],"cursor":"17"}`, also named
///   `events` / `messages` and `next` / `last_event_id`
///   (`{"events":[...],"next":17}`).
///
/// An object is an envelope when it has no `jsonrpc` key and has any of
/// the list or cursor keys (or no keys at all); the first list key holding
/// a list gives the frames. Otherwise it is one frame. Frames are taken as
/// [`parse_fancy_poll`] takes them (strings parsed as JSON). A scalar body
/// is [`ProtocolError::MalformedPollBody`], as is a body that is not JSON.
///
/// ```
/// use human_plus_core::parse_broker_poll;
///
/// let p = parse_broker_poll(br#"{"events":[{"id":"c-1","jsonrpc":"2.0","result":{}}],"next":17}"#, 1024)?;
/// assert_eq!(p.cursor.as_deref(), Some("17"));
/// assert_eq!(p.frames.len(), 1);
///
/// assert!(parse_broker_poll(b"  ", 1024)?.frames.is_empty());
/// assert_eq!(parse_broker_poll(br#"[{"id":1},{"id":2}]"#, 1024)?.frames.len(), 2);
/// # Ok::<(), human_plus_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::Protocol`] with `FrameTooLarge` or `MalformedPollBody`.
pub fn parse_broker_poll(body: &[u8], max_bytes: usize) -> Result<BrokerPoll, Error> {
    if body.len() > max_bytes {
        return Err(poll_too_large(max_bytes));
    }
    let mut poll = BrokerPoll::default();
    if body.trim_ascii().is_empty() {
        return Ok(poll);
    }
    let value: Value = serde_json::from_slice(body).map_err(|_| poll_malformed())?;
    match value {
        Value::Null => {}
        Value::Array(items) => poll_take_frames(items, &mut poll.frames, &mut poll.skipped),
        Value::Object(mut map) => {
            const LISTS: [&str; 3] = ["frames", "events", "messages"];
            const CURSORS: [&str; 3] = ["cursor", "next", "last_event_id"];
            let envelope = !map.contains_key("jsonrpc")
                && (map.is_empty()
                    || LISTS
                        .iter()
                        .chain(CURSORS.iter())
                        .any(|k| map.contains_key(*k)));
            if !envelope {
                poll_take_frames(
                    vec![Value::Object(map)],
                    &mut poll.frames,
                    &mut poll.skipped,
                );
                return Ok(poll);
            }
            poll.cursor = CURSORS.iter().find_map(|k| match map.get(*k) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(n.to_string()),
                _ => None,
            });
            let list = LISTS
                .iter()
                .find(|k| matches!(map.get(**k), Some(Value::Array(_))))
                .and_then(|k| map.remove(*k));
            if let Some(Value::Array(items)) = list {
                poll_take_frames(items, &mut poll.frames, &mut poll.skipped);
            }
        }
        _ => return Err(poll_malformed()),
    }
    Ok(poll)
}

/// Moves the acceptable frames of `items` into `out`, counting the rest.
fn poll_take_frames(items: Vec<Value>, out: &mut Vec<Value>, skipped: &mut usize) {
    out.reserve(items.len());
    for item in items {
        let frame = match item {
            Value::String(raw) => serde_json::from_str::<Value>(&raw).ok(),
            other => Some(other),
        };
        match frame {
            Some(f @ (Value::Object(_) | Value::Array(_))) => out.push(f),
            _ => *skipped += 1,
        }
    }
}

/// Collects a poll body from chunks, refusing it as soon as it would
/// exceed the budget, so a hostile or broken relay cannot make the client
/// buffer more than `max_bytes` (its capacity stays under twice that).
///
/// ```
/// use human_plus_core::{Error, PollBodyBuffer, ProtocolError};
///
/// let mut b = PollBodyBuffer::new(64);
/// b.push(br#"{"subscriber":"0123456789abcdef","#)?;
/// b.push(br#""frames":[]}"#)?;
/// assert!(b.parse_fancy()?.frames.is_empty());
///
/// let mut small = PollBodyBuffer::new(4);
/// assert_eq!(small.push(b"12345"), Err(Error::Protocol(ProtocolError::FrameTooLarge { limit: 4 })));
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollBodyBuffer {
    max: usize,
    body: Vec<u8>,
    over: bool,
}

impl Default for PollBodyBuffer {
    /// A buffer with [`DEFAULT_MAX_POLL_BODY_BYTES`].
    fn default() -> Self {
        PollBodyBuffer::new(DEFAULT_MAX_POLL_BODY_BYTES)
    }
}

impl PollBodyBuffer {
    /// An empty buffer with a budget of `max_bytes`.
    #[must_use]
    pub fn new(max_bytes: usize) -> Self {
        PollBodyBuffer {
            max: max_bytes,
            body: Vec::new(),
            over: false,
        }
    }

    /// Appends a chunk of the body.
    ///
    /// # Errors
    /// [`ProtocolError::FrameTooLarge`] when the body would exceed the
    /// budget; the buffer is then emptied and refuses every later chunk.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), Error> {
        if self.over || self.body.len().saturating_add(chunk.len()) > self.max {
            self.over = true;
            self.body = Vec::new();
            return Err(poll_too_large(self.max));
        }
        self.body.extend_from_slice(chunk);
        Ok(())
    }

    /// The bytes collected so far.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.body
    }

    /// The budget in bytes.
    #[must_use]
    pub fn max_bytes(&self) -> usize {
        self.max
    }

    /// Whether the budget was exceeded.
    #[must_use]
    pub fn is_over_budget(&self) -> bool {
        self.over
    }

    /// Parses the collected body with [`parse_fancy_poll`].
    ///
    /// # Errors
    /// As [`parse_fancy_poll`]; `FrameTooLarge` once over budget.
    pub fn parse_fancy(&self) -> Result<FancyPoll, Error> {
        if self.over {
            return Err(poll_too_large(self.max));
        }
        parse_fancy_poll(&self.body, self.max)
    }

    /// Parses the collected body with [`parse_broker_poll`].
    ///
    /// # Errors
    /// As [`parse_broker_poll`]; `FrameTooLarge` once over budget.
    pub fn parse_broker(&self) -> Result<BrokerPoll, Error> {
        if self.over {
            return Err(poll_too_large(self.max));
        }
        parse_broker_poll(&self.body, self.max)
    }

    /// Empties the buffer for the next poll (keeping its budget).
    pub fn clear(&mut self) {
        self.body.clear();
        self.over = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const TL: Error = Error::Protocol(ProtocolError::FrameTooLarge { limit: 8 });

    #[test]
    fn fancy_shapes() {
        let body = br#"{"subscriber":"abc","frames":["{\"id\":1}",{"id":2},"[{\"id\":3}]","42","not json",7,null]}"#;
        let p = parse_fancy_poll(body, 4096).unwrap();
        assert_eq!(p.subscriber.as_deref(), Some("abc"));
        assert_eq!(
            p.frames,
            vec![json!({"id":1}), json!({"id":2}), json!([{"id":3}])]
        );
        assert_eq!(p.skipped, 4);
        let empty = parse_fancy_poll(br#"{"subscriber":"abc","frames":[]}"#, 64).unwrap();
        assert!(empty.frames.is_empty());
        assert_eq!(
            parse_fancy_poll(br#"{"subscriber":7}"#, 64).unwrap(),
            FancyPoll::default()
        );
        for bad in [
            &b""[..],
            b"  ",
            b"[]",
            b"\"x\"",
            b"{",
            br#"{"frames":"x"}"#,
            b"null",
        ] {
            assert_eq!(
                parse_fancy_poll(bad, 64),
                Err(Error::Protocol(ProtocolError::MalformedPollBody)),
                "{bad:?}"
            );
        }
        assert_eq!(parse_fancy_poll(&[b' '; 9], 8), Err(TL));
    }

    #[test]
    fn broker_four_shapes_and_cursor() {
        let one =
            parse_broker_poll(br#"{"id":"rpc-1","jsonrpc":"2.0","result":{}}"#, 4096).unwrap();
        assert_eq!(one.frames.len(), 1);
        assert_eq!(one.cursor, None);
        let list = parse_broker_poll(br#"[{"a":1},{"b":2}]"#, 4096).unwrap();
        assert_eq!(list.frames.len(), 2);
        let fc = parse_broker_poll(br#"{"frames":[{"id":"x"}],"cursor":"17"}"#, 4096).unwrap();
        assert_eq!((fc.frames.len(), fc.cursor.as_deref()), (1, Some("17")));
        let en = parse_broker_poll(br#"{"events":[{"id":"x"}],"next":17}"#, 4096).unwrap();
        assert_eq!((en.frames.len(), en.cursor.as_deref()), (1, Some("17")));
        let ml = parse_broker_poll(
            br#"{"messages":["{\"id\":1}","bad"],"last_event_id":-3}"#,
            4096,
        )
        .unwrap();
        assert_eq!(
            (ml.frames.len(), ml.skipped, ml.cursor.as_deref()),
            (1, 1, Some("-3"))
        );
        // A float cursor is not a cursor; an empty first list wins.
        let f =
            parse_broker_poll(br#"{"frames":[],"events":[{"id":1}],"cursor":1.5}"#, 4096).unwrap();
        assert!(f.frames.is_empty() && f.cursor.is_none());
        // A list key that is not a list is passed over.
        let g = parse_broker_poll(br#"{"frames":null,"events":[{"id":1}]}"#, 4096).unwrap();
        assert_eq!(g.frames.len(), 1);
        for empty in [
            &b""[..],
            b" \r\n\t",
            b"null",
            b"{}",
            b"[]",
            br#"{"cursor":"3"}"#,
        ] {
            assert!(
                parse_broker_poll(empty, 64).unwrap().frames.is_empty(),
                "{empty:?}"
            );
        }
        for bad in [&b"42"[..], b"\"x\"", b"true", b"{", b"\xff"] {
            assert_eq!(
                parse_broker_poll(bad, 64),
                Err(Error::Protocol(ProtocolError::MalformedPollBody))
            );
        }
        assert_eq!(parse_broker_poll(&[b' '; 9], 8), Err(TL));
    }

    #[test]
    fn buffer_refuses_early_and_stays_refused() {
        let mut b = PollBodyBuffer::new(8);
        b.push(b"1234").unwrap();
        b.push(b"5678").unwrap();
        assert_eq!(b.push(b"9"), Err(TL));
        assert_eq!(b.push(b""), Err(TL));
        assert!(b.is_over_budget() && b.as_bytes().is_empty());
        assert_eq!(b.parse_broker(), Err(TL));
        b.clear();
        b.push(b"[]").unwrap();
        assert!(b.parse_broker().unwrap().frames.is_empty());
    }

    fn chunked(body: &[u8], max: usize, cuts: &[usize]) -> Result<PollBodyBuffer, Error> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        cuts.sort_unstable();
        let mut b = PollBodyBuffer::new(max);
        let mut start = 0;
        for c in cuts {
            b.push(&body[start..c])?;
            prop_assert_cap(&b, max);
            start = c;
        }
        b.push(&body[start..])?;
        prop_assert_cap(&b, max);
        Ok(b)
    }

    fn prop_assert_cap(b: &PollBodyBuffer, max: usize) {
        assert!(b.body.capacity() <= 2 * max + 16);
    }

    fn arb_frame() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9]{1,6}"
                .prop_map(|id| format!("{{\"jsonrpc\":\"2.0\",\"id\":\"{id}\",\"result\":{{}}}}")),
            "[ -~]{0,10}",
        ]
    }

    proptest! {
        #[test]
        fn fancy_split_anywhere_is_one_shot(
            frames in proptest::collection::vec(arb_frame(), 0..6),
            cuts in proptest::collection::vec(any::<usize>(), 0..10),
            max in 0usize..600,
        ) {
            let body = serde_json::to_vec(&json!({"subscriber": "0123456789abcdef", "frames": frames})).unwrap();
            let whole = parse_fancy_poll(&body, max);
            let split = chunked(&body, max, &cuts).and_then(|b| b.parse_fancy());
            prop_assert_eq!(&split, &whole);
            if body.len() > max {
                prop_assert_eq!(whole, Err(Error::Protocol(ProtocolError::FrameTooLarge { limit: max })));
            } else {
                let p = whole.unwrap();
                prop_assert_eq!(p.frames.len() + p.skipped, frames.len());
            }
        }

        #[test]
        fn broker_split_anywhere_is_one_shot(
            frames in proptest::collection::vec(arb_frame(), 0..6),
            shape in 0usize..4,
            cuts in proptest::collection::vec(any::<usize>(), 0..10),
            max in 0usize..600,
        ) {
            let objs: Vec<Value> = frames.iter().map(|f| serde_json::from_str(f).unwrap_or(json!(f))).collect();
            let v = match shape {
                0 => objs.first().cloned().unwrap_or(Value::Null),
                1 => json!(objs),
                2 => json!({"frames": objs, "cursor": "17"}),
                _ => json!({"events": objs, "next": 17}),
            };
            let body = serde_json::to_vec(&v).unwrap();
            let whole = parse_broker_poll(&body, max);
            let split = chunked(&body, max, &cuts).and_then(|b| b.parse_broker());
            prop_assert_eq!(&split, &whole);
            if body.len() <= max && shape >= 2 {
                prop_assert_eq!(whole.unwrap().cursor, Some("17".to_owned()));
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..300),
            cuts in proptest::collection::vec(any::<usize>(), 0..10),
            max in 0usize..400,
        ) {
            let f = parse_fancy_poll(&body, max);
            let b = parse_broker_poll(&body, max);
            prop_assert_eq!(&chunked(&body, max, &cuts).and_then(|x| x.parse_fancy()), &f);
            prop_assert_eq!(&chunked(&body, max, &cuts).and_then(|x| x.parse_broker()), &b);
        }

        #[test]
        fn arbitrary_json_never_panics(s in "[\\[\\]{}\",:0-9a-z ]{0,80}") {
            let _ = parse_fancy_poll(s.as_bytes(), 1024);
            let _ = parse_broker_poll(s.as_bytes(), 1024);
        }
    }
}
