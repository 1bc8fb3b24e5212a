//! The core's sans-IO Pusher machine (`PusherChannel`) driven over a real
//! WebSocket (tokio-tungstenite) against the project's own channel server
//! and auth bridge: what a runtime's driver will do, in miniature. The
//! page is a raw WebSocket client here.

mod common;

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use human_plus_core::{
    ChannelAuth, Correlation, PusherChannel, PusherCloseCode, PusherClosed, PusherConfig,
    PusherError, PusherErrorCode, PusherEvent, PusherState,
};
use human_plus_relay::{AuthBridge, AuthBridgeHandle, PusherHandle, PusherServer};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

const KEY: &str = "app-key";
const SECRET: &str = "app-secret";
const TOKEN: &str = "0123456789abcdef0123";
const CH: &str = "private-agent.session.S1";
const SOON: Duration = Duration::from_secs(10);

type Ws = WebSocketStream<TcpStream>;

async fn open(server: &PusherHandle) -> Ws {
    let stream = TcpStream::connect(server.local_addr()).await.unwrap();
    let url = format!("ws://{}/app/{KEY}?protocol=7", server.local_addr());
    tokio_tungstenite::client_async(url, stream)
        .await
        .unwrap()
        .0
}

/// A runtime's work in miniature: writes what the machine transmits, feeds
/// it what arrives, answers `AuthNeeded` with the bridge, until `until`
/// says an event is the one awaited. Returns that event.
async fn drive(
    ch: &mut PusherChannel,
    ws: &mut Ws,
    bridge: &AuthBridgeHandle,
    bearer: &str,
    until: impl Fn(&PusherEvent) -> bool,
) -> PusherEvent {
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        while let Some(text) = ch.poll_transmit(Instant::now()) {
            ws.send(Message::text(text)).await.unwrap();
        }
        if let Some(event) = ch.poll_event() {
            if let PusherEvent::AuthNeeded(request) = &event {
                let auth = format!("Bearer {bearer}");
                let r = common::request(
                    bridge.local_addr(),
                    "POST",
                    "/broadcasting/auth",
                    &[
                        ("authorization", auth.as_str()),
                        ("content-type", "application/x-www-form-urlencoded"),
                    ],
                    request.form_body().as_bytes(),
                )
                .await;
                if r.status == 200 {
                    let auth = ChannelAuth::from_response(&r.body).unwrap();
                    ch.authorize(auth, Instant::now()).unwrap();
                    continue;
                }
                return event;
            }
            if until(&event) {
                return event;
            }
            continue;
        }
        let message = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("the awaited event in time");
        match message {
            Some(Ok(Message::Text(text))) => ch.handle_text(text.as_str(), Instant::now()),
            Some(Ok(Message::Close(frame))) => ch.handle_close(frame.map(|f| u16::from(f.code))),
            Some(Ok(_)) => {}
            Some(Err(_)) | None => ch.handle_close(None),
        }
    }
}

