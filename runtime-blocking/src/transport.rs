//! The connection under ureq: TCP to vetted addresses (directly, or through
//! an HTTP CONNECT tunnel spoken with the core's codec), TLS with the
//! shared rustls configuration, and a ureq [`Transport`] over the result
//! that a cancelled request can interrupt.
//!
//! ureq contributes HTTP/1.1 (its sans-IO `ureq-proto`), timeouts and the
//! body reader. The connection itself is ours, for three reasons that ureq
//! 3.5 cannot be configured around:
//!
//! * its CONNECT support with `resolve_target(true)` writes the resolved
//!   *socket address* followed by the port (`CONNECT 127.0.0.1:8443:8443`),
//!   tries only the first address, and resolves the proxy's own name
//!   through the (vetting) resolver, which would refuse a proxy on a
//!   private network;
//! * its TLS connector builds its own rustls `ClientConfig` and cannot take
//!   the one `human_plus_runtime::client_config` builds;
//! * a blocked read must be interruptible when the core cancels a request,
//!   which needs the socket.
//!
//! Connections are kept in ureq's pool: one agent per connection key
//! (`RelayEndpoint::connection_key`), whose connector and transports serve
//! many requests; what belongs to one request is on its thread
//! ([`crate::current`]). A kept transport says it is open (ureq's probe
//! before reuse) only while it is younger than the pool's lifetime bound and
//! a non-blocking read of its socket finds nothing: a connection the relay
//! closed meanwhile is found closed before a byte is written, and ureq opens
//! another.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use human_plus_core::{
    ConnectionPool, Error, PROXY_CONNECT_MAX_HEAD_BYTES, ProxyAddr, ProxyConnectResponse,
    RelayEndpoint, TransportError, TransportErrorKind,
};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, Transport,
};

use human_plus_runtime::SystemResolver;

use crate::ctl::{RequestCtl, cancelled};
use crate::current;
use crate::resolve::{Resolve, budget_of, resolve_within};

/// How long a blocked read or handshake step waits before it looks at the
/// cancel flag again. A cancelled request's socket is also shut down, which
/// wakes a blocked read at once; this is the fallback bound.
pub(crate) const CANCEL_POLL: Duration = Duration::from_millis(500);

fn transport(kind: TransportErrorKind, message: impl AsRef<str>) -> Error {
    Error::Transport(TransportError::new(kind, message))
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Time left until `deadline`, or a timeout error naming `what`.
fn remaining(deadline: Instant, what: &str) -> Result<Duration, Error> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(transport(
            TransportErrorKind::Timeout,
            format!("{what} did not finish in time"),
        ));
    }
    Ok(left)
}

/// Opens the connections of one connection key. See the module
/// documentation.
#[derive(Clone)]
pub(crate) struct RelayConnector {
    /// An endpoint of the key (its host, port, proxy and policy are the
    /// key's).
    pub(crate) endpoint: Arc<RelayEndpoint>,
    /// The rustls configuration, for an `https` endpoint.
    pub(crate) tls: Option<Arc<ClientConfig>>,
    /// A connection older than this is not reused.
    pub(crate) lifetime: Duration,
    /// Connections opened ahead of the POSTs (the core's
    /// `Transmit::Connect`), handed to ureq before it opens one itself.
    pub(crate) spares: Arc<Mutex<ConnectionPool<RelayTransport>>>,
    /// ureq's buffer sizes (input, output), for a connection opened ahead.
    pub(crate) buffer_sizes: (usize, usize),
}

