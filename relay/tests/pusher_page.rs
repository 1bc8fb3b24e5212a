//! The demo page on a Pusher channel (seed 004's page: `Echo.private`,
//! `whisper("mcp", …)`, `listenForWhisper("mcp", …)`), over the project's
//! own `PusherServer` and `AuthBridge`. The agents here are scripted
//! tokio-tungstenite clients whose every frame is written by hand from the
//! protocol, not with the core's machine the page uses.

mod common;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use human_plus_core::{ClientEventRefusal, PusherCloseCode, PusherClosed, PusherErrorCode};
use human_plus_relay::{
    AuthBridge, AuthBridgeHandle, CallOutcome, DemoSurface, ErrorData, PusherHandle, PusherServer,
    Rewrite, SurfaceError,
};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

const KEY: &str = "app-key";
const SECRET: &str = "app-secret";
const PAGE: &str = "page-token-0123456789";
const AGENT: &str = "agent-token-0123456789";
const AGENT_2: &str = "agent-two-token-012345";
const CH: &str = "private-agent.session.S1";
const PRESENCE: &str = "presence-agent.session.S1";
const SOON: Duration = Duration::from_secs(10);
/// How long "nothing answers" is watched.
const QUIET: Duration = Duration::from_millis(700);

type Ws = WebSocketStream<TcpStream>;

/// A scripted agent: a raw WebSocket client joined to one channel.
struct Agent {
    ws: Ws,
    channel: String,
    /// `subscription_succeeded`'s `data`, parsed.
    joined: Value,
}

