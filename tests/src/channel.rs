//! The conformance suite over a Reverb (Pusher-protocol) channel: every
//! runtime joins a page through a channel server and the host app's auth
//! bridge, over real WebSockets on loopback.
//!
//! The server is the project's own [`PusherServer`] (Reverb's behaviour,
//! measured) or, when [`crate::sockudo`] finds one, a real third-party
//! Pusher-protocol server; the page is [`DemoSurface`] on the channel; the
//! auth bridge is [`AuthBridge`].

use std::time::{Duration, Instant};

use human_plus_core::{
    EgressPolicy, Error, ManagerConfig, Participant, ReverbChannel, SurfaceInvitation,
    TransportConfig, TrustPolicy, Unauthorized,
};
use human_plus_relay::{AuthBridge, AuthBridgeHandle, DemoSurface, PusherHandle, PusherServer};
use human_plus_runtime::TlsRoots;
use serde_json::json;

use crate::{Client, Runtime, Setup, random_hex};

/// The channel server's app key and secret.
pub const APP_KEY: &str = "conformance-key";
/// The secret the server and the bridge share.
pub const APP_SECRET: &str = "conformance-secret";

const OWNER: &str = "owner:channel";

/// Which channel server a scenario runs over.
pub enum Server {
    /// The project's own.
    Ours(PusherHandle),
    /// A third-party server (the `ws://…/app/KEY` URL), with its handle.
    External(String, Box<dyn std::any::Any + Send>),
}

impl Server {
    fn ws_url(&self) -> String {
        match self {
            Server::Ours(h) => h.ws_url(),
            Server::External(url, _) => url.clone(),
        }
    }
}

/// A channel server, an auth bridge and a page on a channel.
pub struct ChannelEnv {
    rt: tokio::runtime::Runtime,
    /// The channel server.
    pub server: Server,
    /// The host app's auth bridge.
    pub bridge: AuthBridgeHandle,
    /// The page.
    pub page: Option<DemoSurface>,
    /// The session id.
    pub session: String,
    /// The agents' token.
    pub token: String,
    /// The channel.
    pub channel: String,
}

/// How a [`ChannelEnv`] is set up.
#[derive(Debug, Clone, Default)]
pub struct ChannelOptions {
    /// A presence channel instead of a private one.
    pub presence: bool,
    /// Tools added to the page's listing (40 put it over 10,000 bytes).
    pub extra_tools: usize,
    /// Replies over this size are dropped at the page.
    pub max_reply_bytes: Option<usize>,
}

impl ChannelEnv {
    /// Our channel server, a bridge and a page.
    #[must_use]
    pub fn ours(options: &ChannelOptions) -> ChannelEnv {
        let rt = runtime();
        let server = rt.block_on(async {
            PusherServer::builder(APP_KEY, APP_SECRET)
                .start()
                .await
                .unwrap()
        });
        ChannelEnv::over(rt, Server::Ours(server), options)
    }

    /// sockudo, a real third-party Pusher-protocol server (its 10,000-byte
    /// message cap, as Reverb's default), a bridge and our page; `None`
    /// (skipped, said why) when the machine has no sockudo.
    #[must_use]
    pub fn sockudo(options: &ChannelOptions) -> Option<ChannelEnv> {
        let server = crate::sockudo::Sockudo::builder()
            .key(APP_KEY)
            .secret(APP_SECRET)
            .start()?;
        let url = server.ws_url();
        Some(ChannelEnv::over(
            runtime(),
            Server::External(url, Box::new(server)),
            options,
        ))
    }

    /// A channel environment over `server` (on `rt`).
    #[must_use]
    pub fn over(
        rt: tokio::runtime::Runtime,
        server: Server,
        options: &ChannelOptions,
    ) -> ChannelEnv {
        let session = format!("ch_{}", random_hex(6));
        let token = format!("tok{}", random_hex(16));
        let page_token = format!("page{}", random_hex(16));
        let kind = if options.presence {
            "presence"
        } else {
            "private"
        };
        let channel = format!("{kind}-agent.session.{session}");
        let bridge = rt.block_on(async {
            AuthBridge::builder(APP_KEY, APP_SECRET)
                .grant_as(&token, &channel, "agent-1")
                .grant_as(&page_token, &channel, "page")
                .start()
                .await
                .unwrap()
        });
        let mut b =
            DemoSurface::channel_builder(server.ws_url(), bridge.url(), &session, &page_token)
                .channel_name(&channel)
                .extra_tools(options.extra_tools)
                .cells([("A1", "alpha"), ("B2", "beta")]);
        if let Some(max) = options.max_reply_bytes {
            b = b.max_reply_bytes(max);
        }
        let page = rt.block_on(b.start()).unwrap();
        ChannelEnv {
            rt,
            server,
            bridge,
            page: Some(page),
            session,
            token,
            channel,
        }
    }

