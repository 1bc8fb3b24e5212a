//! Performing one [`HttpRequest`] of the core over async-net, futures-rustls
//! and hyper's HTTP/1.1 connection, reporting what happens as
//! [`HttpEvent`]s.
//!
//! This is where the egress policy meets the socket: the relay's host is
//! resolved (or taken as the URL's literal address), the answer is vetted by
//! [`RelayEndpoint::vet_resolved`], and only a vetted address is connected
//! to, directly or as the target of the egress proxy's CONNECT tunnel.

use std::collections::VecDeque;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_io::Timer;
use async_net::TcpStream;
use bytes::Bytes;
use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use http_body_util::{BodyExt, Full};
use human_plus_core::{
    Error, HttpEvent, HttpMethod, HttpRequest, PROXY_CONNECT_MAX_HEAD_BYTES, ProxyAddr,
    ProxyConnectResponse, RelayEndpoint, RequestId, TransportError, TransportErrorKind,
};
use rustls_pki_types::ServerName;
use smol_hyper::rt::FuturesIo;

use crate::resolve::Resolve;

/// What every request of a manager shares.
pub(crate) struct Context {
    /// The rustls configuration, or why it could not be built.
    pub(crate) tls: Result<Arc<rustls::ClientConfig>, Error>,
    pub(crate) resolver: Arc<dyn Resolve>,
    pub(crate) connect_timeout: Duration,
}

/// The events of every request of one operation, in arrival order. Only
/// the operation's own driver polls the request futures, so a push never
/// needs to wake anyone: the driver looks at the queue right after polling.
#[derive(Clone, Default)]
pub(crate) struct EventQueue {
    inner: Arc<Mutex<VecDeque<(RequestId, HttpEvent)>>>,
}

impl EventQueue {
    fn lock(&self) -> MutexGuard<'_, VecDeque<(RequestId, HttpEvent)>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn push(&self, id: RequestId, event: HttpEvent) {
        self.lock().push_back((id, event));
    }

    pub(crate) fn pop(&self) -> Option<(RequestId, HttpEvent)> {
        self.lock().pop_front()
    }

    /// Forgets the queued events of a cancelled request.
    pub(crate) fn forget(&self, id: RequestId) {
        self.lock().retain(|(r, _)| *r != id);
    }
}

/// A request in flight: dropping it closes its connection.
pub(crate) type RequestFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

fn transport(kind: TransportErrorKind, message: impl AsRef<str>) -> Error {
    Error::Transport(TransportError::new(kind, message))
}

/// Starts `req` for the relay at `endpoint`; its events go to `queue`.
pub(crate) fn start(
    ctx: Arc<Context>,
    endpoint: Arc<RelayEndpoint>,
    req: HttpRequest,
    queue: EventQueue,
) -> RequestFuture {
    Box::pin(async move {
        let id = req.id;
        let deadline = req.deadline;
        let run = perform(&ctx, &endpoint, req, &queue);
        let expire = async move {
            Timer::at(deadline).await;
            Err(transport(
                TransportErrorKind::Timeout,
                "the relay request ran past its deadline",
            ))
        };
        if let Err(error) = future::or(run, expire).await {
            tracing::debug!(request = %id, code = error.code(), error = %error, "relay request failed");
            queue.push(id, HttpEvent::Failed(error));
        }
    })
}

async fn perform(
    ctx: &Context,
    endpoint: &RelayEndpoint,
    req: HttpRequest,
    queue: &EventQueue,
) -> Result<(), Error> {
    tracing::debug!(
        request = %req.id,
        method = req.method.as_str(),
        leg = ?req.leg,
        url = %req.url,
        "relay request"
    );
    let connect_deadline = Instant::now() + ctx.connect_timeout;
    let connecting = connect(ctx, endpoint);
    let timed_out = async move {
        Timer::at(connect_deadline).await;
        Err(transport(
            TransportErrorKind::Timeout,
            format!(
                "connecting to the relay took longer than {:?}",
                ctx.connect_timeout
            ),
        ))
    };
    let tcp = future::or(connecting, timed_out).await?;
    if endpoint.uses_tls() {
        let tls = tls_handshake(ctx, endpoint, tcp);
        let timed_out = async move {
            Timer::at(connect_deadline).await;
            Err(transport(
                TransportErrorKind::Timeout,
                "the TLS handshake with the relay did not finish within the connect timeout",
            ))
        };
        let stream = future::or(tls, timed_out).await?;
        exchange(stream, endpoint, req, queue).await
    } else {
        // Plain HTTP: only the loopback development mode, which the core
        // already gated when it built the endpoint.
        exchange(tcp, endpoint, req, queue).await
    }
}