impl Agent {
    async fn join(
        server: &PusherHandle,
        bridge: &AuthBridgeHandle,
        token: &str,
        channel: &str,
    ) -> Agent {
        let stream = TcpStream::connect(server.local_addr()).await.unwrap();
        let url = format!(
            "ws://{}/app/{KEY}?protocol=7&client=agent&version=1",
            server.local_addr()
        );
        let config = WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let (ws, _) = tokio_tungstenite::client_async_with_config(url, stream, Some(config))
            .await
            .unwrap();
        let mut agent = Agent {
            ws,
            channel: channel.to_owned(),
            joined: Value::Null,
        };
        let hello = agent.recv().await;
        assert_eq!(hello["event"], "pusher:connection_established");
        let data: Value = serde_json::from_str(hello["data"].as_str().unwrap()).unwrap();
        let socket_id = data["socket_id"].as_str().unwrap().to_owned();
        let r = common::request(
            bridge.local_addr(),
            "POST",
            "/broadcasting/auth",
            &[
                ("authorization", &format!("Bearer {token}")),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            format!("socket_id={socket_id}&channel_name={channel}").as_bytes(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let auth: Value = serde_json::from_slice(&r.body).unwrap();
        let mut data = json!({"channel": channel, "auth": auth["auth"]});
        if let Some(cd) = auth.get("channel_data") {
            data["channel_data"] = cd.clone();
        }
        agent
            .send(json!({"event": "pusher:subscribe", "data": data}))
            .await;
        loop {
            let frame = agent.recv().await;
            if frame["event"] == "pusher_internal:subscription_succeeded" {
                agent.joined = serde_json::from_str(frame["data"].as_str().unwrap()).unwrap();
                return agent;
            }
            assert_ne!(frame["event"], "pusher:error", "{frame}");
        }
    }

    async fn send(&mut self, frame: Value) {
        self.ws
            .send(Message::text(frame.to_string()))
            .await
            .unwrap();
    }

    /// The next text frame, parsed (a server ping answered on the way).
    async fn recv(&mut self) -> Value {
        self.recv_within(SOON).await.expect("a frame in time")
    }

    async fn recv_within(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let message = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .ok()?;
            match message {
                Some(Ok(Message::Text(text))) => {
                    let frame: Value = serde_json::from_str(text.as_str()).unwrap();
                    if frame["event"] == "pusher:ping" {
                        self.send(json!({"event": "pusher:pong", "data": {}})).await;
                        continue;
                    }
                    return Some(frame);
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return None,
            }
        }
    }

    /// Whispers a JSON-RPC frame (`client-mcp`, Echo's `whisper("mcp", …)`).
    async fn whisper(&mut self, frame: Value) {
        let channel = self.channel.clone();
        self.send(json!({"event": "client-mcp", "channel": channel, "data": frame}))
            .await;
    }

    /// The next whisper's `data`.
    async fn next_whisper(&mut self) -> Value {
        loop {
            let frame = self.recv().await;
            if frame["event"] == "client-mcp" {
                assert_eq!(frame["channel"], self.channel.as_str());
                assert!(frame["data"].is_object(), "{frame}");
                return frame["data"].clone();
            }
        }
    }

    /// Sends a request and waits for the whisper that answers its id
    /// (others' whispers skipped).
    async fn call(&mut self, id: &str, method: &str, params: Value) -> Value {
        self.whisper(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let data = self.next_whisper().await;
            if data["id"] == id && data.get("method").is_none() {
                return data;
            }
        }
    }

    /// Every frame heard within `wait`.
    async fn heard_within(&mut self, wait: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut frames = Vec::new();
        while let Some(frame) = self
            .recv_within(deadline - tokio::time::Instant::now())
            .await
        {
            frames.push(frame);
        }
        frames
    }
}

async fn bridge_for(channel: &str) -> AuthBridgeHandle {
    AuthBridge::builder(KEY, SECRET)
        .grant_as(PAGE, channel, "page")
        .grant_as(AGENT, channel, "agent-1")
        .grant_as(AGENT_2, channel, "agent-2")
        .start()
        .await
        .unwrap()
}

fn tool_call(name: &str, arguments: Value, pin: Option<&str>) -> Value {
    let mut params = json!({"name": name, "arguments": arguments});
    if let Some(pin) = pin {
        params["_meta"] = json!({"revision": pin});
    }
    params
}

#[tokio::test]
async fn the_page_answers_whispers_on_a_private_channel() {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = bridge_for(CH).await;
    let page = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE)
        .start()
        .await
        .unwrap();
    assert_eq!(page.channel_name(), Some(CH));
    assert!(page.is_joined());
    assert_eq!(page.joins(), 1);
    assert_eq!(server.subscribers(CH), 1);
    // The token went to the bridge only; the page named itself in the URL.
    let paths = server.seen_paths();
    assert_eq!(paths.len(), 1);
    assert!(paths[0].starts_with(&format!(
        "/app/{KEY}?protocol=7&client=human-plus-demo-page&version="
    )));
    assert!(paths.iter().all(|p| !p.contains(PAGE)));
    assert_eq!(bridge.signed(), 1);

    let mut agent = Agent::join(&server, &bridge, AGENT, CH).await;
    let init = agent
        .call("a-1", "initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "agent", "version": "1"}}))
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        init["result"]["serverInfo"]["name"],
        "human-plus-demo-sheet"
    );
    agent
        .whisper(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    let list = agent.call("a-2", "tools/list", json!({})).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"sheet_set_cell") && names.contains(&"changes_since"),
        "{names:?}"
    );
    assert_eq!(list["result"]["tools"], json!(page.tool_definitions()));

    // A read, then a write pinned to what the read returned.
    let read = agent
        .call(
            "a-3",
            "tools/call",
            tool_call("sheet_get_cell", json!({"address": "B4"}), None),
        )
        .await;
    assert_eq!(read["result"]["_meta"]["revision"], "r1");
    let write = agent
        .call(
            "a-4",
            "tools/call",
            tool_call(
                "sheet_set_cell",
                json!({"address": "B4", "value": "9"}),
                Some("r1"),
            ),
        )
        .await;
    assert_eq!(write["result"]["_meta"]["revision"], "r2");
    assert_eq!(page.cell("B4").as_deref(), Some("9"));

    // The person edits: the activity goes out as a whisper to the agent.
    let revision = page.person().edit_cell("B4", "12").await.unwrap();
    assert_eq!(revision, "r3");
    let activity = agent.next_whisper().await;
    assert_eq!(activity["method"], "notifications/agent_activity");
    assert_eq!(activity["params"]["source"], "user");
    assert_eq!(activity["params"]["target"]["elementId"], "B4");

    // A write pinned to r2 is stale: refused with the 409 data, nothing applied.
    let stale = agent
        .call(
            "a-5",
            "tools/call",
            tool_call(
                "sheet_set_cell",
                json!({"address": "B4", "value": "99"}),
                Some("r2"),
            ),
        )
        .await;
    assert_eq!(stale["error"]["code"], 409);
    assert_eq!(stale["error"]["data"]["code"], "revision_mismatch");
    assert_eq!(stale["error"]["data"]["current"], "r3");
    assert_eq!(stale["error"]["data"]["pinned"], "r2");
    assert_eq!(page.cell("B4").as_deref(), Some("12"));

    // The feed says who changed what since r2, though the pin is stale.
    let feed = agent
        .call(
            "a-6",
            "tools/call",
            tool_call("changes_since", json!({"since": "r2"}), Some("r2")),
        )
        .await;
    let rows = feed["result"]["_meta"]["changes"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["handle"], "B4");
    assert_eq!(rows[0]["actor_type"], "human");
    assert_eq!(rows[0]["revision"], "r3");
    assert_eq!(feed["result"]["_meta"]["complete"], true);

    // An agent's activity announcement is recorded as on the HTTP legs.
    let announced = json!({"agentId": "agent-1", "action": "editing", "target": {"kind": "cell", "elementId": "B4"}});
    agent
        .whisper(json!({"jsonrpc": "2.0", "method": "notifications/human-plus/activity", "params": announced}))
        .await;
    assert!(
        page.wait_for(SOON, |p| p.activity() == vec![announced.clone()])
            .await
    );

    // A redefined tool is announced with a whisper.
    page.redefine_tool("sheet_describe", "Describe it differently.")
        .await
        .unwrap();
    let changed = agent.next_whisper().await;
    assert_eq!(
        changed,
        json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    );

    // Everything recorded as for the HTTP legs.
    assert_eq!(page.requests("initialize"), 1);
    assert_eq!(page.requests("tools/list"), 1);
    assert_eq!(page.requests("tools/call"), 4);
    let outcomes: Vec<CallOutcome> = page.calls().into_iter().map(|c| c.outcome).collect();
    assert_eq!(
        outcomes,
        vec![
            CallOutcome::Read,
            CallOutcome::Written,
            CallOutcome::Refused {
                current: "r3".into()
            },
            CallOutcome::Read,
        ]
    );
    assert!(
        page.notifications()
            .iter()
            .any(|n| n.method == "notifications/initialized")
    );
    // A private channel says nothing of who is present.
    assert!(page.peers().is_empty());
    assert!(page.channel_errors().is_empty());
    assert!(page.channel_closes().is_empty());

    page.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_second_subscriber_sees_the_requests_and_the_replies() {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = bridge_for(CH).await;
    let page = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE)
        .start()
        .await
        .unwrap();
    let mut first = Agent::join(&server, &bridge, AGENT, CH).await;
    let mut second = Agent::join(&server, &bridge, AGENT_2, CH).await;
    let reply = first
        .call(
            "first-1",
            "tools/call",
            tool_call("sheet_describe", json!({}), None),
        )
        .await;
    assert_eq!(reply["result"]["_meta"]["revision"], "r1");
    // The second agent saw the first's request, then the page's reply.
    let request = second.next_whisper().await;
    assert_eq!(request["id"], "first-1");
    assert_eq!(request["method"], "tools/call");
    let seen = second.next_whisper().await;
    assert_eq!(seen, reply);
    // The page answered once.
    assert_eq!(page.requests("tools/call"), 1);
    page.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn after_leave_nothing_answers() {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = bridge_for(CH).await;
    let page = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE)
        .start()
        .await
        .unwrap();
    let mut agent = Agent::join(&server, &bridge, AGENT, CH).await;
    let reply = agent.call("a-1", "ping", json!({})).await;
    assert_eq!(reply["result"], json!({}));

    page.leave().await;
    assert_eq!(page.ended().as_deref(), Some("left"));
    assert!(!page.is_joined());
    // A closed tab: the server has the agent alone, and the agent is told
    // nothing on a private channel.
    let deadline = tokio::time::Instant::now() + SOON;
    while server.subscribers(CH) != 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.subscribers(CH), 1);
    agent
        .whisper(json!({"jsonrpc": "2.0", "id": "a-2", "method": "tools/list"}))
        .await;
    let heard = agent.heard_within(QUIET).await;
    assert!(heard.is_empty(), "{heard:?}");
    assert_eq!(page.requests("tools/list"), 0);
    // It stays gone (no reconnection), and says so to what it would send.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.connections(), 1);
    assert!(matches!(
        page.notify("notifications/message", json!({})).await,
        Err(SurfaceError::NotJoined)
    ));
    page.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_presence_channel_reports_the_page_and_the_agents() {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = bridge_for(PRESENCE).await;
    let page = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE)
        .channel_name(PRESENCE)
        .start()
        .await
        .unwrap();
    assert_eq!(page.channel_name(), Some(PRESENCE));
    assert!(page.peers().is_empty());

