//! The third-party parts of the Reverb transport's tests, proven without the
//! agent side: sockudo (a real Pusher-protocol server, `.ci/sockudo`) with
//! the project's own auth bridge (`human_plus_relay::AuthBridge`, signing
//! with sockudo's key and secret), and seed 004's page on laravel-echo +
//! pusher-js from npm (`tests/echo-page`, `.ci/echo-page`). A scripted
//! client written here over tokio-tungstenite plays the agent: it joins the
//! channel with the bridge's signature and whispers MCP to the page.
//!
//! Each test is skipped with a message when sockudo or the page is not
//! installed (`HUMAN_PLUS_SOCKUDO`, `HUMAN_PLUS_ECHO_PAGE`), and fails
//! instead under `HUMAN_PLUS_REQUIRE_SOCKUDO=1` / `HUMAN_PLUS_REQUIRE_ECHO_PAGE=1`
//! or `CI=true` (as in `.ci/run`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use human_plus_conformance::echo_page::{AuthMode, Broadcaster, EchoPage, EchoPageOptions};
use human_plus_conformance::sockudo::Sockudo;
use human_plus_relay::{AuthBridge, AuthBridgeHandle};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

const AGENT_TOKEN: &str = "agent-token-0123456789abcdef";
const PAGE_TOKEN: &str = "page-token-0123456789abcdef";
const SOON: Duration = Duration::from_secs(10);

fn channel(session: &str) -> String {
    format!("private-agent.session.{session}")
}

// ------------------------------------------------------------ the bridge

/// The project's auth bridge signing for `server`'s app, granting both
/// tokens `channel`.
async fn bridge_for(server: &Sockudo, channel: &str) -> AuthBridgeHandle {
    AuthBridge::builder(server.key(), server.secret())
        .grant(AGENT_TOKEN, channel)
        .grant(PAGE_TOKEN, channel)
        .start()
        .await
        .unwrap()
}