/// The relay's addresses, vetted.
async fn vetted_addresses(ctx: &Context, endpoint: &RelayEndpoint) -> Result<Vec<IpAddr>, Error> {
    let addrs = match endpoint.resolved_literal() {
        Some(ip) => vec![ip],
        None => ctx
            .resolver
            .resolve(endpoint.host(), endpoint.port())
            .await
            .map_err(|e| {
                transport(
                    TransportErrorKind::Dns,
                    format!("cannot resolve the relay host {}: {e}", endpoint.host()),
                )
            })?,
    };
    endpoint.vet_resolved(&addrs).map_err(|refusal| {
        tracing::debug!(
            host = endpoint.host(),
            rule = refusal.rule.name(),
            "resolved relay address refused"
        );
        Error::EgressRefused(refusal)
    })
}

/// A TCP connection to a vetted address of the relay: direct, or a tunnel
/// through the egress proxy to that address.
async fn connect(ctx: &Context, endpoint: &RelayEndpoint) -> Result<TcpStream, Error> {
    let vetted = vetted_addresses(ctx, endpoint).await?;
    let mut last = None;
    for ip in vetted {
        let attempt = match endpoint.proxy() {
            None => {
                let addr = SocketAddr::new(ip, endpoint.port());
                TcpStream::connect(addr).await.map_err(|e| {
                    transport(
                        TransportErrorKind::Connect,
                        format!("cannot connect to the relay at {addr}: {e}"),
                    )
                })
            }
            Some(proxy) => tunnel(proxy, ip, endpoint).await,
        };
        match attempt {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        transport(
            TransportErrorKind::Connect,
            "the relay host has no address to connect to",
        )
    }))
}

/// Opens a CONNECT tunnel through `proxy` to the vetted `ip`.
async fn tunnel(
    proxy: &ProxyAddr,
    ip: IpAddr,
    endpoint: &RelayEndpoint,
) -> Result<TcpStream, Error> {
    let proxy_error = |message: String| transport(TransportErrorKind::Proxy, message);
    // The proxy's own address is trusted configuration: system DNS, not
    // vetted.
    let mut stream = TcpStream::connect((proxy.host.as_str(), proxy.port))
        .await
        .map_err(|e| proxy_error(format!("cannot connect to the egress proxy {proxy}: {e}")))?;
    let request = proxy.connect_request(&ip.to_string(), endpoint.port(), endpoint.host());
    stream
        .write_all(&request)
        .await
        .map_err(|e| proxy_error(format!("cannot write to the egress proxy {proxy}: {e}")))?;
    // Read the head a byte at a time, so nothing after it (the tunnel's
    // first bytes) is consumed here.
    let mut head = Vec::with_capacity(128);
    let mut byte = [0u8; 1];
    loop {
        let n = stream
            .read(&mut byte)
            .await
            .map_err(|e| proxy_error(format!("cannot read from the egress proxy {proxy}: {e}")))?;
        if n == 0 {
            return Err(proxy_error(format!(
                "the egress proxy {proxy} closed the connection during CONNECT"
            )));
        }
        head.push(byte[0]);
        if byte[0] != b'\n' && head.len() < PROXY_CONNECT_MAX_HEAD_BYTES {
            continue;
        }
        if ProxyConnectResponse::established(&head)?.is_some() {
            return Ok(stream);
        }
    }
}

async fn tls_handshake(
    ctx: &Context,
    endpoint: &RelayEndpoint,
    tcp: TcpStream,
) -> Result<futures_rustls::client::TlsStream<TcpStream>, Error> {
    let config = ctx.tls.as_ref().map_err(Clone::clone)?;
    // A name, or for an IP-literal host the IP server name.
    let name = ServerName::try_from(endpoint.host().to_owned()).map_err(|_| {
        transport(
            TransportErrorKind::Tls,
            "the relay host is not a valid TLS server name",
        )
    })?;
    futures_rustls::TlsConnector::from(Arc::clone(config))
        .connect(name, tcp)
        .await
        .map_err(|e| {
            transport(
                TransportErrorKind::Tls,
                format!("TLS handshake with the relay failed: {e}"),
            )
        })
}

