//! JSON-RPC 2.0 framing: request ids unique across clients, compact
//! single-line frames, and correlation that ignores everything but the
//! reply it waits for.

use serde::Serialize;
use serde_json::Value;

/// The MCP protocol revision this client speaks: what `initialize` asks
/// the surface for.
pub const MCP_PROTOCOL_VERSION: &str = "2025-06-18";

/// The revisions a surface may answer `initialize` with: every revision
/// that has the `initialize` handshake. Their `tools/list`,
/// `tools/call` and notifications are the same on the wire for what Human+
/// uses, so a surface answering another of them (MicroMcpServer with its
/// `protocolVersions` option answers `2025-11-25`) is accepted; any other
/// answer is refused with
/// [`ProtocolError::UnsupportedProtocolVersion`](crate::ProtocolError::UnsupportedProtocolVersion).
/// `2026-07-28` is not among them: it has no `initialize`.
///
/// ```
/// use human_plus_core::{MCP_PROTOCOL_VERSION, SURFACE_PROTOCOL_VERSIONS};
/// assert!(SURFACE_PROTOCOL_VERSIONS.contains(&MCP_PROTOCOL_VERSION));
/// assert!(SURFACE_PROTOCOL_VERSIONS.contains(&"2025-11-25"));
/// assert!(!SURFACE_PROTOCOL_VERSIONS.contains(&"2026-07-28"));
/// ```
pub const SURFACE_PROTOCOL_VERSIONS: [&str; 4] =
    ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The `clientInfo.name` sent in `initialize`.
pub const CLIENT_NAME: &str = "human-plus-rs";

/// The `clientInfo.version` sent in `initialize`: this crate's version.
pub const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Mints request ids of the form `<client>-<nonce>-<n>`.
///
/// The Fancy relay routes a reply by its id, per session, last writer wins:
/// two clients that both send id `1` receive each other's replies. The
/// client id makes ids unique across attachments; the nonce (drawn per
/// operation) makes them unique across workers that share one attachment;
/// the counter makes them unique within an operation.
///
/// ```
/// use human_plus_core::RequestIds;
///
/// let mut ids = RequestIds::new("rs_0123", "9f1c");
/// assert_eq!(ids.next_id(), "rs_0123-9f1c-1");
/// assert_eq!(ids.next_id(), "rs_0123-9f1c-2");
/// ```
#[derive(Debug, Clone)]
pub struct RequestIds {
    prefix: String,
    next: u64,
}

impl RequestIds {
    /// Ids for `client`, with a per-operation `nonce`.
    #[must_use]
    pub fn new(client: &str, nonce: &str) -> Self {
        RequestIds {
            prefix: format!("{client}-{nonce}-"),
            next: 1,
        }
    }

    /// The next id.
    pub fn next_id(&mut self) -> String {
        let id = format!("{}{}", self.prefix, self.next);
        self.next += 1;
        id
    }
}

#[derive(Serialize)]
struct RequestFrame<'a, P: Serialize> {
    jsonrpc: &'static str,
    id: &'a str,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a P>,
}

#[derive(Serialize)]
struct NotificationFrame<'a, P: Serialize> {
    jsonrpc: &'static str,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a P>,
}

/// Encodes a request as one compact line of JSON (the relay forwards the
/// bytes verbatim after `data: `, so a newline would break the SSE frame).
///
/// ```
/// use human_plus_core::encode_request;
/// use serde_json::json;
///
/// let f = encode_request("c-n-1", "tools/call", Some(&json!({"name": "x", "arguments": {}})));
/// assert_eq!(f, br#"{"jsonrpc":"2.0","id":"c-n-1","method":"tools/call","params":{"arguments":{},"name":"x"}}"#);
/// ```
#[must_use]
pub fn encode_request<P: Serialize>(id: &str, method: &str, params: Option<&P>) -> Vec<u8> {
    to_line(&RequestFrame {
        jsonrpc: "2.0",
        id,
        method,
        params,
    })
}

/// Encodes a notification (no id) as one compact line of JSON.
///
/// ```
/// use human_plus_core::encode_notification;
///
/// assert_eq!(
///     encode_notification::<()>("notifications/initialized", None),
///     br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
/// );
/// ```
#[must_use]
pub fn encode_notification<P: Serialize>(method: &str, params: Option<&P>) -> Vec<u8> {
    to_line(&NotificationFrame {
        jsonrpc: "2.0",
        method,
        params,
    })
}

fn to_line<T: Serialize>(frame: &T) -> Vec<u8> {
    // Serialising plain structs and JSON values into a Vec cannot fail:
    // every map key is a string and there is no I/O.
    serde_json::to_vec(frame).unwrap_or_default()
}