    /// The page.
    #[must_use]
    pub fn page(&self) -> &DemoSurface {
        self.page.as_ref().unwrap()
    }

    /// Runs a future on the environment's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// The invitation, with the agents' token (or another).
    #[must_use]
    pub fn invitation_with(&self, token: &str, auth_url: &str) -> SurfaceInvitation {
        let ch = ReverbChannel::new(self.server.ws_url(), auth_url, &self.channel, true).unwrap();
        SurfaceInvitation::new_reverb(ch, &self.session, token, "sheet:one", "Demo").unwrap()
    }

    /// The invitation.
    #[must_use]
    pub fn invitation(&self) -> SurfaceInvitation {
        self.invitation_with(&self.token, &self.bridge.url())
    }

    /// A setup for a client with `timeout` per exchange.
    #[must_use]
    pub fn setup(&self, timeout: Duration) -> Setup {
        self.setup_with_ports(timeout, &[])
    }

    /// [`ChannelEnv::setup`], with more ports declared (another bridge's).
    #[must_use]
    pub fn setup_with_ports(&self, timeout: Duration, more: &[u16]) -> Setup {
        let mut ports = vec![port_of(&self.server.ws_url()), port_of(&self.bridge.url())];
        ports.extend_from_slice(more);
        let egress = EgressPolicy::new(["127.0.0.1"])
            .allow_ports(ports)
            .allow_unverified_egress(true);
        let config = ManagerConfig::new(
            egress,
            TrustPolicy::every_tool(Vec::<(String, String)>::new()),
        )
        .transport(TransportConfig::default().timeout(timeout));
        Setup {
            config,
            roots: TlsRoots::webpki(),
            hosts: Vec::new(),
        }
    }
}

/// The port of a loopback URL (`scheme://127.0.0.1:PORT/…`).
fn port_of(url: &str) -> u16 {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn participant(id: &str) -> Participant {
    Participant::new(id, "Assistant", "#7c3aed")
}

/// Attach (learning the revision), tools, a pinned call, a person's edit, a
/// stale refusal with the feed, the blind repeat held back, an announcement
/// and detach, on one kept WebSocket.
pub fn conversation<R: Runtime>(env: &ChannelEnv) {
    let client = R::client(env.setup(Duration::from_secs(10)));
    let a = client
        .attach_verified(OWNER, env.invitation(), participant("agent-1"))
        .unwrap()
        .attachment;
    let tools = client.tools(OWNER, a.id()).unwrap();
    assert!(
        tools.tools.iter().any(|t| t.name() == "sheet_set_cell"),
        "{:?}",
        tools.tools
    );
    let written = client
        .call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "A1", "value": "agent"}),
        )
        .unwrap();
    assert!(written.revision_to_carry().is_some(), "{written:?}");
    assert_eq!(env.page().cell("A1").as_deref(), Some("agent"));

    // The person edits between the agent's read and its next write.
    env.block_on(env.page().person().edit_cell("A1", "person"))
        .unwrap();
    refused_then_held_back(client.as_ref(), a.id());
    assert_eq!(env.page().cell("A1").as_deref(), Some("person"));
    // The blind repeat was held back: nothing reached the page.
    let writes = env
        .page()
        .calls()
        .iter()
        .filter(|c| c.tool == "sheet_set_cell")
        .count();
    assert_eq!(writes, 2, "the write and the refused one, not the repeat");

    let activity = human_plus_core::Activity::new("editing").target("A1");
    client.announce(OWNER, a.id(), &activity).unwrap();
    wait_for(|| !env.page().activity().is_empty());

    if let Server::Ours(server) = &env.server {
        // One WebSocket for the agent's whole conversation (and the page's).
        assert_eq!(
            server.connections_accepted(),
            2,
            "{:?}",
            server.seen_paths()
        );
        assert!(
            server.seen_paths().iter().all(|p| !p.contains(&env.token)),
            "the token never reaches the channel server"
        );
    }
    client.detach(OWNER, a.id()).unwrap();
    client.shutdown();
}

