//! Whole core operations (tools, call, changes_since, announce, detach)
//! driven through a scripted relay and surface on a virtual clock, with
//! fuzzer-chosen replies, statuses, body splits, delays, garbage frames and
//! faults — a fuzzed version of `core/tests/sim`.
//!
//! The input is a setup (`arbitrary`), then a tape the relay draws its
//! decisions from as it needs them. An exhausted tape draws zeros, and
//! zero always means "behave": so every input ends in operations that can
//! finish.
//!
//! Invariants:
//! - every operation finishes within a bounded number of steps with an
//!   outcome; until then it always has a timer; after it, nothing is left
//!   to transmit or wait for;
//! - no request frame is POSTed before the operation's receive leg
//!   answered (SSE head 2xx on a stream still open, or a long-poll
//!   answered); later POSTs of the operation share that leg, and a leg
//!   that replaced one must answer first;
//! - every request URL carries the attachment's non-empty `client`; the
//!   token is never in a request's `Debug`, and is in the query (query
//!   auth) or the header (bearer), never both;
//! - HTTP request ids are unique and only known requests are cancelled;
//!   JSON-RPC ids are unique strings prefixed by the client id;
//! - a `tools/call` is pinned to exactly the stored revision;
//! - the outcome's record generation only grows, and its CAS generation is
//!   the loaded one;
//! - a stale-pin error keeps a pin once there was one (the current
//!   revision the refusal or the feed named, else the refused pin) and
//!   marks enforcement;
//! - a call result's pin is the stored revision, its revision is stored;
//! - `defer_to ⊆ changes`, handles unique, `nothing_changed` ⇒ answered ∧
//!   complete ∧ no changes;
//! - no reserved tool is ever admitted; gone / unauthorized answers make
//!   the record terminal and clear the init cache, and a terminal record
//!   starts no operation.

#![no_main]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use human_plus_core::{
    Activity, AttachmentState, ChangeActor, ConflictDetection, EgressPolicy, Error, HttpEvent,
    HttpMethod, HttpRequest, InitCache, InitUpdate, Leg, ManagerConfig, Operation, OwnerKey,
    Participant, ReceiveLeg, RelayAuth, RequestId, SeededEntropy, SurfaceAttachment,
    SurfaceInvitation, SurfaceRevision, Transmit, TransportConfig, TrustPolicy, Unauthorized,
    attach, is_reserved_tool_name,
};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

const TOKEN: &str = "tok_aaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const MAX_STEPS: usize = 200_000;
const TOOLS: &[&str] = &[
    "sheet_read",
    "sheet_write",
    "sheet_confirm_edit",
    "changes_since",
    "missing_tool",
];

#[derive(Arbitrary, Debug, Clone, Copy)]
enum OpKind {
    Tools,
    Call(u8),
    Changes,
    Announce,
    Detach,
}

#[derive(Arbitrary, Debug)]
struct Setup {
    leg: u8,
    wait: u8,
    timeout: u8,
    max_frame: u8,
    bearer: bool,
    require_revision: bool,
    trust: u8,
    unregister: bool,
    seed: u64,
    feed: bool,
    mint: bool,
    enforce: bool,
    ops: [Option<OpKind>; 4],
}

#[derive(Debug)]
enum ConnKind {
    Post,
    Events {
        ok: bool,
        ending: u8,
    },
    Poll {
        parked_until: Option<Instant>,
        ok: bool,
    },
}

#[derive(Debug)]
struct Conn {
    kind: ConnKind,
    events: VecDeque<(Instant, HttpEvent)>,
}

impl Conn {
    fn push(&mut self, at: Instant, ev: HttpEvent) {
        let at = self.events.back().map_or(at, |(last, _)| at.max(*last));
        self.events.push_back((at, ev));
    }
}

/// What the harness saw of one receive-leg request.
#[derive(Debug, Clone, Copy)]
struct LegSeen {
    events: bool,
    answered: bool,
    open: bool,
}

struct Relay<'a> {
    u: Unstructured<'a>,
    now: Instant,
    broker: bool,
    poll: bool,
    conns: BTreeMap<RequestId, Conn>,
    /// Frames the surface posted, not yet routed.
    outbox: Vec<(Instant, String)>,
    /// Frames waiting for the next long-poll.
    poll_queue: Vec<String>,
    poll_subscribed: bool,
    // The surface.
    revision: u64,
    feed: bool,
    mint: bool,
    enforce: bool,
    changes: Vec<(u64, String, &'static str)>,
    // Checks.
    client: String,
    bearer: bool,
    expected_pin: Option<String>,
    legs: BTreeMap<RequestId, LegSeen>,
    op_legs: Vec<RequestId>,
    seen_requests: BTreeSet<RequestId>,
    rpc_ids: BTreeSet<String>,
    /// A `list_changed` / person-activity notice was sent during the
    /// current operation.
    pushed_list_changed: bool,
    pushed_person_active: bool,
    /// The last stale refusal sent: the current revision it named, if any.
    refused_current: Option<Option<String>>,
}

impl<'a> Relay<'a> {
    fn draw(&mut self) -> u8 {
        self.u.arbitrary().unwrap_or(0)
    }

    fn latency(&mut self) -> Duration {
        match self.draw() {
            0..=199 => Duration::from_millis(5),
            d => Duration::from_millis(u64::from(d - 199) * 150),
        }
    }

