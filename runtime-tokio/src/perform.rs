//! Performing one [`HttpRequest`] of the core and reporting what happened
//! as [`HttpEvent`]s: the head once, body chunks as they arrive (streamed,
//! which the SSE leg needs), then the end, or a failure at any point.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST, HeaderName, HeaderValue};
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use human_plus_core::{
    Error, HttpEvent, HttpMethod, HttpRequest, Leg, RelayEndpoint, RequestId, TransportErrorKind,
};
use tokio::sync::mpsc;

use human_plus_runtime::{BodyReport, RequestFailure as Failure};

use crate::clock::now;
use crate::connect::{Connector, RELAY_HEAD_MAX, RELAY_READ_BUFFER, transport};

/// One request's event, with the time its reader received it. Boxed: a
/// channel allocates its slots 32 at a time, and an unboxed event (104
/// bytes) made every operation's channel hold 3.3 KiB before its first
/// event; boxed, a block is 256 bytes and each event its own small
/// allocation, freed when the driver takes it.
pub(crate) type Event = Box<(RequestId, HttpEvent, std::time::Instant)>;

/// Where a request's events go: `(request, event)` into the operation's
/// channel.
pub(crate) type EventSender = mpsc::Sender<Event>;

/// The request's reporter. A send fails only when the operation is gone,
/// and then there is nobody left to tell.
struct Events {
    id: RequestId,
    tx: EventSender,
}

impl Events {
    /// Reports `event`; false when the operation no longer listens.
    async fn send(&self, event: HttpEvent) -> bool {
        self.tx
            .send(Box::new((self.id, event, now())))
            .await
            .is_ok()
    }
}

/// Performs `req` against `endpoint` and reports its events, bounded by the
/// request's deadline. Never panics on any network input.
pub(crate) async fn perform(
    connector: Arc<Connector>,
    endpoint: Arc<RelayEndpoint>,
    req: HttpRequest,
    tx: EventSender,
) {
    let events = Events { id: req.id, tx };
    human_plus_runtime::log_request(&req);
    let deadline = tokio::time::Instant::from_std(req.deadline);
    let run = exchange(&connector, &endpoint, req, &events);
    match tokio::time::timeout_at(deadline, run).await {
        Ok(Ok(())) => {}
        Ok(Err(failure)) => {
            let event = failure.into_event();
            tracing::debug!(request = %events.id, event = ?event, "relay request failed");
            events.send(event).await;
        }
        // Past its deadline the core no longer cares about the request (its
        // own timer, at that same instant, decides the exchange): stop, and
        // report nothing that could race the core's timeout.
        Err(_) => tracing::debug!(request = %events.id, "relay request reached its deadline"),
    }
}

/// Takes a kept connection (or opens one), sends, streams the response,
/// and keeps the connection again once its response was read to the end.
async fn exchange(
    connector: &Connector,
    endpoint: &RelayEndpoint,
    req: HttpRequest,
    events: &Events,
) -> Result<(), Failure> {
    let id = req.id;
    let fresh = req.fresh;
    // A POST is read to its end even when nobody listens any more (its
    // exchange released it): its connection is then kept. A receive leg
    // stops as soon as nobody listens.
    let leg = req.leg;
    let finish_quietly = leg == Leg::Post;
    let request = build(endpoint, req).map_err(Failure::before_writing)?;
    let key = endpoint.connection_key();
    let kept = if fresh { None } else { connector.take(&key) };
    let on_kept = kept.is_some();
    let (mut connection, created) = match kept {
        Some(kept) => kept,
        // Opening is boxed: its future (resolving, dialling, the proxy's
        // CONNECT, TLS, the handshake) is the largest state of a request,
        // and inline it sized every request's task for the whole exchange.
        None => (
            Box::pin(connector.open(endpoint))
                .await
                .map_err(Failure::before_writing)?,
            now(),
        ),
    };
    tracing::debug!(request = %id, kept = on_kept, "relay connection");
    let response = match connection.sender.try_send_request(request).await {
        Ok(response) => response,
        Err(mut e) => {
            let never_left = e.take_message().is_some();
            let e = e.into_error();
            if e.is_parse_too_large() {
                return Err(Failure::Lost(head_too_large(connector)));
            }
            let error = io_error("sending the request", &e);
            return Err(Failure::sending(error, never_left, on_kept));
        }
    };
    // Only the status and the body are kept: the head's parts (headers,
    // extensions) are not held while the driver takes the event.
    let status = response.status().as_u16();
    let mut body = response.into_body();
    tracing::debug!(request = %id, status, "relay response head");
    if !events.send(HttpEvent::Head(status)).await && !finish_quietly {
        return Ok(());
    }
    let mut report = BodyReport::for_leg(leg);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Failure::Lost(io_error("reading the response body", &e)))?;
        if let Ok(data) = frame.into_data()
            && !data.is_empty()
            && let Some(bytes) = report.chunk(&data)
            && !events.send(HttpEvent::Body(bytes)).await
            && !finish_quietly
        {
            return Ok(());
        }
    }
    // Read to its end: the connection serves the next request once hyper
    // says it can (a relay that closes it after the response says no). It
    // is kept before the core hears the answer and sends its next request.
    let ready = tokio::time::timeout(READY_WAIT, connection.sender.ready()).await;
    if matches!(ready, Ok(Ok(()))) {
        connector.put(key, connection, created);
    }
    if let Some(bytes) = report.end() {
        events.send(HttpEvent::Body(bytes)).await;
    }
    events.send(HttpEvent::End).await;
    Ok(())
}

