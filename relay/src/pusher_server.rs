//! A Pusher-protocol channel server of the project's own (what Laravel
//! Reverb and sockudo speak, protocol 7), and the host app's auth bridge
//! that signs its private channels: seed 004's first transport, on
//! loopback, for tests and the demo.
//!
//! [`PusherServer`] serves `ws://HOST:PORT/app/APP_KEY` over
//! tokio-tungstenite: `pusher:connection_established` (its `data` a JSON
//! string), `pusher:ping` / `pusher:pong` and its own pings after the
//! activity timeout, public, private and presence channels (a private or
//! presence subscription must carry `APP_KEY:hex(HMAC-SHA256(secret,
//! "socket_id:channel[:channel_data]"))`, else `pusher:error` 4009 and the
//! connection stays), client events relayed to every other subscriber and
//! never back to the sender, and Laravel Reverb's limits: a message over
//! `max_message_size` (default 10,000 bytes) closes the connection with
//! 1009. Errors are written with `data` a JSON string as Reverb does, or an
//! object as sockudo does ([`ErrorData`]); sockudo's client-event rate
//! limit and event payload cap can be turned on.
//!
//! [`AuthBridge`] is the host app's `POST /broadcasting/auth`: it signs a
//! channel for a bearer it knows (`Authorization: Bearer TOKEN`, granted
//! that channel), and answers 403 with Laravel's body otherwise.
//!
//! ```
//! use human_plus_relay::{AuthBridge, PusherServer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let server = PusherServer::builder("app-key", "app-secret").start().await?;
//! assert!(server.ws_url().starts_with("ws://127.0.0.1:"));
//! assert!(server.ws_url().ends_with("/app/app-key"));
//! let bridge = AuthBridge::builder("app-key", "app-secret")
//!     .grant("0123456789abcdef0123", "private-agent.session.S1")
//!     .start()
//!     .await?;
//! assert!(bridge.url().ends_with("/broadcasting/auth"));
//! bridge.shutdown().await;
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full, Limited};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use ring::hmac;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, http};

/// Laravel Reverb's default `max_message_size`: 10,000 bytes.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 10_000;

/// The activity timeout the server announces and keeps: 30 s (Reverb's).
pub const DEFAULT_ACTIVITY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a server ping waits for any message before the connection is
/// closed (4201): 30 s.
pub const DEFAULT_PONG_GRACE: Duration = Duration::from_secs(30);

/// The largest auth bridge request body read: 8 KiB.
const AUTH_BODY_LIMIT: usize = 8 * 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a `pusher:error`'s `data` is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorData {
    /// A JSON string holding the object, as Laravel Reverb writes it (the
    /// default).
    #[default]
    JsonString,
    /// The object itself, as sockudo writes it.
    Object,
}

/// Entry point: `PusherServer::builder(key, secret)...start().await`.
#[derive(Debug, Clone, Copy)]
pub struct PusherServer;

impl PusherServer {
    /// A builder for the app `key` signed with `secret`, bound to
    /// `127.0.0.1` on an ephemeral port, with Reverb's defaults.
    #[must_use]
    pub fn builder(key: &str, secret: &str) -> PusherServerBuilder {
        PusherServerBuilder {
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            key: key.to_owned(),
            secret: secret.to_owned(),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            activity_timeout: DEFAULT_ACTIVITY_TIMEOUT,
            pong_grace: DEFAULT_PONG_GRACE,
            error_data: ErrorData::JsonString,
            client_event_rate: None,
            max_event_payload: None,
        }
    }
}

/// Configuration of a [`PusherServer`].
#[derive(Clone)]
pub struct PusherServerBuilder {
    bind: SocketAddr,
    key: String,
    secret: String,
    max_message_size: usize,
    activity_timeout: Duration,
    pong_grace: Duration,
    error_data: ErrorData,
    client_event_rate: Option<u32>,
    max_event_payload: Option<usize>,
}

impl std::fmt::Debug for PusherServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PusherServerBuilder")
            .field("bind", &self.bind)
            .field("key", &self.key)
            .field("secret", &"[redacted]")
            .field("max_message_size", &self.max_message_size)
            .finish_non_exhaustive()
    }
}