    fn split(&mut self, bytes: Vec<u8>) -> Vec<Vec<u8>> {
        let how = self.draw();
        if how < 160 || bytes.len() < 2 {
            return vec![bytes];
        }
        let mut out = Vec::new();
        let mut rest = &bytes[..];
        // At most about 64 pieces: each is a step of the harness, and a
        // 255 KiB body cut in 1-byte pieces would only measure the harness.
        let floor = bytes.len() / 64;
        while !rest.is_empty() {
            let n = (1 + usize::from(self.draw()) % rest.len().min(if how > 240 { 3 } else { 40 }))
                .max(floor)
                .min(rest.len());
            out.push(rest[..n].to_vec());
            rest = &rest[n..];
        }
        out
    }

    fn garbage(&mut self) -> String {
        let n = usize::from(self.draw() % 40);
        let bytes: Vec<u8> = (0..n).map(|_| self.draw()).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// A transmit from the operation.
    fn transmit(&mut self, t: Transmit) {
        match t {
            Transmit::Cancel(id) | Transmit::Release(id) => {
                assert!(
                    self.seen_requests.contains(&id),
                    "cancel of an unknown request {id}"
                );
                self.conns.remove(&id);
                if let Some(l) = self.legs.get_mut(&id) {
                    l.open = false;
                }
            }
            Transmit::Request(req) => self.request(req),
            Transmit::Connect(n) => assert!(n <= 4, "asked for {n} connections ahead"),
            Transmit::Socket(s) => panic!("an HTTP relay's operation asked for a socket: {s:?}"),
        }
    }

    fn request(&mut self, req: HttpRequest) {
        assert!(
            self.seen_requests.insert(req.id),
            "request id reused: {}",
            req.id
        );
        assert!(
            req.deadline >= self.now,
            "a request already past its deadline"
        );
        let shown = format!("{req:?}");
        assert!(!shown.contains(TOKEN), "a request's Debug leaks the token");
        let url = url::Url::parse(req.url.expose()).expect("a request URL parses");
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let get = |k: &str| pairs.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone());
        let client = get("client").unwrap_or_default();
        assert!(!client.is_empty(), "a request without a client");
        assert_eq!(client, self.client);
        let header = req
            .headers
            .iter()
            .any(|(k, v)| *k == "authorization" && v == &format!("Bearer {TOKEN}"));
        let in_query = get("token").as_deref() == Some(TOKEN);
        assert_eq!(header, self.bearer, "bearer header");
        assert_eq!(in_query, !self.bearer, "token in the query");
        let path = url.path().to_owned();
        let at = self.now + self.latency();

        match req.leg {
            Leg::Post => {
                assert_eq!(req.method, HttpMethod::Post);
                let mut conn = Conn {
                    kind: ConnKind::Post,
                    events: VecDeque::new(),
                };
                if path.ends_with("/inbox") {
                    let body = req.body.clone().expect("an inbox POST has a body");
                    assert!(!body.contains(&b'\n'), "frames are single-line");
                    let frame: Value = serde_json::from_slice(&body).expect("frames are JSON");
                    if let Some(id) = frame.get("id") {
                        self.check_leg_answered();
                        let id = id.as_str().expect("request ids are strings").to_owned();
                        assert!(id.starts_with(&format!("{}-", self.client)));
                        assert!(self.rpc_ids.insert(id), "a JSON-RPC id was reused");
                    }
                    let status = self.post_status(&mut conn, at);
                    if status {
                        self.surface(&frame);
                    }
                } else {
                    assert!(path.ends_with("/unregister"), "POST to {path}");
                    self.post_status(&mut conn, at);
                }
                self.conns.insert(req.id, conn);
            }
            Leg::Events => {
                assert_eq!(req.method, HttpMethod::Get);
                assert!(path.ends_with("/events"));
                assert_eq!(get("direction").as_deref(), Some("outbound"));
                self.op_legs.push(req.id);
                self.legs.insert(
                    req.id,
                    LegSeen {
                        events: true,
                        answered: false,
                        open: true,
                    },
                );
                let status = self.leg_status();
                let ending = self.draw() % 3;
                let mut conn = Conn {
                    kind: ConnKind::Events {
                        ok: (200..300).contains(&status),
                        ending,
                    },
                    events: VecDeque::new(),
                };
                conn.push(at, HttpEvent::Head(status));
                if (200..300).contains(&status) {
                    let mut text = String::new();
                    if self.draw() > 200 {
                        text.push('\u{feff}');
                    }
                    text.push_str("retry: 2000\n\n: keepalive\n");
                    let bytes = sse_ending(&text, ending);
                    for c in self.split(bytes) {
                        conn.push(at, HttpEvent::Body(c));
                    }
                } else {
                    let body = self.error_body();
                    conn.push(at, HttpEvent::Body(body));
                    conn.push(at, HttpEvent::End);
                }
                self.conns.insert(req.id, conn);
            }
            Leg::Poll => {
                assert_eq!(req.method, HttpMethod::Get);
                assert_eq!(get("direction").as_deref(), Some("outbound"));
                self.op_legs.push(req.id);
                self.legs.insert(
                    req.id,
                    LegSeen {
                        events: false,
                        answered: false,
                        open: true,
                    },
                );
                self.poll_subscribed = true;
                let status = self.leg_status();
                let wait = get("wait").and_then(|w| w.parse::<u64>().ok()).unwrap_or(0);
                let wait = if self.broker {
                    Duration::from_secs(wait.min(60))
                } else {
                    Duration::from_millis(wait.min(25_000))
                };
                let mut conn = Conn {
                    kind: ConnKind::Poll {
                        parked_until: None,
                        ok: (200..300).contains(&status),
                    },
                    events: VecDeque::new(),
                };
                if !(200..300).contains(&status) {
                    conn.push(at, HttpEvent::Head(status));
                    let body = self.error_body();
                    conn.push(at, HttpEvent::Body(body));
                    conn.push(at, HttpEvent::End);
                    self.conns.insert(req.id, conn);
                    return;
                }
                let ignore_wait = self.draw() > 180;
                let until = if ignore_wait {
                    self.now
                } else {
                    self.now + wait
                };
                conn.kind = ConnKind::Poll {
                    parked_until: Some(until),
                    ok: true,
                };
                self.conns.insert(req.id, conn);
                self.try_answer_poll(req.id);
            }
        }
    }

