//! Conformance of the relay server over raw HTTP: every route and status of
//! the Node relay's tables (reference §1.1–1.4, 1.7, 1.8).

mod common;

use std::time::Duration;

use common::*;
use human_plus_relay::{CorsPolicy, RelayServer};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const HEALTH: &str = "{\"ok\":true,\"service\":\"agent-integrations-relay\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_exact_get_on_root_or_healthz_without_cors() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    for target in ["/", "/healthz"] {
        let r = get(addr, target).await;
        assert_eq!(r.status, 200, "{target}");
        assert_eq!(r.text(), HEALTH);
        assert_eq!(r.header("content-type"), Some("application/json"));
        r.assert_no_cors();
    }
    // A query string defeats the exact match; the router then 404s.
    let r = get(addr, "/?probe=1").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json(), json!({"error": "not_found"}));
    let r = get(addr, "/healthz?x").await;
    assert_eq!(r.status, 404);
    // Only GET.
    let r = post(addr, "/", "").await;
    assert_eq!(r.status, 404);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_are_404_without_cors() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    for target in [
        "/nope",
        "/abc/inbox",
        "/abcd/other",
        "/abcd/inbox/",
        "/abcd",
        "/ab.d/poll",
        &format!("/{}/inbox", "a".repeat(65)),
        "/register/",
    ] {
        for method in ["GET", "POST", "OPTIONS"] {
            let r = request(addr, method, target, &[], b"").await;
            assert_eq!(r.status, 404, "{method} {target}");
            assert_eq!(r.json(), json!({"error": "not_found"}));
            r.assert_no_cors();
        }
    }
    // Dot segments are resolved as a URL parser would.
    register(addr, "dots", TOKEN).await;
    let r = post(
        addr,
        &format!("/x/../dots/./inbox?token={TOKEN}"),
        r#"{"jsonrpc":"2.0","method":"m"}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_method_is_405_and_options_is_204_with_cors() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    let routes = [
        ("/register", "POST"),
        ("/abcd/inbox", "POST"),
        ("/abcd/outbox", "POST"),
        ("/abcd/events", "GET"),
        ("/abcd/poll", "GET"),
        ("/abcd/unregister", "POST"),
    ];
    for (target, allowed) in routes {
        for method in ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"] {
            if method == allowed {
                continue;
            }
            let r = request(addr, method, target, &[], b"").await;
            assert_eq!(r.status, 405, "{method} {target}");
            r.assert_cors();
            if method != "HEAD" {
                assert_eq!(r.json(), json!({"error": "method_not_allowed"}));
            }
        }
        let r = request(addr, "OPTIONS", target, &[], b"").await;
        assert_eq!(r.status, 204, "OPTIONS {target}");
        assert!(r.body.is_empty());
        r.assert_cors();
    }
    // The old Human+ PHP transport's `GET outbox` meets a 405.
    let r = get(addr, &format!("/abcd/outbox?token={TOKEN}&wait=5&after=0")).await;
    assert_eq!(r.status, 405);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_validates_like_the_node_relay() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    let cases: Vec<(String, u16, serde_json::Value)> = vec![
        ("not json".into(), 400, json!({"error": "invalid_json"})),
        ("".into(), 400, json!({"error": "invalid_json"})),
        ("[]".into(), 400, json!({"error": "missing_fields"})),
        ("null".into(), 400, json!({"error": "missing_fields"})),
        (
            json!({"session": "abcd"}).to_string(),
            400,
            json!({"error": "missing_fields"}),
        ),
        (
            json!({"session": "abcd", "token": 1234567890123456u64}).to_string(),
            400,
            json!({"error": "missing_fields"}),
        ),
        (
            json!({"session": "ab", "token": TOKEN}).to_string(),
            401,
            json!({"error": "invalid_session_id"}),
        ),
        (
            json!({"session": "ab cd", "token": TOKEN}).to_string(),
            401,
            json!({"error": "invalid_session_id"}),
        ),
        (
            json!({"session": "abcd", "token": "short"}).to_string(),
            401,
            json!({"error": "invalid_token"}),
        ),
        (
            json!({"session": "abcd", "token": "x".repeat(129)}).to_string(),
            401,
            json!({"error": "invalid_token"}),
        ),
        (
            json!({"session": "abcd", "token": "x".repeat(16)}).to_string(),
            200,
            json!({"ok": true}),
        ),
        (
            json!({"session": "abcd", "token": "x".repeat(16)}).to_string(),
            200,
            json!({"ok": true}),
        ),
        (
            json!({"session": "abcd", "token": "y".repeat(16)}).to_string(),
            401,
            json!({"error": "session_taken"}),
        ),
        (
            json!({"session": "long", "token": "x".repeat(128)}).to_string(),
            200,
            json!({"ok": true}),
        ),
    ];
    for (body, status, answer) in cases {
        let r = post(addr, "/register", &body).await;
        assert_eq!(r.status, status, "{body}");
        assert_eq!(r.json(), answer, "{body}");
        assert_eq!(r.header("content-type"), Some("application/json"));
        r.assert_cors();
    }
    assert_eq!(relay.sessions(), vec!["abcd".to_owned(), "long".to_owned()]);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_and_outbox_statuses() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    assert_eq!(register(addr, "live", TOKEN).await.status, 200);
    let frame = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let response = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    for (route, good) in [("inbox", frame), ("outbox", response)] {
        // Unknown session with a token: 410.
        let r = post(addr, &format!("/nosuch/{route}?token={TOKEN}"), good).await;
        assert_eq!(
            (r.status, r.json()),
            (410, json!({"error": "session_gone"}))
        );
        r.assert_cors();
        // Missing token: 401, even for an unknown session.
        let r = post(addr, &format!("/nosuch/{route}"), good).await;
        assert_eq!(
            (r.status, r.json()),
            (401, json!({"error": "invalid_token_or_frame"}))
        );
        let r = post(addr, &format!("/live/{route}?token="), good).await;
        assert_eq!(r.status, 401);
        // Wrong token on a live session: 401, never 410.
        let r = post(
            addr,
            &format!("/live/{route}?token=wrongwrongwrongwrong"),
            good,
        )
        .await;
        assert_eq!(
            (r.status, r.json()),
            (401, json!({"error": "invalid_token_or_frame"}))
        );
        // A wrong token in the query is not rescued by a right one in the
        // header: the query's token is the one read, as on the Node relay
        // (which reads only the query; the header alone is an addition of
        // this relay, `bearer_auth`, tested in `routing.rs`).
        let r = request(
            addr,
            "POST",
            &format!("/live/{route}?token=wrongwrongwrongwrong"),
            &[("Authorization", &format!("Bearer {TOKEN}"))],
            good.as_bytes(),
        )
        .await;
        assert_eq!(r.status, 401);
        // Malformed frames: 401 invalid_token_or_frame.
        for bad in [
            r#"{"id":1}"#,
            "",
            "not json",
            "[]",
            r#"{"jsonrpc":"2.0","method":"notifications/peer_joined","params":{"subscriberId":"0000000000000000","ts":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#,
        ] {
            let r = post(addr, &format!("/live/{route}?token={TOKEN}"), bad).await;
            assert_eq!(
                (r.status, r.json()),
                (401, json!({"error": "invalid_token_or_frame"})),
                "{bad}"
            );
        }
        // A good frame with nobody subscribed: dropped with 200 (the trap).
        let r = post(addr, &format!("/live/{route}?token={TOKEN}"), good).await;
        assert_eq!((r.status, r.json()), (200, json!({"ok": true})));
        r.assert_cors();
        // content-type is not checked.
        let r = request(
            addr,
            "POST",
            &format!("/live/{route}?token={TOKEN}"),
            &[("Content-Type", "text/plain")],
            good.as_bytes(),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_statuses_headers_and_stream() {
    let relay = RelayServer::builder()
        .keepalive_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let addr = relay.addr();
    register(addr, "live", TOKEN).await;
    // 410 and 401 carry an SSE error body.
    for (target, status, reason) in [
        (format!("/nosuch/events?token={TOKEN}"), 410, "session_gone"),
        ("/live/events".to_owned(), 401, "invalid_token"),
        (
            "/live/events?token=wrongwrongwrongwrong".to_owned(),
            401,
            "invalid_token",
        ),
        ("/nosuch/events".to_owned(), 401, "invalid_token"),
    ] {
        let r = get(addr, &target).await;
        assert_eq!(r.status, status, "{target}");
        assert_eq!(r.header("content-type"), Some("text/event-stream"));
        assert_eq!(r.text(), format!("event: error\ndata: {reason}\n\n"));
        r.assert_cors();
    }
    let mut page = open_events(
        addr,
        &format!("/live/events?token={TOKEN}&direction=inbound"),
    )
    .await;
    assert_eq!(page.status, 200);
    assert_eq!(page.header("content-type"), Some("text/event-stream"));
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    assert_eq!(page.header("x-accel-buffering"), Some("no"));
    assert_eq!(page.header("access-control-allow-origin"), Some("*"));
    assert_eq!(page.next_block(SOON).await.as_deref(), Some("retry: 2000"));
    assert_eq!(page.next_block(SOON).await.as_deref(), Some(": keepalive"));
    // A frame is written verbatim after `data: `, pretty-printing and all.
    let pretty = "{\"jsonrpc\":\"2.0\",\n \"method\":\"note\"}";
    assert_eq!(
        post(addr, &format!("/live/inbox?token={TOKEN}"), pretty)
            .await
            .status,
        200
    );
    let block = loop {
        let block = page.next_block(SOON).await.expect("a block");
        if block != ": keepalive" {
            break block;
        }
    };
    assert_eq!(block, format!("event: mcp\ndata: {pretty}"));
    // Anything but exactly `outbound` is inbound.
    let mut odd = open_events(
        addr,
        &format!("/live/events?token={TOKEN}&direction=OUTBOUND"),
    )
    .await;
    assert_eq!(odd.next_block(SOON).await.as_deref(), Some("retry: 2000"));
    let subs = relay.subscribers("live");
    assert_eq!(subs.len(), 2);
    assert!(
        subs.iter()
            .all(|s| s.direction == human_plus_relay::Direction::Inbound)
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_statuses_shape_and_subscriber_rules() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    register(addr, "live", TOKEN).await;
    let r = get(addr, &format!("/nosuch/poll?token={TOKEN}&wait=0")).await;
    assert_eq!(
        (r.status, r.json()),
        (410, json!({"error": "session_gone"}))
    );
    r.assert_cors();
    let r = get(addr, "/live/poll?wait=0").await;
    assert_eq!(
        (r.status, r.json()),
        (401, json!({"error": "invalid_token"}))
    );
    let r = get(addr, "/live/poll?token=wrongwrongwrongwrong&wait=0").await;
    assert_eq!(
        (r.status, r.json()),
        (401, json!({"error": "invalid_token"}))
    );

    // First poll: a fresh 16-hex subscriber, exactly two keys in order.
    let r = get(
        addr,
        &format!("/live/poll?token={TOKEN}&direction=inbound&wait=0"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    r.assert_cors();
    let text = r.text();
    assert!(text.starts_with("{\"subscriber\":\""), "{text}");
    assert!(text.ends_with("\",\"frames\":[]}"), "{text}");
    let sub = r.json()["subscriber"].as_str().unwrap().to_owned();
    assert_eq!(sub.len(), 16);
    assert!(
        sub.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );

    // Frames queue between polls and come back as JSON strings; a batch is
    // one string holding the array.
    let single = r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#;
    let batch = r#"[{"jsonrpc":"2.0","id":"b","method":"ping"},{"jsonrpc":"2.0","method":"n"}]"#;
    post(addr, &format!("/live/inbox?token={TOKEN}"), single).await;
    post(addr, &format!("/live/inbox?token={TOKEN}"), batch).await;
    let r = get(
        addr,
        &format!("/live/poll?token={TOKEN}&wait=0&subscriber={sub}"),
    )
    .await;
    assert_eq!(
        r.json(),
        json!({"subscriber": sub, "frames": [single, batch]})
    );

    // A well-formed unknown id is adopted under that id.
    let adopted = "00112233aabbccdd";
    let r = get(
        addr,
        &format!("/live/poll?token={TOKEN}&wait=0&subscriber={adopted}"),
    )
    .await;
    assert_eq!(r.json()["subscriber"], adopted);
    // Anything else gets a fresh id.
    for bad in ["00112233AABBCCDD", "xyz", "00112233aabbccdd0"] {
        let r = get(
            addr,
            &format!("/live/poll?token={TOKEN}&wait=0&subscriber={bad}"),
        )
        .await;
        let got = r.json()["subscriber"].as_str().unwrap().to_owned();
        assert_ne!(got, bad);
        assert_eq!(got.len(), 16);
    }
    // A streaming (SSE) subscriber's id is never adopted: learn an outbound
    // SSE id from the page's peer_joined, then poll outbound with it.
    let mut page = open_events(addr, &format!("/live/events?token={TOKEN}")).await;
    page.next_block(SOON).await;
    let _agent = Agent::sse(addr, "live", TOKEN, None).await;
    let joined = page.next_mcp(SOON).await.unwrap();
    assert_eq!(joined["method"], "notifications/peer_joined");
    let sse_id = joined["params"]["subscriberId"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = get(
        addr,
        &format!("/live/poll?token={TOKEN}&direction=outbound&wait=0&subscriber={sse_id}"),
    )
    .await;
    assert_ne!(r.json()["subscriber"].as_str().unwrap(), sse_id);
    // ... but the same id in the other direction is unknown there, so adopted.
    let r = get(
        addr,
        &format!("/live/poll?token={TOKEN}&direction=inbound&wait=0&subscriber={sse_id}"),
    )
    .await;
    assert_eq!(r.json()["subscriber"].as_str().unwrap(), sse_id);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregister_ends_the_session_for_everyone() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    register(addr, "live", TOKEN).await;
    let mut page = open_events(addr, &format!("/live/events?token={TOKEN}")).await;
    assert_eq!(page.next_block(SOON).await.as_deref(), Some("retry: 2000"));
    let r = get(
        addr,
        &format!("/live/poll?token={TOKEN}&direction=outbound&wait=0"),
    )
    .await;
    let sub = r.json()["subscriber"].as_str().unwrap().to_owned();
    let parked = tokio::spawn(async move {
        get(
            addr,
            &format!("/live/poll?token={TOKEN}&direction=outbound&wait=25000&subscriber={sub}"),
        )
        .await
    });
    assert!(eventually(|| relay.subscribers("live").len() == 2).await);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let r = post(addr, "/live/unregister?token=wrongwrongwrongwrong", "").await;
    assert_eq!(
        (r.status, r.json()),
        (401, json!({"error": "invalid_token"}))
    );
    let r = post(addr, "/live/unregister", "").await;
    assert_eq!(
        (r.status, r.json()),
        (401, json!({"error": "invalid_token"}))
    );
    // The body is ignored (even an oversize one is never read).
    let r = post(
        addr,
        &format!("/live/unregister?token={TOKEN}&client=agent"),
        "ignored",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "{\"ok\":true}");
    r.assert_cors();
    let r = post(addr, &format!("/live/unregister?token={TOKEN}"), "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "{\"ok\":true,\"alreadyGone\":true}");
    // Already gone answers 200 even to a wrong token; a missing token is 401.
    let r = post(addr, "/live/unregister?token=wrongwrongwrongwrong", "").await;
    assert_eq!(r.status, 200);
    let r = post(addr, "/nosuch/unregister", "").await;
    assert_eq!(r.status, 401);

    // The open stream is ended by the relay; the parked poll is released.
    let joined = page.next_mcp(SOON).await.unwrap();
    assert_eq!(joined["method"], "notifications/peer_joined");
    let rest = page.read_to_end(SOON).await;
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    assert!(page.body_done || page.eof, "the relay ended the stream");
    let released = tokio::time::timeout(SOON, parked).await.unwrap().unwrap();
    assert_eq!(released.status, 200);
    assert_eq!(released.json()["frames"], json!([]));
    // Every session route now answers 410.
    assert_eq!(
        get(addr, &format!("/live/events?token={TOKEN}"))
            .await
            .status,
        410
    );
    assert_eq!(
        get(addr, &format!("/live/poll?token={TOKEN}&wait=0"))
            .await
            .status,
        410
    );
    assert_eq!(
        post(addr, &format!("/live/inbox?token={TOKEN}"), "{}")
            .await
            .status,
        410
    );
    assert_eq!(
        post(addr, &format!("/live/outbox?token={TOKEN}"), "{}")
            .await
            .status,
        410
    );
    // The id is free again, for any token.
    assert_eq!(
        register(addr, "live", "another-token-0000").await.status,
        200
    );
    relay.shutdown().await;
}

async fn post_raw_expect_drop(
    addr: std::net::SocketAddr,
    target: &str,
    body: &[u8],
) -> Option<u16> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let mut reader = RawReader::send(stream, addr, "POST", target, &[], body)
        .await
        .ok()?;
    reader.head(SOON).await.map(|(status, _)| status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_cap_drops_the_connection_without_a_413() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    register(addr, "live", TOKEN).await;
    let cap = 256 * 1024;
    let frame = r#"{"jsonrpc":"2.0","method":"big"}"#;
    let mut exact = frame.as_bytes().to_vec();
    exact.resize(cap, b' ');
    let r = request(
        addr,
        "POST",
        &format!("/live/inbox?token={TOKEN}"),
        &[],
        &exact,
    )
    .await;
    assert_eq!(r.status, 200, "exactly 256 KiB is accepted");
    let mut over = exact.clone();
    over.push(b' ');
    for target in [
        format!("/live/inbox?token={TOKEN}"),
        format!("/live/outbox?token={TOKEN}"),
        // The body is read before the 410 check, so even an unknown session
        // meets the trap rather than a 410.
        format!("/nosuch/inbox?token={TOKEN}"),
        "/register".to_owned(),
    ] {
        assert_eq!(
            post_raw_expect_drop(addr, &target, &over).await,
            None,
            "{target}"
        );
    }
    // Much larger bodies too (the client may see a reset mid-send).
    let huge = vec![b' '; 4 * cap];
    assert_eq!(
        post_raw_expect_drop(addr, &format!("/live/inbox?token={TOKEN}"), &huge).await,
        None
    );
    // The server keeps serving.
    assert_eq!(get(addr, "/healthz").await.status, 200);
    relay.shutdown().await;

    // Opt-in: answer 413 instead.
    let relay = RelayServer::builder()
        .answer_oversize_with_413(true)
        .body_limit(64)
        .start()
        .await
        .unwrap();
    let addr = relay.addr();
    register(addr, "live", TOKEN).await;
    let r = request(
        addr,
        "POST",
        &format!("/live/inbox?token={TOKEN}"),
        &[],
        &[b' '; 65],
    )
    .await;
    assert_eq!(
        (r.status, r.json()),
        (413, json!({"error": "payload_too_large"}))
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_allow_list_echoes_listed_origins_only() {
    let policy = CorsPolicy::parse("https://sheet.example, http://localhost:3000").unwrap();
    let relay = RelayServer::builder().cors(policy).start().await.unwrap();
    let addr = relay.addr();
    let r = request(
        addr,
        "OPTIONS",
        "/register",
        &[("Origin", "https://sheet.example")],
        b"",
    )
    .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://sheet.example")
    );
    assert_eq!(r.header("vary"), Some("Origin"));
    let r = request(
        addr,
        "OPTIONS",
        "/register",
        &[("Origin", "https://evil.example")],
        b"",
    )
    .await;
    assert_eq!(r.header("access-control-allow-origin"), None);
    assert_eq!(r.header("vary"), Some("Origin"));
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET, POST, OPTIONS")
    );
    let r = request(addr, "OPTIONS", "/register", &[], b"").await;
    assert_eq!(r.header("access-control-allow-origin"), None);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_moves_every_route() {
    let relay = RelayServer::builder()
        .prefix("/agent-relay/")
        .start()
        .await
        .unwrap();
    let addr = relay.addr();
    assert!(relay.base_url().ends_with("/agent-relay"));
    assert_eq!(get(addr, "/agent-relay/").await.text(), HEALTH);
    assert_eq!(get(addr, "/").await.status, 200);
    assert_eq!(post(addr, "/register", "{}").await.status, 404);
    let r = post(
        addr,
        "/agent-relay/register",
        &json!({"session": "pref", "token": TOKEN}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200);
    let r = get(
        addr,
        &format!("/agent-relay/pref/poll?token={TOKEN}&wait=0"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        get(addr, &format!("/pref/poll?token={TOKEN}&wait=0"))
            .await
            .status,
        404
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_connections_serve_several_requests() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let two = format!(
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\nGET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(two.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(
        SOON,
        tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut all),
    )
    .await
    .unwrap()
    .unwrap();
    let text = String::from_utf8_lossy(&all);
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
    relay.shutdown().await;
}
