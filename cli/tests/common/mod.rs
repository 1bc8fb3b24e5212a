//! A relay and a demo surface on a background tokio runtime, and a way to
//! run the built `human-plus` binary against them.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use human_plus_relay::{DemoSurface, DemoSurfaceBuilder, RelayHandle, RelayServer};

/// The built binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_human-plus");

/// A generous bound for one command on a loaded machine.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

/// A fresh random hex string.
pub fn random_hex(bytes: usize) -> String {
    human_plus_cli::demo::random_hex(bytes)
}

/// A relay and a demo surface.
pub struct Env {
    pub rt: tokio::runtime::Runtime,
    relay: Option<RelayHandle>,
    surface: Option<DemoSurface>,
    pub base: String,
    pub port: u16,
    pub session: String,
    pub token: String,
}

impl Env {
    /// Starts a relay and a surface configured by `configure`.
    pub fn start(configure: impl FnOnce(DemoSurfaceBuilder) -> DemoSurfaceBuilder) -> Env {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let session = format!("cli_{}", random_hex(6));
        let token = format!("tok{}", random_hex(16));
        let relay = rt.block_on(RelayServer::builder().start()).unwrap();
        let base = relay.base_url().to_owned();
        let port = relay.addr().port();
        let surface = rt
            .block_on(configure(DemoSurface::builder(&base, &session, &token)).start())
            .unwrap();
        Env {
            rt,
            relay: Some(relay),
            surface: Some(surface),
            base,
            port,
            session,
            token,
        }
    }

    /// Starts a relay and a default surface.
    pub fn default_surface() -> Env {
        Env::start(|b| b)
    }

    pub fn surface(&self) -> &DemoSurface {
        self.surface.as_ref().unwrap()
    }

    pub fn relay(&self) -> &RelayHandle {
        self.relay.as_ref().unwrap()
    }

    /// Stops the surface as its builder says (by default without
    /// `unregister`: a closed tab, whose session lingers on the relay).
    pub fn stop_surface(&mut self) {
        if let Some(s) = self.surface.take() {
            self.rt.block_on(s.shutdown());
        }
    }

    /// Stops the relay (and the surface first).
    pub fn stop_relay(&mut self) {
        self.stop_surface();
        if let Some(r) = self.relay.take() {
            self.rt.block_on(r.shutdown());
        }
    }

    /// The connection options for this relay in loopback development mode
    /// (trust not included).
    pub fn connect_args(&self) -> Vec<String> {
        [
            "--relay",
            &self.base,
            "--session",
            &self.session,
            "--surface",
            "sheet:one",
            "--allow-host",
            "127.0.0.1",
            "--allow-port",
            &self.port.to_string(),
            "--allow-unverified-egress",
            "--allow-insecure-loopback",
            "--timeout",
            "60",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }

    /// Runs the binary with `args` and this environment's token in
    /// HUMAN_PLUS_TOKEN.
    pub fn run(&self, args: &[&str]) -> Run {
        run(args, Some(&self.token))
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let surface = self.surface.take();
        let relay = self.relay.take();
        self.rt.block_on(async {
            if let Some(s) = surface {
                s.shutdown().await;
            }
            if let Some(r) = relay {
                r.shutdown().await;
            }
        });
    }
}

/// A finished command.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Panics unless neither stream contains `secret`.
    pub fn assert_no_secret(&self, secret: &str) {
        assert!(
            !self.stdout.contains(secret) && !self.stderr.contains(secret),
            "the token leaked:\n{self:?}"
        );
    }
}

/// Runs the binary with `args`, with HUMAN_PLUS_TOKEN set to `token` (or
/// removed), stdin closed, bounded by [`COMMAND_TIMEOUT`].
pub fn run(args: &[&str], token: Option<&str>) -> Run {
    run_with_env(args, token, &[])
}