    /// No request frame before the operation's receive leg answered. The
    /// first POST waits for it (subscribe before post); later ones go as soon
    /// as the leg is known open (one leg per operation): the stream opened
    /// last answered and is still open, or the poll opened last answered or
    /// follows one that answered. A leg that replaced one that ended, failed
    /// or was cancelled without answering must answer first.
    fn check_leg_answered(&self) {
        let seen = |id: &RequestId| self.legs.get(id);
        let ok = match self.op_legs.split_last() {
            None => false,
            Some((last, before)) => match seen(last) {
                Some(l) if l.events => l.answered && l.open,
                Some(l) => {
                    l.answered
                        || before
                            .last()
                            .and_then(seen)
                            .is_some_and(|p| !p.events && p.answered)
                }
                None => false,
            },
        };
        assert!(ok, "a request was POSTed before its receive leg answered");
    }

    fn post_status(&mut self, conn: &mut Conn, at: Instant) -> bool {
        let (status, body): (u16, &[u8]) = match self.draw() {
            0..=239 => (202, br#"{"ok":true}"#),
            240 => (401, br#"{"error":"invalid_token"}"#),
            241 => (409, b""),
            242 => (410, br#"{"error":"session_gone"}"#),
            243 => (500, br#"{"error":"session_gone"}"#),
            244 => (503, b"busy"),
            245 => (302, b""),
            246 => {
                conn.push(
                    at,
                    HttpEvent::Failed(Error::Transport(human_plus_core::TransportError::new(
                        human_plus_core::TransportErrorKind::Io,
                        "connection reset",
                    ))),
                );
                return self.draw() > 128;
            }
            247 => (200, b""),
            _ => (200, b"{}"),
        };
        conn.push(at, HttpEvent::Head(status));
        for c in self.split(body.to_vec()) {
            conn.push(at, HttpEvent::Body(c));
        }
        conn.push(at, HttpEvent::End);
        (200..300).contains(&status)
    }

    fn leg_status(&mut self) -> u16 {
        match self.draw() {
            0..=243 => 200,
            244 => 401,
            245 => 410,
            246 => 409,
            247 => 500,
            248 => 502,
            249 => 301,
            250 => 204,
            _ => 200,
        }
    }

    fn error_body(&mut self) -> Vec<u8> {
        match self.draw() % 4 {
            0 => br#"{"error":"session_gone"}"#.to_vec(),
            1 => br#"{"error":"invalid_token"}"#.to_vec(),
            2 => self.garbage().into_bytes(),
            _ => Vec::new(),
        }
    }

    /// The surface receives a frame and maybe answers.
    fn surface(&mut self, frame: &Value) {
        let Some(id) = frame.get("id").cloned() else {
            return;
        };
        let method = frame["method"].as_str().unwrap_or_default().to_owned();
        let params = frame.get("params").cloned().unwrap_or(Value::Null);
        let mut delay = self.latency();
        // Noise before the reply.
        let noise = self.draw();
        if noise > 200 {
            let n = match noise % 10 {
                0 => json!({"jsonrpc":"2.0","method":"notifications/peer_joined","params":{}}).to_string(),
                5 => {
                    self.pushed_list_changed = true;
                    json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}).to_string()
                }
                6 => {
                    self.pushed_person_active = true;
                    json!({"jsonrpc":"2.0","method":"notifications/agent_activity","params":{"source":"user","action":"typing"}}).to_string()
                }
                7 => json!({"jsonrpc":"2.0","method":"notifications/agent_activity","params":{"source":"agent","agentId":"a-2"}}).to_string(),
                8 => {
                    // The method written with a `\u` escape: still the notice.
                    self.pushed_list_changed = true;
                    r#"{"jsonrpc":"2.0","method":"notifications/tools/\u006cist_changed"}"#.to_owned()
                }
                9 => json!({"jsonrpc":"2.0","id":"n1","method":"notifications/tools/list_changed"}).to_string(),
                1 => json!({"jsonrpc":"2.0","id": format!("{}-other", id.as_str().unwrap_or("x")),"result":{}}).to_string(),
                2 => json!({"jsonrpc":"2.0","id": 1,"result":{}}).to_string(),
                3 => self.garbage(),
                _ => json!([{"jsonrpc":"2.0","id": id, "result": {}}]).to_string(),
            };
            self.outbox.push((self.now + delay, n));
        }
        let choice = self.draw();
        let mut correct = self.correct(&method, &params);
        correct["jsonrpc"] = json!("2.0");
        correct["id"] = id.clone();
        let reply = match choice {
            0..=219 => correct,
            220 => return,
            221 => json!({"jsonrpc":"2.0","id": id, "error": {"code": -32601, "message": "no"}}),
            222 => json!({"jsonrpc":"2.0","id": id, "error": {"code": 409}}),
            223 => {
                json!({"jsonrpc":"2.0","id": id, "error": {"code": -32000, "data": {"code": "revision_mismatch"}}})
            }
            224 => json!({"jsonrpc":"2.0","id": id, "result": "not an object"}),
            225 => json!({"jsonrpc":"2.0","id": id}),
            226 => json!({"jsonrpc":"2.0","id": 7, "result": {}}),
            227 => json!({"jsonrpc":"2.0","id": id, "method": "x", "result": {}}),
            228 => {
                delay += Duration::from_secs(u64::from(self.draw() % 40));
                correct
            }
            229 => {
                let mut v = correct;
                if v["result"].is_object() {
                    v["result"]["pad"] = Value::String("x".repeat(usize::from(self.draw()) * 64));
                }
                v
            }
            230 => {
                let r = human_plus_fuzz::arb_json(&mut self.u, 4).unwrap_or(Value::Null);
                json!({"jsonrpc":"2.0","id": id, "result": r})
            }
            231 => {
                let e = human_plus_fuzz::arb_json(&mut self.u, 3).unwrap_or(Value::Null);
                json!({"jsonrpc":"2.0","id": id, "error": e})
            }
            232 => {
                // The reply twice.
                self.outbox.push((self.now + delay, correct.to_string()));
                correct
            }
            _ => correct,
        };
        self.outbox.push((self.now + delay, reply.to_string()));
    }

    fn correct(&mut self, method: &str, params: &Value) -> Value {
        let result = match method {
            "initialize" => {
                let v = match self.draw() {
                    0..=249 => json!("2025-06-18"),
                    250 => json!("2025-11-25"),
                    251 => json!(20250618),
                    _ => Value::Null,
                };
                json!({"protocolVersion": v, "capabilities": {"tools": {}}, "serverInfo": {"name": "fuzz", "version": "1"}})
            }
            "tools/list" => {
                let mut tools = vec![
                    json!({"name":"sheet_read","description":"Read cells.","inputSchema":{"type":"object"}}),
                    json!({"name":"sheet_write","description":"Write a cell.","inputSchema":{"type":"object","properties":{"cell":{"type":"string"}}}}),
                    json!({"name":"sheet_confirm_edit","description":"The person confirms.","inputSchema":{"type":"object"}}),
                ];
                if self.feed {
                    tools.push(json!({"name":"changes_since","description":"What changed.","inputSchema":{"type":"object"}}));
                }
                let extra = self.draw();
                if extra > 220 {
                    tools.push(json!({"name": " ", "inputSchema": {}}));
                    tools.push(json!({"name": "x", "inputSchema": []}));
                    tools.push(json!({"name": "terminal_confirm"}));
                    tools.push(json!("sheet_read"));
                }
                let mut r = json!({ "tools": tools });
                if self.draw() > 230 {
                    r["nextCursor"] = json!(format!("p{}", self.draw()));
                }
                r
            }
            "tools/call" => {
                let name = params["name"].as_str().unwrap_or_default().to_owned();
                let pin = params
                    .pointer("/_meta/revision")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if trace() {
                    eprintln!(
                        "tools/call {name} pinned {pin:?} (revision r{})",
                        self.revision
                    );
                }
                // The change-feed call that completes a stale refusal is
                // pinned to the current revision the refusal named.
                let recovering =
                    matches!(&self.refused_current, Some(Some(c)) if pin.as_ref() == Some(c));
                if !(recovering && name == "changes_since") {
                    assert_eq!(
                        pin, self.expected_pin,
                        "the call is pinned to the stored revision"
                    );
                }
                if self.enforce
                    && name != "changes_since"
                    && let Some(pin) = &pin
                    && pin != &format!("r{}", self.revision)
                {
                    // The refusal names the current revision, or not, in
                    // each of the shapes a surface may use.
                    let current = format!("r{}", self.revision);
                    let data = match self.draw() % 8 {
                        0 | 1 => json!({"code": "revision_mismatch"}),
                        2 => json!({"code": "revision_mismatch", "current": current}),
                        3 => json!({"code": "revision_stale", "currentRevision": current}),
                        4 => json!({"reason": "conflict", "current_revision": current}),
                        5 => {
                            json!({"code": "revision_mismatch", "current": "   ", "revision": pin})
                        }
                        6 => json!({"code": "revision_mismatch", "current": "x".repeat(600)}),
                        _ => json!({"code": "revision_mismatch", "current": self.revision}),
                    };
                    let named = match data.as_object().and_then(|d| {
                        ["current", "currentRevision", "current_revision"]
                            .iter()
                            .find_map(|k| d.get(*k))
                    }) {
                        Some(Value::String(c)) if c == &current => Some(current.clone()),
                        Some(Value::Number(n)) => Some(n.to_string()),
                        _ => None,
                    };
                    if trace() {
                        eprintln!("stale refusal, data {data}");
                    }
                    // A current revision equal to the refused pin is no
                    // news: the core keeps the pin it has.
                    let named = named.filter(|n| n != pin);
                    self.refused_current = Some(named);
                    return json!({"error": {"code": 409, "message": "stale", "data": data}});
                }
                let mut r = match name.as_str() {
                    "sheet_write" => {
                        self.revision += 1;
                        self.changes.push((self.revision, "A1".into(), "agent"));
                        json!({"content":[{"type":"text","text":"written"}]})
                    }
                    "changes_since" => {
                        if self.draw() > 128 {
                            self.revision += 1;
                            let actor = ["human", "agent", "other", "sales-team"]
                                [usize::from(self.draw() % 4)];
                            let handle = format!("c{}", self.draw() % 4);
                            self.changes.push((self.revision, handle, actor));
                        }
                        let since = params["arguments"]["since"]
                            .as_str()
                            .and_then(|s| s.trim_start_matches('r').parse::<u64>().ok())
                            .unwrap_or(0);
                        let rows: Vec<Value> = self
                            .changes
                            .iter()
                            .filter(|(r, _, _)| *r > since)
                            .map(|(_, h, a)| json!({"handle": h, "change": "updated", "actor_type": a}))
                            .collect();
                        let complete = match self.draw() % 4 {
                            0 | 1 => json!(true),
                            2 => json!(false),
                            _ => json!("false"),
                        };
                        json!({"content":[{"type":"text","text":"changes"}],"_meta":{"changes": rows, "complete": complete}})
                    }
                    _ => json!({"content":[{"type":"text","text":"A1=4"}]}),
                };
                if self.mint {
                    let rev = match self.draw() {
                        0..=239 => json!(format!("r{}", self.revision)),
                        240 => json!(self.revision),
                        241 => json!("x".repeat(600)),
                        242 => json!("   "),
                        _ => json!(format!("r{}", self.revision)),
                    };
                    r.as_object_mut()
                        .unwrap()
                        .entry("_meta")
                        .or_insert(json!({}))["revision"] = rev;
                }
                if self.draw() > 245 {
                    r["isError"] = json!(true);
                }
                r
            }
            _ => return json!({"error": {"code": -32601, "message": "unsupported"}}),
        };
        json!({ "result": result })
    }

    /// Routes due outbox frames to the receive legs.
    fn route(&mut self) {
        let now = self.now;
        let mut due = Vec::new();
        self.outbox.retain(|(at, f)| {
            if *at <= now {
                due.push(f.clone());
                false
            } else {
                true
            }
        });
        for frame in due {
            self.deliver(frame);
        }
    }

    fn deliver(&mut self, frame: String) {
        let at = self.now + Duration::from_millis(1);
        let streams: Vec<RequestId> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.kind, ConnKind::Events { ok: true, .. }))
            .map(|(k, _)| *k)
            .collect();
        for id in streams {
            let fault = self.draw();
            let text = match fault {
                0..=239 => format!("event: mcp\ndata: {frame}\n\n"),
                240 => format!(": keepalive\nevent: mcp\nid: 7\ndata: {frame}\n\n"),
                241 => "event: error\ndata: session_gone\n\n".to_owned(),
                242 => "event: error\ndata: invalid_token\n\n".to_owned(),
                243 => format!("event: error\ndata: something\n\ndata: {frame}\n\n"),
                244 => format!("data: {}\n\n", "y".repeat(usize::from(self.draw()) * 1024)),
                245 => String::new(),
                246 => format!("data: {}\n\n", self.garbage()),
                _ => format!("event: mcp\ndata: {frame}\n\n"),
            };
            let Some(ConnKind::Events { ending, .. }) = self.conns.get(&id).map(|c| &c.kind) else {
                continue;
            };
            let bytes = sse_ending(&text, *ending);
            let chunks = self.split(bytes);
            if let Some(conn) = self.conns.get_mut(&id) {
                for c in chunks {
                    conn.push(at, HttpEvent::Body(c));
                }
                if fault == 245 || fault == 241 {
                    conn.push(at, HttpEvent::End);
                }
            }
        }
        if self.poll_subscribed {
            self.poll_queue.push(frame);
            let parked: Vec<RequestId> = self
                .conns
                .iter()
                .filter(|(_, c)| {
                    matches!(
                        c.kind,
                        ConnKind::Poll {
                            parked_until: Some(_),
                            ..
                        }
                    )
                })
                .map(|(k, _)| *k)
                .collect();
            for id in parked {
                self.try_answer_poll(id);
            }
        }
    }