/// What a received frame means to an exchange waiting for `expected`.
#[derive(Debug, Clone, PartialEq)]
pub enum Correlation {
    /// The reply: an object whose `id` is exactly the expected string and
    /// that carries `result` or `error` and no `method`.
    Reply(Value),
    /// Anything else: notifications, requests, other ids (other clients'
    /// replies included), batches, non-objects.
    Ignore,
}

/// Correlates one received frame with the id an exchange waits for.
///
/// Only a string id equal to `expected` matches: `1`, `true` or `"1 "`
/// never do. A batch is ignored (this client never batches, and the relay
/// broadcasts batches to everyone).
///
/// ```
/// use human_plus_core::{correlate, Correlation};
/// use serde_json::json;
///
/// assert!(matches!(correlate(json!({"jsonrpc":"2.0","id":"c-1","result":{}}), "c-1"), Correlation::Reply(_)));
/// assert_eq!(correlate(json!({"jsonrpc":"2.0","id":"c-2","result":{}}), "c-1"), Correlation::Ignore);
/// assert_eq!(correlate(json!({"jsonrpc":"2.0","method":"notifications/peer_joined"}), "c-1"), Correlation::Ignore);
/// ```
#[must_use]
pub fn correlate(frame: Value, expected: &str) -> Correlation {
    let matches = frame.as_object().is_some_and(|o| {
        o.get("id").and_then(Value::as_str) == Some(expected)
            && !o.contains_key("method")
            && (o.contains_key("result") || o.contains_key("error"))
    });
    if matches {
        Correlation::Reply(frame)
    } else {
        Correlation::Ignore
    }
}

/// Correlates raw frame bytes without building a JSON value for frames that
/// cannot be the reply (a cheap substring test on the id comes first).
///
/// Always the same answer as [`correlate`] on the parsed frame: the
/// substring test is skipped when the id could be spelled with escapes —
/// a frame holding a `\u` escape, or an id holding a character JSON
/// escapes (`"`, `\`, a control character) or may escape (`/`).
///
/// ```
/// use human_plus_core::{correlate_bytes, Correlation};
///
/// let escaped = br#"{"jsonrpc":"2.0","id":"c\u002dn-1","result":{}}"#;
/// assert!(matches!(correlate_bytes(escaped, "c-n-1"), Correlation::Reply(_)));
/// assert_eq!(correlate_bytes(br#"{"id":"c-n-2","result":{}}"#, "c-n-1"), Correlation::Ignore);
/// ```
#[must_use]
pub fn correlate_bytes(frame: &[u8], expected: &str) -> Correlation {
    let literal = !contains(frame, b"\\u")
        && !expected
            .bytes()
            .any(|b| matches!(b, b'"' | b'\\' | b'/') || b < 0x20);
    if literal && !contains(frame, expected.as_bytes()) {
        return Correlation::Ignore;
    }
    match serde_json::from_slice::<Value>(frame) {
        Ok(v) => correlate(v, expected),
        Err(_) => Correlation::Ignore,
    }
}

/// A correlated reply, as it reached the core: the frame's text (an SSE
/// event, not parsed into a `Value`: the step that waits for it reads what
/// it needs) or the value a long-poll body already held.
#[derive(Debug)]
pub(crate) enum Reply {
    /// The frame's text, and where its `result` is in it.
    Text {
        /// The whole frame.
        frame: String,
        /// The byte range of the (last) `result` member's value.
        result: Option<std::ops::Range<usize>>,
        /// The frame has an `error` member that is not `null`.
        error: bool,
    },
    /// A parsed frame.
    Value(Value),
}

impl From<Value> for Reply {
    fn from(v: Value) -> Self {
        Reply::Value(v)
    }
}

impl Reply {
    /// The reply as a `Value`.
    ///
    /// # Errors
    /// [`ProtocolError::MalformedResult`](crate::ProtocolError::MalformedResult)
    /// for a frame `Value` refuses although its envelope was read (nesting
    /// past serde_json's limit, a number beyond the double range).
    pub(crate) fn into_value(self) -> Result<Value, crate::Error> {
        match self {
            Reply::Value(v) => Ok(v),
            Reply::Text { frame, .. } => serde_json::from_str(&frame)
                .map_err(|_| crate::Error::Protocol(crate::ProtocolError::MalformedResult)),
        }
    }

    /// The whole frame's text (`Text`), or `None` for a parsed frame.
    pub(crate) fn frame_text(&self) -> Option<&str> {
        match self {
            Reply::Text { frame, .. } => Some(frame),
            Reply::Value(_) => None,
        }
    }

    /// The `result` member's text, exactly as it arrived (`Text`), or
    /// `None` when the reply carries an error or no result (then
    /// [`Reply::into_value`] tells which).
    pub(crate) fn result_text(&self) -> Option<&str> {
        match self {
            Reply::Text {
                frame,
                result: Some(range),
                error: false,
            } => frame.get(range.clone()),
            _ => None,
        }
    }
}