impl PusherServerBuilder {
    /// The address to listen on (default `127.0.0.1:0`).
    #[must_use]
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.bind = addr;
        self
    }

    /// The largest WebSocket message read (default
    /// [`DEFAULT_MAX_MESSAGE_SIZE`]); a larger one closes the connection
    /// with 1009, as Reverb does.
    #[must_use]
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// The activity timeout announced and kept (default
    /// [`DEFAULT_ACTIVITY_TIMEOUT`]): after that long without a message the
    /// server pings, and closes (4201) when nothing follows within the pong
    /// grace.
    #[must_use]
    pub fn activity_timeout(mut self, timeout: Duration) -> Self {
        self.activity_timeout = timeout;
        self
    }

    /// How long a server ping waits (default [`DEFAULT_PONG_GRACE`]).
    #[must_use]
    pub fn pong_grace(mut self, grace: Duration) -> Self {
        self.pong_grace = grace;
        self
    }

    /// How `pusher:error`'s `data` is written (default Reverb's JSON
    /// string).
    #[must_use]
    pub fn error_data(mut self, style: ErrorData) -> Self {
        self.error_data = style;
        self
    }

    /// sockudo's client-event rate limit: at most `per_second` client
    /// events per socket per second, 4301 "Client event rejected due to
    /// rate limit" beyond (default off, as Reverb).
    #[must_use]
    pub fn client_event_rate(mut self, per_second: u32) -> Self {
        self.client_event_rate = Some(per_second);
        self
    }

    /// sockudo's event payload cap: a client event whose `data` is over
    /// `bytes` is refused to the sender with 4301 and relayed to nobody
    /// (default off).
    #[must_use]
    pub fn max_event_payload(mut self, bytes: usize) -> Self {
        self.max_event_payload = Some(bytes);
        self
    }

    /// Binds and starts serving.
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub async fn start(self) -> std::io::Result<PusherHandle> {
        let listener = TcpListener::bind(self.bind).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let shared = Arc::new(Shared {
            key: self.key.clone(),
            hmac_key: hmac::Key::new(hmac::HMAC_SHA256, self.secret.as_bytes()),
            config: self,
            hub: Mutex::new(Hub::default()),
            next_id: AtomicU64::new(1),
            paths: Mutex::new(Vec::new()),
            accepted: AtomicUsize::new(0),
        });
        let task = tokio::spawn(ws_accept_loop(listener, shared.clone(), stopped));
        Ok(PusherHandle {
            addr,
            shared,
            stop,
            task: Mutex::new(Some(task)),
        })
    }
}

/// A running [`PusherServer`].
#[derive(Debug)]
pub struct PusherHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl PusherHandle {
    /// The address it listens on.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `ws://HOST:PORT/app/APP_KEY`.
    #[must_use]
    pub fn ws_url(&self) -> String {
        format!("ws://{}/app/{}", self.addr, self.shared.key)
    }

    /// The app key.
    #[must_use]
    pub fn app_key(&self) -> &str {
        &self.shared.key
    }

    /// How many WebSocket connections are open.
    #[must_use]
    pub fn connections(&self) -> usize {
        lock(&self.shared.hub).conns.len()
    }

    /// How many TCP connections were accepted in all.
    #[must_use]
    pub fn connections_accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// How many sockets are subscribed to `channel`.
    #[must_use]
    pub fn subscribers(&self, channel: &str) -> usize {
        lock(&self.shared.hub)
            .channels
            .get(channel)
            .map_or(0, BTreeMap::len)
    }

    /// Every request path (with its query) a WebSocket handshake asked for,
    /// in order: what a client put in the URL.
    #[must_use]
    pub fn seen_paths(&self) -> Vec<String> {
        lock(&self.shared.paths).clone()
    }

    /// Closes every connection with `code` (e.g. 4200 to ask clients to
    /// reconnect, 1001 going away), as a server restart would.
    pub fn close_all(&self, code: u16, reason: &str) {
        for conn in lock(&self.shared.hub).conns.values() {
            let _ = conn.tx.send(Outbound::Close(code, reason.to_owned()));
        }
    }

