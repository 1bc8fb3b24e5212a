//! One connection to a Pusher server joined to one private (or presence)
//! channel, as a sans-IO state machine.
//!
//! The runtime owns the WebSocket. It feeds every text message to
//! [`PusherChannel::handle_text`], a close to [`PusherChannel::handle_close`],
//! and the clock to [`PusherChannel::handle_timeout`] when
//! [`PusherChannel::poll_timeout`] comes due; it writes whatever
//! [`PusherChannel::poll_transmit`] gives as text messages, and acts on
//! [`PusherChannel::poll_event`]: above all [`PusherEvent::AuthNeeded`],
//! which asks it to POST to the host app's auth bridge and hand the answer
//! to [`PusherChannel::authorize`].

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use super::auth::{AuthRequest, ChannelAuth};
use super::error::PusherError;
use super::frames::{
    ClientFrame, PusherCloseCode, PusherErrorCode, PusherFrame, PusherServerError, Reconnect,
};
use crate::invite::transport::{is_app_key, is_joinable_channel};

/// Laravel Reverb's default `max_message_size`, in bytes: the default limit
/// of one outgoing WebSocket message.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 10_000;

/// The default cap on one incoming text message, in bytes (a larger one is
/// ignored and counted): 256 KiB, the relay's own body cap.
pub const DEFAULT_MAX_RECEIVED_BYTES: usize = 262_144;

/// The default client-event budget: 10 per second, Pusher Channels'
/// documented per-connection limit (sockudo allows 100).
pub const DEFAULT_CLIENT_EVENTS_PER_SECOND: u32 = 10;

/// The most events kept for the runtime to poll; past it, further whispers
/// and member events are dropped and counted.
pub const MAX_PENDING_EVENTS: usize = 4096;

/// The channel layer's settings. Build with [`PusherConfig::default`] and
/// change the fields.
///
/// ```
/// use human_plus_core::PusherConfig;
///
/// let mut c = PusherConfig::default();
/// assert_eq!(c.max_message_bytes, 10_000);
/// c.client_events = 100; // sockudo's limit
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PusherConfig {
    /// The largest WebSocket message a whisper may be (default
    /// [`DEFAULT_MAX_MESSAGE_BYTES`], Reverb's default).
    pub max_message_bytes: usize,
    /// The largest incoming message read (default
    /// [`DEFAULT_MAX_RECEIVED_BYTES`]).
    pub max_received_bytes: usize,
    /// Client events allowed per [`PusherConfig::client_event_window`]
    /// (default [`DEFAULT_CLIENT_EVENTS_PER_SECOND`]); at least 1 is used.
    pub client_events: u32,
    /// The window of the rate limit (default one second).
    pub client_event_window: Duration,
    /// The longest silence before a ping, at most; the server's
    /// `activity_timeout` is used when shorter (default 120 s).
    pub activity_timeout: Duration,
    /// How long a ping waits for any message before the connection is
    /// declared dead (default 30 s, as pusher-js).
    pub pong_timeout: Duration,
    /// How long the server may take to send `pusher:connection_established`
    /// (default 30 s).
    pub welcome_timeout: Duration,
    /// The client event whispers use (default `client-mcp`: Laravel Echo's
    /// `whisper("mcp", …)`).
    pub whisper_event: String,
    /// The most whispers waiting for the rate limit (default 256).
    pub max_queued_whispers: usize,
}

impl Default for PusherConfig {
    fn default() -> Self {
        PusherConfig {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_received_bytes: DEFAULT_MAX_RECEIVED_BYTES,
            client_events: DEFAULT_CLIENT_EVENTS_PER_SECOND,
            client_event_window: Duration::from_secs(1),
            activity_timeout: Duration::from_secs(120),
            pong_timeout: Duration::from_secs(30),
            welcome_timeout: Duration::from_secs(30),
            whisper_event: "client-mcp".to_owned(),
            max_queued_whispers: 256,
        }
    }
}

/// Where the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PusherState {
    /// Waiting for `pusher:connection_established`.
    Connecting,
    /// Waiting for the runtime to bring the auth bridge's signature.
    AwaitingAuth,
    /// `pusher:subscribe` sent, waiting for the server's answer.
    Subscribing,
    /// Subscribed: whispers go both ways.
    Subscribed,
    /// The server refused the subscription (4009); the socket stays open
    /// but the channel is not joined.
    Refused,
    /// The connection is over.
    Closed,
}

/// Why the connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PusherClosed {
    /// The server closed it (or it dropped: [`PusherCloseCode::Abnormal`]).
    Server(PusherCloseCode),
    /// No message came within the pong timeout after a ping.
    PongTimeout,
    /// No `pusher:connection_established` within the welcome timeout.
    NoWelcome,
    /// This side closed it ([`PusherChannel::close`]).
    Local,
}

