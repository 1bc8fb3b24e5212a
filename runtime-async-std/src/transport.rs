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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Instant;

use async_io::Timer;
use async_net::TcpStream;
use bytes::Bytes;
use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use http_body_util::{BodyExt, Full};
use human_plus_core::{
    ConnectionKey, ConnectionPool, Error, HttpEvent, HttpMethod, HttpRequest,
    PROXY_CONNECT_MAX_HEAD_BYTES, ProxyAddr, ProxyConnectResponse, RelayEndpoint, RequestId,
    TransportError, TransportErrorKind,
};
use rustls_pki_types::ServerName;
use smol_hyper::rt::FuturesIo;

use human_plus_runtime::{BodyReport, NetSettings, RequestFailure as Failure, Resolve};

/// What every request of a manager shares.
pub(crate) struct Context {
    /// The TLS configuration, the resolver and the connect timeout.
    pub(crate) net: NetSettings<dyn Resolve>,
    /// Kept connections, by key.
    pub(crate) pool: Mutex<ConnectionPool<Connection>>,
    /// Released POSTs whose answer is still to be read: nothing is spawned,
    /// so they are polled when the next request starts, which reads the
    /// answer (already in the socket by then) and keeps the connection.
    pub(crate) lingering: Mutex<Vec<RequestFuture>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("net", &self.net)
            .finish_non_exhaustive()
    }
}

/// The most released POSTs kept lingering; the oldest is dropped first.
const MAX_LINGERING: usize = 16;

/// The events of every request of one operation, in arrival order. Only
/// the operation's own driver polls the request futures, so a push never
/// needs to wake anyone: the driver looks at the queue right after polling.
#[derive(Clone, Default)]
pub(crate) struct EventQueue {
    inner: Arc<Mutex<VecDeque<(RequestId, HttpEvent)>>>,
    /// Set once a request reporting here wrote its first bytes to its
    /// connection (a warm stream's queue has one request: so, whether the
    /// parked poll is on the wire).
    written: Arc<AtomicBool>,
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

    /// Whether a request reporting here has written to its connection.
    pub(crate) fn written(&self) -> bool {
        self.written.load(Ordering::SeqCst)
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
            Err(Failure::Lost(transport(
                TransportErrorKind::Timeout,
                "the relay request ran past its deadline",
            )))
        };
        if let Err(failure) = future::or(run, expire).await {
            let event = failure.into_event();
            tracing::debug!(request = %id, event = ?event, "relay request failed");
            queue.push(id, event);
        }
    })
}

/// Opens connections to `endpoint` ahead of its POSTs (the core's
/// [`Transmit::Connect`](human_plus_core::Transmit::Connect)): as many as
/// the pool says are missing, each a future the operation polls beside its
/// requests, keeping the connection idle once open. Dropped unfinished
/// (the operation ended), it opens nothing; a failure is only logged (the
/// POST that needs a connection opens its own and reports).
pub(crate) fn open_ahead(
    ctx: &Arc<Context>,
    endpoint: &Arc<RelayEndpoint>,
    wanted: usize,
) -> Vec<RequestFuture> {
    let key = endpoint.connection_key();
    let missing = ctx
        .pool
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .reserve_ahead(&key, wanted, Instant::now());
    (0..missing)
        .map(|_| {
            let (ctx, endpoint, key) = (Arc::clone(ctx), Arc::clone(endpoint), key.clone());
            Box::pin(async move {
                let done = AheadDone {
                    ctx: Arc::clone(&ctx),
                    key: key.clone(),
                };
                match open(&ctx, &endpoint).await {
                    Ok(conn) => {
                        tracing::debug!("relay connection opened ahead");
                        ctx.put(key, conn, Instant::now());
                    }
                    Err(e) => tracing::debug!(error = %e, "opening a connection ahead failed"),
                }
                drop(done);
            }) as RequestFuture
        })
        .collect()
}

/// Tells the pool a connection reserved ahead was opened, or never will be.
struct AheadDone {
    ctx: Arc<Context>,
    key: ConnectionKey,
}

impl Drop for AheadDone {
    fn drop(&mut self) {
        self.ctx
            .pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .ahead_done(&self.key);
    }
}

