//! The receive leg of an operation, and its exchanges over the relay.
//!
//! An operation keeps **one** receive leg for all its exchanges
//! (`initialize`, `notifications/initialized`, `tools/list`, `tools/call`):
//! the leg is subscribed before the first POST (the relay drops a reply
//! nobody is subscribed to), and every later POST goes out as soon as the
//! leg is known to be open. In warm mode the leg outlives the operation as
//! a [`WarmLeg`]: the SSE stream stays open, a long-poll leg keeps a poll
//! parked on the relay.
//!
//! Never twice: a POST is sent again only when the runtime proves it never
//! left (a kept connection found closed before a byte was written), and
//! then once, on a fresh connection. A POST that acts on the surface whose
//! HTTP answer is lost after it may have been written is never sent again:
//! the exchange waits for its reply on the leg until the deadline, and a
//! reply that arrives is the outcome; otherwise the outcome is
//! [`Error::DeliveryUnknown`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::admission::discovery::Discovery;
use crate::egress::endpoint::{RelayEndpoint, RelayUrl};
use crate::egress::wire::{
    HttpEvent, HttpMethod, HttpRequest, Leg, ReceiveLeg, RequestId, SocketEvent, Transmit,
    TransportConfig,
};
use crate::error::{DeliveryUnknown, Error, ProtocolError, Unauthorized};
use crate::formats::jsonrpc::{
    Correlation, Notice, Reply, correlate, correlate_text, notice, notice_of,
};
use crate::formats::poll::{parse_broker_poll, parse_fancy_poll};
use crate::formats::sse::SseDecoder;
use crate::pusher::leg::ChannelLeg;

/// How many bytes of an error body are kept to classify it.
const ERROR_BODY_BYTES: usize = 4096;

/// The most the Fancy relay holds a poll (it clamps `wait` to 25 s).
const FANCY_MAX_WAIT: Duration = Duration::from_millis(25_000);

/// How long an SSE stream request may stay open at most; the core cancels
/// it when it is done with it, and a warm stream is replaced after this.
const STREAM_LIFETIME: Duration = Duration::from_secs(3600);

/// How long a long-poll subscriber is trusted to still exist on the relay
/// after its last answered poll: the Fancy relay prunes idle pollers after
/// 60 to 120 s, so past this a new subscriber is made first.
const POLL_FRESH: Duration = Duration::from_secs(30);

/// How much longer than its `wait` a parked poll may take before the leg
/// is taken for dead.
const PARK_GRACE: Duration = Duration::from_secs(10);

/// What an operation's requests share: the endpoint, the configuration,
/// request ids, the queue of transmits and the receive leg.
#[derive(Debug)]
pub(crate) struct Io {
    pub(crate) endpoint: RelayEndpoint,
    pub(crate) config: TransportConfig,
    next_request: u64,
    pub(crate) transmits: VecDeque<Transmit>,
    /// The operation's receive leg, once subscribed (or handed in warm).
    pub(crate) leg: Option<Receive>,
    /// Subscriptions made so far (the epoch of the next one).
    epochs: u64,
    /// Connections to ask for ahead of the POSTs when the next leg
    /// subscribes (see [`Transmit::Connect`]); asked once.
    pub(crate) connect_ahead: usize,
    /// The operation's own deadline, when it has one: no exchange waits
    /// past it (`Operation::with_deadline`).
    pub(crate) cap: Option<Instant>,
    /// Over a Reverb channel: what carries the leg and the POSTs (the
    /// requests in `transmits` are handed to it, never to the runtime).
    pub(crate) channel: Option<Box<ChannelLeg>>,
}

impl Io {
    pub(crate) fn new(endpoint: RelayEndpoint, config: TransportConfig) -> Self {
        Io {
            endpoint,
            config,
            next_request: 1,
            transmits: VecDeque::new(),
            leg: None,
            epochs: 0,
            connect_ahead: 0,
            cap: None,
            channel: None,
        }
    }

    /// Carries this operation over a Reverb channel: the receive leg is the
    /// channel (an SSE-like stream of its whispers), whatever leg the
    /// configuration names.
    pub(crate) fn over_channel(&mut self, channel: ChannelLeg) {
        self.config.leg = ReceiveLeg::Sse;
        self.connect_ahead = 0;
        self.channel = Some(Box::new(channel));
    }

    /// An error in the words of the endpoint that carried it: a 404 under a
    /// relay path the link did not name; over a channel, what a channel
    /// cannot tell.
    pub(crate) fn explain(&self, error: Error) -> Error {
        let error = self.endpoint.explain(error);
        match &self.channel {
            Some(c) => c.explain(error),
            None => error,
        }
    }

    /// An exchange's deadline from `now`: the exchange timeout, or the
    /// operation's deadline when that comes first.
    pub(crate) fn deadline_from(&self, now: Instant) -> Instant {
        let own = now + self.config.timeout;
        self.cap.map_or(own, |cap| cap.min(own))
    }

    fn next_id(&mut self) -> RequestId {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        id
    }

