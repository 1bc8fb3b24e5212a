//! A deterministic simulation of the relay and a surface, on a virtual
//! clock, driving the core's operations exactly as a runtime would.
//!
//! The relay model follows the Fancy relay's code: replies are routed by
//! request id to the client that sent the request (fail closed once anyone
//! labels), a frame with no subscriber is dropped, SSE streams carry
//! `event: mcp` frames, the poll leg answers `{"subscriber","frames"}` with
//! frames as JSON strings.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use human_plus_core::*;
use serde_json::{Value, json};

/// A small deterministic generator for splits and noise.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// What the scripted surface does with one request.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Reply with this `result` after the relay latency.
    Result(Value),
    /// Reply with this JSON-RPC `error`.
    Error(Value),
    /// Post this whole frame (for odd replies) instead.
    Raw(Value),
    /// Say nothing.
    Silent,
    /// Reply after an extra delay.
    Later(Duration, Box<Answer>),
}

/// A scripted surface: the page side.
pub type Script = Box<dyn FnMut(&str, &Value) -> Answer>;

/// One frame the surface received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub method: String,
    pub params: Value,
    pub id: Option<Value>,
}

/// How the relay misbehaves.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Status answered to every POST to the inbox (instead of 200).
    pub post_status: Option<u16>,
    /// Status answered to the inbox POSTs of this method only.
    pub post_status_for: Option<(String, u16)>,
    /// Status answered to the receive leg (SSE or poll) instead of 200.
    pub leg_status: Option<u16>,
    /// Body of that status.
    pub leg_status_body: Option<String>,
    /// After this many frames on an SSE stream, send `event: error` /
    /// `data: <this>` and end it.
    pub sse_error_after: Option<(usize, String)>,
    /// End SSE streams (cleanly) after this many frames.
    pub sse_end_after: Option<usize>,
    /// Split bodies into random chunks.
    pub split: bool,
    /// Use CRLF line endings on SSE.
    pub crlf: bool,
    /// Before each reply, deliver noise: notifications, replies for other
    /// ids and for other clients, garbage.
    pub noise: bool,
    /// The relay ignores `wait` and answers polls at once.
    pub ignore_wait: bool,
    /// Drop every reply.
    pub drop_replies: bool,
    /// Pad replies so the SSE event / poll body exceeds this many bytes.
    pub oversize: Option<usize>,
    /// The connection of the next inbox POST of this method breaks after
    /// the relay took the frame (the surface applies it) and before the
    /// POST's answer: the runtime reports `Failed`.
    pub lose_post_answer: Option<String>,
    /// This many POSTs (and leg requests) are given a kept connection that
    /// is found closed before a byte is written: `NotSent` with
    /// `kept_connection`, nothing reaches the relay. A request marked
    /// `fresh` always goes through.
    pub stale_kept: usize,
    /// Every request on a fresh connection fails to connect (`NotSent`,
    /// not a kept connection).
    pub unreachable: bool,
    /// Drop the replies to `tools/call` (the surface still applies it).
    pub drop_call_replies: bool,
}

#[derive(Debug)]
enum ConnKind {
    Post,
    Sse {
        subscriber: u64,
    },
    Poll {
        subscriber: u64,
        parked_until: Option<Instant>,
        broker: bool,
    },
}

#[derive(Debug)]
struct Conn {
    kind: ConnKind,
    events: VecDeque<(Instant, Ev)>,
}

#[derive(Debug, Clone)]
enum Ev {
    Head(u16),
    Body(Vec<u8>),
    End,
    Failed,
    NotSent,
    Unreachable,
}

#[derive(Debug)]
struct Subscriber {
    client: Option<String>,
    /// The client has seen this leg open (SSE head, or a poll answered).
    open: bool,
    sse: Option<RequestId>,
    queue: Vec<String>,
    frames_sent: usize,
}

