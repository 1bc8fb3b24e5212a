//! Operations over a Reverb (Pusher-protocol) channel, sans-IO: a simulated
//! channel server, auth bridge and page, on a virtual clock, driving the
//! core's operations exactly as a runtime would (`Transmit::Socket`, the
//! auth bridge's one HTTP request, `Operation::handle_socket`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods,
    missing_docs
)]

mod sim;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use human_plus_core::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use serde_json::{Value, json};
use sim::{Answer, Sheet, entropy};

const KEY: &str = "app-key";
const SECRET: &str = "app-secret";
const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const SESSION: &str = "S1_abcd";
const WS: &str = "wss://ws.app.example/app/app-key";
const AUTH: &str = "https://app.example/broadcasting/auth";

/// The simulated channel server, auth bridge and page.
struct Channel {
    now: Instant,
    sheet: Rc<RefCell<Sheet>>,
    channel: String,
    /// The server's message limit: a bigger message closes the sender's
    /// connection (1009), so the page's oversized reply never arrives.
    max_message: usize,
    /// The page is subscribed (presence: it is a member).
    page_present: bool,
    /// The page leaves (presence: member_removed) instead of answering
    /// this method.
    leave_on: Option<&'static str>,
    /// The bridge's status (200 signs).
    bridge_status: u16,
    /// The bridge signs with another secret.
    forge: bool,
    /// Before each reply, another agent's request and a reply to it.
    other_agent: bool,
    /// The server drops the connection (with this close code) instead of
    /// relaying the agent's next message, once.
    drop_next: Option<Option<u16>>,
    /// The page applies the next request and never answers it, once.
    swallow_next: bool,
    /// The page answers every request twice.
    dup_replies: bool,
    /// Every request id the page received, with how many times.
    ids: std::collections::BTreeMap<String, usize>,
    socket_open: bool,
    socket_id: u32,
    to_client: VecDeque<SocketEvent>,
    opens: usize,
    auths: usize,
    /// The JSON-RPC methods whispered by the agent.
    methods: Vec<String>,
    /// Every URL the agent asked for, with whether the token was in it or
    /// a bearer header with it went there.
    urls: Vec<(String, bool)>,
}

impl Channel {
    fn new(channel: &str) -> Self {
        Channel {
            now: Instant::now(),
            sheet: Rc::new(RefCell::new(Sheet {
                names_current: true,
                ..Sheet::default()
            })),
            channel: channel.to_owned(),
            max_message: 10_000,
            page_present: true,
            leave_on: None,
            bridge_status: 200,
            forge: false,
            other_agent: false,
            drop_next: None,
            swallow_next: false,
            dup_replies: false,
            ids: std::collections::BTreeMap::new(),
            socket_open: false,
            socket_id: 0,
            to_client: VecDeque::new(),
            opens: 0,
            auths: 0,
            methods: Vec::new(),
            urls: Vec::new(),
        }
    }

    fn presence(&self) -> bool {
        self.channel.starts_with("presence-")
    }

    fn text(&mut self, v: &Value) {
        self.to_client.push_back(SocketEvent::Text(v.to_string()));
    }

    fn whisper_to_agent(&mut self, data: &Value) {
        let frame = json!({"event":"client-mcp","channel":self.channel,"data":data});
        if frame.to_string().len() > self.max_message {
            // The server closes the page's connection; the agent hears
            // nothing.
            return;
        }
        self.text(&frame);
    }