    #[allow(clippy::too_many_arguments)]
    fn request(
        &mut self,
        id: RequestId,
        method: HttpMethod,
        leg: Leg,
        url: RelayUrl,
        body: Option<Vec<u8>>,
        deadline: Instant,
        fresh: bool,
    ) -> RequestId {
        let mut headers: Vec<(&'static str, String)> = Vec::with_capacity(3);
        match leg {
            Leg::Post => {
                if body.is_some() {
                    headers.push(("content-type", "application/json".to_owned()));
                }
            }
            Leg::Events => {
                headers.push(("accept", "text/event-stream".to_owned()));
                headers.push(("cache-control", "no-cache".to_owned()));
            }
            Leg::Poll => headers.push(("accept", "application/json".to_owned())),
        }
        if let Some((name, value)) = self.endpoint.auth_header() {
            headers.push((name, value));
        }
        self.transmits.push_back(Transmit::Request(HttpRequest {
            id,
            method,
            leg,
            url,
            headers,
            body,
            deadline,
            fresh,
        }));
        id
    }

    /// A new receive leg (not yet open), replacing any old one: its
    /// subscription request goes out now.
    fn subscribe(&mut self, now: Instant, deadline: Instant) {
        self.drop_leg();
        let epoch = self.epochs;
        self.epochs += 1;
        let kind = match &self.config.leg {
            ReceiveLeg::Sse => {
                let id = if self.config.warm {
                    RequestId::WARM
                } else {
                    self.next_id()
                };
                let url = self.endpoint.events_url();
                self.request(
                    id,
                    HttpMethod::Get,
                    Leg::Events,
                    url,
                    None,
                    now + STREAM_LIFETIME,
                    false,
                );
                Kind::Sse {
                    id,
                    status: None,
                    decoder: SseDecoder::new(self.config.max_frame_bytes),
                    error_body: Vec::new(),
                    resent: false,
                }
            }
            ReceiveLeg::FancyPoll { .. } | ReceiveLeg::BrokerPoll { .. } => Kind::Poll {
                inflight: None,
                subscribed: false,
                subscriber: None,
                cursor: None,
                next_at: None,
                last_answered: None,
            },
        };
        self.leg = Some(Receive {
            kind,
            epoch,
            heard: now,
            closed: None,
            seen: Seen::default(),
            listing: None,
            unproven: false,
        });
        if self.config.leg.is_poll() {
            self.send_poll(now, deadline, true, false);
        }
        // After the leg's request, so that it takes a kept connection first.
        if self.connect_ahead > 0 {
            self.transmits
                .push_back(Transmit::Connect(std::mem::take(&mut self.connect_ahead)));
        }
    }

    /// Cancels the leg's open requests and forgets it.
    pub(crate) fn drop_leg(&mut self) {
        if let Some(leg) = self.leg.take() {
            for id in leg.open_requests() {
                self.transmits.push_back(Transmit::Cancel(id));
            }
        }
    }

    /// Sends the next poll of the leg, bounded by `deadline`; `subscribe`
    /// asks with a zero wait (only to learn the subscriber). `parked` is
    /// the warm poll kept on the relay between operations.
    fn send_poll(&mut self, now: Instant, deadline: Instant, subscribe: bool, parked: bool) {
        let Some(leg) = self.leg.as_ref() else {
            return;
        };
        let Kind::Poll {
            subscriber, cursor, ..
        } = &leg.kind
        else {
            return;
        };
        let remaining = deadline.saturating_duration_since(now);
        let (url, wait) = match &self.config.leg {
            ReceiveLeg::FancyPoll { wait } => {
                let wait = if subscribe {
                    Duration::ZERO
                } else {
                    (*wait).min(remaining).min(FANCY_MAX_WAIT)
                };
                let ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
                (Ok(self.endpoint.poll_url(ms, subscriber.as_deref())), wait)
            }
            ReceiveLeg::BrokerPoll { path, wait } => {
                let secs = if subscribe {
                    0
                } else {
                    let remaining_secs =
                        remaining.as_secs() + u64::from(remaining.subsec_nanos() > 0);
                    wait.as_secs().min(remaining_secs).max(1)
                };
                let secs32 = u32::try_from(secs).unwrap_or(u32::MAX);
                (
                    self.endpoint
                        .broker_poll_url(path, secs32, cursor.as_deref()),
                    Duration::from_secs(secs),
                )
            }
            ReceiveLeg::Sse => return,
        };
        let url = match url {
            Ok(url) => url,
            Err(e) => {
                if let Some(leg) = self.leg.as_mut() {
                    leg.closed = Some(e);
                }
                return;
            }
        };
        let id = if parked {
            RequestId::WARM
        } else {
            self.next_id()
        };
        let request_deadline = if parked {
            now + wait + PARK_GRACE
        } else {
            deadline
        };
        self.request(
            id,
            HttpMethod::Get,
            Leg::Poll,
            url,
            None,
            request_deadline,
            false,
        );
        if let Some(Receive {
            kind: Kind::Poll {
                inflight, next_at, ..
            },
            ..
        }) = self.leg.as_mut()
        {
            *next_at = None;
            *inflight = Some(PollInFlight {
                id,
                started: now,
                wait,
                status: None,
                body: Vec::new(),
                parked,
                resent: false,
            });
        }
    }

    /// Makes sure the leg can carry the next exchange's reply: replaces a
    /// leg that ended, broke, went silent, or whose parked poll is overdue,
    /// and subscribes one if there is none. A leg the relay closed for good
    /// (410/401) is that error.
    fn ready_leg(&mut self, now: Instant, deadline: Instant) -> Result<(), Error> {
        // A channel proves itself alive with its own pings (the server's
        // activity timeout); its silence between whispers means nothing.
        let silence = if self.channel.is_some() {
            Duration::MAX
        } else {
            self.config.leg_silence
        };
        let replace = match self.leg.as_mut() {
            None => true,
            Some(leg) => {
                if let Some(e) = &leg.closed {
                    if e.is_terminal() {
                        return Err(e.clone());
                    }
                    true
                } else {
                    match &mut leg.kind {
                        Kind::Sse { status, .. } => {
                            // A stream that has heard nothing for too long
                            // is not trusted: a new one must answer first.
                            status.is_some() && now.saturating_duration_since(leg.heard) > silence
                        }
                        Kind::Poll {
                            inflight,
                            last_answered,
                            subscriber,
                            subscribed,
                            ..
                        } => {
                            if let Some(p) = inflight.as_mut().filter(|p| p.parked) {
                                // The poll parked between operations: taken
                                // over by this one, or, overdue, dead.
                                p.parked = false;
                                now.saturating_duration_since(p.started) > p.wait + PARK_GRACE
                            } else {
                                let fresh = inflight.is_some()
                                    || last_answered.is_some_and(|t| {
                                        now.saturating_duration_since(t) < POLL_FRESH
                                    });
                                if !fresh {
                                    // The relay may have pruned it: a new
                                    // subscriber answers first, and what
                                    // the old one missed is unknown.
                                    *subscribed = false;
                                    *subscriber = None;
                                    leg.listing = None;
                                }
                                false
                            }
                        }
                    }
                }
            }
        };
        if replace {
            self.subscribe(now, deadline);
            return Ok(());
        }
        let needs_subscribe_poll = self.leg.as_ref().is_some_and(|l| match &l.kind {
            Kind::Poll {
                subscribed,
                inflight: None,
                ..
            } => !*subscribed || l.unproven,
            _ => false,
        });
        if needs_subscribe_poll {
            self.send_poll(now, deadline, true, false);
        }
        Ok(())
    }

    /// Sends the leg's request `id` again on a fresh connection, once, after
    /// a kept connection was found closed before it was written. False when
    /// it was already sent again (or is not the leg's).
    fn resend_leg_request(&mut self, id: RequestId, deadline: Instant, now: Instant) -> bool {
        enum Again {
            Stream,
            Poll { subscribe: bool, parked: bool },
        }
        let again = match self.leg.as_mut().map(|l| &mut l.kind) {
            Some(Kind::Sse {
                id: sid,
                status: None,
                resent,
                ..
            }) if *sid == id && !*resent => {
                *resent = true;
                Again::Stream
            }
            Some(Kind::Poll {
                inflight: Some(p),
                subscribed,
                ..
            }) if p.id == id && !p.resent => Again::Poll {
                subscribe: !*subscribed,
                parked: p.parked,
            },
            _ => return false,
        };
        match again {
            Again::Stream => {
                let url = self.endpoint.events_url();
                self.request(
                    id,
                    HttpMethod::Get,
                    Leg::Events,
                    url,
                    None,
                    now + STREAM_LIFETIME,
                    true,
                );
            }
            Again::Poll { subscribe, parked } => {
                self.send_poll(now, deadline, subscribe, parked);
                if let Some(Transmit::Request(req)) = self.transmits.back_mut() {
                    req.fresh = true;
                }
                if let Some(Receive {
                    kind:
                        Kind::Poll {
                            inflight: Some(p), ..
                        },
                    ..
                }) = self.leg.as_mut()
                {
                    p.resent = true;
                }
            }
        }
        true
    }

    /// An event of the leg's request `id` while no exchange waits on the
    /// leg (between exchanges, or after the operation's outcome): frames
    /// are only looked at for notices.
    pub(crate) fn leg_event(&mut self, id: RequestId, event: HttpEvent, now: Instant) {
        let (max, fancy) = (self.config.max_frame_bytes, self.config.leg.is_fancy());
        if let Some(leg) = self.leg.as_mut() {
            let _ = leg.handle(id, event, max, fancy, now);
        }
    }

    /// Whether the leg is open: a POST sent now has its reply delivered.
    fn leg_open(&self) -> bool {
        self.leg.as_ref().is_some_and(Receive::is_open)
    }

    /// At the end of an operation: in warm mode, a usable leg is kept (its
    /// SSE stream stays open; a long-poll leg gets a poll parked on the
    /// relay); otherwise, or after a terminal answer, it is closed.
    pub(crate) fn end_operation(&mut self, terminal: bool, now: Instant) -> Option<WarmLeg> {
        let keep =
            self.config.warm && !terminal && self.leg.as_ref().is_some_and(|l| l.closed.is_none());
        if !keep {
            self.drop_leg();
            if let Some(channel) = self.channel.as_mut() {
                channel.shut();
            }
            return None;
        }
        let mut leg = self.leg.take()?;
        if leg.unproven {
            // Not proven during this operation (it never waited on the
            // leg): the poll parked next may be taken over by the next
            // operation, which must not wait on it to post; it lists.
            leg.unproven = false;
            leg.listing = None;
        }
        match &mut leg.kind {
            Kind::Sse { id, .. } => {
                if *id != RequestId::WARM {
                    self.transmits.push_back(Transmit::Cancel(*id));
                    return None;
                }
            }
            Kind::Poll {
                inflight,
                subscriber,
                subscribed,
                ..
            } => {
                if !*subscribed || subscriber.is_none() && self.config.leg.is_fancy() {
                    if let Some(p) = inflight.take() {
                        self.transmits.push_back(Transmit::Cancel(p.id));
                    }
                    return None;
                }
                match inflight {
                    // The parked poll this operation took over is still
                    // parked: it stays, nothing new is sent.
                    Some(p) if p.id == RequestId::WARM => p.parked = true,
                    Some(p) => {
                        self.transmits.push_back(Transmit::Cancel(p.id));
                        *inflight = None;
                    }
                    None => {}
                }
            }
        }
        let park = matches!(leg.kind, Kind::Poll { inflight: None, .. });
        self.leg = Some(leg);
        if park {
            // A poll parked on the relay between operations: the next
            // operation's reply arrives on it, and until it returns no
            // frame waits unseen on the relay.
            let deadline = now + FANCY_MAX_WAIT;
            self.send_poll(now, deadline, false, true);
        }
        let (max_frame_bytes, fancy) = (self.config.max_frame_bytes, self.config.leg.is_fancy());
        let channel = self.channel.take();
        self.leg.take().map(|state| WarmLeg {
            state,
            max_frame_bytes,
            fancy,
            channel,
        })
    }
}

/// What a model reads, with its next result, when the receive leg showed a
/// person acting on the surface since its last read. It says nothing of
/// whether a call was applied: the result it accompanies does.
pub const PERSON_ACTIVE_NOTE: &str = "<human-plus-note>A person has been active on this surface since your last read. Re-read what you depend on before you write, and do not undo their changes.</human-plus-note>";

/// What a model reads with its next result after the connection to the
/// surface moved to a new session (a person shared a new link, or the page
/// started over): nothing read or pinned before carries over.
pub const REJOINED_NOTE: &str = "<human-plus-note>The connection to this surface moved to a new session (the person shared a new link, or the page started over). Revisions and reads from before mean nothing now: read again before you write.</human-plus-note>";

/// What a model reads with its next result after the connection to the
/// surface was lost and made again on the same session (the relay
/// restarted, say): the surface may have changed meanwhile.
pub const RECONNECTED_NOTE: &str = "<human-plus-note>The connection to this surface was lost and has been made again on the same session. The surface may have changed meanwhile: read again before you write.</human-plus-note>";

/// What was seen on a leg that Human+ acts on, since it was last reported.
/// As JSON (serde): `{"list_changed", "person_active"}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Seen {
    /// A `notifications/tools/list_changed` arrived.
    pub list_changed: bool,
    /// A person acted on the surface (`notifications/agent_activity` with
    /// `source: "user"`).
    pub person_active: bool,
}

