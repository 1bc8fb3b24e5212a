//! The demo surface's channel leg: the page joins a Pusher-protocol private
//! (or presence) channel as seed 004's page does
//! (`Echo.private("agent.session." + id)`, `whisper("mcp", frame)`,
//! `listenForWhisper("mcp", …)`), over tokio-tungstenite, with the core's
//! sans-IO [`PusherChannel`] deciding every frame.
//!
//! One task owns the socket and the machine. It answers every `client-mcp`
//! whisper that is a request with the same code the HTTP legs use
//! (`Page::answer`) and whispers the reply back; other tasks (the
//! person, [`DemoSurface::notify`](super::DemoSurface::notify)) hand it
//! frames to whisper through a command queue. A connection the server
//! closes is opened again (a new socket, a new signature), as pusher-js
//! does, unless the page left or the close code says never (4000-4099).

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use human_plus_core::{
    ChannelAuth, PusherChannel, PusherClosed, PusherConfig, PusherError, PusherEvent,
    PusherServerError, Reconnect, ReverbChannel,
};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};

use super::client::{Client, Io};
use super::client::{MAX_BACKOFF, POST_TIMEOUT};
use super::error::SurfaceError;
use crate::broker::lock;

/// The page's default client-event budget: 100 per second (sockudo's
/// limit; Reverb has none unless configured, Pusher Channels allows 10).
pub(super) const DEFAULT_PAGE_CLIENT_EVENTS: u32 = 100;

/// The largest WebSocket message the page reads: 1 MiB.
const MAX_READ_BYTES: usize = 1024 * 1024;

/// How long a connection may take to join (TCP, TLS, the WebSocket
/// handshake, the welcome, the bridge, the subscription).
const JOIN_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a clean leave waits for the server to close.
const LEAVE_GRACE: Duration = Duration::from_secs(2);

/// The most closes and server errors kept (oldest dropped), so a hostile
/// server cannot grow the page without bound.
const MAX_KEPT: usize = 1000;

fn push_bounded<T>(list: &mut Vec<T>, item: T) {
    if list.len() >= MAX_KEPT {
        list.remove(0);
    }
    list.push(item);
}

/// What the builder was told about the channel leg.
#[derive(Debug, Clone)]
pub(super) struct ChannelSettings {
    pub(super) ws_url: String,
    pub(super) auth_url: String,
    /// `None`: `private-agent.session.<session id>`.
    pub(super) channel: Option<String>,
    pub(super) max_reply_bytes: Option<usize>,
    pub(super) client_events: u32,
}

/// The checked channel leg, ready to connect.
pub(super) struct ChannelPlan {
    reverb: ReverbChannel,
    /// Reaches the WebSocket server (its `http(s)` form).
    socket: Client,
    /// Reaches the auth bridge.
    bridge: Client,
    bridge_target: String,
    max_reply_bytes: Option<usize>,
    client_events: u32,
}

