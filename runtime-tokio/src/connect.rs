//! Opening one HTTP/1.1 connection to a relay endpoint: resolve, vet,
//! dial (directly or through the egress proxy's CONNECT tunnel), TLS, and
//! the hyper handshake.
//!
//! This is where SSRF is enforced: the host's addresses are vetted by the
//! core before any socket is opened, and the socket (or the proxy's tunnel)
//! goes to a vetted address only.
//!
//! [`Connector::open`] yields a [`Connection`] that serves requests until it
//! is dropped. Connections are kept between requests in the core's
//! [`ConnectionPool`], under the core's [`ConnectionKey`]
//! (`RelayEndpoint::connection_key`): a request takes an idle connection
//! whose sender is still open, or opens one; a connection whose response
//! was read to its end goes back.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::Instrument;

use human_plus_core::{
    ConnectionKey, ConnectionPool, Error, ProxyAddr, ProxyConnectResponse, RelayEndpoint,
    TransportError, TransportErrorKind,
};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;
use tokio_rustls::TlsConnector;

use human_plus_runtime::{NetSettings, Resolve};

use crate::clock::now;

/// The read buffer of a relay connection, in bytes: hyper reads exactly
/// this much at a time and a response head must fit in it. A relay's heads
/// are a few hundred bytes and its bodies are streamed to the core, which
/// bounds them; hyper's default (8 KiB, growing to about 400 KiB) sized
/// every connection for far larger messages than a relay sends.
pub(crate) const RELAY_READ_BUFFER: usize = 4096;

/// The largest response head a relay connection reads, once a head did not
/// fit in [`RELAY_READ_BUFFER`] (a relay behind a proxy that adds kilobytes
/// of cookies or policy headers): connections opened from then on read with
/// hyper's own strategy (8 KiB, growing up to this, shrinking back).
pub(crate) const RELAY_HEAD_MAX: usize = 64 * 1024;

/// A transport error of `kind`.
pub(crate) fn transport(kind: TransportErrorKind, message: impl AsRef<str>) -> Error {
    Error::Transport(TransportError::new(kind, message))
}

/// Any byte stream a connection can run over.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// Aborts a task when dropped.
#[derive(Debug)]
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One open HTTP/1.1 connection. Dropping it closes the connection.
#[derive(Debug)]
pub(crate) struct Connection {
    /// Sends requests on the connection.
    pub(crate) sender: http1::SendRequest<Full<Bytes>>,
    /// The task driving the connection; aborted when this is dropped.
    _driver: AbortOnDrop,
}

/// Opens connections: the resolver, the TLS configuration and the connect
/// timeout. Shared by every request of every operation.
#[derive(Debug)]
pub(crate) struct Connector {
    pub(crate) net: NetSettings<dyn Resolve>,
    /// Idle connections, by key.
    pub(crate) pool: Mutex<ConnectionPool<Connection>>,
    /// Set once a relay's response head did not fit in
    /// [`RELAY_READ_BUFFER`]: connections opened since may read heads of
    /// up to [`RELAY_HEAD_MAX`].
    pub(crate) large_heads: AtomicBool,
}

impl Connector {
    /// A connector over `net`, with no connection kept yet.
    pub(crate) fn new(net: NetSettings<dyn Resolve>) -> Self {
        let pool = ConnectionPool::new(net.pool);
        Connector {
            net,
            pool: Mutex::new(pool),
            large_heads: AtomicBool::new(false),
        }
    }

    /// Records that a response head did not fit in the exact buffer the
    /// connection read with; false when connections already read larger
    /// heads (the head is over [`RELAY_HEAD_MAX`]).
    pub(crate) fn head_did_not_fit(&self) -> bool {
        !self.large_heads.swap(true, Ordering::Relaxed)
    }

    /// An idle connection for `key` whose sender is still open (one found
    /// closed is dropped), and when it was made.
    pub(crate) fn take(&self, key: &ConnectionKey) -> Option<(Connection, std::time::Instant)> {
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        pool.take(key, now(), |c| !c.sender.is_closed() && c.sender.is_ready())
            .map(|k| (k.conn, k.created))
    }

    /// Keeps `conn` (made at `created`) for the next request of `key`.
    pub(crate) fn put(&self, key: ConnectionKey, conn: Connection, created: std::time::Instant) {
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        let at = now();
        pool.purge(at);
        pool.put(key, conn, created, at);
    }