/// `POST` a form to the bridge with a bearer; (status, JSON body).
async fn ask_bridge(
    bridge: &AuthBridgeHandle,
    bearer: &str,
    socket_id: &str,
    channel: &str,
) -> (u16, Value) {
    let body = format!("socket_id={socket_id}&channel_name={channel}");
    let request = format!(
        "POST /broadcasting/auth HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {bearer}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        bridge.local_addr(),
        body.len()
    );
    let mut stream = TcpStream::connect(bridge.local_addr()).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(SOON, stream.read_to_end(&mut answer))
        .await
        .expect("the bridge answers in time")
        .unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

// ------------------------------------------------------------ the agent

type Ws = WebSocketStream<TcpStream>;

/// A scripted agent on one connection to the channel server.
struct Agent {
    ws: Ws,
    socket_id: String,
    next_id: u64,
}

impl Agent {
    /// Connects to `ws://ADDR/app/KEY` and reads the welcome.
    async fn connect(addr: SocketAddr, key: &str) -> Agent {
        let stream = TcpStream::connect(addr).await.unwrap();
        let url = format!("ws://{addr}/app/{key}?protocol=7&client=human-plus-tests&version=0");
        let config = WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let (ws, _) = tokio_tungstenite::client_async_with_config(url, stream, Some(config))
            .await
            .unwrap();
        let mut agent = Agent {
            ws,
            socket_id: String::new(),
            next_id: 0,
        };
        let hello = agent.recv().await.expect("a welcome");
        assert_eq!(hello["event"], "pusher:connection_established", "{hello}");
        // sockudo sends `data` as a JSON string holding the object.
        let data: Value = match &hello["data"] {
            Value::String(s) => serde_json::from_str(s).unwrap(),
            other => other.clone(),
        };
        agent.socket_id = data["socket_id"].as_str().unwrap().to_owned();
        assert!(data["activity_timeout"].as_u64().is_some(), "{hello}");
        agent
    }

    /// Connects and joins `channel` with the bridge's signature for
    /// `bearer`.
    async fn join(
        server: &Sockudo,
        bridge: &AuthBridgeHandle,
        bearer: &str,
        channel: &str,
    ) -> Agent {
        let mut agent = Agent::connect(server.addr(), server.key()).await;
        let (status, answer) = ask_bridge(bridge, bearer, &agent.socket_id, channel).await;
        assert_eq!(status, 200, "{answer}");
        let reply = agent
            .subscribe(channel, answer["auth"].as_str().unwrap())
            .await;
        assert_eq!(
            reply["event"], "pusher_internal:subscription_succeeded",
            "{reply}"
        );
        assert_eq!(reply["channel"], channel);
        agent
    }

    /// Subscribes with `auth`; the server's answer.
    async fn subscribe(&mut self, channel: &str, auth: &str) -> Value {
        self.send(json!({"event": "pusher:subscribe", "data": {"channel": channel, "auth": auth}}))
            .await;
        self.recv().await.expect("an answer to the subscription")
    }

    /// Connects and joins the presence `channel` with the bridge's
    /// signature and `channel_data`; the subscription's answer too.
    async fn join_presence(
        server: &Sockudo,
        bridge: &AuthBridgeHandle,
        bearer: &str,
        channel: &str,
    ) -> (Agent, Value) {
        let mut agent = Agent::connect(server.addr(), server.key()).await;
        let (status, answer) = ask_bridge(bridge, bearer, &agent.socket_id, channel).await;
        assert_eq!(status, 200, "{answer}");
        agent
            .send(json!({"event": "pusher:subscribe", "data": {
                "channel": channel,
                "auth": answer["auth"],
                "channel_data": answer["channel_data"],
            }}))
            .await;
        let reply = agent.recv().await.expect("an answer to the subscription");
        assert_eq!(
            reply["event"], "pusher_internal:subscription_succeeded",
            "{reply}"
        );
        (agent, reply)
    }

    async fn send(&mut self, frame: Value) {
        self.ws
            .send(Message::text(frame.to_string()))
            .await
            .unwrap();
    }

    /// Whispers `frame` as `client-mcp` on `channel`.
    async fn whisper(&mut self, channel: &str, frame: Value) {
        self.send(json!({"event": "client-mcp", "channel": channel, "data": frame}))
            .await;
    }

    /// The next protocol message within `SOON` (a `pusher:ping` answered
    /// and passed over); `None` when the connection ended.
    async fn recv(&mut self) -> Option<Value> {
        self.recv_within(SOON).await.expect("a message in time")
    }

    /// `Err` on timeout, `Ok(None)` when the connection ended.
    async fn recv_within(&mut self, limit: Duration) -> Result<Option<Value>, ()> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let next = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .map_err(|_| ())?;
            match next {
                Some(Ok(Message::Text(text))) => {
                    let v: Value = serde_json::from_str(text.as_str()).unwrap();
                    if v["event"] == "pusher:ping" {
                        self.send(json!({"event": "pusher:pong", "data": {}})).await;
                        continue;
                    }
                    return Ok(Some(v));
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => return Ok(None),
                Some(Ok(_)) => {}
            }
        }
    }

    /// Whispers a request and waits for the whispered reply to its id
    /// (other whispers passed over).
    async fn call(&mut self, channel: &str, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = format!("agent-{}", self.next_id);
        self.whisper(
            channel,
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await;
        loop {
            let message = self.recv().await.expect("the connection stays open");
            if message["event"] == "client-mcp" && message["data"]["id"] == id.as_str() {
                assert_eq!(message["channel"], channel);
                return message["data"].clone();
            }
        }
    }

    /// The next `client-mcp` whisper's data, within `limit`.
    async fn next_whisper(&mut self, limit: Duration) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.recv_within(left).await {
                Ok(Some(m)) if m["event"] == "client-mcp" => return Some(m["data"].clone()),
                Ok(Some(_)) => {}
                Ok(None) | Err(()) => return None,
            }
        }
    }

    /// The next `pusher:error`'s (code, message) (sockudo's `data` is an
    /// object; Reverb's a string holding one).
    async fn next_error(&mut self) -> (u64, String) {
        loop {
            let m = self.recv().await.expect("the connection stays open");
            if m["event"] == "pusher:error" {
                let data = match &m["data"] {
                    Value::String(s) => serde_json::from_str(s).unwrap(),
                    other => other.clone(),
                };
                return (
                    data["code"].as_u64().unwrap(),
                    data["message"].as_str().unwrap_or_default().to_owned(),
                );
            }
        }
    }
}

/// A whisper of at least `bytes` bytes of data.
fn padded(bytes: usize) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/padding", "params": {"pad": "x".repeat(bytes)}})
}

// ------------------------------------------------------------ sockudo and the bridge

