//! HTTP handlers: the Node relay's router and route handlers, byte for byte
//! where it matters (status codes, error bodies, key order, headers).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, HeaderMap, HeaderValue, ORIGIN};
use hyper::http::response::Builder;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;
use tokio::time::Instant;

use crate::body::RelayBody;
use crate::broker::{Denied, Direction, Subscriber, lock};
use crate::faults::Leg;
use crate::shared::Shared;
use crate::sse;
use crate::wire::{Query, is_session_id, js_parse_int, json_string, normalize_path};

/// Default park window of a poll, in ms.
const POLL_DEFAULT_WAIT_MS: u64 = 20_000;
/// Longest park window of a poll, in ms.
const POLL_MAX_WAIT_MS: i128 = 25_000;

/// The error that makes hyper drop the connection without a response:
/// the Node relay's body-cap trap (it destroys the socket), or a request
/// body that broke off mid-read.
#[derive(Debug)]
pub(crate) struct DropConnection(&'static str);

impl std::fmt::Display for DropConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for DropConnection {}

type Answer = Result<Response<RelayBody>, DropConnection>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Inbox,
    Outbox,
    Events,
    Poll,
    Unregister,
}

/// Routes one request.
pub(crate) async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Answer {
    let raw_url = req.uri().to_string();
    if req.method() == Method::GET
        && (raw_url == "/" || raw_url == "/healthz" || raw_url == format!("{}/", shared.prefix))
    {
        return Ok(plain(
            StatusCode::OK,
            "{\"ok\":true,\"service\":\"agent-integrations-relay\"}",
        ));
    }
    let path = normalize_path(req.uri().path());
    let Some(rest) = path
        .strip_prefix(shared.prefix.as_str())
        .filter(|rest| rest.starts_with('/'))
    else {
        return Ok(not_found());
    };
    if rest == "/register" {
        return register(&shared, req).await;
    }
    let Some((session, route)) = split_route(rest) else {
        return Ok(not_found());
    };
    let session = session.to_owned();
    match route {
        Route::Inbox => post_frame(&shared, req, &session, Direction::Inbound).await,
        Route::Outbox => post_frame(&shared, req, &session, Direction::Outbound).await,
        Route::Events => events(&shared, req, &session).await,
        Route::Poll => poll(&shared, req, &session).await,
        Route::Unregister => Ok(unregister(&shared, &req, &session)),
    }
}

/// `^/([A-Za-z0-9_-]{4,64})/(inbox|outbox|events|poll|unregister)$`
fn split_route(rest: &str) -> Option<(&str, Route)> {
    let (session, route) = rest.strip_prefix('/')?.split_once('/')?;
    if !is_session_id(session) {
        return None;
    }
    let route = match route {
        "inbox" => Route::Inbox,
        "outbox" => Route::Outbox,
        "events" => Route::Events,
        "poll" => Route::Poll,
        "unregister" => Route::Unregister,
        _ => return None,
    };
    Some((session, route))
}

// ------------------------------------------------------------------ routes

async fn register(shared: &Shared, req: Request<Incoming>) -> Answer {
    let cors = Cors::of(shared, &req);
    if req.method() == Method::OPTIONS {
        return Ok(cors.no_content());
    }
    if req.method() != Method::POST {
        return Ok(cors.method_not_allowed());
    }
    let body = match read_body(shared, req).await {
        Ok(body) => body,
        Err(refusal) => return refusal.answer(&cors),
    };
    let text = String::from_utf8_lossy(&body);
    let Ok(parsed) = serde_json::from_str::<Value>(&text) else {
        return Ok(cors.json(StatusCode::BAD_REQUEST, error_body("invalid_json")));
    };
    let (Some(session), Some(token)) = (
        parsed.get("session").and_then(Value::as_str),
        parsed.get("token").and_then(Value::as_str),
    ) else {
        return Ok(cors.json(StatusCode::BAD_REQUEST, error_body("missing_fields")));
    };
    let result = lock(&shared.broker).register(session, token, Instant::now());
    Ok(match result {
        Ok(()) => cors.json(StatusCode::OK, "{\"ok\":true}".into()),
        Err(reason) => cors.json(StatusCode::UNAUTHORIZED, error_body(reason)),
    })
}

