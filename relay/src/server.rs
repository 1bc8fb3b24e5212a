//! The relay server: builder, accept loop, reaper, handle and shutdown.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::broker::{Broker, BrokerConfig, SubscriberInfo, lock};
use crate::cors::CorsPolicy;
use crate::faults::Faults;
use crate::routes;
use crate::shared::Shared;
use crate::tls::TlsConfig;

/// The Node relay's request body cap: 256 KiB.
pub const DEFAULT_BODY_LIMIT: usize = 256 * 1024;
/// The Node relay's session TTL: 4 hours, sliding.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(4 * 60 * 60);
/// The Node relay's reaper tick: 60 s.
pub const DEFAULT_REAP_INTERVAL: Duration = Duration::from_secs(60);
/// The Node relay's idle time before a long-poll subscriber is pruned: 60 s.
pub const DEFAULT_POLL_IDLE: Duration = Duration::from_secs(60);
/// The Node relay's SSE keepalive comment interval: 15 s.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(15);
/// How long Node's HTTP server keeps an idle keep-alive connection open
/// after a response before it closes it (`server.keepAliveTimeout`): 5 s.
pub const DEFAULT_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long shutdown waits for open connections before cutting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long the connections are given to hear that they close before the
/// broker ends its sessions (see `accept_loop`).
const CLOSE_BEFORE_END: Duration = Duration::from_millis(20);

/// How long a TLS handshake may take.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Entry point: `RelayServer::builder()...start().await`.
#[derive(Debug, Clone, Copy)]
pub struct RelayServer;

impl RelayServer {
    /// A builder with the Node relay's defaults, bound to `127.0.0.1` on an
    /// ephemeral port.
    #[must_use]
    pub fn builder() -> RelayServerBuilder {
        RelayServerBuilder::default()
    }
}

/// Configuration of a [`RelayServer`]. Every default is the Node relay's.
#[derive(Debug, Clone)]
pub struct RelayServerBuilder {
    bind: SocketAddr,
    prefix: String,
    ttl: Duration,
    reap_interval: Duration,
    poll_idle: Duration,
    keepalive: Duration,
    cors: CorsPolicy,
    bearer_auth: bool,
    tls: Option<TlsConfig>,
    faults: Faults,
    body_limit: usize,
    answer_413: bool,
    keep_alive_timeout: Duration,
}

impl Default for RelayServerBuilder {
    fn default() -> Self {
        RelayServerBuilder {
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            prefix: String::new(),
            ttl: DEFAULT_SESSION_TTL,
            reap_interval: DEFAULT_REAP_INTERVAL,
            poll_idle: DEFAULT_POLL_IDLE,
            keepalive: DEFAULT_KEEPALIVE,
            cors: CorsPolicy::Any,
            bearer_auth: true,
            tls: None,
            faults: Faults::new(),
            body_limit: DEFAULT_BODY_LIMIT,
            answer_413: false,
            keep_alive_timeout: DEFAULT_KEEP_ALIVE_TIMEOUT,
        }
    }
}

