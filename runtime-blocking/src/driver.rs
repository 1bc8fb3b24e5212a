//! Drives one core [`Operation`] to its [`Outcome`]: a thread per HTTP
//! request, reporting into one channel the driver waits on.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use human_plus_core::{
    Error, HttpEvent, HttpMethod, HttpRequest, Operation, OperationOutput, Outcome, RelayEndpoint,
    RequestId, Transmit, TransportError, TransportErrorKind,
};
use ureq::Agent;

use human_plus_runtime::NetSettings;

use crate::pool::Pool;
use crate::resolve::{FailureSlot, Resolve, VettingResolver};
use crate::transport::{RelayConnector, RequestCtl};

/// How many events may wait in the channel before a reader blocks: with
/// [`CHUNK`]-sized body chunks, at most about half a MiB is buffered.
const CHANNEL_DEPTH: usize = 64;

/// The size of one body read, and so the largest chunk sent to the core.
const CHUNK: usize = 8 * 1024;

/// What a driver waits for at most when the core has no timer (it always
/// has one while an exchange runs; this only keeps the loop from blocking
/// forever if it ever did not).
const IDLE_WAIT: Duration = Duration::from_secs(1);

const USER_AGENT: &str = concat!("human-plus-blocking/", env!("CARGO_PKG_VERSION"));

/// The network half of a manager: TLS, DNS and the connect timeout.
#[derive(Debug)]
pub(crate) struct Net {
    /// The TLS configuration (or why it could not be built, reported by
    /// every `https` request), the resolver and the connect timeout.
    pub(crate) settings: NetSettings<dyn Resolve>,
    /// The threads requests run on.
    pub(crate) pool: Pool,
}

type Event = (RequestId, HttpEvent);

