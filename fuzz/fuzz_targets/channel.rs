//! An operation over a Reverb channel: the core's `Operation` (`tools`, a
//! call, or an announcement) driven through the channel adapter by a
//! script of what the channel server, the auth bridge and the page do.
//!
//! Input: byte 0 = configuration (bits 0-1: the operation, 0 `tools`,
//! 1 a write call, 2 an announcement, 3 a read call; bit 2: a presence
//! channel; bit 3: warm; bit 4: a 300-byte message limit). The rest is
//! lines (`\n`), each an event the harness delivers when the operation next
//! waits: `S<text>` a server message; `R<text>` a whisper from the page
//! whose data is `<text>` with `$ID` replaced by the id of the agent's last
//! request; `C<code>` the socket closes (no code: dropped); `T<ms>` the
//! clock moves; `B<status>` the bridge's status for the next auth;
//! `A<text>` the bridge's body for the next auth. The harness answers the
//! socket's opening (the welcome), a correct auth and a subscription by
//! itself, as a server and bridge would.
//!
//! Properties:
//! - nothing panics, and once the script is spent the clock alone ends the
//!   operation in bounded steps;
//! - no request id is whispered twice (never twice);
//! - nothing is written on a socket that is not open;
//! - the token appears in no socket message, no socket URL and no error,
//!   and goes only to the auth bridge, as a bearer header;
//! - a request refused for the channel's limit was never sent (never
//!   outcome-unknown), and one over the limit is never whispered.

#![no_main]

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use human_plus_core::{
    Activity, EgressPolicy, HttpEvent, InitCache, ManagerConfig, Operation, OperationOutput,
    OwnerKey, Participant, PusherConfig, PusherSecret, ReverbChannel, SeededEntropy,
    SocketEvent, SocketTransmit, SurfaceInvitation, Transmit, TransportConfig, TrustPolicy,
    attach, sign_channel_auth,
};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

const KEY: &str = "app-key";
const SECRET: &str = "app-secret";
const TOKEN: &str = "tok-0123456789abcdef0123456789";
const SESSION: &str = "S1_abcd";
const WS: &str = "wss://ws.app.example/app/app-key";
const AUTH: &str = "https://app.example/broadcasting/auth";

struct World {
    now: Instant,
    channel: String,
    socket_open: bool,
    socket_id: u32,
    inbox: VecDeque<SocketEvent>,
    script: VecDeque<Vec<u8>>,
    bridge_status: u16,
    bridge_body: Option<String>,
    last_id: Option<Value>,
    ids: BTreeMap<String, usize>,
    limit: usize,
}

impl World {
    fn text(&mut self, v: &Value) {
        self.inbox.push_back(SocketEvent::Text(v.to_string()));
    }

    fn on_open<T: OperationOutput>(&mut self, url: &str) {
        assert!(!url.contains(TOKEN), "the token in the socket's URL");
        self.socket_open = true;
        self.socket_id += 1;
        self.inbox.clear();
        self.inbox.push_back(SocketEvent::Opened);
        let data = json!({"socket_id": format!("1.{}", self.socket_id), "activity_timeout": 30});
        self.text(&json!({"event": "pusher:connection_established", "data": data.to_string()}));
        let _ = std::marker::PhantomData::<T>;
    }