    /// Stops accepting, closes every connection (1001) and waits for the
    /// accept loop.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let task = lock(&self.task).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

struct Shared {
    key: String,
    hmac_key: hmac::Key,
    config: PusherServerBuilder,
    hub: Mutex<Hub>,
    next_id: AtomicU64,
    paths: Mutex<Vec<String>>,
    accepted: AtomicUsize,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

enum Outbound {
    Text(String),
    Close(u16, String),
}

struct Conn {
    tx: mpsc::UnboundedSender<Outbound>,
}

/// A channel's member: a presence channel's user, or nothing.
#[derive(Clone)]
struct Member {
    user_id: Option<String>,
    user_info: Value,
}

#[derive(Default)]
struct Hub {
    conns: BTreeMap<u64, Conn>,
    channels: BTreeMap<String, BTreeMap<u64, Member>>,
}

impl Hub {
    fn send(&self, id: u64, text: String) {
        if let Some(c) = self.conns.get(&id) {
            let _ = c.tx.send(Outbound::Text(text));
        }
    }

    /// Every distinct user id on a presence channel, and their info.
    fn presence(&self, channel: &str) -> BTreeMap<String, Value> {
        self.channels
            .get(channel)
            .into_iter()
            .flat_map(BTreeMap::values)
            .filter_map(|m| m.user_id.clone().map(|u| (u, m.user_info.clone())))
            .collect()
    }

    /// Removes `id` from `channel`, telling a presence channel's others
    /// when its user has no socket left there.
    fn leave(&mut self, id: u64, channel: &str) {
        let Some(members) = self.channels.get_mut(channel) else {
            return;
        };
        let Some(gone) = members.remove(&id) else {
            return;
        };
        let empty = members.is_empty();
        if let Some(user) = gone.user_id
            && !self.presence(channel).contains_key(&user)
        {
            let frame = json!({
                "event": "pusher_internal:member_removed",
                "channel": channel,
                "data": json!({"user_id": user}).to_string(),
            })
            .to_string();
            let others: Vec<u64> = self.channels[channel].keys().copied().collect();
            for other in others {
                self.send(other, frame.clone());
            }
        }
        if empty {
            self.channels.remove(channel);
        }
    }
}

async fn ws_accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    // Each message is its own small write: no waiting for
                    // the peer's delayed acknowledgement (Nagle).
                    let _ = stream.set_nodelay(true);
                    shared.accepted.fetch_add(1, Ordering::SeqCst);
                    tasks.spawn(serve_socket(stream, shared.clone(), stopped.clone()));
                }
            }
            _ = stopped.changed() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
}

fn error_frame(style: ErrorData, code: u16, message: &str) -> String {
    let inner = json!({"code": code, "message": message});
    let data = match style {
        ErrorData::JsonString => Value::String(inner.to_string()),
        ErrorData::Object => inner,
    };
    json!({"event": "pusher:error", "data": data}).to_string()
}

fn close_message(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    }))
}

/// `digits.digits`, from a connection number.
fn socket_id(n: u64) -> String {
    format!("{}.{}", 100_000 + n, n.wrapping_mul(7919) % 1_000_000_007)
}