    /// Opens connections to `endpoint` ahead of its POSTs (the core's
    /// [`Transmit::Connect`](human_plus_core::Transmit::Connect)): as many
    /// as the pool says are missing, each on a task of its own that keeps
    /// it idle once open (bounded by the connect timeout; a failure is only
    /// logged: the POST that needs a connection opens its own and reports).
    pub(crate) fn open_ahead(self: &Arc<Self>, endpoint: &Arc<RelayEndpoint>, wanted: usize) {
        let key = endpoint.connection_key();
        let open = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reserve_ahead(&key, wanted, now());
        for _ in 0..open {
            let (connector, endpoint, key) = (Arc::clone(self), Arc::clone(endpoint), key.clone());
            tokio::spawn(
                async move {
                    match connector.open(&endpoint).await {
                        Ok(conn) => {
                            tracing::debug!("relay connection opened ahead");
                            connector.put(key.clone(), conn, now());
                        }
                        Err(e) => tracing::debug!(error = %e, "opening a connection ahead failed"),
                    }
                    connector
                        .pool
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .ahead_done(&key);
                }
                .instrument(tracing::Span::current()),
            );
        }
    }

    /// Opens a connection to `endpoint`.
    ///
    /// Each step is bounded by the connect timeout: resolution, each TCP
    /// connection attempt, the proxy's CONNECT answer, the TLS handshake.
    /// The caller bounds the whole by the request's deadline.
    pub(crate) async fn open(&self, endpoint: &RelayEndpoint) -> Result<Connection, Error> {
        let stream = self.open_stream(endpoint).await?;
        let mut builder = http1::Builder::new();
        if self.large_heads.load(Ordering::Relaxed) {
            builder.max_buf_size(RELAY_HEAD_MAX);
        } else {
            builder.read_buf_exact_size(Some(RELAY_READ_BUFFER));
        }
        let (sender, connection) = builder
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| transport(TransportErrorKind::Io, format!("HTTP/1.1 handshake: {e}")))?;
        let driver = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "relay connection ended with an error");
            }
        });
        Ok(Connection {
            sender,
            _driver: AbortOnDrop(driver.abort_handle()),
        })
    }

    /// Opens a byte stream to `endpoint`: its vetted addresses only,
    /// through its egress proxy when it has one, TLS when it uses TLS
    /// (what an HTTP connection and a channel's WebSocket both run over).
    pub(crate) async fn open_stream(
        &self,
        endpoint: &RelayEndpoint,
    ) -> Result<Box<dyn Stream>, Error> {
        let vetted = self.vetted_addresses(endpoint).await?;
        let tcp = match endpoint.proxy() {
            Some(proxy) => self.tunnel(proxy, &vetted, endpoint).await?,
            None => Rewind::new(self.dial(&vetted, endpoint.port()).await?, Vec::new()),
        };
        Ok(if endpoint.uses_tls() {
            Box::new(self.tls(tcp, endpoint).await?)
        } else {
            Box::new(tcp)
        })
    }

    /// The addresses to connect to: the literal IP, or the resolver's
    /// answer, vetted by the core either way.
    async fn vetted_addresses(&self, endpoint: &RelayEndpoint) -> Result<Vec<IpAddr>, Error> {
        let addrs = match endpoint.resolved_literal() {
            Some(ip) => vec![ip],
            None => {
                let host = endpoint.host();
                let lookup = self.net.resolver.resolve(host, endpoint.port());
                match tokio::time::timeout(self.net.connect_timeout, lookup).await {
                    Ok(Ok(addrs)) => addrs,
                    Ok(Err(e)) => {
                        return Err(transport(
                            TransportErrorKind::Dns,
                            format!("could not resolve the relay host [{host}]: {e}"),
                        ));
                    }
                    Err(_) => {
                        return Err(transport(
                            TransportErrorKind::Timeout,
                            format!(
                                "resolving the relay host [{host}] took longer than the connect timeout"
                            ),
                        ));
                    }
                }
            }
        };
        let vetted = endpoint
            .vet_resolved(&addrs)
            .map_err(Error::EgressRefused)?;
        tracing::debug!(host = endpoint.host(), addresses = ?vetted, "relay addresses vetted");
        Ok(vetted)
    }

    /// Connects to the first vetted address that answers.
    async fn dial(&self, vetted: &[IpAddr], port: u16) -> Result<TcpStream, Error> {
        let mut last = transport(TransportErrorKind::Connect, "no address to connect to");
        for ip in vetted {
            let addr = SocketAddr::new(*ip, port);
            match self.connect_tcp(addr).await {
                Ok(stream) => return Ok(stream),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn connect_tcp(&self, addr: SocketAddr) -> Result<TcpStream, Error> {
        match tokio::time::timeout(self.net.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                Ok(stream)
            }
            Ok(Err(e)) => Err(transport(
                TransportErrorKind::Connect,
                format!("could not connect to {addr}: {e}"),
            )),
            Err(_) => Err(transport(
                TransportErrorKind::Timeout,
                format!("connecting to {addr} took longer than the connect timeout"),
            )),
        }
    }

    /// Opens a CONNECT tunnel through the egress proxy to the first vetted
    /// address the proxy agrees to reach. The tunnel's target is always the
    /// vetted IP, never the name, so the proxy cannot resolve it again.
    async fn tunnel(
        &self,
        proxy: &ProxyAddr,
        vetted: &[IpAddr],
        endpoint: &RelayEndpoint,
    ) -> Result<Rewind<TcpStream>, Error> {
        let mut last = transport(TransportErrorKind::Proxy, "no address to tunnel to");
        for ip in vetted {
            match self.tunnel_to(proxy, *ip, endpoint).await {
                Ok(stream) => return Ok(stream),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn tunnel_to(
        &self,
        proxy: &ProxyAddr,
        ip: IpAddr,
        endpoint: &RelayEndpoint,
    ) -> Result<Rewind<TcpStream>, Error> {
        // The proxy's own address is trusted configuration: system DNS.
        let connect = TcpStream::connect((proxy.host.as_str(), proxy.port));
        let mut stream = match tokio::time::timeout(self.net.connect_timeout, connect).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                return Err(transport(
                    TransportErrorKind::Proxy,
                    format!("could not connect to the egress proxy {proxy}: {e}"),
                ));
            }
            Err(_) => {
                return Err(transport(
                    TransportErrorKind::Timeout,
                    format!(
                        "connecting to the egress proxy {proxy} took longer than the connect timeout"
                    ),
                ));
            }
        };
        let _ = stream.set_nodelay(true);
        let request = proxy.connect_request(&ip.to_string(), endpoint.port(), endpoint.host());
        tracing::debug!(%proxy, target = %SocketAddr::new(ip, endpoint.port()), "CONNECT through the egress proxy");
        let handshake = async {
            stream.write_all(&request).await.map_err(|e| {
                transport(
                    TransportErrorKind::Proxy,
                    format!("writing CONNECT to the egress proxy: {e}"),
                )
            })?;
            let mut buf = Vec::with_capacity(1024);
            let mut chunk = [0u8; 1024];
            loop {
                let n = stream.read(&mut chunk).await.map_err(|e| {
                    transport(
                        TransportErrorKind::Proxy,
                        format!("reading the egress proxy's CONNECT answer: {e}"),
                    )
                })?;
                if n == 0 {
                    return Err(transport(
                        TransportErrorKind::Proxy,
                        "the egress proxy closed the connection before answering CONNECT",
                    ));
                }
                buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
                if let Some(head_len) = ProxyConnectResponse::established(&buf)? {
                    return Ok(buf.split_off(head_len.min(buf.len())));
                }
            }
        };
        let rest = match tokio::time::timeout(self.net.connect_timeout, handshake).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(transport(
                    TransportErrorKind::Timeout,
                    format!(
                        "the egress proxy {proxy} did not answer CONNECT within the connect timeout"
                    ),
                ));
            }
        };
        Ok(Rewind::new(stream, rest))
    }

    /// The TLS handshake, with SNI and certificate check on the relay's
    /// host (a name, or an IP address for an IP-literal host).
    async fn tls<S>(
        &self,
        stream: S,
        endpoint: &RelayEndpoint,
    ) -> Result<tokio_rustls::client::TlsStream<S>, Error>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let config = self.net.tls.clone()?;
        let name = ServerName::try_from(endpoint.host().to_owned()).map_err(|_| {
            transport(
                TransportErrorKind::Tls,
                format!(
                    "the relay host [{}] is not a valid TLS server name",
                    endpoint.host()
                ),
            )
        })?;
        let handshake = TlsConnector::from(config).connect(name, stream);
        match tokio::time::timeout(self.net.connect_timeout, handshake).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(transport(
                TransportErrorKind::Tls,
                format!("TLS with the relay host [{}] failed: {e}", endpoint.host()),
            )),
            Err(_) => Err(transport(
                TransportErrorKind::Timeout,
                "the TLS handshake took longer than the connect timeout",
            )),
        }
    }
}

/// A stream that first yields bytes already read from it (what an egress
/// proxy sent after its CONNECT answer belongs to the tunnel).
pub(crate) struct Rewind<T> {
    prefix: Vec<u8>,
    at: usize,
    inner: T,
}

impl<T> Rewind<T> {
    fn new(inner: T, prefix: Vec<u8>) -> Self {
        Rewind {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(rest) = this.prefix.get(this.at..).filter(|r| !r.is_empty()) {
            let n = rest.len().min(buf.remaining());
            buf.put_slice(rest.get(..n).unwrap_or_default());
            this.at += n;
            if this.at >= this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[tokio::test]
    async fn rewind_yields_the_prefix_first() {
        let (a, mut b) = tokio::io::duplex(64);
        b.write_all(b" world").await.unwrap();
        drop(b);
        let mut r = Rewind::new(a, b"hello".to_vec());
        let mut out = String::new();
        r.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