/// A wrong bearer is the bridge's 403; a forged signature the server's
/// 4009: each its own error, nothing whispered.
pub fn refusals<R: Runtime>(env: &ChannelEnv) {
    // A bridge that signs with another secret.
    let forger = env.block_on(async {
        AuthBridge::builder(APP_KEY, "not-the-secret")
            .grant(&env.token, &env.channel)
            .start()
            .await
            .unwrap()
    });
    let client =
        R::client(env.setup_with_ports(Duration::from_secs(10), &[port_of(&forger.url())]));
    let wrong = format!("tok{}", random_hex(16));
    let a = client
        .attach(
            OWNER,
            env.invitation_with(&wrong, &env.bridge.url()),
            participant("agent-1"),
        )
        .unwrap();
    let err = client.tools(OWNER, a.id()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::AttachmentUnauthorized(Unauthorized::Bridge { status: 403 })
        ),
        "{err:?}"
    );
    assert!(!err.to_string().contains(&wrong));

    let b = client
        .attach(
            OWNER,
            env.invitation_with(&env.token, &forger.url()),
            participant("agent-1"),
        )
        .unwrap();
    let err = client.tools(OWNER, b.id()).unwrap_err();
    assert!(
        matches!(err, Error::AttachmentUnauthorized(Unauthorized::Channel)),
        "{err:?}"
    );
    assert!(env.page().calls().is_empty());
    assert!(
        !env.page()
            .notifications()
            .iter()
            .any(|n| n.method.starts_with("notifications/initialized")),
        "nothing was whispered"
    );
    client.shutdown();
}

/// A request over the channel's limit is refused here, naming it, at once.
pub fn request_over_the_limit<R: Runtime>(env: &ChannelEnv) {
    let client = R::client(env.setup(Duration::from_secs(10)));
    let a = client
        .attach_verified(OWNER, env.invitation(), participant("agent-1"))
        .unwrap()
        .attachment;
    let started = Instant::now();
    let big = "x".repeat(12_000);
    let err = client
        .call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "A1", "value": big}),
        )
        .unwrap_err();
    assert_eq!(err.code(), "channel_limit", "{err}");
    assert!(err.to_string().contains("limit of 10000 bytes"), "{err}");
    assert!(!err.outcome_unknown());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "said, not waited on"
    );
    assert!(env.page().writes().is_empty());
    client.shutdown();
}

/// A reply over the server's limit (a long listing) ends within the
/// timeout, in words that say what a channel cannot tell.
pub fn reply_over_the_limit<R: Runtime>(env: &ChannelEnv) {
    let client = R::client(env.setup(Duration::from_secs(3)));
    let a = client
        .attach(OWNER, env.invitation(), participant("agent-1"))
        .unwrap();
    let started = Instant::now();
    let err = client.tools(OWNER, a.id()).unwrap_err();
    assert_eq!(err.code(), "timeout", "{err}");
    assert!(
        err.to_string().contains("over the server's message limit"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    client.shutdown();
}

/// A page that left: on a private channel the call ends at its timeout in
/// words; on a presence channel at once.
pub fn page_left<R: Runtime>(env: &ChannelEnv, presence: bool) {
    let client = R::client(env.setup(Duration::from_secs(3)));
    let a = client
        .attach_verified(OWNER, env.invitation(), participant("agent-1"))
        .unwrap()
        .attachment;
    client.tools(OWNER, a.id()).unwrap();
    env.block_on(env.page().leave());
    if presence {
        // The agent's kept channel hears the page leave.
        std::thread::sleep(Duration::from_millis(200));
    }
    let started = Instant::now();
    let err = client
        .call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "A1", "value": "v"}),
        )
        .unwrap_err();
    if presence {
        assert_eq!(err.code(), "page_left", "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(
            !err.outcome_unknown(),
            "known to be gone before sending: {err}"
        );
    } else {
        assert_eq!(err.code(), "call_timeout", "{err}");
        assert!(err.to_string().contains("the page may have left"), "{err}");
        assert!(err.outcome_unknown());
    }
    client.shutdown();
}

