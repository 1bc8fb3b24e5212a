//! The demo surface: the page side of a relay session, with a small sheet
//! and the Human+ half of the contract.
//!
//! A [`DemoSurface`] registers a session on a relay (ours or a real Node
//! relay), opens the page's receive leg (`direction=inbound`, over SSE or
//! long-poll), answers MCP the way Fancy's `MicroMcpServer` does, and posts
//! each reply to `outbox` as single-line JSON. On top of that it behaves as
//! a Human+ surface should, and each behaviour can be switched off:
//!
//! * every `tools/call` result carries `_meta.revision` (`r1`, `r2`, …);
//! * a call pinned (`params._meta.revision`) to a revision that is not the
//!   current one is refused with the JSON-RPC error
//!   `{"code":409,"message":…,"data":{"code":"revision_mismatch","current":"r7",…}}`
//!   and nothing is applied. `changes_since` is exempt: its whole job is to
//!   answer for a stale revision. Both halves can be changed, so tests see
//!   every kind of surface: [`DemoSurfaceBuilder::stale_reads`] answers a
//!   read whatever its pin (the seeds' surface), and
//!   [`DemoSurfaceBuilder::current_in_refusal`] leaves `current` out;
//! * `changes_since {since}` lists every change after `since`, attributed
//!   (`actor_type` `human` for the person's edits, `agent` for tool writes),
//!   with `_meta.complete`.
//!
//! A 410 on the receive leg ends the page, except after an outage: when the
//! leg could not reach the relay (a refused or broken connection) and the
//! relay then answers 410, a relay that restarted has forgotten the
//! session, and a surface that registered the session registers it again,
//! with the same token, and carries on ([`DemoSurface::registered_again`]).
//!
//! **On a channel.** Instead of an HTTP relay, the page can join a
//! Pusher-protocol channel (what Laravel Reverb serves) as seed 004's page
//! does (`Echo.private("agent.session." + id)`, `whisper("mcp", frame)`,
//! `listenForWhisper("mcp", …)`): [`DemoSurface::channel_builder`]. It
//! connects `ws(s)://host:port/app/KEY?protocol=7&client=…&version=…`, has
//! the host app's auth bridge sign the channel (`POST`, form
//! `socket_id`/`channel_name`, `Authorization: Bearer TOKEN`), subscribes,
//! keeps the connection alive, and answers every `client-mcp` whisper that
//! is a request with a `client-mcp` whisper, by the same code that answers
//! over the relay; its own notifications (the person's activity, a tool
//! list change) are whispers too. The core's sans-IO
//! [`PusherChannel`](human_plus_core::PusherChannel) decides every frame,
//! over tokio-tungstenite. A connection the server closes is opened again,
//! as pusher-js does ([`DemoSurface::joins`]), except after 4000-4099 or
//! [`DemoSurface::leave`]. On a presence channel the agents present are the
//! members ([`DemoSurface::peers`]).
//!
//! Everything the session does is recorded for tests: tool calls and their
//! outcome ([`DemoSurface::calls`]), notifications
//! ([`DemoSurface::notifications`], [`DemoSurface::activity`]), agents
//! present ([`DemoSurface::peers`]). A programmatic person edits the sheet
//! ([`DemoSurface::person`]).

mod channel;
mod client;
mod error;
mod record;
pub(crate) mod sheet;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Response};
use rustls_pki_types::CertificateDer;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::broker::lock;
use crate::wire::encode_component;
use channel::{ChannelLink, ChannelPlan, ChannelSettings, Page};
use client::{Client, MAX_BACKOFF, POST_TIMEOUT, SseReader};
pub use error::SurfaceError;
use error::status_error;
pub use record::{Actor, CallOutcome, CallRecord, Change, Notification};
pub use sheet::RevisionMode;
use sheet::{Behaviour, Sheet};

/// Largest SSE line or event the surface accepts (bigger ones are skipped).
const SSE_BUDGET: usize = 8 * 1024 * 1024;

/// A surface that lies: given each request's method and params and the
/// reply the demo surface would post, returns the reply to post instead.
/// For tests of what a hostile surface can (and cannot) make a model read.
#[derive(Clone)]
pub struct Rewrite(Arc<RewriteFn>);

type RewriteFn = dyn Fn(&str, &Value, Value) -> Value + Send + Sync;

impl Rewrite {
    /// A rewrite by `f(method, params, reply)`.
    pub fn new(f: impl Fn(&str, &Value, Value) -> Value + Send + Sync + 'static) -> Self {
        Rewrite(Arc::new(f))
    }
}

impl fmt::Debug for Rewrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Rewrite(..)")
    }
}

/// Which receive leg the surface reads its inbound frames from, on an
/// HTTP relay. (A page on a Pusher channel is built with
/// [`DemoSurface::channel_builder`] or [`DemoSurfaceBuilder::channel`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SurfaceLeg {
    /// `GET /{session}/events?direction=inbound` (default).
    #[default]
    Sse,
    /// `GET /{session}/poll?direction=inbound`, echoing `subscriber`.
    Poll,
}

/// Configuration of a [`DemoSurface`].
#[derive(Clone)]
pub struct DemoSurfaceBuilder {
    base_url: String,
    session: String,
    token: String,
    leg: SurfaceLeg,
    revisions: RevisionMode,
    change_feed: bool,
    feed_attribution: bool,
    feed_complete: bool,
    stale_reads: bool,
    current_in_refusal: bool,
    cells: Vec<(String, String)>,
    register: bool,
    unregister_on_shutdown: bool,
    poll_wait: Duration,
    tls_roots: Vec<CertificateDer<'static>>,
    tls_config: Option<Arc<rustls::ClientConfig>>,
    server_name: String,
    protocol_versions: Vec<String>,
    rewrite: Option<Rewrite>,
    channel: Option<ChannelSettings>,
    extra_tools: usize,
}