    fn on_text<T: OperationOutput>(&mut self, op: &mut Operation<T>, text: &str) {
        let _ = op;
        if text.len() > self.max_message {
            self.socket_open = false;
            self.to_client.clear();
            self.to_client.push_back(SocketEvent::Closed(Some(1009)));
            return;
        }
        let v: Value = serde_json::from_str(text).unwrap();
        match v["event"].as_str().unwrap() {
            "pusher:subscribe" => {
                let data = &v["data"];
                let cd = data["channel_data"].as_str();
                let ok = verify_channel_auth(
                    KEY,
                    &PusherSecret::new(SECRET),
                    &format!("1.{}", self.socket_id),
                    data["channel"].as_str().unwrap(),
                    cd,
                    data["auth"].as_str().unwrap(),
                );
                if ok {
                    let mut d = json!({});
                    if self.presence() {
                        let mut ids = vec![json!("agent-1")];
                        if self.page_present {
                            ids.push(json!("page"));
                        }
                        d = json!({"presence":{"ids":ids,"hash":{},"count":ids.len()}});
                    }
                    let ch = self.channel.clone();
                    self.text(&json!({"event":"pusher_internal:subscription_succeeded","channel":ch,"data":d.to_string()}));
                } else {
                    self.text(&json!({"event":"pusher:error","data":{"code":4009,"message":"Authentication error"}}));
                }
            }
            "pusher:ping" => self.text(&json!({"event":"pusher:pong","data":{}})),
            "client-mcp" => {
                if let Some(code) = self.drop_next.take() {
                    self.socket_open = false;
                    self.to_client.clear();
                    self.to_client.push_back(SocketEvent::Closed(code));
                    return;
                }
                let data = v["data"].clone();
                if let Some(id) = data.get("id") {
                    *self.ids.entry(id.to_string()).or_default() += 1;
                }
                let method = data["method"].as_str().unwrap_or("").to_owned();
                self.methods.push(method.clone());
                let Some(id) = data.get("id").cloned() else {
                    return;
                };
                if !self.page_present {
                    return;
                }
                if self.leave_on.is_some_and(|m| m == method) {
                    self.page_present = false;
                    if self.presence() {
                        let ch = self.channel.clone();
                        self.text(&json!({"event":"pusher_internal:member_removed","channel":ch,"data":"{\"user_id\":\"page\"}"}));
                    }
                    if method == "tools/call" {
                        // It applied the call and left before answering.
                        let _ = self.sheet.borrow_mut().handle(&method, &data["params"]);
                    }
                    return;
                }
                if self.other_agent {
                    self.whisper_to_agent(&json!({"jsonrpc":"2.0","id":"other-agent-7","method":"tools/call","params":{"name":"sheet_write","arguments":{"cell":"Z9","value":"theirs"}}}));
                    self.whisper_to_agent(&json!({"jsonrpc":"2.0","id":"other-agent-7","result":{"content":[{"type":"text","text":"not yours"}],"_meta":{"revision":"r999"}}}));
                }
                let answer = self.sheet.borrow_mut().handle(&method, &data["params"]);
                let reply = match answer {
                    Answer::Result(r) => json!({"jsonrpc":"2.0","id":id,"result":r}),
                    Answer::Error(e) => json!({"jsonrpc":"2.0","id":id,"error":e}),
                    _ => return,
                };
                if std::mem::take(&mut self.swallow_next) {
                    return;
                }
                self.whisper_to_agent(&reply);
                if self.dup_replies {
                    self.whisper_to_agent(&reply);
                }
            }
            other => panic!("unexpected client frame {other}"),
        }
    }

