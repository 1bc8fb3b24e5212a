//! The frames of the Pusher Channels protocol (version 7) a client sends and
//! receives, typed: parsing every frame a server sends, encoding every frame
//! a client sends, and the `pusher:error` and WebSocket close codes.
//!
//! A Pusher frame is one WebSocket text message holding a JSON object
//! `{"event": …, "channel": …, "data": …}`. Some servers write `data` as a
//! JSON string holding JSON (`pusher:connection_established`, Laravel
//! Reverb's `pusher:error`), others as an object (sockudo's `pusher:error`);
//! both are read. A client event's (`client-…`) `data` is kept as the exact
//! JSON text the server sent, for [`crate::correlate_bytes`].

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// The Pusher Channels protocol version this client speaks (the `protocol`
/// query parameter of the WebSocket URL).
pub const PUSHER_PROTOCOL_VERSION: u8 = 7;

/// The longest socket id accepted, in bytes.
pub const MAX_SOCKET_ID_BYTES: usize = 64;

/// The longest `pusher:error` message kept, in bytes; a longer one is cut
/// at a character boundary.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 256;

/// The longest presence `user_id` kept, in bytes; a longer one is not a
/// member event this client reads.
pub const MAX_USER_ID_BYTES: usize = 128;

/// Why a text message is not a Pusher frame. No variant quotes the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// Not a JSON object (or a key given twice).
    #[error("The Pusher frame is not a JSON object.")]
    NotJson,
    /// The object has no string `event`.
    #[error("The Pusher frame has no event name.")]
    NoEvent,
    /// A protocol event whose `data` or `channel` does not have its shape.
    #[error("The Pusher frame's data does not have the shape its event needs.")]
    Shape,
}

/// A frame a Pusher server sends, typed.
///
/// ```
/// use human_plus_core::{PusherErrorCode, PusherFrame};
///
/// let hello = PusherFrame::parse(
///     r#"{"event":"pusher:connection_established","data":"{\"socket_id\":\"123.456\",\"activity_timeout\":120}"}"#,
/// )?;
/// assert_eq!(hello, PusherFrame::ConnectionEstablished { socket_id: "123.456".into(), activity_timeout: Some(120) });
///
/// // Reverb writes an error's data as a JSON string, sockudo as an object.
/// for text in [
///     r#"{"event":"pusher:error","data":"{\"code\":4009,\"message\":\"Unauthorized\"}"}"#,
///     r#"{"event":"pusher:error","data":{"code":4009,"message":"Unauthorized"}}"#,
/// ] {
///     let PusherFrame::Error(e) = PusherFrame::parse(text)? else { panic!() };
///     assert_eq!(e.code, PusherErrorCode::Unauthorized);
/// }
/// # Ok::<(), human_plus_core::FrameError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PusherFrame {
    /// `pusher:connection_established`: the socket id and the activity
    /// timeout in seconds (when the server gave a usable one).
    ConnectionEstablished {
        /// The socket id (`digits.digits`).
        socket_id: String,
        /// The server's activity timeout, in seconds.
        activity_timeout: Option<u64>,
    },
    /// `pusher:ping`: answer with `pusher:pong`.
    Ping,
    /// `pusher:pong`.
    Pong,
    /// `pusher:error`.
    Error(PusherServerError),
    /// `pusher_internal:subscription_succeeded` (or the public
    /// `pusher:subscription_succeeded`).
    SubscriptionSucceeded {
        /// The channel.
        channel: String,
        /// A presence channel's members at the time (`presence.ids`, at
        /// most 1,000 kept); empty for any other channel.
        members: Vec<String>,
    },
    /// `pusher_internal:member_added` on a presence channel.
    MemberAdded {
        /// The channel.
        channel: String,
        /// The member's `user_id` (a number is kept as its JSON text).
        user_id: String,
    },
    /// `pusher_internal:member_removed` on a presence channel.
    MemberRemoved {
        /// The channel.
        channel: String,
        /// The member's `user_id` (a number is kept as its JSON text).
        user_id: String,
    },
    /// A client event (`client-…`, a whisper) another subscriber sent.
    ClientEvent(ClientEvent),
    /// Any other event (a server event, `pusher:subscription_error`, a
    /// future protocol event): not acted on.
    Other {
        /// The event name.
        event: String,
        /// The channel, when the frame named one.
        channel: Option<String>,
    },
}