async fn recv(ws: &mut Ws) -> Value {
    loop {
        let message = tokio::time::timeout(SOON, ws.next()).await.unwrap();
        if let Message::Text(t) = message.unwrap().unwrap() {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

/// The page: a raw client joined with the bridge's signature.
async fn page(server: &PusherHandle, bridge: &AuthBridgeHandle) -> Ws {
    let mut ws = open(server).await;
    let hello = recv(&mut ws).await;
    let data: Value = serde_json::from_str(hello["data"].as_str().unwrap()).unwrap();
    let sid = data["socket_id"].as_str().unwrap().to_owned();
    let r = common::request(
        bridge.local_addr(),
        "POST",
        "/broadcasting/auth",
        &[("authorization", &format!("Bearer {TOKEN}"))],
        format!("socket_id={sid}&channel_name={CH}").as_bytes(),
    )
    .await;
    let auth: Value = serde_json::from_slice(&r.body).unwrap();
    ws.send(Message::text(
        json!({"event": "pusher:subscribe", "data": {"channel": CH, "auth": auth["auth"]}})
            .to_string(),
    ))
    .await
    .unwrap();
    assert_eq!(
        recv(&mut ws).await["event"],
        "pusher_internal:subscription_succeeded"
    );
    ws
}

async fn start() -> (PusherHandle, AuthBridgeHandle) {
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = AuthBridge::builder(KEY, SECRET)
        .grant(TOKEN, CH)
        .start()
        .await
        .unwrap();
    (server, bridge)
}

async fn joined(server: &PusherHandle, bridge: &AuthBridgeHandle) -> (PusherChannel, Ws) {
    let mut ws = open(server).await;
    let mut ch = PusherChannel::new(KEY, CH, PusherConfig::default(), Instant::now()).unwrap();
    let event = drive(&mut ch, &mut ws, bridge, TOKEN, |e| {
        matches!(e, PusherEvent::Subscribed)
    })
    .await;
    assert_eq!(event, PusherEvent::Subscribed);
    assert_eq!(ch.state(), PusherState::Subscribed);
    (ch, ws)
}

async fn flush(ch: &mut PusherChannel, ws: &mut Ws) {
    while let Some(text) = ch.poll_transmit(Instant::now()) {
        ws.send(Message::text(text)).await.unwrap();
    }
}

fn is_whisper(e: &PusherEvent) -> bool {
    matches!(e, PusherEvent::Whisper(_))
}

#[tokio::test]
async fn the_core_machine_joins_and_takes_only_its_own_replies() {
    let (server, bridge) = start().await;
    let mut page = page(&server, &bridge).await;
    let (mut ch, mut ws) = joined(&server, &bridge).await;
    assert!(ch.socket_id().is_some());

    let request = r#"{"jsonrpc":"2.0","id":"mine-1","method":"tools/list"}"#;
    ch.send_whisper(request).unwrap();
    flush(&mut ch, &mut ws).await;
    let got = recv(&mut page).await;
    assert_eq!(got["event"], "client-mcp");
    assert_eq!(got["data"], serde_json::from_str::<Value>(request).unwrap());

    // Another agent's request and its reply, then ours: only ours is a reply.
    for data in [
        json!({"jsonrpc": "2.0", "id": "theirs-1", "method": "tools/call"}),
        json!({"jsonrpc": "2.0", "id": "theirs-1", "result": {"content": []}}),
        json!({"jsonrpc": "2.0", "id": "mine-1", "result": {"tools": []}}),
    ] {
        page.send(Message::text(
            json!({"event": "client-mcp", "channel": CH, "data": data}).to_string(),
        ))
        .await
        .unwrap();
    }
    let mut verdicts = Vec::new();
    for _ in 0..3 {
        let PusherEvent::Whisper(w) = drive(&mut ch, &mut ws, &bridge, TOKEN, is_whisper).await
        else {
            unreachable!()
        };
        verdicts.push(matches!(w.reply_to("mine-1"), Correlation::Reply(_)));
    }
    assert_eq!(verdicts, [false, false, true]);
    assert_eq!(
        server
            .seen_paths()
            .iter()
            .filter(|p| p.contains(TOKEN))
            .count(),
        0
    );
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn a_wrong_bearer_and_a_forged_signature_are_their_own_errors() {
    let (server, bridge) = start().await;
    // A wrong bearer: the bridge answers 403; the machine still waits for
    // an auth (the runtime reports the 403).
    let mut ws = open(&server).await;
    let mut ch = PusherChannel::new(KEY, CH, PusherConfig::default(), Instant::now()).unwrap();
    let event = drive(&mut ch, &mut ws, &bridge, "wrong-bearer-0123456789", |_| {
        false
    })
    .await;
    assert!(matches!(event, PusherEvent::AuthNeeded(_)));
    assert_eq!(ch.state(), PusherState::AwaitingAuth);
    // A forged signature: the server's 4009, typed.
    ch.authorize(
        ChannelAuth::new(&format!("{KEY}:{}", "ab".repeat(32)), None).unwrap(),
        Instant::now(),
    )
    .unwrap();
    let event = drive(&mut ch, &mut ws, &bridge, TOKEN, |e| {
        matches!(e, PusherEvent::SubscriptionRefused(_))
    })
    .await;
    let PusherEvent::SubscriptionRefused(e) = event else {
        unreachable!()
    };
    assert_eq!(e.code, PusherErrorCode::Unauthorized);
    assert_eq!(ch.state(), PusherState::Refused);
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn the_core_and_the_server_measure_the_limit_alike() {
    let (server, bridge) = start().await;
    let mut page = page(&server, &bridge).await;
    let (mut ch, mut ws) = joined(&server, &bridge).await;
    // The largest whisper the core allows is one the server relays.
    let empty = ch.whisper_size(r#"{"p":""}"#);
    let fits = format!(r#"{{"p":"{}"}}"#, "x".repeat(10_000 - empty));
    assert_eq!(ch.whisper_size(&fits), 10_000);
    ch.send_whisper(&fits).unwrap();
    flush(&mut ch, &mut ws).await;
    assert_eq!(
        recv(&mut page).await["data"]["p"].as_str().unwrap().len(),
        10_000 - empty
    );
    // One byte more is refused here, naming the limit, and never sent.
    let over = format!(r#"{{"p":"{}"}}"#, "x".repeat(10_001 - empty));
    let err = ch.send_whisper(&over).unwrap_err();
    assert_eq!(
        err,
        PusherError::MessageTooLarge {
            size: 10_001,
            limit: 10_000
        }
    );
    assert!(err.to_string().contains("10000 bytes"));
    // Sent anyway (bypassing the core), the server closes 1009, typed.
    ws.send(Message::text(format!(
        r#"{{"event":"client-mcp","channel":"{CH}","data":{over}}}"#
    )))
    .await
    .unwrap();
    let event = drive(&mut ch, &mut ws, &bridge, TOKEN, |e| {
        matches!(e, PusherEvent::Closed(_))
    })
    .await;
    assert_eq!(
        event,
        PusherEvent::Closed(PusherClosed::Server(PusherCloseCode::MessageTooBig))
    );
    server.shutdown().await;
    bridge.shutdown().await;
}

#[tokio::test]
async fn on_a_presence_channel_the_machine_sees_the_page_leave() {
    let p = "presence-agent.session.S1";
    let page_token = "fedcba9876543210fedc";
    let server = PusherServer::builder(KEY, SECRET).start().await.unwrap();
    let bridge = AuthBridge::builder(KEY, SECRET)
        .grant_as(TOKEN, p, "agent-1")
        .grant_as(page_token, p, "page")
        .start()
        .await
        .unwrap();
    let mut ws = open(&server).await;
    let mut ch = PusherChannel::new(KEY, p, PusherConfig::default(), Instant::now()).unwrap();
    assert!(ch.is_presence());
    let event = drive(&mut ch, &mut ws, &bridge, TOKEN, |e| {
        matches!(e, PusherEvent::Subscribed)
    })
    .await;
    assert_eq!(event, PusherEvent::Subscribed);

    // The page joins as "page", then is killed (no close frame).
    let mut page = open(&server).await;
    let mut page_ch = PusherChannel::new(KEY, p, PusherConfig::default(), Instant::now()).unwrap();
    let event = drive(&mut page_ch, &mut page, &bridge, page_token, |e| {
        matches!(e, PusherEvent::Subscribed)
    })
    .await;
    assert_eq!(event, PusherEvent::Subscribed);
    let event = drive(&mut ch, &mut ws, &bridge, TOKEN, |e| {
        matches!(e, PusherEvent::MemberAdded(_))
    })
    .await;
    assert_eq!(event, PusherEvent::MemberAdded("page".into()));
    drop(page);
    let event = drive(&mut ch, &mut ws, &bridge, TOKEN, |e| {
        matches!(e, PusherEvent::MemberRemoved(_))
    })
    .await;
    assert_eq!(event, PusherEvent::MemberRemoved("page".into()));
    server.shutdown().await;
    bridge.shutdown().await;
}