impl PusherClosed {
    /// What a client should do next.
    #[must_use]
    pub fn reconnect(self) -> Reconnect {
        match self {
            PusherClosed::Server(code) => code.reconnect(),
            PusherClosed::PongTimeout | PusherClosed::NoWelcome => Reconnect::AfterBackoff,
            PusherClosed::Local => Reconnect::Never,
        }
    }
}

impl fmt::Display for PusherClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PusherClosed::Server(code) => write!(f, "the channel server connection {code}"),
            PusherClosed::PongTimeout => {
                f.write_str("the channel server did not answer a ping within the pong timeout")
            }
            PusherClosed::NoWelcome => {
                f.write_str("the channel server did not establish the connection in time")
            }
            PusherClosed::Local => f.write_str("the channel connection was closed here"),
        }
    }
}

/// A whisper received on the channel.
///
/// `data` is the JSON object exactly as the server relayed it. Every
/// subscriber sees every whisper (another agent's requests and the page's
/// replies to them): the layer above takes as an answer only a reply whose
/// id it sent ([`IncomingWhisper::reply_to`], [`crate::correlate_bytes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingWhisper {
    /// The JSON object's text.
    pub data: String,
    /// The sender's `user_id`, when the server said.
    pub user_id: Option<String>,
}

impl IncomingWhisper {
    /// Whether this whisper is the reply to the request with id `expected`
    /// (`Reply`), or anything else (`Ignore`): a request, a notification,
    /// another client's reply.
    ///
    /// ```
    /// use human_plus_core::{Correlation, IncomingWhisper};
    ///
    /// let w = IncomingWhisper { data: r#"{"jsonrpc":"2.0","id":"other-1","result":{}}"#.into(), user_id: None };
    /// assert!(matches!(w.reply_to("mine-1"), Correlation::Ignore));
    /// assert!(matches!(w.reply_to("other-1"), Correlation::Reply(_)));
    /// ```
    #[must_use]
    pub fn reply_to(&self, expected: &str) -> crate::formats::jsonrpc::Correlation {
        crate::formats::jsonrpc::correlate_bytes(self.data.as_bytes(), expected)
    }
}

/// What the channel tells the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PusherEvent {
    /// `pusher:connection_established`: the socket id and the activity
    /// timeout in force.
    Connected {
        /// The socket id.
        socket_id: String,
        /// The silence after which a ping goes.
        activity_timeout: Duration,
    },
    /// POST to the host app's auth bridge with the token as
    /// `Authorization: Bearer`, then call [`PusherChannel::authorize`].
    AuthNeeded(AuthRequest),
    /// The channel is joined.
    Subscribed,
    /// The server refused the subscription (4009: a forged or stale
    /// signature).
    SubscriptionRefused(PusherServerError),
    /// A whisper from another subscriber.
    Whisper(IncomingWhisper),
    /// A presence member joined.
    MemberAdded(String),
    /// A presence member left.
    MemberRemoved(String),
    /// Any other `pusher:error`.
    ServerError(PusherServerError),
    /// The connection ended; the runtime closes its socket (if open).
    Closed(PusherClosed),
}

/// A connection joined to one private or presence channel.
///
/// One value is one WebSocket connection: after [`PusherEvent::Closed`] a
/// runtime that may reconnect ([`PusherClosed::reconnect`]) opens a new
/// socket with a new `PusherChannel` (a new socket id needs a new
/// signature).
///
/// ```
/// use std::time::{Duration, Instant};
/// use human_plus_core::{ChannelAuth, PusherChannel, PusherConfig, PusherEvent, PusherState};
///
/// let t0 = Instant::now();
/// let mut ch = PusherChannel::new("app-key", "private-agent.session.S1", PusherConfig::default(), t0)?;
/// ch.handle_text(r#"{"event":"pusher:connection_established","data":"{\"socket_id\":\"1.2\",\"activity_timeout\":120}"}"#, t0);
/// assert!(matches!(ch.poll_event(), Some(PusherEvent::Connected { .. })));
/// let Some(PusherEvent::AuthNeeded(req)) = ch.poll_event() else { panic!() };
/// assert_eq!(req.socket_id, "1.2");
///
/// // The runtime POSTs req.form_body() to the bridge and brings back its answer:
/// ch.authorize(ChannelAuth::from_response(br#"{"auth":"app-key:00ff"}"#)?, t0)?;
/// assert!(ch.poll_transmit(t0).unwrap().contains("pusher:subscribe"));
/// ch.handle_text(r#"{"event":"pusher_internal:subscription_succeeded","channel":"private-agent.session.S1","data":"{}"}"#, t0);
/// assert_eq!(ch.state(), PusherState::Subscribed);
///
/// ch.send_whisper(r#"{"jsonrpc":"2.0","id":"a-1","method":"tools/list"}"#)?;
/// assert!(ch.poll_transmit(t0).unwrap().starts_with(r#"{"event":"client-mcp""#));
/// // Silence: a ping goes after the activity timeout.
/// assert_eq!(ch.poll_timeout(), Some(t0 + Duration::from_secs(120)));
/// # Ok::<(), human_plus_core::PusherError>(())
/// ```
pub struct PusherChannel {
    config: PusherConfig,
    app_key: String,
    channel: String,
    state: PusherState,
    socket_id: Option<String>,
    activity_timeout: Duration,
    started: Instant,
    last_heard: Instant,
    ping_sent: Option<Instant>,
    control: VecDeque<String>,
    whispers: VecDeque<String>,
    sent: VecDeque<Instant>,
    events: VecDeque<PusherEvent>,
    ignored: u64,
    dropped: u64,
    members: BTreeSet<String>,
}