impl fmt::Debug for DemoSurfaceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DemoSurfaceBuilder")
            .field("base_url", &self.base_url)
            .field("session", &self.session)
            .field("leg", &self.leg)
            .field("revisions", &self.revisions)
            .field("change_feed", &self.change_feed)
            .field("feed_attribution", &self.feed_attribution)
            .field("feed_complete", &self.feed_complete)
            .field("stale_reads", &self.stale_reads)
            .field("current_in_refusal", &self.current_in_refusal)
            .field("channel", &self.channel)
            .field("extra_tools", &self.extra_tools)
            .finish_non_exhaustive()
    }
}

impl DemoSurfaceBuilder {
    /// The receive leg (default [`SurfaceLeg::Sse`]).
    #[must_use]
    pub fn leg(mut self, leg: SurfaceLeg) -> Self {
        self.leg = leg;
        self
    }

    /// How revisions are minted and enforced (default
    /// [`RevisionMode::Enforced`]).
    #[must_use]
    pub fn revisions(mut self, mode: RevisionMode) -> Self {
        self.revisions = mode;
        self
    }

    /// Offer the `changes_since` tool (default true).
    #[must_use]
    pub fn change_feed(mut self, offered: bool) -> Self {
        self.change_feed = offered;
        self
    }

    /// Name the actor (`actor_type`) on change rows (default true).
    #[must_use]
    pub fn feed_attribution(mut self, attributed: bool) -> Self {
        self.feed_attribution = attributed;
        self
    }

    /// The `_meta.complete` flag the feed reports (default true).
    #[must_use]
    pub fn feed_complete(mut self, complete: bool) -> Self {
        self.feed_complete = complete;
        self
    }

    /// Answer a read (`sheet_describe`, `sheet_get_cell`,
    /// `sheet_get_range`) whatever its pin, as the seeds describe a read
    /// ("a read overwrites nothing"), and refuse only a stale write
    /// (default false: a stale pin refuses a read too).
    #[must_use]
    pub fn stale_reads(mut self, answered: bool) -> Self {
        self.stale_reads = answered;
        self
    }

    /// Name the current revision in a stale refusal (`data.current`,
    /// default true).
    #[must_use]
    pub fn current_in_refusal(mut self, named: bool) -> Self {
        self.current_in_refusal = named;
        self
    }

    /// Replace the initial content (A1 address → value). The default is a
    /// small inventory: `A1:C4` with Item/Qty/Price and Apples, Pears, Plums.
    #[must_use]
    pub fn cells<I, A, V>(mut self, cells: I) -> Self
    where
        I: IntoIterator<Item = (A, V)>,
        A: Into<String>,
        V: Into<String>,
    {
        self.cells = cells
            .into_iter()
            .map(|(a, v)| (a.into(), v.into()))
            .collect();
        self
    }

    /// POST `/register` on start (default true). Off when the session is
    /// registered by someone else.
    #[must_use]
    pub fn register(mut self, register: bool) -> Self {
        self.register = register;
        self
    }

    /// POST `unregister` on [`DemoSurface::shutdown`] (default false). On the
    /// Node relay this ends the session for every agent too.
    #[must_use]
    pub fn unregister_on_shutdown(mut self, unregister: bool) -> Self {
        self.unregister_on_shutdown = unregister;
        self
    }

    /// The `wait` of each poll on the poll leg (default 20 s, the relay's
    /// default).
    #[must_use]
    pub fn poll_wait(mut self, wait: Duration) -> Self {
        self.poll_wait = wait;
        self
    }

    /// Trust these roots for an `https` relay (e.g.
    /// [`GeneratedCert::ca_der`](crate::GeneratedCert::ca_der)).
    #[must_use]
    pub fn tls_roots(mut self, roots: impl IntoIterator<Item = CertificateDer<'static>>) -> Self {
        self.tls_roots.extend(roots);
        self
    }

    /// Use this rustls client configuration for an `https` relay (takes
    /// precedence over [`DemoSurfaceBuilder::tls_roots`]).
    #[must_use]
    pub fn tls_config(mut self, config: Arc<rustls::ClientConfig>) -> Self {
        self.tls_config = Some(config);
        self
    }