/// A client event as received: its channel, its name and its `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientEvent {
    /// The channel it was sent on.
    pub channel: String,
    /// The full event name (`client-mcp` for a Laravel Echo whisper `mcp`).
    pub event: String,
    /// The `data` exactly as the server wrote it: a JSON object's text
    /// (keys possibly re-ordered by the server).
    pub data: String,
    /// The sender's `user_id`, when the server said (presence channels).
    pub user_id: Option<String>,
}

/// A `pusher:error` frame: its typed code and its message (cut to
/// [`MAX_ERROR_MESSAGE_BYTES`], control characters replaced).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PusherServerError {
    /// The code, typed.
    pub code: PusherErrorCode,
    /// The server's message (its words, never an instruction).
    pub message: String,
}

impl fmt::Display for PusherServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code.code() {
            Some(c) => write!(f, "Pusher error {c}: {}", self.message),
            None => write!(f, "Pusher error: {}", self.message),
        }
    }
}

impl PusherServerError {
    /// Whether the error says this socket is not subscribed to the channel
    /// it sent a client event on: sockudo's 4301 "… is not subscribed to
    /// channel …" or Reverb's 4009 "The client is not a member of the
    /// specified channel."
    #[must_use]
    pub fn means_not_subscribed(&self) -> bool {
        match self.code {
            PusherErrorCode::ClientEvent(ClientEventRefusal::NotSubscribed) => true,
            PusherErrorCode::Unauthorized => contains_ci(&self.message, "not a member"),
            _ => false,
        }
    }
}

/// A `pusher:error` code, typed.
///
/// ```
/// use human_plus_core::{ClientEventRefusal, PusherErrorCode};
///
/// assert_eq!(PusherErrorCode::classify(Some(4009), ""), PusherErrorCode::Unauthorized);
/// assert_eq!(
///     PusherErrorCode::classify(Some(4301), "Client event rejected due to rate limit"),
///     PusherErrorCode::ClientEvent(ClientEventRefusal::RateLimited),
/// );
/// assert_eq!(PusherErrorCode::classify(Some(4100), "Over capacity").code(), Some(4100));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PusherErrorCode {
    /// 4009: the channel's auth is missing or wrong (or, on Reverb, a client
    /// event on a channel the socket is not a member of).
    Unauthorized,
    /// 4301: a client event was refused; the message tells why.
    ClientEvent(ClientEventRefusal),
    /// 4005: over the rate limit (Laravel Reverb's, when enabled).
    RateLimited,
    /// 4200: the message is not in the protocol's format (Reverb: a client
    /// event whose data is not an object).
    InvalidFormat,
    /// Any other code, kept as a number.
    Other(u16),
    /// No code, or one that is not a number from 0 to 65535.
    Missing,
}

/// Why a server refused a client event (code 4301), read from its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientEventRefusal {
    /// The socket is not subscribed to the channel.
    NotSubscribed,
    /// The event's payload is over the server's payload limit.
    PayloadTooLarge,
    /// Over the server's client-event rate limit.
    RateLimited,
    /// The app does not allow client events.
    Disabled,
    /// Another reason.
    Other,
}