/// [`correlate_bytes`] without building a `Value`: the frame's envelope is
/// read with the members' values skipped (still checked to be JSON), and
/// where its `result` lies is noted. Frames of other requests cost the
/// substring test only, as in [`correlate_bytes`].
///
/// The same answer as [`correlate`] on every frame `Value` can read; a
/// frame only a skip accepts (a `result` nested past serde_json's 128
/// levels, a number beyond the double range) is correlated here, and the
/// step that reads it refuses it as malformed instead of waiting for its
/// deadline.
pub(crate) fn correlate_text(frame: String, expected: &str) -> Option<Reply> {
    let literal = memchr::memmem::find(frame.as_bytes(), b"\\u").is_none()
        && !expected
            .bytes()
            .any(|b| matches!(b, b'"' | b'\\' | b'/') || b < 0x20);
    if literal && memchr::memmem::find(frame.as_bytes(), expected.as_bytes()).is_none() {
        return None;
    }
    let envelope: Envelope<'_> = serde_json::from_str(&frame).ok()?;
    let is_reply = envelope.id.as_ref().and_then(Value::as_str) == Some(expected)
        && !envelope.method
        && (envelope.result.is_some() || envelope.error.is_some());
    if !is_reply {
        return None;
    }
    let base = frame.as_ptr() as usize;
    let result = envelope.result.map(|raw| {
        let start = (raw.get().as_ptr() as usize).saturating_sub(base);
        start..start + raw.get().len()
    });
    let error = envelope.error.is_some_and(|e| e.get() != "null");
    drop(envelope);
    Some(Reply::Text {
        frame,
        result,
        error,
    })
}

/// What [`correlate_text`] makes of `frame`, for the fuzz targets only
/// (compiled under `cargo fuzz`'s `--cfg fuzzing`, never in a release):
/// `None` when it is not `expected`'s reply, else the reply's `result`
/// text as it arrived, whether it carries a non-null `error`, and the
/// frame read as a `Value` (`None` when `Value` refuses it).
#[cfg(fuzzing)]
#[doc(hidden)]
#[must_use]
pub fn fuzz_correlate_text(
    frame: &str,
    expected: &str,
) -> Option<(Option<String>, bool, Option<Value>)> {
    let reply = correlate_text(frame.to_owned(), expected)?;
    let result = reply.result_text().map(str::to_owned);
    let error = matches!(reply, Reply::Text { error: true, .. });
    debug_assert_eq!(reply.frame_text(), Some(frame));
    Some((result, error, reply.into_value().ok()))
}

/// A frame's members that correlation reads; the last of duplicated
/// members wins, as in `Value`.
#[derive(Default)]
struct Envelope<'a> {
    id: Option<Value>,
    method: bool,
    result: Option<&'a serde_json::value::RawValue>,
    error: Option<&'a serde_json::value::RawValue>,
}

impl<'de> serde::Deserialize<'de> for Envelope<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Envelope<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON-RPC frame")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Envelope<'de>, A::Error> {
                let mut e = Envelope::default();
                while let Some(crate::values::scalar::Key(key)) = map.next_key()? {
                    match key.as_ref() {
                        "id" => e.id = Some(map.next_value()?),
                        "method" => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                            e.method = true;
                        }
                        "result" => e.result = Some(map.next_value()?),
                        "error" => e.error = Some(map.next_value()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(e)
            }
        }
        d.deserialize_map(V)
    }
}

/// A notification on the receive leg that Human+ acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Notice {
    /// `notifications/tools/list_changed`: the surface's tools changed, so
    /// a kept listing is no longer current.
    ToolsListChanged,
    /// `notifications/agent_activity` with `source: "user"`: a person acted
    /// on the surface (the Fancy sharing layer forwards the page's activity
    /// events to every agent).
    PersonActive,
}

/// What `frame` (one received frame's bytes) tells Human+, if anything: a
/// notification object whose `method` is one of [`Notice`]'s. Replies,
/// requests, batches and anything unparsable tell nothing. A cheap
/// substring test comes first, so frames that cannot be a notice are not
/// parsed.
///
/// ```
/// use human_plus_core::{Notice, notice};
///
/// assert_eq!(notice(br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#), Some(Notice::ToolsListChanged));
/// let person = br#"{"jsonrpc":"2.0","method":"notifications/agent_activity","params":{"source":"user","action":"typing"}}"#;
/// assert_eq!(notice(person), Some(Notice::PersonActive));
/// let agent = br#"{"jsonrpc":"2.0","method":"notifications/agent_activity","params":{"agentId":"a-2","action":"editing"}}"#;
/// assert_eq!(notice(agent), None);
/// assert_eq!(notice(br#"{"jsonrpc":"2.0","id":"x","result":{"method":"notifications/tools/list_changed"}}"#), None);
/// ```
#[must_use]
pub fn notice(frame: &[u8]) -> Option<Notice> {
    let list = contains(frame, b"list_changed");
    let activity = contains(frame, b"agent_activity");
    if !list && !activity && !contains(frame, b"\\u") {
        return None;
    }
    let value: Value = serde_json::from_slice(frame).ok()?;
    notice_of(&value)
}