async fn post_frame(
    shared: &Shared,
    req: Request<Incoming>,
    session: &str,
    direction: Direction,
) -> Answer {
    let cors = Cors::of(shared, &req);
    if req.method() == Method::OPTIONS {
        return Ok(cors.no_content());
    }
    if req.method() != Method::POST {
        return Ok(cors.method_not_allowed());
    }
    let leg = match direction {
        Direction::Inbound => Leg::Inbox,
        Direction::Outbound => Leg::Outbox,
    };
    if let Some(status) = apply_faults(shared, session, leg, direction).await {
        return Ok(cors.injected(status));
    }
    let query = Query::parse(req.uri().query());
    let token = token_of(shared, &query, req.headers()).to_owned();
    let client = query.get("client").map(str::to_owned);
    let body = match read_body(shared, req).await {
        Ok(body) => body,
        Err(refusal) => return refusal.answer(&cors),
    };
    let payload: Arc<str> = Arc::from(String::from_utf8_lossy(&body).as_ref());
    let now = Instant::now();
    let mut broker = lock(&shared.broker);
    if broker.check(session, &token, now) == Err(Denied::SessionGone) {
        return Ok(cors.json(StatusCode::GONE, error_body("session_gone")));
    }
    let ok = match direction {
        Direction::Inbound => broker.inbox(session, &token, &payload, client.as_deref(), now),
        Direction::Outbound => broker.outbox(session, &token, &payload, now),
    };
    let lose_answer = ok
        && direction == Direction::Inbound
        && broker.faults_mut(session).take_lose_inbox_answer();
    drop(broker);
    if lose_answer {
        return Err(DropConnection("injected fault: the inbox answer is lost"));
    }
    Ok(if ok {
        cors.json(StatusCode::OK, "{\"ok\":true}".into())
    } else {
        cors.json(
            StatusCode::UNAUTHORIZED,
            error_body("invalid_token_or_frame"),
        )
    })
}

fn unregister(shared: &Shared, req: &Request<Incoming>, session: &str) -> Response<RelayBody> {
    let cors = Cors::of(shared, req);
    if req.method() == Method::OPTIONS {
        return cors.no_content();
    }
    if req.method() != Method::POST {
        return cors.method_not_allowed();
    }
    let query = Query::parse(req.uri().query());
    let token = token_of(shared, &query, req.headers());
    let now = Instant::now();
    let mut broker = lock(&shared.broker);
    if broker.check(session, token, now) == Err(Denied::SessionGone) {
        return cors.json(StatusCode::OK, "{\"ok\":true,\"alreadyGone\":true}".into());
    }
    if broker.unregister(session, token, now) {
        cors.json(StatusCode::OK, "{\"ok\":true}".into())
    } else {
        cors.json(StatusCode::UNAUTHORIZED, error_body("invalid_token"))
    }
}

async fn events(shared: &Arc<Shared>, req: Request<Incoming>, session: &str) -> Answer {
    let cors = Cors::of(shared, &req);
    if req.method() == Method::OPTIONS {
        return Ok(cors.no_content());
    }
    if req.method() != Method::GET {
        return Ok(cors.method_not_allowed());
    }
    let query = Query::parse(req.uri().query());
    if let Some(status) = apply_faults(
        shared,
        session,
        Leg::Events,
        Direction::from_query(query.get("direction")),
    )
    .await
    {
        return Ok(cors.injected(status));
    }
    let token = token_of(shared, &query, req.headers());
    let direction = Direction::from_query(query.get("direction"));
    let subscribed = lock(&shared.broker).subscribe(
        session,
        token,
        direction,
        query.get("client"),
        Instant::now(),
    );
    let sub = match subscribed {
        Ok(sub) => sub,
        Err(denied) => {
            let status = match denied {
                Denied::SessionGone => StatusCode::GONE,
                Denied::InvalidToken => StatusCode::UNAUTHORIZED,
            };
            let body = format!("event: error\ndata: {}\n\n", denied.reason());
            return Ok(finish(
                cors.builder(status)
                    .header("content-type", "text/event-stream"),
                RelayBody::full(body),
            ));
        }
    };
    let body = sse::stream(Arc::clone(shared), session.to_owned(), sub);
    Ok(finish(
        cors.builder(StatusCode::OK)
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .header("connection", "keep-alive")
            .header("x-accel-buffering", "no"),
        body,
    ))
}