impl fmt::Debug for RelayConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelayConnector")
            .field("host", &self.endpoint.host())
            .field("proxy", &self.endpoint.proxy())
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Connector<()> for RelayConnector {
    type Out = RelayTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<()>,
    ) -> Result<Option<RelayTransport>, ureq::Error> {
        if let Some(spare) = self.take_spare() {
            tracing::trace!("a connection opened ahead");
            return Ok(Some(spare));
        }
        // `details.timeout` is the connect phase's budget: the builder's
        // connect timeout, capped by the request's deadline. It bounds the
        // TCP connects, the CONNECT tunnel and the TLS handshake together.
        let deadline = Instant::now() + budget_of(&details.timeout);
        // Only what the vetting resolver returned: never anything else.
        let vetted: Vec<SocketAddr> = details.addrs.iter().copied().collect();
        match self.open(&vetted, deadline) {
            Ok(io) => Ok(Some(RelayTransport {
                buffers: LazyBuffers::new(
                    details.config.input_buffer_size(),
                    details.config.output_buffer_size(),
                ),
                io,
                created: Instant::now(),
                lifetime: self.lifetime,
                attached: None,
            })),
            Err(e) => {
                if let Some(failures) = current::failures() {
                    failures.set(e);
                }
                Err(ureq::Error::ConnectionFailed)
            }
        }
    }
}

impl RelayConnector {
    /// A connection opened ahead that is still open and within its bounds.
    fn take_spare(&self) -> Option<RelayTransport> {
        let key = self.endpoint.connection_key();
        self.spares
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(&key, Instant::now(), |t| t.is_open())
            .map(|k| k.conn)
    }

    /// Opens a connection to one of `vetted` (by `deadline`) ahead of the
    /// POSTs, and keeps it for the next request ureq cannot serve from its
    /// own pool.
    pub(crate) fn open_spare(&self, vetted: &[SocketAddr], deadline: Instant) -> Result<(), Error> {
        let io = self.open(vetted, deadline)?;
        let created = Instant::now();
        let transport = RelayTransport {
            buffers: LazyBuffers::new(self.buffer_sizes.0, self.buffer_sizes.1),
            io,
            created,
            lifetime: self.lifetime,
            attached: None,
        };
        let mut spares = self.spares.lock().unwrap_or_else(PoisonError::into_inner);
        spares.put(
            self.endpoint.connection_key(),
            transport,
            created,
            Instant::now(),
        );
        Ok(())
    }

    pub(crate) fn open(&self, vetted: &[SocketAddr], deadline: Instant) -> Result<Io, Error> {
        if vetted.is_empty() {
            return Err(transport(
                TransportErrorKind::Connect,
                "no vetted address to connect to",
            ));
        }
        let tcp = match self.endpoint.proxy() {
            None => self.connect_any(vetted, deadline, "the relay")?,
            Some(proxy) => self.tunnel(proxy, vetted, deadline)?,
        };
        match &self.tls {
            None => Ok(Io::Plain(tcp)),
            Some(config) => self.handshake(config, tcp, deadline),
        }
    }

