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