    /// `serverInfo.name` in the `initialize` answer.
    #[must_use]
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = name.into();
        self
    }

    /// The protocol versions `initialize` answers with, newest first, as
    /// MicroMcpServer's `protocolVersions` option: a requested version in
    /// the list is echoed, any other is answered with the first. Empty (the
    /// default) answers `2025-06-18` whatever was asked, as MicroMcpServer
    /// does without the option.
    ///
    /// ```
    /// use human_plus_relay::DemoSurface;
    /// let b = DemoSurface::builder("http://127.0.0.1:1", "s", "t").protocol_versions(["2025-11-25"]);
    /// # let _ = b;
    /// ```
    #[must_use]
    pub fn protocol_versions<I, V>(mut self, versions: I) -> Self
    where
        I: IntoIterator<Item = V>,
        V: Into<String>,
    {
        self.protocol_versions = versions.into_iter().map(Into::into).collect();
        self
    }

    /// Every reply passes through `rewrite` before it is posted (default:
    /// none). A test's hostile surface.
    ///
    /// ```
    /// use human_plus_relay::{DemoSurface, Rewrite};
    /// let b = DemoSurface::builder("http://127.0.0.1:1", "s", "t")
    ///     .rewrite(Rewrite::new(|_method, _params, reply| reply));
    /// # let _ = b;
    /// ```
    #[must_use]
    pub fn rewrite(mut self, rewrite: Rewrite) -> Self {
        self.rewrite = Some(rewrite);
        self
    }

    /// Joins a Pusher-protocol channel instead of registering on an HTTP
    /// relay: the WebSocket server at `ws_url` (`ws(s)://host:port/app/KEY`,
    /// what Laravel Reverb serves) and the host app's auth bridge at
    /// `auth_url` (`POST /broadcasting/auth`, which signs the channel for
    /// the bearer of this builder's token). The channel is
    /// `private-agent.session.<session id>` unless
    /// [`DemoSurfaceBuilder::channel_name`] says otherwise. The relay URL,
    /// [`DemoSurfaceBuilder::leg`], `register`, `unregister_on_shutdown`
    /// and `poll_wait` do not apply to a page on a channel; everything the
    /// sheet does applies unchanged. See [`DemoSurface::channel_builder`].
    ///
    /// ```
    /// use human_plus_relay::DemoSurface;
    /// let b = DemoSurface::builder("http://127.0.0.1:1", "S1", "0123456789abcdef0123")
    ///     .channel("ws://127.0.0.1:6001/app/app-key", "http://127.0.0.1:8000/broadcasting/auth");
    /// # let _ = b;
    /// ```
    #[must_use]
    pub fn channel(mut self, ws_url: impl Into<String>, auth_url: impl Into<String>) -> Self {
        let previous = self.channel.take();
        self.channel = Some(ChannelSettings {
            ws_url: ws_url.into(),
            auth_url: auth_url.into(),
            channel: previous.as_ref().and_then(|p| p.channel.clone()),
            max_reply_bytes: previous.as_ref().and_then(|p| p.max_reply_bytes),
            client_events: previous
                .as_ref()
                .map_or(channel::DEFAULT_PAGE_CLIENT_EVENTS, |p| p.client_events),
        });
        self
    }

    /// The channel a page on a channel joins (default
    /// `private-agent.session.<session id>`, seed 004's
    /// `Echo.private("agent.session." + id)`); a `presence-…` name makes
    /// the page a presence member, so agents see it leave. Only with
    /// [`DemoSurfaceBuilder::channel`].
    ///
    /// ```
    /// use human_plus_relay::DemoSurface;
    /// let b = DemoSurface::channel_builder("ws://127.0.0.1:6001/app/k", "http://127.0.0.1:8000/broadcasting/auth", "S1", "t")
    ///     .channel_name("presence-agent.session.S1");
    /// # let _ = b;
    /// ```
    #[must_use]
    pub fn channel_name(mut self, name: impl Into<String>) -> Self {
        if let Some(settings) = &mut self.channel {
            settings.channel = Some(name.into());
        }
        self
    }

    /// A page on a channel drops (and counts, [`DemoSurface::dropped_replies`])
    /// every reply whose WebSocket message would be over `bytes`, as a
    /// server with that cap refuses it: the agent hears nothing. By default
    /// the page sends any size, as pusher-js does, and the server decides
    /// (our [`PusherServer`](crate::PusherServer) closes the page's
    /// connection with 1009 over 10,000 bytes, and the page connects
    /// again; sockudo's payload cap answers the page 4301). `0` makes a
    /// page that records and applies every request and answers none. Only
    /// with [`DemoSurfaceBuilder::channel`].
    ///
    /// ```
    /// use human_plus_relay::DemoSurface;
    /// // Reverb's 10,000-byte message, refused at the page.
    /// let b = DemoSurface::channel_builder("ws://127.0.0.1:6001/app/k", "http://127.0.0.1:8000/broadcasting/auth", "S1", "t")
    ///     .extra_tools(40)
    ///     .max_reply_bytes(10_000);
    /// # let _ = b;
    /// ```
    #[must_use]
    pub fn max_reply_bytes(mut self, bytes: usize) -> Self {
        if let Some(settings) = &mut self.channel {
            settings.max_reply_bytes = Some(bytes);
        }
        self
    }

    /// How many whispers per second a page on a channel sends at most
    /// (default 100, sockudo's limit; beyond, replies wait in order). Only
    /// with [`DemoSurfaceBuilder::channel`].
    ///
    /// ```
    /// use human_plus_relay::DemoSurface;
    /// // Pusher Channels' documented limit.
    /// let b = DemoSurface::channel_builder("ws://127.0.0.1:6001/app/k", "http://127.0.0.1:8000/broadcasting/auth", "S1", "t")
    ///     .client_events_per_second(10);
    /// # let _ = b;
    /// ```
    #[must_use]
    pub fn client_events_per_second(mut self, events: u32) -> Self {
        if let Some(settings) = &mut self.channel {
            settings.client_events = events.max(1);
        }
        self
    }

    /// Offers `count` more tools besides the demo's (`extra_tool_001`, …,
    /// each a read-only tool of about 300 bytes as listed), so a
    /// `tools/list` answer is as large as a real page's: 40 make it over
    /// the 10,000 bytes a Reverb message may be. Calling one answers a
    /// short text. Any leg.
    ///
    /// ```
    /// use human_plus_relay::DemoSurface;
    /// let b = DemoSurface::builder("http://127.0.0.1:1", "s", "t").extra_tools(40);
    /// # let _ = b;
    /// ```
    #[must_use]
    pub fn extra_tools(mut self, count: usize) -> Self {
        self.extra_tools = count;
        self
    }

    /// Registers (unless told not to), opens the receive leg and starts
    /// answering. Returns once the leg is open, so an agent may post. A
    /// page on a channel ([`DemoSurfaceBuilder::channel`]) returns once it
    /// is subscribed, so an agent may whisper.
    ///
    /// # Errors
    /// The relay (or, on a channel, the WebSocket server or the auth
    /// bridge) could not be reached or refused.
    pub async fn start(self) -> Result<DemoSurface, SurfaceError> {
        let tls = match (self.tls_config, self.tls_roots.is_empty()) {
            (Some(config), _) => Some(config),
            (None, false) => Some(
                crate::tls::client_config_trusting(&self.tls_roots)
                    .map_err(|e| SurfaceError::Tls(e.to_string()))?,
            ),
            (None, true) => None,
        };
        let plan = match self.channel {
            Some(settings) => Some(ChannelPlan::new(settings, &self.session, tls.clone())?),
            None => None,
        };
        let (client, link) = match &plan {
            Some(plan) => {
                let (link, commands) = ChannelLink::new(plan.channel().to_owned());
                (plan.bridge_client(), Some((link, commands)))
            }
            None => (Client::new(&self.base_url, tls)?, None),
        };
        let (link, commands) = match link {
            Some((link, commands)) => (Some(link), Some(commands)),
            None => (None, None),
        };
        let mut sheet = Sheet::new(self.cells)?;
        sheet
            .tool_edits
            .added
            .extend(sheet::extra_tool_definitions(self.extra_tools));
        let inner = Arc::new(Inner {
            client,
            channel: link,
            session: self.session,
            token: self.token,
            behaviour: Behaviour {
                revisions: self.revisions,
                change_feed: self.change_feed,
                feed_attribution: self.feed_attribution,
                feed_complete: self.feed_complete,
                stale_reads: self.stale_reads,
                current_in_refusal: self.current_in_refusal,
                server_name: self.server_name,
                server_version: env!("CARGO_PKG_VERSION").to_owned(),
                protocol_versions: self.protocol_versions,
            },
            sheet: Mutex::new(sheet),
            ended: Mutex::new(None),
            changed: Notify::new(),
            poll_wait_ms: u64::try_from(self.poll_wait.as_millis()).unwrap_or(u64::MAX),
            rewrite: self.rewrite,
            registers: self.register,
            registered_again: AtomicUsize::new(0),
        });
        if let (Some(plan), Some(commands)) = (plan, commands) {
            let (ready, joined) = tokio::sync::oneshot::channel();
            let task = tokio::spawn(channel::run(
                Arc::clone(&inner) as Arc<dyn Page>,
                plan,
                commands,
                ready,
            ));
            match joined.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    let _ = task.await;
                    return Err(error);
                }
                Err(_) => return Err(SurfaceError::NotJoined),
            }
            return Ok(DemoSurface {
                inner,
                leg: self.leg,
                unregister_on_shutdown: false,
                task: Some(task),
            });
        }
        if self.register {
            inner.register().await?;
        }
        let task = match self.leg {
            SurfaceLeg::Sse => {
                let response = match inner.open_sse().await {
                    Ok(response) => response,
                    Err(Opened::Status(status, body)) => return Err(status_error(status, &body)),
                    Err(Opened::Failed(e)) => return Err(e),
                };
                tokio::spawn(run_sse(Arc::clone(&inner), response))
            }
            SurfaceLeg::Poll => {
                let (status, body) = inner.poll_once("", 0).await?;
                if status != 200 {
                    return Err(status_error(status, &body));
                }
                let (subscriber, frames) = parse_poll(&body)?;
                tokio::spawn(run_poll(Arc::clone(&inner), subscriber, frames))
            }
        };
        Ok(DemoSurface {
            inner,
            leg: self.leg,
            unregister_on_shutdown: self.unregister_on_shutdown,
            task: Some(task),
        })
    }
}

