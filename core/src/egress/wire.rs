//! What the core asks a runtime to do (HTTP intents) and how the runtime
//! reports back, plus the transport configuration.

use std::fmt;
use std::time::{Duration, Instant};

use crate::egress::endpoint::RelayUrl;

/// Identifies one HTTP request the core asked for, within one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

impl RequestId {
    /// The id of a warm attachment's receive leg (see
    /// [`TransportConfig::warm`]): it outlives operations, so it never comes
    /// from an operation's own counter, which starts at 1.
    pub const WARM: RequestId = RequestId(0);
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// The HTTP method of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HttpMethod {
    /// `GET`
    Get,
    /// `POST`
    Post,
}

impl HttpMethod {
    /// The method's name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
        }
    }
}

/// Which leg of the relay protocol a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Leg {
    /// A POST to the inbox (a request or a notification) or to
    /// `unregister`. Bounded; its body is small.
    Post,
    /// The SSE receive leg: a streaming GET whose body must be fed to the
    /// core chunk by chunk as it arrives, and that stays open until the
    /// core cancels it.
    Events,
    /// One long-poll GET: bounded; its whole body matters.
    Poll,
}

/// One HTTP request for the runtime to perform.
///
/// The URL and (in bearer mode) the `authorization` header carry the relay
/// token; `Debug` redacts both. Redirects must never be followed: report a
/// 3xx as it is.
#[derive(Clone)]
pub struct HttpRequest {
    /// The id to report the response under.
    pub id: RequestId,
    /// The method.
    pub method: HttpMethod,
    /// The leg.
    pub leg: Leg,
    /// The full URL (secret: use [`RelayUrl::expose`] only to send it).
    pub url: RelayUrl,
    /// Headers to send (lowercase names).
    pub headers: Vec<(&'static str, String)>,
    /// The body, for POSTs.
    pub body: Option<Vec<u8>>,
    /// The instant after which the core no longer cares about this
    /// request; a runtime should abort it by then at the latest.
    pub deadline: Instant,
    /// Send it on a new connection, never a kept one: the core sends a
    /// request again only when a kept connection was found closed before a
    /// byte of it was written ([`HttpEvent::NotSent`] with
    /// `kept_connection`), and then on a fresh connection.
    pub fresh: bool,
}

/// A request as an HTTP stack that logs what it is given should see it:
/// the URL and headers with the token replaced by
/// [`TOKEN_MARKER`](crate::TOKEN_MARKER), and the token that belongs where
/// the marker is ([`HttpRequest::masked`]).
pub struct MaskedRequest {
    /// The URL, its token (query auth) replaced by the marker.
    pub url: String,
    /// The headers, a bearer token replaced by the marker.
    pub headers: Vec<(&'static str, String)>,
    /// What the one marker in the request head stands for (percent-encoded
    /// in the URL, as it is in the header); `None` when there is none.
    pub token: Option<String>,
}

impl fmt::Debug for MaskedRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaskedRequest")
            .field("url", &self.url)
            .field("headers", &self.headers)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

impl HttpRequest {
    /// The request with its one token replaced by
    /// [`TOKEN_MARKER`](crate::TOKEN_MARKER), wherever the auth mode puts
    /// it (the URL's query, or the `authorization` header's `Bearer`
    /// value), and the token that belongs there.
    ///
    /// For HTTP stacks that log the request head they are given (ureq
    /// hex-dumps it at TRACE): hand them the masked request and put the
    /// token back into the bytes on their way to the socket, so no log line
    /// of theirs can hold it.
    #[must_use]
    pub fn masked(&self) -> MaskedRequest {
        let (url, mut token) = self.url.masked();
        let headers = self
            .headers
            .iter()
            .map(|(k, v)| {
                if k.eq_ignore_ascii_case("authorization")
                    && let Some(bearer) = v.strip_prefix("Bearer ")
                    && token.is_none()
                {
                    token = Some(bearer.to_owned());
                    (*k, format!("Bearer {}", crate::TOKEN_MARKER))
                } else {
                    (*k, v.clone())
                }
            })
            .collect();
        MaskedRequest {
            url,
            headers,
            token,
        }
    }
}

impl fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| {
                if k.eq_ignore_ascii_case("authorization") {
                    (*k, "[redacted]")
                } else {
                    (*k, v.as_str())
                }
            })
            .collect();
        f.debug_struct("HttpRequest")
            .field("id", &self.id)
            .field("method", &self.method)
            .field("leg", &self.leg)
            .field("url", &self.url)
            .field("headers", &headers)
            .field("body_len", &self.body.as_ref().map(Vec::len))
            .field("deadline", &self.deadline)
            .field("fresh", &self.fresh)
            .finish()
    }
}