/// The bridge signs what sockudo accepts: two agents join the private
/// channel with its signatures, and a whisper from one reaches the other
/// (`data` an object), never its sender. A token the bridge did not grant
/// the channel is refused 403 with Laravel's body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_signs_what_sockudo_accepts() {
    let Some(server) = Sockudo::start() else {
        return;
    };
    assert!(server.ws_url().starts_with("ws://127.0.0.1:"));
    assert!(server.ws_url().ends_with(&format!("/app/{}", server.key())));
    let ch = channel("bridge");
    let bridge = bridge_for(&server, &ch).await;
    let mut a = Agent::join(&server, &bridge, AGENT_TOKEN, &ch).await;
    let mut b = Agent::join(&server, &bridge, PAGE_TOKEN, &ch).await;
    assert_ne!(a.socket_id, b.socket_id);
    assert_eq!(bridge.signed(), 2);

    let frame = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    a.whisper(&ch, frame.clone()).await;
    assert_eq!(b.next_whisper(SOON).await, Some(frame));
    assert_eq!(
        a.next_whisper(Duration::from_millis(300)).await,
        None,
        "never back to the sender"
    );

    let (status, body) = ask_bridge(&bridge, "not-granted", &a.socket_id, &ch).await;
    assert_eq!(status, 403);
    assert_eq!(body, json!({"message": "This action is unauthorized."}));
    let (status, _) = ask_bridge(&bridge, AGENT_TOKEN, &a.socket_id, &channel("other")).await;
    assert_eq!(status, 403, "a token is granted one channel");
    bridge.shutdown().await;
}

/// A signature made with another secret, or none, is sockudo's 4009, and
/// the connection stays: the bridge's own signature then joins on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_signature_is_4009() {
    let Some(server) = Sockudo::start() else {
        return;
    };
    let ch = channel("forged");
    let bridge = bridge_for(&server, &ch).await;
    let forger = AuthBridge::builder(server.key(), "not-the-secret")
        .grant(AGENT_TOKEN, &ch)
        .start()
        .await
        .unwrap();
    let mut agent = Agent::connect(server.addr(), server.key()).await;
    let (status, forged) = ask_bridge(&forger, AGENT_TOKEN, &agent.socket_id, &ch).await;
    assert_eq!(status, 200);
    let reply = agent.subscribe(&ch, forged["auth"].as_str().unwrap()).await;
    assert_eq!(reply["event"], "pusher:error", "{reply}");
    let data = &reply["data"];
    assert_eq!(data["code"], 4009, "{reply}");
    for auth in [String::new(), format!("{}:", server.key())] {
        agent
            .send(json!({"event": "pusher:subscribe", "data": {"channel": ch, "auth": auth}}))
            .await;
        let (code, _) = agent.next_error().await;
        assert_eq!(code, 4009);
    }
    // The same connection, the real signature.
    let (_, good) = ask_bridge(&bridge, AGENT_TOKEN, &agent.socket_id, &ch).await;
    let reply = agent.subscribe(&ch, good["auth"].as_str().unwrap()).await;
    assert_eq!(
        reply["event"], "pusher_internal:subscription_succeeded",
        "{reply}"
    );
    forger.shutdown().await;
    bridge.shutdown().await;
}

/// With Pusher's 10 KB event payload cap (and messages allowed larger), an
/// oversized whisper is answered 4301 "Event payload size (N bytes) exceeds
/// limit (10KB)" to its sender only: the other subscriber hears nothing,
/// and the connection stays (a small whisper after it arrives).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_whisper_is_4301_with_the_10_kb_cap() {
    let Some(server) = Sockudo::builder()
        .max_event_payload_kb(10)
        .max_message_size(100_000)
        .start()
    else {
        return;
    };
    let ch = channel("payload");
    let bridge = bridge_for(&server, &ch).await;
    let mut a = Agent::join(&server, &bridge, AGENT_TOKEN, &ch).await;
    let mut b = Agent::join(&server, &bridge, PAGE_TOKEN, &ch).await;
    a.whisper(&ch, padded(20_000)).await;
    let (code, message) = a.next_error().await;
    assert_eq!(code, 4301, "{message}");
    assert!(message.contains("exceeds limit (10KB)"), "{message}");
    assert!(message.contains("Event payload size ("), "{message}");
    let small = json!({"jsonrpc": "2.0", "method": "notifications/after"});
    a.whisper(&ch, small.clone()).await;
    assert_eq!(
        b.next_whisper(SOON).await,
        Some(small),
        "only the small one arrives"
    );
    bridge.shutdown().await;
}

