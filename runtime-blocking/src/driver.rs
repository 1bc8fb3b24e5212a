//! Drives one core [`Operation`] to its [`Outcome`]: every HTTP request on
//! a request thread of the pool, reporting into one channel the driver
//! waits on; connections kept in ureq's pool, one agent per connection key;
//! a warm attachment's stream on a request thread of its own between
//! operations.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use human_plus_core::{
    ConnectionKey, ConnectionPool, Error, HttpEvent, HttpMethod, HttpRequest, Leg, Operation,
    OperationOutput, Outcome, RelayEndpoint, RequestId, SocketEvent, SocketTransmit, Transmit,
    TransportError, TransportErrorKind, WarmLeg,
};
use human_plus_runtime::{BodyReport, KeptStream, NetSettings};
use ureq::Agent;

use crate::ctl::RequestCtl;
use crate::current::{self, Current};
use crate::failure::FailureSlot;
use crate::pool::Pool;
use crate::resolve::{Resolve, VettingResolver};
use crate::socket::{ChannelSocket, SocketRead};
use crate::transport::RelayConnector;

/// How many events may wait in the channel before a reader blocks: with
/// [`CHUNK`]-sized body chunks, at most about half a MiB is buffered.
const CHANNEL_DEPTH: usize = 64;

/// The size of one body read, and so the largest chunk sent to the core.
const CHUNK: usize = 8 * 1024;

/// What a driver waits for at most when the core has no timer (it always
/// has one while an exchange runs; this only keeps the loop from blocking
/// forever if it ever did not).
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// How long a wait on a channel's socket lasts while an HTTP request (the
/// auth bridge's) is in flight beside it.
const AUTH_SLICE: Duration = Duration::from_millis(2);

const USER_AGENT: &str = concat!("human-plus-blocking/", env!("CARGO_PKG_VERSION"));

/// The network half of a manager: TLS, DNS, the connect timeout, the
/// request threads and the kept connections.
#[derive(Debug)]
pub(crate) struct Net {
    /// The TLS configuration (or why it could not be built, reported by
    /// every `https` request), the resolver and the connect timeout.
    pub(crate) settings: NetSettings<dyn Resolve>,
    /// The threads requests run on.
    pub(crate) pool: Pool,
    /// One ureq agent (and so one pool of kept connections) per key, and
    /// its connector (which holds the connections opened ahead).
    pub(crate) agents: Mutex<BTreeMap<ConnectionKey, (Agent, RelayConnector)>>,
}

/// One event of a request: its id, the serial of the request that sent it
/// (a channel a warm stream carries from one operation to the next may
/// still hold a late event of a cancelled request of the last one, under an
/// id the next one reuses), the event, and when its thread saw it.
pub(crate) enum Event {
    /// An event of an HTTP request.
    Http(RequestId, u64, HttpEvent, Instant),
}

/// Serials of requests, unique in the process.
static SERIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A warm attachment's stream between operations (request
/// [`RequestId::WARM`]: the SSE stream, or a poll parked on the relay; or a
/// Reverb channel's WebSocket): its thread keeps reading, into the channel
/// the next operation's driver takes over. Dropping it stops the request
/// (closes the socket).
pub struct WarmStream {
    tx: SyncSender<Event>,
    rx: Receiver<Event>,
    /// The warm request's cancel switch and serial.
    ctl: Option<(Arc<RequestCtl>, u64)>,
    /// The channel's socket.
    socket: Option<ChannelSocket>,
}

