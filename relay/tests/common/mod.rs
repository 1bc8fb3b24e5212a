//! A minimal raw HTTP/1.1 client for the relay tests: requests are written
//! by hand over a `TcpStream` (or a TLS stream) and responses parsed by
//! hand, chunked bodies included, so the tests see exactly the bytes the
//! relay sends.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous bound for anything that should happen "soon".
pub const SOON: Duration = Duration::from_secs(15);

pub const TOKEN: &str = "0123456789abcdef0123";

#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text()))
    }

    pub fn assert_cors(&self) {
        assert_eq!(
            self.header("access-control-allow-origin"),
            Some("*"),
            "{self:?}"
        );
        assert_eq!(
            self.header("access-control-allow-methods"),
            Some("GET, POST, OPTIONS")
        );
        assert_eq!(
            self.header("access-control-allow-headers"),
            Some("content-type, x-csrf-token, accept, authorization")
        );
        assert_eq!(self.header("access-control-max-age"), Some("86400"));
    }

    pub fn assert_no_cors(&self) {
        assert_eq!(self.header("access-control-allow-origin"), None, "{self:?}");
        assert_eq!(
            self.header("access-control-allow-methods"),
            None,
            "{self:?}"
        );
    }
}

fn request_bytes(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    close: bool,
) -> Vec<u8> {
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\n");
    if close {
        req.push_str("Connection: close\r\n");
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// One request on a fresh connection, read to the end.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    let stream = TcpStream::connect(addr).await.expect("connect");
    request_on(stream, addr, method, target, headers, body).await
}

/// One request on the given stream (plain or TLS), read to the end.
pub async fn request_on<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    let mut reader = RawReader::send(stream, addr, method, target, headers, body)
        .await
        .expect("send");
    let head = reader.head(SOON).await.expect("response head");
    let body = reader.read_to_end(SOON).await;
    RawResponse {
        status: head.0,
        headers: head.1,
        body,
    }
}

pub async fn get(addr: SocketAddr, target: &str) -> RawResponse {
    request(addr, "GET", target, &[], b"").await
}

