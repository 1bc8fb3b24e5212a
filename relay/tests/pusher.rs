//! The Pusher-protocol channel server and the auth bridge, over real
//! sockets: a tokio-tungstenite client speaks to `PusherServer`, and raw
//! HTTP to `AuthBridge`. Every frame is written here by hand from the
//! protocol (and the facts measured against Reverb and sockudo), not with
//! the server's own code.

mod common;

use std::time::Duration;

use human_plus_relay::{AuthBridge, AuthBridgeHandle, ErrorData, PusherHandle, PusherServer};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use futures_util::{SinkExt, StreamExt};

const KEY: &str = "app-key";
const SECRET: &str = "app-secret";
const TOKEN: &str = "0123456789abcdef0123";
const OTHER: &str = "fedcba9876543210fedc";
const CH: &str = "private-agent.session.S1";
const SOON: Duration = Duration::from_secs(10);

type Ws = WebSocketStream<TcpStream>;

async fn open(
    server: &PusherHandle,
    path: &str,
) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let stream = TcpStream::connect(server.local_addr()).await.unwrap();
    let url = format!("ws://{}{path}", server.local_addr());
    // The client reads anything; the server's limit is what is tested.
    let config = WebSocketConfig::default()
        .max_message_size(None)
        .max_frame_size(None);
    tokio_tungstenite::client_async_with_config(url, stream, Some(config))
        .await
        .map(|(ws, _)| ws)
}

async fn connect(server: &PusherHandle) -> (Ws, String) {
    let mut ws = open(
        server,
        &format!("/app/{KEY}?protocol=7&client=test&version=1"),
    )
    .await
    .unwrap();
    let hello = recv(&mut ws).await;
    assert_eq!(hello["event"], "pusher:connection_established");
    // `data` is a JSON string holding the object.
    let data: Value = serde_json::from_str(hello["data"].as_str().unwrap()).unwrap();
    let socket_id = data["socket_id"].as_str().unwrap().to_owned();
    let (a, b) = socket_id.split_once('.').unwrap();
    assert!(a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit()));
    assert_eq!(data["activity_timeout"], 30);
    (ws, socket_id)
}

/// The next text frame, parsed.
async fn recv(ws: &mut Ws) -> Value {
    loop {
        let message = tokio::time::timeout(SOON, ws.next())
            .await
            .expect("a frame in time")
            .expect("the stream is open")
            .expect("a message");
        match message {
            Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("expected text, got {other:?}"),
        }
    }
}

/// The close code the server sent (`None`: it dropped the connection).
async fn closed(ws: &mut Ws) -> Option<u16> {
    loop {
        match tokio::time::timeout(SOON, ws.next())
            .await
            .expect("a close in time")
        {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return None,
        }
    }
}

/// Nothing arrives for a while.
async fn silent(ws: &mut Ws) {
    if let Ok(Some(Ok(Message::Text(t)))) =
        tokio::time::timeout(Duration::from_millis(300), ws.next()).await
    {
        panic!("unexpected frame {t}");
    }
}

async fn send(ws: &mut Ws, frame: Value) {
    ws.send(Message::text(frame.to_string())).await.unwrap();
}