    fn try_answer_poll(&mut self, id: RequestId) {
        let Some(Conn {
            kind:
                ConnKind::Poll {
                    parked_until: Some(until),
                    ..
                },
            ..
        }) = self.conns.get(&id)
        else {
            return;
        };
        let until = *until;
        if self.poll_queue.is_empty() && self.now < until {
            return;
        }
        let frames = std::mem::take(&mut self.poll_queue);
        let shape = self.draw();
        let body = if self.broker {
            let decoded: Vec<Value> = frames
                .iter()
                .map(|f| serde_json::from_str(f).unwrap_or(Value::String(f.clone())))
                .collect();
            match shape % 5 {
                0 | 1 => {
                    json!({"frames": decoded, "cursor": format!("{}", self.draw())}).to_string()
                }
                2 => json!({"events": decoded, "next": self.draw()}).to_string(),
                3 => json!(decoded).to_string(),
                _ if decoded.len() == 1 => decoded[0].to_string(),
                _ => json!({"messages": frames}).to_string(),
            }
        } else {
            match shape {
                0..=249 => json!({"subscriber": "sub-1", "frames": frames}).to_string(),
                250 => format!("{}x", json!({"frames": frames})),
                _ => json!({"subscriber": 7, "frames": frames}).to_string(),
            }
        };
        let at = self.now + self.latency();
        let chunks = self.split(body.into_bytes());
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.kind = ConnKind::Poll {
                parked_until: None,
                ok: true,
            };
            conn.push(at, HttpEvent::Head(200));
            for c in chunks {
                conn.push(at, HttpEvent::Body(c));
            }
            conn.push(at, HttpEvent::End);
        }
    }

    /// The next instant something happens on the relay side.
    fn next_at(&self) -> Option<Instant> {
        let conn = self
            .conns
            .values()
            .filter_map(|c| c.events.front().map(|(at, _)| *at));
        let parked = self.conns.values().filter_map(|c| match c.kind {
            ConnKind::Poll {
                parked_until: Some(at),
                ..
            } => Some(at),
            _ => None,
        });
        let out = self.outbox.iter().map(|(at, _)| *at);
        conn.chain(parked).chain(out).min()
    }

    /// Pops the earliest due connection event.
    fn pop_due(&mut self) -> Option<(RequestId, HttpEvent)> {
        let now = self.now;
        let id = self
            .conns
            .iter()
            .filter(|(_, c)| c.events.front().is_some_and(|(at, _)| *at <= now))
            .min_by_key(|(id, c)| (c.events.front().map(|(at, _)| *at), **id))
            .map(|(id, _)| *id)?;
        let conn = self.conns.get_mut(&id)?;
        let (_, ev) = conn.events.pop_front()?;
        // What the harness learns from it.
        let ok_stream = matches!(conn.kind, ConnKind::Events { ok: true, .. });
        let is_poll = matches!(conn.kind, ConnKind::Poll { ok: true, .. });
        if let Some(l) = self.legs.get_mut(&id) {
            match &ev {
                HttpEvent::Head(s) if ok_stream && (200..300).contains(s) => l.answered = true,
                HttpEvent::End if is_poll => {
                    l.answered = true;
                    l.open = false;
                }
                HttpEvent::End | HttpEvent::Failed(_) => l.open = false,
                _ => {}
            }
        }
        if matches!(ev, HttpEvent::End | HttpEvent::Failed(_)) {
            self.conns.remove(&id);
        }
        Some((id, ev))
    }

    fn expire_parked(&mut self) {
        let ids: Vec<RequestId> = self.conns.keys().copied().collect();
        for id in ids {
            self.try_answer_poll(id);
        }
    }
}