/// What the core wants done next.
#[derive(Debug, Clone)]
pub enum Transmit {
    /// Start this request.
    Request(HttpRequest),
    /// Stop this request (close its stream); its further input is ignored.
    Cancel(RequestId),
    /// The core no longer needs this POST: it was delivered (its reply
    /// already arrived) and only its HTTP answer is outstanding. Let it
    /// finish quietly, bounded by its deadline, so its connection can be
    /// kept; its further input is ignored, and it is never sent again. A
    /// runtime that cannot let it finish may treat this as
    /// [`Transmit::Cancel`].
    Release(RequestId),
    /// Open connections to the relay ahead of the POSTs that follow, so
    /// that this many are kept idle (or being opened) for the endpoint's
    /// [`ConnectionKey`](crate::ConnectionKey) when they are needed: the
    /// core asks while a new receive leg subscribes on an attachment's
    /// first operation (no POST may go out before the leg answers, and
    /// `notifications/initialized` goes out beside the first `tools/list`),
    /// so the connections cost no round trip of their own.
    /// [`ConnectionPool::reserve_ahead`](crate::ConnectionPool::reserve_ahead)
    /// says how many to open. Only an optimisation: a runtime may ignore
    /// it.
    Connect(usize),
    /// Over a Reverb channel: open, write to or close the channel's
    /// WebSocket (an invitation to an HTTP relay never asks). Report what
    /// the socket does with [`Operation::handle_socket`](crate::Operation::handle_socket).
    Socket(SocketTransmit),
}

/// What the core wants done with a channel's WebSocket (one per operation,
/// or one kept between operations in warm mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketTransmit {
    /// Open the WebSocket: resolve [`Operation::socket_endpoint`](crate::Operation::socket_endpoint)'s
    /// host, connect only to addresses its `vet_resolved` keeps (through
    /// its egress proxy's CONNECT when it has one), TLS for `wss`, then the
    /// WebSocket handshake on `url`. Report [`SocketEvent::Opened`], or
    /// [`SocketEvent::Failed`] when it could not be opened (nothing was
    /// sent on it). The URL carries no secret.
    Open {
        /// `ws(s)://host:port/app/KEY?protocol=7&client=…&version=…`.
        url: String,
        /// The instant by which it must be open, or reported failed.
        deadline: std::time::Instant,
    },
    /// Write one text message.
    Text(String),
    /// Close the socket (code 1000), and report nothing more of it.
    Close,
}

/// What a channel's WebSocket did, for [`Operation::handle_socket`](crate::Operation::handle_socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketEvent {
    /// The WebSocket handshake completed.
    Opened,
    /// A text message arrived.
    Text(String),
    /// The socket closed: the close frame's code, or `None` when it
    /// dropped without one.
    Closed(Option<u16>),
    /// It could not be opened (resolution, vetting, connect, proxy, TLS, the
    /// handshake): nothing was sent on it.
    Failed(crate::error::Error),
}

/// How replies come back from the relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiveLeg {
    /// `GET /{s}/events`: one SSE stream per exchange (the default).
    Sse,
    /// The Fancy relay's `GET /{s}/poll`: `wait` in milliseconds (capped at
    /// 25 s by the relay), a `subscriber` id echoed, frames as JSON strings.
    FancyPoll {
        /// How long the relay may hold an empty poll.
        wait: Duration,
    },
    /// Seed 000's broker dialect: `GET /{s}/{path}` with `wait` in seconds
    /// and an `after` cursor, answering one of four body shapes.
    BrokerPoll {
        /// The poll path (`outbox` by default).
        path: String,
        /// How long the broker may hold an empty poll.
        wait: Duration,
    },
}