async fn poll(shared: &Shared, req: Request<Incoming>, session: &str) -> Answer {
    let cors = Cors::of(shared, &req);
    if req.method() == Method::OPTIONS {
        return Ok(cors.no_content());
    }
    if req.method() != Method::GET {
        return Ok(cors.method_not_allowed());
    }
    let query = Query::parse(req.uri().query());
    if let Some(status) = apply_faults(
        shared,
        session,
        Leg::Poll,
        Direction::from_query(query.get("direction")),
    )
    .await
    {
        return Ok(cors.injected(status));
    }
    let direction = Direction::from_query(query.get("direction"));
    let attached = lock(&shared.broker).poll_attach(
        session,
        token_of(shared, &query, req.headers()),
        direction,
        query.get("subscriber"),
        query.get("client"),
        Instant::now(),
    );
    let (sub, _created) = match attached {
        Ok(attached) => attached,
        Err(denied) => {
            let status = match denied {
                Denied::SessionGone => StatusCode::GONE,
                Denied::InvalidToken => StatusCode::UNAUTHORIZED,
            };
            return Ok(cors.json(status, error_body(denied.reason())));
        }
    };
    let frames = park(&sub, poll_wait_ms(query.get("wait"))).await;
    let mut body = String::with_capacity(48 + frames.iter().map(|f| f.len() + 8).sum::<usize>());
    body.push_str("{\"subscriber\":");
    body.push_str(&json_string(&sub.id));
    body.push_str(",\"frames\":[");
    for (i, frame) in frames.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&json_string(frame));
    }
    body.push_str("]}");
    Ok(finish(
        cors.builder(StatusCode::OK)
            .header("cache-control", "no-store")
            .header("content-type", "application/json"),
        RelayBody::full(body),
    ))
}

/// `pollWaitMs`: absent → 20 000; not a number → 0; clamped to 0..25 000.
pub(crate) fn poll_wait_ms(raw: Option<&str>) -> u64 {
    match raw {
        None => POLL_DEFAULT_WAIT_MS,
        Some(raw) => js_parse_int(raw)
            .map(|n| u64::try_from(n.clamp(0, POLL_MAX_WAIT_MS)).unwrap_or(0))
            .unwrap_or(0),
    }
}

/// Decrements the parked count (and refreshes liveness) however the park
/// ends, including the poll's future being dropped on a client disconnect.
struct Parked<'a>(&'a Subscriber);

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        st.parked = st.parked.saturating_sub(1);
        st.last_seen = Instant::now();
    }
}

/// Parks up to `wait_ms` for a frame, then takes everything queued. A poll
/// whose future is dropped while parked takes nothing.
async fn park(sub: &Subscriber, wait_ms: u64) -> Vec<Arc<str>> {
    {
        let mut st = lock(&sub.state);
        st.parked += 1;
        st.last_seen = Instant::now();
    }
    let _parked = Parked(sub);
    let notified = sub.notify.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    let should_wait = {
        let st = lock(&sub.state);
        st.queue.is_empty() && wait_ms > 0 && !st.ended
    };
    if should_wait {
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
        }
    }
    lock(&sub.state).queue.drain(..).collect()
}

// ----------------------------------------------------------------- helpers

/// The request's token: the query's `token` when it has one that is not
/// empty (all the Node relay reads), else, when the relay accepts it, the
/// `Authorization: Bearer` header's; else empty (a 401 or 410 follows).
fn token_of<'a>(shared: &Shared, query: &'a Query, headers: &'a HeaderMap) -> &'a str {
    match query.get("token") {
        Some(token) if !token.is_empty() => token,
        _ if shared.bearer_auth => bearer(headers).unwrap_or(""),
        _ => "",
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme
/// case-insensitive, as RFC 9110 has it); `None` for any other header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim_start_matches(' ');
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
        .then_some(token)
}

/// Delay and status faults for `leg` (read by `direction`); `Some(status)`
/// answers at once.
async fn apply_faults(
    shared: &Shared,
    session: &str,
    leg: Leg,
    direction: Direction,
) -> Option<u16> {
    let (delay, status) = {
        let mut broker = lock(&shared.broker);
        let faults = broker.faults_mut(session);
        if !faults.hits(leg, direction == Direction::Inbound) {
            return None;
        }
        (faults.delay_for(leg), faults.take_status(leg))
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    status
}

enum BodyRefusal {
    TooLarge,
    Broken,
}

impl BodyRefusal {
    fn answer(self, cors: &Cors) -> Answer {
        match self {
            BodyRefusal::TooLarge if cors.answer_413 => Ok(finish(
                cors.builder(StatusCode::PAYLOAD_TOO_LARGE)
                    .header("content-type", "application/json")
                    .header("connection", "close"),
                RelayBody::full(error_body("payload_too_large")),
            )),
            BodyRefusal::TooLarge => Err(DropConnection("request body over the cap")),
            BodyRefusal::Broken => Err(DropConnection("request body broke off")),
        }
    }
}

async fn read_body(shared: &Shared, req: Request<Incoming>) -> Result<Bytes, BodyRefusal> {
    let mut body = req.into_body();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyRefusal::Broken)?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > shared.body_limit {
                return Err(BodyRefusal::TooLarge);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buf))
}