/// `HP_FUZZ_TRACE=1` prints each operation's outcome (for reading what a
/// corpus file does: `cargo fuzz run session <file>`).
fn trace() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("HP_FUZZ_TRACE").is_some())
}

fn sse_ending(text: &str, ending: u8) -> Vec<u8> {
    match ending {
        1 => text.replace('\n', "\r\n").into_bytes(),
        2 => text.replace('\n', "\r").into_bytes(),
        _ => text.as_bytes().to_vec(),
    }
}

/// Runs one operation to its outcome, checking the transport invariants.
fn drive<T: human_plus_core::OperationOutput>(
    relay: &mut Relay<'_>,
    mut op: Operation<T>,
) -> human_plus_core::Outcome<T> {
    let origin = relay.now;
    relay.pushed_list_changed = false;
    relay.pushed_person_active = false;
    relay.refused_current = None;
    for step in 0..MAX_STEPS {
        if trace() && step % 20_000 == 19_999 {
            let pending: Vec<(RequestId, usize)> = relay
                .conns
                .iter()
                .map(|(k, c)| (*k, c.events.len()))
                .collect();
            eprintln!(
                "step {step}: t+{:?} timer {:?} conns {pending:?} outbox {} queue {} {op:?}",
                relay.now - origin,
                op.poll_timeout()
                    .map(|t| t.saturating_duration_since(origin)),
                relay.outbox.len(),
                relay.poll_queue.len(),
            );
        }
        while let Some(t) = op.poll_transmit() {
            relay.transmit(t);
        }
        if let Some(outcome) = op.poll_outcome() {
            assert!(op.poll_transmit().is_none());
            assert!(
                op.poll_timeout().is_none(),
                "a finished operation wants a timer"
            );
            assert!(op.poll_outcome().is_none(), "an outcome is delivered once");
            // Only a notice that was sent is seen.
            if outcome.seen.list_changed {
                assert!(relay.pushed_list_changed, "list_changed seen, never sent");
            }
            if outcome.seen.person_active {
                assert!(relay.pushed_person_active, "a person seen, never sent");
            }
            relay.conns.clear();
            relay.outbox.clear();
            relay.poll_queue.clear();
            relay.poll_subscribed = false;
            return outcome;
        }
        let timer = op.poll_timeout();
        assert!(timer.is_some(), "an unfinished operation has no timer");
        relay.route();
        relay.expire_parked();
        if let Some((id, ev)) = relay.pop_due() {
            let now = relay.now;
            op.handle_event(id, ev, now);
            continue;
        }
        let next = relay.next_at();
        match (next, timer) {
            (Some(at), Some(t)) if t <= at => {
                relay.now = relay.now.max(t);
                op.handle_timeout(relay.now);
            }
            (Some(at), _) => relay.now = relay.now.max(at),
            (None, Some(t)) => {
                relay.now = relay.now.max(t);
                op.handle_timeout(relay.now);
            }
            (None, None) => unreachable!(),
        }
    }
    panic!("the operation did not finish in {MAX_STEPS} steps");
}