impl PusherErrorCode {
    /// Types a code, reading a 4301's message for its reason.
    #[must_use]
    pub fn classify(code: Option<u16>, message: &str) -> Self {
        match code {
            None => PusherErrorCode::Missing,
            Some(4009) => PusherErrorCode::Unauthorized,
            Some(4005) => PusherErrorCode::RateLimited,
            Some(4200) => PusherErrorCode::InvalidFormat,
            Some(4301) => PusherErrorCode::ClientEvent(if contains_ci(message, "not subscribed") {
                ClientEventRefusal::NotSubscribed
            } else if contains_ci(message, "rate limit") {
                ClientEventRefusal::RateLimited
            } else if contains_ci(message, "exceeds limit") || contains_ci(message, "size") {
                ClientEventRefusal::PayloadTooLarge
            } else if contains_ci(message, "client messaging") || contains_ci(message, "disabled") {
                ClientEventRefusal::Disabled
            } else {
                ClientEventRefusal::Other
            }),
            Some(other) => PusherErrorCode::Other(other),
        }
    }

    /// The numeric code (`None` for [`PusherErrorCode::Missing`]).
    #[must_use]
    pub fn code(self) -> Option<u16> {
        match self {
            PusherErrorCode::Unauthorized => Some(4009),
            PusherErrorCode::ClientEvent(_) => Some(4301),
            PusherErrorCode::RateLimited => Some(4005),
            PusherErrorCode::InvalidFormat => Some(4200),
            PusherErrorCode::Other(c) => Some(c),
            PusherErrorCode::Missing => None,
        }
    }
}

/// What a client should do after the server closed the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reconnect {
    /// Do not reconnect (4000-4099: the app, the key or the protocol is
    /// wrong, and will be wrong again).
    Never,
    /// Reconnect after a back-off (4100-4199: over capacity; and every
    /// close that is not a Pusher code).
    AfterBackoff,
    /// Reconnect at once (4200-4299: the server asks for a new connection).
    Immediately,
}

/// A WebSocket close code as a Pusher client reads it.
///
/// ```
/// use human_plus_core::{PusherCloseCode, Reconnect};
///
/// assert_eq!(PusherCloseCode::from_code(Some(1009)), PusherCloseCode::MessageTooBig);
/// assert_eq!(PusherCloseCode::from_code(None), PusherCloseCode::Abnormal);
/// assert_eq!(PusherCloseCode::from_code(Some(4001)).reconnect(), Reconnect::Never);
/// assert_eq!(PusherCloseCode::from_code(Some(4100)).reconnect(), Reconnect::AfterBackoff);
/// assert_eq!(PusherCloseCode::from_code(Some(4201)).reconnect(), Reconnect::Immediately);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PusherCloseCode {
    /// 1000.
    Normal,
    /// 1001: the server is going away.
    GoingAway,
    /// 1006, or no close frame at all: the connection dropped (sockudo
    /// drops a message over its size cap this way).
    Abnormal,
    /// 1009: a message was over the server's limit (Laravel Reverb's
    /// `max_message_size`).
    MessageTooBig,
    /// 4000-4099: an error that will recur; do not reconnect.
    Fatal(u16),
    /// 4100-4199: reconnect after a back-off.
    Backoff(u16),
    /// 4200-4299: reconnect at once.
    Refresh(u16),
    /// Any other code.
    Other(u16),
}

impl PusherCloseCode {
    /// Types a close code; `None` (no close frame) is
    /// [`PusherCloseCode::Abnormal`].
    #[must_use]
    pub fn from_code(code: Option<u16>) -> Self {
        match code {
            None | Some(1006) => PusherCloseCode::Abnormal,
            Some(1000) => PusherCloseCode::Normal,
            Some(1001) => PusherCloseCode::GoingAway,
            Some(1009) => PusherCloseCode::MessageTooBig,
            Some(c @ 4000..=4099) => PusherCloseCode::Fatal(c),
            Some(c @ 4100..=4199) => PusherCloseCode::Backoff(c),
            Some(c @ 4200..=4299) => PusherCloseCode::Refresh(c),
            Some(c) => PusherCloseCode::Other(c),
        }
    }