impl Seen {
    fn note(&mut self, n: Notice) {
        match n {
            Notice::ToolsListChanged => self.list_changed = true,
            Notice::PersonActive => self.person_active = true,
        }
    }

    /// The note a model should read with its next result when a person
    /// acted on the surface ([`PERSON_ACTIVE_NOTE`]), or `None`.
    ///
    /// ```
    /// use human_plus_core::{PERSON_ACTIVE_NOTE, Seen};
    /// let seen = Seen { person_active: true, ..Seen::default() };
    /// assert_eq!(seen.person_note(), Some(PERSON_ACTIVE_NOTE));
    /// assert_eq!(Seen::default().person_note(), None);
    /// ```
    #[must_use]
    pub fn person_note(&self) -> Option<&'static str> {
        self.person_active.then_some(PERSON_ACTIVE_NOTE)
    }

    /// Both sets of observations.
    #[must_use]
    pub fn merged(self, other: Seen) -> Seen {
        Seen {
            list_changed: self.list_changed || other.list_changed,
            person_active: self.person_active || other.person_active,
        }
    }
}

/// An admitted listing fetched over a leg, reusable while it is provably
/// current (see [`TransportConfig::listing_max_age`]).
#[derive(Debug, Clone)]
pub(crate) struct Listing {
    pub(crate) discovery: Discovery,
    /// The leg's epoch when it was fetched.
    pub(crate) epoch: u64,
    /// When it stops being reused.
    pub(crate) expires: Instant,
}