#[allow(clippy::too_many_lines)]
async fn serve_socket(stream: TcpStream, shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    let config = WebSocketConfig::default()
        .max_message_size(Some(shared.config.max_message_size))
        .max_frame_size(Some(shared.config.max_message_size));
    let mut path = String::new();
    // The callback's error type is tungstenite's `ErrorResponse`.
    #[allow(clippy::result_large_err)]
    let callback = |req: &http::Request<()>, resp: http::Response<()>| {
        path = req.uri().to_string();
        if req.uri().path().starts_with("/app/") {
            Ok(resp)
        } else {
            let mut refused = http::Response::new(Some("Not found".to_owned()));
            *refused.status_mut() = http::StatusCode::NOT_FOUND;
            Err(refused)
        }
    };
    let handshake = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config)),
    )
    .await;
    lock(&shared.paths).push(path.clone());
    let Ok(Ok(ws)) = handshake else {
        return;
    };
    let (mut sink, mut incoming) = ws.split();
    let key = path
        .split('?')
        .next()
        .and_then(|p| p.strip_prefix("/app/"))
        .unwrap_or_default();
    if key != shared.key {
        let style = shared.config.error_data;
        let _ = sink
            .send(Message::text(error_frame(
                style,
                4001,
                "Application does not exist",
            )))
            .await;
        let _ = sink
            .send(close_message(4001, "Application does not exist"))
            .await;
        return;
    }

    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    let sid = socket_id(id);
    let (tx, mut rx) = mpsc::unbounded_channel();
    lock(&shared.hub).conns.insert(id, Conn { tx });
    let activity = shared.config.activity_timeout;
    let established = json!({
        "event": "pusher:connection_established",
        "data": json!({"socket_id": sid, "activity_timeout": activity.as_secs()}).to_string(),
    })
    .to_string();
    let mut conn = Connection {
        id,
        socket_id: sid,
        shared: shared.clone(),
        sent: VecDeque::new(),
    };
    let mut last_heard = Instant::now();
    let mut pinged = false;
    if sink.send(Message::text(established)).await.is_ok() {
        loop {
            let deadline = if pinged {
                last_heard + activity + shared.config.pong_grace
            } else {
                last_heard + activity
            };
            tokio::select! {
                message = incoming.next() => match message {
                    Some(Ok(Message::Text(text))) => {
                        last_heard = Instant::now();
                        pinged = false;
                        let replies = conn.handle(text.as_str());
                        let mut failed = false;
                        for reply in replies {
                            if sink.send(Message::text(reply)).await.is_err() {
                                failed = true;
                                break;
                            }
                        }
                        if failed {
                            break;
                        }
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Binary(_) | Message::Frame(_))) => {
                        last_heard = Instant::now();
                        pinged = false;
                    }
                    Some(Err(WsError::Capacity(_))) => {
                        let _ = sink.send(close_message(1009, "Maximum message size exceeded")).await;
                        break;
                    }
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                },
                out = rx.recv() => match out {
                    Some(Outbound::Text(text)) => {
                        if sink.send(Message::text(text)).await.is_err() {
                            break;
                        }
                    }
                    Some(Outbound::Close(code, reason)) => {
                        let _ = sink.send(close_message(code, &reason)).await;
                        break;
                    }
                    None => break,
                },
                () = sleep_until(deadline) => {
                    if pinged {
                        let _ = sink.send(close_message(4201, "Pong reply not received in time")).await;
                        break;
                    }
                    pinged = true;
                    let ping = json!({"event": "pusher:ping", "data": "{}"}).to_string();
                    if sink.send(Message::text(ping)).await.is_err() {
                        break;
                    }
                }
                _ = stopped.changed() => {
                    let _ = sink.send(close_message(1001, "Server shutting down")).await;
                    break;
                }
            }
        }
    }
    let mut hub = lock(&shared.hub);
    hub.conns.remove(&id);
    let channels: Vec<String> = hub
        .channels
        .iter()
        .filter(|(_, members)| members.contains_key(&id))
        .map(|(name, _)| name.clone())
        .collect();
    for channel in channels {
        hub.leave(id, &channel);
    }
}

/// One socket's protocol state.
struct Connection {
    id: u64,
    socket_id: String,
    shared: Arc<Shared>,
    /// When its last client events went, for the rate limit.
    sent: VecDeque<Instant>,
}

impl Connection {
    fn error(&self, code: u16, message: &str) -> Vec<String> {
        vec![error_frame(self.shared.config.error_data, code, message)]
    }

    /// One text message; returns the frames for this socket.
    fn handle(&mut self, text: &str) -> Vec<String> {
        let Ok(Value::Object(frame)) = serde_json::from_str::<Value>(text) else {
            return self.error(4200, "Invalid message format");
        };
        let Some(event) = frame.get("event").and_then(Value::as_str) else {
            return self.error(4200, "Invalid message format");
        };
        match event {
            "pusher:ping" => vec![json!({"event": "pusher:pong", "data": "{}"}).to_string()],
            "pusher:pong" => Vec::new(),
            "pusher:subscribe" => self.subscribe(frame.get("data")),
            "pusher:unsubscribe" => {
                if let Some(channel) = frame
                    .get("data")
                    .and_then(|d| d.get("channel"))
                    .and_then(Value::as_str)
                {
                    lock(&self.shared.hub).leave(self.id, channel);
                }
                Vec::new()
            }
            name if name.starts_with("client-") => self.client_event(name, &frame),
            _ => Vec::new(),
        }
    }