impl ReceiveLeg {
    /// The Fancy relay's long-poll with its default 20 s wait.
    #[must_use]
    pub fn fancy_poll() -> Self {
        ReceiveLeg::FancyPoll {
            wait: Duration::from_secs(20),
        }
    }

    /// The broker dialect at `outbox` with a 5 s wait, as the reference.
    #[must_use]
    pub fn broker_poll() -> Self {
        ReceiveLeg::BrokerPoll {
            path: "outbox".to_owned(),
            wait: Duration::from_secs(5),
        }
    }

    /// Whether this is a long-poll leg.
    #[must_use]
    pub fn is_poll(&self) -> bool {
        !matches!(self, ReceiveLeg::Sse)
    }

    /// Whether this is the Fancy relay's long-poll dialect.
    #[must_use]
    pub fn is_fancy(&self) -> bool {
        matches!(self, ReceiveLeg::FancyPoll { .. })
    }
}

/// How exchanges run: the receive leg, the timeout and the budgets.
///
/// ```
/// use human_plus_core::{ReceiveLeg, TransportConfig};
/// use std::time::Duration;
///
/// let c = TransportConfig::default().receive_leg(ReceiveLeg::fancy_poll()).timeout(Duration::from_secs(15));
/// assert_eq!(c.timeout, Duration::from_secs(15));
/// assert_eq!(c.max_frame_bytes, 262_144);
/// assert!(c.warm, "the receive leg is kept between operations by default");
/// assert!(!c.warm(false).warm); // a process that runs one operation and exits
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// How replies come back.
    pub leg: ReceiveLeg,
    /// The cap on one whole exchange (subscribe, post, reply). Default 30 s.
    pub timeout: Duration,
    /// The largest SSE event or long-poll body accepted. Default 262,144.
    pub max_frame_bytes: usize,
    /// The most `tools/list` pages followed. Default 16.
    pub max_tool_pages: usize,
    /// A poll that came back empty this much or less before its `wait` ran
    /// out is not paced (default 250 ms); see [`TransportConfig::pacing`].
    pub min_poll_interval: Duration,
    /// Keep the attachment's receive leg open across exchanges and
    /// operations (on by default): a call then costs the POST and the
    /// reply instead of subscribe, POST and reply, the admitted listing is
    /// reused while provably current, and the person's page sees the agent
    /// join once rather than at every operation. The SSE stream stays open
    /// between operations (its request id is [`RequestId::WARM`]); a
    /// long-poll leg keeps its subscriber. See [`WarmLeg`](crate::WarmLeg).
    /// A manager bounds how many it keeps and for how long (its builder's
    /// `kept_legs` and `kept_leg_idle`); `false` is for a process that runs
    /// one operation and exits (the command line's one-shot commands).
    pub warm: bool,
    /// A kept leg that has heard nothing (not even the relay's `:
    /// keepalive` comment, written every 15 s) for longer than this is
    /// replaced before anything is posted, and the replacement must answer
    /// first. Default 35 s.
    pub leg_silence: Duration,
    /// How long an admitted tool listing is reused at most (warm mode, on a
    /// leg open without a gap, when the surface declared
    /// `tools.listChanged`; shorter when the listing carries MCP's `ttlMs`).
    /// Default 5 minutes; zero re-lists every operation.
    pub listing_max_age: Duration,
    /// How kept connections are bounded.
    pub pool: PoolConfig,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            leg: ReceiveLeg::Sse,
            timeout: Duration::from_secs(30),
            max_frame_bytes: crate::formats::sse::DEFAULT_MAX_EVENT_BYTES,
            max_tool_pages: 16,
            min_poll_interval: Duration::from_millis(250),
            warm: true,
            leg_silence: Duration::from_secs(35),
            listing_max_age: Duration::from_secs(300),
            pool: PoolConfig::default(),
        }
    }
}