#[derive(Debug)]
struct PollInFlight {
    id: RequestId,
    started: Instant,
    wait: Duration,
    status: Option<u16>,
    body: Vec<u8>,
    /// The warm poll kept on the relay between operations.
    parked: bool,
    /// Sent again once on a fresh connection.
    resent: bool,
}

#[derive(Debug)]
enum Kind {
    Sse {
        id: RequestId,
        status: Option<u16>,
        decoder: SseDecoder,
        error_body: Vec<u8>,
        /// The subscription was sent again once on a fresh connection.
        resent: bool,
    },
    Poll {
        inflight: Option<PollInFlight>,
        /// The first poll was answered: the relay knows this subscriber.
        subscribed: bool,
        subscriber: Option<String>,
        cursor: Option<String>,
        next_at: Option<Instant>,
        last_answered: Option<Instant>,
    },
}

/// A receive leg: one SSE stream, or a long-poll subscriber and its polls.
#[derive(Debug)]
pub(crate) struct Receive {
    kind: Kind,
    /// Which subscription this is: a listing fetched on one epoch is
    /// current only on that epoch.
    epoch: u64,
    /// When anything last arrived on it (a keepalive comment included).
    heard: Instant,
    /// Why it can no longer carry a reply.
    closed: Option<Error>,
    /// What was seen on it that Human+ acts on.
    pub(crate) seen: Seen,
    /// The listing fetched over it, while current.
    pub(crate) listing: Option<Listing>,
    /// A long-poll leg whose parked poll came back between operations
    /// while a listing was kept: frames may wait on the relay unseen, so
    /// the next poll (zero wait, the same subscriber) must be answered
    /// before anything is posted, and the listing is current again only
    /// if none of its frames changed the tools (issue 43).
    pub(crate) unproven: bool,
}

/// What one event of the leg produced.
#[derive(Debug, Default)]
struct LegNews {
    /// The leg became open (SSE 200, or the first poll answered).
    opened: bool,
    /// Frames that arrived, in order: raw SSE data or parsed poll frames.
    frames: Vec<Frame>,
    /// The leg broke, ended or was closed by the relay.
    failed: Option<Error>,
    /// A poll was answered (the exchange decides whether to poll again).
    answered: Option<Answered>,
}

/// A poll answered with 2xx: enough to decide when to poll again.
#[derive(Debug, Clone, Copy)]
struct Answered {
    started: Instant,
    wait: Duration,
    empty: bool,
    subscribe: bool,
}

#[derive(Debug)]
enum Frame {
    Data(String),
    Parsed(Value),
}

impl Receive {
    fn owns(&self, id: RequestId) -> bool {
        match &self.kind {
            Kind::Sse { id: sid, .. } => *sid == id,
            Kind::Poll { inflight, .. } => inflight.as_ref().is_some_and(|p| p.id == id),
        }
    }

    fn open_requests(&self) -> Vec<RequestId> {
        match &self.kind {
            Kind::Sse { id, .. } => vec![*id],
            Kind::Poll { inflight, .. } => inflight.iter().map(|p| p.id).collect(),
        }
    }

    fn is_open(&self) -> bool {
        if self.closed.is_some() {
            return false;
        }
        match &self.kind {
            Kind::Sse {
                status, decoder, ..
            } => status.is_some_and(is_success) && !decoder.is_poisoned(),
            Kind::Poll { subscribed, .. } => *subscribed && !self.unproven,
        }
    }

    /// The listing kept with this leg, while current at `now`.
    pub(crate) fn current_listing(&self, now: Instant) -> Option<&Discovery> {
        let l = self.listing.as_ref()?;
        (self.closed.is_none() && !self.unproven && l.epoch == self.epoch && now < l.expires)
            .then_some(&l.discovery)
    }

    /// Keeps `discovery`, fetched over this leg now, until `expires`.
    pub(crate) fn keep_listing(&mut self, discovery: Discovery, expires: Instant) {
        self.listing = Some(Listing {
            discovery,
            epoch: self.epoch,
            expires,
        });
    }

    fn close(&mut self, e: Error) {
        if self.closed.is_none() {
            self.closed = Some(e);
        }
        self.listing = None;
    }