/// [`notice`] of a frame already parsed (a long-poll answer's frames).
#[must_use]
pub fn notice_of(value: &Value) -> Option<Notice> {
    let object = value.as_object()?;
    if object.contains_key("id") {
        return None;
    }
    match object.get("method").and_then(Value::as_str)? {
        "notifications/tools/list_changed" => Some(Notice::ToolsListChanged),
        "notifications/agent_activity" => {
            let source = object
                .get("params")
                .and_then(|p| p.get("source"))
                .and_then(Value::as_str);
            (source == Some("user")).then_some(Notice::PersonActive)
        }
        _ => None,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    if needle.is_empty() {
        return true;
    }
    // Frames are UTF-8 text almost always: std's vectorised substring
    // search is several times faster than the byte loop below.
    if let (Ok(h), Ok(n)) = (std::str::from_utf8(haystack), std::str::from_utf8(needle)) {
        return h.contains(n);
    }
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    let mut start = 0;
    while let Some(pos) = haystack
        .get(start..)
        .and_then(|h| h.iter().position(|&b| b == first))
    {
        let at = start + pos;
        if haystack
            .get(at + 1..at + needle.len())
            .is_some_and(|w| w == rest)
        {
            return true;
        }
        start = at + 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames_are_single_line_even_with_newlines_in_strings() {
        let f = encode_request("a-b-1", "tools/call", Some(&json!({"text": "two\nlines"})));
        assert!(!f.contains(&b'\n'));
        let v: Value = serde_json::from_slice(&f).unwrap();
        assert_eq!(v["params"]["text"], "two\nlines");
    }

    #[test]
    fn correlation_is_strict() {
        let id = "rs_1-ab-3";
        assert!(matches!(
            correlate(json!({"id": id, "error": {"code": 1}}), id),
            Correlation::Reply(_)
        ));
        for other in [
            json!({"id": 3, "result": {}}),
            json!({"id": "rs_1-ab-3 ", "result": {}}),
            json!({"id": id}),
            json!({"id": id, "method": "x", "result": {}}),
            json!([{"id": id, "result": {}}]),
            json!("rs_1-ab-3"),
            json!(null),
        ] {
            assert_eq!(correlate(other.clone(), id), Correlation::Ignore, "{other}");
        }
    }

    #[test]
    fn byte_correlation_skips_garbage() {
        let id = "c-n-1";
        assert!(matches!(
            correlate_bytes(br#"{"jsonrpc":"2.0","id":"c-n-1","result":{}}"#, id),
            Correlation::Reply(_)
        ));
        assert_eq!(correlate_bytes(b"c-n-1 not json", id), Correlation::Ignore);
        assert_eq!(
            correlate_bytes(br#"{"id":"c-n-2","result":{}}"#, id),
            Correlation::Ignore
        );
        assert!(contains(b"abcabd", b"abd"));
        assert!(!contains(b"ab", b"abc"));
    }

    #[test]
    fn byte_correlation_sees_escaped_ids() {
        // Found by the `jsonrpc` fuzz target (corpus `escaped_id`): the
        // substring pre-test dropped a reply whose id the surface wrote
        // with `\u` escapes, which `correlate` accepts.
        let frame: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":\"c\\u002dn-1\",\"result\":{}}";
        assert!(matches!(
            correlate_bytes(frame, "c-n-1"),
            Correlation::Reply(_)
        ));
        let all = br#"{"id":"\u0063\u002d\u006e\u002d\u0031","result":{}}"#;
        assert!(matches!(
            correlate_bytes(all, "c-n-1"),
            Correlation::Reply(_)
        ));
        // Ids JSON must (or may) escape never appear literally.
        assert!(matches!(
            correlate_bytes(br#"{"id":"a\"b","result":{}}"#, "a\"b"),
            Correlation::Reply(_)
        ));
        assert!(matches!(
            correlate_bytes(br#"{"id":"a\/b","error":{}}"#, "a/b"),
            Correlation::Reply(_)
        ));
        // Escapes elsewhere do not make another id match.
        assert_eq!(
            correlate_bytes(br#"{"id":"c-n-2","result":{"t":"\u00e9"}}"#, "c-n-1"),
            Correlation::Ignore
        );
    }

    #[test]
    fn ids_are_unique_per_client_and_nonce() {
        let mut a = RequestIds::new("rs_a", "01");
        let mut b = RequestIds::new("rs_b", "01");
        assert_ne!(a.next_id(), b.next_id());
    }
}