/// The most presence members a channel keeps track of.
const MAX_MEMBERS: usize = 1000;

impl fmt::Debug for PusherChannel {
    /// The queued frames are left out: a subscribe frame carries the
    /// channel's auth signature.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PusherChannel")
            .field("channel", &self.channel)
            .field("state", &self.state)
            .field("socket_id", &self.socket_id)
            .field("activity_timeout", &self.activity_timeout)
            .field("queued_frames", &self.control.len())
            .field("queued_whispers", &self.whispers.len())
            .field("events", &self.events.len())
            .finish_non_exhaustive()
    }
}

impl PusherChannel {
    /// A connection about to open, for `channel` of the app `app_key`.
    ///
    /// # Errors
    /// [`PusherError::ChannelName`], [`PusherError::AppKey`].
    pub fn new(
        app_key: &str,
        channel: &str,
        config: PusherConfig,
        now: Instant,
    ) -> Result<PusherChannel, PusherError> {
        if !is_app_key(app_key) {
            return Err(PusherError::AppKey);
        }
        if !is_joinable_channel(channel) {
            return Err(PusherError::ChannelName);
        }
        Ok(PusherChannel {
            activity_timeout: config.activity_timeout,
            config,
            app_key: app_key.to_owned(),
            channel: channel.to_owned(),
            state: PusherState::Connecting,
            socket_id: None,
            started: now,
            last_heard: now,
            ping_sent: None,
            control: VecDeque::new(),
            whispers: VecDeque::new(),
            sent: VecDeque::new(),
            events: VecDeque::new(),
            ignored: 0,
            dropped: 0,
            members: BTreeSet::new(),
        })
    }

    /// Where the connection is.
    #[must_use]
    pub fn state(&self) -> PusherState {
        self.state
    }

    /// The channel's name.
    #[must_use]
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The socket id, once the server gave it.
    #[must_use]
    pub fn socket_id(&self) -> Option<&str> {
        self.socket_id.as_deref()
    }

    /// Whether the channel is a presence channel (members are reported).
    #[must_use]
    pub fn is_presence(&self) -> bool {
        self.channel.starts_with("presence-")
    }

    /// A presence channel's members now (`user_id`s, this connection's own
    /// included), as the server reported them; empty for a private
    /// channel.
    #[must_use]
    pub fn members(&self) -> &BTreeSet<String> {
        &self.members
    }

    /// Takes the queued whisper at `index` (0 is the next to leave) back
    /// out of the queue, unsent: what a request that was given up before
    /// the rate limit let it go needs. False when there is none.
    pub fn withdraw_whisper(&mut self, index: usize) -> bool {
        self.whispers.remove(index).is_some()
    }

    /// Messages read and not acted on: not Pusher frames, over the size
    /// cap, other channels, other events.
    #[must_use]
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    /// Events dropped because [`MAX_PENDING_EVENTS`] were waiting.
    #[must_use]
    pub fn dropped_events(&self) -> u64 {
        self.dropped
    }

    /// Whispers waiting for the rate limit.
    #[must_use]
    pub fn queued_whispers(&self) -> usize {
        self.whispers.len()
    }

    fn push_event(&mut self, event: PusherEvent) {
        let essential = matches!(
            event,
            PusherEvent::Closed(_)
                | PusherEvent::Subscribed
                | PusherEvent::SubscriptionRefused(_)
                | PusherEvent::Connected { .. }
                | PusherEvent::AuthNeeded(_)
        );
        if self.events.len() >= MAX_PENDING_EVENTS && !essential {
            self.dropped += 1;
        } else {
            self.events.push_back(event);
        }
    }

    fn end(&mut self, why: PusherClosed) {
        if self.state != PusherState::Closed {
            self.state = PusherState::Closed;
            self.control.clear();
            self.whispers.clear();
            self.push_event(PusherEvent::Closed(why));
        }
    }