    fn verify(&self, channel: &str, auth: &str, channel_data: Option<&str>) -> bool {
        let Some((key, signature)) = auth.split_once(':') else {
            return false;
        };
        if key != self.shared.key || signature.len() != 64 {
            return false;
        }
        let Some(mac) = unhex(signature) else {
            return false;
        };
        let signed = match channel_data {
            Some(cd) => format!("{}:{channel}:{cd}", self.socket_id),
            None => format!("{}:{channel}", self.socket_id),
        };
        hmac::verify(&self.shared.hmac_key, signed.as_bytes(), &mac).is_ok()
    }

    fn subscribe(&mut self, data: Option<&Value>) -> Vec<String> {
        let Some(channel) = data
            .and_then(|d| d.get("channel"))
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty() && c.len() <= 200)
        else {
            return self.error(4200, "Invalid message format");
        };
        let auth = data.and_then(|d| d.get("auth")).and_then(Value::as_str);
        let channel_data = data
            .and_then(|d| d.get("channel_data"))
            .and_then(Value::as_str);
        let presence = channel.starts_with("presence-");
        let mut member = Member {
            user_id: None,
            user_info: Value::Null,
        };
        if presence || channel.starts_with("private-") {
            let signed = presence.then_some(channel_data).flatten();
            if !auth.is_some_and(|a| self.verify(channel, a, signed)) {
                return self.error(4009, "Connection is unauthorized");
            }
            if presence {
                let parsed: Option<Value> =
                    channel_data.and_then(|cd| serde_json::from_str(cd).ok());
                let user_id = parsed.as_ref().and_then(|v| match v.get("user_id") {
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(Value::Number(n)) => Some(n.to_string()),
                    _ => None,
                });
                let Some(user_id) = user_id else {
                    return self.error(4009, "Connection is unauthorized");
                };
                member.user_id = Some(user_id);
                member.user_info = parsed
                    .and_then(|v| v.get("user_info").cloned())
                    .unwrap_or(Value::Null);
            }
        }
        let mut hub = lock(&self.shared.hub);
        let newcomer = member
            .user_id
            .clone()
            .filter(|u| !hub.presence(channel).contains_key(u));
        let others: Vec<u64> = hub
            .channels
            .get(channel)
            .into_iter()
            .flat_map(|m| m.keys().copied())
            .filter(|&o| o != self.id)
            .collect();
        hub.channels
            .entry(channel.to_owned())
            .or_default()
            .insert(self.id, member.clone());
        if let Some(user) = newcomer {
            let added = json!({
                "event": "pusher_internal:member_added",
                "channel": channel,
                "data": json!({"user_id": user, "user_info": member.user_info}).to_string(),
            })
            .to_string();
            for other in others {
                hub.send(other, added.clone());
            }
        }
        let data = if presence {
            let roster = hub.presence(channel);
            json!({"presence": {
                "ids": roster.keys().collect::<Vec<_>>(),
                "hash": roster,
                "count": roster.len(),
            }})
            .to_string()
        } else {
            "{}".to_owned()
        };
        vec![
            json!({
                "event": "pusher_internal:subscription_succeeded",
                "channel": channel,
                "data": data,
            })
            .to_string(),
        ]
    }

    fn client_event(&mut self, event: &str, frame: &serde_json::Map<String, Value>) -> Vec<String> {
        let Some(channel) = frame.get("channel").and_then(Value::as_str) else {
            return self.error(4200, "Invalid message format");
        };
        let member = lock(&self.shared.hub)
            .channels
            .get(channel)
            .and_then(|m| m.get(&self.id).cloned());
        let Some(member) = member else {
            return self.error(4009, "The client is not a member of the specified channel.");
        };
        if !(channel.starts_with("private-") || channel.starts_with("presence-")) {
            return self.error(
                4301,
                "Client events are only allowed on private and presence channels.",
            );
        }
        let data = match frame.get("data") {
            Some(d @ Value::Object(_)) => d.clone(),
            _ => return self.error(4200, "Invalid message format"),
        };
        if let Some(cap) = self.shared.config.max_event_payload {
            let size = data.to_string().len();
            if size > cap {
                return self.error(
                    4301,
                    &format!(
                        "Client event error: Event payload size ({size} bytes) exceeds limit ({}KB)",
                        cap / 1000
                    ),
                );
            }
        }
        if let Some(limit) = self.shared.config.client_event_rate {
            let now = Instant::now();
            while self
                .sent
                .front()
                .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
            {
                self.sent.pop_front();
            }
            if self.sent.len() >= usize::try_from(limit).unwrap_or(usize::MAX) {
                return self.error(4301, "Client event rejected due to rate limit");
            }
            self.sent.push_back(now);
        }
        let mut relayed = json!({"event": event, "channel": channel, "data": data});
        if let Some(user) = member.user_id {
            relayed["user_id"] = Value::String(user);
        }
        let relayed = relayed.to_string();
        let hub = lock(&self.shared.hub);
        for &other in hub
            .channels
            .get(channel)
            .into_iter()
            .flat_map(BTreeMap::keys)
        {
            if other != self.id {
                hub.send(other, relayed.clone());
            }
        }
        Vec::new()
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The host app's auth bridge: `POST /broadcasting/auth` as Laravel
/// answers it for the bearer of a token granted a channel.
#[derive(Debug, Clone, Copy)]
pub struct AuthBridge;

impl AuthBridge {
    /// A builder signing for the app `key` with `secret`, bound to
    /// `127.0.0.1` on an ephemeral port, at `/broadcasting/auth`, granting
    /// nothing yet.
    #[must_use]
    pub fn builder(key: &str, secret: &str) -> AuthBridgeBuilder {
        AuthBridgeBuilder {
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            path: "/broadcasting/auth".to_owned(),
            key: key.to_owned(),
            secret: secret.to_owned(),
            grants: Vec::new(),
        }
    }
}

/// One bearer's right to one channel (and, on a presence channel, the
/// member it joins as).
#[derive(Clone)]
struct Grant {
    token: String,
    channel: String,
    user_id: String,
}

/// Configuration of an [`AuthBridge`].
#[derive(Clone)]
pub struct AuthBridgeBuilder {
    bind: SocketAddr,
    path: String,
    key: String,
    secret: String,
    grants: Vec<Grant>,
}

impl std::fmt::Debug for AuthBridgeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthBridgeBuilder")
            .field("bind", &self.bind)
            .field("path", &self.path)
            .field("key", &self.key)
            .field("grants", &self.grants.len())
            .finish_non_exhaustive()
    }
}

