//! Fault injection, per server and per session.

mod common;

use std::time::{Duration, Instant};

use common::*;
use human_plus_relay::{DemoSurface, Faults, Leg, RelayServer};
use serde_json::json;

const NOTE: &str = r#"{"jsonrpc":"2.0","method":"note","params":{"n":1}}"#;

fn reply(id: u32) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": {"n": id}}).to_string()
}

async fn live(session: &str, faults: Faults) -> human_plus_relay::RelayHandle {
    let relay = RelayServer::builder().start().await.unwrap();
    relay.set_faults(session, faults);
    register(relay.addr(), session, TOKEN).await;
    relay
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delays_and_statuses() {
    let relay = live(
        "slow",
        Faults::new()
            .delay(Leg::Inbox, Duration::from_millis(400))
            .status_times(Leg::Poll, 503, 2),
    )
    .await;
    let addr = relay.addr();
    let started = Instant::now();
    assert_eq!(
        post(addr, &format!("/slow/inbox?token={TOKEN}"), NOTE)
            .await
            .status,
        200
    );
    assert!(started.elapsed() >= Duration::from_millis(350));
    for _ in 0..2 {
        let r = get(
            addr,
            &format!("/slow/poll?token={TOKEN}&direction=outbound&wait=0"),
        )
        .await;
        assert_eq!(
            (r.status, r.json()),
            (503, json!({"error": "injected_fault"}))
        );
        r.assert_cors();
    }
    assert_eq!(
        get(
            addr,
            &format!("/slow/poll?token={TOKEN}&direction=outbound&wait=0")
        )
        .await
        .status,
        200
    );
    // Other sessions fall back to the (empty) default; the default applies to
    // every session without its own.
    register(addr, "other", TOKEN).await;
    assert_eq!(
        get(addr, &format!("/other/poll?token={TOKEN}&wait=0"))
            .await
            .status,
        200
    );
    relay.set_default_faults(
        Faults::new()
            .status(Leg::Events, 502)
            .status(Leg::Outbox, 500),
    );
    assert_eq!(
        get(
            addr,
            &format!("/other/events?token={TOKEN}&direction=outbound")
        )
        .await
        .status,
        502
    );
    assert_eq!(
        post(addr, &format!("/other/outbox?token={TOKEN}"), NOTE)
            .await
            .status,
        500
    );
    relay.set_faults("other", Faults::new());
    assert_eq!(
        post(addr, &format!("/other/outbox?token={TOKEN}"), NOTE)
            .await
            .status,
        200
    );
    relay.clear_faults("other");
    assert_eq!(
        post(addr, &format!("/other/outbox?token={TOKEN}"), NOTE)
            .await
            .status,
        500
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_and_duplicated_replies() {
    let relay = live(
        "dupe",
        Faults::new()
            .drop_replies_times(1)
            .duplicate_replies_times(1),
    )
    .await;
    let addr = relay.addr();
    let mut agent = Agent::sse(addr, "dupe", TOKEN, None).await;
    let outbox = format!("/dupe/outbox?token={TOKEN}");
    assert_eq!(post(addr, &outbox, &reply(1)).await.status, 200); // dropped
    assert_eq!(post(addr, &outbox, NOTE).await.status, 200); // notifications untouched
    assert_eq!(post(addr, &outbox, &reply(2)).await.status, 200); // duplicated
    assert_eq!(post(addr, &outbox, &reply(3)).await.status, 200); // normal
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(agent.next(SOON).await.unwrap());
    }
    assert_eq!(got[0]["method"], "note");
    assert_eq!(got[1]["id"], 2);
    assert_eq!(got[2]["id"], 2);
    assert_eq!(got[3]["id"], 3);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_mid_event() {
    let relay = live("cut1", Faults::new().sse_cut_after(1)).await;
    let addr = relay.addr();
    let mut page = open_events(
        addr,
        &format!("/cut1/events?token={TOKEN}&direction=outbound"),
    )
    .await;
    let inbox = format!("/cut1/outbox?token={TOKEN}");
    post(addr, &inbox, NOTE).await;
    post(addr, &inbox, NOTE).await;
    let all = String::from_utf8(page.read_to_end(SOON).await).unwrap();
    assert_eq!(
        all,
        format!(
            "retry: 2000\n\nevent: mcp\ndata: {NOTE}\n\nevent: mcp\ndata: {}",
            &NOTE[..NOTE.len() / 2]
        )
    );
    assert!(page.body_done || page.eof);
    assert!(eventually(|| relay.subscribers("cut1").is_empty()).await);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_crlf_bytes() {
    let relay = live(
        "drip",
        Faults::new()
            .sse_trickle(Duration::from_millis(1))
            .sse_crlf(),
    )
    .await;
    let addr = relay.addr();
    let mut page = open_events(
        addr,
        &format!("/drip/events?token={TOKEN}&direction=outbound"),
    )
    .await;
    assert_eq!(
        page.read_until(b"\r\n\r\n", SOON).await.unwrap(),
        b"retry: 2000\r\n\r\n"
    );
    post(addr, &format!("/drip/outbox?token={TOKEN}"), NOTE).await;
    let event = page.read_until(b"\r\n\r\n", SOON).await.unwrap();
    assert_eq!(
        event,
        format!("event: mcp\r\ndata: {NOTE}\r\n\r\n").into_bytes()
    );
    assert!(page.chunk_sizes.len() > 40);
    assert!(
        page.chunk_sizes.iter().all(|n| *n == 1),
        "one byte per write"
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_gone_and_oversize() {
    let relay = live(
        "junk",
        Faults::new()
            .sse_garbage()
            .sse_oversize(100)
            .sse_gone_after(1),
    )
    .await;
    let addr = relay.addr();
    let mut page = open_events(
        addr,
        &format!("/junk/events?token={TOKEN}&direction=outbound"),
    )
    .await;
    post(addr, &format!("/junk/outbox?token={TOKEN}"), NOTE).await;
    let all = page.read_to_end(SOON).await;
    assert!(
        all.windows(3).any(|w| w == b"\xff\xfe\x80"),
        "invalid UTF-8 line"
    );
    let text = String::from_utf8_lossy(&all);
    assert!(text.contains("this line is not a field\n"));
    assert!(text.contains("event: mcp\ndata: {\"this is\": not json\n\n"));
    let data_line = text
        .lines()
        .find(|l| l.starts_with("data: {\"jsonrpc\""))
        .unwrap();
    assert!(data_line.len() - "data: ".len() > 100);
    assert_eq!(data_line["data: ".len()..].trim_end(), NOTE);
    assert!(
        text.ends_with("event: error\ndata: session_gone\n\n"),
        "{text:?}"
    );
    // Only the stream was told so: the session itself lives on.
    assert_eq!(relay.sessions(), vec!["junk".to_owned()]);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_surface_reads_through_hostile_sse() {
    let relay = RelayServer::builder().start().await.unwrap();
    relay.set_faults(
        "hostile",
        Faults::new()
            .sse_garbage()
            .sse_crlf()
            .sse_oversize(4096)
            .affect_pages(),
    );
    let surface = DemoSurface::builder(relay.base_url(), "hostile", TOKEN)
        .start()
        .await
        .unwrap();
    let mut agent = Agent::poll(relay.addr(), "hostile", TOKEN, Some("a")).await;
    let reply = agent.call(json!("a-1"), "tools/list", json!({})).await;
    assert!(reply["result"]["tools"].is_array());
    // A cut stream makes the surface reconnect (as a new subscriber).
    relay.set_faults("hostile", Faults::new().sse_cut_after(0).affect_pages());
    agent
        .post(&json!({"jsonrpc": "2.0", "id": "a-lost", "method": "ping"}))
        .await;
    assert!(
        eventually(|| relay
            .subscribers("hostile")
            .iter()
            .filter(|s| s.direction == human_plus_relay::Direction::Inbound)
            .count()
            == 1)
        .await
    );
    relay.set_faults("hostile", Faults::new());
    // Wait for the reconnected leg, then a call completes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reply = agent.call(json!("a-2"), "ping", json!({})).await;
    assert_eq!(reply["result"], json!({}));
    assert!(surface.ended().is_none());
    // 410 mid-stream is final for the page.
    relay.set_faults("hostile", Faults::new().sse_gone_after(0).affect_pages());
    agent
        .post(&json!({"jsonrpc": "2.0", "method": "kick"}))
        .await;

    assert!(surface.wait_for(SOON, |s| s.ended().is_some()).await);
    assert_eq!(surface.ended().as_deref(), Some("session_gone"));
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_faults_spare_the_page_unless_asked() {
    let faults = Faults::new()
        .status(Leg::Poll, 503)
        .status(Leg::Events, 502)
        .sse_cut_after(0);
    let relay = live("spare", faults.clone()).await;
    let addr = relay.addr();
    // The page's inbound legs are untouched...
    assert_eq!(
        get(addr, &format!("/spare/poll?token={TOKEN}&wait=0"))
            .await
            .status,
        200
    );
    let mut page = open_events(addr, &format!("/spare/events?token={TOKEN}")).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.next_block(SOON).await.as_deref(), Some("retry: 2000"));
    post(addr, &format!("/spare/inbox?token={TOKEN}"), NOTE).await;
    assert_eq!(page.next_mcp(SOON).await.unwrap()["method"], "note");
    // ...while an agent's are not.
    let r = get(
        addr,
        &format!("/spare/poll?token={TOKEN}&direction=outbound&wait=0"),
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(
        get(
            addr,
            &format!("/spare/events?token={TOKEN}&direction=outbound")
        )
        .await
        .status,
        502
    );
    // affect_pages extends them to the page.
    relay.set_faults("spare", faults.affect_pages());
    assert_eq!(
        get(addr, &format!("/spare/poll?token={TOKEN}&wait=0"))
            .await
            .status,
        503
    );
    post(addr, &format!("/spare/inbox?token={TOKEN}"), NOTE).await;
    let rest = String::from_utf8(page.read_to_end(SOON).await).unwrap();
    assert_eq!(
        rest,
        format!("event: mcp\ndata: {}", &NOTE[..NOTE.len() / 2])
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_inbox_answer_delivers_the_frame_and_breaks_the_connection() {
    let relay = live("lost", Faults::new().lose_inbox_answers_times(1)).await;
    let addr = relay.addr();
    // The page's leg (inbound), as a page subscribes it.
    let mut inbound = open_events(addr, &format!("/lost/events?token={TOKEN}")).await;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut raw = RawReader::send(
        stream,
        addr,
        "POST",
        &format!("/lost/inbox?token={TOKEN}"),
        &[("Content-Type", "application/json")],
        NOTE.as_bytes(),
    )
    .await
    .unwrap();
    assert!(
        raw.head(SOON).await.is_none(),
        "no HTTP answer: the connection broke"
    );
    let frame = inbound
        .next_mcp(SOON)
        .await
        .expect("the page got the frame");
    assert_eq!(frame["method"], "note");
    // The fault ran out: the next POST is answered.
    assert_eq!(
        post(addr, &format!("/lost/inbox?token={TOKEN}"), NOTE)
            .await
            .status,
        200
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_connection_is_closed_after_the_keep_alive_timeout() {
    let relay = RelayServer::builder()
        .keep_alive_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let addr = relay.addr();
    register(addr, "idle", TOKEN).await;
    // A kept connection (no `Connection: close`): one request, then silence.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let target = format!("/idle/poll?token={TOKEN}&direction=outbound&wait=0");
    stream
        .write_all(format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("\"frames\"") {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "answered before the close");
        seen.extend_from_slice(&buf[..n]);
    }
    let started = Instant::now();
    let closed = tokio::time::timeout(SOON, stream.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "the relay closed the idle connection"
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(
        relay.connections_accepted(),
        2,
        "register and the poll's connection"
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_idle_connections_closes_an_idle_kept_connection_at_once() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    register(addr, "closing", TOKEN).await;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let target = format!("/closing/poll?token={TOKEN}&direction=outbound&wait=0");
    stream
        .write_all(format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("\"frames\"") {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "answered before the close");
        seen.extend_from_slice(&buf[..n]);
    }
    // Kept (the keep-alive timeout is Node's 5 s) until the relay is told.
    let still = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await;
    assert!(still.is_err(), "still open: {still:?}");
    relay.close_idle_connections();
    let closed = tokio::time::timeout(SOON, stream.read(&mut buf)).await;
    assert!(matches!(closed, Ok(Ok(0))), "closed: {closed:?}");
    relay.shutdown().await;
}
