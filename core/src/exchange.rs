//! One exchange over the relay: subscribe the receive leg, POST the frame,
//! read until the correlated reply. A notification is a POST alone.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::endpoint::RelayEndpoint;
use crate::error::{Error, ProtocolError, Unauthorized};
use crate::jsonrpc::{Correlation, correlate, correlate_bytes};
use crate::poll::{parse_broker_poll, parse_fancy_poll};
use crate::sse::SseDecoder;
use crate::wire::{
    HttpEvent, HttpMethod, HttpRequest, Leg, ReceiveLeg, RequestId, Transmit, TransportConfig,
};

/// How many bytes of an error body are kept to classify it.
const ERROR_BODY_BYTES: usize = 4096;

/// The most the Fancy relay holds a poll (it clamps `wait` to 25 s).
const FANCY_MAX_WAIT: Duration = Duration::from_millis(25_000);

/// How long a warm SSE leg may stay open before the runtime closes it (a
/// later operation then subscribes again).
const WARM_LEG_LIFETIME: Duration = Duration::from_secs(3600);

/// How long a warm long-poll subscriber is trusted to still exist on the
/// relay after its last answered poll: the Fancy relay prunes idle pollers
/// after 60 to 120 s, so past this a new subscriber is made first.
const WARM_POLL_FRESH: Duration = Duration::from_secs(30);

/// The I/O context an exchange emits into: request ids and the queue of
/// transmits, shared by every exchange of an operation.
#[derive(Debug)]
pub(crate) struct Io {
    pub(crate) endpoint: RelayEndpoint,
    pub(crate) config: TransportConfig,
    next_request: u64,
    pub(crate) transmits: VecDeque<Transmit>,
    /// A warm receive leg between exchanges (warm mode only).
    pub(crate) warm_leg: Option<WarmLeg>,
}

impl Io {
    pub(crate) fn new(endpoint: RelayEndpoint, config: TransportConfig) -> Self {
        Io {
            endpoint,
            config,
            next_request: 1,
            transmits: VecDeque::new(),
            warm_leg: None,
        }
    }

    fn request(
        &mut self,
        method: HttpMethod,
        leg: Leg,
        url: crate::endpoint::RelayUrl,
        body: Option<Vec<u8>>,
        deadline: Instant,
    ) -> RequestId {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.request_as(id, method, leg, url, body, deadline)
    }

    fn request_as(
        &mut self,
        id: RequestId,
        method: HttpMethod,
        leg: Leg,
        url: crate::endpoint::RelayUrl,
        body: Option<Vec<u8>>,
        deadline: Instant,
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
        }));
        id
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
    Done,
}

#[derive(Debug)]
struct PollInFlight {
    id: RequestId,
    started: Instant,
    wait: Duration,
    status: Option<u16>,
    body: Vec<u8>,
}

#[derive(Debug)]
enum LegState {
    /// A notification: no receive leg.
    None,
    Sse {
        id: Option<RequestId>,
        status: Option<u16>,
        decoder: SseDecoder,
        error_body: Vec<u8>,
        /// Why the stream is no longer usable (warm legs between exchanges).
        closed: Option<Error>,
    },
    Poll {
        inflight: Option<PollInFlight>,
        subscribed: bool,
        subscriber: Option<String>,
        cursor: Option<String>,
        next_at: Option<Instant>,
        /// When a poll was last answered (warm legs reuse a fresh
        /// subscriber).
        last_answered: Option<Instant>,
    },
}

impl LegState {
    fn fresh(config: &TransportConfig) -> LegState {
        match &config.leg {
            ReceiveLeg::Sse => LegState::Sse {
                id: None,
                status: None,
                decoder: SseDecoder::new(config.max_frame_bytes),
                error_body: Vec::new(),
                closed: None,
            },
            ReceiveLeg::FancyPoll { .. } | ReceiveLeg::BrokerPoll { .. } => LegState::Poll {
                inflight: None,
                subscribed: false,
                subscriber: None,
                cursor: None,
                next_at: None,
                last_answered: None,
            },
        }
    }

    /// Whether the leg can carry the next exchange's reply.
    fn alive(&self) -> bool {
        match self {
            LegState::None => false,
            LegState::Sse {
                id,
                status,
                decoder,
                closed,
                ..
            } => {
                id.is_some()
                    && status.is_some_and(is_success)
                    && closed.is_none()
                    && !decoder.is_poisoned()
            }
            LegState::Poll { subscriber, .. } => subscriber.is_some(),
        }
    }
}

