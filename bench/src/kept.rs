//! The keep-alive floor: a bare hyper client that does only the minimum a
//! relay client must do, with everything kept: ONE receive leg opened at
//! start and kept open (an SSE stream, or a long-poll that is always parked
//! at the relay), and kept connections for the POSTs. A call is then one
//! POST and its reply on the open leg: about one round trip across a link.
//!
//! Like [`crate::net::Floor`] it does no Human+ work (no egress vetting, no
//! trust, no SSE decoder: a substring search for the reply's id, no
//! framing). Unlike it, it never opens a connection after start.
//!
//! At start it opens three connections in parallel (the leg, the POST
//! connection, and a second POST connection so that
//! `notifications/initialized` goes out beside the first `tools/list`
//! instead of costing a round trip before it), then runs `initialize`,
//! then `notifications/initialized` and `tools/list` at once. It reaches
//! the relay directly ([`Route::Direct`]) or as the production path does,
//! TLS through an HTTP CONNECT proxy ([`Route::Tunnel`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::net::{LegKind, TOKEN, TOOL, tool_args};

/// Why a floor exchange failed.
pub type FloorError = Box<dyn std::error::Error + Send + Sync>;

/// How long one exchange may take before the floor gives up.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// How the floor reaches the relay.
#[derive(Clone)]
pub enum Route {
    /// Plain HTTP to this address.
    Direct(SocketAddr),
    /// HTTPS to `target` through the CONNECT proxy at `proxy`, trusting
    /// `tls` (the target's IP address is the TLS server name).
    Tunnel {
        /// The CONNECT proxy.
        proxy: SocketAddr,
        /// The relay (or the link in front of it).
        target: SocketAddr,
        /// The client configuration (e.g. `GeneratedCert::client_config`).
        tls: Arc<rustls::ClientConfig>,
    },
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Direct(addr) => f.debug_tuple("Direct").field(addr).finish(),
            Route::Tunnel { proxy, target, .. } => f
                .debug_struct("Tunnel")
                .field("proxy", proxy)
                .field("target", target)
                .finish_non_exhaustive(),
        }
    }
}