struct Agent {
    record: SurfaceAttachment,
    owner: OwnerKey,
    config: ManagerConfig,
    init: InitCache,
}

impl Agent {
    /// Applies an outcome as a runtime would, checking the record rules.
    fn settle<T: std::fmt::Debug>(
        &mut self,
        outcome: human_plus_core::Outcome<T>,
    ) -> Result<T, Error> {
        if trace() {
            eprintln!("outcome: {:?}", outcome.result.as_ref().map(|_| "ok"));
        }
        assert_eq!(
            outcome.expected_generation,
            self.record.generation(),
            "CAS on the loaded generation"
        );
        if let Some(rec) = &outcome.record {
            assert!(
                rec.generation() > self.record.generation(),
                "the generation only grows"
            );
            assert_eq!(rec.id(), self.record.id());
            assert_eq!(rec.client_id(), self.record.client_id());
        }
        if let Err(Error::SurfaceUnavailable) = &outcome.result {
            assert_eq!(outcome.init, InitUpdate::Clear);
            let rec = outcome.record.as_ref().unwrap_or(&self.record);
            assert_eq!(rec.state(), AttachmentState::SurfaceUnavailable);
        }
        if let Err(Error::AttachmentUnauthorized(Unauthorized::Relay)) = &outcome.result {
            assert_eq!(outcome.init, InitUpdate::Clear);
            let rec = outcome.record.as_ref().unwrap_or(&self.record);
            assert_eq!(rec.state(), AttachmentState::AttachmentUnauthorized);
        }
        if let Some(rec) = outcome.record.clone() {
            self.record = rec;
        }
        outcome.settle(&mut self.init, Ok(()))
    }
}