    fn on_text(&mut self, text: &str) {
        assert!(self.socket_open, "a message written on a socket that is not open");
        assert!(!text.contains(TOKEN), "the token in a socket message");
        assert!(text.len() <= self.limit, "a message over the channel's limit was sent");
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            panic!("the agent wrote something that is not JSON: {text}");
        };
        match v["event"].as_str().unwrap_or_default() {
            "pusher:subscribe" => {
                let mut data = json!({});
                if self.channel.starts_with("presence-") {
                    data = json!({"presence": {"ids": ["agent-1", "page"], "hash": {}, "count": 2}});
                }
                let ch = self.channel.clone();
                self.text(&json!({"event": "pusher_internal:subscription_succeeded", "channel": ch, "data": data.to_string()}));
            }
            "pusher:ping" => self.text(&json!({"event": "pusher:pong", "data": {}})),
            "client-mcp" => {
                let data = &v["data"];
                if let Some(id) = data.get("id") {
                    let n = self.ids.entry(id.to_string()).or_default();
                    *n += 1;
                    assert_eq!(*n, 1, "request {id} whispered twice");
                    self.last_id = Some(id.clone());
                }
            }
            other => panic!("unexpected client event {other}"),
        }
    }

    fn auth_answer(&mut self, body: &str) -> (u16, String) {
        let socket_id = body
            .split('&')
            .find_map(|kv| kv.strip_prefix("socket_id="))
            .unwrap_or("0.0")
            .to_owned();
        let status = std::mem::replace(&mut self.bridge_status, 200);
        if let Some(b) = self.bridge_body.take() {
            return (status, b);
        }
        let cd = self
            .channel
            .starts_with("presence-")
            .then(|| r#"{"user_id":"agent-1"}"#.to_owned());
        let auth = sign_channel_auth(KEY, &PusherSecret::new(SECRET), &socket_id, &self.channel, cd.as_deref());
        let mut a = json!({ "auth": auth });
        if let Some(cd) = cd {
            a["channel_data"] = json!(cd);
        }
        (status, a.to_string())
    }

    /// The next scripted event, delivered; false when the script is spent.
    fn scripted<T: OperationOutput>(&mut self, op: &mut Operation<T>) -> bool {
        let Some(line) = self.script.pop_front() else {
            return false;
        };
        let (kind, rest) = line.split_first().map_or((b'?', &[][..]), |(k, r)| (*k, r));
        let text = String::from_utf8_lossy(rest).into_owned();
        match kind {
            b'R' => {
                let id = self.last_id.as_ref().map_or("null".to_owned(), Value::to_string);
                let data = text.replace("$ID", &id);
                let frame = format!(
                    r#"{{"event":"client-mcp","channel":{},"data":{}}}"#,
                    json!(self.channel),
                    if data.trim_start().starts_with('{') { data } else { "{}".to_owned() }
                );
                if self.socket_open {
                    op.handle_socket(SocketEvent::Text(frame), self.now);
                }
            }
            b'C' => {
                if self.socket_open {
                    self.socket_open = false;
                    self.inbox.clear();
                    op.handle_socket(SocketEvent::Closed(text.trim().parse().ok()), self.now);
                }
            }
            b'T' => {
                let ms: u64 = text.trim().parse().unwrap_or(1000).min(120_000);
                self.now += Duration::from_millis(ms);
                op.handle_timeout(self.now);
            }
            b'B' => self.bridge_status = text.trim().parse().unwrap_or(403),
            b'A' => self.bridge_body = Some(text),
            _ => {
                if self.socket_open {
                    op.handle_socket(SocketEvent::Text(text), self.now);
                }
            }
        }
        true
    }

    fn run<T: OperationOutput>(&mut self, mut op: Operation<T>) {
        let mut idle_steps = 0;
        for _ in 0..20_000 {
            while let Some(t) = op.poll_transmit() {
                match t {
                    Transmit::Socket(SocketTransmit::Open { url, .. }) => self.on_open::<T>(&url),
                    Transmit::Socket(SocketTransmit::Text(text)) => self.on_text(&text),
                    Transmit::Socket(SocketTransmit::Close) => {
                        self.socket_open = false;
                        self.inbox.clear();
                    }
                    Transmit::Request(req) => {
                        assert_eq!(req.url.expose(), AUTH, "an HTTP request not to the bridge");
                        assert!(
                            req.headers
                                .iter()
                                .any(|(k, v)| *k == "authorization" && v.ends_with(TOKEN)),
                            "the bridge gets the bearer"
                        );
                        let body = String::from_utf8_lossy(req.body.as_deref().unwrap_or_default())
                            .into_owned();
                        let (status, answer) = self.auth_answer(&body);
                        op.handle_event(req.id, HttpEvent::Head(status), self.now);
                        op.handle_event(req.id, HttpEvent::Body(answer.into_bytes()), self.now);
                        op.handle_event(req.id, HttpEvent::End, self.now);
                    }
                    Transmit::Cancel(_) | Transmit::Release(_) | Transmit::Connect(_) => {}
                }
            }
            if let Some(outcome) = op.poll_outcome() {
                if let Err(e) = &outcome.result {
                    let text = e.to_string();
                    assert!(!text.contains(TOKEN), "the token in an error: {text}");
                    if e.code() == "channel_limit" {
                        assert!(!e.outcome_unknown(), "a refused request was never sent");
                    }
                }
                return;
            }
            if let Some(ev) = self.inbox.pop_front() {
                op.handle_socket(ev, self.now);
                continue;
            }
            if self.scripted(&mut op) {
                continue;
            }
            idle_steps += 1;
            assert!(idle_steps < 200, "the clock alone did not end the operation");
            let wake = op.poll_timeout().expect("an unfinished operation waits for something");
            self.now = self.now.max(wake);
            op.handle_timeout(self.now);
        }
        panic!("the operation never ended");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&config, rest)) = data.split_first() else {
        return;
    };
    let presence = config & 4 != 0;
    let warm = config & 8 != 0;
    let limit = if config & 16 != 0 { 300 } else { 10_000 };
    let channel = format!(
        "{}-agent.session.{SESSION}",
        if presence { "presence" } else { "private" }
    );
    let owner = OwnerKey::of("fuzz").unwrap();
    let ch = ReverbChannel::new(WS, AUTH, &channel, false).unwrap();
    let inv = SurfaceInvitation::new_reverb(ch, SESSION, TOKEN, "sheet:one", "Fuzz").unwrap();
    let mut pusher = PusherConfig::default();
    pusher.max_message_bytes = limit;
    pusher.client_events = 100;
    let config_m = ManagerConfig::new(
        EgressPolicy::new(["ws.app.example", "app.example"]).allow_unverified_egress(true),
        TrustPolicy::every_tool(Vec::<(String, String)>::new()),
    )
    .transport(
        TransportConfig::default()
            .warm(warm)
            .timeout(Duration::from_secs(5)),
    )
    .channel(pusher);
    let record = attach(
        &owner,
        inv,
        Participant::new("agent-1", "Fuzz", "#000000"),
        &config_m.egress,
        &mut SeededEntropy::new(1),
    )
    .unwrap();
    let now = Instant::now();
    let entropy = Box::new(SeededEntropy::new(2));
    let init = InitCache::new();
    let mut world = World {
        now,
        channel,
        socket_open: false,
        socket_id: 0,
        inbox: VecDeque::new(),
        script: rest.split(|b| *b == b'\n').map(<[u8]>::to_vec).take(256).collect(),
        bridge_status: 200,
        bridge_body: None,
        last_id: None,
        ids: BTreeMap::new(),
        limit,
    };
    match config & 3 {
        0 => world.run(Operation::tools(record, &owner, &config_m, &init, entropy, now).unwrap()),
        1 => world.run(
            Operation::call(record, &owner, "sheet_write", json!({"cell": "A1", "value": "v"}), &config_m, &init, entropy, now)
                .unwrap(),
        ),
        2 => world.run(
            Operation::announce(record, &owner, &Activity::new("editing"), &config_m, entropy, now).unwrap(),
        ),
        _ => world.run(
            Operation::call(record, &owner, "sheet_read", json!({}), &config_m, &init, entropy, now).unwrap(),
        ),
    }
});