    /// One text message from the server.
    pub fn handle_text(&mut self, text: &str, now: Instant) {
        if self.state == PusherState::Closed {
            return;
        }
        // Any message proves the connection alive.
        self.last_heard = now;
        self.ping_sent = None;
        if text.len() > self.config.max_received_bytes {
            self.ignored += 1;
            return;
        }
        let Ok(frame) = PusherFrame::parse(text) else {
            self.ignored += 1;
            return;
        };
        match frame {
            PusherFrame::ConnectionEstablished {
                socket_id,
                activity_timeout,
            } if self.state == PusherState::Connecting => {
                let server =
                    activity_timeout.map_or(self.config.activity_timeout, Duration::from_secs);
                self.activity_timeout = server
                    .min(self.config.activity_timeout)
                    .max(Duration::from_secs(1));
                self.socket_id = Some(socket_id.clone());
                self.state = PusherState::AwaitingAuth;
                self.push_event(PusherEvent::Connected {
                    socket_id: socket_id.clone(),
                    activity_timeout: self.activity_timeout,
                });
                self.push_event(PusherEvent::AuthNeeded(AuthRequest {
                    socket_id,
                    channel_name: self.channel.clone(),
                }));
            }
            PusherFrame::Ping => self.control.push_back(ClientFrame::Pong.encode()),
            PusherFrame::Pong => {}
            PusherFrame::Error(e) => {
                if self.state == PusherState::Subscribing && e.code == PusherErrorCode::Unauthorized
                {
                    self.state = PusherState::Refused;
                    self.push_event(PusherEvent::SubscriptionRefused(e));
                } else {
                    self.push_event(PusherEvent::ServerError(e));
                }
            }
            PusherFrame::Other {
                event,
                channel: Some(channel),
            } if event == "pusher:subscription_error"
                && channel == self.channel
                && self.state == PusherState::Subscribing =>
            {
                // Pusher's own name for a refused subscription.
                self.state = PusherState::Refused;
                self.push_event(PusherEvent::SubscriptionRefused(PusherServerError {
                    code: PusherErrorCode::Missing,
                    message: "pusher:subscription_error".to_owned(),
                }));
            }
            PusherFrame::SubscriptionSucceeded { channel, members }
                if channel == self.channel && self.state == PusherState::Subscribing =>
            {
                self.members = members.into_iter().collect();
                self.state = PusherState::Subscribed;
                self.push_event(PusherEvent::Subscribed);
            }
            PusherFrame::MemberAdded { channel, user_id }
                if channel == self.channel && self.state == PusherState::Subscribed =>
            {
                if self.members.len() < MAX_MEMBERS {
                    self.members.insert(user_id.clone());
                }
                self.push_event(PusherEvent::MemberAdded(user_id));
            }
            PusherFrame::MemberRemoved { channel, user_id }
                if channel == self.channel && self.state == PusherState::Subscribed =>
            {
                self.members.remove(&user_id);
                self.push_event(PusherEvent::MemberRemoved(user_id));
            }
            PusherFrame::ClientEvent(e)
                if e.channel == self.channel
                    && e.event == self.config.whisper_event
                    && self.state == PusherState::Subscribed =>
            {
                self.push_event(PusherEvent::Whisper(IncomingWhisper {
                    data: e.data,
                    user_id: e.user_id,
                }));
            }
            _ => self.ignored += 1,
        }
    }

    /// The WebSocket closed (`code` from its close frame; `None` when it
    /// dropped without one).
    pub fn handle_close(&mut self, code: Option<u16>) {
        self.end(PusherClosed::Server(PusherCloseCode::from_code(code)));
    }

    /// Closes from this side: nothing more is sent; the runtime closes its
    /// socket (code 1000).
    pub fn close(&mut self) {
        self.end(PusherClosed::Local);
    }

    /// The auth bridge's signature for the socket and channel of the last
    /// [`PusherEvent::AuthNeeded`]; queues `pusher:subscribe`. (`now` is
    /// taken for symmetry with the other inputs: a subscription the server
    /// never answers is bounded by the caller's own deadline.)
    ///
    /// # Errors
    /// [`PusherError::NotAwaitingAuth`] when none was asked for,
    /// [`PusherError::AuthKey`] when it was signed for another app key,
    /// [`PusherError::ChannelData`] when a presence channel's auth lacks
    /// `channel_data` or a private channel's has one.
    pub fn authorize(&mut self, auth: ChannelAuth, now: Instant) -> Result<(), PusherError> {
        let _ = now;
        if self.state == PusherState::Closed {
            return Err(PusherError::Closed);
        }
        if self.state != PusherState::AwaitingAuth {
            return Err(PusherError::NotAwaitingAuth);
        }
        if auth.app_key() != self.app_key {
            return Err(PusherError::AuthKey);
        }
        if self.is_presence() != auth.channel_data().is_some() {
            return Err(PusherError::ChannelData);
        }
        self.control.push_back(
            ClientFrame::Subscribe {
                channel: &self.channel,
                auth: auth.expose(),
                channel_data: auth.channel_data(),
            }
            .encode(),
        );
        self.state = PusherState::Subscribing;
        Ok(())
    }

    /// The WebSocket message a whisper of `data` would be, in bytes.
    #[must_use]
    pub fn whisper_size(&self, data: &str) -> usize {
        self.encode_whisper(data).len()
    }

    fn encode_whisper(&self, data: &str) -> String {
        ClientFrame::ClientEvent {
            channel: &self.channel,
            event: &self.config.whisper_event,
            data,
        }
        .encode()
    }