    /// The numeric code.
    #[must_use]
    pub fn code(self) -> u16 {
        match self {
            PusherCloseCode::Normal => 1000,
            PusherCloseCode::GoingAway => 1001,
            PusherCloseCode::Abnormal => 1006,
            PusherCloseCode::MessageTooBig => 1009,
            PusherCloseCode::Fatal(c)
            | PusherCloseCode::Backoff(c)
            | PusherCloseCode::Refresh(c)
            | PusherCloseCode::Other(c) => c,
        }
    }

    /// What a client should do next.
    #[must_use]
    pub fn reconnect(self) -> Reconnect {
        match self {
            PusherCloseCode::Fatal(_) => Reconnect::Never,
            PusherCloseCode::Refresh(_) => Reconnect::Immediately,
            _ => Reconnect::AfterBackoff,
        }
    }
}

impl fmt::Display for PusherCloseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            PusherCloseCode::Normal => write!(f, "closed normally ({code})"),
            PusherCloseCode::GoingAway => write!(f, "the server is going away ({code})"),
            PusherCloseCode::Abnormal => {
                write!(f, "the connection dropped without a close frame ({code})")
            }
            PusherCloseCode::MessageTooBig => {
                write!(f, "a message was over the server's size limit ({code})")
            }
            PusherCloseCode::Fatal(_) => write!(f, "closed for good by the server ({code})"),
            PusherCloseCode::Backoff(_) => {
                write!(f, "closed by the server, retry after a pause ({code})")
            }
            PusherCloseCode::Refresh(_) => {
                write!(f, "closed by the server, reconnect now ({code})")
            }
            PusherCloseCode::Other(_) => write!(f, "closed ({code})"),
        }
    }
}

/// The frame on the wire, borrowed where it can be.
#[derive(Deserialize)]
struct WireFrame<'a> {
    #[serde(borrow)]
    event: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    channel: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
    #[serde(default)]
    user_id: Option<Value>,
}

impl PusherFrame {
    /// Parses one WebSocket text message from a Pusher server.
    ///
    /// # Errors
    /// [`FrameError`] when the text is not a JSON object with an event
    /// name, or a protocol event's data lacks what it needs.
    pub fn parse(text: &str) -> Result<PusherFrame, FrameError> {
        let wire: WireFrame<'_> = serde_json::from_str(text).map_err(|_| FrameError::NotJson)?;
        let Some(event) = wire.event else {
            return Err(FrameError::NoEvent);
        };
        let channel = wire.channel.map(Cow::into_owned);
        let inner = || wire.data.and_then(data_object);
        match event.as_ref() {
            "pusher:connection_established" => {
                let data = inner().ok_or(FrameError::Shape)?;
                let socket_id = data
                    .get("socket_id")
                    .and_then(Value::as_str)
                    .filter(|s| is_socket_id(s))
                    .ok_or(FrameError::Shape)?;
                let activity_timeout = data.get("activity_timeout").and_then(Value::as_u64);
                Ok(PusherFrame::ConnectionEstablished {
                    socket_id: socket_id.to_owned(),
                    activity_timeout,
                })
            }
            "pusher:ping" => Ok(PusherFrame::Ping),
            "pusher:pong" => Ok(PusherFrame::Pong),
            "pusher:error" => {
                let data = inner().unwrap_or(Value::Null);
                let message = data.get("message").and_then(Value::as_str).unwrap_or("");
                let code = data
                    .get("code")
                    .and_then(Value::as_u64)
                    .and_then(|c| u16::try_from(c).ok());
                Ok(PusherFrame::Error(PusherServerError {
                    code: PusherErrorCode::classify(code, message),
                    message: clean_message(message),
                }))
            }
            "pusher_internal:subscription_succeeded" | "pusher:subscription_succeeded" => {
                let channel = channel.ok_or(FrameError::Shape)?;
                let members = inner()
                    .and_then(|d| {
                        d.get("presence")
                            .and_then(|p| p.get("ids"))
                            .and_then(Value::as_array)
                            .map(|ids| ids.iter().filter_map(user_id_text).take(1000).collect())
                    })
                    .unwrap_or_default();
                Ok(PusherFrame::SubscriptionSucceeded { channel, members })
            }
            "pusher_internal:member_added" | "pusher_internal:member_removed" => {
                let channel = channel.ok_or(FrameError::Shape)?;
                let user_id = inner()
                    .and_then(|d| d.get("user_id").and_then(user_id_text))
                    .ok_or(FrameError::Shape)?;
                if event == "pusher_internal:member_added" {
                    Ok(PusherFrame::MemberAdded { channel, user_id })
                } else {
                    Ok(PusherFrame::MemberRemoved { channel, user_id })
                }
            }
            name if name.starts_with("client-") => {
                let channel = channel.ok_or(FrameError::Shape)?;
                let data = wire.data.ok_or(FrameError::Shape)?.get();
                if !data.starts_with('{') {
                    return Err(FrameError::Shape);
                }
                Ok(PusherFrame::ClientEvent(ClientEvent {
                    channel,
                    event: name.to_owned(),
                    data: data.to_owned(),
                    user_id: wire.user_id.as_ref().and_then(user_id_text),
                }))
            }
            name => Ok(PusherFrame::Other {
                event: name.to_owned(),
                channel,
            }),
        }
    }
}