    /// Connects to the first of `addrs` that accepts, in order.
    fn connect_any(
        &self,
        addrs: &[SocketAddr],
        deadline: Instant,
        what: &str,
    ) -> Result<TcpStream, Error> {
        let mut last = None;
        for addr in addrs {
            if current::cancelled() {
                return Err(transport(TransportErrorKind::Io, "request cancelled"));
            }
            let left = remaining(deadline, &format!("connecting to {what}"))?;
            match TcpStream::connect_timeout(addr, left) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    if let Some(ctl) = current::ctl() {
                        ctl.attach(&stream)
                            .map_err(|e| transport(TransportErrorKind::Io, e.to_string()))?;
                    }
                    tracing::trace!(%addr, "connected");
                    return Ok(stream);
                }
                Err(e) => last = Some((*addr, e)),
            }
        }
        Err(match last {
            Some((addr, e)) => {
                let kind = if is_timeout(&e) {
                    TransportErrorKind::Timeout
                } else {
                    TransportErrorKind::Connect
                };
                transport(kind, format!("could not connect to {what} at {addr}: {e}"))
            }
            None => transport(
                TransportErrorKind::Connect,
                format!("no address for {what}"),
            ),
        })
    }

    /// A CONNECT tunnel to the first vetted address the proxy opens. The
    /// CONNECT target is the vetted IP address, never the name, so the
    /// proxy cannot resolve it to something else.
    fn tunnel(
        &self,
        proxy: &ProxyAddr,
        vetted: &[SocketAddr],
        deadline: Instant,
    ) -> Result<TcpStream, Error> {
        let proxy_addrs: Vec<SocketAddr> = match proxy.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, proxy.port)],
            Err(_) => {
                // The proxy is trusted configuration: its name is resolved by
                // the system and its addresses are not vetted.
                let left = remaining(deadline, "resolving the egress proxy")?;
                let system: Arc<dyn Resolve> = Arc::new(SystemResolver);
                resolve_within(&system, &proxy.host, proxy.port, left)
                    .map_err(|e| {
                        transport(
                            TransportErrorKind::Proxy,
                            format!("could not resolve the egress proxy {proxy}: {e}"),
                        )
                    })?
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, proxy.port))
                    .collect()
            }
        };
        let mut last = None;
        for target in vetted {
            let mut stream = self.connect_any(&proxy_addrs, deadline, "the egress proxy")?;
            let request = proxy.connect_request(
                &target.ip().to_string(),
                target.port(),
                self.endpoint.host(),
            );
            match self.connect_through(&mut stream, &request, deadline) {
                Ok(()) => {
                    tracing::debug!(%proxy, target = %target, "CONNECT tunnel established");
                    return Ok(stream);
                }
                Err(e) => {
                    tracing::debug!(%proxy, target = %target, error = %e, "CONNECT failed");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            transport(TransportErrorKind::Proxy, "no vetted address to tunnel to")
        }))
    }

    /// Writes the CONNECT request and reads the proxy's answer head, one
    /// byte at a time so not a byte of the tunnel is consumed.
    fn connect_through(
        &self,
        stream: &mut TcpStream,
        request: &[u8],
        deadline: Instant,
    ) -> Result<(), Error> {
        let io_error = |e: io::Error| {
            let kind = if is_timeout(&e) {
                TransportErrorKind::Timeout
            } else {
                TransportErrorKind::Proxy
            };
            transport(kind, format!("egress proxy CONNECT failed: {e}"))
        };
        let left = remaining(deadline, "the CONNECT request")?;
        stream.set_write_timeout(Some(left)).map_err(io_error)?;
        stream.write_all(request).map_err(io_error)?;
        stream.flush().map_err(io_error)?;
        let mut head = Vec::with_capacity(128);
        let mut byte = [0u8; 1];
        loop {
            if current::cancelled() {
                return Err(transport(TransportErrorKind::Io, "request cancelled"));
            }
            let left = remaining(deadline, "the CONNECT answer")?;
            stream
                .set_read_timeout(Some(left.min(CANCEL_POLL)))
                .map_err(io_error)?;
            match stream.read(&mut byte) {
                Ok(0) => {
                    return Err(transport(
                        TransportErrorKind::Proxy,
                        "the egress proxy closed the connection before answering CONNECT",
                    ));
                }
                Ok(_) => {
                    head.push(byte[0]);
                    if byte[0] != b'\n' && head.len() < PROXY_CONNECT_MAX_HEAD_BYTES {
                        continue;
                    }
                    if ProxyConnectResponse::established(&head)?.is_some() {
                        return Ok(());
                    }
                }
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e)),
            }
        }
    }

    /// The TLS handshake, SNI = the relay's host (a name, or an IP server
    /// name for a literal address).
    fn handshake(
        &self,
        config: &Arc<ClientConfig>,
        tcp: TcpStream,
        deadline: Instant,
    ) -> Result<Io, Error> {
        let tls_error = |message: String| transport(TransportErrorKind::Tls, message);
        let name = ServerName::try_from(self.endpoint.host().to_owned()).map_err(|e| {
            tls_error(format!(
                "the relay host is not a valid TLS server name: {e}"
            ))
        })?;
        let conn = ClientConnection::new(Arc::clone(config), name)
            .map_err(|e| tls_error(format!("TLS setup failed: {e}")))?;
        let mut stream = StreamOwned::new(conn, tcp);
        while stream.conn.is_handshaking() {
            if current::cancelled() {
                return Err(transport(TransportErrorKind::Io, "request cancelled"));
            }
            let left = remaining(deadline, "the TLS handshake")?;
            let slice = Some(left.min(CANCEL_POLL));
            stream
                .sock
                .set_read_timeout(slice)
                .and_then(|()| stream.sock.set_write_timeout(slice))
                .map_err(|e| transport(TransportErrorKind::Io, e.to_string()))?;
            match stream.conn.complete_io(&mut stream.sock) {
                Ok(_) => {}
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(tls_error(format!(
                        "TLS handshake with the relay failed: {e}"
                    )));
                }
            }
        }
        Ok(Io::Tls(Box::new(stream)))
    }
}