async fn perform(
    ctx: &Context,
    endpoint: &RelayEndpoint,
    req: HttpRequest,
    queue: &EventQueue,
) -> Result<(), Failure> {
    human_plus_runtime::log_request(&req);
    let key = endpoint.connection_key();
    let kept = if req.fresh { None } else { ctx.take(&key) };
    let on_kept = kept.is_some();
    let (connection, created) = match kept {
        Some(kept) => kept,
        None => (
            open(ctx, endpoint).await.map_err(Failure::before_writing)?,
            Instant::now(),
        ),
    };
    tracing::debug!(request = %req.id, kept = on_kept, "relay connection");
    exchange(ctx, connection, created, on_kept, key, endpoint, req, queue).await
}

/// Any byte stream a connection can run over.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// A new HTTP/1.1 connection to a vetted address of the relay: TCP
/// (through the egress proxy's tunnel when configured), TLS, handshake.
async fn open(ctx: &Context, endpoint: &RelayEndpoint) -> Result<Connection, Error> {
    Connection::handshake(open_stream(ctx, endpoint).await?).await
}

/// A byte stream to a vetted address of `endpoint`: TCP (through the egress
/// proxy's tunnel when configured), then TLS when the endpoint uses it,
/// each bounded by the connect timeout (what an HTTP connection and a
/// channel's WebSocket both run over).
pub(crate) async fn open_stream(
    ctx: &Context,
    endpoint: &RelayEndpoint,
) -> Result<Box<dyn Stream>, Error> {
    let connect_deadline = Instant::now() + ctx.net.connect_timeout;
    let connecting = connect(ctx, endpoint);
    let timed_out = async move {
        Timer::at(connect_deadline).await;
        Err(transport(
            TransportErrorKind::Timeout,
            format!(
                "connecting to the relay took longer than {:?}",
                ctx.net.connect_timeout
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
        Ok(Box::new(future::or(tls, timed_out).await?))
    } else {
        // Plain HTTP: only the loopback development mode, which the core
        // already gated when it built the endpoint.
        Ok(Box::new(tcp))
    }
}

/// The relay's addresses, vetted.
async fn vetted_addresses(ctx: &Context, endpoint: &RelayEndpoint) -> Result<Vec<IpAddr>, Error> {
    let addrs = match endpoint.resolved_literal() {
        Some(ip) => vec![ip],
        None => ctx
            .net
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
    let config = ctx.net.tls.as_ref().map_err(Clone::clone)?;
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

/// An HTTP/1.1 connection and its driver. Nothing is spawned: whoever
/// uses the connection polls its driver too, and a kept connection's driver
/// is polled once when it is taken, which is when a connection the relay
/// closed meanwhile is found closed.
pub(crate) struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    /// Told when the next bytes go out on the socket.
    watch: Arc<WriteWatch>,
    driver: Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>,
    /// The driver finished: the connection is closed.
    done: bool,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Connection {
    async fn handshake<IO>(io: IO) -> Result<Connection, Error>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let watch = Arc::new(WriteWatch::default());
        let io = Watched {
            io,
            watch: Arc::clone(&watch),
        };
        let (sender, driver) = hyper::client::conn::http1::Builder::new()
            .handshake::<_, Full<Bytes>>(FuturesIo::new(io))
            .await
            .map_err(|e| {
                transport(
                    TransportErrorKind::Io,
                    format!("cannot start HTTP/1.1 with the relay: {e}"),
                )
            })?;
        Ok(Connection {
            sender,
            watch,
            driver: Box::pin(driver),
            done: false,
        })
    }

    /// Whether the connection can take a request now: its driver, polled
    /// once, has not finished (a relay that closed the connection is seen
    /// here), and hyper says the sender is ready.
    fn usable(&mut self) -> bool {
        if !self.done {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            if self.driver.as_mut().poll(&mut cx).is_ready() {
                self.done = true;
            }
        }
        !self.done && !self.sender.is_closed() && self.sender.is_ready()
    }
}

/// Which flag the next write on a connection sets.
#[derive(Default)]
struct WriteWatch {
    flag: Mutex<Option<Arc<AtomicBool>>>,
}

impl WriteWatch {
    /// The next bytes written set `flag`.
    fn arm(&self, flag: &Arc<AtomicBool>) {
        *self
            .flag
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(flag));
    }

    fn wrote(&self) {
        if let Some(flag) = self
            .flag
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

/// A connection's stream, telling its [`WriteWatch`] when bytes go out.
struct Watched<IO> {
    io: IO,
    watch: Arc<WriteWatch>,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.watch.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.watch.wrote();
        }
        polled
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_close(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_close(cx)
    }
}

impl Context {
    /// Keeps a released POST's future, to finish reading its answer later.
    pub(crate) fn linger(&self, fut: RequestFuture) {
        let mut lingering = self
            .lingering
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if lingering.len() >= MAX_LINGERING {
            drop(lingering.remove(0));
        }
        lingering.push(fut);
    }

    /// Polls the lingering POSTs once; those that finish put their
    /// connection back.
    fn settle_lingering(&self) {
        let mut lingering = std::mem::take(
            &mut *self
                .lingering
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        for _ in 0..4 {
            lingering.retain_mut(|fut| fut.as_mut().poll(&mut cx).is_pending());
        }
        if !lingering.is_empty() {
            let mut kept = self
                .lingering
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            kept.extend(lingering);
            let excess = kept.len().saturating_sub(MAX_LINGERING);
            kept.drain(..excess);
        }
    }

    /// A kept connection for `key` that is still usable, and when it was
    /// made.
    fn take(&self, key: &ConnectionKey) -> Option<(Connection, Instant)> {
        self.settle_lingering();
        let mut pool = self
            .pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pool.take(key, Instant::now(), Connection::usable)
            .map(|k| (k.conn, k.created))
    }

    fn put(&self, key: ConnectionKey, conn: Connection, created: Instant) {
        let mut pool = self
            .pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        pool.purge(now);
        pool.put(key, conn, created, now);
    }
}

/// How long a connection whose response ended may take to be ready again
/// before it is dropped instead of kept.
const READY_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// One HTTP/1.1 request on `connection`, its driver polled in this same
/// future; a connection whose response was read to its end is kept for the
/// next request. Redirects are never followed: a 3xx is reported as its
/// status.
#[allow(clippy::too_many_arguments)]
async fn exchange(
    ctx: &Context,
    mut connection: Connection,
    created: Instant,
    on_kept: bool,
    key: ConnectionKey,
    endpoint: &RelayEndpoint,
    req: HttpRequest,
    queue: &EventQueue,
) -> Result<(), Failure> {
    let id = req.id;
    let mut report = BodyReport::for_leg(req.leg);
    let request = build_request(endpoint, req).map_err(Failure::before_writing)?;
    let io_error =
        |what: &str, e: hyper::Error| transport(TransportErrorKind::Io, format!("{what}: {e}"));
    connection.watch.arm(&queue.written);
    let Connection {
        sender,
        driver,
        done,
        ..
    } = &mut connection;
    let driver = async {
        // The connection's own errors surface through the response or the
        // body; once it ends, only the work can finish.
        if !*done {
            let _ = driver.as_mut().await;
            *done = true;
        }
        future::pending::<Result<bool, Failure>>().await
    };
    let work = async {
        let response = match sender.try_send_request(request).await {
            Ok(response) => response,
            Err(mut e) => {
                let never_left = e.take_message().is_some();
                let error = io_error("the relay request failed", e.into_error());
                return Err(Failure::sending(error, never_left, on_kept));
            }
        };
        let status = response.status().as_u16();
        tracing::debug!(request = %id, status, "relay response");
        queue.push(id, HttpEvent::Head(status));
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame
                .map_err(|e| Failure::Lost(io_error("reading the relay's response failed", e)))?;
            if let Ok(data) = frame.into_data()
                && !data.is_empty()
                && let Some(bytes) = report.chunk(&data)
            {
                queue.push(id, HttpEvent::Body(bytes));
                // Hand control back to the driver after every chunk, so a
                // relay that streams without pause cannot starve it.
                future::yield_now().await;
            }
        }
        // Read to its end: ready again unless the relay closes it.
        let ready = async { Some(sender.ready().await.is_ok()) };
        let wait = async {
            Timer::after(READY_WAIT).await;
            None
        };
        Ok(future::or(ready, wait).await == Some(true))
    };
    let reusable = future::or(work, driver).await?;
    // Kept before the core hears the answer and sends its next request.
    if reusable {
        ctx.put(key, connection, created);
    }
    if let Some(bytes) = report.end() {
        queue.push(id, HttpEvent::Body(bytes));
    }
    queue.push(id, HttpEvent::End);
    Ok(())
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