impl TransportConfig {
    /// Sets the receive leg.
    #[must_use]
    pub fn receive_leg(mut self, leg: ReceiveLeg) -> Self {
        self.leg = leg;
        self
    }

    /// Sets the exchange timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the frame budget.
    #[must_use]
    pub fn max_frame_bytes(mut self, bytes: usize) -> Self {
        self.max_frame_bytes = bytes;
        self
    }

    /// Sets the warm-attachment mode.
    #[must_use]
    pub fn warm(mut self, warm: bool) -> Self {
        self.warm = warm;
        self
    }

    /// Sets how long a kept leg may stay silent.
    #[must_use]
    pub fn leg_silence(mut self, silence: Duration) -> Self {
        self.leg_silence = silence;
        self
    }

    /// Sets the longest reuse of an admitted listing.
    #[must_use]
    pub fn listing_max_age(mut self, age: Duration) -> Self {
        self.listing_max_age = age;
        self
    }

    /// Sets the bounds of kept connections.
    #[must_use]
    pub fn pool(mut self, pool: PoolConfig) -> Self {
        self.pool = pool;
        self
    }

    /// The pacing rule of seed 000: a poll that came back empty after
    /// `elapsed`, with `wait` requested, is followed by a pause of
    /// `wait - elapsed` when that shortfall exceeds `min_poll_interval`
    /// (the broker ignored `wait`), and by none otherwise.
    #[must_use]
    pub fn pacing(&self, wait: Duration, elapsed: Duration) -> Duration {
        let shortfall = wait.saturating_sub(elapsed);
        if shortfall > self.min_poll_interval {
            shortfall
        } else {
            Duration::ZERO
        }
    }
}

/// How a runtime keeps connections to the relay between requests: which
/// connections are interchangeable is the core's [`ConnectionKey`]; these
/// bound how long and how many are kept.
///
/// [`ConnectionKey`]: crate::ConnectionKey
///
/// ```
/// use human_plus_core::PoolConfig;
/// use std::time::Duration;
///
/// let p = PoolConfig::default();
/// assert!(p.idle < Duration::from_secs(5), "below Node's keep-alive timeout");
/// assert_eq!(PoolConfig::disabled().per_key, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// An idle connection is closed after this (default 4 s: below the 5 s
    /// after which Node's HTTP server closes an idle keep-alive socket, so
    /// a kept connection is rarely reused just as the relay closes it).
    pub idle: Duration,
    /// A connection is not reused once this old (default 5 minutes), so the
    /// relay's name is resolved and vetted again.
    pub lifetime: Duration,
    /// At most this many idle connections per key (default 4; 0 keeps
    /// none).
    pub per_key: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            idle: Duration::from_secs(4),
            lifetime: Duration::from_secs(300),
            per_key: 4,
        }
    }
}

impl PoolConfig {
    /// Keeps no connection: every request opens its own.
    #[must_use]
    pub fn disabled() -> Self {
        PoolConfig {
            per_key: 0,
            ..PoolConfig::default()
        }
    }
}

/// What a runtime observed of one request, in order: a head, body chunks,
/// and an end — or an error at any point.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpEvent {
    /// The response status arrived (headers are not needed by the core).
    Head(u16),
    /// A chunk of the response body.
    Body(Vec<u8>),
    /// The response body ended.
    End,
    /// The request failed after some of it may have been written: the
    /// connection broke while (or after) sending it, or while its answer
    /// came. The core never sends such a request again; for a request that
    /// acts on the surface it waits for the reply on the receive leg and
    /// otherwise reports [`Error::DeliveryUnknown`](crate::Error::DeliveryUnknown).
    /// A runtime that cannot tell whether bytes left reports this.
    Failed(crate::error::Error),
    /// Provably nothing of the request was written: resolution, the egress
    /// vetting of its addresses, connecting, the proxy's CONNECT or the TLS
    /// handshake failed, or (`kept_connection`) the kept connection it was
    /// given was found closed before a byte was written — the one case in
    /// which the core sends it again, once, on a fresh connection.
    NotSent {
        /// Why it could not be sent.
        error: crate::error::Error,
        /// It was given a kept connection, found closed before writing.
        kept_connection: bool,
    },
}