/// The receive leg of a warm attachment while no operation runs (see
/// [`TransportConfig::warm`]).
///
/// An [`Outcome`](crate::Outcome) hands it back when the leg is still
/// usable; the runtime keeps it with the attachment, feeds it whatever its
/// open stream delivers meanwhile ([`WarmLeg::handle_event`]: the events
/// of request [`RequestId::WARM`]), and gives it to the next operation with
/// [`Operation::with_warm_leg`](crate::Operation::with_warm_leg). Frames
/// that arrive between operations answer nobody and are dropped; a
/// `session_gone` or `invalid_token` event, or the stream's end, is
/// remembered, so the next operation fails at once (410/401) or subscribes
/// again (an ended stream) instead of POSTing into a leg that is gone.
#[derive(Debug)]
pub struct WarmLeg {
    state: LegState,
}

impl WarmLeg {
    /// Feeds an event of the warm stream (request [`RequestId::WARM`])
    /// that arrived while no operation was running.
    pub fn handle_event(&mut self, event: HttpEvent, now: Instant) {
        let _ = now;
        let LegState::Sse {
            status,
            decoder,
            closed,
            ..
        } = &mut self.state
        else {
            return;
        };
        if closed.is_some() {
            return;
        }
        match event {
            HttpEvent::Head(s) => {
                *status = Some(s);
                if !is_success(s) {
                    *closed = Some(status_error(s, b""));
                }
            }
            HttpEvent::Body(chunk) => {
                if !status.is_some_and(is_success) {
                    return;
                }
                decoder.push(&chunk);
                while let Some(event) = decoder.next_event() {
                    match event {
                        Err(e) => {
                            *closed = Some(e);
                            return;
                        }
                        Ok(ev) if ev.event == "error" => {
                            if let Some(e) = error_event(&ev.data) {
                                *closed = Some(e);
                                return;
                            }
                        }
                        Ok(_) => {}
                    }
                }
            }
            HttpEvent::End => *closed = Some(Error::Protocol(ProtocolError::StreamEnded)),
            HttpEvent::Failed(e) => *closed = Some(e),
        }
    }