fn error_body(reason: &str) -> String {
    format!("{{\"error\":{}}}", json_string(reason))
}

fn finish(builder: Builder, body: RelayBody) -> Response<RelayBody> {
    builder.body(body).unwrap_or_else(|_| {
        let mut fallback = Response::new(RelayBody::empty());
        *fallback.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        fallback
    })
}

/// A JSON response without CORS headers (health, and the router's 404).
fn plain(status: StatusCode, body: &'static str) -> Response<RelayBody> {
    finish(
        Response::builder()
            .status(status)
            .header("content-type", "application/json"),
        RelayBody::full(body),
    )
}

fn not_found() -> Response<RelayBody> {
    plain(StatusCode::NOT_FOUND, "{\"error\":\"not_found\"}")
}

/// The CORS headers a route handler sets before anything else.
struct Cors {
    allow_origin: Option<HeaderValue>,
    vary: bool,
    answer_413: bool,
}

impl Cors {
    fn of(shared: &Shared, req: &Request<Incoming>) -> Cors {
        let origin = req.headers().get(ORIGIN).and_then(|v| v.to_str().ok());
        Cors {
            allow_origin: shared
                .cors
                .allow_origin(origin)
                .and_then(|o| HeaderValue::from_str(o).ok()),
            vary: matches!(shared.cors, crate::cors::CorsPolicy::List(_)),
            answer_413: shared.answer_413,
        }
    }

    fn builder(&self, status: StatusCode) -> Builder {
        let mut b = Response::builder().status(status);
        if self.vary {
            b = b.header("vary", "Origin");
        }
        if let Some(origin) = &self.allow_origin {
            b = b.header("access-control-allow-origin", origin.clone());
        }
        b.header("access-control-allow-methods", "GET, POST, OPTIONS")
            .header(
                "access-control-allow-headers",
                "content-type, x-csrf-token, accept, authorization",
            )
            .header("access-control-max-age", "86400")
    }

    fn json(&self, status: StatusCode, body: String) -> Response<RelayBody> {
        finish(
            self.builder(status)
                .header("content-type", "application/json"),
            RelayBody::full(body),
        )
    }

    fn no_content(&self) -> Response<RelayBody> {
        finish(self.builder(StatusCode::NO_CONTENT), RelayBody::empty())
    }

    fn method_not_allowed(&self) -> Response<RelayBody> {
        self.json(
            StatusCode::METHOD_NOT_ALLOWED,
            error_body("method_not_allowed"),
        )
    }

    fn injected(&self, status: u16) -> Response<RelayBody> {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        self.json(status, error_body("injected_fault"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_is_clamped_like_poll_wait_ms() {
        assert_eq!(poll_wait_ms(None), 20_000);
        assert_eq!(poll_wait_ms(Some("1500")), 1500);
        assert_eq!(poll_wait_ms(Some("abc")), 0);
        assert_eq!(poll_wait_ms(Some("")), 0);
        assert_eq!(poll_wait_ms(Some("-10")), 0);
        assert_eq!(poll_wait_ms(Some("99999")), 25_000);
        assert_eq!(poll_wait_ms(Some("5.9")), 5);
    }

    #[test]
    fn bearer_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        for (value, token) in [
            ("Bearer abc", Some("abc")),
            ("bearer  abc", Some("abc")),
            ("BEARER abc ", Some("abc")),
            ("Basic abc", None),
            ("Bearer", None),
            ("Bearer ", None),
            ("Bearer a b", None),
            ("Bearerabc", None),
        ] {
            h.insert(AUTHORIZATION, HeaderValue::from_static(value));
            assert_eq!(bearer(&h), token, "{value:?}");
        }
    }

    #[test]
    fn routes_split_like_the_node_regex() {
        assert!(split_route("/abcd/inbox").is_some());
        assert!(split_route("/abcd/inbox/").is_none());
        assert!(split_route("/abc/inbox").is_none());
        assert!(split_route("/abcd/other").is_none());
        assert!(split_route("/abcd").is_none());
        assert!(split_route("/ab.d/poll").is_none());
    }
}