/// `/path?query` of the request URL (the only use of the secret URL).
fn origin_form(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let rest = url.get(after_scheme..).unwrap_or_default();
    match rest.find(['/', '?']) {
        Some(i) => rest.get(i..).unwrap_or("/"),
        None => "/",
    }
}

fn build_request(
    endpoint: &RelayEndpoint,
    req: HttpRequest,
) -> Result<http::Request<Full<Bytes>>, Error> {
    let invalid = |what: &str| {
        transport(
            TransportErrorKind::Io,
            format!("the relay request has an invalid {what}"),
        )
    };
    let uri = http::Uri::try_from(origin_form(req.url.expose())).map_err(|_| invalid("URL"))?;
    let method = match req.method {
        HttpMethod::Get => http::Method::GET,
        HttpMethod::Post => http::Method::POST,
    };
    let mut builder = http::Request::builder().method(method).uri(uri);
    let host = http::HeaderValue::from_str(endpoint.host_header()).map_err(|_| invalid("host"))?;
    let headers = builder.headers_mut().ok_or_else(|| invalid("request"))?;
    headers.insert(http::header::HOST, host);
    for (name, value) in &req.headers {
        let name =
            http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid("header name"))?;
        let value = http::HeaderValue::from_str(value).map_err(|_| invalid("header value"))?;
        headers.append(name, value);
    }
    let body = req.body.unwrap_or_default();
    if req.method == HttpMethod::Post {
        headers.insert(
            http::header::CONTENT_LENGTH,
            http::HeaderValue::from(body.len()),
        );
    }
    builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|_| invalid("request"))
}

/// One HTTP/1.1 request on a fresh connection; the connection is driven in
/// this same future and closed when it returns or is dropped. Redirects are
/// never followed: a 3xx is reported as its status.
async fn exchange<IO>(
    io: IO,
    endpoint: &RelayEndpoint,
    req: HttpRequest,
    queue: &EventQueue,
) -> Result<(), Error>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let id = req.id;
    let request = build_request(endpoint, req)?;
    let io_error =
        |what: &str, e: hyper::Error| transport(TransportErrorKind::Io, format!("{what}: {e}"));
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .handshake::<_, Full<Bytes>>(FuturesIo::new(io))
        .await
        .map_err(|e| io_error("cannot start HTTP/1.1 with the relay", e))?;
    let work = async {
        sender
            .ready()
            .await
            .map_err(|e| io_error("the relay connection closed before the request", e))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| io_error("the relay request failed", e))?;
        let status = response.status().as_u16();
        tracing::debug!(request = %id, status, "relay response");
        queue.push(id, HttpEvent::Head(status));
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| io_error("reading the relay's response failed", e))?;
            if let Ok(data) = frame.into_data()
                && !data.is_empty()
            {
                queue.push(id, HttpEvent::Body(data.to_vec()));
                // Hand control back to the driver after every chunk, so a
                // relay that streams without pause cannot starve it.
                future::yield_now().await;
            }
        }
        queue.push(id, HttpEvent::End);
        Ok(())
    };
    let drive = async move {
        // The connection's own errors surface through the response or the
        // body above; once it ends, only `work` can finish.
        let _ = connection.await;
        future::pending::<Result<(), Error>>().await
    };
    future::or(work, drive).await
}

#[cfg(test)]
mod tests {
    use super::origin_form;

    #[test]
    fn origin_form_keeps_path_and_query() {
        assert_eq!(
            origin_form("https://relay.test:8443/s/inbox?token=t&client=c"),
            "/s/inbox?token=t&client=c"
        );
        assert_eq!(origin_form("http://127.0.0.1:1/a"), "/a");
        assert_eq!(origin_form("https://relay.test"), "/");
        assert_eq!(origin_form("https://relay.test?x=1"), "?x=1");
    }
}