/// The byte stream of one connection.
pub(crate) enum Io {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Io {
    /// Bounds each read (`None`: block).
    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(timeout)
    }

    /// Reads and writes without waiting (`true`) or waiting (`false`).
    pub(crate) fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.socket().set_nonblocking(on)
    }

    /// Bounds each write (`None`: block).
    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket().set_write_timeout(timeout)
    }

    fn socket(&self) -> &TcpStream {
        match self {
            Io::Plain(s) => s,
            Io::Tls(s) => &s.sock,
        }
    }

    /// Whether the connection is still open: see [`probe`]. Over TLS, what
    /// the relay's TLS sends after the handshake (TLS 1.3 session tickets,
    /// which a connection opened ahead has not read yet) is taken in
    /// without blocking; only application data, a close or an alert mean
    /// it is not.
    fn is_open(&mut self) -> bool {
        let tls = match self {
            Io::Plain(s) => return probe(s),
            Io::Tls(tls) => tls,
        };
        if tls.sock.set_nonblocking(true).is_err() {
            return false;
        }
        let open = loop {
            match tls.conn.read_tls(&mut tls.sock) {
                Ok(0) => break false,
                Ok(_) => match tls.conn.process_new_packets() {
                    Ok(state)
                        if state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed() => {}
                    _ => break false,
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break false,
            }
        };
        tls.sock.set_nonblocking(false).is_ok() && open
    }
}

impl Read for Io {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Io::Plain(s) => s.read(buf),
            Io::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Io {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Io::Plain(s) => s.write(buf),
            Io::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Io::Plain(s) => s.flush(),
            Io::Tls(s) => s.flush(),
        }
    }
}

/// The ureq transport over one connection: reads wait in slices of at most
/// [`CANCEL_POLL`] so a cancelled request notices even if shutting its
/// socket down did not wake it.
pub(crate) struct RelayTransport {
    buffers: LazyBuffers,
    io: Io,
    /// When the connection was made (its lifetime runs from here).
    created: Instant,
    lifetime: Duration,
    /// The request whose cancel switch holds this socket.
    attached: Option<Arc<RequestCtl>>,
}

impl RelayTransport {
    /// The running request's cancel switch, given this socket first if it
    /// is not already (a kept transport serves one request after another).
    fn ctl(&mut self) -> Option<Arc<RequestCtl>> {
        let ctl = current::ctl()?;
        if !self.attached.as_ref().is_some_and(|a| Arc::ptr_eq(a, &ctl)) {
            let _ = ctl.attach(self.io.socket());
            self.attached = Some(Arc::clone(&ctl));
        }
        Some(ctl)
    }
}

/// Whether `stream` is still open: a non-blocking read finds nothing to
/// read. Bytes (a TLS alert, or anything the relay did not owe us) or an
/// end mean it is not.
fn probe(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut byte = [0u8; 1];
    let open = matches!(
        (&*stream).read(&mut byte),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock
    );
    stream.set_nonblocking(false).is_ok() && open
}

