//! A Reverb channel as an operation's relay: the receive leg and the POSTs
//! of the exchange machine carried by one [`PusherChannel`].
//!
//! The exchange machine speaks the relay's routes (a receive leg, a POST
//! per frame). Over a channel, the leg is the channel joined (open once the
//! server confirmed the subscription), each frame a whisper, and each
//! whisper that reaches the channel the "delivered" POST. Everything above
//! (pinning, refusals, the feed, framing, trust, leases, never twice) is the
//! same code for both transports: this adapter turns the exchange machine's
//! requests into the channel's WebSocket work ([`Transmit::Socket`]) and the
//! auth bridge's one HTTP request, and the channel's events back into the
//! answers the exchange machine reads.
//!
//! What the channel cannot carry is said here: a frame over the message
//! limit is refused before it is queued ([`ChannelError::TooLarge`]); on a
//! presence channel the page leaving ends the wait at once
//! ([`ChannelError::PageLeft`]); a reply that never comes is explained at
//! the deadline ([`ChannelLeg::explain`]). Whispers that are not replies to
//! this operation's ids (another agent's requests, the page's replies to
//! it) are handed to the leg, whose correlation ignores them, as every
//! relay frame.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::egress::endpoint::RelayUrl;
use crate::egress::wire::{
    HttpEvent, HttpMethod, HttpRequest, Leg, RequestId, SocketEvent, SocketTransmit, Transmit,
};
use crate::error::{
    ChannelError, Error, ProtocolError, TransportError, TransportErrorKind, redact_text,
};
use crate::error::{DeliveryUnknown, Unauthorized};
use crate::invite::invitation::RelayToken;
use crate::pusher::auth::ChannelAuth;
use crate::pusher::channel::{PusherChannel, PusherConfig, PusherEvent, PusherState};
use crate::pusher::endpoint::ReverbEndpoint;
use crate::pusher::error::PusherError;

/// How long the socket may take to open and the auth bridge to answer.
const OPEN_WAIT: Duration = Duration::from_secs(30);

/// The most of the auth bridge's answer read.
const AUTH_BODY_BYTES: usize = 16 * 1024;

/// The auth bridge requests' ids: far above an operation's own counter
/// (which starts at 1) and below nothing it could reach.
const AUTH_IDS: u64 = 1 << 62;

/// How the last connection of this leg ended, for the words of an error
/// that follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ended {
    PageLeft,
    Closed(String),
}

#[derive(Debug)]
struct AuthInFlight {
    id: RequestId,
    status: Option<u16>,
    body: Vec<u8>,
}

/// One operation's (or one warm attachment's) channel, in the exchange
/// machine's terms. See the module's documentation.
#[derive(Debug)]
pub(crate) struct ChannelLeg {
    endpoint: ReverbEndpoint,
    token: RelayToken,
    config: PusherConfig,
    /// The connection, from the socket's opening to its close.
    conn: Option<PusherChannel>,
    /// The exchange machine's receive-leg request riding the channel.
    events: Option<RequestId>,
    /// Its head (the leg open) was reported.
    told_open: bool,
    /// The POSTs whose whispers wait in the channel's queue, in order.
    posts: VecDeque<RequestId>,
    /// Frames asked for before the channel was joined (a notification
    /// needs no leg of its own): whispered once it is.
    unjoined: VecDeque<(RequestId, String)>,
    auth: Option<AuthInFlight>,
    next_auth: u64,
    out: VecDeque<Transmit>,
    to_op: VecDeque<(RequestId, HttpEvent)>,
    /// This connection's own presence `user_id` (from the signed
    /// `channel_data`).
    own_user: Option<String>,
    ended: Option<Ended>,
    /// The last `pusher:error` of this connection, bounded.
    refused: Option<String>,
    /// Another member than this connection's user was present once: only
    /// then does an empty roster mean the page left (a bridge that signs
    /// the agent as the person's own user makes the page invisible).
    saw_other: bool,
}

impl ChannelLeg {
    pub(crate) fn new(endpoint: ReverbEndpoint, token: RelayToken, config: PusherConfig) -> Self {
        ChannelLeg {
            endpoint,
            token,
            config,
            conn: None,
            events: None,
            told_open: false,
            posts: VecDeque::new(),
            unjoined: VecDeque::new(),
            auth: None,
            next_auth: AUTH_IDS,
            out: VecDeque::new(),
            to_op: VecDeque::new(),
            own_user: None,
            ended: None,
            refused: None,
            saw_other: false,
        }
    }