impl RelayServerBuilder {
    /// The address to listen on (default `127.0.0.1:0`, an ephemeral port).
    /// `register` is unauthenticated: think before binding beyond loopback.
    #[must_use]
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.bind = addr;
        self
    }

    /// A path prefix every route lives under (default none), as the Node
    /// relay's `--prefix`: with `/agent-relay`, routes are
    /// `/agent-relay/register`, `/agent-relay/{session}/inbox`, … and
    /// health answers on `/agent-relay/` too (`/` and `/healthz` stay).
    /// One trailing `/` is stripped, as the Node relay does; a prefix
    /// without a leading `/` gets one (the Node relay's would match no
    /// path at all).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let relay = human_plus_relay::RelayServer::builder()
    ///     .prefix("agent-relay/")
    ///     .start()
    ///     .await?;
    /// assert!(relay.base_url().ends_with("/agent-relay"));
    /// relay.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        let mut prefix = prefix.into();
        if prefix.ends_with('/') {
            prefix.pop();
        }
        if !prefix.is_empty() && !prefix.starts_with('/') {
            prefix.insert(0, '/');
        }
        self.prefix = prefix;
        self
    }

    /// Session idle TTL, sliding on every authenticated request (default
    /// 4 h). Expiry takes effect on the next reaper tick.
    #[must_use]
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How often the reaper runs (default 60 s; zero is treated as 1 ms).
    #[must_use]
    pub fn reap_interval(mut self, every: Duration) -> Self {
        self.reap_interval = every;
        self
    }

    /// How long a long-poll subscriber may go without polling before the
    /// reaper prunes it (default 60 s).
    #[must_use]
    pub fn poll_idle(mut self, idle: Duration) -> Self {
        self.poll_idle = idle;
        self
    }

    /// Interval of `: keepalive` comments on SSE streams (default 15 s;
    /// zero is treated as 1 ms).
    #[must_use]
    pub fn keepalive_interval(mut self, every: Duration) -> Self {
        self.keepalive = every;
        self
    }

    /// The CORS policy (default `*`).
    #[must_use]
    pub fn cors(mut self, policy: CorsPolicy) -> Self {
        self.cors = policy;
        self
    }

    /// Whether a route that reads `?token=` also takes the token from an
    /// `Authorization: Bearer <token>` header when the query carries none
    /// (default on). The query's token, when present and not empty, is the
    /// one read, as on the Node relay. The Node relay reads only the query
    /// (it lists `authorization` in its CORS headers and ignores it): turn
    /// this off to be that relay exactly, e.g. to show a client still works
    /// against it. A browser page can then keep its token out of the URLs
    /// its `fetch`es show in the console; `EventSource` cannot send a
    /// header, so its URL still carries the token.
    #[must_use]
    pub fn bearer_auth(mut self, accept: bool) -> Self {
        self.bearer_auth = accept;
        self
    }

    /// Serve HTTPS with this configuration.
    #[must_use]
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Faults injected into every session that has none of its own.
    #[must_use]
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// The request body cap (default 256 KiB).
    #[must_use]
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// On a body over the cap, answer `413 {"error":"payload_too_large"}`
    /// instead of reproducing the Node relay's trap (the connection is
    /// dropped and no response ever arrives). Off by default.
    #[must_use]
    pub fn answer_oversize_with_413(mut self, answer: bool) -> Self {
        self.answer_413 = answer;
        self
    }

    /// How long an idle keep-alive connection stays open after a response
    /// before the relay closes it, as Node's `server.keepAliveTimeout` does
    /// (default 5 s, Node's default). It also bounds how long a new
    /// connection may take to send its first request head. A client keeping
    /// connections must expect kept connections the relay has closed.
    #[must_use]
    pub fn keep_alive_timeout(mut self, timeout: Duration) -> Self {
        self.keep_alive_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Binds and starts serving. Must be called within a tokio runtime.
    pub async fn start(self) -> std::io::Result<RelayHandle> {
        let listener = TcpListener::bind(self.bind).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            broker: Mutex::new(Broker::new(
                BrokerConfig {
                    ttl: self.ttl,
                    poll_idle: self.poll_idle,
                },
                self.faults,
            )),
            prefix: self.prefix.clone(),
            cors: self.cors,
            bearer_auth: self.bearer_auth,
            keepalive: self.keepalive.max(Duration::from_millis(1)),
            body_limit: self.body_limit,
            answer_413: self.answer_413,
            keep_alive_timeout: self.keep_alive_timeout,
            accepted: std::sync::atomic::AtomicUsize::new(0),
            close_idle: watch::Sender::new(0),
        });
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let host = match addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let base_url = format!(
            "{scheme}://{}{}",
            SocketAddr::new(host, addr.port()),
            self.prefix
        );

        let (stop_tx, stop_rx) = oneshot::channel();
        let reaper = tokio::spawn(reaper(
            Arc::clone(&shared),
            self.reap_interval.max(Duration::from_millis(1)),
        ));
        let task = tokio::spawn(accept_loop(
            listener,
            Arc::clone(&shared),
            self.tls,
            stop_rx,
        ));
        tracing::info!(%base_url, "relay listening");
        Ok(RelayHandle {
            addr,
            base_url,
            shared,
            stop: Some(stop_tx),
            task: Some(task),
            reaper,
        })
    }
}

/// A running relay. Dropping it stops the server abruptly; prefer
/// [`RelayHandle::shutdown`].
#[derive(Debug)]
pub struct RelayHandle {
    addr: SocketAddr,
    base_url: String,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    reaper: JoinHandle<()>,
}