/// A frame a Pusher client sends.
///
/// ```
/// use human_plus_core::ClientFrame;
///
/// assert_eq!(ClientFrame::Ping.encode(), r#"{"event":"pusher:ping","data":{}}"#);
/// let whisper = ClientFrame::ClientEvent {
///     channel: "private-agent.session.S1",
///     event: "client-mcp",
///     data: r#"{"jsonrpc":"2.0","id":"a-1","method":"tools/list"}"#,
/// };
/// assert_eq!(
///     whisper.encode(),
///     r#"{"event":"client-mcp","channel":"private-agent.session.S1","data":{"jsonrpc":"2.0","id":"a-1","method":"tools/list"}}"#,
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFrame<'a> {
    /// `pusher:ping`.
    Ping,
    /// `pusher:pong`, the answer to a server's ping.
    Pong,
    /// `pusher:subscribe` with the auth the host's bridge signed (and a
    /// presence channel's `channel_data`, the JSON text that was signed).
    Subscribe {
        /// The channel.
        channel: &'a str,
        /// `APP_KEY:signature`.
        auth: &'a str,
        /// A presence channel's member data, as signed.
        channel_data: Option<&'a str>,
    },
    /// `pusher:unsubscribe`.
    Unsubscribe {
        /// The channel.
        channel: &'a str,
    },
    /// A client event; `data` must be a JSON object's text, written as is.
    ClientEvent {
        /// The channel.
        channel: &'a str,
        /// The full event name (`client-mcp`).
        event: &'a str,
        /// The JSON object's text.
        data: &'a str,
    },
}

impl ClientFrame<'_> {
    /// The frame's text, as one WebSocket text message.
    #[must_use]
    pub fn encode(&self) -> String {
        match *self {
            ClientFrame::Ping => r#"{"event":"pusher:ping","data":{}}"#.to_owned(),
            ClientFrame::Pong => r#"{"event":"pusher:pong","data":{}}"#.to_owned(),
            ClientFrame::Subscribe {
                channel,
                auth,
                channel_data,
            } => {
                let mut data = format!(
                    "{{\"channel\":{},\"auth\":{}",
                    json_string(channel),
                    json_string(auth)
                );
                if let Some(cd) = channel_data {
                    data.push_str(",\"channel_data\":");
                    data.push_str(&json_string(cd));
                }
                data.push('}');
                format!("{{\"event\":\"pusher:subscribe\",\"data\":{data}}}")
            }
            ClientFrame::Unsubscribe { channel } => format!(
                "{{\"event\":\"pusher:unsubscribe\",\"data\":{{\"channel\":{}}}}}",
                json_string(channel)
            ),
            ClientFrame::ClientEvent {
                channel,
                event,
                data,
            } => format!(
                "{{\"event\":{},\"channel\":{},\"data\":{}}}",
                json_string(event),
                json_string(channel),
                data
            ),
        }
    }
}