fn run(data: &[u8]) -> arbitrary::Result<()> {
    let mut u = Unstructured::new(data);
    let setup: Setup = u.arbitrary()?;
    let timeout = match setup.timeout % 5 {
        0 => Duration::from_secs(30),
        1 => Duration::from_millis(50),
        2 => Duration::from_millis(500),
        3 => Duration::from_secs(2),
        _ => Duration::from_secs(10),
    };
    let leg = match setup.leg % 3 {
        0 => ReceiveLeg::Sse,
        1 => ReceiveLeg::FancyPoll {
            wait: Duration::from_millis(
                [1_000, 5_000, 20_000, 30_000][usize::from(setup.wait % 4)],
            ),
        },
        _ => ReceiveLeg::BrokerPoll {
            path: "outbox".into(),
            wait: Duration::from_secs([1, 2, 5][usize::from(setup.wait % 3)]),
        },
    };
    let max_frame = match setup.max_frame % 4 {
        0 => 262_144,
        1 => 512,
        2 => 4096,
        _ => 65_536,
    };
    // Cold, as the target was written (a leg per operation, every request
    // answered or cancelled by its end); warm mode became the default
    // (issue 43) and is the engine tests' to drive.
    let transport = TransportConfig::default()
        .receive_leg(leg.clone())
        .timeout(timeout)
        .max_frame_bytes(max_frame)
        .warm(false);
    let mut egress =
        EgressPolicy::new(["relay.example.com"]).egress_proxy("http://egress.internal:3128");
    if setup.bearer {
        egress = egress.auth(RelayAuth::Bearer);
    }
    let trust = match setup.trust % 4 {
        0 | 1 => TrustPolicy::every_tool(Vec::<(String, String)>::new()),
        2 => TrustPolicy::allowing(
            ["sheet_read", "sheet_write", "changes_since"],
            Vec::<(String, String)>::new(),
        ),
        _ => TrustPolicy::allowing(
            ["sheet_read", "changes_since"],
            [("sheet_read", "sha256:00000000000000000000000000000000")],
        ),
    };
    let config = ManagerConfig::new(egress, trust)
        .transport(transport)
        .require_revision(setup.require_revision)
        .unregister_on_detach(setup.unregister);
    let owner = OwnerKey::of("session:one").expect("owner");
    let invitation = SurfaceInvitation::new(
        "https://relay.example.com",
        "demo_001",
        TOKEN,
        "sheet:one",
        "Demo",
    )
    .expect("invitation");
    let record = attach(
        &owner,
        invitation,
        Participant::new("agent:one", "One", "#000000"),
        &config.egress,
        &mut SeededEntropy::new(setup.seed),
    )
    .expect("attach");

    let mut relay = Relay {
        u,
        // The virtual clock's origin; time only moves by the relay's say.
        now: Instant::now(),
        broker: matches!(leg, ReceiveLeg::BrokerPoll { .. }),
        poll: leg.is_poll(),
        conns: BTreeMap::new(),
        outbox: Vec::new(),
        poll_queue: Vec::new(),
        poll_subscribed: false,
        revision: 1,
        feed: setup.feed,
        mint: setup.mint,
        enforce: setup.enforce,
        changes: Vec::new(),
        client: record.client_id().to_owned(),
        bearer: setup.bearer,
        expected_pin: None,
        legs: BTreeMap::new(),
        op_legs: Vec::new(),
        seen_requests: BTreeSet::new(),
        rpc_ids: BTreeSet::new(),
        pushed_list_changed: false,
        pushed_person_active: false,
        refused_current: None,
    };
    let _ = relay.poll;
    let mut agent = Agent {
        record,
        owner,
        config,
        init: InitCache::new(),
    };

    for (n, kind) in setup.ops.iter().flatten().enumerate() {
        let entropy = Box::new(SeededEntropy::new(setup.seed.wrapping_add(n as u64 + 1)));
        let now = relay.now;
        relay.seen_requests.clear();
        relay.legs.clear();
        relay.op_legs.clear();
        relay.rpc_ids.clear();
        relay.expected_pin = agent.record.revision().map(|r| r.token().to_owned());
        let pinned_before: Option<SurfaceRevision> = agent.record.revision().cloned();
        let attached = agent.record.is_attached();
        match *kind {
            OpKind::Tools => {
                let op = Operation::tools(
                    agent.record.clone(),
                    &agent.owner,
                    &agent.config,
                    &agent.init,
                    entropy,
                    now,
                );
                let Ok(op) = op else {
                    continue;
                };
                assert!(attached);
                let out = drive(&mut relay, op);
                if let Ok(d) = agent.settle(out) {
                    for t in &d.tools {
                        assert!(
                            !is_reserved_tool_name(t.name()),
                            "a reserved tool was admitted"
                        );
                    }
                }
            }
            OpKind::Call(i) => {
                let tool = TOOLS[usize::from(i) % TOOLS.len()];
                let args = if i > 128 {
                    json!({"cell": "A1", "value": "5"})
                } else {
                    Value::Null
                };
                let op = Operation::call(
                    agent.record.clone(),
                    &agent.owner,
                    tool,
                    args,
                    &agent.config,
                    &agent.init,
                    entropy,
                    now,
                );
                let Ok(op) = op else {
                    continue;
                };
                assert!(attached);
                let out = drive(&mut relay, op);
                if let Err(Error::SurfaceChangedUnderYou(s)) = &out.result {
                    // The repeat guard answers from the record: nothing was
                    // sent and the record may be unchanged.
                    let rec = out.record.as_ref().unwrap_or(&agent.record);
                    if !s.was_repeat() {
                        assert_eq!(rec.conflict_detection(), ConflictDetection::Enforced);
                    }
                    if pinned_before.is_some() {
                        // Never silently undo the person: a refusal keeps a
                        // pin (the current one it learnt, else the refused
                        // one), so the next call cannot go out unpinned.
                        assert!(rec.revision().is_some(), "a stale refusal keeps a pin");
                    }
                    if !s.was_repeat()
                        && let Some(named) = &relay.refused_current
                    {
                        // A refusal that named the current revision ends
                        // with one: the feed's, else the one it named.
                        if let Some(named) = named {
                            let current = s.current().map(|c| c.token());
                            assert!(current.is_some(), "the named current revision was lost");
                            if !relay.mint {
                                assert_eq!(
                                    current,
                                    Some(named.as_str()),
                                    "the refusal's current revision"
                                );
                            }
                        }
                    }
                    match s.current() {
                        Some(current) => assert_eq!(rec.revision(), Some(current)),
                        None => assert_eq!(rec.revision(), pinned_before.as_ref()),
                    }
                }
                if let Err(Error::SurfaceChangedUnderYou(s)) = &out.result {
                    if s.was_repeat() {
                        // Refused here, never sent: no pin of its own; the
                        // next pin is the one the record keeps.
                        assert_eq!(s.pinned(), None);
                        assert_eq!(s.current(), pinned_before.as_ref());
                    } else {
                        assert_eq!(s.pinned(), pinned_before.as_ref());
                    }
                    assert_eq!(s.tool(), tool);
                }
                match agent.settle(out) {
                    Ok(r) => {
                        assert_eq!(r.pinned, pinned_before);
                        if let Some(rev) = &r.revision {
                            assert_eq!(agent.record.revision(), Some(rev));
                            assert!(!r.revision_refused);
                        }
                        assert!(r.text.contains("<untrusted-tool-output"));
                    }
                    Err(Error::ToolRefused(_)) | Err(_) => {}
                }
            }
            OpKind::Changes => {
                let op = Operation::changes_since(
                    agent.record.clone(),
                    &agent.owner,
                    &agent.config,
                    &agent.init,
                    entropy,
                    now,
                );
                let Ok(op) = op else {
                    continue;
                };
                assert!(attached);
                let out = drive(&mut relay, op);
                if let Ok(c) = agent.settle(out) {
                    for d in c.defer_to() {
                        assert!(
                            c.changes().iter().any(|x| std::ptr::eq(x, d)),
                            "defer_to ⊆ changes"
                        );
                        assert_ne!(d.actor(), ChangeActor::Agent);
                    }
                    let h = c.handles();
                    let unique: BTreeSet<&str> = h.iter().copied().collect();
                    assert_eq!(unique.len(), h.len(), "handles are unique");
                    if c.nothing_changed() {
                        assert!(c.answered() && c.complete() && c.changes().is_empty());
                    }
                    let _: Value = serde_json::from_str(&c.to_json()).expect("to_json is JSON");
                }
            }
            OpKind::Announce => {
                let activity = Activity::new("editing").target("cell:A1");
                let op = Operation::announce(
                    agent.record.clone(),
                    &agent.owner,
                    &activity,
                    &agent.config,
                    entropy,
                    now,
                );
                let Ok(op) = op else {
                    continue;
                };
                assert!(attached);
                let out = drive(&mut relay, op);
                let _ = agent.settle(out);
            }
            OpKind::Detach => {
                let op = Operation::detach(
                    agent.record.clone(),
                    &agent.owner,
                    &agent.config,
                    entropy,
                    now,
                );
                let Ok(op) = op else {
                    continue;
                };
                assert!(attached);
                let out = drive(&mut relay, op);
                if agent.settle(out).is_ok() {
                    assert_eq!(agent.record.state(), AttachmentState::Detached);
                }
            }
        }
        if !agent.record.is_attached() {
            // A terminal record starts nothing.
            let e = Box::new(SeededEntropy::new(1));
            assert!(
                Operation::tools(
                    agent.record.clone(),
                    &agent.owner,
                    &agent.config,
                    &agent.init,
                    e,
                    relay.now
                )
                .is_err()
            );
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