    // The agent joins: it sees the page in the roster, the page sees it.
    let mut agent = Agent::join(&server, &bridge, AGENT, PRESENCE).await;
    assert_eq!(agent.joined["presence"]["ids"], json!(["agent-1", "page"]));
    assert!(
        page.wait_for(SOON, |p| p.peers() == vec!["agent-1".to_owned()])
            .await
    );
    let reply = agent.call("a-1", "tools/list", json!({})).await;
    assert!(reply["result"]["tools"].is_array());

    // A second agent comes and goes.
    let second = Agent::join(&server, &bridge, AGENT_2, PRESENCE).await;
    assert!(
        page.wait_for(SOON, |p| p.peers()
            == vec!["agent-1".to_owned(), "agent-2".to_owned()])
            .await
    );
    let added = agent.recv().await;
    assert_eq!(added["event"], "pusher_internal:member_added");
    drop(second);
    assert!(
        page.wait_for(SOON, |p| p.peers() == vec!["agent-1".to_owned()])
            .await
    );
    let removed = agent.recv().await;
    assert_eq!(removed["event"], "pusher_internal:member_removed");

    // The page leaves: the agent is told.
    page.leave().await;
    let left = agent.recv().await;
    assert_eq!(left["event"], "pusher_internal:member_removed");
    assert_eq!(left["channel"], PRESENCE);
    let data: Value = serde_json::from_str(left["data"].as_str().unwrap()).unwrap();
    assert_eq!(data["user_id"], "page");
    page.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_killed_page_is_reported_on_a_presence_channel_too() {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = bridge_for(PRESENCE).await;
    // The agent is there first: the page learns it from the roster its
    // subscription brings.
    let mut agent = Agent::join(&server, &bridge, AGENT, PRESENCE).await;
    let page = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE)
        .channel_name(PRESENCE)
        .start()
        .await
        .unwrap();
    assert_eq!(page.peers(), vec!["agent-1".to_owned()]);
    let added = agent.recv().await;
    assert_eq!(added["event"], "pusher_internal:member_added");
    // Dropped: the socket goes without a close frame, as a killed tab's.
    drop(page);
    let left = agent.recv().await;
    assert_eq!(left["event"], "pusher_internal:member_removed");
    let data: Value = serde_json::from_str(left["data"].as_str().unwrap()).unwrap();
    assert_eq!(data["user_id"], "page");
    bridge.shutdown().await;
    server.shutdown().await;
}