/// The simulated relay + surface + clock.
pub struct Sim {
    pub now: Instant,
    pub latency: Duration,
    pub faults: Faults,
    pub rng: Rng,
    pub script: Script,
    pub seen: Vec<Seen>,
    /// Every inbox POST of a request, with whether this client had an
    /// outbound subscriber at that moment.
    pub posts: Vec<(String, bool)>,
    /// Every request the core asked for, in order (method, leg, path+query
    /// with the token removed).
    pub requests: Vec<(HttpMethod, Leg, String)>,
    conns: BTreeMap<RequestId, Conn>,
    subscribers: BTreeMap<u64, Subscriber>,
    next_subscriber: u64,
    callers: BTreeMap<String, String>,
    pending_replies: Vec<(Instant, String)>,
    pub max_steps: usize,
    /// Requests sent marked `fresh` (on a new connection).
    pub connections_opened: usize,
    /// Connections the core asked to open ahead (`Transmit::Connect`).
    pub connects_asked: usize,
    /// Kept connections found closed before writing.
    pub stale_found: usize,
}

/// What a broken connection reports.
pub fn broken() -> Error {
    Error::Transport(TransportError::new(
        TransportErrorKind::Io,
        "connection reset by peer",
    ))
}

pub const TOKEN: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

impl Sim {
    pub fn new(script: Script) -> Self {
        Sim {
            // The virtual clock's origin; the simulation never reads the
            // real clock again.
            #[allow(clippy::disallowed_methods)]
            now: Instant::now(),
            latency: Duration::from_millis(5),
            faults: Faults::default(),
            rng: Rng::new(1),
            script,
            seen: Vec::new(),
            posts: Vec::new(),
            requests: Vec::new(),
            conns: BTreeMap::new(),
            subscribers: BTreeMap::new(),
            next_subscriber: 1,
            callers: BTreeMap::new(),
            pending_replies: Vec::new(),
            max_steps: 100_000,
            connections_opened: 0,
            connects_asked: 0,
            stale_found: 0,
        }
    }

    /// The methods the surface received, in order.
    pub fn methods(&self) -> Vec<String> {
        self.seen.iter().map(|s| s.method.clone()).collect()
    }