    fn on_auth<T: OperationOutput>(&mut self, op: &mut Operation<T>, req: &HttpRequest) {
        self.auths += 1;
        let bearer = req
            .headers
            .iter()
            .any(|(k, v)| *k == "authorization" && v == &format!("Bearer {TOKEN}"));
        self.urls.push((req.url.expose().to_owned(), bearer));
        assert_eq!(req.url.expose(), AUTH);
        assert!(bearer, "the bridge gets the bearer");
        let body = String::from_utf8(req.body.clone().unwrap()).unwrap();
        let socket_id = body
            .split('&')
            .find_map(|kv| kv.strip_prefix("socket_id="))
            .unwrap()
            .to_owned();
        let (status, answer) = if self.bridge_status == 200 {
            let secret = PusherSecret::new(if self.forge { "forged" } else { SECRET });
            let cd = self
                .presence()
                .then(|| r#"{"user_id":"agent-1"}"#.to_owned());
            let auth = sign_channel_auth(KEY, &secret, &socket_id, &self.channel, cd.as_deref());
            let mut a = json!({ "auth": auth });
            if let Some(cd) = cd {
                a["channel_data"] = json!(cd);
            }
            (200, a.to_string())
        } else {
            (
                self.bridge_status,
                r#"{"message":"This action is unauthorized."}"#.to_owned(),
            )
        };
        op.handle_event(req.id, HttpEvent::Head(status), self.now);
        op.handle_event(req.id, HttpEvent::Body(answer.into_bytes()), self.now);
        op.handle_event(req.id, HttpEvent::End, self.now);
    }

    /// Runs `op` to its outcome; `Close` and `Open` as a runtime would.
    fn run<T: OperationOutput>(&mut self, mut op: Operation<T>) -> Outcome<T> {
        for _ in 0..100_000 {
            while let Some(t) = op.poll_transmit() {
                match t {
                    Transmit::Socket(SocketTransmit::Open { url, .. }) => {
                        assert!(!url.contains(TOKEN), "no token in the socket's URL");
                        assert!(url.starts_with(WS));
                        self.urls.push((url, false));
                        self.opens += 1;
                        self.socket_open = true;
                        self.socket_id += 1;
                        self.to_client.clear();
                        self.to_client.push_back(SocketEvent::Opened);
                        let data = json!({"socket_id": format!("1.{}", self.socket_id), "activity_timeout": 30}).to_string();
                        self.text(&json!({"event":"pusher:connection_established","data":data}));
                    }
                    Transmit::Socket(SocketTransmit::Text(text)) => {
                        assert!(self.socket_open, "a message on a closed socket");
                        self.on_text(&mut op, &text);
                    }
                    Transmit::Socket(SocketTransmit::Close) => {
                        self.socket_open = false;
                        self.to_client.clear();
                    }
                    Transmit::Request(req) => self.on_auth(&mut op, &req),
                    Transmit::Cancel(_) | Transmit::Release(_) | Transmit::Connect(_) => {}
                }
            }
            if let Some(outcome) = op.poll_outcome() {
                return outcome;
            }
            if let Some(ev) = self.to_client.pop_front() {
                op.handle_socket(ev, self.now);
                continue;
            }
            let wake = op
                .poll_timeout()
                .expect("the operation waits for something");
            self.now = self.now.max(wake);
            op.handle_timeout(self.now);
        }
        panic!("the operation never ended");
    }

    /// What a runtime does with a kept socket between operations.
    fn drain_warm(&mut self, leg: &mut WarmLeg) {
        while let Some(ev) = self.to_client.pop_front() {
            leg.handle_socket(ev, self.now);
        }
    }
}

fn setup(channel: &str, warm: bool) -> (SurfaceAttachment, OwnerKey, ManagerConfig) {
    let owner = OwnerKey::of("session:one").unwrap();
    let ch = ReverbChannel::new(WS, AUTH, channel, false).unwrap();
    let inv = SurfaceInvitation::new_reverb(ch, SESSION, TOKEN, "sheet:one", "Demo").unwrap();
    let config = ManagerConfig::new(
        EgressPolicy::new(["ws.app.example", "app.example"]).allow_unverified_egress(true),
        TrustPolicy::every_tool(Vec::<(String, String)>::new()),
    )
    .transport(TransportConfig::default().warm(warm));
    let rec = attach(
        &owner,
        inv,
        Participant::new("agent:one", "One", "#000000"),
        &config.egress,
        &mut SeededEntropy::new(1),
    )
    .unwrap();
    (rec, owner, config)
}

fn private() -> String {
    format!("private-agent.session.{SESSION}")
}

fn presence() -> String {
    format!("presence-agent.session.{SESSION}")
}

fn write(cell: &str, value: &str) -> Value {
    json!({"cell": cell, "value": value})
}

/// Applies an outcome's record and init to the caller's copies.
fn settle<T>(
    outcome: Outcome<T>,
    record: &mut SurfaceAttachment,
    init: &mut InitCache,
) -> (Result<T, Error>, Option<WarmLeg>) {
    let mut outcome = outcome;
    let warm = outcome.warm.take();
    if let Some(r) = outcome.record.clone() {
        *record = r;
    }
    (outcome.settle(init, Ok(())), warm)
}

#[test]
fn a_whole_conversation_over_one_kept_channel() {
    let mut ch = Channel::new(&private());
    let (mut rec, owner, config) = setup(&private(), true);
    let mut init = InitCache::new();

    let op = Operation::tools(rec.clone(), &owner, &config, &init, entropy(2), ch.now)
        .unwrap()
        .learning_revision();
    let (tools, mut warm) = settle(ch.run(op), &mut rec, &mut init);
    let tools = tools.unwrap();
    assert!(tools.tools.iter().any(|t| t.name() == "sheet_write"));
    assert_eq!(ch.opens, 1);
    assert_eq!(ch.auths, 1);
    assert!(warm.as_ref().is_some_and(WarmLeg::is_channel));

    // A pinned write, on the kept channel: no new socket, no new listing.
    let op = Operation::call(
        rec.clone(),
        &owner,
        "sheet_write",
        write("A1", "agent"),
        &config,
        &init,
        entropy(3),
        ch.now,
    )
    .unwrap()
    .with_warm_leg(warm.take().unwrap());
    let (result, w) = settle(ch.run(op), &mut rec, &mut init);
    warm = w;
    let result = result.unwrap();
    assert_eq!(
        result.revision_to_carry().map(SurfaceRevision::token),
        Some("r2")
    );
    assert_eq!(ch.opens, 1, "the channel was kept");
    assert_eq!(
        ch.sheet.borrow().write_pins,
        vec![(Some("r1".to_owned()), 1)]
    );

    // The person edits; the next write is refused with what changed.
    ch.sheet.borrow_mut().person_edits("A1", "person");
    let mut leg = warm.take().unwrap();
    ch.drain_warm(&mut leg);
    let op = Operation::call(
        rec.clone(),
        &owner,
        "sheet_write",
        write("A1", "agent again"),
        &config,
        &init,
        entropy(4),
        ch.now,
    )
    .unwrap()
    .with_warm_leg(leg);
    let (refused, w) = settle(ch.run(op), &mut rec, &mut init);
    warm = w;
    let Err(Error::SurfaceChangedUnderYou(s)) = refused else {
        panic!("{refused:?}")
    };
    assert!(s.to_string().contains("A1"), "{s}");
    assert_eq!(
        ch.sheet.borrow().cells["A1"],
        "person",
        "the person's value stands"
    );

    // The blind repeat is held back here: nothing is whispered.
    let before = ch.methods.len();
    let op = Operation::call(
        rec.clone(),
        &owner,
        "sheet_write",
        write("A1", "agent again"),
        &config,
        &init,
        entropy(5),
        ch.now,
    )
    .unwrap()
    .with_warm_leg(warm.take().unwrap());
    let (repeat, w) = settle(ch.run(op), &mut rec, &mut init);
    warm = w;
    assert_eq!(repeat.unwrap_err().code(), "surface_changed_under_you");
    assert_eq!(ch.methods.len(), before, "the repeat was not sent");

    // An announcement, then detach closes the channel.
    let op = Operation::announce(
        rec.clone(),
        &owner,
        &Activity::new("editing"),
        &config,
        entropy(6),
        ch.now,
    )
    .unwrap()
    .with_warm_leg(warm.take().unwrap());
    let (announced, w) = settle(ch.run(op), &mut rec, &mut init);
    announced.unwrap();
    assert!(
        ch.methods.iter().any(|m| m.contains("activity")),
        "{:?}",
        ch.methods
    );
    let op = Operation::detach(rec.clone(), &owner, &config, entropy(7), ch.now)
        .unwrap()
        .with_warm_leg(w.unwrap());
    let (detached, w) = settle(ch.run(op), &mut rec, &mut init);
    detached.unwrap();
    assert!(w.is_none());
    assert!(!ch.socket_open, "detach closes the socket");
    assert_eq!(ch.opens, 1);
    assert_eq!(
        ch.urls.iter().filter(|(_, bearer)| *bearer).count(),
        1,
        "the token went to the bridge, once"
    );
}

#[test]
fn a_request_over_the_limit_is_refused_here_naming_it() {
    let mut ch = Channel::new(&private());
    let (rec, owner, config) = setup(&private(), false);
    let init = InitCache::new();
    let big = "x".repeat(12_000);
    let op = Operation::call(
        rec,
        &owner,
        "sheet_write",
        write("A1", &big),
        &config,
        &init,
        entropy(2),
        ch.now,
    )
    .unwrap();
    let t0 = ch.now;
    let outcome = ch.run(op);
    let err = outcome.result.unwrap_err();
    assert_eq!(err.code(), "channel_limit", "{err}");
    assert!(err.to_string().contains("limit of 10000 bytes"), "{err}");
    assert!(!err.outcome_unknown(), "never sent");
    assert!(!outcome.acted);
    assert_eq!(ch.now, t0, "said at once, not waited on");
    assert!(
        !ch.methods.contains(&"tools/call".to_owned()),
        "{:?}",
        ch.methods
    );
    assert!(ch.sheet.borrow().applied.is_empty());
    assert!(!ch.socket_open, "a cold operation closes its socket");
}

#[test]
fn a_reply_over_the_limit_ends_at_the_timeout_in_words() {
    let mut ch = Channel::new(&private());
    // The page's listing is over the server's limit (a long one).
    ch.sheet.borrow_mut().write_description = "y".repeat(11_000);
    let (rec, owner, config) = setup(&private(), false);
    let config = config.transport(
        TransportConfig::default()
            .warm(false)
            .timeout(std::time::Duration::from_secs(5)),
    );
    let t0 = ch.now;
    let op = Operation::tools(rec, &owner, &config, &InitCache::new(), entropy(2), ch.now).unwrap();
    let err = ch.run(op).result.unwrap_err();
    assert_eq!(err.code(), "timeout", "{err}");
    assert!(err.is_retryable());
    assert!(
        err.to_string()
            .contains("may have been over the server's message limit"),
        "{err}"
    );
    assert!(
        ch.now <= t0 + std::time::Duration::from_secs(5),
        "within the timeout"
    );
}

#[test]
fn a_call_the_page_never_answers_says_what_a_channel_cannot_tell() {
    let mut ch = Channel::new(&private());
    let (mut rec, owner, config) = setup(&private(), true);
    let config =
        config.transport(TransportConfig::default().timeout(std::time::Duration::from_secs(5)));
    let mut init = InitCache::new();
    let op = Operation::tools(rec.clone(), &owner, &config, &init, entropy(2), ch.now).unwrap();
    let (tools, warm) = settle(ch.run(op), &mut rec, &mut init);
    tools.unwrap();
    // The page closes its tab: a private channel says nothing.
    ch.page_present = false;
    let t0 = ch.now;
    let op = Operation::call(
        rec,
        &owner,
        "sheet_write",
        write("A1", "v"),
        &config,
        &init,
        entropy(3),
        ch.now,
    )
    .unwrap()
    .with_warm_leg(warm.unwrap());
    let outcome = ch.run(op);
    let err = outcome.result.unwrap_err();
    assert_eq!(err.code(), "call_timeout", "{err}");
    assert!(err.outcome_unknown());
    assert!(outcome.acted);
    assert!(err.to_string().contains("the page may have left"), "{err}");
    assert_eq!(
        ch.now,
        t0 + std::time::Duration::from_secs(5),
        "at the call's timeout"
    );
}

#[test]
fn on_a_presence_channel_the_page_leaving_ends_the_wait_at_once() {
    let mut ch = Channel::new(&presence());
    let (mut rec, owner, config) = setup(&presence(), true);
    let mut init = InitCache::new();
    let op = Operation::tools(rec.clone(), &owner, &config, &init, entropy(2), ch.now).unwrap();
    let (tools, warm) = settle(ch.run(op), &mut rec, &mut init);
    tools.unwrap();
    ch.leave_on = Some("tools/call");
    let t0 = ch.now;
    let op = Operation::call(
        rec.clone(),
        &owner,
        "sheet_write",
        write("A1", "v"),
        &config,
        &init,
        entropy(3),
        ch.now,
    )
    .unwrap()
    .with_warm_leg(warm.unwrap());
    let (result, warm) = settle(ch.run(op), &mut rec, &mut init);
    let err = result.unwrap_err();
    assert_eq!(err.code(), "page_left", "{err}");
    assert!(err.outcome_unknown(), "the call had been sent");
    assert!(
        err.to_string().contains("The page left the channel"),
        "{err}"
    );
    assert_eq!(ch.now, t0, "at once, not at the timeout");
    assert!(warm.is_none() || !warm.as_ref().unwrap().is_open());
    // The next operation finds nobody there, at once.
    let op = Operation::tools(
        rec.clone(),
        &owner,
        &config,
        &InitCache::new(),
        entropy(4),
        ch.now,
    )
    .unwrap();
    let op = match warm {
        Some(w) => op.with_warm_leg(w),
        None => op,
    };
    // A new connection cannot tell "the page left" from "the page signs in
    // as this agent's user": it waits, and says what it could not tell.
    let err = ch.run(op).result.unwrap_err();
    assert_eq!(err.code(), "timeout", "{err}");
    assert!(err.to_string().contains("the page may have left"), "{err}");
}

#[test]
fn a_wrong_bearer_and_a_forged_signature_are_their_own_errors() {
    let mut ch = Channel::new(&private());
    ch.bridge_status = 403;
    let (rec, owner, config) = setup(&private(), false);
    let outcome = ch.run(
        Operation::tools(
            rec.clone(),
            &owner,
            &config,
            &InitCache::new(),
            entropy(2),
            ch.now,
        )
        .unwrap(),
    );
    let err = outcome.result.unwrap_err();
    assert!(
        matches!(
            err,
            Error::AttachmentUnauthorized(Unauthorized::Bridge { status: 403 })
        ),
        "{err:?}"
    );
    assert!(err.is_terminal());
    assert_eq!(
        outcome.record.unwrap().state(),
        AttachmentState::AttachmentUnauthorized
    );
    assert!(!err.to_string().contains(TOKEN));
    assert!(ch.methods.is_empty());

    let mut ch = Channel::new(&private());
    ch.forge = true;
    let outcome = ch.run(
        Operation::tools(rec, &owner, &config, &InitCache::new(), entropy(3), ch.now).unwrap(),
    );
    let err = outcome.result.unwrap_err();
    assert!(
        matches!(err, Error::AttachmentUnauthorized(Unauthorized::Channel)),
        "{err:?}"
    );
    assert!(!err.is_terminal());
    assert!(ch.methods.is_empty(), "nothing was whispered");
    assert!(!ch.socket_open);
}

#[test]
fn another_agents_whispers_are_never_taken_as_answers() {
    let mut ch = Channel::new(&private());
    ch.other_agent = true;
    let (mut rec, owner, config) = setup(&private(), false);
    let mut init = InitCache::new();
    let op = Operation::tools(rec.clone(), &owner, &config, &init, entropy(2), ch.now).unwrap();
    settle(ch.run(op), &mut rec, &mut init).0.unwrap();
    let op = Operation::call(
        rec.clone(),
        &owner,
        "sheet_read",
        json!({}),
        &config,
        &init,
        entropy(3),
        ch.now,
    )
    .unwrap();
    let (read, _) = settle(ch.run(op), &mut rec, &mut init);
    let read = read.unwrap();
    let text = read.text.clone();
    assert!(!text.contains("not yours"), "{text}");
    assert!(!text.contains("Z9"), "{text}");
    assert_eq!(
        read.revision_to_carry().map(SurfaceRevision::token),
        Some("r1")
    );
}

#[test]
fn cold_operations_open_and_close_their_own_socket() {
    let mut ch = Channel::new(&private());
    let (mut rec, owner, config) = setup(&private(), false);
    let mut init = InitCache::new();
    for seed in 2..5 {
        let op =
            Operation::tools(rec.clone(), &owner, &config, &init, entropy(seed), ch.now).unwrap();
        let (tools, warm) = settle(ch.run(op), &mut rec, &mut init);
        tools.unwrap();
        assert!(warm.is_none());
        assert!(!ch.socket_open);
    }
    assert_eq!(ch.opens, 3);
    assert_eq!(ch.auths, 3);
}

/// One step of a conversation over a channel, with what goes wrong.
#[derive(Debug, Clone)]
enum Step {
    /// A write of `value` to A1, with the fault on the way.
    Write(u8, Fault),
    /// A read.
    Read(Fault),
    /// The person edits A1.
    PersonEdits,
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    /// The server drops the connection at the agent's next message.
    Drop(Option<u16>),
    /// The page applies and never answers.
    Swallow,
    /// The page answers twice.
    Duplicate,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        4 => Just(Fault::None),
        1 => prop_oneof![Just(None), Just(Some(1006)), Just(Some(1009)), Just(Some(4200)), Just(Some(1000))].prop_map(Fault::Drop),
        1 => Just(Fault::Swallow),
        1 => Just(Fault::Duplicate),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (any::<u8>(), fault()).prop_map(|(v, f)| Step::Write(v, f)),
        1 => fault().prop_map(Step::Read),
        1 => Just(Step::PersonEdits),
    ]
}