impl std::fmt::Debug for WarmStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmStream")
            .field("reading", &self.ctl.is_some())
            .field("channel", &self.socket.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for WarmStream {
    fn drop(&mut self) {
        if let Some((ctl, _)) = self.ctl.take() {
            ctl.cancel();
        }
    }
}

impl KeptStream for WarmStream {
    /// Feeds the warm request's events, each at the time its thread saw
    /// it, so a leg that went silent is seen as silent.
    fn drain_into(&mut self, leg: &mut WarmLeg) {
        let serial = self.ctl.as_ref().map(|c| c.1);
        while let Ok(Event::Http(id, from, event, at)) = self.rx.try_recv() {
            if id == RequestId::WARM && Some(from) == serial {
                leg.handle_event(event, at);
            }
        }
        if let Some(socket) = self.socket.as_mut() {
            // Read now what arrived while no operation ran; stamped now
            // (the earliest the driver could have seen it).
            let at = Instant::now();
            for event in socket.drain() {
                leg.handle_socket(event, at);
            }
        }
    }
}

/// Runs `op` until it yields its outcome, over `warm` (the attachment's
/// kept stream, in warm mode). Every other request still running then is
/// cancelled; its thread exits on its own (see the crate documentation for
/// how soon). The stream is handed back when the outcome keeps it.
pub(crate) fn drive<T: OperationOutput>(
    net: &Arc<Net>,
    mut op: Operation<T>,
    warm: Option<WarmStream>,
) -> (Outcome<T>, Option<WarmStream>) {
    let endpoint = Arc::new(op.endpoint().clone());
    let socket_endpoint = op.socket_endpoint().cloned().map(Arc::new);
    let (tx, rx, mut warm_ctl, mut socket) = match warm {
        Some(mut w) => (w.tx.clone(), take_rx(&mut w), w.ctl.take(), w.socket.take()),
        None => {
            let (tx, rx) = mpsc::sync_channel::<Event>(CHANNEL_DEPTH);
            (tx, rx, None, None)
        }
    };
    let mut live: HashMap<RequestId, (Arc<RequestCtl>, u64)> = HashMap::new();
    loop {
        while let Some(transmit) = op.poll_transmit() {
            match transmit {
                Transmit::Request(req) => {
                    let id = req.id;
                    match spawn(net, &endpoint, req, tx.clone()) {
                        Ok(ctl) if id == RequestId::WARM => {
                            if let Some((old, _)) = warm_ctl.replace(ctl) {
                                old.cancel();
                            }
                        }
                        Ok(ctl) => {
                            live.insert(id, ctl);
                        }
                        Err(e) => op.handle_event(
                            id,
                            HttpEvent::NotSent {
                                error: Error::Transport(TransportError::new(
                                    TransportErrorKind::Io,
                                    format!("could not start a request thread: {e}"),
                                )),
                                kept_connection: false,
                            },
                            Instant::now(),
                        ),
                    }
                }
                Transmit::Cancel(id) => {
                    let ctl = if id == RequestId::WARM {
                        warm_ctl.take()
                    } else {
                        live.remove(&id)
                    };
                    if let Some((ctl, _)) = ctl {
                        tracing::debug!(request = %id, "request cancelled");
                        ctl.cancel();
                    }
                }
                Transmit::Connect(wanted) => net.open_ahead(&endpoint, wanted),
                Transmit::Release(id) => {
                    // Delivered: its thread reads the answer to its end and
                    // ureq keeps the connection; nobody listens any more.
                    live.remove(&id);
                }
                Transmit::Socket(SocketTransmit::Open { url, deadline }) => {
                    let Some(ep) = socket_endpoint.as_ref() else {
                        continue;
                    };
                    // Opened here, on the driver's thread: nothing else of
                    // the operation is in flight while its channel opens.
                    let resolver = VettingResolver {
                        endpoint: Arc::clone(ep),
                        resolver: Arc::clone(&net.settings.resolver),
                    };
                    let opened = net.connector(ep).and_then(|connector| {
                        let budget = net.settings.connect_timeout;
                        ChannelSocket::open(&connector, &resolver, budget, &url, deadline)
                    });
                    let event = match opened {
                        Ok(s) => {
                            socket = Some(s);
                            SocketEvent::Opened
                        }
                        Err(e) => SocketEvent::Failed(e),
                    };
                    op.handle_socket(event, Instant::now());
                }
                Transmit::Socket(SocketTransmit::Text(text)) => {
                    if let Some(s) = socket.as_mut()
                        && let Err(end) = s.send(text)
                    {
                        socket = None;
                        op.handle_socket(end, Instant::now());
                    }
                }
                Transmit::Socket(SocketTransmit::Close) => {
                    if let Some(s) = socket.take() {
                        s.close();
                    }
                }
            }
        }
        if let Some(outcome) = op.poll_outcome() {
            for (ctl, _) in live.values() {
                ctl.cancel();
            }
            let keep = outcome.warm.as_ref().is_some_and(WarmLeg::has_stream);
            if keep && socket.is_some() {
                return (
                    outcome,
                    Some(WarmStream {
                        tx,
                        rx,
                        ctl: None,
                        socket,
                    }),
                );
            }
            let stream = match warm_ctl {
                Some(ctl) if keep => Some(WarmStream {
                    tx,
                    rx,
                    ctl: Some(ctl),
                    socket: None,
                }),
                Some((ctl, _)) => {
                    ctl.cancel();
                    None
                }
                None => None,
            };
            return (outcome, stream);
        }
        let now = Instant::now();
        let wait = match op.poll_timeout() {
            Some(at) if at <= now => {
                op.handle_timeout(now);
                continue;
            }
            Some(at) => at - now,
            None => IDLE_WAIT,
        };
        let received = match socket.as_mut() {
            // Over a channel the driver waits on the socket itself (a reply
            // wakes it at once); an HTTP request in flight (the auth
            // bridge's) is looked at between short waits.
            Some(s) => match rx.try_recv() {
                Ok(event) => Ok(event),
                Err(_) => {
                    let slice = if live.is_empty() {
                        wait
                    } else {
                        wait.min(AUTH_SLICE)
                    };
                    match s.read(slice) {
                        SocketRead::Event(event) => {
                            if matches!(event, SocketEvent::Closed(_)) {
                                socket = None;
                            }
                            op.handle_socket(event, Instant::now());
                            continue;
                        }
                        SocketRead::Nothing => Err(RecvTimeoutError::Timeout),
                    }
                }
            },
            None => rx.recv_timeout(wait),
        };
        match received {
            Ok(Event::Http(id, from, event, _)) => {
                let current = if id == RequestId::WARM {
                    warm_ctl.as_ref().map(|c| c.1)
                } else {
                    live.get(&id).map(|c| c.1)
                };
                if current != Some(from) {
                    // A late event of a request cancelled before.
                    continue;
                }
                if matches!(
                    event,
                    HttpEvent::End | HttpEvent::Failed(_) | HttpEvent::NotSent { .. }
                ) {
                    live.remove(&id);
                }
                op.handle_event(id, event, Instant::now());
            }
            // The driver holds a sender, so the channel never disconnects.
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                op.handle_timeout(Instant::now());
            }
        }
    }
}