    /// Whether the leg can still carry a reply (a live SSE stream, or a
    /// long-poll subscriber).
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.state.alive()
    }

    /// Whether a stream request ([`RequestId::WARM`]) is open and must be
    /// kept running by the runtime.
    #[must_use]
    pub fn has_stream(&self) -> bool {
        matches!(
            &self.state,
            LegState::Sse {
                id: Some(_),
                closed: None,
                ..
            }
        )
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

/// One request/response (or one notification) over the relay.
#[derive(Debug)]
pub(crate) struct Exchange {
    expect: Option<String>,
    frame: Option<Vec<u8>>,
    target: PostTarget,
    deadline: Instant,
    post: PostState,
    leg: LegState,
    open: BTreeSet<RequestId>,
    result: Option<Result<Value, Error>>,
    /// The receive leg ended cleanly while the POST was still in flight:
    /// the POST's answer decides (a 410 there is a gone session, not a
    /// broken stream).
    leg_ended: Option<Error>,
    /// Frames seen on the receive leg that were not the reply.
    pub(crate) ignored: u64,
}

impl Exchange {
    /// A request expecting the reply with JSON-RPC id `expect`.
    pub(crate) fn request(io: &mut Io, expect: String, frame: Vec<u8>, now: Instant) -> Self {
        let deadline = now + io.config.timeout;
        let warm = if io.config.warm {
            io.warm_leg.take().map(|w| w.state)
        } else {
            None
        };
        let leg = warm.unwrap_or_else(|| LegState::fresh(&io.config));
        let mut x = Exchange {
            expect: Some(expect),
            frame: Some(frame),
            target: PostTarget::Inbox,
            deadline,
            post: PostState::NotSent,
            leg,
            open: BTreeSet::new(),
            result: None,
            leg_ended: None,
            ignored: 0,
        };
        x.start(io, now);
        x
    }

    /// A POST-only exchange: a notification to the inbox, or `unregister`.
    pub(crate) fn post_only(
        io: &mut Io,
        target: PostTarget,
        frame: Option<Vec<u8>>,
        now: Instant,
    ) -> Self {
        let mut x = Exchange {
            expect: None,
            frame,
            target,
            deadline: now + io.config.timeout,
            post: PostState::NotSent,
            leg: LegState::None,
            open: BTreeSet::new(),
            result: None,
            leg_ended: None,
            ignored: 0,
        };
        x.start(io, now);
        x
    }

    fn start(&mut self, io: &mut Io, now: Instant) {
        match &mut self.leg {
            LegState::None => self.send_post(io),
            LegState::Sse {
                id, status, closed, ..
            } => {
                // A warm stream that the relay ended with 410/401 decides
                // now; one that merely ended is replaced.
                if let Some(e) = closed.take() {
                    if e.is_terminal() {
                        self.finish(io, Err(e));
                        return;
                    }
                    self.leg = LegState::fresh(&io.config);
                    return self.start(io, now);
                }
                if let Some(open) = *id
                    && status.is_some_and(is_success)
                {
                    // Warm: the leg is open, the frame may go at once.
                    self.open.insert(open);
                    self.send_post(io);
                    return;
                }
                let url = io.endpoint.events_url();
                let rid = if io.config.warm {
                    io.request_as(
                        RequestId::WARM,
                        HttpMethod::Get,
                        Leg::Events,
                        url,
                        None,
                        now + WARM_LEG_LIFETIME,
                    )
                } else {
                    io.request(HttpMethod::Get, Leg::Events, url, None, self.deadline)
                };
                *id = Some(rid);
                self.open.insert(rid);
            }
            LegState::Poll {
                subscribed,
                subscriber,
                last_answered,
                ..
            } => {
                let fresh = subscriber.is_some()
                    && last_answered
                        .is_some_and(|t| now.saturating_duration_since(t) < WARM_POLL_FRESH);
                if fresh {
                    // Warm: the subscriber exists; post, then poll it.
                    *subscribed = true;
                    self.send_post(io);
                    self.send_poll(io, now, false);
                } else {
                    *subscribed = false;
                    *subscriber = None;
                    self.send_poll(io, now, true);
                }
            }
        }
    }

    fn send_post(&mut self, io: &mut Io) {
        let url = match self.target {
            PostTarget::Inbox => io.endpoint.inbox_url(),
            PostTarget::Unregister => io.endpoint.unregister_url(),
        };
        let body = self.frame.take();
        let id = io.request(HttpMethod::Post, Leg::Post, url, body, self.deadline);
        self.open.insert(id);
        self.post = PostState::InFlight {
            id,
            status: None,
            body: Vec::new(),
        };
    }

    fn send_poll(&mut self, io: &mut Io, now: Instant, subscribe: bool) {
        let LegState::Poll {
            subscriber,
            cursor,
            next_at,
            ..
        } = &mut self.leg
        else {
            return;
        };
        *next_at = None;
        let remaining = self.deadline.saturating_duration_since(now);
        let (url, wait) = match &io.config.leg {
            ReceiveLeg::FancyPoll { wait } => {
                let wait = if subscribe {
                    Duration::ZERO
                } else {
                    (*wait).min(remaining).min(FANCY_MAX_WAIT)
                };
                let ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
                (Ok(io.endpoint.poll_url(ms, subscriber.as_deref())), wait)
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
                    io.endpoint.broker_poll_url(path, secs32, cursor.as_deref()),
                    Duration::from_secs(secs),
                )
            }
            ReceiveLeg::Sse => return,
        };
        let url = match url {
            Ok(url) => url,
            Err(e) => {
                self.finish(io, Err(e));
                return;
            }
        };
        let id = io.request(HttpMethod::Get, Leg::Poll, url, None, self.deadline);
        self.open.insert(id);
        if let LegState::Poll { inflight, .. } = &mut self.leg {
            *inflight = Some(PollInFlight {
                id,
                started: now,
                wait,
                status: None,
                body: Vec::new(),
            });
        }
    }

    /// The earliest instant this exchange needs to be woken at.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        if self.result.is_some() {
            return None;
        }
        let pace = match &self.leg {
            LegState::Poll { next_at, .. } => *next_at,
            _ => None,
        };
        Some(pace.map_or(self.deadline, |p| p.min(self.deadline)))
    }

    pub(crate) fn is_done(&self) -> bool {
        self.result.is_some()
    }

    /// Takes the result once the exchange is done.
    pub(crate) fn take_result(&mut self) -> Option<Result<Value, Error>> {
        self.result.take()
    }

    fn finish(&mut self, io: &mut Io, result: Result<Value, Error>) {
        if self.result.is_some() {
            return;
        }
        let terminal = result.as_ref().is_err_and(Error::is_terminal);
        self.result = Some(result);
        let keep = io.config.warm && !terminal && self.leg.alive();
        let stream = match &self.leg {
            LegState::Sse { id, .. } if keep => *id,
            _ => None,
        };
        for id in std::mem::take(&mut self.open) {
            if Some(id) != stream {
                io.transmits.push_back(Transmit::Cancel(id));
            }
        }
        if let LegState::Poll {
            next_at, inflight, ..
        } = &mut self.leg
        {
            *next_at = None;
            *inflight = None;
        }
        if keep {
            let state = std::mem::replace(&mut self.leg, LegState::None);
            io.warm_leg = Some(WarmLeg { state });
        }
    }

    fn owns(&self, id: RequestId) -> bool {
        self.result.is_none() && self.open.contains(&id)
    }

    pub(crate) fn handle_timeout(&mut self, io: &mut Io, now: Instant) {
        if self.result.is_some() {
            return;
        }
        if now >= self.deadline {
            self.finish(io, Err(Error::Timeout));
            return;
        }
        let due = matches!(&self.leg, LegState::Poll { next_at: Some(at), inflight: None, .. } if now >= *at);
        if due {
            self.send_poll(io, now, false);
        }
    }

    pub(crate) fn handle_head(&mut self, io: &mut Io, id: RequestId, status: u16, now: Instant) {
        if !self.owns(id) {
            return;
        }
        if matches!(status, 401 | 409 | 410) {
            // Decisive whatever the body says: no need to read it.
            let is_post = matches!(&self.post, PostState::InFlight { id: pid, .. } if *pid == id);
            let err = status_error(status, b"");
            let gone_is_fine = is_post
                && self.target == PostTarget::Unregister
                && matches!(err, Error::SurfaceUnavailable);
            if is_post {
                self.post = PostState::Done;
            }
            self.open.remove(&id);
            self.finish(
                io,
                if gone_is_fine {
                    Ok(Value::Null)
                } else {
                    Err(err)
                },
            );
            return;
        }
        if let PostState::InFlight {
            id: pid, status: s, ..
        } = &mut self.post
            && *pid == id
        {
            *s = Some(status);
            return;
        }
        let mut open_post = false;
        match &mut self.leg {
            LegState::Sse {
                id: Some(sid),
                status: s,
                ..
            } if *sid == id => {
                *s = Some(status);
                open_post = is_success(status);
            }
            LegState::Poll {
                inflight: Some(p), ..
            } if p.id == id => p.status = Some(status),
            _ => {}
        }
        if open_post && matches!(self.post, PostState::NotSent) {
            self.send_post(io);
        }
        let _ = now;
    }

    pub(crate) fn handle_body(&mut self, io: &mut Io, id: RequestId, chunk: &[u8], now: Instant) {
        if !self.owns(id) {
            return;
        }
        if let PostState::InFlight {
            id: pid,
            status,
            body,
        } = &mut self.post
            && *pid == id
        {
            if !status.is_some_and(is_success) {
                keep_prefix(body, chunk, ERROR_BODY_BYTES);
            }
            return;
        }
        let max = io.config.max_frame_bytes;
        let mut outcome: Option<Result<Value, Error>> = None;
        match &mut self.leg {
            LegState::Sse {
                id: Some(sid),
                status,
                decoder,
                error_body,
                ..
            } if *sid == id => {
                if !status.is_some_and(is_success) {
                    keep_prefix(error_body, chunk, ERROR_BODY_BYTES);
                    return;
                }
                decoder.push(chunk);
                let expect = self.expect.as_deref().unwrap_or_default();
                while let Some(event) = decoder.next_event() {
                    match event {
                        Err(e) => {
                            outcome = Some(Err(e));
                            break;
                        }
                        Ok(ev) => {
                            if ev.event == "error" {
                                match error_event(&ev.data) {
                                    Some(e) => {
                                        outcome = Some(Err(e));
                                        break;
                                    }
                                    None => {
                                        self.ignored += 1;
                                        continue;
                                    }
                                }
                            }
                            match correlate_bytes(ev.data.as_bytes(), expect) {
                                Correlation::Reply(v) => {
                                    outcome = Some(Ok(v));
                                    break;
                                }
                                Correlation::Ignore => self.ignored += 1,
                            }
                        }
                    }
                }
            }
            LegState::Poll {
                inflight: Some(p), ..
            } if p.id == id => {
                if p.status.is_some_and(is_success) {
                    if p.body.len() + chunk.len() > max {
                        outcome = Some(Err(Error::Protocol(ProtocolError::FrameTooLarge {
                            limit: max,
                        })));
                    } else {
                        p.body.extend_from_slice(chunk);
                    }
                } else {
                    keep_prefix(&mut p.body, chunk, ERROR_BODY_BYTES);
                }
            }
            _ => {}
        }
        if let Some(r) = outcome {
            self.finish(io, r);
        }
        let _ = now;
    }

    pub(crate) fn handle_end(&mut self, io: &mut Io, id: RequestId, now: Instant) {
        if !self.owns(id) {
            return;
        }
        self.open.remove(&id);
        // The POST.
        if let PostState::InFlight {
            id: pid,
            status,
            body,
        } = &mut self.post
            && *pid == id
        {
            let status = status.unwrap_or(0);
            let body = std::mem::take(body);
            self.post = PostState::Done;
            if !is_success(status) {
                let err = status_error(status, &body);
                let gone_is_fine = self.target == PostTarget::Unregister
                    && matches!(err, Error::SurfaceUnavailable);
                self.finish(
                    io,
                    if gone_is_fine {
                        Ok(Value::Null)
                    } else {
                        Err(err)
                    },
                );
            } else if let Some(err) = self.leg_ended.take() {
                self.finish(io, Err(err));
            } else if matches!(self.leg, LegState::None) {
                self.finish(io, Ok(Value::Null));
            }
            return;
        }
        if let LegState::Sse {
            id: Some(sid),
            status,
            error_body,
            closed,
            ..
        } = &mut self.leg
        {
            if *sid == id {
                let status = status.unwrap_or(0);
                let ended_cleanly = is_success(status);
                let err = if ended_cleanly {
                    Error::Protocol(ProtocolError::StreamEnded)
                } else {
                    status_error(status, error_body)
                };
                *closed = Some(err.clone());
                if ended_cleanly && matches!(self.post, PostState::InFlight { .. }) {
                    self.leg_ended = Some(err);
                } else {
                    self.finish(io, Err(err));
                }
            }
            return;
        }
        let taken = match &mut self.leg {
            LegState::Poll { inflight, .. } => inflight.take_if(|p| p.id == id),
            _ => None,
        };
        if let Some(p) = taken {
            self.poll_answered(io, p, now);
        }
    }

    fn poll_answered(&mut self, io: &mut Io, p: PollInFlight, now: Instant) {
        let status = p.status.unwrap_or(0);
        if !is_success(status) {
            let err = status_error(status, &p.body);
            self.finish(io, Err(err));
            return;
        }
        let max = io.config.max_frame_bytes;
        let LegState::Poll {
            subscribed,
            subscriber,
            cursor,
            last_answered,
            ..
        } = &mut self.leg
        else {
            return;
        };
        *last_answered = Some(now);
        let parsed = match &io.config.leg {
            ReceiveLeg::FancyPoll { .. } => parse_fancy_poll(&p.body, max).map(|f| {
                if let Some(s) = f.subscriber {
                    *subscriber = Some(s);
                }
                (f.frames, f.skipped)
            }),
            _ => parse_broker_poll(&p.body, max).map(|b| {
                if let Some(c) = b.cursor {
                    *cursor = Some(c);
                }
                (b.frames, b.skipped)
            }),
        };
        let was_subscribe = !*subscribed;
        *subscribed = true;
        let (frames, skipped) = match parsed {
            Ok(x) => x,
            Err(e) => {
                self.finish(io, Err(e));
                return;
            }
        };
        self.ignored += skipped as u64;
        let empty = frames.is_empty();
        let expect = self.expect.clone().unwrap_or_default();
        for frame in frames {
            match correlate(frame, &expect) {
                Correlation::Reply(v) => {
                    self.finish(io, Ok(v));
                    return;
                }
                Correlation::Ignore => self.ignored += 1,
            }
        }
        if was_subscribe {
            // The receive leg exists now: only now may the frame go out.
            self.send_post(io);
        }
        let pause = if was_subscribe || !empty {
            Duration::ZERO
        } else {
            io.config
                .pacing(p.wait, now.saturating_duration_since(p.started))
        };
        if pause.is_zero() {
            self.send_poll(io, now, false);
        } else if let LegState::Poll { next_at, .. } = &mut self.leg {
            *next_at = Some((now + pause).min(self.deadline));
        }
    }

    pub(crate) fn handle_error(&mut self, io: &mut Io, id: RequestId, error: Error, now: Instant) {
        if !self.owns(id) {
            return;
        }
        self.open.remove(&id);
        // A runtime that aborts a request at its deadline (the exchange's)
        // races the exchange's own timer: past the deadline, whatever the
        // runtime saw, the exchange timed out.
        let error = if now >= self.deadline {
            Error::Timeout
        } else {
            error
        };
        self.finish(io, Err(error));
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