impl ChannelPlan {
    /// Checks the URLs and the channel (the core's [`ReverbChannel`]
    /// rules, plain `ws://` and `http://` to loopback allowed).
    pub(super) fn new(
        settings: ChannelSettings,
        session: &str,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<ChannelPlan, SurfaceError> {
        let channel = settings
            .channel
            .unwrap_or_else(|| human_plus_core::default_reverb_channel(session));
        let reverb = ReverbChannel::new(settings.ws_url, settings.auth_url, channel, true)
            .map_err(|e| SurfaceError::InvalidUrl(e.to_string()))?;
        let http_form = if let Some(rest) = reverb.ws_url().strip_prefix("wss://") {
            format!("https://{rest}")
        } else if let Some(rest) = reverb.ws_url().strip_prefix("ws://") {
            format!("http://{rest}")
        } else {
            return Err(SurfaceError::InvalidUrl("not a ws:// or wss:// URL".into()));
        };
        let socket = Client::new(&http_form, tls.clone())?;
        let bridge = Client::new(reverb.auth_url(), tls)?;
        let bridge_target = bridge.target("");
        Ok(ChannelPlan {
            reverb,
            socket,
            bridge,
            bridge_target,
            max_reply_bytes: settings.max_reply_bytes,
            client_events: settings.client_events,
        })
    }

    /// A client of the auth bridge.
    pub(super) fn bridge_client(&self) -> Client {
        self.bridge.clone()
    }

    /// The channel's name.
    pub(super) fn channel(&self) -> &str {
        self.reverb.channel()
    }

    fn connect_url(&self) -> String {
        format!(
            "{}?protocol=7&client=human-plus-demo-page&version={}",
            self.reverb.ws_url(),
            env!("CARGO_PKG_VERSION")
        )
    }

    fn config(&self) -> PusherConfig {
        let mut config = PusherConfig::default();
        // No limit of the page's own by default: pusher-js sends whatever
        // it is given and the server refuses what is too large.
        config.max_message_bytes = self.max_reply_bytes.unwrap_or(usize::MAX);
        config.client_events = self.client_events;
        config
    }
}

/// What other tasks ask of the socket's task.
pub(super) enum Command {
    /// Whisper this frame; the answer says whether it was queued.
    Whisper(String, oneshot::Sender<Result<(), SurfaceError>>),
    /// Leave: close the socket cleanly (1000) and never reconnect; the
    /// answer comes once the socket is closed.
    Leave(oneshot::Sender<()>),
}

/// What the channel leg records, for tests.
#[derive(Debug, Default)]
pub(super) struct ChannelRecord {
    /// Subscriptions that succeeded (1 after start, one more per rejoin).
    pub(super) joins: usize,
    /// Why each connection ended.
    pub(super) closes: Vec<PusherClosed>,
    /// Every `pusher:error` the server sent the page.
    pub(super) errors: Vec<PusherServerError>,
    /// Replies dropped here for [`ChannelSettings::max_reply_bytes`].
    pub(super) dropped_replies: usize,
    /// Whether the page is joined now.
    pub(super) joined: bool,
    /// The page's own presence user id (from the bridge's `channel_data`).
    pub(super) user_id: Option<String>,
}

/// What the channel leg needs of the page it carries (the demo surface's
/// shared state implements it): its answers, its records, its end.
pub(super) trait Page: Send + Sync + 'static {
    /// The page's reply to a frame (`None` for a notification or a reply).
    fn answer(&self, frame: &str) -> Option<Value>;
    /// The page ended, for `reason`.
    fn end(&self, reason: &str);
    /// Wakes whoever waits on the page's records.
    fn changed(&self);
    /// The channel leg's link, when the page is on a channel.
    fn link(&self) -> Option<&ChannelLink>;
    /// The bearer token (for the auth bridge only).
    fn token(&self) -> &str;
    /// The agents present now (the page's own id left out).
    fn set_peers(&self, peers: std::collections::BTreeSet<String>);
    /// One agent joined (`true`) or left.
    fn peer(&self, user: String, present: bool);
}

/// The channel leg as the page holds it.
pub(super) struct ChannelLink {
    pub(super) commands: mpsc::UnboundedSender<Command>,
    pub(super) record: std::sync::Mutex<ChannelRecord>,
    pub(super) channel: String,
}

impl ChannelLink {
    pub(super) fn new(channel: String) -> (ChannelLink, mpsc::UnboundedReceiver<Command>) {
        let (commands, receiver) = mpsc::unbounded_channel();
        (
            ChannelLink {
                commands,
                record: std::sync::Mutex::new(ChannelRecord::default()),
                channel,
            },
            receiver,
        )
    }

    /// Whispers `frame` (queued on the socket's machine).
    pub(super) async fn whisper(&self, frame: String) -> Result<(), SurfaceError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Whisper(frame, tx))
            .map_err(|_| SurfaceError::NotJoined)?;
        rx.await.map_err(|_| SurfaceError::NotJoined)?
    }

    /// Leaves the channel; returns once the socket is closed.
    pub(super) async fn leave(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Leave(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// How one connection ended.
enum Ended {
    /// The page left (or was told to shut down).
    Left,
    /// The connection closed; reconnect as `why` says.
    Closed(PusherClosed),
    /// It never joined: the bridge or the server refused, or the socket
    /// could not open. `retry` when it is worth trying again.
    Failed { error: SurfaceError, retry: bool },
}

/// The socket's task: joins, answers, reconnects. `ready` hears the first
/// join's outcome.
pub(super) async fn run(
    inner: Arc<dyn Page>,
    plan: ChannelPlan,
    mut commands: mpsc::UnboundedReceiver<Command>,
    ready: oneshot::Sender<Result<(), SurfaceError>>,
) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(100);
    loop {
        let joins = link(inner.as_ref()).map_or(0, |l| lock(&l.record).joins);
        let ended = connection(&inner, &plan, &mut commands, &mut ready).await;
        set_joined(inner.as_ref(), false);
        if link(inner.as_ref()).map_or(0, |l| lock(&l.record).joins) > joins {
            // This connection had joined: the back-off starts again.
            backoff = Duration::from_millis(100);
        }
        let wait = match ended {
            Ended::Left => return inner.end("left"),
            Ended::Failed { error, retry } => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(error));
                    return inner.end("could_not_join");
                }
                if !retry {
                    tracing::debug!(%error, "the page could not join its channel again");
                    return inner.end("refused");
                }
                backoff
            }
            Ended::Closed(why) => {
                if let Some(l) = link(inner.as_ref()) {
                    push_bounded(&mut lock(&l.record).closes, why);
                }
                inner.changed();
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(SurfaceError::Channel(why.to_string())));
                    return inner.end("could_not_join");
                }
                match why.reconnect() {
                    Reconnect::Never => return inner.end("closed"),
                    Reconnect::Immediately => Duration::from_millis(10),
                    Reconnect::AfterBackoff => backoff,
                }
            }
        };
        backoff = (backoff * 2).min(MAX_BACKOFF);
        // Wait before reconnecting; a leave ends the page at once, a
        // whisper is refused (pusher-js drops an event sent while it is
        // not connected).
        let until = Instant::now() + wait;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(until) => break,
                command = commands.recv() => match command {
                    Some(Command::Whisper(_, tx)) => { let _ = tx.send(Err(SurfaceError::NotJoined)); }
                    Some(Command::Leave(tx)) => {
                        inner.end("left");
                        let _ = tx.send(());
                        return;
                    }
                    None => return inner.end("left"),
                },
            }
        }
    }
}