/// With Reverb's 10,000-byte message cap, sockudo drops a connection that
/// sends a larger message, with no close frame (a client sees 1006).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_10000_bytes_drops_the_connection() {
    let Some(server) = Sockudo::start() else {
        return;
    };
    let ch = channel("message");
    let bridge = bridge_for(&server, &ch).await;
    let mut a = Agent::join(&server, &bridge, AGENT_TOKEN, &ch).await;
    let mut b = Agent::join(&server, &bridge, PAGE_TOKEN, &ch).await;
    // Under the cap: relayed.
    let fits = padded(9_000);
    a.whisper(&ch, fits.clone()).await;
    assert_eq!(b.next_whisper(SOON).await, Some(fits));
    a.whisper(&ch, padded(12_000)).await;
    let ended = loop {
        match a.recv_within(SOON).await {
            Ok(None) => break true,
            Ok(Some(m)) if m["event"] == "pusher:error" => panic!("an error instead: {m}"),
            Ok(Some(_)) => {}
            Err(()) => break false,
        }
    };
    assert!(ended, "the connection is dropped");
    assert_eq!(b.next_whisper(Duration::from_millis(300)).await, None);
    bridge.shutdown().await;
}

/// The per-socket client-event rate is a setting: beyond it sockudo answers
/// 4301 "Client event rejected due to rate limit" to the sender, drops
/// the whisper and keeps the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whispers_beyond_the_rate_are_4301() {
    let Some(server) = Sockudo::builder().client_events_per_second(5).start() else {
        return;
    };
    let ch = channel("rate");
    let bridge = bridge_for(&server, &ch).await;
    let mut a = Agent::join(&server, &bridge, AGENT_TOKEN, &ch).await;
    let mut b = Agent::join(&server, &bridge, PAGE_TOKEN, &ch).await;
    for n in 0..20 {
        a.whisper(
            &ch,
            json!({"jsonrpc": "2.0", "method": "notifications/n", "params": {"n": n}}),
        )
        .await;
    }
    let (code, message) = a.next_error().await;
    assert_eq!(code, 4301, "{message}");
    assert!(message.contains("rate limit"), "{message}");
    let mut arrived = 0;
    while b.next_whisper(Duration::from_millis(300)).await.is_some() {
        arrived += 1;
    }
    assert!((1..20).contains(&arrived), "{arrived} of 20 arrived");
    bridge.shutdown().await;
}

// ------------------------------------------------------------ the Echo page

