//! Long-poll `wait` behaviour, poller pruning, and the sliding session TTL.
//! Timing bounds are one-sided and generous: a parked poll must return well
//! before its window when a frame lands, and an empty one not before it.

mod common;

use std::time::{Duration, Instant};

use common::*;
use human_plus_relay::RelayServer;
use serde_json::json;
use tokio::net::TcpStream;

const FRAME: &str = r#"{"jsonrpc":"2.0","method":"hello"}"#;

async fn first_poll(addr: std::net::SocketAddr, session: &str, direction: &str) -> String {
    let r = get(
        addr,
        &format!("/{session}/poll?token={TOKEN}&direction={direction}&wait=0"),
    )
    .await;
    assert_eq!(r.status, 200);
    r.json()["subscriber"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_poll_returns_when_a_frame_lands() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    register(addr, "park", TOKEN).await;
    let sub = first_poll(addr, "park", "inbound").await;
    let started = Instant::now();
    let parked = tokio::spawn(async move {
        get(
            addr,
            &format!("/park/poll?token={TOKEN}&wait=25000&subscriber={sub}"),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        post(addr, &format!("/park/inbox?token={TOKEN}"), FRAME)
            .await
            .status,
        200
    );
    let r = tokio::time::timeout(Duration::from_secs(20), parked)
        .await
        .expect("the parked poll returned before its 25 s window")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["frames"], json!([FRAME]));
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_poll_waits_its_window() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    register(addr, "idle", TOKEN).await;
    let sub = first_poll(addr, "idle", "inbound").await;
    let started = Instant::now();
    let r = get(
        addr,
        &format!("/idle/poll?token={TOKEN}&wait=1500&subscriber={sub}"),
    )
    .await;
    let elapsed = started.elapsed();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["frames"], json!([]));
    assert!(
        elapsed >= Duration::from_millis(1400),
        "returned after {elapsed:?}"
    );
    // wait=0 and a non-numeric wait return at once (well before the default 20 s).
    for wait in ["0", "soon", ""] {
        let started = Instant::now();
        let r = get(
            addr,
            &format!("/idle/poll?token={TOKEN}&wait={wait}&subscriber={sub}"),
        )
        .await;
        assert_eq!(r.status, 200);
        assert!(started.elapsed() < Duration::from_secs(10), "wait={wait:?}");
    }
    // Frames already queued are returned at once even with a long wait.
    post(addr, &format!("/idle/inbox?token={TOKEN}"), FRAME).await;
    let started = Instant::now();
    let r = get(
        addr,
        &format!("/idle/poll?token={TOKEN}&wait=25000&subscriber={sub}"),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(r.json()["frames"], json!([FRAME]));
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_abandoned_mid_park_takes_nothing() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    register(addr, "gone", TOKEN).await;
    let sub = first_poll(addr, "gone", "inbound").await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let reader = RawReader::send(
        stream,
        addr,
        "GET",
        &format!("/gone/poll?token={TOKEN}&wait=25000&subscriber={sub}"),
        &[],
        b"",
    )
    .await
    .unwrap();
    assert!(
        eventually(|| relay
            .subscribers("gone")
            .first()
            .is_some_and(|s| s.parked == 1))
        .await
    );
    drop(reader); // the client goes away while parked
    assert!(
        eventually(|| relay
            .subscribers("gone")
            .first()
            .is_some_and(|s| s.parked == 0))
        .await,
        "the relay noticed the disconnect and unparked"
    );
    post(addr, &format!("/gone/inbox?token={TOKEN}"), FRAME).await;
    let r = get(
        addr,
        &format!("/gone/poll?token={TOKEN}&wait=0&subscriber={sub}"),
    )
    .await;
    assert_eq!(
        r.json()["frames"],
        json!([FRAME]),
        "the frame waited for the next poll"
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_pollers_are_pruned_and_announced() {
    let relay = RelayServer::builder()
        .poll_idle(Duration::from_millis(300))
        .reap_interval(Duration::from_secs(3600))
        .start()
        .await
        .unwrap();
    let addr = relay.addr();
    register(addr, "prune", TOKEN).await;
    let mut page = open_events(addr, &format!("/prune/events?token={TOKEN}")).await;
    assert_eq!(page.next_block(SOON).await.as_deref(), Some("retry: 2000"));
    let sub = first_poll(addr, "prune", "outbound").await;
    let joined = page.next_mcp(SOON).await.unwrap();
    assert_eq!(joined["params"]["subscriberId"], sub.as_str());
    // A parked poller is never pruned, however long it has been parked.
    let parked = tokio::spawn(async move {
        get(
            addr,
            &format!("/prune/poll?token={TOKEN}&direction=outbound&wait=25000&subscriber={sub}"),
        )
        .await
    });
    let outbound = |relay: &human_plus_relay::RelayHandle| {
        relay
            .subscribers("prune")
            .into_iter()
            .find(|s| s.direction == human_plus_relay::Direction::Outbound)
    };
    assert!(eventually(|| outbound(&relay).is_some_and(|s| s.parked == 1)).await);
    tokio::time::sleep(Duration::from_millis(700)).await;
    relay.reap_now();
    assert_eq!(relay.subscribers("prune").len(), 2);
    post(addr, &format!("/prune/outbox?token={TOKEN}"), FRAME).await;
    let r = parked.await.unwrap();
    assert_eq!(r.json()["frames"], json!([FRAME]));
    let sub = r.json()["subscriber"].as_str().unwrap().to_owned();
    // Idle past poll_idle with nothing parked: pruned, and the page is told.
    tokio::time::sleep(Duration::from_millis(700)).await;
    relay.reap_now();
    assert_eq!(relay.subscribers("prune").len(), 1);
    let left = page.next_mcp(SOON).await.unwrap();
    assert_eq!(left["method"], "notifications/peer_left");
    assert_eq!(left["params"]["subscriberId"], sub.as_str());
    // Polling again with the pruned id adopts it (and announces it again).
    let r = get(
        addr,
        &format!("/prune/poll?token={TOKEN}&direction=outbound&wait=0&subscriber={sub}"),
    )
    .await;
    assert_eq!(r.json()["subscriber"], sub.as_str());
    let joined = page.next_mcp(SOON).await.unwrap();
    assert_eq!(joined["method"], "notifications/peer_joined");
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_answers_410_and_its_legs_end() {
    let relay = RelayServer::builder()
        .session_ttl(Duration::from_millis(300))
        .reap_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let addr = relay.addr();
    register(addr, "ttl1", TOKEN).await;
    let mut page = open_events(addr, &format!("/ttl1/events?token={TOKEN}")).await;
    assert_eq!(page.next_block(SOON).await.as_deref(), Some("retry: 2000"));
    let sub = first_poll(addr, "ttl1", "inbound").await;
    let parked = tokio::spawn(async move {
        get(
            addr,
            &format!("/ttl1/poll?token={TOKEN}&wait=25000&subscriber={sub}"),
        )
        .await
    });
    // An open idle stream does not keep the session alive.
    assert!(
        eventually(|| relay.sessions().is_empty()).await,
        "the reaper dropped the session"
    );
    let rest = page.read_to_end(SOON).await;
    assert!(rest.is_empty());
    assert!(page.body_done || page.eof, "the stream was ended");
    let released = tokio::time::timeout(SOON, parked).await.unwrap().unwrap();
    assert_eq!(released.status, 200);
    assert_eq!(
        post(addr, &format!("/ttl1/inbox?token={TOKEN}"), FRAME)
            .await
            .status,
        410
    );
    assert_eq!(
        post(addr, &format!("/ttl1/outbox?token={TOKEN}"), FRAME)
            .await
            .status,
        410
    );
    let r = get(addr, &format!("/ttl1/events?token={TOKEN}")).await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (410, "event: error\ndata: session_gone\n\n")
    );
    assert_eq!(
        get(addr, &format!("/ttl1/poll?token={TOKEN}&wait=0"))
            .await
            .status,
        410
    );
    let r = post(addr, &format!("/ttl1/unregister?token={TOKEN}"), "").await;
    assert_eq!(r.text(), "{\"ok\":true,\"alreadyGone\":true}");
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ttl_slides_on_every_authenticated_request() {
    // The exact boundaries are unit-tested in the broker with a synthetic
    // clock; here only that touches over HTTP keep a session alive well past
    // its TTL, with a wide margin.
    let relay = RelayServer::builder()
        .session_ttl(Duration::from_secs(2))
        .reap_interval(Duration::from_secs(3600))
        .start()
        .await
        .unwrap();
    let addr = relay.addr();
    register(addr, "slide", TOKEN).await;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        // A wrong token is no touch; the right one is.
        assert_eq!(
            get(addr, "/slide/poll?token=wrongwrongwrongwrong&wait=0")
                .await
                .status,
            401
        );
        assert_eq!(
            get(addr, &format!("/slide/poll?token={TOKEN}&wait=0"))
                .await
                .status,
            200
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    relay.reap_now();
    assert_eq!(
        relay.sessions(),
        vec!["slide".to_owned()],
        "alive 3 s after register"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    relay.reap_now();
    assert!(relay.sessions().is_empty());
    assert_eq!(
        get(addr, &format!("/slide/poll?token={TOKEN}&wait=0"))
            .await
            .status,
        410
    );
    relay.shutdown().await;
}