/// The receiver of a warm stream, replaced by a closed one (the stream is
/// dropped right after without reading again).
fn take_rx(w: &mut WarmStream) -> Receiver<Event> {
    let (_, closed) = mpsc::sync_channel(0);
    std::mem::replace(&mut w.rx, closed)
}

/// Starts `req` on a request thread of the pool.
fn spawn(
    net: &Arc<Net>,
    endpoint: &Arc<RelayEndpoint>,
    req: HttpRequest,
    tx: SyncSender<Event>,
) -> std::io::Result<(Arc<RequestCtl>, u64)> {
    human_plus_runtime::log_request(&req);
    let ctl = Arc::new(RequestCtl::default());
    let serial = SERIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let thread_ctl = Arc::clone(&ctl);
    let job_net = Arc::clone(net);
    let endpoint = Arc::clone(endpoint);
    let span = tracing::Span::current();
    net.pool.execute(Box::new(move || {
        let _entered = span.enter();
        perform(&job_net, &endpoint, &req, &thread_ctl, serial, &tx);
    }))?;
    Ok((ctl, serial))
}

/// Why a request stopped without an event to report.
enum Stop {
    /// Nothing of the request was written: reported as
    /// [`HttpEvent::NotSent`].
    NotSent(Error),
    /// It failed after some of it may have been written.
    Failed(Error),
    /// The driver is gone or cancelled the request: report nothing.
    Quiet,
}