/// [`run`], with these environment variables set as well.
pub fn run_with_env(args: &[&str], token: Option<&str>, env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("HUMAN_PLUS_TOKEN")
        .env_remove("HUMAN_PLUS_PROXY_AUTH")
        .env_remove("NO_COLOR");
    if let Some(token) = token {
        cmd.env("HUMAN_PLUS_TOKEN", token);
    }
    cmd.envs(env.iter().copied());
    run_command(cmd, None)
}

/// Runs `cmd` (its arguments and environment set) with `stdin` on its
/// standard input (closed at once when `None`), reading standard output and
/// error on threads of their own (so neither pipe can fill and stall it),
/// for at most [`COMMAND_TIMEOUT`].
pub fn run_command(mut cmd: Command, stdin: Option<&str>) -> Run {
    use std::io::Write as _;
    let what = format!("{:?}", cmd.get_args().collect::<Vec<_>>());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        // A command that refuses early may close its stdin first.
        let _ = pipe.write_all(input.as_bytes());
    }
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("human-plus {what} did not finish in {COMMAND_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code().unwrap_or(-1),
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

/// `args` followed by `extra`, as `&str`s.
pub fn with<'a>(args: &'a [String], extra: &[&'a str]) -> Vec<&'a str> {
    extra
        .iter()
        .copied()
        .chain(args.iter().map(String::as_str))
        .collect()
}

/// Everything in a tool result a model may read: every text block, joined
/// as a client joins them.
pub fn text(r: &rmcp::model::CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Calls `tool` with `arguments` (a JSON object) through an MCP client,
/// bounded by `step`.
pub async fn call_tool<S: rmcp::ClientHandler>(
    client: &rmcp::service::RunningService<rmcp::service::RoleClient, S>,
    tool: &str,
    arguments: serde_json::Value,
    step: Duration,
) -> rmcp::model::CallToolResult {
    let serde_json::Value::Object(arguments) = arguments else {
        panic!("tool arguments must be an object")
    };
    tokio::time::timeout(
        step,
        client.call_tool(
            rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments),
        ),
    )
    .await
    .expect("the bridge answered in time")
    .expect("a CallToolResult")
}

/// The channel server's app key and secret in the tests over a channel.
pub const APP_KEY: &str = "cli-key";
/// The secret the channel server and the auth bridge share.
pub const APP_SECRET: &str = "cli-secret";

/// A Pusher-protocol channel server of the project's own, the host app's
/// auth bridge and the demo sheet on a private (or presence) channel, on
/// loopback: what a Reverb link names.
pub struct ChannelEnv {
    pub rt: tokio::runtime::Runtime,
    server: Option<human_plus_relay::PusherHandle>,
    bridge: Option<human_plus_relay::AuthBridgeHandle>,
    page: Option<DemoSurface>,
    pub ws_url: String,
    pub auth_url: String,
    pub ws_port: u16,
    pub auth_port: u16,
    pub session: String,
    /// The agents' token (the page has its own).
    pub token: String,
    pub channel: String,
}

impl ChannelEnv {
    /// Starts the server, the bridge and the page (`configure`d) on a
    /// private channel, or a presence one when `presence`.
    pub fn start(
        presence: bool,
        configure: impl FnOnce(DemoSurfaceBuilder) -> DemoSurfaceBuilder,
    ) -> ChannelEnv {
        use human_plus_relay::{AuthBridge, PusherServer};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let session = format!("ch_{}", random_hex(6));
        let token = format!("tok{}", random_hex(16));
        let page_token = format!("page{}", random_hex(16));
        let kind = if presence { "presence" } else { "private" };
        let channel = format!("{kind}-agent.session.{session}");
        let server = rt
            .block_on(PusherServer::builder(APP_KEY, APP_SECRET).start())
            .unwrap();
        let bridge = rt
            .block_on(
                AuthBridge::builder(APP_KEY, APP_SECRET)
                    .grant_as(&token, &channel, "agent-1")
                    .grant_as(&page_token, &channel, "page")
                    .start(),
            )
            .unwrap();
        let ws_url = server.ws_url();
        let auth_url = bridge.url();
        let page = rt
            .block_on(
                configure(
                    DemoSurface::channel_builder(&ws_url, &auth_url, &session, &page_token)
                        .channel_name(&channel),
                )
                .start(),
            )
            .unwrap();
        ChannelEnv {
            ws_port: port_of(&ws_url),
            auth_port: port_of(&auth_url),
            rt,
            server: Some(server),
            bridge: Some(bridge),
            page: Some(page),
            ws_url,
            auth_url,
            session,
            token,
            channel,
        }
    }

    /// A private channel and the default page.
    pub fn private() -> ChannelEnv {
        ChannelEnv::start(false, |b| b)
    }

    pub fn page(&self) -> &DemoSurface {
        self.page.as_ref().unwrap()
    }

    pub fn server(&self) -> &human_plus_relay::PusherHandle {
        self.server.as_ref().unwrap()
    }

    pub fn bridge(&self) -> &human_plus_relay::AuthBridgeHandle {
        self.bridge.as_ref().unwrap()
    }

    /// The page leaves the channel (a closed tab).
    pub fn leave(&self) {
        self.rt.block_on(self.page().leave());
    }

    /// The page's link in the Reverb form, with `token`: the page's own
    /// origin (never contacted), then `session`, `token`, `reverb`, `auth`
    /// and `channel` in the fragment.
    pub fn link_with(&self, token: &str) -> String {
        reverb_link(
            "https://app.example/board",
            &self.session,
            token,
            &self.ws_url,
            &self.auth_url,
            Some(&self.channel),
        )
    }

    /// [`ChannelEnv::link_with`] the agents' token.
    pub fn link(&self) -> String {
        self.link_with(&self.token)
    }

    /// The loopback egress for both hosts: the channel server's port and
    /// the auth bridge's, plain on loopback (development mode).
    pub fn egress_args(&self) -> Vec<String> {
        [
            "--allow-host",
            "127.0.0.1",
            "--allow-port",
            &self.ws_port.to_string(),
            "--allow-port",
            &self.auth_port.to_string(),
            "--allow-unverified-egress",
            "--allow-insecure-loopback",
            "--timeout",
            "60",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }

    /// Runs the binary with `args` and this environment's link in
    /// HUMAN_PLUS_INVITATION (no HUMAN_PLUS_TOKEN).
    pub fn run(&self, args: &[&str]) -> Run {
        run_with_env(args, None, &[("HUMAN_PLUS_INVITATION", &self.link())])
    }
}

impl Drop for ChannelEnv {
    fn drop(&mut self) {
        let page = self.page.take();
        let server = self.server.take();
        let bridge = self.bridge.take();
        self.rt.block_on(async {
            if let Some(p) = page {
                p.shutdown().await;
            }
            if let Some(s) = server {
                s.shutdown().await;
            }
            if let Some(b) = bridge {
                b.shutdown().await;
            }
        });
    }
}

/// A page link naming a Reverb channel: `page#session=…&token=…&reverb=…&auth=…[&channel=…]`,
/// each value form-encoded.
pub fn reverb_link(
    page: &str,
    session: &str,
    token: &str,
    ws_url: &str,
    auth_url: &str,
    channel: Option<&str>,
) -> String {
    let mut link = format!(
        "{page}#session={}&token={}&reverb={}&auth={}",
        encode(session),
        encode(token),
        encode(ws_url),
        encode(auth_url)
    );
    if let Some(channel) = channel {
        link.push_str("&channel=");
        link.push_str(&encode(channel));
    }
    link
}

/// `value` form-encoded (letters, digits and `*-._` as they are).
pub fn encode(value: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'*' | b'-' | b'.' | b'_') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The port of a loopback URL (`scheme://127.0.0.1:PORT/…`).
pub fn port_of(url: &str) -> u16 {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap()
}