impl AuthBridgeBuilder {
    /// The address to listen on (default `127.0.0.1:0`).
    #[must_use]
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.bind = addr;
        self
    }

    /// The path it answers on (default `/broadcasting/auth`).
    #[must_use]
    pub fn path(mut self, path: &str) -> Self {
        path.clone_into(&mut self.path);
        self
    }

    /// Lets the bearer of `token` join `channel` (as the member `agent` on
    /// a presence channel).
    #[must_use]
    pub fn grant(self, token: &str, channel: &str) -> Self {
        self.grant_as(token, channel, "agent")
    }

    /// Lets the bearer of `token` join `channel`, as the presence member
    /// `user_id`.
    #[must_use]
    pub fn grant_as(mut self, token: &str, channel: &str, user_id: &str) -> Self {
        self.grants.push(Grant {
            token: token.to_owned(),
            channel: channel.to_owned(),
            user_id: user_id.to_owned(),
        });
        self
    }

    /// Binds and starts serving.
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub async fn start(self) -> std::io::Result<AuthBridgeHandle> {
        let listener = TcpListener::bind(self.bind).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let bridge = Arc::new(BridgeShared {
            key: hmac::Key::new(hmac::HMAC_SHA256, self.secret.as_bytes()),
            config: self,
            requests: AtomicUsize::new(0),
            signed: AtomicUsize::new(0),
        });
        let task = tokio::spawn(bridge_accept_loop(listener, bridge.clone(), stopped));
        Ok(AuthBridgeHandle {
            addr,
            bridge,
            stop,
            task: Mutex::new(Some(task)),
        })
    }
}