/// Performs one request, sending its events in order.
fn perform(
    net: &Net,
    endpoint: &Arc<RelayEndpoint>,
    req: &HttpRequest,
    ctl: &Arc<RequestCtl>,
    serial: u64,
    tx: &SyncSender<Event>,
) {
    let id = req.id;
    let send = |event: HttpEvent| {
        tx.send(Event::Http(id, serial, event, Instant::now()))
            .is_ok()
    };
    match exchange(net, endpoint, req, ctl, &send) {
        Ok(()) => {
            tracing::debug!(request = %id, "relay response ended");
            send(HttpEvent::End);
        }
        Err(Stop::Failed(e)) => {
            if !ctl.is_cancelled() {
                tracing::debug!(request = %id, error = %e, "relay request failed");
                send(HttpEvent::Failed(e));
            }
        }
        Err(Stop::NotSent(error)) => {
            if !ctl.is_cancelled() {
                tracing::debug!(request = %id, error = %error, "relay request not sent");
                send(HttpEvent::NotSent {
                    error,
                    kept_connection: false,
                });
            }
        }
        Err(Stop::Quiet) => {}
    }
}

impl Net {
    /// Opens connections to `endpoint` ahead of its POSTs (the core's
    /// [`Transmit::Connect`]): as many as the connector's spares say are
    /// missing, each on a request thread, kept until ureq needs a new
    /// connection. ureq's own pool is not counted (it cannot be seen); the
    /// core asks only on an attachment's first operation, when nothing is
    /// kept yet. A failure is only logged: the POST that needs a
    /// connection opens its own and reports.
    fn open_ahead(self: &Arc<Self>, endpoint: &Arc<RelayEndpoint>, wanted: usize) {
        let Ok((_, connector)) = self.agent_and_connector(endpoint) else {
            return;
        };
        let key = endpoint.connection_key();
        let missing = connector
            .spares
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reserve_ahead(&key, wanted, Instant::now());
        for _ in 0..missing {
            let job_connector = connector.clone();
            let resolver = VettingResolver {
                endpoint: Arc::clone(endpoint),
                resolver: Arc::clone(&self.settings.resolver),
            };
            let (budget, job_key) = (self.settings.connect_timeout, key.clone());
            let span = tracing::Span::current();
            let job = Box::new(move || {
                let _entered = span.enter();
                let deadline = Instant::now() + budget;
                let opened = resolver.vetted(budget).and_then(|ips| {
                    let port = job_connector.endpoint.port();
                    let vetted: Vec<std::net::SocketAddr> = ips
                        .into_iter()
                        .map(|ip| std::net::SocketAddr::new(ip, port))
                        .collect();
                    job_connector.open_spare(&vetted, deadline)
                });
                match opened {
                    Ok(()) => tracing::debug!("relay connection opened ahead"),
                    Err(e) => tracing::debug!(error = %e, "opening a connection ahead failed"),
                }
                job_connector
                    .spares
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .ahead_done(&job_key);
            });
            if self.pool.execute(job).is_err() {
                connector
                    .spares
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .ahead_done(&key);
            }
        }
    }

    /// The connector of `endpoint`'s key (what opens its connections).
    pub(crate) fn connector(&self, endpoint: &Arc<RelayEndpoint>) -> Result<RelayConnector, Error> {
        self.agent_and_connector(endpoint).map(|(_, c)| c)
    }