/// Over a channel whose server drops connections, whose page swallows or
/// repeats replies and whose person edits between calls: every request is
/// whispered at most once (never twice), every write carries a pin, a
/// write answered as applied was applied once, and one answered as not
/// applied was not.
#[test]
fn over_a_failing_channel_never_twice_and_every_answer_true() {
    let mut runner = TestRunner::new(Config {
        cases: 256,
        rng_seed: RngSeed::Fixed(40),
        failure_persistence: None,
        ..Config::default()
    });
    let counts = std::sync::Mutex::new([0usize; 4]);
    let strategy = (any::<bool>(), proptest::collection::vec(step(), 1..24));
    runner
        .run(&strategy, |(warm, steps)| {
            let mut ch = Channel::new(&private());
            let (mut rec, owner, config) = setup(&private(), warm);
            let config = config.transport(
                TransportConfig::default()
                    .warm(warm)
                    .timeout(std::time::Duration::from_secs(2)),
            );
            let mut init = InitCache::new();
            let op = Operation::tools(rec.clone(), &owner, &config, &init, entropy(1), ch.now)
                .unwrap()
                .learning_revision();
            let (first, mut leg) = settle(ch.run(op), &mut rec, &mut init);
            first.unwrap();
            for (n, s) in steps.iter().enumerate() {
                let seed = 10 + n as u64;
                let (tool, args, f) = match s {
                    Step::PersonEdits => {
                        ch.sheet
                            .borrow_mut()
                            .person_edits("A1", &format!("person {n}"));
                        continue;
                    }
                    Step::Write(v, f) => {
                        ("sheet_write", write("A1", &format!("agent {v} {n}")), *f)
                    }
                    Step::Read(f) => ("sheet_read", json!({}), *f),
                };
                match f {
                    Fault::None => {}
                    Fault::Drop(code) => ch.drop_next = Some(code),
                    Fault::Swallow => ch.swallow_next = true,
                    Fault::Duplicate => ch.dup_replies = true,
                }
                let applied_before = ch.sheet.borrow().applied.len();
                let mut op = Operation::call(
                    rec.clone(),
                    &owner,
                    tool,
                    args,
                    &config,
                    &init,
                    entropy(seed),
                    ch.now,
                )
                .unwrap();
                if let Some(l) = leg.take() {
                    let mut l = l;
                    ch.drain_warm(&mut l);
                    op = op.with_warm_leg(l);
                }
                let (result, kept) = settle(ch.run(op), &mut rec, &mut init);
                leg = kept;
                ch.dup_replies = false;
                ch.drop_next = None;
                ch.swallow_next = false;
                let applied = ch.sheet.borrow().applied.len() - applied_before;
                let mut c = counts.lock().unwrap();
                match &result {
                    Ok(_) if tool == "sheet_write" => {
                        prop_assert_eq!(applied, 1, "answered applied: applied once");
                        c[0] += 1;
                    }
                    Ok(_) => prop_assert_eq!(applied, 0),
                    Err(e) if e.outcome_unknown() => {
                        prop_assert!(applied <= 1, "{}", e);
                        c[1] += 1;
                    }
                    Err(e) => {
                        prop_assert_eq!(applied, 0, "answered not applied, yet applied: {}", e);
                        c[if e.code() == "surface_changed_under_you" {
                            2
                        } else {
                            3
                        }] += 1;
                    }
                }
            }
            for (id, n) in &ch.ids {
                prop_assert_eq!(*n, 1, "request {} whispered {} times", id, n);
            }
            let pins = &ch.sheet.borrow().write_pins;
            prop_assert!(
                pins.iter().all(|(pin, _)| pin.is_some()),
                "an unpinned write: {:?}",
                pins
            );
            Ok(())
        })
        .unwrap();
    let c = counts.into_inner().unwrap();
    eprintln!(
        "256 cases: {} writes applied and answered so, {} outcomes unknown, {} refused as stale, {} other errors (nothing applied)",
        c[0], c[1], c[2], c[3]
    );
    assert!(
        c.iter().all(|n| *n > 0),
        "every branch was exercised: {c:?}"
    );
}

#[test]
fn an_announcement_on_a_fresh_attachment_joins_the_channel_first() {
    let mut ch = Channel::new(&private());
    let (rec, owner, config) = setup(&private(), false);
    let op = Operation::announce(
        rec,
        &owner,
        &Activity::new("editing"),
        &config,
        entropy(2),
        ch.now,
    )
    .unwrap();
    let outcome = ch.run(op);
    outcome.result.unwrap();
    assert!(outcome.acted);
    assert_eq!(ch.opens, 1);
    assert!(
        ch.methods.iter().any(|m| m.contains("activity")),
        "{:?}",
        ch.methods
    );
    assert!(
        !ch.socket_open,
        "a cold announcement closes its socket after the whisper"
    );
}