/// Seed 004's page on laravel-echo + pusher-js joins through the bridge
/// (pusher-js's own form POST with the bearer) and answers MCP over
/// whispers: initialize, tools/list, a pinned read and write, a person's
/// edit heard as `notifications/agent_activity`, a stale write refused
/// with 409 and nothing applied, the attributed feed, the agent's activity
/// announcement recorded. When the page leaves, nothing tells a private
/// channel's agent: a later call is accepted and never answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_echo_page_answers_mcp_over_sockudo() {
    let Some(server) = Sockudo::start() else {
        return;
    };
    let session = "echo-1";
    let ch = channel(session);
    let bridge = bridge_for(&server, &ch).await;
    let options = EchoPageOptions::new(&server.ws_url(), &bridge.url(), session, PAGE_TOKEN);
    let Some(page) = EchoPage::start(&options) else {
        return;
    };
    assert_eq!(page.ready()["channel"], ch.as_str());
    assert_eq!(page.ready()["revision"], "r1");
    let mut agent = Agent::join(&server, &bridge, AGENT_TOKEN, &ch).await;

    let init = agent
        .call(&ch, "initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}))
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true);
    let init = agent
        .call(&ch, "initialize", json!({"protocolVersion": "2025-11-25"}))
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "echoed");
    assert_eq!(page.wait_for("request", SOON)["method"], "initialize");

    let list = agent.call(&ch, "tools/list", json!({})).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read_cell", "set_cell", "changes_since"]);

    let read = agent
        .call(&ch, "tools/call", json!({"name": "read_cell", "arguments": {"address": "B4"}, "_meta": {"revision": "r1"}}))
        .await;
    assert_eq!(read["result"]["structuredContent"]["value"], "7", "{read}");
    assert_eq!(read["result"]["_meta"]["revision"], "r1");

    let write = agent
        .call(&ch, "tools/call", json!({"name": "set_cell", "arguments": {"address": "B4", "value": "9"}, "_meta": {"revision": "r1"}}))
        .await;
    assert_eq!(write["result"]["_meta"]["revision"], "r2", "{write}");
    let applied = page.wait_for("write", SOON);
    assert_eq!(applied["address"], "B4");
    assert_eq!(applied["revision"], "r2");

    // The person edits: the agent hears it as the Fancy sharing layer says it.
    assert_eq!(page.person_edit("B4", "12"), "r3");
    let heard = agent
        .next_whisper(SOON)
        .await
        .expect("the person's activity");
    assert_eq!(heard["method"], "notifications/agent_activity", "{heard}");
    assert_eq!(heard["params"]["source"], "user");

    // A decision made at r2 is refused: nothing applied.
    let stale = agent
        .call(&ch, "tools/call", json!({"name": "set_cell", "arguments": {"address": "B4", "value": "99"}, "_meta": {"revision": "r2"}}))
        .await;
    assert_eq!(stale["error"]["code"], 409, "{stale}");
    assert_eq!(stale["error"]["data"]["code"], "revision_mismatch");
    assert_eq!(stale["error"]["data"]["current"], "r3");
    assert_eq!(page.wait_for("refused", SOON)["current"], "r3");
    let state = page.state();
    assert_eq!(state["revision"], "r3");
    assert_eq!(state["cells"]["B4"], "12", "the person's value stands");

    let feed = agent
        .call(&ch, "tools/call", json!({"name": "changes_since", "arguments": {"since": "r1"}, "_meta": {"revision": "r1"}}))
        .await;
    let meta = &feed["result"]["_meta"];
    assert_eq!(meta["complete"], true, "{feed}");
    assert_eq!(meta["revision"], "r3");
    let rows = meta["changes"].as_array().unwrap();
    let who: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["actor_type"].as_str().unwrap(),
                r["revision"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(who, [("agent", "r2"), ("human", "r3")]);

    // The agent's announcement is recorded, and answered by nothing.
    agent
        .whisper(&ch, json!({"jsonrpc": "2.0", "method": "notifications/human-plus/activity", "params": {"action": "reading"}}))
        .await;
    let note = page.wait_for("notification", SOON);
    assert_eq!(note["method"], "notifications/human-plus/activity");
    assert_eq!(note["params"]["action"], "reading");

    // The page leaves: the next call is accepted and never answered.
    page.leave();
    tokio::time::sleep(Duration::from_millis(300)).await;
    agent
        .whisper(
            &ch,
            json!({"jsonrpc": "2.0", "id": "after-leave", "method": "tools/list"}),
        )
        .await;
    assert_eq!(agent.next_whisper(Duration::from_secs(1)).await, None);
    bridge.shutdown().await;
}

/// The same page with Echo's `pusher` broadcaster and a custom authorizer
/// POSTing JSON (the bridge's other form), its list-change and silence
/// commands; a page whose bearer the bridge does not know is refused 403
/// and never joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_echo_page_with_the_pusher_broadcaster_and_an_authorizer() {
    let Some(server) = Sockudo::start() else {
        return;
    };
    let session = "echo-2";
    let ch = channel(session);
    let bridge = bridge_for(&server, &ch).await;
    let mut options = EchoPageOptions::new(&server.ws_url(), &bridge.url(), session, PAGE_TOKEN);
    options.broadcaster = Broadcaster::Pusher;
    options.auth_mode = AuthMode::Authorizer;
    let Some(page) = EchoPage::start(&options) else {
        return;
    };
    let mut agent = Agent::join(&server, &bridge, AGENT_TOKEN, &ch).await;
    let list = agent.call(&ch, "tools/list", json!({})).await;
    assert_eq!(
        list["result"]["tools"].as_array().unwrap().len(),
        3,
        "{list}"
    );
    // The page's other commands: a list change, and a page that stops
    // answering (its requests still printed) and starts again.
    page.command(&json!({"tools_changed": true}));
    let changed = agent.next_whisper(SOON).await.unwrap();
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    page.command(&json!({"silent": true}));
    let _ = page.wait_for("silent", SOON);
    agent
        .whisper(
            &ch,
            json!({"jsonrpc": "2.0", "id": "unanswered", "method": "ping"}),
        )
        .await;
    assert_eq!(page.wait_for("request", SOON)["id"], "unanswered");
    assert_eq!(agent.next_whisper(Duration::from_millis(300)).await, None);
    page.command(&json!({"silent": false}));
    let _ = page.wait_for("silent", SOON);
    let pong = agent.call(&ch, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}));
    drop(page);

    let mut wrong = options.clone();
    wrong.token = "not-granted-token".to_owned();
    wrong.auth_mode = AuthMode::Endpoint;
    let refused = EchoPage::spawn(&wrong).unwrap();
    let error = refused.wait_for("subscription_error", SOON);
    assert_eq!(error["status"], 403, "{error}");
    assert!(refused.seen().iter().all(|e| e["event"] != "ready"));
    bridge.shutdown().await;
}