    /// Feeds one event of the leg's request `id` (`fancy`: the Fancy
    /// long-poll dialect, not the broker's).
    fn handle(
        &mut self,
        id: RequestId,
        event: HttpEvent,
        max: usize,
        fancy: bool,
        now: Instant,
    ) -> LegNews {
        let mut news = LegNews::default();
        if self.closed.is_some() || !self.owns(id) {
            return news;
        }
        self.heard = now;
        match &mut self.kind {
            Kind::Sse {
                status,
                decoder,
                error_body,
                ..
            } => match event {
                HttpEvent::Head(s) => {
                    *status = Some(s);
                    if is_success(s) {
                        news.opened = true;
                    } else if matches!(s, 401 | 410) {
                        news.failed = Some(status_error(s, b""));
                    }
                }
                HttpEvent::Body(chunk) => {
                    if !status.is_some_and(is_success) {
                        keep_prefix(error_body, &chunk, ERROR_BODY_BYTES);
                        return news;
                    }
                    decoder.push(&chunk);
                    while let Some(event) = decoder.next_event() {
                        match event {
                            Err(e) => {
                                news.failed = Some(e);
                                break;
                            }
                            Ok(ev) if ev.event == "error" => {
                                if let Some(e) = error_event(&ev.data) {
                                    news.failed = Some(e);
                                    break;
                                }
                            }
                            Ok(ev) => news.frames.push(Frame::Data(ev.data)),
                        }
                    }
                }
                HttpEvent::End => {
                    let s = status.unwrap_or(0);
                    news.failed = Some(if is_success(s) {
                        Error::Protocol(ProtocolError::StreamEnded)
                    } else {
                        status_error(s, error_body)
                    });
                }
                HttpEvent::Failed(e) | HttpEvent::NotSent { error: e, .. } => {
                    news.failed = Some(e);
                }
            },
            Kind::Poll {
                inflight,
                subscribed,
                subscriber,
                cursor,
                last_answered,
                ..
            } => {
                let Some(p) = inflight.as_mut() else {
                    return news;
                };
                match event {
                    HttpEvent::Head(s) => {
                        p.status = Some(s);
                        if matches!(s, 401 | 410) {
                            news.failed = Some(status_error(s, b""));
                        }
                    }
                    HttpEvent::Body(chunk) => {
                        if p.status.is_some_and(is_success) {
                            if p.body.len() + chunk.len() > max {
                                news.failed = Some(Error::Protocol(ProtocolError::FrameTooLarge {
                                    limit: max,
                                }));
                            } else {
                                p.body.extend_from_slice(&chunk);
                            }
                        } else {
                            keep_prefix(&mut p.body, &chunk, ERROR_BODY_BYTES);
                        }
                    }
                    HttpEvent::End => {
                        let p = inflight.take();
                        let Some(p) = p else {
                            return news;
                        };
                        let s = p.status.unwrap_or(0);
                        if !is_success(s) {
                            news.failed = Some(status_error(s, &p.body));
                        } else {
                            *last_answered = Some(now);
                            match parse_poll_answer(&p.body, max, fancy, subscriber, cursor) {
                                Ok(frames) => {
                                    let proof = self.unproven && !p.parked;
                                    let subscribe = !*subscribed || proof;
                                    if subscribe {
                                        *subscribed = true;
                                        self.unproven = false;
                                        news.opened = true;
                                    }
                                    news.answered = Some(Answered {
                                        started: p.started,
                                        wait: p.wait,
                                        empty: frames.is_empty(),
                                        subscribe,
                                    });
                                    news.frames = frames.into_iter().map(Frame::Parsed).collect();
                                    if p.parked {
                                        // Between operations nothing polls
                                        // after this: frames may wait on the
                                        // relay unseen, so a kept listing is
                                        // current only once the next poll
                                        // has collected them.
                                        self.unproven = self.listing.is_some();
                                    }
                                }
                                Err(e) => news.failed = Some(e),
                            }
                        }
                    }
                    HttpEvent::Failed(e) | HttpEvent::NotSent { error: e, .. } => {
                        inflight.take();
                        news.failed = Some(e);
                    }
                }
            }
        }
        for f in &news.frames {
            let n = match f {
                Frame::Data(d) => notice(d.as_bytes()),
                Frame::Parsed(v) => notice_of(v),
            };
            if let Some(n) = n {
                self.seen.note(n);
                if n == Notice::ToolsListChanged {
                    self.listing = None;
                }
            }
        }
        if self.listing.is_none() {
            // Nothing kept to prove.
            self.unproven = false;
        }
        if let Some(e) = &news.failed {
            self.close(e.clone());
        }
        news
    }
}

/// Parses a poll answer's body in the leg's dialect, updating the
/// subscriber (Fancy) or the cursor (broker).
fn parse_poll_answer(
    body: &[u8],
    max: usize,
    fancy: bool,
    subscriber: &mut Option<String>,
    cursor: &mut Option<String>,
) -> Result<Vec<Value>, Error> {
    if fancy {
        let f = parse_fancy_poll(body, max)?;
        if let Some(s) = f.subscriber {
            *subscriber = Some(s);
        }
        return Ok(f.frames);
    }
    let b = parse_broker_poll(body, max)?;
    if let Some(c) = b.cursor {
        *cursor = Some(c);
    }
    Ok(b.frames)
}

/// The receive leg of a warm attachment while no operation runs (see
/// [`TransportConfig::warm`]).
///
/// An [`Outcome`](crate::Outcome) hands it back when the leg is still
/// usable; the runtime keeps it with the attachment, feeds it whatever its
/// open request delivers meanwhile ([`WarmLeg::handle_event`]: the events
/// of request [`RequestId::WARM`], an SSE stream or a long-poll parked on
/// the relay), and gives it to the next operation with
/// [`Operation::with_warm_leg`](crate::Operation::with_warm_leg). Frames
/// that arrive between operations answer nobody and are dropped, except
/// that a `notifications/tools/list_changed` or a person's activity is
/// remembered; a `session_gone` or `invalid_token` event, or the stream's
/// end, is remembered, so the next operation fails at once (410/401) or
/// subscribes again instead of POSTing into a leg that is gone.
#[derive(Debug)]
pub struct WarmLeg {
    pub(crate) state: Receive,
    max_frame_bytes: usize,
    fancy: bool,
    /// Over a Reverb channel: the joined channel, kept with its socket.
    pub(crate) channel: Option<Box<ChannelLeg>>,
}

impl WarmLeg {
    /// Over a Reverb channel: feeds what the kept WebSocket did while no
    /// operation was running (a text message, its close), at `now`. What
    /// the channel must answer meanwhile (a server's ping) goes with the
    /// next operation.
    pub fn handle_socket(&mut self, event: SocketEvent, now: Instant) {
        let (budget, fancy) = (self.max_frame_bytes, self.fancy);
        let Some(channel) = self.channel.as_mut() else {
            return;
        };
        channel.handle_socket(event, now);
        while let Some((id, event)) = channel.poll_op_event() {
            let _ = self.state.handle(id, event, budget, fancy, now);
        }
    }

    /// Whether the leg is a Reverb channel's (its stream is a WebSocket,
    /// fed with [`WarmLeg::handle_socket`]).
    #[must_use]
    pub fn is_channel(&self) -> bool {
        self.channel.is_some()
    }

    /// Feeds an event of the warm request ([`RequestId::WARM`]) that
    /// arrived, at `now`, while no operation was running.
    pub fn handle_event(&mut self, event: HttpEvent, now: Instant) {
        let (budget, fancy) = (self.max_frame_bytes, self.fancy);
        let _ = self
            .state
            .handle(RequestId::WARM, event, budget, fancy, now);
    }