/// How long a connection whose response ended may take to be ready again
/// before it is dropped instead of kept.
const READY_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// A response head larger than the connection's read buffer. The first
/// one raises the buffer of every connection opened from then on; the
/// exchange it arrived on is lost either way (its request was sent).
fn head_too_large(connector: &Connector) -> Error {
    let message = if connector.head_did_not_fit() {
        format!(
            "the relay's response head is larger than {} KiB; connections opened from now on read heads of up to {} KiB",
            RELAY_READ_BUFFER / 1024,
            RELAY_HEAD_MAX / 1024
        )
    } else {
        format!(
            "the relay's response head is larger than this connection's read buffer (connections opened since the first such head read heads of up to {} KiB)",
            RELAY_HEAD_MAX / 1024
        )
    };
    transport(TransportErrorKind::Io, message)
}

fn io_error(doing: &str, e: &hyper::Error) -> Error {
    transport(TransportErrorKind::Io, format!("{doing}: {e}"))
}

/// The HTTP/1.1 request: origin-form target from the URL (the only place
/// the secret URL is used), the `Host` header, the core's headers, and the
/// body with its length on POST.
fn build(endpoint: &RelayEndpoint, req: HttpRequest) -> Result<Request<Full<Bytes>>, Error> {
    let malformed = || {
        transport(
            TransportErrorKind::Io,
            "the relay request could not be encoded as HTTP/1.1",
        )
    };
    let uri: http::Uri = req.url.expose().parse().map_err(|_| malformed())?;
    let target = uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_owned();
    let method = match req.method {
        HttpMethod::Get => Method::GET,
        HttpMethod::Post => Method::POST,
    };
    let is_post = method == Method::POST;
    let host = HeaderValue::from_str(endpoint.host_header()).map_err(|_| malformed())?;
    let mut builder = Request::builder()
        .method(method)
        .uri(target)
        .header(HOST, host);
    for (name, value) in &req.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| malformed())?;
        let mut value = HeaderValue::from_str(value).map_err(|_| malformed())?;
        if name == http::header::AUTHORIZATION {
            value.set_sensitive(true);
        }
        builder = builder.header(name, value);
    }
    let body = req.body.unwrap_or_default();
    if is_post {
        builder = builder.header(CONTENT_LENGTH, body.len());
    }
    builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|_| malformed())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use human_plus_core::{EgressPolicy, PoolConfig, SurfaceInvitation};
    use human_plus_runtime::{NetSettings, StaticResolver};
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A relay stand-in on a real socket: answers every request with a 200
    /// whose head carries `filler` bytes of headers, then `ok`.
    async fn relay_with_head(filler: usize) -> u16 {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut head = String::from("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n");
        let mut i = 0;
        while head.len() < filler {
            head.push_str(&format!("set-cookie: c{i}={}\r\n", "x".repeat(100)));
            i += 1;
        }
        head.push_str("content-length: 2\r\n\r\nok");
        let answer: &'static str = Box::leak(head.into_boxed_str());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 1024];
                    loop {
                        let Ok(n) = socket.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        // One small POST per request: its head and a body
                        // of `{}`.
                        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n")
                            && seen.len() >= end + 4 + 2
                        {
                            seen.drain(..end + 4 + 2);
                            if socket.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        port
    }

    fn connector() -> Arc<Connector> {
        Arc::new(Connector::new(NetSettings {
            tls: Err(transport(TransportErrorKind::Tls, "no TLS in this test")),
            resolver: Arc::new(StaticResolver::new()),
            connect_timeout: Duration::from_secs(5),
            pool: PoolConfig::default(),
        }))
    }

    fn endpoint(port: u16) -> Arc<RelayEndpoint> {
        let url = format!("http://127.0.0.1:{port}");
        let inv =
            SurfaceInvitation::new_insecure_loopback(url, "demo_001", "0123456789abcdef", "s", "a")
                .unwrap();
        let policy = EgressPolicy::new(["127.0.0.1"])
            .allow_ports([port])
            .allow_unverified_egress(true);
        Arc::new(RelayEndpoint::new(&inv, "c", &policy).unwrap())
    }

    /// Performs one POST and collects its events up to the last.
    async fn post(connector: &Arc<Connector>, endpoint: &Arc<RelayEndpoint>) -> Vec<HttpEvent> {
        let req = HttpRequest {
            id: RequestId(1),
            method: HttpMethod::Post,
            leg: Leg::Post,
            url: endpoint.inbox_url(),
            headers: Vec::new(),
            body: Some(b"{}".to_vec()),
            deadline: std::time::Instant::now() + Duration::from_secs(10),
            fresh: false,
        };
        let (tx, mut rx) = mpsc::channel(16);
        perform(Arc::clone(connector), Arc::clone(endpoint), req, tx).await;
        let mut events = Vec::new();
        while let Ok(boxed) = rx.try_recv() {
            events.push(boxed.1);
        }
        events
    }

    fn is_ok_answer(events: &[HttpEvent]) -> bool {
        matches!(events.first(), Some(HttpEvent::Head(200)))
            && matches!(events.last(), Some(HttpEvent::End))
    }

    fn failure(events: &[HttpEvent]) -> String {
        match events {
            [HttpEvent::Failed(e)] => e.to_string(),
            other => panic!("expected one failure, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_small_head_is_read_with_the_exact_buffer() {
        let (connector, endpoint) = (connector(), endpoint(relay_with_head(512).await));
        assert!(is_ok_answer(&post(&connector, &endpoint).await));
        assert!(!connector.large_heads.load(Ordering::Relaxed));
    }

    /// A relay behind a proxy that adds 6 KiB of headers: the first head
    /// does not fit in the 4 KiB buffer and its exchange is lost, with a
    /// message that says so; every connection opened after it reads it.
    #[tokio::test]
    async fn a_head_over_4_kib_fails_once_then_is_read() {
        let (connector, endpoint) = (connector(), endpoint(relay_with_head(6 * 1024).await));
        let first = failure(&post(&connector, &endpoint).await);
        assert!(first.contains("larger than 4 KiB"), "{first}");
        for _ in 0..3 {
            let events = post(&connector, &endpoint).await;
            assert!(is_ok_answer(&events), "{events:?}");
        }
        // The large-head connection was kept and serves the next request.
        assert_eq!(connector.pool.lock().unwrap().idle_count(), 1);
    }

    /// The bound: a head over 64 KiB is never read, whatever came before.
    #[tokio::test]
    async fn a_head_over_the_bound_is_refused() {
        let (connector, endpoint) = (connector(), endpoint(relay_with_head(70 * 1024).await));
        failure(&post(&connector, &endpoint).await);
        let second = failure(&post(&connector, &endpoint).await);
        assert!(second.contains("up to 64 KiB"), "{second}");
    }
}