/// A reply over the app's payload cap is refused to the page (4301, which
/// the page prints) and the agent hears nothing: the call is never
/// answered. A small reply after it arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_reply_is_refused_to_the_page() {
    let Some(server) = Sockudo::builder()
        .max_event_payload_kb(10)
        .max_message_size(100_000)
        .start()
    else {
        return;
    };
    let session = "echo-3";
    let ch = channel(session);
    let bridge = bridge_for(&server, &ch).await;
    let options = EchoPageOptions::new(&server.ws_url(), &bridge.url(), session, PAGE_TOKEN);
    let Some(page) = EchoPage::start(&options) else {
        return;
    };
    let mut agent = Agent::join(&server, &bridge, AGENT_TOKEN, &ch).await;
    page.command(&json!({"pad": 20_000}));
    let _ = page.wait_for("pad", SOON);
    agent
        .whisper(&ch, json!({"jsonrpc": "2.0", "id": "big", "method": "tools/call", "params": {"name": "read_cell", "arguments": {"address": "A1"}}}))
        .await;
    let error = page.wait_for("server_error", SOON);
    assert_eq!(error["code"], 4301, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("exceeds limit (10KB)")
    );
    assert_eq!(agent.next_whisper(Duration::from_millis(500)).await, None);
    page.command(&json!({"pad": 0}));
    let _ = page.wait_for("pad", SOON);
    let small = agent
        .call(
            &ch,
            "tools/call",
            json!({"name": "read_cell", "arguments": {"address": "A1"}}),
        )
        .await;
    assert_eq!(
        small["result"]["structuredContent"]["value"], "Item",
        "{small}"
    );
    bridge.shutdown().await;
}

/// On a presence channel the page's departure is said: the agent, joined
/// after the page, finds it among the members, and hears
/// `pusher_internal:member_removed` with its user id when it leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_echo_page_on_a_presence_channel_is_seen_leaving() {
    let Some(server) = Sockudo::start() else {
        return;
    };
    let session = "echo-4";
    let ch = format!("presence-agent.session.{session}");
    let bridge = AuthBridge::builder(server.key(), server.secret())
        .grant_as(AGENT_TOKEN, &ch, "agent")
        .grant_as(PAGE_TOKEN, &ch, "page")
        .start()
        .await
        .unwrap();
    let mut options = EchoPageOptions::new(&server.ws_url(), &bridge.url(), session, PAGE_TOKEN);
    options.channel = Some(ch.clone());
    let Some(page) = EchoPage::start(&options) else {
        return;
    };
    assert_eq!(page.ready()["channel"], ch.as_str());
    let (mut agent, joined) = Agent::join_presence(&server, &bridge, AGENT_TOKEN, &ch).await;
    let data: Value = match &joined["data"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        other => other.clone(),
    };
    let mut ids: Vec<&str> = data["presence"]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["agent", "page"], "{joined}");
    let list = agent.call(&ch, "tools/list", json!({})).await;
    assert_eq!(list["result"]["tools"].as_array().unwrap().len(), 3);
    page.leave();
    let gone = loop {
        let m = agent.recv().await.expect("the connection stays open");
        if m["event"] == "pusher_internal:member_removed" {
            break m;
        }
    };
    let data: Value = match &gone["data"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        other => other.clone(),
    };
    assert_eq!(data["user_id"], "page", "{gone}");
    bridge.shutdown().await;
}