    /// The agent (and pool of kept connections) of `endpoint`'s key.
    fn agent(&self, endpoint: &Arc<RelayEndpoint>) -> Result<Agent, Error> {
        self.agent_and_connector(endpoint).map(|(agent, _)| agent)
    }

    /// The agent of `endpoint`'s key and its connector, made on first use.
    fn agent_and_connector(
        &self,
        endpoint: &Arc<RelayEndpoint>,
    ) -> Result<(Agent, RelayConnector), Error> {
        let key = endpoint.connection_key();
        let mut agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = agents.get(&key) {
            return Ok(found.clone());
        }
        let tls = if endpoint.uses_tls() {
            Some(self.settings.tls.clone()?)
        } else {
            None
        };
        let pool = self.settings.pool;
        // Statuses are values for the core to classify; redirects are never
        // followed; no proxy from the environment (the egress proxy is the
        // policy's, spoken by the connector).
        let config = Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .proxy(None)
            .timeout_connect(Some(self.settings.connect_timeout))
            .max_idle_connections(pool.per_key.max(1) * 4)
            .max_idle_connections_per_host(pool.per_key)
            .max_idle_age(pool.idle)
            .user_agent(USER_AGENT)
            .build();
        let connector = RelayConnector {
            endpoint: Arc::clone(endpoint),
            tls,
            lifetime: pool.lifetime,
            spares: Arc::new(Mutex::new(ConnectionPool::new(pool))),
            buffer_sizes: (config.input_buffer_size(), config.output_buffer_size()),
        };
        let resolver = VettingResolver {
            endpoint: Arc::clone(endpoint),
            resolver: Arc::clone(&self.settings.resolver),
        };
        let agent = Agent::with_parts(config, connector.clone(), resolver);
        agents.insert(key, (agent.clone(), connector.clone()));
        Ok((agent, connector))
    }
}

fn exchange(
    net: &Net,
    endpoint: &Arc<RelayEndpoint>,
    req: &HttpRequest,
    ctl: &Arc<RequestCtl>,
    send: &dyn Fn(HttpEvent) -> bool,
) -> Result<(), Stop> {
    let agent = net.agent(endpoint).map_err(Stop::NotSent)?;
    let budget = req.deadline.saturating_duration_since(Instant::now());
    if budget.is_zero() {
        return Err(Stop::NotSent(Error::Transport(TransportError::new(
            TransportErrorKind::Timeout,
            "the request's deadline passed before it started",
        ))));
    }
    let failures = Arc::new(FailureSlot::default());
    // ureq logs the request head it is given (at TRACE, through `log`, as
    // a hex dump): it gets the URL and headers with the token masked, and
    // the connection puts the token back into the bytes on their way to the
    // socket.
    let masked = req.masked();
    let _current = current::enter(Current {
        ctl: Arc::clone(ctl),
        failures: Arc::clone(&failures),
        token: masked.token,
    });
    let url = masked.url.as_str();
    let headers = masked
        .headers
        .iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("host"));
    // The whole request, a streaming SSE body included, ends by the core's
    // deadline at the latest; a request the core sends again (it never
    // left) takes no kept connection.
    let max_idle_age = if req.fresh {
        Duration::ZERO
    } else {
        net.settings.pool.idle
    };
    let response = match req.method {
        HttpMethod::Get => {
            let mut builder = agent.get(url).header("host", endpoint.host_header());
            for (name, value) in headers {
                builder = builder.header(*name, value.as_str());
            }
            builder
                .config()
                .timeout_global(Some(budget))
                .max_idle_age(max_idle_age)
                .build()
                .call()
        }
        HttpMethod::Post => {
            let mut builder = agent.post(url).header("host", endpoint.host_header());
            for (name, value) in headers {
                builder = builder.header(*name, value.as_str());
            }
            builder
                .config()
                .timeout_global(Some(budget))
                .max_idle_age(max_idle_age)
                .build()
                .send(req.body.as_deref().unwrap_or_default())
        }
    };
    let response = response.map_err(|e| fail(&e, &failures, ctl))?;
    let status = response.status().as_u16();
    tracing::debug!(request = %req.id, status, "relay response head");
    // A POST is read to its end even when nobody listens any more (its
    // exchange released it): ureq then keeps its connection. A receive leg
    // stops as soon as nobody listens.
    let finish_quietly = req.leg == Leg::Post;
    if !send(HttpEvent::Head(status)) && !finish_quietly {
        return Err(Stop::Quiet);
    }
    let mut reader = response.into_body().into_reader();
    let mut report = BodyReport::for_leg(req.leg);
    let mut buf = vec![0u8; CHUNK];
    loop {
        if ctl.is_cancelled() {
            return Err(Stop::Quiet);
        }
        match reader.read(&mut buf) {
            // Read to its end: ureq keeps the connection for the next
            // request of this key (before the core hears the answer).
            Ok(0) => {
                ctl.finish();
                drop(reader);
                if let Some(bytes) = report.end() {
                    send(HttpEvent::Body(bytes));
                }
                return Ok(());
            }
            Ok(n) => {
                let chunk = buf.get(..n).unwrap_or_default();
                if let Some(bytes) = report.chunk(chunk)
                    && !send(HttpEvent::Body(bytes))
                    && !finish_quietly
                {
                    return Err(Stop::Quiet);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(match fail(&ureq::Error::from(e), &failures, ctl) {
                    Stop::NotSent(e) => Stop::Failed(e),
                    other => other,
                });
            }
        }
    }
}