/// 40 extra tools make the listing over the 10,000 bytes a Reverb message
/// may be.
async fn large_listing_page(
    server: &PusherHandle,
    bridge: &AuthBridgeHandle,
    max_reply: Option<usize>,
) -> DemoSurface {
    let mut builder =
        DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE).extra_tools(40);
    if let Some(bytes) = max_reply {
        builder = builder.max_reply_bytes(bytes);
    }
    let page = builder.start().await.unwrap();
    let listing =
        json!({"jsonrpc": "2.0", "id": "a-1", "result": {"tools": page.tool_definitions()}});
    let message = json!({"event": "client-mcp", "channel": CH, "data": listing}).to_string();
    assert!(message.len() > 10_000, "{}", message.len());
    page
}

#[tokio::test]
async fn an_oversized_reply_closes_the_page_1009_and_it_comes_back() {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = bridge_for(CH).await;
    let page = large_listing_page(&server, &bridge, None).await;
    let mut agent = Agent::join(&server, &bridge, AGENT, CH).await;
    agent
        .whisper(json!({"jsonrpc": "2.0", "id": "a-1", "method": "tools/list"}))
        .await;
    // The server closed the page's connection (Reverb's 1009); the agent
    // heard nothing.
    assert!(page.wait_for(SOON, |p| p.joins() == 2).await);
    assert_eq!(
        page.channel_closes(),
        vec![PusherClosed::Server(PusherCloseCode::MessageTooBig)]
    );
    assert_eq!(page.requests("tools/list"), 1);
    let heard = agent.heard_within(QUIET).await;
    assert!(heard.is_empty(), "{heard:?}");
    // The page came back (a new socket, a new signature) and answers.
    assert_eq!(bridge.signed(), 3);
    let reply = agent
        .call(
            "a-2",
            "tools/call",
            tool_call("extra_tool_007", json!({}), None),
        )
        .await;
    assert_eq!(
        reply["result"]["content"][0]["text"],
        "extra_tool_007: nothing to report."
    );
    page.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_reply_over_the_pages_own_limit_is_dropped_there() {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = bridge_for(CH).await;
    let page = large_listing_page(&server, &bridge, Some(10_000)).await;
    let mut agent = Agent::join(&server, &bridge, AGENT, CH).await;
    agent
        .whisper(json!({"jsonrpc": "2.0", "id": "a-1", "method": "tools/list"}))
        .await;
    assert!(page.wait_for(SOON, |p| p.dropped_replies() == 1).await);
    let heard = agent.heard_within(QUIET).await;
    assert!(heard.is_empty(), "{heard:?}");
    // The connection stayed.
    assert_eq!(page.joins(), 1);
    assert!(page.channel_closes().is_empty());
    let reply = agent.call("a-2", "ping", json!({})).await;
    assert_eq!(reply["result"], json!({}));
    page.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_payload_cap_refuses_the_reply_to_the_page_only() {
    // sockudo's event payload cap, its errors as objects.
    let server = PusherServer::builder(KEY, SECRET)
        .max_message_size(1_000_000)
        .max_event_payload(10_000)
        .error_data(ErrorData::Object)
        .start()
        .await
        .unwrap();
    let bridge = bridge_for(CH).await;
    let page = large_listing_page(&server, &bridge, None).await;
    let mut agent = Agent::join(&server, &bridge, AGENT, CH).await;
    agent
        .whisper(json!({"jsonrpc": "2.0", "id": "a-1", "method": "tools/list"}))
        .await;
    assert!(
        page.wait_for(SOON, |p| !p.channel_errors().is_empty())
            .await
    );
    let errors = page.channel_errors();
    assert_eq!(
        errors[0].code,
        PusherErrorCode::ClientEvent(ClientEventRefusal::PayloadTooLarge),
        "{errors:?}"
    );
    let heard = agent.heard_within(QUIET).await;
    assert!(heard.is_empty(), "{heard:?}");
    assert_eq!(page.joins(), 1);
    page.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn the_page_joins_again_when_the_server_closes_it_and_not_after_4001() {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = bridge_for(CH).await;
    let page = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE)
        .start()
        .await
        .unwrap();
    // 4200: reconnect at once.
    server.close_all(4200, "Reconnect");
    assert!(
        page.wait_for(SOON, |p| p.joins() == 2 && p.is_joined())
            .await
    );
    assert_eq!(
        page.channel_closes(),
        vec![PusherClosed::Server(PusherCloseCode::Refresh(4200))]
    );
    let mut agent = Agent::join(&server, &bridge, AGENT, CH).await;
    let reply = agent.call("a-1", "ping", json!({})).await;
    assert_eq!(reply["result"], json!({}));
    // 1001 (a restart): after a back-off.
    server.close_all(1001, "Going away");
    assert!(
        page.wait_for(SOON, |p| p.joins() == 3 && p.is_joined())
            .await
    );
    // 4001: never again.
    server.close_all(4001, "Application does not exist");
    assert!(page.wait_for(SOON, |p| p.ended().is_some()).await);
    assert_eq!(page.ended().as_deref(), Some("closed"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(page.joins(), 3);
    assert_eq!(server.connections(), 0);
    page.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn the_page_keeps_its_connection_alive() {
    // A 1 s activity timeout and 1 s of grace: a page that neither pinged
    // nor answered the server's pings would be closed with 4201.
    let server = PusherServer::builder(KEY, SECRET)
        .activity_timeout(Duration::from_secs(1))
        .pong_grace(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let bridge = bridge_for(CH).await;
    let page = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE)
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert_eq!(page.joins(), 1);
    assert!(page.channel_closes().is_empty());
    let mut agent = Agent::join(&server, &bridge, AGENT, CH).await;
    let reply = agent.call("a-1", "ping", json!({})).await;
    assert_eq!(reply["result"], json!({}));
    page.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_refused_page_does_not_start() {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = bridge_for(CH).await;
    // A bearer the bridge does not know: 403.
    let err = DemoSurface::channel_builder(
        server.ws_url(),
        bridge.url(),
        "S1",
        "not-a-granted-token-01",
    )
    .start()
    .await
    .unwrap_err();
    assert!(
        matches!(err, SurfaceError::AuthBridge { status: 403 }),
        "{err:?}"
    );
    // A channel the page's bearer was not granted: 403 too.
    let err = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S2", PAGE)
        .start()
        .await
        .unwrap_err();
    assert!(
        matches!(err, SurfaceError::AuthBridge { status: 403 }),
        "{err:?}"
    );
    // A bridge signing with another secret: the server refuses (4009).
    let forger = AuthBridge::builder(KEY, "another-secret")
        .grant(PAGE, CH)
        .start()
        .await
        .unwrap();
    let err = DemoSurface::channel_builder(server.ws_url(), forger.url(), "S1", PAGE)
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, SurfaceError::Channel(_)), "{err:?}");
    assert!(err.to_string().contains("4009"), "{err}");
    // A URL that is not a channel server's.
    let err = DemoSurface::channel_builder("ws://127.0.0.1:1/nope", bridge.url(), "S1", PAGE)
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, SurfaceError::InvalidUrl(_)), "{err:?}");
    forger.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn the_page_paces_its_replies_to_the_servers_rate_limit() {
    // sockudo's client-event rate limit, at 4 per second per socket: two
    // agents send 4 requests each at once, so the page has 8 replies to
    // send.
    let server = PusherServer::builder(KEY, SECRET)
        .client_event_rate(4)
        .error_data(ErrorData::Object)
        .start()
        .await
        .unwrap();
    let bridge = bridge_for(CH).await;
    let paced = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE)
        .client_events_per_second(4)
        .start()
        .await
        .unwrap();
    let mut first = Agent::join(&server, &bridge, AGENT, CH).await;
    let mut second = Agent::join(&server, &bridge, AGENT_2, CH).await;
    let started = tokio::time::Instant::now();
    for n in 0..4 {
        first
            .whisper(json!({"jsonrpc": "2.0", "id": format!("p-{n}"), "method": "ping"}))
            .await;
        second
            .whisper(json!({"jsonrpc": "2.0", "id": format!("q-{n}"), "method": "ping"}))
            .await;
    }
    // The first agent hears the second's requests and every reply.
    let mut replies = 0;
    while replies < 8 {
        let frame = first.next_whisper().await;
        if frame.get("result").is_some() {
            replies += 1;
        }
    }
    // The second four waited for the window: none was refused.
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(
        paced.channel_errors().is_empty(),
        "{:?}",
        paced.channel_errors()
    );
    paced.leave().await;
    drop(second);

    // A page paced above the server's limit loses replies, as the server
    // says to it alone.
    let hasty = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE)
        .client_events_per_second(100)
        .start()
        .await
        .unwrap();
    let mut second = Agent::join(&server, &bridge, AGENT_2, CH).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    for n in 0..4 {
        first
            .whisper(json!({"jsonrpc": "2.0", "id": format!("h-{n}"), "method": "ping"}))
            .await;
        second
            .whisper(json!({"jsonrpc": "2.0", "id": format!("i-{n}"), "method": "ping"}))
            .await;
    }
    assert!(
        hasty
            .wait_for(SOON, |p| p.requests("ping") == 8
                && p.channel_errors().len() == 4)
            .await,
        "{:?}",
        hasty.channel_errors()
    );
    let replies = first
        .heard_within(QUIET)
        .await
        .into_iter()
        .filter(|f| f["event"] == "client-mcp" && f["data"].get("result").is_some())
        .count();
    assert_eq!(replies, 4);
    assert!(
        hasty
            .channel_errors()
            .iter()
            .all(|e| e.code == PusherErrorCode::ClientEvent(ClientEventRefusal::RateLimited))
    );
    hasty.shutdown().await;
    paced.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_rewrite_and_a_mute_page_work_on_the_channel_too() {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = bridge_for(CH).await;
    let page = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE)
        .rewrite(Rewrite::new(|method, _params, mut reply| {
            if method == "tools/list" {
                reply["result"]["tools"] = json!([]);
            }
            reply
        }))
        .start()
        .await
        .unwrap();
    let mut agent = Agent::join(&server, &bridge, AGENT, CH).await;
    let list = agent.call("a-1", "tools/list", json!({})).await;
    assert_eq!(list["result"]["tools"], json!([]));
    page.leave().await;

    // max_reply_bytes(0): a page that records every request and answers none.
    let mute = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", PAGE)
        .max_reply_bytes(0)
        .start()
        .await
        .unwrap();
    agent
        .whisper(json!({"jsonrpc": "2.0", "id": "a-2", "method": "tools/call", "params": tool_call("sheet_set_cell", json!({"address": "A1", "value": "x"}), Some("r1"))}))
        .await;
    assert!(mute.wait_for(SOON, |p| p.dropped_replies() == 1).await);
    assert_eq!(mute.writes().len(), 1);
    let heard = agent.heard_within(QUIET).await;
    assert!(heard.is_empty(), "{heard:?}");
    mute.shutdown().await;
    page.shutdown().await;
    bridge.shutdown().await;
    server.shutdown().await;
}

/// `wss://`: a TLS terminator in front of our server (which speaks plain
/// WebSocket), trusted through the builder's roots.
#[tokio::test]
async fn the_page_joins_over_wss() {
    use rustls_pki_types::PrivateKeyDer;
    use rustls_pki_types::pem::PemObject;

    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = bridge_for(CH).await;
    let (_, cert) = human_plus_relay::TlsConfig::generate().unwrap();
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem().as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert_der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let upstream = server.local_addr();
    let terminator = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    let page = DemoSurface::channel_builder(
        format!("wss://localhost:{port}/app/{KEY}"),
        bridge.url(),
        "S1",
        PAGE,
    )
    .tls_roots([cert.ca_der().clone()])
    .start()
    .await
    .unwrap();
    assert_eq!(server.subscribers(CH), 1);
    let mut agent = Agent::join(&server, &bridge, AGENT, CH).await;
    let reply = agent.call("a-1", "ping", json!({})).await;
    assert_eq!(reply["result"], json!({}));
    page.shutdown().await;
    terminator.abort();
    bridge.shutdown().await;
    server.shutdown().await;
}