    /// The runtime could not keep the leg's request on the wire for all of
    /// the time since the last operation (a parked poll it could only send
    /// late): frames may have waited on the relay unseen, so a kept listing
    /// is no longer provably current and the next operation lists again.
    ///
    /// ```
    /// # fn f(leg: &mut human_plus_core::WarmLeg) {
    /// leg.gap();
    /// assert!(!leg.has_listing());
    /// # }
    /// ```
    pub fn gap(&mut self) {
        self.state.listing = None;
    }

    /// Whether the leg can still carry a reply (a live SSE stream, or a
    /// long-poll subscriber).
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.state.is_open()
            || matches!(
                &self.state.kind,
                Kind::Poll {
                    subscriber: Some(_),
                    ..
                }
            ) && self.state.closed.is_none()
    }

    /// Whether a request ([`RequestId::WARM`]: the SSE stream, or the
    /// parked poll) is open and must be kept running by the runtime.
    #[must_use]
    pub fn has_stream(&self) -> bool {
        self.state.closed.is_none() && self.state.owns(RequestId::WARM)
    }

    /// What was seen on the leg since it was last reported.
    #[must_use]
    pub fn seen(&self) -> Seen {
        self.state.seen
    }

    /// What was seen on the leg since it was last reported, reported now:
    /// the leg starts seeing afresh. What a manager calls between
    /// operations to tell a caller what the kept leg showed (the next
    /// operation would otherwise report it in its
    /// [`Outcome::seen`](crate::Outcome::seen)).
    ///
    /// ```
    /// # fn f(leg: &mut human_plus_core::WarmLeg) {
    /// let _seen = leg.take_seen();
    /// assert_eq!(leg.seen(), human_plus_core::Seen::default());
    /// # }
    /// ```
    pub fn take_seen(&mut self) -> Seen {
        std::mem::take(&mut self.state.seen)
    }

    /// How much longer the admitted listing kept with the leg stays
    /// provably current at `now` (the listing rule of
    /// [`TransportConfig::listing_max_age`](crate::TransportConfig::listing_max_age)),
    /// or `None` when no current listing is kept: what a server in front of
    /// Human+ may promise its own clients (MCP's `ttlMs`).
    #[must_use]
    pub fn listing_current_for(&self, now: Instant) -> Option<Duration> {
        let l = self.state.listing.as_ref()?;
        self.state.current_listing(now)?;
        Some(l.expires.saturating_duration_since(now))
    }

    /// Whether an admitted listing is kept with the leg (it is reused only
    /// while provably current).
    #[must_use]
    pub fn has_listing(&self) -> bool {
        self.state.listing.is_some()
    }
}

/// The error an SSE `event: error` carries, if it is one the relay sends.
fn error_event(data: &str) -> Option<Error> {
    match data.trim() {
        "session_gone" => Some(Error::SurfaceUnavailable),
        "invalid_token" => Some(Error::AttachmentUnauthorized(Unauthorized::Relay)),
        _ => None,
    }
}

/// What the POST of an exchange goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PostTarget {
    /// The inbox, carrying a frame.
    Inbox,
    /// `unregister`: a 410 (or `session_gone`) counts as success.
    Unregister,
}

#[derive(Debug)]
enum PostState {
    NotSent,
    InFlight {
        id: RequestId,
        status: Option<u16>,
        body: Vec<u8>,
    },
    /// Answered 2xx.
    Delivered,
    /// It may have been written, but its HTTP answer was lost.
    Lost,
}

/// What an exchange does to the surface, for the never-twice rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Acts {
    /// A read (`initialize`, `tools/list`, a change feed): a lost answer is
    /// the transport's error, as it was.
    No,
    /// It acts on the surface: a lost answer is
    /// [`Error::DeliveryUnknown`] with this.
    Yes(DeliveryUnknown),
}

/// One request/response (or one notification) over the relay.
#[derive(Debug)]
pub(crate) struct Exchange {
    expect: Option<String>,
    frame: Option<Vec<u8>>,
    target: PostTarget,
    acts: Acts,
    deadline: Instant,
    post: PostState,
    /// The POST was sent again once on a fresh connection.
    resent: bool,
    result: Option<Result<Reply, Error>>,
    /// The receive leg ended while the POST was still in flight: the POST's
    /// answer decides (a 410 there is a gone session, not a broken leg).
    leg_ended: Option<Error>,
    /// Frames seen on the receive leg that were not the reply.
    pub(crate) ignored: u64,
}

impl Exchange {
    /// A request expecting the reply with JSON-RPC id `expect`.
    pub(crate) fn request(
        io: &mut Io,
        expect: String,
        frame: Vec<u8>,
        acts: Acts,
        now: Instant,
    ) -> Self {
        let mut x = Exchange::new(io, Some(expect), Some(frame), PostTarget::Inbox, acts, now);
        if let Err(e) = io.ready_leg(now, x.deadline) {
            x.finish(io, Err(e));
            return x;
        }
        if io.leg_open() {
            x.send_post(io, false);
            x.poll_if_idle(io, now);
        }
        x
    }

    /// A POST-only exchange: a notification to the inbox, or `unregister`.
    /// The receive leg, if any, is left as it is.
    pub(crate) fn post_only(
        io: &mut Io,
        target: PostTarget,
        frame: Option<Vec<u8>>,
        acts: Acts,
        now: Instant,
    ) -> Self {
        let mut x = Exchange::new(io, None, frame, target, acts, now);
        if let Some(e) = io
            .leg
            .as_ref()
            .and_then(|l| l.closed.clone())
            .filter(Error::is_terminal)
        {
            x.finish(io, Err(e));
            return x;
        }
        x.send_post(io, false);
        x
    }

    fn new(
        io: &Io,
        expect: Option<String>,
        frame: Option<Vec<u8>>,
        target: PostTarget,
        acts: Acts,
        now: Instant,
    ) -> Self {
        Exchange {
            expect,
            frame,
            target,
            acts,
            deadline: io.deadline_from(now),
            post: PostState::NotSent,
            resent: false,
            result: None,
            leg_ended: None,
            ignored: 0,
        }
    }