struct Inner {
    /// The relay; on a channel, the auth bridge.
    client: Client,
    /// The channel leg, when the page is on a channel.
    channel: Option<ChannelLink>,
    session: String,
    token: String,
    behaviour: Behaviour,
    sheet: Mutex<Sheet>,
    ended: Mutex<Option<String>>,
    changed: Notify,
    poll_wait_ms: u64,
    rewrite: Option<Rewrite>,
    /// The surface registered the session (so it may register it again).
    registers: bool,
    /// How many times the session was registered again after an outage.
    registered_again: AtomicUsize,
}

enum Opened {
    Status(u16, Vec<u8>),
    Failed(SurfaceError),
}

impl Inner {
    fn route(&self, route: &str, query: &str) -> String {
        self.client.target(&format!(
            "/{}/{route}?token={}{query}",
            encode_component(&self.session),
            encode_component(&self.token)
        ))
    }

    async fn open_sse(&self) -> Result<Response<Incoming>, Opened> {
        let target = self.route("events", "&direction=inbound");
        let response =
            tokio::time::timeout(POST_TIMEOUT, self.client.send(Method::GET, &target, None))
                .await
                .map_err(|_| Opened::Failed(SurfaceError::Timeout("subscribe")))?
                .map_err(Opened::Failed)?;
        if response.status().as_u16() == 200 {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let body = tokio::time::timeout(Duration::from_secs(2), response.into_body().collect())
            .await
            .ok()
            .and_then(Result::ok)
            .map(|b| b.to_bytes().to_vec())
            .unwrap_or_default();
        Err(Opened::Status(status, body))
    }

    async fn poll_once(
        &self,
        subscriber: &str,
        wait_ms: u64,
    ) -> Result<(u16, bytes::Bytes), SurfaceError> {
        let target = self.route(
            "poll",
            &format!(
                "&direction=inbound&wait={wait_ms}&subscriber={}",
                encode_component(subscriber)
            ),
        );
        let timeout = Duration::from_millis(wait_ms) + POST_TIMEOUT;
        self.client
            .send_full(Method::GET, &target, None, timeout)
            .await
    }

    /// Sends a frame to the agents: a whisper on a channel, else a POST to
    /// `outbox`.
    async fn post_outbox(&self, frame: String) -> Result<(), SurfaceError> {
        if let Some(channel) = &self.channel {
            return channel.whisper(frame).await;
        }
        let target = self.route("outbox", "");
        let (status, body) = self
            .client
            .send_full(Method::POST, &target, Some(frame), POST_TIMEOUT)
            .await?;
        if status == 200 {
            Ok(())
        } else {
            Err(status_error(status, &body))
        }
    }

    /// Answers one frame from an agent, whatever leg it came on: records
    /// it, lets the sheet answer, applies the rewrite. The reply to send,
    /// if the frame was a request.
    fn answer(&self, frame: &str) -> Option<Value> {
        let mut reply = lock(&self.sheet).handle_frame(&self.behaviour, frame);
        if let Some(rewrite) = &self.rewrite
            && let Some(r) = reply.take()
        {
            let request: Value = serde_json::from_str(frame).unwrap_or(Value::Null);
            let method = request.get("method").and_then(Value::as_str).unwrap_or("");
            let params = request.get("params").unwrap_or(&Value::Null);
            reply = Some((rewrite.0)(method, params, r));
        }
        self.changed.notify_waiters();
        reply
    }

    /// One frame from the HTTP relay: answered, the reply posted.
    async fn handle(&self, frame: &str) {
        if let Some(reply) = self.answer(frame)
            && let Err(error) = self.post_outbox(reply.to_string()).await
        {
            tracing::debug!(%error, "posting a reply to outbox failed");
        }
    }

    fn end(&self, reason: &str) {
        *lock(&self.ended) = Some(reason.to_owned());
        self.changed.notify_waiters();
    }

    /// `POST /register` with the session's id and token.
    async fn register(&self) -> Result<(), SurfaceError> {
        let body = json!({"session": self.session, "token": self.token}).to_string();
        let (status, answer) = self
            .client
            .send_full(
                Method::POST,
                &self.client.target("/register"),
                Some(body),
                POST_TIMEOUT,
            )
            .await?;
        if status == 200 {
            Ok(())
        } else {
            Err(status_error(status, &answer))
        }
    }

    /// The relay answered 410 after the receive leg could not reach it: a
    /// relay that restarted has forgotten the session. Registers it again
    /// (only a surface that registered it), trying while the relay cannot
    /// be reached; whether the leg goes on.
    async fn register_again(&self) -> bool {
        if !self.registers {
            return false;
        }
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.register().await {
                Ok(()) => {
                    self.registered_again.fetch_add(1, Ordering::SeqCst);
                    tracing::info!("the relay had forgotten the session; registered it again");
                    self.changed.notify_waiters();
                    return true;
                }
                Err(SurfaceError::Connect(_) | SurfaceError::Timeout(_)) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(error) => {
                    tracing::debug!(%error, "registering the session again was refused");
                    return false;
                }
            }
        }
    }
}