    /// Queues a whisper of `data` (a JSON object's text: a JSON-RPC frame);
    /// it leaves through [`PusherChannel::poll_transmit`] as the rate limit
    /// allows.
    ///
    /// # Errors
    /// [`PusherError::MessageTooLarge`] naming the limit when the message
    /// would be over [`PusherConfig::max_message_bytes`];
    /// [`PusherError::NotAnObject`], [`PusherError::NotSubscribed`],
    /// [`PusherError::Backlog`], [`PusherError::Closed`].
    pub fn send_whisper(&mut self, data: &str) -> Result<(), PusherError> {
        match self.state {
            PusherState::Closed => return Err(PusherError::Closed),
            PusherState::Subscribed => {}
            _ => return Err(PusherError::NotSubscribed),
        }
        let data = data.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
        let is_object = data.starts_with('{')
            && serde_json::from_str::<&serde_json::value::RawValue>(data).is_ok();
        if !is_object {
            return Err(PusherError::NotAnObject);
        }
        let message = self.encode_whisper(data);
        if message.len() > self.config.max_message_bytes {
            return Err(PusherError::MessageTooLarge {
                size: message.len(),
                limit: self.config.max_message_bytes,
            });
        }
        if self.whispers.len() >= self.config.max_queued_whispers {
            return Err(PusherError::Backlog {
                limit: self.config.max_queued_whispers,
            });
        }
        self.whispers.push_back(message);
        Ok(())
    }

    fn budget(&self) -> usize {
        usize::try_from(self.config.client_events.max(1)).unwrap_or(usize::MAX)
    }

    /// When the next whisper may go, if the budget is spent.
    fn next_slot(&self) -> Option<Instant> {
        let budget = self.budget();
        (self.sent.len() >= budget)
            .then(|| self.sent[self.sent.len() - budget] + self.config.client_event_window)
    }

    /// The next text message to write, if any: control frames first, then
    /// whispers as the rate limit allows.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<String> {
        if let Some(frame) = self.control.pop_front() {
            return Some(frame);
        }
        if self.state != PusherState::Subscribed || self.whispers.is_empty() {
            return None;
        }
        if self.next_slot().is_some_and(|slot| now < slot) {
            return None;
        }
        let message = self.whispers.pop_front()?;
        self.sent.push_back(now);
        while self.sent.len() > self.budget() {
            self.sent.pop_front();
        }
        Some(message)
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<PusherEvent> {
        self.events.pop_front()
    }

