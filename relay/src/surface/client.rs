//! The demo surface's HTTP side: a minimal hyper 1 client (one connection
//! per request, HTTP or HTTPS) and a lenient SSE reader.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::error::SurfaceError;

/// Timeout of a POST to the relay (and of the auth bridge's request).
pub(super) const POST_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait between reconnection attempts of a receive leg or channel.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(2);

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connected byte stream (TCP, or TLS over it).
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
/// Largest JSON body the surface reads from the relay.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// Where the relay is and how to reach it.
#[derive(Clone)]
pub(crate) struct Client {
    host: String,
    port: u16,
    host_header: String,
    base_path: String,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("host", &self.host_header)
            .field("base_path", &self.base_path)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Client {
    pub(crate) fn new(
        base_url: &str,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Client, SurfaceError> {
        let url =
            url::Url::parse(base_url).map_err(|e| SurfaceError::InvalidUrl(format!("{e}")))?;
        let https = match url.scheme() {
            "http" => false,
            "https" => true,
            other => {
                return Err(SurfaceError::InvalidUrl(format!(
                    "unsupported scheme {other:?}"
                )));
            }
        };
        if url.query().is_some() || !url.username().is_empty() || url.password().is_some() {
            return Err(SurfaceError::InvalidUrl(
                "the base URL must not carry a query or credentials".into(),
            ));
        }
        let (host, server_name) = match url.host() {
            Some(url::Host::Domain(d)) => (
                d.to_owned(),
                ServerName::try_from(d.to_owned())
                    .map_err(|e| SurfaceError::InvalidUrl(e.to_string()))?,
            ),
            Some(url::Host::Ipv4(ip)) => (
                ip.to_string(),
                ServerName::IpAddress(std::net::IpAddr::V4(ip).into()),
            ),
            Some(url::Host::Ipv6(ip)) => (
                ip.to_string(),
                ServerName::IpAddress(std::net::IpAddr::V6(ip).into()),
            ),
            None => return Err(SurfaceError::InvalidUrl("no host".into())),
        };
        let port = url
            .port_or_known_default()
            .unwrap_or(if https { 443 } else { 80 });
        let host_str = url.host_str().unwrap_or_default();
        let host_header = match url.port() {
            Some(p) => format!("{host_str}:{p}"),
            None => host_str.to_owned(),
        };
        let tls = if https {
            let config = match tls {
                Some(c) => c,
                None => {
                    return Err(SurfaceError::Tls(
                        "an https relay needs trusted roots: use DemoSurfaceBuilder::tls_roots or tls_config".into(),
                    ));
                }
            };
            Some((config, server_name))
        } else {
            None
        };
        Ok(Client {
            host,
            port,
            host_header,
            base_path: url.path().trim_end_matches('/').to_owned(),
            tls,
        })
    }

    /// `{base path}{tail}` — `tail` starts with `/`.
    pub(crate) fn target(&self, tail: &str) -> String {
        format!("{}{tail}", self.base_path)
    }

    /// A byte stream to the host: TCP, with TLS over it for `https`.
    pub(crate) async fn connect_io(&self) -> Result<Box<dyn Io>, SurfaceError> {
        let stream = tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| SurfaceError::Timeout("connect"))?
        .map_err(|e| SurfaceError::Connect(e.to_string()))?;
        let _ = stream.set_nodelay(true);
        match &self.tls {
            None => Ok(Box::new(stream)),
            Some((config, name)) => {
                let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
                let tls =
                    tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name.clone(), stream))
                        .await
                        .map_err(|_| SurfaceError::Timeout("TLS handshake"))?
                        .map_err(|e| SurfaceError::Tls(e.to_string()))?;
                Ok(Box::new(tls))
            }
        }
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, SurfaceError> {
        handshake(self.connect_io().await?).await
    }

    /// Sends one request on a fresh connection and returns the response head
    /// (the body streams).
    pub(crate) async fn send(
        &self,
        method: Method,
        target: &str,
        body: Option<String>,
    ) -> Result<Response<Incoming>, SurfaceError> {
        let content_type = body.as_ref().map(|_| "application/json");
        self.send_with(method, target, &[], content_type, body)
            .await
    }

    /// [`Client::send`] with more headers and a chosen content type.
    pub(crate) async fn send_with(
        &self,
        method: Method,
        target: &str,
        headers: &[(&str, &str)],
        content_type: Option<&str>,
        body: Option<String>,
    ) -> Result<Response<Incoming>, SurfaceError> {
        let mut sender = self.connect().await?;
        let mut builder = Request::builder()
            .method(method)
            .uri(target)
            .header("host", &self.host_header)
            .header("accept", "application/json, text/event-stream");
        if let Some(content_type) = content_type {
            builder = builder.header("content-type", content_type);
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| SurfaceError::InvalidUrl(e.to_string()))?;
        sender
            .send_request(request)
            .await
            .map_err(|e| SurfaceError::Connect(e.to_string()))
    }