impl Route {
    fn target(&self) -> SocketAddr {
        match self {
            Route::Direct(addr) | Route::Tunnel { target: addr, .. } => *addr,
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type Sender = SendRequest<Full<Bytes>>;

/// Opens one HTTP/1.1 connection along `route`.
async fn open(route: &Route) -> Result<Sender, FloorError> {
    let io: Box<dyn Io> = match route {
        Route::Direct(addr) => {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            Box::new(tcp)
        }
        Route::Tunnel { proxy, target, tls } => {
            let tcp = crate::proxy::tunnel(*proxy, *target).await?;
            let name = rustls_pki_types::ServerName::from(target.ip());
            let stream = tokio_rustls::TlsConnector::from(Arc::clone(tls))
                .connect(name, tcp)
                .await?;
            Box::new(stream)
        }
    };
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The long-poll leg: one poll always parked at the relay, on the leg's
/// kept connection.
struct PollLeg {
    path: String,
    parked: JoinHandle<Result<(Sender, Bytes), FloorError>>,
    buf: Vec<u8>,
}

enum Leg {
    Sse { body: Incoming, buf: Vec<u8> },
    Poll(PollLeg),
}

/// A keep-alive floor client of one session (see the
/// [module documentation](self)).
pub struct KeptFloor {
    host: String,
    base: String,
    post: Sender,
    notify: Sender,
    leg: Leg,
    client: String,
    next: u64,
    revision: String,
}

impl std::fmt::Debug for KeptFloor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptFloor")
            .field("host", &self.host)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

fn get(host: &str, path: &str, accept: &str) -> Result<Request<Full<Bytes>>, FloorError> {
    Ok(Request::get(path)
        .header("host", host)
        .header("accept", accept)
        .body(Full::new(Bytes::new()))?)
}

async fn send(sender: &mut Sender, req: Request<Full<Bytes>>) -> Result<Bytes, FloorError> {
    sender.ready().await?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    if status != 200 {
        return Err(format!("the relay answered {status}").into());
    }
    Ok(body)
}

fn park(
    mut sender: Sender,
    host: String,
    path: String,
) -> JoinHandle<Result<(Sender, Bytes), FloorError>> {
    tokio::spawn(async move {
        let body = send(&mut sender, get(&host, &path, "application/json")?).await?;
        Ok((sender, body))
    })
}

impl KeptFloor {
    /// Opens the leg and the two POST connections (in parallel) for
    /// `session` as client `client` along `route`. The leg is open (the SSE
    /// stream answered, or the first poll named the subscriber and the next
    /// one is parked) when this returns. No MCP exchange yet.
    ///
    /// # Errors
    /// Connection failures, a non-200 answer.
    pub async fn open(
        route: &Route,
        session: &str,
        client: &str,
        leg: LegKind,
    ) -> Result<KeptFloor, FloorError> {
        let host = route.target().to_string();
        let base = format!("/{session}/");
        let query = format!("?token={TOKEN}&client={client}&direction=outbound");
        let open_leg = async {
            let mut sender = open(route).await?;
            match leg {
                LegKind::Sse => {
                    sender.ready().await?;
                    let req = get(&host, &format!("{base}events{query}"), "text/event-stream")?;
                    let resp = sender.send_request(req).await?;
                    if resp.status() != 200 {
                        return Err(format!("GET events answered {}", resp.status()).into());
                    }
                    // The connection is the stream's for good.
                    drop(sender);
                    Ok::<Leg, FloorError>(Leg::Sse {
                        body: resp.into_body(),
                        buf: Vec::new(),
                    })
                }
                LegKind::Poll => {
                    let first = send(
                        &mut sender,
                        get(
                            &host,
                            &format!("{base}poll{query}&wait=0"),
                            "application/json",
                        )?,
                    )
                    .await?;
                    let v: Value = serde_json::from_slice(&first)?;
                    let subscriber = v
                        .get("subscriber")
                        .and_then(Value::as_str)
                        .ok_or("no subscriber in the first poll")?;
                    let path = format!("{base}poll{query}&wait=20000&subscriber={subscriber}");
                    Ok(Leg::Poll(PollLeg {
                        parked: park(sender, host.clone(), path.clone()),
                        path,
                        buf: Vec::new(),
                    }))
                }
            }
        };
        let (leg, post, notify) = tokio::try_join!(open_leg, open(route), open(route))?;
        Ok(KeptFloor {
            host,
            base,
            post,
            notify,
            leg,
            client: client.to_owned(),
            next: 1,
            revision: String::new(),
        })
    }

    fn frame(&mut self, method: &str, params: Option<&Value>) -> (String, Bytes) {
        let id = format!("{}-kept-{}", self.client, self.next);
        self.next += 1;
        let mut frame = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(p) = params {
            frame["params"] = p.clone();
        }
        (id, Bytes::from(frame.to_string()))
    }

    fn inbox(host: &str, path: &str, frame: Bytes) -> Result<Request<Full<Bytes>>, FloorError> {
        Ok(Request::post(path)
            .header("host", host)
            .header("content-type", "application/json")
            .header("content-length", frame.len())
            .body(Full::new(frame))?)
    }

    fn inbox_path(&self) -> String {
        format!("{}inbox?token={TOKEN}&client={}", self.base, self.client)
    }

    /// One exchange: POST the frame on the kept connection, read its reply
    /// on the open leg. Returns the reply's bytes (as the leg carried them).
    ///
    /// # Errors
    /// Connection failures, a non-200 answer, the leg ending, a timeout.
    pub async fn exchange(
        &mut self,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Vec<u8>, FloorError> {
        let (id, frame) = self.frame(method, params);
        let path = self.inbox_path();
        exchange_on(&mut self.post, &mut self.leg, &self.host, &path, &id, frame).await
    }

    /// POSTs a notification on the second connection (waiting only for its
    /// HTTP answer).
    async fn notify(
        host: &str,
        path: &str,
        sender: &mut Sender,
        method: &str,
    ) -> Result<(), FloorError> {
        let frame = json!({"jsonrpc": "2.0", "method": method}).to_string();
        send(sender, Self::inbox(host, path, Bytes::from(frame))?).await?;
        Ok(())
    }

    /// What an MCP client does at start: `initialize`, then
    /// `notifications/initialized` beside the first `tools/list`.
    ///
    /// # Errors
    /// As the exchanges; a listing without the benchmark tool.
    pub async fn initialize_and_list(&mut self) -> Result<(), FloorError> {
        let init = json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "human-plus-bench-floor", "version": "0"},
        });
        self.exchange("initialize", Some(&init)).await?;
        let path = self.inbox_path();
        let (id, frame) = self.frame("tools/list", None);
        let initialized = Self::notify(
            &self.host,
            &path,
            &mut self.notify,
            "notifications/initialized",
        );
        let listing = exchange_on(&mut self.post, &mut self.leg, &self.host, &path, &id, frame);
        let (_, listing) = tokio::try_join!(initialized, listing)?;
        if find(&listing, TOOL.as_bytes()).is_none() {
            return Err(format!("{TOOL} not listed").into());
        }
        Ok(())
    }

    /// One pinned `tools/call` of [`TOOL`] (pinned to the revision the last
    /// call carried, once there is one); returns its latency.
    ///
    /// # Errors
    /// As the exchange.
    pub async fn call(&mut self) -> Result<Duration, FloorError> {
        let params = if self.revision.is_empty() {
            json!({"name": TOOL, "arguments": tool_args()})
        } else {
            json!({"name": TOOL, "arguments": tool_args(), "_meta": {"revision": self.revision}})
        };
        let start = Instant::now();
        let reply = self.exchange("tools/call", Some(&params)).await?;
        let took = start.elapsed();
        if self.revision.is_empty() {
            self.revision = revision_in(&reply).unwrap_or_default();
        }
        Ok(took)
    }

    /// One `tools/call` of `tool` with `args`, pinned to the revision the
    /// last reply carried (a write moves it: each reply's revision is kept
    /// for the next call); returns its latency.
    ///
    /// # Errors
    /// As the exchange.
    pub async fn call_tool(&mut self, tool: &str, args: Value) -> Result<Duration, FloorError> {
        let params = if self.revision.is_empty() {
            json!({"name": tool, "arguments": args})
        } else {
            json!({"name": tool, "arguments": args, "_meta": {"revision": self.revision}})
        };
        let start = Instant::now();
        let reply = self.exchange("tools/call", Some(&params)).await?;
        let took = start.elapsed();
        if let Some(revision) = revision_in(&reply) {
            self.revision = revision;
        }
        Ok(took)
    }

    /// Forgets the revision calls are pinned to (the page moved on under
    /// another client's writes): the next call goes unpinned.
    pub fn forget_revision(&mut self) {
        self.revision.clear();
    }

    /// What a Human+ cold `call` does on the wire, minus Human+ and with
    /// everything kept: a `tools/list` exchange, then the pinned
    /// `tools/call`. Returns the two exchanges' latencies.
    ///
    /// # Errors
    /// As the exchanges.
    pub async fn operation(&mut self) -> Result<(Duration, Duration), FloorError> {
        let start = Instant::now();
        self.exchange("tools/list", None).await?;
        let listed = start.elapsed();
        let call = self.call().await?;
        Ok((listed, call))
    }
}

/// POSTs `frame` on `post` and reads the reply carrying `id` on `leg`, both
/// at once, within [`EXCHANGE_TIMEOUT`].
async fn exchange_on(
    post: &mut Sender,
    leg: &mut Leg,
    host: &str,
    path: &str,
    id: &str,
    frame: Bytes,
) -> Result<Vec<u8>, FloorError> {
    let req = KeptFloor::inbox(host, path, frame)?;
    let both = async { tokio::try_join!(send(post, req), wait_reply(leg, host, id)) };
    let (_, reply) = tokio::time::timeout(EXCHANGE_TIMEOUT, both)
        .await
        .map_err(|_| "the floor exchange timed out")??;
    Ok(reply)
}

/// Reads the leg until the frame carrying `id` has arrived; returns it.
async fn wait_reply(leg: &mut Leg, host: &str, id: &str) -> Result<Vec<u8>, FloorError> {
    match leg {
        Leg::Sse { body, buf } => {
            let needle = format!("\"id\":\"{id}\"").into_bytes();
            loop {
                if let Some(at) = find(buf, &needle)
                    && let Some(end) = buf.get(at..).and_then(|rest| find(rest, b"\n\n"))
                {
                    let event: Vec<u8> = buf.drain(..at + end + 2).collect();
                    return Ok(event);
                }
                match body.frame().await {
                    Some(frame) => {
                        if let Ok(data) = frame?.into_data() {
                            buf.extend_from_slice(&data);
                        }
                    }
                    None => return Err("the event stream ended".into()),
                }
            }
        }
        Leg::Poll(poll) => {
            let needle = format!("\\\"id\\\":\\\"{id}\\\"").into_bytes();
            loop {
                let (sender, body) = (&mut poll.parked).await??;
                poll.parked = park(sender, host.to_owned(), poll.path.clone());
                poll.buf.extend_from_slice(&body);
                if find(&poll.buf, &needle).is_some() {
                    return Ok(std::mem::take(&mut poll.buf));
                }
                poll.buf.clear();
            }
        }
    }
}

/// The `_meta.revision` in a reply, plain (SSE) or escaped inside the
/// poll's JSON.
fn revision_in(reply: &[u8]) -> Option<String> {
    for key in [&b"\"revision\":\""[..], &b"\\\"revision\\\":\\\""[..]] {
        if let Some(at) = find(reply, key) {
            let rest = reply.get(at + key.len()..)?;
            let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
            return Some(String::from_utf8_lossy(rest.get(..end)?).into_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_revisions() {
        assert_eq!(find(b"abcabc", b"ca"), Some(2));
        assert_eq!(find(b"ab", b"abc"), None);
        assert_eq!(find(b"ab", b""), None);
        assert_eq!(
            revision_in(br#"{"_meta":{"revision":"r7"}}"#).as_deref(),
            Some("r7")
        );
        assert_eq!(
            revision_in(br#"{"frames":["{\"_meta\":{\"revision\":\"r12\"}}"]}"#).as_deref(),
            Some("r12")
        );
        assert_eq!(revision_in(b"{}"), None);
    }
}