fn link(inner: &dyn Page) -> Option<&ChannelLink> {
    inner.link()
}

fn set_joined(inner: &dyn Page, joined: bool) {
    if let Some(l) = link(inner) {
        lock(&l.record).joined = joined;
    }
}

fn std_now() -> std::time::Instant {
    std::time::Instant::now()
}

/// Opens the WebSocket (TCP, TLS for `wss`, the handshake).
async fn open(plan: &ChannelPlan) -> Result<WebSocketStream<Box<dyn Io>>, SurfaceError> {
    let io = plan.socket.connect_io().await?;
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_READ_BYTES))
        .max_frame_size(Some(MAX_READ_BYTES));
    let (ws, _) = tokio::time::timeout(
        JOIN_TIMEOUT,
        tokio_tungstenite::client_async_with_config(plan.connect_url(), io, Some(config)),
    )
    .await
    .map_err(|_| SurfaceError::Timeout("WebSocket handshake"))?
    .map_err(|e| SurfaceError::Connect(e.to_string()))?;
    Ok(ws)
}

fn user_id(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// One connection, from the handshake to its close.
#[allow(clippy::too_many_lines)]
async fn connection(
    inner: &Arc<dyn Page>,
    plan: &ChannelPlan,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    ready: &mut Option<oneshot::Sender<Result<(), SurfaceError>>>,
) -> Ended {
    let mut ws = match open(plan).await {
        Ok(ws) => ws,
        Err(error) => return Ended::Failed { error, retry: true },
    };
    let mut machine = match PusherChannel::new(
        plan.reverb.app_key(),
        plan.channel(),
        plan.config(),
        std_now(),
    ) {
        Ok(m) => m,
        Err(e) => {
            return Ended::Failed {
                error: SurfaceError::Channel(e.to_string()),
                retry: false,
            };
        }
    };
    let mut leaving: Option<oneshot::Sender<()>> = None;
    let join_by = Instant::now() + JOIN_TIMEOUT;
    let mut joined = false;
    loop {
        // Write what the machine has for the server.
        while let Some(text) = machine.poll_transmit(std_now()) {
            if ws.send(Message::text(text)).await.is_err() {
                machine.handle_close(None);
                break;
            }
        }
        // Act on what it decided.
        if let Some(event) = machine.poll_event() {
            match event {
                PusherEvent::Connected { .. } => {}
                PusherEvent::AuthNeeded(request) => {
                    let answer = plan
                        .bridge
                        .post_form_bearer(
                            &plan.bridge_target,
                            inner.token(),
                            request.form_body(),
                            POST_TIMEOUT,
                        )
                        .await;
                    let auth = match answer {
                        Ok((200, body)) => ChannelAuth::from_response(&body)
                            .map_err(|e| SurfaceError::Channel(e.to_string())),
                        Ok((status, _)) => Err(SurfaceError::AuthBridge { status }),
                        Err(e) => Err(e),
                    };
                    // A bridge that cannot be reached or fails (5xx) may
                    // sign later; a refusal (403) stands.
                    let retry = match &auth {
                        Err(SurfaceError::Connect(_) | SurfaceError::Timeout(_)) => true,
                        Err(SurfaceError::AuthBridge { status }) => *status >= 500,
                        _ => false,
                    };
                    let authorized = auth.and_then(|auth| {
                        let own = auth
                            .channel_data()
                            .and_then(|cd| serde_json::from_str::<Value>(cd).ok())
                            .and_then(|v| v.get("user_id").and_then(user_id));
                        if let Some(l) = link(inner.as_ref()) {
                            lock(&l.record).user_id = own;
                        }
                        machine
                            .authorize(auth, std_now())
                            .map_err(|e| SurfaceError::Channel(e.to_string()))
                    });
                    if let Err(error) = authorized {
                        let _ = ws.close(None).await;
                        return Ended::Failed { error, retry };
                    }
                }
                PusherEvent::Subscribed => {
                    joined = true;
                    let own = link(inner.as_ref()).and_then(|l| {
                        let mut record = lock(&l.record);
                        record.joins += 1;
                        record.joined = true;
                        record.user_id.clone()
                    });
                    {
                        // The members present when the page joined (the
                        // subscription's roster), the page itself left out.
                        let mut peers = machine.members().clone();
                        if let Some(own) = own {
                            peers.remove(&own);
                        }
                        inner.set_peers(peers);
                    }
                    inner.changed();
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(Ok(()));
                    }
                }
                PusherEvent::SubscriptionRefused(e) => {
                    if let Some(l) = link(inner.as_ref()) {
                        push_bounded(&mut lock(&l.record).errors, e.clone());
                    }
                    let _ = ws.close(None).await;
                    return Ended::Failed {
                        error: SurfaceError::Channel(format!("the subscription was refused: {e}")),
                        retry: false,
                    };
                }
                PusherEvent::Whisper(whisper) => {
                    if let Some(reply) = inner.answer(&whisper.data) {
                        match machine.send_whisper(&reply.to_string()) {
                            Ok(()) => {}
                            Err(PusherError::MessageTooLarge { size, limit }) => {
                                tracing::debug!(
                                    size,
                                    limit,
                                    "a reply over the page's limit was dropped"
                                );
                                if let Some(l) = link(inner.as_ref()) {
                                    lock(&l.record).dropped_replies += 1;
                                }
                                inner.changed();
                            }
                            Err(error) => tracing::debug!(%error, "a reply could not be whispered"),
                        }
                    }
                }
                PusherEvent::MemberAdded(user) => {
                    let own = link(inner.as_ref()).and_then(|l| lock(&l.record).user_id.clone());
                    if own.as_deref() != Some(user.as_str()) {
                        inner.peer(user, true);
                    }
                    inner.changed();
                }
                PusherEvent::MemberRemoved(user) => {
                    inner.peer(user, false);
                    inner.changed();
                }
                PusherEvent::ServerError(e) => {
                    tracing::debug!(error = %e, "the channel server refused something the page sent");
                    if let Some(l) = link(inner.as_ref()) {
                        push_bounded(&mut lock(&l.record).errors, e);
                    }
                    inner.changed();
                }
                PusherEvent::Closed(why) => {
                    if let Some(tx) = leaving
                        .take()
                        .map(Some)
                        .or_else(|| (why == PusherClosed::Local).then_some(None))
                    {
                        let _ = ws
                            .close(Some(CloseFrame {
                                code: CloseCode::Normal,
                                reason: "".into(),
                            }))
                            .await;
                        // Read until the server closes (bounded).
                        let _ = tokio::time::timeout(LEAVE_GRACE, async {
                            while let Some(Ok(_)) = ws.next().await {}
                        })
                        .await;
                        if let Some(tx) = tx {
                            let _ = tx.send(());
                        }
                        return Ended::Left;
                    }
                    let _ = ws.close(None).await;
                    return Ended::Closed(why);
                }
                _ => {}
            }
            continue;
        }
        let mut deadline = machine.poll_timeout().map_or_else(
            || Instant::now() + Duration::from_secs(3600),
            Instant::from_std,
        );
        if !joined {
            deadline = deadline.min(join_by);
        }
        tokio::select! {
            message = ws.next() => match message {
                Some(Ok(Message::Text(text))) => machine.handle_text(text.as_str(), std_now()),
                Some(Ok(Message::Close(frame))) => machine.handle_close(frame.map(|f| u16::from(f.code))),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => machine.handle_close(None),
            },
            command = commands.recv() => match command {
                Some(Command::Whisper(frame, tx)) => {
                    let queued = machine.send_whisper(&frame).map_err(|e| match e {
                        PusherError::NotSubscribed | PusherError::Closed => SurfaceError::NotJoined,
                        other => SurfaceError::Channel(other.to_string()),
                    });
                    let _ = tx.send(queued);
                }
                Some(Command::Leave(tx)) => {
                    leaving = Some(tx);
                    machine.close();
                }
                None => machine.close(),
            },
            () = tokio::time::sleep_until(deadline) => {
                if !joined && Instant::now() >= join_by {
                    let _ = ws.close(None).await;
                    return Ended::Failed { error: SurfaceError::Timeout("joining the channel"), retry: true };
                }
                machine.handle_timeout(std_now());
            }
        }
    }
}