/// `s` as a JSON string literal (infallible).
pub(crate) fn json_string(s: &str) -> String {
    Value::from(s).to_string()
}

/// The object a `data` holds: the object itself, or the object a JSON
/// string's text holds.
fn data_object(raw: &RawValue) -> Option<Value> {
    let value: Value = serde_json::from_str(raw.get()).ok()?;
    let value = match value {
        Value::String(inner) => serde_json::from_str(&inner).ok()?,
        other => other,
    };
    value.is_object().then_some(value)
}

/// A `user_id`: a string, or a number kept as its text; bounded.
fn user_id_text(v: &Value) -> Option<String> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    (!text.is_empty() && text.len() <= MAX_USER_ID_BYTES).then_some(text)
}

/// `digits.digits`, at most [`MAX_SOCKET_ID_BYTES`].
pub(crate) fn is_socket_id(s: &str) -> bool {
    s.len() <= MAX_SOCKET_ID_BYTES
        && s.split_once('.').is_some_and(|(a, b)| {
            !a.is_empty()
                && !b.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && b.bytes().all(|c| c.is_ascii_digit())
        })
}

/// A server's message: control characters replaced, cut to
/// [`MAX_ERROR_MESSAGE_BYTES`] at a character boundary.
fn clean_message(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > MAX_ERROR_MESSAGE_BYTES {
            break;
        }
        out.push(c);
    }
    out
}