    /// The `_meta.revision` of every `tools/call`, in order.
    pub fn pins(&self) -> Vec<Option<String>> {
        self.seen
            .iter()
            .filter(|s| s.method == "tools/call")
            .map(|s| {
                s.params
                    .pointer("/_meta/revision")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    }

    /// Runs `op` to its outcome.
    pub fn run<T: OperationOutput>(&mut self, mut op: Operation<T>) -> Outcome<T> {
        for _ in 0..self.max_steps {
            while let Some(t) = op.poll_transmit() {
                self.transmit(t);
            }
            if let Some(outcome) = op.poll_outcome() {
                // A warm stream outlives the operation; everything else is
                // closed.
                let warm_stream = outcome.warm.as_ref().is_some_and(WarmLeg::has_stream);
                let closing: Vec<RequestId> = self
                    .conns
                    .keys()
                    .copied()
                    .filter(|id| !(warm_stream && *id == RequestId::WARM))
                    .collect();
                for id in closing {
                    self.close(id);
                }
                return outcome;
            }
            self.flush_replies();
            // The next thing to happen: a relay event or the op's timer.
            let next_ev = self
                .conns
                .iter()
                .filter_map(|(id, c)| c.events.front().map(|(at, _)| (*at, Some(*id))))
                .chain(self.pending_replies.iter().map(|(at, _)| (*at, None)))
                .chain(self.parked_deadlines().into_iter().map(|at| (at, None)))
                .min_by_key(|(at, _)| *at);
            let timer = op.poll_timeout();
            match (next_ev, timer) {
                (Some((at, _)), Some(t)) if t < at => {
                    self.now = self.now.max(t);
                    op.handle_timeout(self.now);
                }
                (Some((at, Some(id))), _) => {
                    self.now = self.now.max(at);
                    let Some(conn) = self.conns.get_mut(&id) else {
                        continue;
                    };
                    let Some((_, ev)) = conn.events.pop_front() else {
                        continue;
                    };
                    let sub = match conn.kind {
                        ConnKind::Sse { subscriber } => {
                            matches!(ev, Ev::Head(_)).then_some(subscriber)
                        }
                        ConnKind::Poll { subscriber, .. } => {
                            matches!(ev, Ev::End).then_some(subscriber)
                        }
                        ConnKind::Post => None,
                    };
                    if let Some(s) = sub.and_then(|s| self.subscribers.get_mut(&s)) {
                        s.open = true;
                    }
                    match ev {
                        Ev::Head(s) => op.handle_head(id, s, self.now),
                        Ev::Body(b) => op.handle_body(id, &b, self.now),
                        Ev::End => {
                            self.close(id);
                            op.handle_end(id, self.now)
                        }
                        Ev::Failed => {
                            self.close(id);
                            op.handle_event(id, HttpEvent::Failed(broken()), self.now);
                        }
                        Ev::NotSent | Ev::Unreachable => {
                            self.close(id);
                            let kept = matches!(ev, Ev::NotSent);
                            op.handle_event(
                                id,
                                HttpEvent::NotSent {
                                    error: broken(),
                                    kept_connection: kept,
                                },
                                self.now,
                            );
                        }
                    }
                }
                (Some((at, None)), _) => {
                    self.now = self.now.max(at);
                    self.flush_replies();
                    self.expire_parked();
                }
                (None, Some(t)) => {
                    self.now = self.now.max(t);
                    op.handle_timeout(self.now);
                }
                (None, None) => panic!("the operation is stuck: nothing to wait for"),
            }
        }
        panic!("the operation did not finish in {} steps", self.max_steps);
    }

    /// Between operations: what the warm stream delivered meanwhile is fed
    /// to the warm leg, as a runtime does before the next operation.
    pub fn drain_warm(&mut self, leg: &mut WarmLeg) {
        self.flush_replies();
        // A poll parked between operations that ran past its wait was
        // answered then (empty), not now.
        let parked = self.conns.get(&RequestId::WARM).and_then(|c| match c.kind {
            ConnKind::Poll {
                parked_until: Some(until),
                broker,
                ..
            } if until <= self.now => Some((until, broker)),
            _ => None,
        });
        if let Some((until, broker)) = parked {
            let now = self.now;
            self.now = until;
            self.try_answer_poll(RequestId::WARM, broker);
            self.now = now;
        }
        let now = self.now;
        let mut ended = false;
        if let Some(conn) = self.conns.get_mut(&RequestId::WARM) {
            while let Some((at, ev)) = conn.events.pop_front() {
                let ev = match ev {
                    Ev::Head(s) => HttpEvent::Head(s),
                    Ev::Body(b) => HttpEvent::Body(b),
                    Ev::End => {
                        ended = true;
                        HttpEvent::End
                    }
                    Ev::Failed | Ev::NotSent | Ev::Unreachable => {
                        ended = true;
                        HttpEvent::Failed(broken())
                    }
                };
                // A runtime reads the warm request as it delivers.
                leg.handle_event(ev, at.min(now));
            }
        }
        if ended {
            self.close(RequestId::WARM);
        }
    }

    /// The surface sends `frame` (a notification) to every agent: the relay
    /// fans it out to every subscriber.
    pub fn broadcast(&mut self, frame: Value) {
        self.outbox(frame.to_string());
    }

    /// How many SSE streams and long-poll subscribers are open on the relay.
    pub fn open_legs(&self) -> usize {
        self.conns
            .values()
            .filter(|c| matches!(c.kind, ConnKind::Sse { .. } | ConnKind::Poll { .. }))
            .count()
    }

    /// The relay writes `bytes` on the warm stream (between operations).
    pub fn warm_write(&mut self, bytes: &[u8]) {
        let at = self.now;
        if let Some(conn) = self.conns.get_mut(&RequestId::WARM) {
            conn.events.push_back((at, Ev::Body(bytes.to_vec())));
        }
    }

    /// The warm request goes silent: whatever it would deliver never comes
    /// (a connection that died without a word).
    pub fn stall_warm(&mut self) {
        if let Some(conn) = self.conns.get_mut(&RequestId::WARM) {
            conn.events.clear();
            if let ConnKind::Poll { parked_until, .. } = &mut conn.kind {
                *parked_until = None;
            }
        }
    }

    /// The relay ends the warm stream.
    pub fn warm_end(&mut self) {
        let at = self.now;
        if let Some(conn) = self.conns.get_mut(&RequestId::WARM) {
            conn.events.push_back((at, Ev::End));
        }
    }

    fn parked_deadlines(&self) -> Vec<Instant> {
        self.conns
            .values()
            .filter_map(|c| match c.kind {
                ConnKind::Poll {
                    parked_until: Some(at),
                    ..
                } => Some(at),
                _ => None,
            })
            .collect()
    }

    fn close(&mut self, id: RequestId) {
        if let Some(conn) = self.conns.remove(&id)
            && let ConnKind::Sse { subscriber } = conn.kind
        {
            self.subscribers.remove(&subscriber);
        }
    }

    fn transmit(&mut self, t: Transmit) {
        match t {
            Transmit::Cancel(id) | Transmit::Release(id) => self.close(id),
            Transmit::Request(req) => self.start(req),
            Transmit::Connect(n) => self.connects_asked += n,
            Transmit::Socket(s) => panic!("an HTTP relay's operation asked for a socket: {s:?}"),
        }
    }

    fn query(url: &str) -> BTreeMap<String, String> {
        let u = url::Url::parse(url).expect("url");
        u.query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    fn start(&mut self, req: HttpRequest) {
        let full = req.url.expose().to_owned();
        let parsed = url::Url::parse(&full).expect("url");
        let q = Self::query(&full);
        assert!(
            q.get("client").is_some_and(|c| !c.is_empty()),
            "every request carries a non-empty client"
        );
        assert!(!format!("{req:?}").contains(TOKEN), "Debug leaks the token");
        let shown = full.replace(TOKEN, "T");
        self.requests.push((req.method, req.leg, shown));
        let path = parsed.path().to_owned();
        let client = q.get("client").cloned();
        let at = self.now + self.latency;
        self.connections_opened += usize::from(req.fresh);
        if self.faults.unreachable && req.fresh {
            self.conns.insert(
                req.id,
                Conn {
                    kind: ConnKind::Post,
                    events: VecDeque::from([(self.now, Ev::Unreachable)]),
                },
            );
            return;
        }
        if self.faults.stale_kept > 0 && !req.fresh {
            self.faults.stale_kept -= 1;
            self.stale_found += 1;
            self.conns.insert(
                req.id,
                Conn {
                    kind: ConnKind::Post,
                    events: VecDeque::from([(self.now, Ev::NotSent)]),
                },
            );
            return;
        }
        match req.leg {
            Leg::Post => {
                let mut events = VecDeque::new();
                if path.ends_with("/inbox") {
                    let body = req.body.clone().unwrap_or_default();
                    let frame: Value = serde_json::from_slice(&body).expect("frames are JSON");
                    assert!(!body.contains(&b'\n'), "frames are single-line");
                    let method = frame.get("method").and_then(Value::as_str);
                    let for_method = self
                        .faults
                        .post_status_for
                        .as_ref()
                        .filter(|(m, _)| Some(m.as_str()) == method)
                        .map(|(_, s)| *s);
                    if let Some(status) = self.faults.post_status.or(for_method) {
                        events.push_back((at, Ev::Head(status)));
                        events.push_back((at, Ev::Body(br#"{"error":"x"}"#.to_vec())));
                        events.push_back((at, Ev::End));
                    } else {
                        self.inbox(&frame, client.as_deref());
                        let method = frame.get("method").and_then(Value::as_str);
                        if method.is_some() && self.faults.lose_post_answer.as_deref() == method {
                            self.faults.lose_post_answer = None;
                            events.push_back((at, Ev::Failed));
                        } else {
                            events.push_back((at, Ev::Head(200)));
                            events.push_back((at, Ev::Body(br#"{"ok":true}"#.to_vec())));
                            events.push_back((at, Ev::End));
                        }
                    }
                } else {
                    events.push_back((at, Ev::Head(200)));
                    events.push_back((at, Ev::End));
                }
                self.conns.insert(
                    req.id,
                    Conn {
                        kind: ConnKind::Post,
                        events,
                    },
                );
            }
            Leg::Events => {
                let mut events = VecDeque::new();
                if let Some(status) = self.faults.leg_status {
                    events.push_back((at, Ev::Head(status)));
                    let body = self.faults.leg_status_body.clone().unwrap_or_default();
                    events.push_back((at, Ev::Body(body.into_bytes())));
                    events.push_back((at, Ev::End));
                    self.conns.insert(
                        req.id,
                        Conn {
                            kind: ConnKind::Post,
                            events,
                        },
                    );
                    return;
                }
                let sub = self.next_subscriber;
                self.next_subscriber += 1;
                self.subscribers.insert(
                    sub,
                    Subscriber {
                        client,
                        open: false,
                        sse: Some(req.id),
                        queue: Vec::new(),
                        frames_sent: 0,
                    },
                );
                events.push_back((at, Ev::Head(200)));
                events.push_back((at, Ev::Body(self.sse_text("retry: 2000\n\n"))));
                self.conns.insert(
                    req.id,
                    Conn {
                        kind: ConnKind::Sse { subscriber: sub },
                        events,
                    },
                );
            }
            Leg::Poll => {
                let mut events = VecDeque::new();
                if let Some(status) = self.faults.leg_status {
                    events.push_back((at, Ev::Head(status)));
                    let body = self.faults.leg_status_body.clone().unwrap_or_default();
                    events.push_back((at, Ev::Body(body.into_bytes())));
                    events.push_back((at, Ev::End));
                    self.conns.insert(
                        req.id,
                        Conn {
                            kind: ConnKind::Post,
                            events,
                        },
                    );
                    return;
                }
                let broker = !path.ends_with("/poll");
                // Fancy: subscriber echo; broker: one subscriber per client.
                let sub = if broker {
                    let existing = self
                        .subscribers
                        .iter()
                        .find(|(_, s)| s.sse.is_none() && s.client == client)
                        .map(|(k, _)| *k);
                    existing.unwrap_or_else(|| self.new_poll_subscriber(client.clone()))
                } else {
                    match q.get("subscriber").and_then(|s| s.parse::<u64>().ok()) {
                        Some(s) if self.subscribers.contains_key(&s) => s,
                        _ => self.new_poll_subscriber(client.clone()),
                    }
                };
                let wait = if broker {
                    Duration::from_secs(q.get("wait").and_then(|w| w.parse().ok()).unwrap_or(5))
                } else {
                    Duration::from_millis(
                        q.get("wait").and_then(|w| w.parse().ok()).unwrap_or(20_000),
                    )
                };
                let wait = if self.faults.ignore_wait {
                    Duration::ZERO
                } else {
                    wait
                };
                self.conns.insert(
                    req.id,
                    Conn {
                        kind: ConnKind::Poll {
                            subscriber: sub,
                            parked_until: Some(at + wait),
                            broker,
                        },
                        events,
                    },
                );
                self.try_answer_poll(req.id, broker);
            }
        }
    }

    fn new_poll_subscriber(&mut self, client: Option<String>) -> u64 {
        let sub = self.next_subscriber;
        self.next_subscriber += 1;
        self.subscribers.insert(
            sub,
            Subscriber {
                client,
                open: false,
                sse: None,
                queue: Vec::new(),
                frames_sent: 0,
            },
        );
        sub
    }

    fn is_broker(&self, id: RequestId) -> bool {
        self.conns
            .get(&id)
            .is_some_and(|c| matches!(c.kind, ConnKind::Poll { broker: true, .. }))
    }

    fn try_answer_poll(&mut self, id: RequestId, broker: bool) {
        let now = self.now;
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        let ConnKind::Poll {
            subscriber,
            parked_until,
            ..
        } = conn.kind
        else {
            return;
        };
        let Some(until) = parked_until else { return };
        let queued = self
            .subscribers
            .get(&subscriber)
            .map(|s| !s.queue.is_empty())
            .unwrap_or(false);
        if !queued && now < until {
            return;
        }
        let frames = self
            .subscribers
            .get_mut(&subscriber)
            .map(|s| std::mem::take(&mut s.queue))
            .unwrap_or_default();
        let body = if broker {
            let decoded: Vec<Value> = frames
                .iter()
                .map(|f| serde_json::from_str(f).unwrap_or(Value::Null))
                .collect();
            serde_json::to_vec(
                &json!({"frames": decoded, "cursor": format!("{}", self.rng.below(1000))}),
            )
            .unwrap()
        } else {
            serde_json::to_vec(&json!({"subscriber": subscriber.to_string(), "frames": frames}))
                .unwrap()
        };
        let at = now.max(self.now) + self.latency;
        let mut evs = vec![(at, Ev::Head(200))];
        for chunk in self.split(body) {
            evs.push((at, Ev::Body(chunk)));
        }
        evs.push((at, Ev::End));
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.kind = ConnKind::Poll {
                subscriber,
                parked_until: None,
                broker,
            };
            conn.events.extend(evs);
        }
    }

    fn expire_parked(&mut self) {
        let ids: Vec<RequestId> = self.conns.keys().copied().collect();
        for id in ids {
            let broker = self.is_broker(id);
            self.try_answer_poll(id, broker);
        }
    }

    fn sse_text(&self, s: &str) -> Vec<u8> {
        if self.faults.crlf {
            s.replace('\n', "\r\n").into_bytes()
        } else {
            s.as_bytes().to_vec()
        }
    }

    fn split(&mut self, bytes: Vec<u8>) -> Vec<Vec<u8>> {
        if !self.faults.split || bytes.len() < 2 {
            return vec![bytes];
        }
        let mut out = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let n = 1 + self.rng.below(rest.len().min(17) as u64) as usize;
            out.push(rest[..n].to_vec());
            rest = &rest[n..];
        }
        out
    }

    /// A frame arrives at the inbox: the surface sees it (the page's
    /// inbound leg is assumed open).
    fn inbox(&mut self, frame: &Value, client: Option<&str>) {
        let method = frame
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let id = frame.get("id").cloned();
        let has_sub = self
            .subscribers
            .values()
            .any(|s| s.open && s.client.as_deref() == client);
        if let Some(idv) = &id {
            self.posts.push((method.clone(), has_sub));
            if let (Some(c), Some(ids)) = (client, idv.as_str()) {
                self.callers.insert(ids.to_owned(), c.to_owned());
            }
        }
        let params = frame.get("params").cloned().unwrap_or(Value::Null);
        self.seen.push(Seen {
            at: self.now,
            method: method.clone(),
            params: params.clone(),
            id: id.clone(),
        });
        let Some(id) = id else { return };
        let mut answer = (self.script)(&method, &params);
        let mut delay = self.latency;
        while let Answer::Later(d, inner) = answer {
            delay += d;
            answer = *inner;
        }
        let reply = match answer {
            Answer::Result(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
            Answer::Error(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
            Answer::Raw(v) => v,
            Answer::Silent | Answer::Later(..) => return,
        };
        if self.faults.drop_replies || self.faults.drop_call_replies && method == "tools/call" {
            return;
        }
        let at = self.now + delay;
        if self.faults.noise {
            let idtext = id.as_str().unwrap_or("x").to_owned();
            for noise in [
                json!({"jsonrpc":"2.0","method":"notifications/peer_joined","params":{"subscriberId":"abc","ts":1}}),
                json!({"jsonrpc":"2.0","id": format!("{idtext}-other"),"result":{"content":[{"type":"text","text":"not yours"}]}}),
                json!({"jsonrpc":"2.0","id": 1,"result":{}}),
            ] {
                self.pending_replies.push((at, noise.to_string()));
            }
            // Another client's reply under our id would be the relay's
            // id-collision trap; we use unique ids, so a reply carrying a
            // different client's id is just another id.
            self.pending_replies
                .push((at, "this is not json".to_owned()));
        }
        let mut text = reply.to_string();
        if let Some(n) = self.faults.oversize {
            let pad = "x".repeat(n);
            let mut v = reply.clone();
            v["result"]["pad"] = Value::String(pad);
            text = v.to_string();
        }
        self.pending_replies.push((at, text));
    }

    /// Posts due replies to the outbox and routes them.
    fn flush_replies(&mut self) {
        let now = self.now;
        let mut due = Vec::new();
        self.pending_replies.retain(|(at, f)| {
            if *at <= now {
                due.push(f.clone());
                false
            } else {
                true
            }
        });
        for frame in due {
            self.outbox(frame);
        }
    }

    fn outbox(&mut self, frame: String) {
        let v: Value = serde_json::from_str(&frame).unwrap_or(Value::Null);
        let is_response = v.get("id").is_some_and(|i| !i.is_null()) && v.get("method").is_none();
        let any_labelled = self.subscribers.values().any(|s| s.client.is_some());
        let targets: Vec<u64> = if is_response && any_labelled {
            let key = match &v["id"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            match self.callers.remove(&key) {
                Some(client) => self
                    .subscribers
                    .iter()
                    .filter(|(_, s)| s.client.as_deref() == Some(client.as_str()))
                    .map(|(k, _)| *k)
                    .collect(),
                None => Vec::new(),
            }
        } else {
            self.subscribers.keys().copied().collect()
        };
        for sub in targets {
            self.deliver(sub, &frame);
        }
    }

    fn deliver(&mut self, sub: u64, frame: &str) {
        let at = self.now + self.latency;
        let Some(s) = self.subscribers.get_mut(&sub) else {
            return;
        };
        match s.sse {
            Some(conn_id) => {
                s.frames_sent += 1;
                let n = s.frames_sent;
                let mut text = format!("event: mcp\ndata: {frame}\n\n");
                let mut end = false;
                if let Some((after, data)) = &self.faults.sse_error_after
                    && n > *after
                {
                    text = format!("event: error\ndata: {data}\n\n");
                    end = true;
                }
                if let Some(after) = self.faults.sse_end_after
                    && n > after
                {
                    text = String::new();
                    end = true;
                }
                let bytes = self.sse_text(&text);
                let chunks = self.split(bytes);
                if let Some(conn) = self.conns.get_mut(&conn_id) {
                    for c in chunks {
                        conn.events.push_back((at, Ev::Body(c)));
                    }
                    if end {
                        conn.events.push_back((at, Ev::End));
                    }
                }
            }
            None => {
                s.queue.push(frame.to_owned());
                let polls: Vec<RequestId> = self
                    .conns
                    .iter()
                    .filter(|(_, c)| matches!(c.kind, ConnKind::Poll { subscriber, parked_until: Some(_), .. } if subscriber == sub))
                    .map(|(k, _)| *k)
                    .collect();
                for id in polls {
                    let broker = self.is_broker(id);
                    self.try_answer_poll(id, broker);
                }
            }
        }
    }
}

/// A surface that answers MCP like a small Human+ sheet: it mints `r<n>`,
/// enforces pins when `enforce`, and offers a feed when `feed`.
pub fn sheet_surface(state: std::rc::Rc<std::cell::RefCell<Sheet>>) -> Script {
    Box::new(move |method, params| {
        let mut s = state.borrow_mut();
        s.handle(method, params)
    })
}

#[derive(Debug, Clone)]
pub struct Sheet {
    pub revision: u64,
    pub mint: bool,
    pub enforce: bool,
    pub feed: bool,
    pub cells: BTreeMap<String, String>,
    pub changes: Vec<(u64, String, &'static str)>,
    pub applied: Vec<(String, String)>,
    pub protocol: String,
    /// `capabilities.tools.listChanged` in `initialize`.
    pub declares_list_changed: bool,
    /// `sheet_write`'s description (changing it changes its digest).
    pub write_description: String,
    /// A read is answered whatever its pin (the seeds' surface: "a read
    /// overwrites nothing"); only writes are refused when stale.
    pub lenient_reads: bool,
    /// A stale refusal names the current revision (`data.current`).
    pub names_current: bool,
    /// Every applied `sheet_write`: its pin, and the sheet's revision
    /// number when it was applied.
    pub write_pins: Vec<(Option<String>, u64)>,
}

impl Default for Sheet {
    fn default() -> Self {
        Sheet {
            revision: 1,
            mint: true,
            enforce: true,
            feed: true,
            cells: BTreeMap::new(),
            changes: Vec::new(),
            applied: Vec::new(),
            protocol: "2025-06-18".to_owned(),
            declares_list_changed: true,
            write_description: "Write a cell.".to_owned(),
            lenient_reads: false,
            names_current: false,
            write_pins: Vec::new(),
        }
    }
}

impl Sheet {
    pub fn person_edits(&mut self, cell: &str, value: &str) {
        self.revision += 1;
        self.cells.insert(cell.to_owned(), value.to_owned());
        self.changes.push((self.revision, cell.to_owned(), "human"));
    }

    fn result(&self, text: String) -> Value {
        if self.mint {
            json!({"content":[{"type":"text","text":text}],"_meta":{"revision": format!("r{}", self.revision)}})
        } else {
            json!({"content":[{"type":"text","text":text}]})
        }
    }

    pub fn handle(&mut self, method: &str, params: &Value) -> Answer {
        match method {
            "initialize" => Answer::Result(json!({
                "protocolVersion": self.protocol,
                "capabilities": {"tools": {"listChanged": self.declares_list_changed}},
                "serverInfo": {"name": "sim-sheet", "version": "1"}
            })),
            "tools/list" => {
                let mut tools = vec![
                    json!({"name":"sheet_read","description":"Read cells.","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}),
                    json!({"name":"sheet_write","description": self.write_description,"inputSchema":{"type":"object","properties":{"cell":{"type":"string"},"value":{"type":"string"}},"required":["cell","value"]}}),
                    json!({"name":"sheet_confirm_edit","description":"The person confirms.","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true,"destructiveHint":false}}),
                ];
                if self.feed {
                    tools.push(json!({"name":"changes_since","description":"What changed.","inputSchema":{"type":"object","properties":{"since":{"type":"string"}}}}));
                }
                Answer::Result(json!({"tools": tools}))
            }
            "tools/call" => {
                let name = params["name"].as_str().unwrap_or_default().to_owned();
                let pin = params.pointer("/_meta/revision").and_then(Value::as_str);
                // A feed is read with an old marker by design: it never
                // rejects a pin.
                let read = name == "sheet_read";
                if self.enforce
                    && name != "changes_since"
                    && !(read && self.lenient_reads)
                    && let Some(pin) = pin
                    && pin != format!("r{}", self.revision)
                {
                    let mut data = json!({"code": "revision_mismatch"});
                    if self.names_current {
                        data["current"] = json!(format!("r{}", self.revision));
                    }
                    return Answer::Error(json!({"code": 409, "message": "stale", "data": data}));
                }
                match name.as_str() {
                    "sheet_read" => {
                        let text = self
                            .cells
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(",");
                        Answer::Result(self.result(text))
                    }
                    "sheet_write" => {
                        let cell = params["arguments"]["cell"]
                            .as_str()
                            .unwrap_or("A1")
                            .to_owned();
                        let value = params["arguments"]["value"]
                            .as_str()
                            .unwrap_or("")
                            .to_owned();
                        self.write_pins
                            .push((pin.map(str::to_owned), self.revision));
                        self.revision += 1;
                        self.cells.insert(cell.clone(), value.clone());
                        self.applied.push((cell.clone(), value));
                        self.changes.push((self.revision, cell, "agent"));
                        Answer::Result(self.result("written".to_owned()))
                    }
                    "changes_since" => {
                        let since = params["arguments"]["since"]
                            .as_str()
                            .and_then(|s| s.trim_start_matches('r').parse::<u64>().ok())
                            .unwrap_or(0);
                        let rows: Vec<Value> = self
                            .changes
                            .iter()
                            .filter(|(r, _, _)| *r > since)
                            .map(|(_, cell, actor)| json!({"handle": cell, "change": "updated", "actor_type": actor, "kind": "cell"}))
                            .collect();
                        Answer::Result(
                            json!({"content":[{"type":"text","text": format!("{} changes", rows.len())}],
                            "_meta": {"revision": format!("r{}", self.revision), "complete": true, "changes": rows}}),
                        )
                    }
                    other => Answer::Error(
                        json!({"code": -32601, "message": format!("Unknown tool: {other}")}),
                    ),
                }
            }
            _ => Answer::Error(
                json!({"code": -32601, "message": format!("Unsupported method: {method}")}),
            ),
        }
    }
}

/// A record for the simulated relay at `https://relay.example.com`.
pub fn record(seed: u64) -> (SurfaceAttachment, OwnerKey, ManagerConfig) {
    let owner = OwnerKey::of("session:one").unwrap();
    let inv = SurfaceInvitation::new(
        "https://relay.example.com",
        "demo_001",
        TOKEN,
        "sheet:one",
        "Demo",
    )
    .unwrap();
    let config = ManagerConfig::new(
        EgressPolicy::new(["relay.example.com"]).egress_proxy("http://egress.internal:3128"),
        TrustPolicy::every_tool(Vec::<(String, String)>::new()),
    )
    // Cold unless a test asks for warm mode: each operation's own leg.
    .transport(human_plus_core::TransportConfig::default().warm(false));
    let rec = attach(
        &owner,
        inv,
        Participant::new("agent:one", "One", "#000000"),
        &config.egress,
        &mut SeededEntropy::new(seed),
    )
    .unwrap();
    (rec, owner, config)
}

/// Seeded entropy, boxed for an operation.
pub fn entropy(seed: u64) -> Box<dyn Entropy + Send> {
    Box::new(SeededEntropy::new(seed))
}