/// Maps a ureq failure to the core's error: a refusal or failure recorded
/// below ureq first (the connection phase: nothing was written), then
/// ureq's own error by kind. ureq's messages are only used where they
/// cannot carry the URL, and every message passes through the core's
/// redaction anyway.
fn fail(e: &ureq::Error, failures: &FailureSlot, ctl: &RequestCtl) -> Stop {
    if ctl.is_cancelled() {
        return Stop::Quiet;
    }
    if let Some(recorded) = failures.take() {
        return Stop::NotSent(recorded);
    }
    let (kind, message, before_writing) = match e {
        ureq::Error::Timeout(which) => (
            TransportErrorKind::Timeout,
            format!("the request did not finish in time ({which})"),
            matches!(which, ureq::Timeout::Resolve | ureq::Timeout::Connect),
        ),
        ureq::Error::HostNotFound => (TransportErrorKind::Dns, "host not found".to_owned(), true),
        ureq::Error::ConnectionFailed => (
            TransportErrorKind::Connect,
            "could not connect to the relay".to_owned(),
            true,
        ),
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => (
            TransportErrorKind::Timeout,
            format!("the connection timed out: {io}"),
            false,
        ),
        ureq::Error::Io(io) => (
            TransportErrorKind::Io,
            format!("connection failed: {io}"),
            false,
        ),
        ureq::Error::Tls(what) => (TransportErrorKind::Tls, (*what).to_owned(), true),
        ureq::Error::TlsRequired => (
            TransportErrorKind::Tls,
            "the connection to the relay is not TLS".to_owned(),
            true,
        ),
        ureq::Error::Protocol(p) => (
            TransportErrorKind::Io,
            format!("the relay's HTTP could not be read: {p}"),
            false,
        ),
        ureq::Error::LargeResponseHeader(size, limit) => (
            TransportErrorKind::Io,
            format!("the relay's response head is too large ({size} > {limit} bytes)"),
            false,
        ),
        // BadUri and Http errors can quote the URL: say nothing of it.
        _ => (
            TransportErrorKind::Io,
            "the HTTP request to the relay failed".to_owned(),
            false,
        ),
    };
    let error = Error::Transport(TransportError::new(kind, message));
    if before_writing {
        Stop::NotSent(error)
    } else {
        Stop::Failed(error)
    }
}
