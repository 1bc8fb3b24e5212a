//! What the core asks a runtime to do (HTTP intents) and how the runtime
//! reports back, plus the transport configuration.

use std::fmt;
use std::time::{Duration, Instant};

use crate::endpoint::RelayUrl;

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
    /// operations (off by default): a call then costs the POST and the
    /// reply instead of subscribe, POST and reply. The SSE stream stays
    /// open between operations (its request id is [`RequestId::WARM`]); a
    /// long-poll leg keeps its subscriber. See [`WarmLeg`](crate::WarmLeg).
    pub warm: bool,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            leg: ReceiveLeg::Sse,
            timeout: Duration::from_secs(30),
            max_frame_bytes: crate::sse::DEFAULT_MAX_EVENT_BYTES,
            max_tool_pages: 16,
            min_poll_interval: Duration::from_millis(250),
            warm: false,
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
    /// The request failed: DNS, connect, TLS, proxy, I/O, a runtime
    /// timeout, or an egress refusal of its resolved addresses.
    Failed(crate::error::Error),
}