pub async fn post(addr: SocketAddr, target: &str, body: &str) -> RawResponse {
    request(
        addr,
        "POST",
        target,
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .await
}

pub async fn register(addr: SocketAddr, session: &str, token: &str) -> RawResponse {
    post(
        addr,
        "/register",
        &json!({"session": session, "token": token}).to_string(),
    )
    .await
}

/// A response being read incrementally (SSE streams, parked polls).
pub struct RawReader<S> {
    stream: S,
    raw: Vec<u8>,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    chunked: bool,
    content_length: Option<usize>,
    /// Decoded body bytes not yet consumed.
    pub decoded: Vec<u8>,
    /// Sizes of every HTTP chunk received (chunked bodies).
    pub chunk_sizes: Vec<usize>,
    pub body_done: bool,
    total: usize,
    pub eof: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> RawReader<S> {
    pub async fn send(
        mut stream: S,
        addr: SocketAddr,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<RawReader<S>> {
        stream
            .write_all(&request_bytes(addr, method, target, headers, body, true))
            .await?;
        stream.flush().await?;
        Ok(RawReader {
            stream,
            raw: Vec::new(),
            status: 0,
            headers: Vec::new(),
            chunked: false,
            content_length: None,
            decoded: Vec::new(),
            chunk_sizes: Vec::new(),
            body_done: false,
            total: 0,
            eof: false,
        })
    }

    async fn fill(&mut self) -> std::io::Result<usize> {
        let mut buf = [0u8; 8192];
        let n = self.stream.read(&mut buf).await?;
        if n == 0 {
            self.eof = true;
        }
        self.raw.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    /// Reads the response head. `None` if the connection closed (or was
    /// reset) before a complete head arrived, or on timeout.
    pub async fn head(&mut self, timeout: Duration) -> Option<(u16, Vec<(String, String)>)> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(end) = find(&self.raw, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.raw[..end]).into_owned();
                self.raw.drain(..end + 4);
                let mut lines = head.split("\r\n");
                let status_line = lines.next()?;
                self.status = status_line.split(' ').nth(1)?.parse().ok()?;
                for line in lines {
                    if let Some((n, v)) = line.split_once(':') {
                        self.headers
                            .push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
                    }
                }
                let header = |name: &str| {
                    self.headers
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.clone())
                };
                self.chunked =
                    header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
                self.content_length = header("content-length").and_then(|v| v.parse().ok());
                if self.status == 204 || self.status == 304 || self.content_length == Some(0) {
                    self.body_done = true;
                }
                self.decode();
                return Some((self.status, self.headers.clone()));
            }
            if self.eof {
                return None;
            }
            match tokio::time::timeout_at(deadline, self.fill()).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => {
                    self.eof = true;
                    return None;
                }
                Err(_) => return None,
            }
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn decode(&mut self) {
        if self.body_done {
            return;
        }
        if !self.chunked {
            let take = match self.content_length {
                Some(len) => len.saturating_sub(self.total).min(self.raw.len()),
                None => self.raw.len(),
            };
            let bytes: Vec<u8> = self.raw.drain(..take).collect();
            self.total += bytes.len();
            self.decoded.extend_from_slice(&bytes);
            if self.content_length.is_some_and(|len| self.total >= len) {
                self.body_done = true;
            }
            return;
        }
        loop {
            let Some(line_end) = find(&self.raw, b"\r\n") else {
                return;
            };
            let size_text = String::from_utf8_lossy(&self.raw[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .expect("chunk size");
            if size == 0 {
                self.body_done = true;
                return;
            }
            if self.raw.len() < line_end + 2 + size + 2 {
                return;
            }
            let data: Vec<u8> = self.raw[line_end + 2..line_end + 2 + size].to_vec();
            self.raw.drain(..line_end + 2 + size + 2);
            self.chunk_sizes.push(size);
            self.total += data.len();
            self.decoded.extend_from_slice(&data);
        }
    }

    /// Reads more body bytes; false once the body or connection ended.
    pub async fn more(&mut self, deadline: tokio::time::Instant) -> bool {
        if self.body_done || self.eof {
            return false;
        }
        match tokio::time::timeout_at(deadline, self.fill()).await {
            Ok(Ok(_)) => {
                self.decode();
                if self.eof && !self.chunked && self.content_length.is_none() {
                    self.body_done = true;
                }
                true
            }
            Ok(Err(_)) => {
                self.eof = true;
                false
            }
            Err(_) => false,
        }
    }

    /// Consumes decoded text up to and including `needle`.
    pub async fn read_until(&mut self, needle: &[u8], timeout: Duration) -> Option<Vec<u8>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(i) = find(&self.decoded, needle) {
                return Some(self.decoded.drain(..i + needle.len()).collect());
            }
            if !self.more(deadline).await {
                if let Some(i) = find(&self.decoded, needle) {
                    return Some(self.decoded.drain(..i + needle.len()).collect());
                }
                return None;
            }
        }
    }

    /// Reads the body to its end (or the deadline) and returns the rest.
    pub async fn read_to_end(&mut self, timeout: Duration) -> Vec<u8> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.more(deadline).await {}
        std::mem::take(&mut self.decoded)
    }

    /// The next SSE block (text up to a blank line, LF endings), without
    /// the blank line.
    pub async fn next_block(&mut self, timeout: Duration) -> Option<String> {
        let block = self.read_until(b"\n\n", timeout).await?;
        Some(String::from_utf8_lossy(&block[..block.len() - 2]).into_owned())
    }

    /// The data of the next `event: mcp` block, parsed as JSON (skipping
    /// comments and other blocks).
    pub async fn next_mcp(&mut self, timeout: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let block = self.next_block(left).await?;
            let mut event = "";
            let mut data = None;
            for line in block.split('\n') {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = v;
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(v);
                }
            }
            if event == "mcp"
                && let Some(data) = data
            {
                return Some(serde_json::from_str(data).expect("mcp data is JSON"));
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Opens an SSE stream and reads its head.
pub async fn open_events(addr: SocketAddr, target: &str) -> RawReader<TcpStream> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let mut reader = RawReader::send(stream, addr, "GET", target, &[], b"")
        .await
        .expect("send");
    reader.head(SOON).await.expect("SSE head");
    reader
}

/// Waits (polling) until `f` holds, up to `SOON`.
pub async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + SOON;
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

// ------------------------------------------------------------------ agent

/// A minimal agent over raw HTTP: subscribes its outbound leg first, then
/// POSTs to `inbox`, then reads its reply.
pub struct Agent {
    pub addr: SocketAddr,
    pub session: String,
    pub token: String,
    pub client: Option<String>,
    leg: AgentLeg,
    backlog: Vec<Value>,
}

enum AgentLeg {
    Sse(RawReader<TcpStream>),
    Poll(String),
}

impl Agent {
    fn query_client(&self) -> String {
        self.client
            .as_ref()
            .map(|c| format!("&client={c}"))
            .unwrap_or_default()
    }

    pub async fn sse(addr: SocketAddr, session: &str, token: &str, client: Option<&str>) -> Agent {
        let label = client.map(|c| format!("&client={c}")).unwrap_or_default();
        let mut reader = open_events(
            addr,
            &format!("/{session}/events?token={token}&direction=outbound{label}"),
        )
        .await;
        assert_eq!(reader.status, 200);
        assert_eq!(
            reader.next_block(SOON).await.as_deref(),
            Some("retry: 2000")
        );
        Agent {
            addr,
            session: session.into(),
            token: token.into(),
            client: client.map(str::to_owned),
            leg: AgentLeg::Sse(reader),
            backlog: Vec::new(),
        }
    }

    pub async fn poll(addr: SocketAddr, session: &str, token: &str, client: Option<&str>) -> Agent {
        let label = client.map(|c| format!("&client={c}")).unwrap_or_default();
        let first = get(
            addr,
            &format!("/{session}/poll?token={token}&direction=outbound&wait=0{label}"),
        )
        .await;
        assert_eq!(first.status, 200, "{}", first.text());
        let body = first.json();
        let subscriber = body["subscriber"].as_str().expect("subscriber").to_owned();
        assert_eq!(body["frames"], json!([]));
        Agent {
            addr,
            session: session.into(),
            token: token.into(),
            client: client.map(str::to_owned),
            leg: AgentLeg::Poll(subscriber),
            backlog: Vec::new(),
        }
    }

    pub async fn post(&self, frame: &Value) -> RawResponse {
        post(
            self.addr,
            &format!(
                "/{}/inbox?token={}{}",
                self.session,
                self.token,
                self.query_client()
            ),
            &frame.to_string(),
        )
        .await
    }

    /// The next frame on the outbound leg, or `None` after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<Value> {
        if !self.backlog.is_empty() {
            return Some(self.backlog.remove(0));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        match &mut self.leg {
            AgentLeg::Sse(reader) => reader.next_mcp(timeout).await,
            AgentLeg::Poll(subscriber) => loop {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return None;
                }
                let wait = left.as_millis().min(5000);
                let answer = get(
                    self.addr,
                    &format!(
                        "/{}/poll?token={}&direction=outbound&wait={wait}&subscriber={subscriber}",
                        self.session, self.token
                    ),
                )
                .await;
                assert_eq!(answer.status, 200, "{}", answer.text());
                let body = answer.json();
                assert_eq!(body["subscriber"].as_str(), Some(subscriber.as_str()));
                for frame in body["frames"].as_array().expect("frames") {
                    let text = frame.as_str().expect("frames are JSON strings");
                    self.backlog
                        .push(serde_json::from_str(text).expect("frame JSON"));
                }
                if !self.backlog.is_empty() {
                    return Some(self.backlog.remove(0));
                }
            },
        }
    }

    /// Sends a request and reads frames until its reply arrives.
    pub async fn call(&mut self, id: Value, method: &str, params: Value) -> Value {
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let posted = self.post(&frame).await;
        assert_eq!(posted.status, 200, "{}", posted.text());
        loop {
            let frame = self
                .next(SOON)
                .await
                .unwrap_or_else(|| panic!("no reply to {method}"));
            if frame.get("id") == Some(&id) && frame.get("method").is_none() {
                return frame;
            }
        }
    }
}