    /// The WebSocket server's endpoint (vetting, proxy, TLS).
    pub(crate) fn endpoint(&self) -> &ReverbEndpoint {
        &self.endpoint
    }

    fn is_presence(&self) -> bool {
        self.endpoint.channel().is_presence()
    }

    /// Whether another member than this connection's user is present on
    /// the joined presence channel.
    fn other_present(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| {
            c.members()
                .iter()
                .any(|m| Some(m.as_str()) != self.own_user.as_deref())
        })
    }

    /// Whether the page left: on a joined presence channel where another
    /// member was seen, none is present now.
    fn page_absent(&mut self) -> bool {
        if !self.is_presence()
            || !self
                .conn
                .as_ref()
                .is_some_and(|c| c.state() == PusherState::Subscribed)
        {
            return false;
        }
        if self.other_present() {
            self.saw_other = true;
            return false;
        }
        self.saw_other
    }

    /// Takes one of the exchange machine's transmits.
    pub(crate) fn take(&mut self, transmit: Transmit, now: Instant) {
        match transmit {
            Transmit::Request(req) => match req.leg {
                Leg::Events | Leg::Poll => self.take_leg(req.id, now),
                Leg::Post => self.take_post(req.id, req.body.as_deref(), now),
            },
            Transmit::Cancel(id) => self.cancel(id),
            Transmit::Release(_) | Transmit::Connect(_) | Transmit::Socket(_) => {}
        }
    }

    fn take_leg(&mut self, id: RequestId, now: Instant) {
        self.events = Some(id);
        self.told_open = false;
        match self.conn.as_ref().map(PusherChannel::state) {
            Some(PusherState::Subscribed) => {
                if self.page_absent() {
                    self.fail_leg(Error::Channel(ChannelError::PageLeft { call: None }), false);
                } else {
                    self.told_open = true;
                    self.to_op.push_back((id, HttpEvent::Head(200)));
                }
            }
            Some(PusherState::Refused) => {
                self.fail_leg(Error::AttachmentUnauthorized(Unauthorized::Channel), false);
            }
            Some(
                PusherState::Connecting | PusherState::AwaitingAuth | PusherState::Subscribing,
            ) => {}
            Some(PusherState::Closed) | None => self.open(now),
        }
    }

    fn open(&mut self, now: Instant) {
        let ch = self.endpoint.channel();
        match PusherChannel::new(ch.app_key(), ch.channel(), self.config.clone(), now) {
            Ok(conn) => {
                self.conn = Some(conn);
                self.ended = None;
                self.refused = None;
                self.own_user = None;
                self.out.push_back(Transmit::Socket(SocketTransmit::Open {
                    url: self.endpoint.connect_url(),
                    deadline: now + OPEN_WAIT,
                }));
            }
            Err(e) => {
                let e = Error::Transport(TransportError::new(
                    TransportErrorKind::Connect,
                    e.to_string(),
                ));
                self.fail_leg(e, false);
            }
        }
    }

    fn take_post(&mut self, id: RequestId, body: Option<&[u8]>, now: Instant) {
        let Some(body) = body else {
            // `unregister`: a channel has no such route; leaving is closing.
            self.to_op.push_back((id, HttpEvent::Head(200)));
            self.to_op.push_back((id, HttpEvent::End));
            return;
        };
        let not_sent = |error| HttpEvent::NotSent {
            error,
            kept_connection: false,
        };
        let Ok(text) = std::str::from_utf8(body) else {
            let e = Error::Protocol(ProtocolError::MalformedResult);
            self.to_op.push_back((id, not_sent(e)));
            return;
        };
        let joined = self
            .conn
            .as_ref()
            .is_some_and(|c| c.state() == PusherState::Subscribed);
        if !joined {
            // A notification goes out without waiting for a leg: over a
            // channel it waits for the join (opened now if need be).
            match self.conn.as_ref().map(PusherChannel::state) {
                Some(PusherState::Refused) => {
                    let e = Error::AttachmentUnauthorized(Unauthorized::Channel);
                    self.to_op.push_back((id, not_sent(e)));
                }
                Some(PusherState::Closed) | None => {
                    self.open(now);
                    self.unjoined.push_back((id, text.to_owned()));
                }
                Some(_) => self.unjoined.push_back((id, text.to_owned())),
            }
            return;
        }
        self.whisper(id, text);
    }

    /// Queues a whisper for the POST `id` on the joined channel.
    fn whisper(&mut self, id: RequestId, text: &str) {
        let not_sent = |error| HttpEvent::NotSent {
            error,
            kept_connection: false,
        };
        let Some(conn) = self.conn.as_mut() else {
            self.to_op.push_back((id, not_sent(not_joined())));
            return;
        };
        match conn.send_whisper(text) {
            Ok(()) => self.posts.push_back(id),
            Err(PusherError::MessageTooLarge { size, limit }) => {
                let e = Error::Channel(ChannelError::TooLarge {
                    size,
                    limit,
                    method: method_of(text),
                });
                self.to_op.push_back((id, not_sent(e)));
            }
            Err(PusherError::NotSubscribed | PusherError::Closed) => {
                self.to_op.push_back((id, not_sent(not_joined())));
            }
            Err(e) => {
                let e =
                    Error::Transport(TransportError::new(TransportErrorKind::Io, e.to_string()));
                self.to_op.push_back((id, not_sent(e)));
            }
        }
    }

    fn cancel(&mut self, id: RequestId) {
        if self.events == Some(id) {
            self.events = None;
            self.told_open = false;
            self.close();
        } else if let Some(i) = self.unjoined.iter().position(|(p, _)| *p == id) {
            self.unjoined.remove(i);
        } else if let Some(i) = self.posts.iter().position(|p| *p == id) {
            // Given up before the rate limit let it go: it never leaves.
            self.posts.remove(i);
            if let Some(conn) = self.conn.as_mut() {
                conn.withdraw_whisper(i);
            }
        } else if self.auth.as_ref().is_some_and(|a| a.id == id) {
            self.auth = None;
        }
    }

    /// Closes the connection at the end of an operation that keeps no leg.
    pub(crate) fn shut(&mut self) {
        self.events = None;
        self.told_open = false;
        self.close();
    }

    /// Closes the connection (nothing queued leaves).
    fn close(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            conn.close();
            self.out.push_back(Transmit::Socket(SocketTransmit::Close));
        }
        self.posts.clear();
        self.auth = None;
        self.fail_unjoined(&not_joined());
    }

    /// The frames waiting for a join that will not come: never sent.
    fn fail_unjoined(&mut self, error: &Error) {
        for (id, _) in std::mem::take(&mut self.unjoined) {
            let event = HttpEvent::NotSent {
                error: error.clone(),
                kept_connection: false,
            };
            self.to_op.push_back((id, event));
        }
    }

    /// The leg cannot carry replies: its request ends with `error` (as
    /// [`HttpEvent::NotSent`] while it never opened, else failed), and the
    /// socket is closed.
    fn fail_leg(&mut self, error: Error, close: bool) {
        self.fail_unjoined(&error);
        if close {
            self.close();
        }
        if let Some(id) = self.events {
            let event = if self.told_open {
                HttpEvent::Failed(error)
            } else {
                HttpEvent::NotSent {
                    error,
                    kept_connection: false,
                }
            };
            self.to_op.push_back((id, event));
            self.told_open = false;
        }
    }

    /// The next thing for the runtime to do.
    pub(crate) fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if let Some(t) = self.out.pop_front() {
            return Some(t);
        }
        let conn = self.conn.as_mut()?;
        let queued = conn.queued_whispers();
        let text = conn.poll_transmit(now)?;
        if conn.queued_whispers() < queued
            && let Some(id) = self.posts.pop_front()
        {
            // Handed to the socket: as far as a relay POST goes, delivered.
            self.to_op.push_back((id, HttpEvent::Head(202)));
            self.to_op.push_back((id, HttpEvent::End));
        }
        Some(Transmit::Socket(SocketTransmit::Text(text)))
    }

    /// The next answer for the exchange machine.
    pub(crate) fn poll_op_event(&mut self) -> Option<(RequestId, HttpEvent)> {
        self.to_op.pop_front()
    }

    /// Whether nothing waits to be handed to the runtime or the machine.
    pub(crate) fn is_quiet(&self) -> bool {
        self.out.is_empty() && self.to_op.is_empty()
    }

    /// Whether `id` is this leg's auth bridge request.
    pub(crate) fn owns(&self, id: RequestId) -> bool {
        id.0 >= AUTH_IDS
    }

    /// An event of the auth bridge request.
    pub(crate) fn handle_http(&mut self, id: RequestId, event: HttpEvent, now: Instant) {
        let Some(auth) = self.auth.as_mut().filter(|a| a.id == id) else {
            return;
        };
        match event {
            HttpEvent::Head(status) => auth.status = Some(status),
            HttpEvent::Body(chunk) => {
                let room = AUTH_BODY_BYTES.saturating_sub(auth.body.len());
                auth.body
                    .extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
            }
            HttpEvent::End => {
                let Some(auth) = self.auth.take() else {
                    return;
                };
                let status = auth.status.unwrap_or(0);
                if !(200..300).contains(&status) {
                    let e = match status {
                        401 | 403 => Error::AttachmentUnauthorized(Unauthorized::Bridge { status }),
                        410 => Error::SurfaceUnavailable,
                        _ => Error::RelayFailed { status },
                    };
                    self.fail_leg(e, true);
                    return;
                }
                let granted = ChannelAuth::from_response(&auth.body).ok().and_then(|a| {
                    let user = a.channel_data().and_then(user_of);
                    let conn = self.conn.as_mut()?;
                    conn.authorize(a, now).ok().map(|()| user)
                });
                match granted {
                    Some(user) => self.own_user = user,
                    None => self.fail_leg(Error::Channel(ChannelError::AuthAnswer), true),
                }
            }
            HttpEvent::Failed(error) | HttpEvent::NotSent { error, .. } => {
                self.auth = None;
                self.fail_leg(error, true);
            }
        }
    }

    /// What the channel's WebSocket did.
    pub(crate) fn handle_socket(&mut self, event: SocketEvent, now: Instant) {
        if self.conn.is_none() {
            // A socket closed here reports nothing more; anything else is
            // of a socket that is not this leg's.
            return;
        }
        match event {
            SocketEvent::Opened => {}
            SocketEvent::Text(text) => {
                if let Some(conn) = self.conn.as_mut() {
                    conn.handle_text(&text, now);
                }
            }
            SocketEvent::Closed(code) => {
                if let Some(conn) = self.conn.as_mut() {
                    conn.handle_close(code);
                }
            }
            SocketEvent::Failed(error) => {
                self.conn = None;
                self.posts.clear();
                self.auth = None;
                self.fail_unjoined(&error);
                self.fail_leg(error, false);
                return;
            }
        }
        self.pump(now);
    }

    /// When the channel next needs the clock (a ping, a paced whisper).
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.conn.as_ref().and_then(PusherChannel::poll_timeout)
    }

    /// The clock.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if let Some(conn) = self.conn.as_mut() {
            conn.handle_timeout(now);
        }
        self.pump(now);
    }

    /// Acts on what the channel reported.
    fn pump(&mut self, now: Instant) {
        loop {
            let Some(event) = self.conn.as_mut().and_then(PusherChannel::poll_event) else {
                return;
            };
            match event {
                PusherEvent::Connected { .. } => {}
                PusherEvent::AuthNeeded(request) => {
                    let id = RequestId(self.next_auth);
                    self.next_auth += 1;
                    let wire = self.endpoint.auth_request(&request, &self.token);
                    self.out.push_back(Transmit::Request(HttpRequest {
                        id,
                        method: HttpMethod::Post,
                        leg: Leg::Post,
                        url: RelayUrl::plain(&wire.url),
                        headers: wire.headers,
                        body: Some(wire.body.into_bytes()),
                        deadline: now + OPEN_WAIT,
                        fresh: false,
                    }));
                    self.auth = Some(AuthInFlight {
                        id,
                        status: None,
                        body: Vec::new(),
                    });
                }
                PusherEvent::Subscribed => {
                    for (id, text) in std::mem::take(&mut self.unjoined) {
                        self.whisper(id, &text);
                    }
                    if self.page_absent() {
                        self.fail_leg(Error::Channel(ChannelError::PageLeft { call: None }), false);
                    } else if let Some(id) = self.events.filter(|_| !self.told_open) {
                        self.told_open = true;
                        self.to_op.push_back((id, HttpEvent::Head(200)));
                    }
                }
                PusherEvent::SubscriptionRefused(e) => {
                    self.refused = Some(self.scrub(&e.message));
                    self.fail_leg(Error::AttachmentUnauthorized(Unauthorized::Channel), true);
                    return;
                }
                PusherEvent::Whisper(w) => {
                    if let Some(id) = self.events.filter(|_| self.told_open) {
                        self.to_op
                            .push_back((id, HttpEvent::Body(sse_event(&w.data))));
                    }
                }
                PusherEvent::MemberAdded(_) => {
                    let _ = self.page_absent();
                }
                PusherEvent::MemberRemoved(_) => {
                    if self.page_absent() {
                        self.ended = Some(Ended::PageLeft);
                        self.fail_leg(Error::Channel(ChannelError::PageLeft { call: None }), false);
                    }
                }
                PusherEvent::ServerError(e) => {
                    let message = self.scrub(&e.message);
                    self.refused = Some(match e.code.code() {
                        Some(code) => format!("{message} (Pusher error {code})"),
                        None => message,
                    });
                }
                PusherEvent::Closed(why) => {
                    let reason = why.to_string();
                    self.conn = None;
                    self.out.push_back(Transmit::Socket(SocketTransmit::Close));
                    let e = Error::Channel(ChannelError::Closed {
                        reason: reason.clone(),
                        call: None,
                    });
                    for id in std::mem::take(&mut self.posts) {
                        let event = HttpEvent::NotSent {
                            error: e.clone(),
                            kept_connection: false,
                        };
                        self.to_op.push_back((id, event));
                    }
                    self.auth = None;
                    self.fail_unjoined(&e);
                    self.ended = Some(Ended::Closed(reason));
                    self.fail_leg(e, false);
                    return;
                }
            }
        }
    }

    /// A server's words, made safe to quote: never the token (a server
    /// that learnt it cannot make an error carry it), nor a credential
    /// ([`redact_text`]).
    fn scrub(&self, text: &str) -> String {
        let token = self.token.expose();
        let text = if token.is_empty() {
            text.to_owned()
        } else {
            text.replace(token, "[redacted]")
        };
        redact_text(&text)
    }

    /// The words of an error over this channel: a wait that ended at its
    /// deadline says what a channel cannot tell; a request that may have
    /// acted says how the channel ended.
    pub(crate) fn explain(&self, error: Error) -> Error {
        let presence = self.is_presence() && self.other_present();
        match error {
            Error::Timeout => Error::Channel(ChannelError::Unanswered {
                call: None,
                presence,
                refused: self.refused.clone(),
            }),
            Error::CallTimeout(d) => Error::Channel(ChannelError::Unanswered {
                call: Some(d),
                presence,
                refused: self.refused.clone(),
            }),
            Error::DeliveryUnknown(d) => self.ended_with(d),
            e => e,
        }
    }

    fn ended_with(&self, d: DeliveryUnknown) -> Error {
        match &self.ended {
            Some(Ended::PageLeft) => Error::Channel(ChannelError::PageLeft { call: Some(d) }),
            Some(Ended::Closed(reason)) => Error::Channel(ChannelError::Closed {
                reason: reason.clone(),
                call: Some(d),
            }),
            None => Error::DeliveryUnknown(d),
        }
    }
}

fn not_joined() -> Error {
    Error::Transport(TransportError::new(
        TransportErrorKind::Io,
        "the channel is not joined: nothing was whispered",
    ))
}

/// The whisper as one SSE event: a `data:` line per line of its JSON text
/// (JSON allows line breaks only between tokens).
fn sse_event(data: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 16);
    for line in data.split(['\r', '\n']).filter(|l| !l.is_empty()) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

/// The JSON-RPC method of a frame, for an error's words.
fn method_of(frame: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Method {
        method: Option<String>,
    }
    serde_json::from_str::<Method>(frame)
        .ok()
        .and_then(|m| m.method)
        .filter(|m| m.len() <= 128)
        .unwrap_or_else(|| "request".to_owned())
}

/// A presence `channel_data`'s `user_id`.
fn user_of(channel_data: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(channel_data).ok()?;
    match v.get("user_id")? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}