async fn ask_bridge(bridge: &AuthBridgeHandle, bearer: Option<&str>, body: &str) -> (u16, Value) {
    let auth = bearer.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", "application/x-www-form-urlencoded")];
    if let Some(a) = &auth {
        headers.push(("authorization", a.as_str()));
    }
    let r = common::request(
        bridge.local_addr(),
        "POST",
        "/broadcasting/auth",
        &headers,
        body.as_bytes(),
    )
    .await;
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

async fn signed(bridge: &AuthBridgeHandle, socket_id: &str, channel: &str) -> Value {
    let (status, body) = ask_bridge(
        bridge,
        Some(TOKEN),
        &format!("socket_id={socket_id}&channel_name={channel}"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn join(server: &PusherHandle, bridge: &AuthBridgeHandle, channel: &str) -> (Ws, String) {
    let (mut ws, sid) = connect(server).await;
    let answer = signed(bridge, &sid, channel).await;
    let mut data = json!({"channel": channel, "auth": answer["auth"]});
    if let Some(cd) = answer.get("channel_data") {
        data["channel_data"] = cd.clone();
    }
    send(&mut ws, json!({"event": "pusher:subscribe", "data": data})).await;
    let ok = recv(&mut ws).await;
    assert_eq!(
        ok["event"], "pusher_internal:subscription_succeeded",
        "{ok}"
    );
    assert_eq!(ok["channel"], channel);
    (ws, sid)
}

async fn start() -> (PusherHandle, AuthBridgeHandle) {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = AuthBridge::builder(KEY, SECRET)
        .grant(TOKEN, CH)
        .grant_as(TOKEN, "presence-agent.session.S1", "agent-1")
        .grant_as(OTHER, "presence-agent.session.S1", "page")
        .grant(OTHER, CH)
        .start()
        .await
        .unwrap();
    (server, bridge)
}

fn error_of(frame: &Value) -> (u64, String) {
    assert_eq!(frame["event"], "pusher:error", "{frame}");
    let data = match &frame["data"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        other => other.clone(),
    };
    (
        data["code"].as_u64().unwrap(),
        data["message"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn established_ping_pong_and_the_paths_seen() {
    let (server, bridge) = start().await;
    let (mut ws, _) = connect(&server).await;
    send(&mut ws, json!({"event": "pusher:ping", "data": {}})).await;
    assert_eq!(recv(&mut ws).await["event"], "pusher:pong");
    assert_eq!(server.connections(), 1);
    assert_eq!(
        server.seen_paths(),
        [format!("/app/{KEY}?protocol=7&client=test&version=1")]
    );
    // Another path is not a WebSocket; another key is told and closed.
    assert!(open(&server, "/other").await.is_err());
    let mut wrong = open(&server, "/app/nope").await.unwrap();
    assert_eq!(error_of(&recv(&mut wrong).await).0, 4001);
    assert_eq!(closed(&mut wrong).await, Some(4001));
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn the_bridge_signs_only_for_its_bearers_and_their_channels() {
    let (server, bridge) = start().await;
    let body = format!("socket_id=1.2&channel_name={CH}");
    let (status, answer) = ask_bridge(&bridge, Some(TOKEN), &body).await;
    assert_eq!(status, 200);
    let auth = answer["auth"].as_str().unwrap();
    let (key, sig) = auth.split_once(':').unwrap();
    assert_eq!(key, KEY);
    assert_eq!(sig.len(), 64);
    // JSON bodies work too (Laravel reads either).
    let (status, json_answer) = ask_bridge(
        &bridge,
        Some(TOKEN),
        &json!({"socket_id": "1.2", "channel_name": CH}).to_string(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(json_answer["auth"], answer["auth"]);
    // A wrong bearer, none, another channel: 403 with Laravel's body.
    for (bearer, body) in [
        (Some("wrong-token-0123456789"), body.clone()),
        (None, body.clone()),
        (
            Some(TOKEN),
            "socket_id=1.2&channel_name=private-agent.session.S2".to_owned(),
        ),
    ] {
        let (status, answer) = ask_bridge(&bridge, bearer, &body).await;
        assert_eq!(status, 403, "{bearer:?} {body}");
        assert_eq!(answer, json!({"message": "This action is unauthorized."}));
    }
    // Presence: channel_data with the grant's user id.
    let (_, presence) = ask_bridge(
        &bridge,
        Some(TOKEN),
        "socket_id=1.2&channel_name=presence-agent.session.S1",
    )
    .await;
    assert_eq!(presence["channel_data"], r#"{"user_id":"agent-1"}"#);
    assert_eq!(bridge.requests(), 6);
    assert_eq!(bridge.signed(), 3);
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn a_forged_signature_is_4009_and_the_connection_stays() {
    let (server, bridge) = start().await;
    let (mut ws, sid) = connect(&server).await;
    for auth in [
        Value::String(format!("{KEY}:{}", "ab".repeat(32))),
        Value::String("other-key:00".into()),
        Value::Null,
    ] {
        send(
            &mut ws,
            json!({"event": "pusher:subscribe", "data": {"channel": CH, "auth": auth}}),
        )
        .await;
        let (code, _) = error_of(&recv(&mut ws).await);
        assert_eq!(code, 4009);
    }
    // A signature for another socket is forged too.
    let theirs = signed(&bridge, "9.9", CH).await;
    send(
        &mut ws,
        json!({"event": "pusher:subscribe", "data": {"channel": CH, "auth": theirs["auth"]}}),
    )
    .await;
    assert_eq!(error_of(&recv(&mut ws).await).0, 4009);
    assert_eq!(server.subscribers(CH), 0);
    // Still connected: the right signature subscribes.
    let mine = signed(&bridge, &sid, CH).await;
    send(
        &mut ws,
        json!({"event": "pusher:subscribe", "data": {"channel": CH, "auth": mine["auth"]}}),
    )
    .await;
    assert_eq!(
        recv(&mut ws).await["event"],
        "pusher_internal:subscription_succeeded"
    );
    assert_eq!(server.subscribers(CH), 1);
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn whispers_reach_every_other_subscriber_never_the_sender() {
    let (server, bridge) = start().await;
    let (mut page, _) = join(&server, &bridge, CH).await;
    let (mut agent, _) = join(&server, &bridge, CH).await;
    let (mut second, _) = join(&server, &bridge, CH).await;
    let request = json!({"jsonrpc": "2.0", "id": "a-1", "method": "tools/list"});
    send(
        &mut agent,
        json!({"event": "client-mcp", "channel": CH, "data": request}),
    )
    .await;
    for ws in [&mut page, &mut second] {
        let got = recv(ws).await;
        assert_eq!(got["event"], "client-mcp");
        assert_eq!(got["channel"], CH);
        assert!(got["data"].is_object());
        assert_eq!(got["data"], request);
    }
    silent(&mut agent).await;
    // The page's reply reaches both agents: the second sees it too.
    let reply = json!({"jsonrpc": "2.0", "id": "a-1", "result": {"tools": []}});
    send(
        &mut page,
        json!({"event": "client-mcp", "channel": CH, "data": reply}),
    )
    .await;
    assert_eq!(recv(&mut agent).await["data"], reply);
    assert_eq!(recv(&mut second).await["data"], reply);
    silent(&mut page).await;
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn client_events_need_membership_and_an_object() {
    let (server, bridge) = start().await;
    let (mut outsider, _) = connect(&server).await;
    let (mut member, _) = join(&server, &bridge, CH).await;
    send(
        &mut outsider,
        json!({"event": "client-mcp", "channel": CH, "data": {"id": 1}}),
    )
    .await;
    let (code, message) = error_of(&recv(&mut outsider).await);
    assert_eq!(code, 4009);
    assert!(message.contains("not a member"));
    send(
        &mut member,
        json!({"event": "client-mcp", "channel": CH, "data": "not an object"}),
    )
    .await;
    assert_eq!(
        error_of(&recv(&mut member).await),
        (4200, "Invalid message format".into())
    );
    member.send(Message::text("not json")).await.unwrap();
    assert_eq!(error_of(&recv(&mut member).await).0, 4200);
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn a_message_over_the_limit_closes_1009() {
    let (server, bridge) = start().await;
    let (mut page, _) = join(&server, &bridge, CH).await;
    let (mut agent, _) = join(&server, &bridge, CH).await;
    // Exactly 10,000 bytes passes.
    let envelope = json!({"event": "client-mcp", "channel": CH, "data": {"p": ""}}).to_string();
    let pad = "x".repeat(10_000 - envelope.len());
    let fits = json!({"event": "client-mcp", "channel": CH, "data": {"p": pad}}).to_string();
    assert_eq!(fits.len(), 10_000);
    agent.send(Message::text(fits)).await.unwrap();
    assert_eq!(
        recv(&mut page).await["data"]["p"].as_str().unwrap().len(),
        pad.len()
    );
    // One more byte: Reverb's close.
    let over =
        json!({"event": "client-mcp", "channel": CH, "data": {"p": format!("{pad}x")}}).to_string();
    agent.send(Message::text(over)).await.unwrap();
    assert_eq!(closed(&mut agent).await, Some(1009));
    silent(&mut page).await;
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn sockudo_limits_and_error_objects() {
    let server = PusherServer::builder(KEY, SECRET)
        .error_data(ErrorData::Object)
        .client_event_rate(3)
        .max_event_payload(100)
        .start()
        .await
        .unwrap();
    let bridge = AuthBridge::builder(KEY, SECRET)
        .grant(TOKEN, CH)
        .start()
        .await
        .unwrap();
    let (mut page, _) = join(&server, &bridge, CH).await;
    let (mut agent, _) = join(&server, &bridge, CH).await;
    let big = json!({"event": "client-mcp", "channel": CH, "data": {"p": "y".repeat(200)}});
    send(&mut agent, big).await;
    let frame = recv(&mut agent).await;
    assert!(frame["data"].is_object(), "sockudo writes an object");
    let (code, message) = error_of(&frame);
    assert_eq!(code, 4301);
    assert!(message.contains("exceeds limit"), "{message}");
    silent(&mut page).await;
    for i in 0..4 {
        send(
            &mut agent,
            json!({"event": "client-mcp", "channel": CH, "data": {"n": i}}),
        )
        .await;
    }
    for i in 0..3 {
        assert_eq!(recv(&mut page).await["data"]["n"], i);
    }
    let (code, message) = error_of(&recv(&mut agent).await);
    assert_eq!(code, 4301);
    assert!(message.contains("rate limit"));
    silent(&mut page).await;
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn presence_reports_members_joining_and_leaving() {
    let (server, bridge) = start().await;
    let p = "presence-agent.session.S1";
    let (mut agent, _) = join(&server, &bridge, p).await;
    // The page joins with the other token (user "page").
    let (mut page, sid) = connect(&server).await;
    let (status, answer) = ask_bridge(
        &bridge,
        Some(OTHER),
        &format!("socket_id={sid}&channel_name={p}"),
    )
    .await;
    assert_eq!(status, 200);
    send(
        &mut page,
        json!({"event": "pusher:subscribe", "data": {"channel": p, "auth": answer["auth"], "channel_data": answer["channel_data"]}}),
    )
    .await;
    let ok = recv(&mut page).await;
    let roster: Value = serde_json::from_str(ok["data"].as_str().unwrap()).unwrap();
    assert_eq!(roster["presence"]["count"], 2);
    let added = recv(&mut agent).await;
    assert_eq!(added["event"], "pusher_internal:member_added");
    let data: Value = serde_json::from_str(added["data"].as_str().unwrap()).unwrap();
    assert_eq!(data["user_id"], "page");
    // A presence whisper carries the sender's user id.
    send(
        &mut page,
        json!({"event": "client-mcp", "channel": p, "data": {"id": "x"}}),
    )
    .await;
    assert_eq!(recv(&mut agent).await["user_id"], "page");
    // The page is killed (no close frame): the agent is told.
    drop(page);
    let removed = recv(&mut agent).await;
    assert_eq!(removed["event"], "pusher_internal:member_removed");
    let data: Value = serde_json::from_str(removed["data"].as_str().unwrap()).unwrap();
    assert_eq!(data["user_id"], "page");
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn a_private_channel_says_nothing_when_the_page_leaves() {
    let (server, bridge) = start().await;
    let (page, _) = join(&server, &bridge, CH).await;
    let (mut agent, _) = join(&server, &bridge, CH).await;
    drop(page);
    assert!(common::eventually(|| server.subscribers(CH) == 1).await);
    silent(&mut agent).await;
    send(
        &mut agent,
        json!({"event": "client-mcp", "channel": CH, "data": {"id": "a-2", "method": "tools/list"}}),
    )
    .await;
    // Accepted, answered by nobody.
    silent(&mut agent).await;
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn the_server_pings_a_silent_client_and_closes_4201() {
    let server = PusherServer::builder(KEY, SECRET)
        .activity_timeout(Duration::from_millis(1200))
        .pong_grace(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let mut ws = open(&server, &format!("/app/{KEY}")).await.unwrap();
    assert_eq!(
        recv(&mut ws).await["event"],
        "pusher:connection_established"
    );
    assert_eq!(recv(&mut ws).await["event"], "pusher:ping");
    assert_eq!(closed(&mut ws).await, Some(4201));
    // Answering keeps it open.
    let mut alive = open(&server, &format!("/app/{KEY}")).await.unwrap();
    recv(&mut alive).await;
    assert_eq!(recv(&mut alive).await["event"], "pusher:ping");
    send(&mut alive, json!({"event": "pusher:pong", "data": {}})).await;
    assert_eq!(recv(&mut alive).await["event"], "pusher:ping");
    server.shutdown().await;
}

#[tokio::test]
async fn close_all_and_shutdown() {
    let (server, bridge) = start().await;
    let (mut ws, _) = join(&server, &bridge, CH).await;
    server.close_all(4200, "Reconnect");
    assert_eq!(closed(&mut ws).await, Some(4200));
    assert!(common::eventually(|| server.connections() == 0).await);
    let (mut ws, _) = connect(&server).await;
    server.shutdown().await;
    assert_eq!(closed(&mut ws).await, Some(1001));
    bridge.shutdown().await;
}