/// Whether an `event: error` / status ends the page for good.
fn terminal(reason: &str) -> bool {
    matches!(reason, "session_gone" | "invalid_token")
}

async fn run_sse(inner: Arc<Inner>, first: Response<Incoming>) {
    let mut response = Some(first);
    let mut backoff = Duration::from_millis(100);
    // The leg could not reach the relay since it last had a stream.
    let mut outage = false;
    loop {
        let current = match response.take() {
            Some(r) => r,
            None => match inner.open_sse().await {
                Ok(r) => r,
                Err(Opened::Status(410, _)) => {
                    if outage && inner.register_again().await {
                        outage = false;
                        continue;
                    }
                    return inner.end("session_gone");
                }
                Err(Opened::Status(401, _)) => return inner.end("invalid_token"),
                Err(other) => {
                    if let Opened::Failed(SurfaceError::Connect(_) | SurfaceError::Timeout(_)) =
                        other
                    {
                        outage = true;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            },
        };
        backoff = Duration::from_millis(100);
        outage = false;
        let mut body = current.into_body();
        let mut reader = SseReader::new(SSE_BUDGET);
        let mut events = Vec::new();
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                // The connection broke under the stream (a relay that ends
                // a session ends the stream cleanly).
                outage = true;
                break;
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            reader.push(&data, &mut events);
            for event in events.drain(..) {
                match event.event.as_str() {
                    "error" if terminal(&event.data) => return inner.end(&event.data),
                    "mcp" | "message" | "" => inner.handle(&event.data).await,
                    _ => {}
                }
            }
        }
        // The stream ended: reconnect (a new subscriber; frames posted in the
        // gap are lost, as with the Node relay).
        tokio::time::sleep(backoff).await;
    }
}

async fn run_poll(inner: Arc<Inner>, mut subscriber: String, first: Vec<String>) {
    for frame in first {
        inner.handle(&frame).await;
    }
    let mut backoff = Duration::from_millis(100);
    // The leg could not reach the relay since its last answer.
    let mut outage = false;
    loop {
        match inner.poll_once(&subscriber, inner.poll_wait_ms).await {
            Ok((200, body)) => match parse_poll(&body) {
                Ok((id, frames)) => {
                    backoff = Duration::from_millis(100);
                    outage = false;
                    if !id.is_empty() {
                        subscriber = id;
                    }
                    for frame in frames {
                        inner.handle(&frame).await;
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, "unreadable poll answer");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            },
            Ok((410, _)) => {
                if outage && inner.register_again().await {
                    // A new relay: a new subscriber.
                    outage = false;
                    subscriber.clear();
                    continue;
                }
                return inner.end("session_gone");
            }
            Ok((401, _)) => return inner.end("invalid_token"),
            Ok(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(error) => {
                if matches!(error, SurfaceError::Connect(_) | SurfaceError::Timeout(_)) {
                    outage = true;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Reads `{"subscriber":…,"frames":[…]}`; frames as strings (or, leniently,
/// objects re-serialised).
fn parse_poll(body: &[u8]) -> Result<(String, Vec<String>), SurfaceError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| SurfaceError::Protocol(e.to_string()))?;
    let subscriber = value
        .get("subscriber")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let frames = value
        .get("frames")
        .and_then(Value::as_array)
        .map(|frames| {
            frames
                .iter()
                .map(|f| match f {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok((subscriber, frames))
}

/// The page side of a relay session: a small sheet behind MCP. See the
/// [module documentation](self).
pub struct DemoSurface {
    inner: Arc<Inner>,
    leg: SurfaceLeg,
    unregister_on_shutdown: bool,
    task: Option<JoinHandle<()>>,
}

impl fmt::Debug for DemoSurface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DemoSurface")
            .field("session", &self.inner.session)
            .field("leg", &self.leg)
            .field("channel", &self.channel_name())
            .field("revision", &self.revision())
            .field("ended", &self.ended())
            .finish_non_exhaustive()
    }
}

impl DemoSurface {
    /// A builder for the page side of `session` on the relay at
    /// `relay_base_url` (e.g. [`RelayHandle::base_url`](crate::RelayHandle::base_url)).
    /// The token is sent only in query strings to that relay and never
    /// appears in `Debug` output or errors.
    #[must_use]
    pub fn builder(
        relay_base_url: impl Into<String>,
        session: impl Into<String>,
        token: impl Into<String>,
    ) -> DemoSurfaceBuilder {
        DemoSurfaceBuilder {
            base_url: relay_base_url.into(),
            session: session.into(),
            token: token.into(),
            leg: SurfaceLeg::Sse,
            revisions: RevisionMode::Enforced,
            change_feed: true,
            feed_attribution: true,
            feed_complete: true,
            stale_reads: false,
            current_in_refusal: true,
            cells: sheet::default_cells(),
            register: true,
            unregister_on_shutdown: false,
            poll_wait: Duration::from_secs(20),
            tls_roots: Vec::new(),
            tls_config: None,
            server_name: "human-plus-demo-sheet".to_owned(),
            protocol_versions: Vec::new(),
            rewrite: None,
            channel: None,
            extra_tools: 0,
        }
    }

    /// A builder for a page that joins a Pusher-protocol channel (what
    /// Laravel Reverb serves) as seed 004's page does, instead of an HTTP
    /// relay: `ws_url` is the WebSocket server (`ws(s)://host:port/app/KEY`),
    /// `auth_url` the host app's auth bridge (`POST /broadcasting/auth`),
    /// `token` the bearer the bridge knows (sent only to the bridge, as
    /// `Authorization: Bearer`, never in a URL). The channel is
    /// `private-agent.session.<session>` unless
    /// [`DemoSurfaceBuilder::channel_name`] says otherwise.
    ///
    /// ```
    /// use human_plus_relay::{AuthBridge, DemoSurface, PusherServer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = PusherServer::builder("app-key", "app-secret").start().await?;
    /// let bridge = AuthBridge::builder("app-key", "app-secret")
    ///     .grant("page-token-0123456789", "private-agent.session.S1")
    ///     .start()
    ///     .await?;
    /// let page = DemoSurface::channel_builder(server.ws_url(), bridge.url(), "S1", "page-token-0123456789")
    ///     .start()
    ///     .await?;
    /// assert_eq!(server.subscribers("private-agent.session.S1"), 1);
    /// assert_eq!(page.channel_name(), Some("private-agent.session.S1"));
    /// page.leave().await;
    /// assert_eq!(page.ended().as_deref(), Some("left"));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn channel_builder(
        ws_url: impl Into<String>,
        auth_url: impl Into<String>,
        session: impl Into<String>,
        token: impl Into<String>,
    ) -> DemoSurfaceBuilder {
        DemoSurface::builder(String::new(), session, token).channel(ws_url, auth_url)
    }

    /// The session id.
    #[must_use]
    pub fn session_id(&self) -> &str {
        &self.inner.session
    }

    /// The current revision (`r1` at start; every write adds one). Reported
    /// even when the surface mints none.
    #[must_use]
    pub fn revision(&self) -> String {
        lock(&self.inner.sheet).revision()
    }

    /// One cell's value (`None` when empty or not an address).
    #[must_use]
    pub fn cell(&self, address: &str) -> Option<String> {
        lock(&self.inner.sheet).cell(address)
    }

    /// Every non-empty cell, by A1 address.
    #[must_use]
    pub fn cells(&self) -> BTreeMap<String, String> {
        lock(&self.inner.sheet).cells()
    }

    /// The change log, oldest first.
    #[must_use]
    pub fn changes(&self) -> Vec<Change> {
        lock(&self.inner.sheet).changes()
    }

    /// Every `tools/call` received, in order, with its outcome.
    #[must_use]
    pub fn calls(&self) -> Vec<CallRecord> {
        lock(&self.inner.sheet).calls.clone()
    }

    /// The calls that wrote something.
    #[must_use]
    pub fn writes(&self) -> Vec<CallRecord> {
        self.calls()
            .into_iter()
            .filter(|c| c.outcome == CallOutcome::Written)
            .collect()
    }

    /// Every notification received (presence frames included), in order.
    #[must_use]
    pub fn notifications(&self) -> Vec<Notification> {
        lock(&self.inner.sheet).notifications.clone()
    }

    /// The params of every `notifications/human-plus/activity` received.
    #[must_use]
    pub fn activity(&self) -> Vec<Value> {
        lock(&self.inner.sheet)
            .notifications
            .iter()
            .filter(|n| n.method == "notifications/human-plus/activity")
            .map(|n| n.params.clone())
            .collect()
    }

    /// The relay subscriber ids of the agents present (from
    /// `peer_joined` / `peer_left`), sorted.
    #[must_use]
    pub fn peers(&self) -> Vec<String> {
        lock(&self.inner.sheet).peers.iter().cloned().collect()
    }

    /// Why the receive leg stopped for good (`session_gone` or
    /// `invalid_token`), if it did. A page on a channel: `left` after
    /// [`DemoSurface::leave`], `closed` when the server closed it for good
    /// (4000-4099), `refused` when it could not join again.
    #[must_use]
    pub fn ended(&self) -> Option<String> {
        lock(&self.inner.ended).clone()
    }

    /// The channel a page on a channel joined (`None` on the HTTP legs).
    #[must_use]
    pub fn channel_name(&self) -> Option<&str> {
        self.inner.channel.as_ref().map(|c| c.channel.as_str())
    }

    /// Whether a page on a channel is subscribed now (false while it
    /// reconnects, after it left, and on the HTTP legs).
    #[must_use]
    pub fn is_joined(&self) -> bool {
        self.inner
            .channel
            .as_ref()
            .is_some_and(|c| lock(&c.record).joined)
    }

    /// How many times a page on a channel subscribed: 1 after start, one
    /// more each time it joined again after the server closed its
    /// connection (0 on the HTTP legs).
    #[must_use]
    pub fn joins(&self) -> usize {
        self.inner
            .channel
            .as_ref()
            .map_or(0, |c| lock(&c.record).joins)
    }

    /// Why each of a page's channel connections ended, oldest first (a
    /// server's close code, or the page's own end), not counting
    /// [`DemoSurface::leave`].
    #[must_use]
    pub fn channel_closes(&self) -> Vec<human_plus_core::PusherClosed> {
        self.inner
            .channel
            .as_ref()
            .map(|c| lock(&c.record).closes.clone())
            .unwrap_or_default()
    }

    /// Every `pusher:error` the channel server sent the page, oldest first
    /// (e.g. sockudo's 4301 for a reply over its payload cap).
    #[must_use]
    pub fn channel_errors(&self) -> Vec<human_plus_core::PusherServerError> {
        self.inner
            .channel
            .as_ref()
            .map(|c| lock(&c.record).errors.clone())
            .unwrap_or_default()
    }

    /// How many replies a page on a channel dropped for
    /// [`DemoSurfaceBuilder::max_reply_bytes`].
    #[must_use]
    pub fn dropped_replies(&self) -> usize {
        self.inner
            .channel
            .as_ref()
            .map_or(0, |c| lock(&c.record).dropped_replies)
    }

    /// A page on a channel leaves, as a tab that is closed: it closes its
    /// WebSocket cleanly (1000) and never connects again; agents on a
    /// presence channel are told (`pusher_internal:member_removed`), on a
    /// private channel nobody is. Returns once the socket is closed. The
    /// records stay readable. (Dropping the surface instead plays a tab
    /// that is killed: the socket goes without a close frame.) Nothing on
    /// the HTTP legs: use [`DemoSurface::shutdown`].
    pub async fn leave(&self) {
        if let Some(channel) = &self.inner.channel {
            channel.leave().await;
        }
    }

    /// How many times the surface registered its session again, with the
    /// same token, because the relay answered 410 after an outage (a relay
    /// that restarted has forgotten it). See the
    /// [module documentation](self).
    #[must_use]
    pub fn registered_again(&self) -> usize {
        self.inner.registered_again.load(Ordering::SeqCst)
    }

    /// The person at the page.
    #[must_use]
    pub fn person(&self) -> Person {
        Person {
            inner: Arc::clone(&self.inner),
        }
    }

    /// The tool definitions `tools/list` answers now (edits included), as
    /// the surface sends them: what a test pins.
    #[must_use]
    pub fn tool_definitions(&self) -> Vec<Value> {
        lock(&self.inner.sheet).tools(&self.inner.behaviour)
    }

    /// How many requests of `method` the surface received (`tools/list`,
    /// `initialize`, ...).
    #[must_use]
    pub fn requests(&self, method: &str) -> usize {
        lock(&self.inner.sheet)
            .requests
            .iter()
            .filter(|m| *m == method)
            .count()
    }

    /// Redefines tool `name` with another description (so its digest
    /// changes), and tells every agent with
    /// `notifications/tools/list_changed`, as a page does when it
    /// re-registers a tool.
    ///
    /// # Errors
    /// When the notification cannot be posted.
    pub async fn redefine_tool(&self, name: &str, description: &str) -> Result<(), SurfaceError> {
        lock(&self.inner.sheet)
            .tool_edits
            .descriptions
            .insert(name.to_owned(), description.to_owned());
        self.list_changed().await
    }

    /// Offers one more tool (a whole MCP definition), and tells every agent.
    ///
    /// # Errors
    /// When the notification cannot be posted.
    pub async fn add_tool(&self, definition: Value) -> Result<(), SurfaceError> {
        lock(&self.inner.sheet).tool_edits.added.push(definition);
        self.list_changed().await
    }

    /// Stops offering tool `name`, and tells every agent.
    ///
    /// # Errors
    /// When the notification cannot be posted.
    pub async fn remove_tool(&self, name: &str) -> Result<(), SurfaceError> {
        {
            let mut sheet = lock(&self.inner.sheet);
            sheet.tool_edits.removed.insert(name.to_owned());
            sheet
                .tool_edits
                .added
                .retain(|t| t.get("name").and_then(Value::as_str) != Some(name));
        }
        self.list_changed().await
    }

    async fn list_changed(&self) -> Result<(), SurfaceError> {
        let frame = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        self.inner.post_outbox(frame.to_string()).await
    }

    /// Posts a notification from the page to every agent (`outbox`).
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), SurfaceError> {
        let frame = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.inner.post_outbox(frame.to_string()).await
    }

    /// Waits until `predicate` holds (checked after every frame the surface
    /// handles, every edit and the end of the leg), up to `timeout`. Returns
    /// whether it held.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut predicate: impl FnMut(&DemoSurface) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if predicate(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return predicate(self);
            }
        }
    }

    /// Stops the receive leg (and unregisters, if configured to). A page on
    /// a channel leaves first ([`DemoSurface::leave`]).
    pub async fn shutdown(mut self) {
        self.leave().await;
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        if self.unregister_on_shutdown && self.inner.channel.is_none() {
            let target = self.inner.route("unregister", "");
            let _ = self
                .inner
                .client
                .send_full(Method::POST, &target, None, POST_TIMEOUT)
                .await;
        }
    }
}

impl Drop for DemoSurface {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The person at the page: edits the sheet directly (attributed `human`).
#[derive(Clone)]
pub struct Person {
    inner: Arc<Inner>,
}

impl fmt::Debug for Person {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Person")
            .field("session", &self.inner.session)
            .finish()
    }
}

impl Person {
    /// Sets a cell (an empty value clears it). Returns the new revision.
    pub fn set_cell(&self, address: &str, value: &str) -> Result<String, SurfaceError> {
        let revision = lock(&self.inner.sheet).set_cell(Actor::Human, address, value)?;
        self.inner.changed.notify_waiters();
        Ok(revision)
    }

    /// Sets a cell as a person does it at a Fancy page: the edit lands,
    /// and the page's sharing layer tells every agent with
    /// `notifications/agent_activity` whose `source` is `"user"` (what
    /// `useCoBrowseSession().observeUser` sends, and what `mcp-relay-client`
    /// reads as "a human took control"). Returns the new revision.
    ///
    /// # Errors
    /// A bad address, or the notification could not be posted (the edit
    /// has landed then).
    pub async fn edit_cell(&self, address: &str, value: &str) -> Result<String, SurfaceError> {
        let revision = self.set_cell(address, value)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let params = json!({
            "source": "user",
            "agentId": "person",
            "agentName": "A person",
            "target": {"kind": "cell", "elementId": address, "label": address},
            "action": "editing",
            "timestamp": now,
        });
        let frame =
            json!({"jsonrpc": "2.0", "method": "notifications/agent_activity", "params": params});
        self.inner.post_outbox(frame.to_string()).await?;
        Ok(revision)
    }

    /// Clears a cell. Returns the new revision.
    pub fn clear_cell(&self, address: &str) -> Result<String, SurfaceError> {
        self.set_cell(address, "")
    }

    /// Deletes a row (rows below move up). Returns the new revision.
    pub fn delete_row(&self, row: u32) -> Result<String, SurfaceError> {
        let revision = lock(&self.inner.sheet).delete_row(Actor::Human, row)?;
        self.inner.changed.notify_waiters();
        Ok(revision)
    }
}

impl Page for Inner {
    fn answer(&self, frame: &str) -> Option<Value> {
        Inner::answer(self, frame)
    }

    fn end(&self, reason: &str) {
        Inner::end(self, reason);
    }

    fn changed(&self) {
        self.changed.notify_waiters();
    }

    fn link(&self) -> Option<&ChannelLink> {
        self.channel.as_ref()
    }

    fn token(&self) -> &str {
        &self.token
    }

    fn set_peers(&self, peers: std::collections::BTreeSet<String>) {
        lock(&self.sheet).peers = peers;
    }

    fn peer(&self, user: String, present: bool) {
        let mut sheet = lock(&self.sheet);
        if present {
            sheet.peers.insert(user);
        } else {
            sheet.peers.remove(&user);
        }
    }
}