    fn send_post(&mut self, io: &mut Io, fresh: bool) {
        let url = match self.target {
            PostTarget::Inbox => io.endpoint.inbox_url(),
            PostTarget::Unregister => io.endpoint.unregister_url(),
        };
        // The frame is kept: it is sent again only if it provably never
        // left.
        let body = self.frame.clone();
        let id = io.next_id();
        io.request(
            id,
            HttpMethod::Post,
            Leg::Post,
            url,
            body,
            self.deadline,
            fresh,
        );
        self.post = PostState::InFlight {
            id,
            status: None,
            body: Vec::new(),
        };
    }

    /// On a long-poll leg with no poll in flight (or paced): poll now.
    fn poll_if_idle(&mut self, io: &mut Io, now: Instant) {
        let idle = matches!(
            io.leg.as_ref().map(|l| &l.kind),
            Some(Kind::Poll {
                inflight: None,
                subscribed: true,
                ..
            })
        );
        if idle {
            io.send_poll(now, self.deadline, false, false);
        }
    }

    /// Whether `id` is this exchange's POST.
    pub(crate) fn owns_post(&self, id: RequestId) -> bool {
        self.post_id() == Some(id)
    }

    /// The operation ends with this exchange unanswered: a POST still in
    /// flight is let finish quietly, so its connection is kept (only for a
    /// notification nothing waits for).
    pub(crate) fn release(self, io: &mut Io) {
        if let Some(id) = self.post_id() {
            io.transmits.push_back(Transmit::Release(id));
        }
    }

    fn post_id(&self) -> Option<RequestId> {
        match &self.post {
            PostState::InFlight { id, .. } => Some(*id),
            _ => None,
        }
    }

    /// Brings this exchange's deadline forward to `at` (a stopping
    /// manager's halt); a later instant changes nothing.
    pub(crate) fn cap_deadline(&mut self, at: Instant) {
        self.deadline = self.deadline.min(at);
    }

    /// The earliest instant this exchange needs to be woken at.
    pub(crate) fn poll_timeout(&self, io: &Io) -> Option<Instant> {
        if self.result.is_some() {
            return None;
        }
        let pace = match io.leg.as_ref().map(|l| &l.kind) {
            Some(Kind::Poll { next_at, .. }) => *next_at,
            _ => None,
        };
        Some(pace.map_or(self.deadline, |p| p.min(self.deadline)))
    }

    pub(crate) fn is_done(&self) -> bool {
        self.result.is_some()
    }

    /// Takes the result once the exchange is done.
    pub(crate) fn take_result(&mut self) -> Option<Result<Reply, Error>> {
        self.result.take()
    }

    fn finish(&mut self, io: &mut Io, result: Result<Reply, Error>) {
        if self.result.is_some() {
            return;
        }
        // A 404 under a relay path the link did not name says so.
        let result = result.map_err(|e| io.explain(e));
        if let Some(id) = self.post_id() {
            // A reply is proof the POST was delivered: let its answer come,
            // so its connection is kept. Otherwise it must not go on.
            io.transmits
                .push_back(if result.is_ok() && self.expect.is_some() {
                    Transmit::Release(id)
                } else {
                    Transmit::Cancel(id)
                });
        }
        // A notification's answer leaves the leg's pace alone: a request
        // beside it may still wait on the leg.
        if let Some(Receive {
            kind: Kind::Poll { next_at, .. },
            ..
        }) = io.leg.as_mut().filter(|_| self.expect.is_some())
        {
            *next_at = None;
        }
        self.result = Some(result);
    }

    /// The outcome when the reply can no longer come: for a request that
    /// acts on the surface and was (or may have been) delivered, its fate
    /// is unknown; otherwise `error`.
    fn undelivered(&self, error: Error) -> Error {
        match (&self.acts, &self.post) {
            (
                Acts::Yes(what),
                PostState::InFlight { .. } | PostState::Delivered | PostState::Lost,
            ) if !error.is_terminal() => Error::DeliveryUnknown(what.clone()),
            _ => error,
        }
    }

    pub(crate) fn handle_timeout(&mut self, io: &mut Io, now: Instant) {
        if self.result.is_some() {
            return;
        }
        if now >= self.deadline {
            let e = match (&self.acts, &self.post) {
                (_, PostState::Lost) => self.undelivered(Error::Timeout),
                // Sent, and not answered in time: the page may have
                // applied it. Never sent again.
                (Acts::Yes(what), PostState::InFlight { .. } | PostState::Delivered) => {
                    Error::CallTimeout(what.clone())
                }
                _ => Error::Timeout,
            };
            self.finish(io, Err(e));
            return;
        }
        let due = matches!(
            io.leg.as_ref().map(|l| &l.kind),
            Some(Kind::Poll { next_at: Some(at), inflight: None, .. }) if now >= *at
        );
        if due {
            io.send_poll(now, self.deadline, false, false);
        }
    }

    /// Feeds one event of request `id` (the POST, or the leg's).
    pub(crate) fn handle_event(
        &mut self,
        io: &mut Io,
        id: RequestId,
        event: HttpEvent,
        now: Instant,
    ) {
        if self.post_id() == Some(id) {
            self.post_event(io, event, now);
            return;
        }
        if !io.leg.as_ref().is_some_and(|l| l.owns(id)) {
            return;
        }
        // A leg request given a kept connection found closed before it was
        // written: once more, on a fresh connection.
        if matches!(
            event,
            HttpEvent::NotSent {
                kept_connection: true,
                ..
            }
        ) && io.resend_leg_request(id, self.deadline, now)
        {
            return;
        }
        let (max, fancy) = (io.config.max_frame_bytes, io.config.leg.is_fancy());
        let Some(leg) = io.leg.as_mut() else {
            return;
        };
        let news = leg.handle(id, event, max, fancy, now);
        self.leg_news(io, news, now);
    }