/// ASCII case-insensitive `contains`.
fn contains_ci(haystack: &str, needle: &str) -> bool {
    haystack
        .as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn connection_established_as_servers_write_it() {
        let f = PusherFrame::parse(
            r#"{"event":"pusher:connection_established","data":"{\"socket_id\":\"1.2\",\"activity_timeout\":30}"}"#,
        )
        .unwrap();
        assert_eq!(
            f,
            PusherFrame::ConnectionEstablished {
                socket_id: "1.2".into(),
                activity_timeout: Some(30)
            }
        );
        // An object is read as well; a missing or odd socket id is not.
        assert!(
            PusherFrame::parse(
                r#"{"event":"pusher:connection_established","data":{"socket_id":"1.2"}}"#
            )
            .is_ok()
        );
        for bad in [
            r#"{"event":"pusher:connection_established","data":"{}"}"#,
            r#"{"event":"pusher:connection_established","data":{"socket_id":"1.2.3"}}"#,
            r#"{"event":"pusher:connection_established","data":{"socket_id":".2"}}"#,
            r#"{"event":"pusher:connection_established","data":{"socket_id":12}}"#,
            r#"{"event":"pusher:connection_established"}"#,
        ] {
            assert_eq!(PusherFrame::parse(bad), Err(FrameError::Shape), "{bad}");
        }
    }

    #[test]
    fn errors_from_reverb_and_sockudo() {
        let parse = |t: &str| match PusherFrame::parse(t).unwrap() {
            PusherFrame::Error(e) => e,
            other => panic!("{other:?}"),
        };
        let e = parse(
            r#"{"event":"pusher:error","data":"{\"code\":4301,\"message\":\"Client event error: Event payload size (20601 bytes) exceeds limit (10KB)\"}"}"#,
        );
        assert_eq!(
            e.code,
            PusherErrorCode::ClientEvent(ClientEventRefusal::PayloadTooLarge)
        );
        let e = parse(
            r#"{"event":"pusher:error","data":{"code":4301,"message":"Client event error: Socket 1.2 is not subscribed to channel private-x"}}"#,
        );
        assert!(e.means_not_subscribed());
        let e = parse(
            r#"{"event":"pusher:error","data":"{\"code\":4009,\"message\":\"The client is not a member of the specified channel.\"}"}"#,
        );
        assert_eq!(e.code, PusherErrorCode::Unauthorized);
        assert!(e.means_not_subscribed());
        let e = parse(
            r#"{"event":"pusher:error","data":{"code":4301,"message":"The app does not have client messaging enabled."}}"#,
        );
        assert_eq!(
            e.code,
            PusherErrorCode::ClientEvent(ClientEventRefusal::Disabled)
        );
        let e = parse(
            r#"{"event":"pusher:error","data":{"code":4005,"message":"Rate limit exceeded"}}"#,
        );
        assert_eq!(e.code, PusherErrorCode::RateLimited);
        let e = parse(
            r#"{"event":"pusher:error","data":"{\"code\":4200,\"message\":\"Invalid message format\"}"}"#,
        );
        assert_eq!(e.code, PusherErrorCode::InvalidFormat);
        let e = parse(r#"{"event":"pusher:error","data":{"code":4100,"message":"x\ny"}}"#);
        assert_eq!(e.code, PusherErrorCode::Other(4100));
        assert_eq!(e.message, "x y");
        assert_eq!(e.to_string(), "Pusher error 4100: x y");
        for odd in [
            r#"{"event":"pusher:error"}"#,
            r#"{"event":"pusher:error","data":{"code":"4009"}}"#,
            r#"{"event":"pusher:error","data":{"code":70000}}"#,
            r#"{"event":"pusher:error","data":"not json"}"#,
        ] {
            assert_eq!(parse(odd).code, PusherErrorCode::Missing, "{odd}");
        }
        let long = format!(
            r#"{{"event":"pusher:error","data":{{"code":1,"message":"{}"}}}}"#,
            "é".repeat(1000)
        );
        assert!(parse(&long).message.len() <= MAX_ERROR_MESSAGE_BYTES);
    }

    #[test]
    fn client_events_keep_their_data_text() {
        let f = PusherFrame::parse(
            r#"{"event":"client-mcp","channel":"private-agent.session.S1","data":{"id":"x-1","result":{}},"user_id":7}"#,
        )
        .unwrap();
        assert_eq!(
            f,
            PusherFrame::ClientEvent(ClientEvent {
                channel: "private-agent.session.S1".into(),
                event: "client-mcp".into(),
                data: r#"{"id":"x-1","result":{}}"#.into(),
                user_id: Some("7".into()),
            })
        );
        // Data relayed as a string (sockudo, for a non-object) is not a
        // whisper this client reads.
        assert_eq!(
            PusherFrame::parse(r#"{"event":"client-mcp","channel":"c","data":"{}"}"#),
            Err(FrameError::Shape)
        );
    }

    #[test]
    fn presence_members_and_subscriptions() {
        assert_eq!(
            PusherFrame::parse(
                r#"{"event":"pusher_internal:member_removed","channel":"presence-x","data":"{\"user_id\":\"page\"}"}"#
            )
            .unwrap(),
            PusherFrame::MemberRemoved {
                channel: "presence-x".into(),
                user_id: "page".into()
            }
        );
        assert_eq!(
            PusherFrame::parse(
                r#"{"event":"pusher_internal:subscription_succeeded","channel":"private-x","data":"{}"}"#
            )
            .unwrap(),
            PusherFrame::SubscriptionSucceeded {
                channel: "private-x".into(),
                members: vec![]
            }
        );
        assert_eq!(
            PusherFrame::parse(r#"{"event":"pusher:ping","data":{}}"#).unwrap(),
            PusherFrame::Ping
        );
        assert!(matches!(
            PusherFrame::parse(r#"{"event":"App\\Events\\Moved","channel":"c","data":"{}"}"#)
                .unwrap(),
            PusherFrame::Other { .. }
        ));
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"event":1}"#,
            r#"{"event":"a","event":"b"}"#,
        ] {
            assert!(PusherFrame::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn client_frames_are_json_and_escape() {
        let sub = ClientFrame::Subscribe {
            channel: "presence-x",
            auth: "k:\"sig",
            channel_data: Some(r#"{"user_id":"a"}"#),
        }
        .encode();
        let v: Value = serde_json::from_str(&sub).unwrap();
        assert_eq!(v["event"], "pusher:subscribe");
        assert_eq!(v["data"]["auth"], "k:\"sig");
        assert_eq!(v["data"]["channel_data"], r#"{"user_id":"a"}"#);
        let un: Value =
            serde_json::from_str(&ClientFrame::Unsubscribe { channel: "c\n" }.encode()).unwrap();
        assert_eq!(un["data"]["channel"], "c\n");
        assert_eq!(
            PusherFrame::parse(&ClientFrame::Pong.encode()).unwrap(),
            PusherFrame::Pong
        );
    }

    #[test]
    fn close_codes() {
        assert_eq!(
            PusherCloseCode::from_code(Some(1000)),
            PusherCloseCode::Normal
        );
        assert_eq!(
            PusherCloseCode::from_code(Some(1006)),
            PusherCloseCode::Abnormal
        );
        assert_eq!(
            PusherCloseCode::from_code(Some(4099)).reconnect(),
            Reconnect::Never
        );
        assert_eq!(
            PusherCloseCode::from_code(Some(4199)).reconnect(),
            Reconnect::AfterBackoff
        );
        assert_eq!(
            PusherCloseCode::from_code(Some(4299)).reconnect(),
            Reconnect::Immediately
        );
        assert_eq!(
            PusherCloseCode::from_code(Some(1009)).reconnect(),
            Reconnect::AfterBackoff
        );
        for c in 0..=u16::MAX {
            assert_eq!(PusherCloseCode::from_code(Some(c)).code(), c);
        }
        assert!(
            PusherCloseCode::MessageTooBig
                .to_string()
                .contains("size limit")
        );
    }

    proptest! {
        #[test]
        fn never_panics_on_any_text(s in "\\PC*") {
            let _ = PusherFrame::parse(&s);
        }

        #[test]
        fn never_panics_on_frame_shaped_text(
            event in prop::sample::select(vec![
                "pusher:connection_established", "pusher:error", "pusher:ping",
                "pusher_internal:member_added", "pusher_internal:subscription_succeeded",
                "client-mcp", "other",
            ]),
            data in prop_oneof![
                Just("{}".to_owned()), Just("null".to_owned()), "\"[ -~]{0,40}\"",
                "\\{\"(code|socket_id|user_id|message)\":([0-9]{1,7}|\"[ -~]{0,12}\")\\}",
            ],
            channel in prop::option::of("[a-z.-]{0,12}"),
        ) {
            let channel = channel.map(|c| format!(",\"channel\":{}", json_string(&c))).unwrap_or_default();
            let text = format!("{{\"event\":\"{event}\"{channel},\"data\":{data}}}");
            if let Ok(PusherFrame::Error(e)) = PusherFrame::parse(&text) {
                prop_assert!(e.message.len() <= MAX_ERROR_MESSAGE_BYTES);
            }
        }

        #[test]
        fn whispers_round_trip(
            channel in "[A-Za-z0-9_.=@,;-]{1,40}",
            key in "[a-z]{1,8}",
            value in "\\PC{0,40}",
        ) {
            let data = format!("{{{}:{}}}", json_string(&key), json_string(&value));
            let text = ClientFrame::ClientEvent { channel: &channel, event: "client-mcp", data: &data }.encode();
            let PusherFrame::ClientEvent(e) = PusherFrame::parse(&text).unwrap() else {
                panic!("not a client event");
            };
            prop_assert_eq!(e.channel, channel);
            prop_assert_eq!(e.data, data);
        }
    }
}