    /// When [`PusherChannel::handle_timeout`] (or, for a paced whisper,
    /// [`PusherChannel::poll_transmit`]) must next be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let liveness = match self.state {
            PusherState::Closed => return None,
            PusherState::Connecting => self.started + self.config.welcome_timeout,
            _ => match self.ping_sent {
                Some(at) => at + self.config.pong_timeout,
                None => self.last_heard + self.activity_timeout,
            },
        };
        let pace = (self.state == PusherState::Subscribed && !self.whispers.is_empty())
            .then(|| self.next_slot())
            .flatten();
        Some(pace.map_or(liveness, |p| p.min(liveness)))
    }

    /// The clock: sends a ping after the activity timeout of silence,
    /// declares the connection dead when no message followed it within the
    /// pong timeout (or no welcome came).
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            PusherState::Closed => {}
            PusherState::Connecting => {
                if now >= self.started + self.config.welcome_timeout {
                    self.end(PusherClosed::NoWelcome);
                }
            }
            _ => match self.ping_sent {
                Some(at) if now >= at + self.config.pong_timeout => {
                    self.end(PusherClosed::PongTimeout);
                }
                Some(_) => {}
                None if now >= self.last_heard + self.activity_timeout => {
                    self.control.push_back(ClientFrame::Ping.encode());
                    self.ping_sent = Some(now);
                }
                None => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods, clippy::field_reassign_with_default)]

    use super::*;
    use crate::formats::jsonrpc::Correlation;
    use crate::pusher::auth::{PusherSecret, sign_channel_auth};
    use proptest::prelude::*;

    const CH: &str = "private-agent.session.S1";
    const WELCOME: &str = r#"{"event":"pusher:connection_established","data":"{\"socket_id\":\"123.456\",\"activity_timeout\":30}"}"#;
    const OK: &str = r#"{"event":"pusher_internal:subscription_succeeded","channel":"private-agent.session.S1","data":"{}"}"#;

    fn auth_for(channel: &str, data: Option<&str>) -> ChannelAuth {
        let a = sign_channel_auth("key", &PusherSecret::new("s"), "123.456", channel, data);
        ChannelAuth::new(&a, data).unwrap()
    }

    fn subscribed(config: PusherConfig, t: Instant) -> PusherChannel {
        let mut ch = PusherChannel::new("key", CH, config, t).unwrap();
        ch.handle_text(WELCOME, t);
        ch.authorize(auth_for(CH, None), t).unwrap();
        ch.handle_text(OK, t);
        while ch.poll_transmit(t).is_some() {}
        while ch.poll_event().is_some() {}
        ch
    }

    fn whisper(id: &str) -> String {
        format!(
            r#"{{"event":"client-mcp","channel":"{CH}","data":{{"jsonrpc":"2.0","id":"{id}","result":{{}}}}}}"#
        )
    }

    #[test]
    fn the_whole_join() {
        let t = Instant::now();
        let mut ch = PusherChannel::new("key", CH, PusherConfig::default(), t).unwrap();
        assert_eq!(ch.state(), PusherState::Connecting);
        assert_eq!(ch.poll_transmit(t), None);
        assert_eq!(ch.send_whisper("{}"), Err(PusherError::NotSubscribed));
        ch.handle_text(WELCOME, t);
        assert_eq!(
            ch.poll_event(),
            Some(PusherEvent::Connected {
                socket_id: "123.456".into(),
                activity_timeout: Duration::from_secs(30)
            })
        );
        assert_eq!(
            ch.poll_event(),
            Some(PusherEvent::AuthNeeded(AuthRequest {
                socket_id: "123.456".into(),
                channel_name: CH.into()
            }))
        );
        let other_key = ChannelAuth::new("other:00", None).unwrap();
        assert_eq!(ch.authorize(other_key, t), Err(PusherError::AuthKey));
        ch.authorize(auth_for(CH, None), t).unwrap();
        assert_eq!(
            ch.authorize(auth_for(CH, None), t),
            Err(PusherError::NotAwaitingAuth)
        );
        let sub: serde_json::Value = serde_json::from_str(&ch.poll_transmit(t).unwrap()).unwrap();
        assert_eq!(sub["event"], "pusher:subscribe");
        assert_eq!(sub["data"]["channel"], CH);
        assert!(sub["data"].get("channel_data").is_none());
        // A success for another channel is not ours.
        ch.handle_text(&OK.replace("S1", "S2"), t);
        assert_eq!(ch.state(), PusherState::Subscribing);
        ch.handle_text(OK, t);
        assert_eq!(ch.state(), PusherState::Subscribed);
        assert_eq!(ch.poll_event(), Some(PusherEvent::Subscribed));
        ch.handle_text(&whisper("a-1"), t);
        let Some(PusherEvent::Whisper(w)) = ch.poll_event() else {
            panic!()
        };
        assert!(matches!(w.reply_to("a-1"), Correlation::Reply(_)));
        assert!(matches!(w.reply_to("b-1"), Correlation::Ignore));
        // Other events and other channels are ignored.
        ch.handle_text(&whisper("a-2").replace("client-mcp", "client-other"), t);
        ch.handle_text(&whisper("a-2").replace("S1", "S2"), t);
        ch.handle_text("not json", t);
        assert_eq!(ch.poll_event(), None);
        assert_eq!(ch.ignored(), 4);
    }

    #[test]
    fn a_forged_signature_is_refused_and_said() {
        let t = Instant::now();
        let mut ch = PusherChannel::new("key", CH, PusherConfig::default(), t).unwrap();
        ch.handle_text(WELCOME, t);
        ch.authorize(ChannelAuth::new("key:00", None).unwrap(), t)
            .unwrap();
        ch.handle_text(
            r#"{"event":"pusher:error","data":{"code":4009,"message":"Authentication error"}}"#,
            t,
        );
        while let Some(e) = ch.poll_event() {
            if let PusherEvent::SubscriptionRefused(e) = e {
                assert_eq!(e.code, PusherErrorCode::Unauthorized);
                assert_eq!(ch.state(), PusherState::Refused);
                return;
            }
        }
        panic!("no refusal");
    }

    #[test]
    fn a_subscription_error_is_a_refusal() {
        let t = Instant::now();
        let mut ch = PusherChannel::new("key", CH, PusherConfig::default(), t).unwrap();
        ch.handle_text(WELCOME, t);
        ch.authorize(auth_for(CH, None), t).unwrap();
        ch.handle_text(
            r#"{"event":"pusher:subscription_error","channel":"private-agent.session.S1","data":{"status":403}}"#,
            t,
        );
        assert_eq!(ch.state(), PusherState::Refused);
        assert!(
            std::iter::from_fn(|| ch.poll_event())
                .any(|e| matches!(e, PusherEvent::SubscriptionRefused(_)))
        );
    }

    #[test]
    fn presence_needs_channel_data_and_reports_members() {
        let t = Instant::now();
        let p = "presence-agent.session.S1";
        let mut ch = PusherChannel::new("key", p, PusherConfig::default(), t).unwrap();
        assert!(ch.is_presence());
        ch.handle_text(WELCOME, t);
        assert_eq!(
            ch.authorize(auth_for(p, None), t),
            Err(PusherError::ChannelData)
        );
        let cd = r#"{"user_id":"agent-1"}"#;
        ch.authorize(auth_for(p, Some(cd)), t).unwrap();
        let sub: serde_json::Value = serde_json::from_str(&ch.poll_transmit(t).unwrap()).unwrap();
        assert_eq!(sub["data"]["channel_data"], cd);
        ch.handle_text(&OK.replace("private-", "presence-"), t);
        ch.handle_text(
            r#"{"event":"pusher_internal:member_removed","channel":"presence-agent.session.S1","data":"{\"user_id\":\"page\"}"}"#,
            t,
        );
        let events: Vec<_> = std::iter::from_fn(|| ch.poll_event()).collect();
        assert!(events.contains(&PusherEvent::MemberRemoved("page".into())));
    }

    #[test]
    fn oversized_whispers_are_refused_naming_the_limit() {
        let t = Instant::now();
        let mut ch = subscribed(PusherConfig::default(), t);
        let empty = ch.whisper_size("{}");
        let fits = format!(r#"{{"a":"{}"}}"#, "x".repeat(10_000 - empty - 6));
        assert_eq!(ch.whisper_size(&fits), 10_000);
        ch.send_whisper(&fits).unwrap();
        assert_eq!(ch.poll_transmit(t).unwrap().len(), 10_000);
        let over = format!(r#"{{"a":"{}"}}"#, "x".repeat(10_000 - empty - 5));
        let err = ch.send_whisper(&over).unwrap_err();
        assert_eq!(
            err,
            PusherError::MessageTooLarge {
                size: 10_001,
                limit: 10_000
            }
        );
        assert!(err.to_string().contains("10000 bytes"));
        assert_eq!(ch.send_whisper("[1]"), Err(PusherError::NotAnObject));
        assert_eq!(ch.send_whisper("{"), Err(PusherError::NotAnObject));
        assert_eq!(
            ch.send_whisper(r#"{"a":1} x"#),
            Err(PusherError::NotAnObject)
        );
    }

    #[test]
    fn whispers_are_paced_not_dropped() {
        let t = Instant::now();
        let mut ch = subscribed(PusherConfig::default(), t);
        for i in 0..25 {
            ch.send_whisper(&format!(r#"{{"n":{i}}}"#)).unwrap();
        }
        let mut now = t;
        let mut times = Vec::new();
        while times.len() < 25 {
            match ch.poll_transmit(now) {
                Some(m) => {
                    assert!(m.contains(&format!(r#""n":{}"#, times.len())));
                    times.push(now);
                }
                None => now = ch.poll_timeout().unwrap(),
            }
        }
        // 10 at once, 10 a second later, 5 a second after that.
        assert_eq!(times[9], t);
        assert_eq!(times[10], t + Duration::from_secs(1));
        assert_eq!(times[24], t + Duration::from_secs(2));
        for w in times.windows(11) {
            assert!(w[10] - w[0] >= Duration::from_secs(1));
        }
    }

    #[test]
    fn the_backlog_is_bounded() {
        let t = Instant::now();
        let mut c = PusherConfig::default();
        c.max_queued_whispers = 3;
        let mut ch = subscribed(c, t);
        for _ in 0..3 {
            ch.send_whisper("{}").unwrap();
        }
        assert_eq!(
            ch.send_whisper("{}"),
            Err(PusherError::Backlog { limit: 3 })
        );
    }

    #[test]
    fn pings_within_the_activity_timeout_and_dies_without_pong() {
        let t = Instant::now();
        let mut ch = subscribed(PusherConfig::default(), t);
        // The server said 30 s, under the client's 120 s.
        assert_eq!(ch.poll_timeout(), Some(t + Duration::from_secs(30)));
        ch.handle_timeout(t + Duration::from_secs(29));
        assert_eq!(ch.poll_transmit(t), None);
        let t1 = t + Duration::from_secs(30);
        ch.handle_timeout(t1);
        assert_eq!(
            ch.poll_transmit(t1).as_deref(),
            Some(r#"{"event":"pusher:ping","data":{}}"#)
        );
        assert_eq!(ch.poll_timeout(), Some(t1 + Duration::from_secs(30)));
        // A pong resets the silence.
        ch.handle_text(
            r#"{"event":"pusher:pong","data":{}}"#,
            t1 + Duration::from_secs(1),
        );
        assert_eq!(ch.poll_timeout(), Some(t1 + Duration::from_secs(31)));
        let t2 = t1 + Duration::from_secs(31);
        ch.handle_timeout(t2);
        assert!(ch.poll_transmit(t2).is_some());
        ch.handle_timeout(t2 + Duration::from_secs(30));
        assert_eq!(ch.state(), PusherState::Closed);
        assert_eq!(
            ch.poll_event(),
            Some(PusherEvent::Closed(PusherClosed::PongTimeout))
        );
        assert_eq!(ch.poll_timeout(), None);
        assert_eq!(ch.send_whisper("{}"), Err(PusherError::Closed));
    }

    #[test]
    fn answers_server_pings_and_welcome_timeout() {
        let t = Instant::now();
        let mut ch = PusherChannel::new("key", CH, PusherConfig::default(), t).unwrap();
        assert_eq!(ch.poll_timeout(), Some(t + Duration::from_secs(30)));
        ch.handle_text(r#"{"event":"pusher:ping","data":{}}"#, t);
        assert_eq!(
            ch.poll_transmit(t).as_deref(),
            Some(r#"{"event":"pusher:pong","data":{}}"#)
        );
        ch.handle_timeout(t + Duration::from_secs(30));
        assert_eq!(
            ch.poll_event(),
            Some(PusherEvent::Closed(PusherClosed::NoWelcome))
        );
    }

    #[test]
    fn close_codes_are_typed() {
        let t = Instant::now();
        let mut ch = subscribed(PusherConfig::default(), t);
        ch.send_whisper("{}").unwrap();
        ch.handle_close(Some(1009));
        assert_eq!(
            ch.poll_event(),
            Some(PusherEvent::Closed(PusherClosed::Server(
                PusherCloseCode::MessageTooBig
            )))
        );
        assert_eq!(ch.poll_transmit(t), None);
        ch.handle_close(Some(1000));
        assert_eq!(ch.poll_event(), None);
        assert_eq!(
            PusherClosed::Server(PusherCloseCode::from_code(Some(4001))).reconnect(),
            Reconnect::Never
        );
    }

    #[test]
    fn bad_construction() {
        let t = Instant::now();
        assert_eq!(
            PusherChannel::new("", CH, PusherConfig::default(), t).unwrap_err(),
            PusherError::AppKey
        );
        assert_eq!(
            PusherChannel::new("key", "agent.session.S1", PusherConfig::default(), t).unwrap_err(),
            PusherError::ChannelName
        );
    }

    #[test]
    fn debug_shows_no_signature() {
        let t = Instant::now();
        let mut ch = PusherChannel::new("key", CH, PusherConfig::default(), t).unwrap();
        ch.handle_text(WELCOME, t);
        let auth = auth_for(CH, None);
        let sig = auth.expose().split_once(':').unwrap().1.to_owned();
        ch.authorize(auth, t).unwrap();
        // The queued subscribe frame holds it until sent.
        assert!(!format!("{ch:?}").contains(&sig));
        assert!(ch.poll_transmit(t).unwrap().contains(&sig));
    }

    proptest! {
        #[test]
        fn never_panics_and_stays_bounded(
            frames in prop::collection::vec(prop_oneof![
                Just(WELCOME.to_owned()),
                Just(OK.to_owned()),
                Just(r#"{"event":"pusher:ping","data":{}}"#.to_owned()),
                Just(r#"{"event":"pusher:error","data":{"code":4009}}"#.to_owned()),
                "[a-z-]{1,6}".prop_map(|id| whisper(&id)),
                "\\PC{0,40}",
            ], 0..40),
            steps in prop::collection::vec(0u64..5_000, 0..40),
            sends in prop::collection::vec("\\PC{0,20}", 0..10),
        ) {
            let t = Instant::now();
            let mut c = PusherConfig::default();
            c.max_queued_whispers = 4;
            let mut ch = PusherChannel::new("key", CH, c, t).unwrap();
            let mut now = t;
            for (i, f) in frames.iter().enumerate() {
                now += Duration::from_millis(steps.get(i).copied().unwrap_or(0));
                ch.handle_text(f, now);
                if ch.state() == PusherState::AwaitingAuth {
                    ch.authorize(auth_for(CH, None), now).unwrap();
                }
                for s in &sends {
                    let _ = ch.send_whisper(s);
                }
                ch.handle_timeout(now);
                while let Some(m) = ch.poll_transmit(now) {
                    prop_assert!(m.len() <= DEFAULT_MAX_MESSAGE_BYTES);
                }
                while ch.poll_event().is_some() {}
                prop_assert!(ch.queued_whispers() <= 4);
                if let Some(d) = ch.poll_timeout() {
                    prop_assert!(ch.state() != PusherState::Closed);
                    prop_assert!(d + Duration::from_secs(3600) > now);
                }
            }
        }

        #[test]
        fn the_order_of_whisper_ids_is_kept(n in 1usize..40, budget in 1u32..12) {
            let t = Instant::now();
            let mut c = PusherConfig::default();
            c.client_events = budget;
            let mut ch = subscribed(c, t);
            for i in 0..n {
                ch.send_whisper(&format!(r#"{{"i":{i}}}"#)).unwrap();
            }
            let mut now = t;
            let mut got = 0;
            let mut steps = 0;
            while got < n {
                steps += 1;
                prop_assert!(steps < 1000);
                ch.handle_timeout(now);
                match ch.poll_transmit(now) {
                    Some(m) if m.contains("pusher:ping") => {}
                    Some(m) => {
                        let expected = format!(r#""i":{got}}}"#);
                        prop_assert!(m.contains(&expected));
                        got += 1;
                    }
                    None => now = ch.poll_timeout().unwrap(),
                }
            }
            let window = (n as u64 - 1) / u64::from(budget);
            prop_assert_eq!(now - t, Duration::from_secs(window));
        }
    }
}