impl fmt::Debug for RelayTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelayTransport")
            .field("peer", &self.io.socket().peer_addr().ok())
            .field("tls", &matches!(self.io, Io::Tls(_)))
            .finish()
    }
}

/// The request head with the first [`TOKEN_MARKER`] of its head (the
/// request line, or a header: the core masks exactly one) replaced by
/// `token`; `None` when there is no marker there.
///
/// [`TOKEN_MARKER`]: human_plus_core::TOKEN_MARKER
fn unmask(output: &[u8], token: &str) -> Option<Vec<u8>> {
    let marker = human_plus_core::TOKEN_MARKER.as_bytes();
    let head_end = output
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(output.len());
    let head = output.get(..head_end)?;
    let at = head.windows(marker.len()).position(|w| w == marker)?;
    let mut out = Vec::with_capacity(output.len() + token.len());
    out.extend_from_slice(output.get(..at)?);
    out.extend_from_slice(token.as_bytes());
    out.extend_from_slice(output.get(at + marker.len()..)?);
    Some(out)
}

/// The instant a ureq timeout runs out, `None` when it never does.
fn deadline_of(timeout: &NextTimeout) -> Option<Instant> {
    if timeout.after.is_not_happening() {
        None
    } else {
        Instant::now().checked_add(*timeout.after)
    }
}

impl Transport for RelayTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let timeout = timeout.for_write();
        let ctl = self.ctl();
        let is_cancelled = || ctl.as_ref().is_some_and(|c| c.is_cancelled());
        if is_cancelled() {
            return Err(ureq::Error::Io(cancelled()));
        }
        let limit = match deadline_of(&timeout) {
            None => None,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ureq::Error::Timeout(timeout.reason));
                }
                Some(left)
            }
        };
        self.io.socket().set_write_timeout(limit)?;
        let output = self.buffers.output().get(..amount).unwrap_or_default();
        let unmasked = current::take_token().and_then(|t| unmask(output, &t));
        let output = unmasked.as_deref().unwrap_or(output);
        match self.io.write_all(output).and_then(|()| self.io.flush()) {
            Ok(()) => Ok(()),
            Err(_) if is_cancelled() => Err(ureq::Error::Io(cancelled())),
            Err(e) if is_timeout(&e) => Err(ureq::Error::Timeout(timeout.reason)),
            Err(e) => Err(ureq::Error::Io(e)),
        }
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let timeout = timeout.for_read();
        let deadline = deadline_of(&timeout);
        let ctl = self.ctl();
        let is_cancelled = || ctl.as_ref().is_some_and(|c| c.is_cancelled());
        loop {
            if is_cancelled() {
                return Err(ureq::Error::Io(cancelled()));
            }
            let slice = match deadline {
                None => CANCEL_POLL,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(ureq::Error::Timeout(timeout.reason));
                    }
                    left.min(CANCEL_POLL)
                }
            };
            self.io.socket().set_read_timeout(Some(slice))?;
            let input = self.buffers.input_append_buf();
            match self.io.read(input) {
                Ok(_) if is_cancelled() => return Err(ureq::Error::Io(cancelled())),
                Ok(n) => {
                    self.buffers.input_appended(n);
                    return Ok(n > 0);
                }
                Err(_) if is_cancelled() => return Err(ureq::Error::Io(cancelled())),
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ureq::Error::Io(e)),
            }
        }
    }

    fn is_open(&mut self) -> bool {
        // ureq's probe before it reuses a kept connection: found closed (or
        // too old to reuse), it is not used and another is opened.
        self.created.elapsed() < self.lifetime && self.io.is_open()
    }

    fn is_tls(&self) -> bool {
        matches!(self.io, Io::Tls(_))
    }
}