/// Runs `op` until it yields its outcome. Every request still running then
/// is cancelled; its thread exits on its own (see the crate documentation
/// for how soon).
pub(crate) fn drive<T: OperationOutput>(net: &Arc<Net>, mut op: Operation<T>) -> Outcome<T> {
    let endpoint = Arc::new(op.endpoint().clone());
    let (tx, rx) = mpsc::sync_channel::<Event>(CHANNEL_DEPTH);
    let mut live: HashMap<RequestId, Arc<RequestCtl>> = HashMap::new();
    loop {
        while let Some(transmit) = op.poll_transmit() {
            match transmit {
                Transmit::Request(req) => {
                    let id = req.id;
                    match spawn(net, &endpoint, req, tx.clone()) {
                        Ok(ctl) => {
                            live.insert(id, ctl);
                        }
                        Err(e) => op.handle_error(
                            id,
                            Error::Transport(TransportError::new(
                                TransportErrorKind::Io,
                                format!("could not start a request thread: {e}"),
                            )),
                            Instant::now(),
                        ),
                    }
                }
                Transmit::Cancel(id) => {
                    if let Some(ctl) = live.remove(&id) {
                        tracing::debug!(request = %id, "request cancelled");
                        ctl.cancel();
                    }
                }
            }
        }
        if let Some(outcome) = op.poll_outcome() {
            for ctl in live.values() {
                ctl.cancel();
            }
            return outcome;
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
        match rx.recv_timeout(wait) {
            Ok((id, event)) => {
                if matches!(event, HttpEvent::End | HttpEvent::Failed(_)) {
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

/// Starts `req` on a request thread of the pool.
fn spawn(
    net: &Arc<Net>,
    endpoint: &Arc<RelayEndpoint>,
    req: HttpRequest,
    tx: SyncSender<Event>,
) -> std::io::Result<Arc<RequestCtl>> {
    human_plus_runtime::log_request(&req);
    let ctl = Arc::new(RequestCtl::default());
    let thread_ctl = Arc::clone(&ctl);
    let job_net = Arc::clone(net);
    let endpoint = Arc::clone(endpoint);
    let span = tracing::Span::current();
    net.pool.execute(Box::new(move || {
        let _entered = span.enter();
        perform(&job_net, &endpoint, &req, &thread_ctl, &tx);
    }))?;
    Ok(ctl)
}

/// Why a request stopped without an event to report.
enum Stop {
    /// The request failed: report it.
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
    tx: &SyncSender<Event>,
) {
    let id = req.id;
    let send = |event: HttpEvent| tx.send((id, event)).is_ok();
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
        Err(Stop::Quiet) => {}
    }
}

fn exchange(
    net: &Net,
    endpoint: &Arc<RelayEndpoint>,
    req: &HttpRequest,
    ctl: &Arc<RequestCtl>,
    send: &dyn Fn(HttpEvent) -> bool,
) -> Result<(), Stop> {
    let tls = if endpoint.uses_tls() {
        Some(net.settings.tls.clone().map_err(Stop::Failed)?)
    } else {
        None
    };
    let budget = req.deadline.saturating_duration_since(Instant::now());
    if budget.is_zero() {
        return Err(Stop::Failed(Error::Transport(TransportError::new(
            TransportErrorKind::Timeout,
            "the request's deadline passed before it started",
        ))));
    }
    let failures = Arc::new(FailureSlot::default());
    // Statuses are values for the core to classify; redirects are never
    // followed; no proxy from the environment (the egress proxy is the
    // policy's, spoken by the connector); the whole request, a streaming
    // SSE body included, ends by the core's deadline at the latest.
    let config = Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .timeout_global(Some(budget))
        .timeout_connect(Some(net.settings.connect_timeout))
        .user_agent(USER_AGENT)
        .build();
    // ureq logs the request line it is given (at TRACE, through `log`):
    // it gets the URL with the token masked, and the connection puts the
    // token back into the bytes on their way to the socket.
    let (url, token) = req.url.masked();
    let connector = RelayConnector {
        endpoint: Arc::clone(endpoint),
        tls,
        ctl: Arc::clone(ctl),
        failures: Arc::clone(&failures),
        token,
    };
    let resolver = VettingResolver {
        endpoint: Arc::clone(endpoint),
        resolver: Arc::clone(&net.settings.resolver),
        failures: Arc::clone(&failures),
    };
    let agent = Agent::with_parts(config, connector, resolver);
    let url = url.as_str();
    let headers = req
        .headers
        .iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("host"));
    let response = match req.method {
        HttpMethod::Get => {
            let mut builder = agent.get(url).header("host", endpoint.host_header());
            for (name, value) in headers {
                builder = builder.header(*name, value.as_str());
            }
            builder.call()
        }
        HttpMethod::Post => {
            let mut builder = agent.post(url).header("host", endpoint.host_header());
            for (name, value) in headers {
                builder = builder.header(*name, value.as_str());
            }
            builder.send(req.body.as_deref().unwrap_or_default())
        }
    };
    let response = response.map_err(|e| fail(&e, &failures, ctl))?;
    let status = response.status().as_u16();
    tracing::debug!(request = %req.id, status, "relay response head");
    if !send(HttpEvent::Head(status)) {
        return Err(Stop::Quiet);
    }
    let mut reader = response.into_body().into_reader();
    let mut buf = vec![0u8; CHUNK];
    loop {
        if ctl.is_cancelled() {
            return Err(Stop::Quiet);
        }
        match reader.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                let chunk = buf.get(..n).unwrap_or_default().to_vec();
                if !send(HttpEvent::Body(chunk)) {
                    return Err(Stop::Quiet);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(fail(&ureq::Error::from(e), &failures, ctl)),
        }
    }
}

/// Maps a ureq failure to the core's error: a refusal or failure recorded
/// below ureq first, then ureq's own error by kind. ureq's messages are
/// only used where they cannot carry the URL, and every message passes
/// through the core's redaction anyway.
fn fail(e: &ureq::Error, failures: &FailureSlot, ctl: &RequestCtl) -> Stop {
    if ctl.is_cancelled() {
        return Stop::Quiet;
    }
    if let Some(recorded) = failures.take() {
        return Stop::Failed(recorded);
    }
    let (kind, message) = match e {
        ureq::Error::Timeout(which) => (
            TransportErrorKind::Timeout,
            format!("the request did not finish in time ({which})"),
        ),
        ureq::Error::HostNotFound => (TransportErrorKind::Dns, "host not found".to_owned()),
        ureq::Error::ConnectionFailed => (
            TransportErrorKind::Connect,
            "could not connect to the relay".to_owned(),
        ),
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => (
            TransportErrorKind::Timeout,
            format!("the connection timed out: {io}"),
        ),
        ureq::Error::Io(io) => (TransportErrorKind::Io, format!("connection failed: {io}")),
        ureq::Error::Tls(what) => (TransportErrorKind::Tls, (*what).to_owned()),
        ureq::Error::TlsRequired => (
            TransportErrorKind::Tls,
            "the connection to the relay is not TLS".to_owned(),
        ),
        ureq::Error::Protocol(p) => (
            TransportErrorKind::Io,
            format!("the relay's HTTP could not be read: {p}"),
        ),
        ureq::Error::LargeResponseHeader(size, limit) => (
            TransportErrorKind::Io,
            format!("the relay's response head is too large ({size} > {limit} bytes)"),
        ),
        // BadUri and Http errors can quote the URL: say nothing of it.
        _ => (
            TransportErrorKind::Io,
            "the HTTP request to the relay failed".to_owned(),
        ),
    };
    Stop::Failed(Error::Transport(TransportError::new(kind, message)))
}