struct BridgeShared {
    key: hmac::Key,
    config: AuthBridgeBuilder,
    requests: AtomicUsize,
    signed: AtomicUsize,
}

impl std::fmt::Debug for BridgeShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeShared")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A running [`AuthBridge`].
#[derive(Debug)]
pub struct AuthBridgeHandle {
    addr: SocketAddr,
    bridge: Arc<BridgeShared>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl AuthBridgeHandle {
    /// The address it listens on.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://HOST:PORT/broadcasting/auth`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.bridge.config.path)
    }

    /// How many requests it answered.
    #[must_use]
    pub fn requests(&self) -> usize {
        self.bridge.requests.load(Ordering::SeqCst)
    }

    /// How many signatures it gave.
    #[must_use]
    pub fn signed(&self) -> usize {
        self.bridge.signed.load(Ordering::SeqCst)
    }

    /// Stops accepting and waits for the accept loop.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let task = lock(&self.task).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

async fn bridge_accept_loop(
    listener: TcpListener,
    bridge: Arc<BridgeShared>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let bridge = bridge.clone();
                tasks.spawn(async move {
                    let service = service_fn(move |req| {
                        let bridge = bridge.clone();
                        async move { Ok::<_, Infallible>(answer_auth(req, &bridge).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            _ = stopped.changed() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    tasks.abort_all();
}

fn reply(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

async fn answer_auth(
    req: Request<hyper::body::Incoming>,
    bridge: &BridgeShared,
) -> Response<Full<Bytes>> {
    bridge.requests.fetch_add(1, Ordering::SeqCst);
    let forbidden = || {
        reply(
            StatusCode::FORBIDDEN,
            &json!({"message": "This action is unauthorized."}),
        )
    };
    if req.method() != hyper::Method::POST || req.uri().path() != bridge.config.path {
        return reply(StatusCode::NOT_FOUND, &json!({"message": "Not Found"}));
    }
    let bearer = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let Ok(body) = Limited::new(req.into_body(), AUTH_BODY_LIMIT)
        .collect()
        .await
    else {
        return reply(
            StatusCode::PAYLOAD_TOO_LARGE,
            &json!({"message": "Too large"}),
        );
    };
    let body = body.to_bytes();
    let fields: BTreeMap<String, String> = if body.first() == Some(&b'{') {
        serde_json::from_slice::<BTreeMap<String, Value>>(&body)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k, s.to_owned())))
            .collect()
    } else {
        url::form_urlencoded::parse(&body).into_owned().collect()
    };
    let (Some(socket_id), Some(channel)) = (fields.get("socket_id"), fields.get("channel_name"))
    else {
        return reply(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"message": "socket_id and channel_name are required."}),
        );
    };
    let Some(bearer) = bearer else {
        return forbidden();
    };
    let Some(grant) = bridge
        .config
        .grants
        .iter()
        .find(|g| g.token == bearer && &g.channel == channel)
    else {
        return forbidden();
    };
    let valid_socket = socket_id.split_once('.').is_some_and(|(a, b)| {
        !a.is_empty()
            && !b.is_empty()
            && a.bytes().all(|c| c.is_ascii_digit())
            && b.bytes().all(|c| c.is_ascii_digit())
    });
    if !valid_socket {
        return reply(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"message": "Invalid socket id."}),
        );
    }
    let channel_data = channel
        .starts_with("presence-")
        .then(|| json!({"user_id": grant.user_id}).to_string());
    let signed = match &channel_data {
        Some(cd) => format!("{socket_id}:{channel}:{cd}"),
        None => format!("{socket_id}:{channel}"),
    };
    let mac = hmac::sign(&bridge.key, signed.as_bytes());
    bridge.signed.fetch_add(1, Ordering::SeqCst);
    let mut answer = json!({"auth": format!("{}:{}", bridge.config.key, hex(mac.as_ref()))});
    if let Some(cd) = channel_data {
        answer["channel_data"] = Value::String(cd);
    }
    reply(StatusCode::OK, &answer)
}