    fn leg_news(&mut self, io: &mut Io, news: LegNews, now: Instant) {
        if self.result.is_some() {
            return;
        }
        let expect = self.expect.clone();
        for frame in news.frames {
            let Some(expect) = expect.as_deref() else {
                continue;
            };
            let reply = match frame {
                Frame::Data(d) => correlate_text(d, expect),
                Frame::Parsed(v) => match correlate(v, expect) {
                    Correlation::Reply(v) => Some(Reply::Value(v)),
                    Correlation::Ignore => None,
                },
            };
            match reply {
                Some(r) if self.result.is_none() => self.finish(io, Ok(r)),
                _ => self.ignored += 1,
            }
        }
        if self.result.is_some() {
            return;
        }
        if let Some(e) = news.failed {
            if self.expect.is_none() {
                // A notification does not wait for the leg.
                return;
            }
            let clean_end = matches!(e, Error::Protocol(ProtocolError::StreamEnded));
            if clean_end && matches!(self.post, PostState::InFlight { .. }) {
                self.leg_ended = Some(e);
            } else {
                let e = self.undelivered(e);
                self.finish(io, Err(e));
            }
            return;
        }
        if news.opened && matches!(self.post, PostState::NotSent) && self.expect.is_some() {
            // The receive leg exists now: only now may the frame go out.
            self.send_post(io, false);
        }
        if let Some(a) = news.answered
            && self.expect.is_some()
        {
            self.poll_again(io, a, now);
        }
    }

    /// After a poll was answered without the reply: poll again at once, or
    /// after the pacing pause when the relay ignored `wait`.
    fn poll_again(&mut self, io: &mut Io, a: Answered, now: Instant) {
        let pause = if a.subscribe || !a.empty {
            Duration::ZERO
        } else {
            io.config
                .pacing(a.wait, now.saturating_duration_since(a.started))
        };
        if pause.is_zero() {
            io.send_poll(now, self.deadline, false, false);
        } else if let Some(Receive {
            kind: Kind::Poll { next_at, .. },
            ..
        }) = io.leg.as_mut()
        {
            *next_at = Some((now + pause).min(self.deadline));
        }
    }

    fn post_event(&mut self, io: &mut Io, event: HttpEvent, now: Instant) {
        let _ = now;
        if self.result.is_some() {
            return;
        }
        match event {
            HttpEvent::Head(status) => {
                if matches!(status, 401 | 409 | 410) {
                    // Decisive whatever the body says: no need to read it.
                    self.post = PostState::NotSent;
                    let err = status_error(status, b"");
                    let gone_is_fine = self.target == PostTarget::Unregister
                        && matches!(err, Error::SurfaceUnavailable);
                    self.finish(
                        io,
                        if gone_is_fine {
                            Ok(Reply::Value(Value::Null))
                        } else {
                            Err(err)
                        },
                    );
                    return;
                }
                if let PostState::InFlight { status: s, .. } = &mut self.post {
                    *s = Some(status);
                }
            }
            HttpEvent::Body(chunk) => {
                if let PostState::InFlight { status, body, .. } = &mut self.post
                    && !status.is_some_and(is_success)
                {
                    keep_prefix(body, &chunk, ERROR_BODY_BYTES);
                }
            }
            HttpEvent::End => {
                let PostState::InFlight { status, body, .. } =
                    std::mem::replace(&mut self.post, PostState::Delivered)
                else {
                    return;
                };
                let status = status.unwrap_or(0);
                if !is_success(status) {
                    self.post = PostState::NotSent;
                    let err = status_error(status, &body);
                    let gone_is_fine = self.target == PostTarget::Unregister
                        && matches!(err, Error::SurfaceUnavailable);
                    self.finish(
                        io,
                        if gone_is_fine {
                            Ok(Reply::Value(Value::Null))
                        } else {
                            Err(err)
                        },
                    );
                } else if let Some(err) = self.leg_ended.take() {
                    let err = self.undelivered(err);
                    self.finish(io, Err(err));
                } else if self.expect.is_none() {
                    self.finish(io, Ok(Reply::Value(Value::Null)));
                }
            }
            HttpEvent::NotSent {
                error,
                kept_connection,
            } => {
                self.post = PostState::NotSent;
                if kept_connection && !self.resent {
                    // Provably never left: once more, on a new connection.
                    self.resent = true;
                    self.send_post(io, true);
                } else {
                    self.finish(io, Err(self.deadline_error(error, now)));
                }
            }
            HttpEvent::Failed(error) => {
                // It may have been written: never sent again.
                self.post = PostState::Lost;
                match (&self.acts, &self.expect) {
                    // Its reply may still come on the leg: wait for it (a
                    // read too: the reply is the answer it asked for).
                    (_, Some(_)) if io.leg_open() => {}
                    (Acts::Yes(what), _) => {
                        let e = Error::DeliveryUnknown(what.clone());
                        self.finish(io, Err(e));
                    }
                    (Acts::No, _) => {
                        self.post = PostState::NotSent;
                        let e = self.deadline_error(error, now);
                        self.finish(io, Err(e));
                    }
                }
            }
        }
    }

    /// A runtime that aborts a request at its deadline (the exchange's)
    /// races the exchange's own timer: past the deadline, whatever the
    /// runtime saw, the exchange timed out.
    fn deadline_error(&self, error: Error, now: Instant) -> Error {
        if now >= self.deadline {
            Error::Timeout
        } else {
            error
        }
    }
}

fn is_success(status: u16) -> bool {
    (200..300).contains(&status)
}

fn keep_prefix(buf: &mut Vec<u8>, chunk: &[u8], cap: usize) {
    let room = cap.saturating_sub(buf.len());
    buf.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
}

/// Classifies a relay answer that is not a success.
///
/// 410 is a gone session and 401 an unauthorized one, whatever the body
/// says, so the two are never confused; 409 is a rejected revision; any
/// other status whose body says `session_gone` is a gone session; anything
/// else is a relay failure carrying its status.
///
/// ```
/// use human_plus_core::{relay_status_error, Error};
///
/// assert_eq!(relay_status_error(410, b""), Error::SurfaceUnavailable);
/// assert_eq!(relay_status_error(401, br#"{"error":"invalid_token"}"#).code(), "attachment_unauthorized");
/// assert_eq!(relay_status_error(409, b""), Error::RevisionRejected);
/// assert_eq!(relay_status_error(500, br#"{"error":"session_gone"}"#), Error::SurfaceUnavailable);
/// assert_eq!(relay_status_error(502, b"bad gateway"), Error::RelayFailed { status: 502 });
/// ```
#[must_use]
pub fn relay_status_error(status: u16, body: &[u8]) -> Error {
    status_error(status, body)
}

fn status_error(status: u16, body: &[u8]) -> Error {
    match status {
        410 => Error::SurfaceUnavailable,
        401 => Error::AttachmentUnauthorized(Unauthorized::Relay),
        409 => Error::RevisionRejected,
        _ if body.windows(12).any(|w| w == b"session_gone") => Error::SurfaceUnavailable,
        _ => Error::RelayFailed { status },
    }
}