    /// Sends one request and reads the whole (bounded) body.
    pub(crate) async fn send_full(
        &self,
        method: Method,
        target: &str,
        body: Option<String>,
        timeout: Duration,
    ) -> Result<(u16, Bytes), SurfaceError> {
        tokio::time::timeout(timeout, async {
            let response = self.send(method, target, body).await?;
            let status = response.status().as_u16();
            let body = read_bounded(response.into_body(), MAX_BODY).await?;
            Ok((status, body))
        })
        .await
        .map_err(|_| SurfaceError::Timeout("request"))?
    }

    /// POSTs a form with `Authorization: Bearer TOKEN` (what pusher-js
    /// sends an auth endpoint) and reads the whole (bounded) answer.
    pub(crate) async fn post_form_bearer(
        &self,
        target: &str,
        token: &str,
        form: String,
        timeout: Duration,
    ) -> Result<(u16, Bytes), SurfaceError> {
        let bearer = format!("Bearer {token}");
        tokio::time::timeout(timeout, async {
            let response = self
                .send_with(
                    Method::POST,
                    target,
                    &[("authorization", bearer.as_str())],
                    Some("application/x-www-form-urlencoded"),
                    Some(form),
                )
                .await?;
            let status = response.status().as_u16();
            let body = read_bounded(response.into_body(), MAX_BODY).await?;
            Ok((status, body))
        })
        .await
        .map_err(|_| SurfaceError::Timeout("request"))?
    }
}

async fn handshake<I>(io: I) -> Result<SendRequest<Full<Bytes>>, SurfaceError>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| SurfaceError::Connect(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(error) = conn.await {
            tracing::trace!(%error, "relay connection ended");
        }
    });
    Ok(sender)
}

async fn read_bounded(mut body: Incoming, limit: usize) -> Result<Bytes, SurfaceError> {
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| SurfaceError::Connect(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(SurfaceError::Protocol("response body too large".into()));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buf))
}

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub(crate) event: String,
    pub(crate) data: String,
}

/// A lenient SSE reader: LF, CRLF and CR line endings, comments ignored,
/// invalid UTF-8 replaced, lines and events over the budget dropped.
#[derive(Debug)]
pub(crate) struct SseReader {
    line: Vec<u8>,
    skipping_line: bool,
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    oversize_event: bool,
    budget: usize,
}

impl SseReader {
    pub(crate) fn new(budget: usize) -> SseReader {
        SseReader {
            line: Vec::new(),
            skipping_line: false,
            after_cr: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            oversize_event: false,
            budget,
        }
    }

    /// Feeds bytes; appends every completed event to `out`.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' => self.end_line(out),
                b'\r' => {
                    self.end_line(out);
                    self.after_cr = true;
                }
                _ => {
                    if self.skipping_line {
                        continue;
                    }
                    if self.line.len() >= self.budget {
                        self.line.clear();
                        self.skipping_line = true;
                        self.oversize_event = true;
                        continue;
                    }
                    self.line.push(b);
                }
            }
        }
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        self.skipping_line = false;
        let line = String::from_utf8_lossy(&self.line).into_owned();
        self.line.clear();
        if line.is_empty() {
            if self.has_data && !self.oversize_event {
                let mut data = std::mem::take(&mut self.data);
                if data.ends_with('\n') {
                    data.pop();
                }
                out.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data,
                });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            self.oversize_event = false;
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line.as_str(), ""),
        };
        match field {
            "event" => self.event = value.to_owned(),
            "data" => {
                if self.data.len() + value.len() > self.budget {
                    self.oversize_event = true;
                    return;
                }
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut reader = SseReader::new(1024);
        let mut out = Vec::new();
        for c in chunks {
            reader.push(c, &mut out);
        }
        out
    }

    #[test]
    fn reads_every_line_ending_and_split() {
        let text = b"retry: 2000\n\nevent: mcp\ndata: {\"a\":1}\n\n: keepalive\n\n";
        let whole = read_all(&[text]);
        assert_eq!(
            whole,
            vec![SseEvent {
                event: "mcp".into(),
                data: "{\"a\":1}".into()
            }]
        );
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(read_all(&bytes), whole);
        let crlf = b"retry: 2000\r\n\r\nevent: mcp\r\ndata: {\"a\":1}\r\n\r\n";
        let bytes: Vec<&[u8]> = crlf.chunks(1).collect();
        assert_eq!(read_all(&bytes), whole);
        let cr = b"event: mcp\rdata: {\"a\":1}\r\r";
        assert_eq!(read_all(&[cr]), whole);
    }

    #[test]
    fn skips_garbage_and_oversize() {
        let text = b"not a field\n\xff\xfe\n\nevent: mcp\ndata: x\n\n";
        assert_eq!(
            read_all(&[text]),
            vec![SseEvent {
                event: "mcp".into(),
                data: "x".into()
            }]
        );
        let mut reader = SseReader::new(8);
        let mut out = Vec::new();
        reader.push(b"data: 0123456789abcdef\n\ndata: ok\n\n", &mut out);
        assert_eq!(
            out,
            vec![SseEvent {
                event: String::new(),
                data: "ok".into()
            }]
        );
    }
}
