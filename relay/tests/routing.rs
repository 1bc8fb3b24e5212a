//! Directions, presence, client scoping of replies, the fail-closed rule and
//! the traps (reference §1.5–1.7), over raw HTTP.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use human_plus_relay::{Direction, ReceiveLeg, RelayServer};
use serde_json::{Value, json};
use tokio::net::TcpStream;

/// The page: an inbound SSE subscriber that answers by POSTing to outbox.
struct Page {
    addr: SocketAddr,
    session: String,
    events: RawReader<TcpStream>,
}

impl Page {
    async fn open(addr: SocketAddr, session: &str) -> Page {
        let mut events = open_events(
            addr,
            &format!("/{session}/events?token={TOKEN}&direction=inbound"),
        )
        .await;
        assert_eq!(
            events.next_block(SOON).await.as_deref(),
            Some("retry: 2000")
        );
        Page {
            addr,
            session: session.into(),
            events,
        }
    }

    /// The next inbound frame that is not presence.
    async fn next_request(&mut self) -> Value {
        loop {
            let frame = self.events.next_mcp(SOON).await.expect("an inbound frame");
            let method = frame["method"].as_str().unwrap_or_default();
            if !method.starts_with("notifications/peer_") {
                return frame;
            }
        }
    }

    async fn answer(&self, frame: &str) {
        let r = post(
            self.addr,
            &format!("/{}/outbox?token={TOKEN}", self.session),
            frame,
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }

    /// A broadcast notification every agent receives: a stream marker.
    async fn marker(&self, n: u32) {
        self.answer(&json!({"jsonrpc": "2.0", "method": "marker", "params": {"n": n}}).to_string())
            .await;
    }
}

fn result(id: Value, tag: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": {"for": tag}}).to_string()
}

fn request(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

/// Reads frames until the marker `n`; returns what came before it.
async fn until_marker(agent: &mut Agent, n: u32) -> Vec<Value> {
    let mut before = Vec::new();
    loop {
        let frame = agent.next(SOON).await.expect("frames up to the marker");
        if frame["method"] == "marker" && frame["params"]["n"] == n {
            return before;
        }
        before.push(frame);
    }
}

async fn setup(session: &str) -> (human_plus_relay::RelayHandle, SocketAddr, Page) {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    assert_eq!(register(addr, session, TOKEN).await.status, 200);
    let page = Page::open(addr, session).await;
    (relay, addr, page)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directions_and_presence() {
    let (relay, addr, mut page) = setup("pres").await;
    // An outbound SSE subscriber is announced to the page...
    let agent = Agent::sse(addr, "pres", TOKEN, None).await;
    let joined = page.events.next_mcp(SOON).await.unwrap();
    assert_eq!(joined["jsonrpc"], "2.0");
    assert_eq!(joined["method"], "notifications/peer_joined");
    let id = joined["params"]["subscriberId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 16);
    assert!(joined["params"]["ts"].as_u64().unwrap() > 1_600_000_000_000);
    assert_eq!(joined["params"].as_object().unwrap().len(), 2);
    // ...and its departure too, when its stream closes.
    drop(agent);
    let left = page.events.next_mcp(SOON).await.unwrap();
    assert_eq!(left["method"], "notifications/peer_left");
    assert_eq!(left["params"]["subscriberId"], id.as_str());

    // A poller is announced once, on creation, not per poll.
    let mut poller = Agent::poll(addr, "pres", TOKEN, None).await;
    let joined = page.events.next_mcp(SOON).await.unwrap();
    assert_eq!(joined["method"], "notifications/peer_joined");
    let poll_id = joined["params"]["subscriberId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(poller.next(Duration::from_millis(200)).await, None);
    assert_eq!(poller.next(Duration::from_millis(200)).await, None);
    // Inbound frames reach inbound subscribers only; outbound reach agents.
    let inbound = json!({"jsonrpc": "2.0", "method": "to-page"});
    assert_eq!(poller.post(&inbound).await.status, 200);
    assert_eq!(page.events.next_mcp(SOON).await.unwrap(), inbound);
    page.marker(1).await;
    assert!(
        until_marker(&mut poller, 1).await.is_empty(),
        "no presence or inbound frames for agents"
    );
    // An inbound subscriber is not announced to anyone.
    let _second_tab = Page::open(addr, "pres").await;
    page.marker(2).await;
    assert!(until_marker(&mut poller, 2).await.is_empty());
    let subs = relay.subscribers("pres");
    assert_eq!(
        subs.iter()
            .filter(|s| s.direction == Direction::Inbound)
            .count(),
        2
    );
    let outbound: Vec<_> = subs
        .iter()
        .filter(|s| s.direction == Direction::Outbound)
        .collect();
    assert_eq!(outbound.len(), 1);
    assert_eq!(outbound[0].id, poll_id);
    assert_eq!(outbound[0].leg, ReceiveLeg::Poll);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_nobody_is_subscribed_to_is_dropped_with_200() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    register(addr, "drop", TOKEN).await;
    // No page yet: the agent's request is accepted and lost.
    let agent = Agent::poll(addr, "drop", TOKEN, None).await;
    assert_eq!(agent.post(&request(json!(1))).await.status, 200);
    let mut page = Page::open(addr, "drop").await;
    assert_eq!(agent.post(&request(json!(2))).await.status, 200);
    assert_eq!(page.next_request().await["id"], 2, "request 1 was dropped");
    // A reply posted before the agent subscribes is lost for it.
    page.answer(&result(json!(2), "early")).await;
    let mut late = Agent::sse(addr, "drop", TOKEN, None).await;
    page.marker(1).await;
    assert!(until_marker(&mut late, 1).await.is_empty());
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlabelled_clients_get_the_legacy_broadcast() {
    let (relay, addr, mut page) = setup("legacy").await;
    let mut a = Agent::sse(addr, "legacy", TOKEN, None).await;
    let mut b = Agent::poll(addr, "legacy", TOKEN, None).await;
    a.post(&request(json!("a-1"))).await;
    let req = page.next_request().await;
    page.answer(&result(req["id"].clone(), "a")).await;
    page.marker(1).await;
    for agent in [&mut a, &mut b] {
        let got = until_marker(agent, 1).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["result"]["for"], "a");
    }
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labelled_clients_with_distinct_ids_each_get_only_their_own() {
    let (relay, addr, mut page) = setup("scope").await;
    let mut alice = Agent::sse(addr, "scope", TOKEN, Some("alice")).await;
    let mut bob = Agent::poll(addr, "scope", TOKEN, Some("bob")).await;
    alice.post(&request(json!("alice-1"))).await;
    bob.post(&request(json!("bob-1"))).await;
    for _ in 0..2 {
        let req = page.next_request().await;
        let id = req["id"].as_str().unwrap().to_owned();
        page.answer(&result(json!(id), &id)).await;
    }
    page.marker(1).await;
    let got = until_marker(&mut alice, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["id"], "alice-1");
    let got = until_marker(&mut bob, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["id"], "bob-1");
    // A replayed response id is delivered to nobody (the entry was consumed).
    page.answer(&result(json!("alice-1"), "replay")).await;
    page.marker(2).await;
    assert!(until_marker(&mut alice, 2).await.is_empty());
    assert!(until_marker(&mut bob, 2).await.is_empty());
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_id_from_two_labelled_clients_collides() {
    let (relay, addr, mut page) = setup("clash").await;
    let mut alice = Agent::sse(addr, "clash", TOKEN, Some("alice")).await;
    let mut bob = Agent::sse(addr, "clash", TOKEN, Some("bob")).await;
    // Both use id 1 (and `1` and `"1"` are one key: String(id)).
    alice.post(&request(json!(1))).await;
    assert_eq!(page.next_request().await["id"], 1);
    bob.post(&request(json!("1"))).await;
    assert_eq!(page.next_request().await["id"], "1");
    // The page answers alice's first: the last writer (bob) gets it.
    page.answer(&result(json!(1), "meant-for-alice")).await;
    // Then bob's: the entry was consumed, so it reaches nobody.
    page.answer(&result(json!("1"), "meant-for-bob")).await;
    page.marker(1).await;
    assert!(
        until_marker(&mut alice, 1).await.is_empty(),
        "alice gets nothing"
    );
    let got = until_marker(&mut bob, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["result"]["for"], "meant-for-alice");
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_sessions_fail_closed() {
    let (relay, addr, mut page) = setup("closed").await;
    let mut labelled = Agent::sse(addr, "closed", TOKEN, Some("worker-7")).await;
    let mut legacy = Agent::poll(addr, "closed", TOKEN, None).await;
    // An unsolicited response (nobody recorded) reaches nobody once anyone
    // in the session carries a label.
    page.answer(&result(json!(99), "unsolicited")).await;
    // The unlabelled client's own reply goes nowhere either.
    legacy.post(&request(json!("legacy-1"))).await;
    let req = page.next_request().await;
    page.answer(&result(req["id"].clone(), "legacy")).await;
    // A client that labels its subscription but not its POST never gets replies.
    let unlabelled_post = post(
        addr,
        &format!("/closed/inbox?token={TOKEN}"),
        &request(json!("w-1")).to_string(),
    )
    .await;
    assert_eq!(unlabelled_post.status, 200);
    let req = page.next_request().await;
    page.answer(&result(req["id"].clone(), "w")).await;
    page.marker(1).await;
    assert!(until_marker(&mut labelled, 1).await.is_empty());
    assert!(until_marker(&mut legacy, 1).await.is_empty());

    // Notifications and batches are broadcast to everyone, labelled or not.
    page.answer(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#)
        .await;
    page.answer(r#"[{"jsonrpc":"2.0","id":7,"result":{}}]"#)
        .await;
    page.marker(2).await;
    for agent in [&mut labelled, &mut legacy] {
        let got = until_marker(agent, 2).await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0]["method"], "notifications/tools/list_changed");
        assert_eq!(got[1], json!([{"jsonrpc": "2.0", "id": 7, "result": {}}]));
    }
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_empty_label_is_a_label_and_catches_unrecorded_replies() {
    // `client=` (empty) counts as identified, and the fail-closed target for
    // an unrecorded id is the empty string — so a subscriber labelled "" does
    // receive uncorrelated responses. Reproduced from the Node code.
    let (relay, addr, page) = setup("empty").await;
    let mut empty = Agent::sse(addr, "empty", TOKEN, Some("")).await;
    let mut named = Agent::sse(addr, "empty", TOKEN, Some("n")).await;
    page.answer(&result(json!(42), "stray")).await;
    page.marker(1).await;
    let got = until_marker(&mut empty, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["id"], 42);
    assert!(until_marker(&mut named, 1).await.is_empty());
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_recorded_per_session() {
    let relay = RelayServer::builder().start().await.unwrap();
    let addr = relay.addr();
    register(addr, "one1", TOKEN).await;
    register(addr, "two2", TOKEN).await;
    let mut page1 = Page::open(addr, "one1").await;
    let page2 = Page::open(addr, "two2").await;
    let mut a1 = Agent::sse(addr, "one1", TOKEN, Some("a")).await;
    let mut a2 = Agent::sse(addr, "two2", TOKEN, Some("a")).await;
    a1.post(&request(json!(5))).await;
    page1.next_request().await;
    // Session two never recorded id 5: its reply goes to nobody there.
    page2.answer(&result(json!(5), "two")).await;
    page1.answer(&result(json!(5), "one")).await;
    page1.marker(1).await;
    page2.marker(1).await;
    assert_eq!(until_marker(&mut a1, 1).await.len(), 1);
    assert!(until_marker(&mut a2, 1).await.is_empty());
    relay.shutdown().await;
}

// ---------------------------------------------------- the prefix (issue 20)

const HEALTH: &str = r#"{"ok":true,"service":"agent-integrations-relay"}"#;

/// Every route of a session, with the method it answers.
const SESSION_ROUTES: [(&str, &str); 5] = [
    ("POST", "inbox"),
    ("POST", "outbox"),
    ("GET", "events"),
    ("GET", "poll"),
    ("POST", "unregister"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_moves_every_route_and_nothing_else_is_served() {
    // As `human-plus relay --prefix agent-relay` builds it: no leading `/`.
    let relay = RelayServer::builder()
        .prefix("agent-relay")
        .start()
        .await
        .unwrap();
    let addr = relay.addr();
    assert_eq!(
        relay.base_url(),
        format!("http://{addr}/agent-relay"),
        "the base URL carries the prefix"
    );

    // Health: exactly `/`, `/healthz` and `{prefix}/`, as the Node relay.
    for path in ["/", "/healthz", "/agent-relay/"] {
        let r = get(addr, path).await;
        assert_eq!((r.status, r.text().as_str()), (200, HEALTH), "{path}");
        r.assert_no_cors();
    }

    // Every route under the prefix, over real sockets: a page and an agent
    // exchange a request and its reply.
    let r = post(
        addr,
        "/agent-relay/register",
        &json!({"session": "pref", "token": TOKEN}).to_string(),
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!({"ok": true})));
    r.assert_cors();
    let mut page = open_events(
        addr,
        &format!("/agent-relay/pref/events?token={TOKEN}&direction=inbound"),
    )
    .await;
    assert_eq!(page.status, 200);
    assert_eq!(page.next_block(SOON).await.as_deref(), Some("retry: 2000"));
    let first = get(
        addr,
        &format!("/agent-relay/pref/poll?token={TOKEN}&direction=outbound&wait=0&client=a"),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.text());
    let subscriber = first.json()["subscriber"].as_str().unwrap().to_owned();
    let joined = page.next_mcp(SOON).await.unwrap();
    assert_eq!(joined["method"], "notifications/peer_joined");
    let r = post(
        addr,
        &format!("/agent-relay/pref/inbox?token={TOKEN}&client=a"),
        &request(json!("a-1")).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(page.next_mcp(SOON).await.unwrap()["id"], "a-1");
    let r = post(
        addr,
        &format!("/agent-relay/pref/outbox?token={TOKEN}"),
        &result(json!("a-1"), "a"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = get(
        addr,
        &format!(
            "/agent-relay/pref/poll?token={TOKEN}&direction=outbound&wait=5000&subscriber={subscriber}"
        ),
    )
    .await;
    let frames = got.json()["frames"].clone();
    assert_eq!(frames.as_array().map(Vec::len), Some(1), "{frames}");
    let reply: Value = serde_json::from_str(frames[0].as_str().unwrap()).unwrap();
    assert_eq!(reply["result"]["for"], "a");
    // Preflights and wrong methods are answered on every prefixed route.
    for (method, route) in SESSION_ROUTES {
        let path = format!("/agent-relay/pref/{route}");
        let r = request_with(addr, "OPTIONS", &path, &[]).await;
        assert_eq!(r.status, 204, "OPTIONS {path}");
        r.assert_cors();
        let wrong = if method == "GET" { "POST" } else { "GET" };
        let r = request_with(addr, wrong, &path, &[]).await;
        assert_eq!(
            (r.status, r.json()),
            (405, json!({"error": "method_not_allowed"})),
            "{wrong} {path}"
        );
    }

    // Outside the prefix nothing else answers: the Node relay's 404, with
    // no CORS headers, for every method, the live session's routes too.
    let mut outside: Vec<String> = vec![
        "/register".into(),
        "/agent-relay".into(),
        "/agent-relay/healthz".into(),
        "/agent-relayx/register".into(),
        "/agent-relay-register".into(),
        "/x/agent-relay/register".into(),
        "/agent-relay/agent-relay/register".into(),
        "/AGENT-RELAY/register".into(),
        "/healthz?probe=1".into(),
        "/agent-relay/?probe=1".into(),
        "/config.json".into(),
        "/index.html".into(),
    ];
    for (_, route) in SESSION_ROUTES {
        outside.push(format!("/pref/{route}?token={TOKEN}"));
        outside.push(format!("/agent-relay/pref/{route}/?token={TOKEN}"));
    }
    for path in &outside {
        for method in ["GET", "POST", "OPTIONS"] {
            let r = common::request(
                addr,
                method,
                path,
                &[("Content-Type", "application/json")],
                br#"{"session":"outs","token":"0123456789abcdef0123"}"#,
            )
            .await;
            assert_eq!(
                (r.status, r.json()),
                (404, json!({"error": "not_found"})),
                "{method} {path}"
            );
            r.assert_no_cors();
        }
    }
    // A path the WHATWG parser resolves into the prefix is inside it, as on
    // the Node relay (its `new URL` resolves `..` the same way).
    let r = get(
        addr,
        &format!("/x/../agent-relay/pref/poll?token={TOKEN}&direction=inbound&wait=0"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Nothing outside the prefix registered a session or touched the live one.
    assert_eq!(relay.sessions(), vec!["pref".to_owned()]);
    let r = post(
        addr,
        &format!("/agent-relay/pref/unregister?token={TOKEN}"),
        "",
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!({"ok": true})));
    assert!(relay.sessions().is_empty());
    relay.shutdown().await;
}

/// A request with extra headers and no body.
async fn request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> RawResponse {
    common::request(addr, method, path, headers, b"").await
}

// ------------------------------------ the token in a header (issue 20)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_may_come_in_a_bearer_header_on_every_route_that_reads_it() {
    let relay = RelayServer::builder()
        .prefix("/agent-relay")
        .cors(human_plus_relay::CorsPolicy::parse("http://127.0.0.1:9").unwrap())
        .start()
        .await
        .unwrap();
    let addr = relay.addr();
    let bearer = format!("Bearer {TOKEN}");
    let auth: &[(&str, &str)] = &[("Authorization", &bearer)];
    let wrong: &[(&str, &str)] = &[("Authorization", "Bearer wrongwrongwrongwrong")];
    assert_eq!(
        post(
            addr,
            "/agent-relay/register",
            &json!({"session": "hdr1", "token": TOKEN}).to_string()
        )
        .await
        .status,
        200
    );

    // The page's receive legs with no token in their URL.
    let mut page = RawReader::send(
        TcpStream::connect(addr).await.unwrap(),
        addr,
        "GET",
        "/agent-relay/hdr1/events?direction=inbound",
        auth,
        b"",
    )
    .await
    .unwrap();
    assert_eq!(page.head(SOON).await.unwrap().0, 200);
    assert_eq!(page.next_block(SOON).await.as_deref(), Some("retry: 2000"));
    let r = request_with(
        addr,
        "GET",
        "/agent-relay/hdr1/poll?direction=inbound&wait=0",
        auth,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // An agent's leg and its request, the token in the header.
    let r = request_with(
        addr,
        "GET",
        "/agent-relay/hdr1/poll?direction=outbound&wait=0&client=h",
        auth,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let subscriber = r.json()["subscriber"].as_str().unwrap().to_owned();
    let mut headers = auth.to_vec();
    headers.push(("Content-Type", "application/json"));
    let r = common::request(
        addr,
        "POST",
        "/agent-relay/hdr1/inbox?client=h",
        &headers,
        request(json!("h-1")).to_string().as_bytes(),
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!({"ok": true})));
    let got = loop {
        let frame = page.next_mcp(SOON).await.unwrap();
        if frame["id"] == "h-1" {
            break frame;
        }
    };
    assert_eq!(got["method"], "tools/list");
    let r = common::request(
        addr,
        "POST",
        "/agent-relay/hdr1/outbox",
        &headers,
        result(json!("h-1"), "h").as_bytes(),
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!({"ok": true})));
    let r = request_with(
        addr,
        "GET",
        &format!("/agent-relay/hdr1/poll?direction=outbound&wait=5000&subscriber={subscriber}"),
        auth,
    )
    .await;
    assert!(r.text().contains("h-1"), "{}", r.text());

    // The status rules hold for the header's token: wrong on a live
    // session 401 (never 410), any token on an unknown session 410.
    for (method, route) in SESSION_ROUTES {
        if route == "unregister" {
            continue;
        }
        let path = format!("/agent-relay/hdr1/{route}?direction=outbound&wait=0");
        let r = common::request(
            addr,
            method,
            &path,
            wrong,
            br#"{"jsonrpc":"2.0","method":"x"}"#,
        )
        .await;
        assert_eq!(r.status, 401, "{method} {path}");
        let path = format!("/agent-relay/nosuch/{route}?direction=outbound&wait=0");
        let r = common::request(
            addr,
            method,
            &path,
            auth,
            br#"{"jsonrpc":"2.0","method":"x"}"#,
        )
        .await;
        assert_eq!(r.status, 410, "{method} {path}");
    }
    let r = request_with(addr, "POST", "/agent-relay/hdr1/unregister", wrong).await;
    assert_eq!(
        (r.status, r.json()),
        (401, json!({"error": "invalid_token"}))
    );
    // The query's token, when there is one, is the one read.
    let r = request_with(
        addr,
        "GET",
        "/agent-relay/hdr1/poll?token=wrongwrongwrongwrong&direction=inbound&wait=0",
        auth,
    )
    .await;
    assert_eq!(r.status, 401);
    // Only the Bearer scheme.
    let basic = format!("Basic {TOKEN}");
    let r = request_with(
        addr,
        "GET",
        "/agent-relay/hdr1/poll?direction=inbound&wait=0",
        &[("Authorization", &basic)],
    )
    .await;
    assert_eq!(r.status, 401);

    // A page on a listed origin may send the header: the preflight says so.
    let r = request_with(
        addr,
        "OPTIONS",
        "/agent-relay/hdr1/poll",
        &[
            ("Origin", "http://127.0.0.1:9"),
            ("Access-Control-Request-Method", "GET"),
            ("Access-Control-Request-Headers", "authorization"),
        ],
    )
    .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://127.0.0.1:9")
    );
    assert!(
        r.header("access-control-allow-headers")
            .unwrap()
            .split(", ")
            .any(|h| h == "authorization"),
        "{r:?}"
    );

    // Unregister with the header ends the session.
    let r = request_with(addr, "POST", "/agent-relay/hdr1/unregister", auth).await;
    assert_eq!((r.status, r.json()), (200, json!({"ok": true})));
    assert!(relay.sessions().is_empty());
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_bearer_auth_the_header_is_ignored_as_on_the_node_relay() {
    let relay = RelayServer::builder()
        .bearer_auth(false)
        .start()
        .await
        .unwrap();
    let addr = relay.addr();
    assert_eq!(register(addr, "hdr2", TOKEN).await.status, 200);
    let bearer = format!("Bearer {TOKEN}");
    let auth: &[(&str, &str)] = &[("Authorization", &bearer)];
    for (method, route) in SESSION_ROUTES {
        let path = format!("/hdr2/{route}?direction=inbound&wait=0");
        let r = common::request(
            addr,
            method,
            &path,
            auth,
            br#"{"jsonrpc":"2.0","method":"x"}"#,
        )
        .await;
        assert_eq!(r.status, 401, "{method} {path}: {}", r.text());
    }
    // The query still works, and the session is still there.
    let r = get(
        addr,
        &format!("/hdr2/poll?token={TOKEN}&direction=inbound&wait=0"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(relay.sessions(), vec!["hdr2".to_owned()]);
    relay.shutdown().await;
}