impl RelayHandle {
    /// The bound address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections the relay has accepted (kept connections make
    /// this smaller than the number of requests).
    #[must_use]
    pub fn connections_accepted(&self) -> usize {
        self.shared
            .accepted
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `http://127.0.0.1:PORT` (or `https://…`), plus the prefix, with no
    /// trailing slash: routes are `{base_url}/register`,
    /// `{base_url}/{session}/inbox`, ….
    #[must_use]
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Replaces the faults of one session (registered or not yet).
    pub fn set_faults(&self, session: &str, faults: Faults) {
        lock(&self.shared.broker).set_faults(session, faults);
    }

    /// Removes a session's own faults; it falls back to the default.
    pub fn clear_faults(&self, session: &str) {
        lock(&self.shared.broker).clear_faults(session);
    }

    /// Replaces the default faults of every session without its own.
    pub fn set_default_faults(&self, faults: Faults) {
        lock(&self.shared.broker).set_default_faults(faults);
    }

    /// Closes every connection as soon as it is idle, as Node does when a
    /// kept connection's keep-alive timeout runs out: an idle kept
    /// connection is closed now, one serving a request (an SSE stream, a
    /// parked poll) after its response, with `connection: close`. Tests use
    /// this to close kept connections between two requests of an agent
    /// deterministically, instead of racing a timer against them.
    pub fn close_idle_connections(&self) {
        self.shared
            .close_idle
            .send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The ids of the live sessions, sorted.
    #[must_use]
    pub fn sessions(&self) -> Vec<String> {
        lock(&self.shared.broker).session_ids()
    }

    /// The subscribers of a session (inbound first, in subscription order).
    #[must_use]
    pub fn subscribers(&self, session: &str) -> Vec<SubscriberInfo> {
        lock(&self.shared.broker).subscribers(session)
    }

    /// Ends a session as if its page had closed: streams end, parked polls
    /// return, later requests answer 410. False if it did not exist.
    pub fn drop_session(&self, session: &str) -> bool {
        lock(&self.shared.broker).drop_session(session)
    }

    /// Runs the reaper now, as a tick would (tests use this instead of
    /// waiting for the interval).
    pub fn reap_now(&self) {
        lock(&self.shared.broker).reap(Instant::now());
    }

    /// Graceful shutdown: stop accepting, end every stream and parked poll,
    /// let in-flight responses finish (up to 5 s), then close.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.reaper.abort();
    }
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.reaper.abort();
    }
}

async fn reaper(shared: Arc<Shared>, every: Duration) {
    let mut tick = tokio::time::interval_at(Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        lock(&shared.broker).reap(Instant::now());
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Option<TlsConfig>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut conns: JoinSet<()> = JoinSet::new();
    let acceptor = tls.as_ref().map(TlsConfig::acceptor);
    loop {
        while conns.try_join_next().is_some() {}
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    tracing::trace!(%peer, "connection");
                    shared.accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let shared = Arc::clone(&shared);
                    let acceptor = acceptor.clone();
                    conns.spawn(connection(stream, shared, acceptor));
                }
                Err(error) => {
                    // Out of descriptors and the like: back off, keep serving.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    // Every connection closes once its response (if any) is done: told
    // first, so that the polls the broker's end wakes below are answered
    // with `Connection: close`. Told after, a woken poll's answer could
    // keep its connection open long enough for the client's next poll to
    // arrive on it and meet a relay with no sessions (410, "gone") instead
    // of a relay that is not there.
    shared.close_idle.send_modify(|n| *n = n.wrapping_add(1));
    tokio::time::sleep(CLOSE_BEFORE_END).await;
    lock(&shared.broker).dispose();
    let drained = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
        tracing::debug!("shutdown grace elapsed; cutting remaining connections");
    }
    conns.abort_all();
    while conns.join_next().await.is_some() {}
}

async fn connection(
    stream: TcpStream,
    shared: Arc<Shared>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
) {
    let _ = stream.set_nodelay(true);
    match acceptor {
        None => serve(TokioIo::new(stream), shared).await,
        Some(acceptor) => {
            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => serve(TokioIo::new(tls), shared).await,
                Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake timed out"),
            }
        }
    }
}

async fn serve<I>(io: I, shared: Arc<Shared>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    // hyper's header read timeout also runs while a kept connection waits
    // idle for its next request: Node's keep-alive timeout.
    let idle = shared.keep_alive_timeout;
    let mut close = shared.close_idle.subscribe();
    close.mark_unchanged();
    let service = service_fn(move |req| routes::handle(Arc::clone(&shared), req));
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(idle)
        .serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut closing = false;
    let ended = loop {
        tokio::select! {
            ended = conn.as_mut() => break ended,
            changed = close.changed(), if !closing => {
                // Idle: closed now. Busy: closed after this response.
                closing = true;
                if changed.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    };
    if let Err(error) = ended {
        tracing::debug!(%error, "connection ended with an error");
    }
}