/// Two agents on one channel: each sees every whisper, and takes only its
/// own replies.
pub fn two_agents<R: Runtime>(env: &ChannelEnv) {
    let one = R::client(env.setup(Duration::from_secs(10)));
    let two = R::client(env.setup(Duration::from_secs(10)));
    let a = one
        .attach_verified(OWNER, env.invitation(), participant("agent-1"))
        .unwrap()
        .attachment;
    let b = two
        .attach_verified(OWNER, env.invitation(), participant("agent-2"))
        .unwrap()
        .attachment;
    for i in 0..3 {
        let first = one
            .call(
                OWNER,
                a.id(),
                "sheet_get_range",
                json!({"start": "A1", "end": "B2"}),
            )
            .unwrap();
        let second = two
            .call(
                OWNER,
                b.id(),
                "sheet_get_range",
                json!({"start": "A1", "end": "B2"}),
            )
            .unwrap();
        assert!(first.text.contains("alpha"), "{i}: {}", first.text);
        assert!(second.text.contains("alpha"), "{i}: {}", second.text);
    }
    // Each call reached the page once.
    let reads = env
        .page()
        .calls()
        .iter()
        .filter(|c| c.tool == "sheet_get_range")
        .count();
    assert_eq!(reads, 6);
    one.shutdown();
    two.shutdown();
}

/// The careless agent: a write after the person's edit of A1 is refused
/// with what changed, and the same write repeated at once is refused too.
fn refused_then_held_back(client: &dyn Client, id: &str) {
    for attempt in ["write", "repeat"] {
        let err = client
            .call(
                OWNER,
                id,
                "sheet_set_cell",
                json!({"address": "A1", "value": "agent again"}),
            )
            .unwrap_err();
        assert_eq!(err.code(), "surface_changed_under_you", "{attempt}: {err}");
        if attempt == "write" {
            assert!(err.to_string().contains("A1"), "{attempt}: {err}");
        }
    }
}

fn wait_for(mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The agent against the page the issue names — laravel-echo and pusher-js
/// in Node, wired as seed 004's snippet — over sockudo: attach, tools, a
/// pinned write, the person's edit, the stale refusal with the feed, the
/// blind repeat held back, an announcement, detach. `false` when sockudo or
/// the page is not on this machine (skipped, said why).
pub fn echo_page_conversation<R: Runtime>() -> bool {
    use crate::echo_page::{EchoPage, EchoPageOptions, ToolNames};
    let Some(server) = crate::sockudo::Sockudo::builder()
        .key(APP_KEY)
        .secret(APP_SECRET)
        .start()
    else {
        return false;
    };
    let rt = runtime();
    let session = format!("echo_{}", random_hex(6));
    let token = format!("tok{}", random_hex(16));
    let page_token = format!("page{}", random_hex(16));
    let channel = format!("private-agent.session.{session}");
    let bridge = rt.block_on(async {
        AuthBridge::builder(APP_KEY, APP_SECRET)
            .grant(&token, &channel)
            .grant(&page_token, &channel)
            .start()
            .await
            .unwrap()
    });
    let mut options = EchoPageOptions::new(&server.ws_url(), &bridge.url(), &session, &page_token);
    options.tool_names = ToolNames::Sheet;
    let Some(page) = EchoPage::start(&options) else {
        return false;
    };
    let env = ChannelEnv {
        rt,
        server: Server::External(server.ws_url(), Box::new(server)),
        bridge,
        page: None,
        session,
        token,
        channel,
    };
    let client = R::client(env.setup(Duration::from_secs(10)));
    let a = client
        .attach_verified(OWNER, env.invitation(), participant("agent-1"))
        .unwrap()
        .attachment;
    assert!(
        a.revision().is_some(),
        "the attach learnt the page's revision"
    );
    let tools = client.tools(OWNER, a.id()).unwrap();
    assert!(
        tools.tools.iter().any(|t| t.name() == "sheet_set_cell"),
        "{:?}",
        tools.tools
    );
    client
        .call(
            OWNER,
            a.id(),
            "sheet_set_cell",
            json!({"address": "A1", "value": "agent"}),
        )
        .unwrap();
    let _ = page.wait_for("write", Duration::from_secs(5));
    let _ = page.person_edit("A1", "person");
    refused_then_held_back(client.as_ref(), a.id());
    let state = page.state();
    assert!(
        state.to_string().contains("person"),
        "the person's value stands: {state}"
    );
    let activity = human_plus_core::Activity::new("editing").target("A1");
    client.announce(OWNER, a.id(), &activity).unwrap();
    client.detach(OWNER, a.id()).unwrap();
    client.shutdown();
    page.leave();
    true
}
