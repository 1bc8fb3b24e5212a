//! sockudo, a third-party Pusher-protocol channel server (the server
//! laravel-echo and pusher-js speak to as they speak to Laravel Reverb), run
//! as a child process for the Reverb transport's tests.
//!
//! `.ci/sockudo` installs it (`cargo install sockudo`, no default features)
//! and prints `export HUMAN_PLUS_SOCKUDO=<binary>`. [`Sockudo::start`] runs
//! that binary from an empty temporary directory (sockudo reads
//! `config/config.toml` from its working directory; none is there, so it is
//! configured by its environment alone, which is cleared first) on a free
//! loopback port, with one app whose client events are on, metrics off and
//! Reverb's 10,000-byte WebSocket message cap, and waits until it answers a
//! WebSocket handshake. It is killed on drop.
//!
//! Without `HUMAN_PLUS_SOCKUDO` (or with it naming no file) the test is
//! skipped with a message, unless `HUMAN_PLUS_REQUIRE_SOCKUDO=1` or
//! `CI=true` (as in `.ci/run`), where that is a failure.
//!
//! The host app's auth bridge for it is [`human_plus_relay::AuthBridge`]
//! built with [`Sockudo::key`] and [`Sockudo::secret`].
//!
//! ```no_run
//! use human_plus_conformance::sockudo::Sockudo;
//!
//! let Some(server) = Sockudo::builder().max_event_payload_kb(10).start() else {
//!     return; // skipped, said why
//! };
//! let url = server.ws_url(); // ws://127.0.0.1:PORT/app/KEY
//! # let _ = url;
//! ```

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::random_hex;

/// The variable naming the binary.
pub const VARIABLE: &str = "HUMAN_PLUS_SOCKUDO";
/// How long sockudo may take to accept a WebSocket handshake.
const START_LIMIT: Duration = Duration::from_secs(30);
/// How many free ports are tried (another process may take the one picked
/// between its probe and sockudo's bind).
const PORT_TRIES: usize = 3;

fn required() -> bool {
    std::env::var("HUMAN_PLUS_REQUIRE_SOCKUDO").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The binary `HUMAN_PLUS_SOCKUDO` names, or `None` (skipped, said why).
#[must_use]
pub fn binary() -> Option<PathBuf> {
    let why = match std::env::var_os(VARIABLE) {
        Some(path) if Path::new(&path).is_file() => return Some(PathBuf::from(path)),
        Some(path) => format!(
            "{VARIABLE} names {}, which is not a file",
            Path::new(&path).display()
        ),
        None => format!("{VARIABLE} is not set (run .ci/sockudo and evaluate the line it prints)"),
    };
    assert!(
        !required(),
        "the sockudo tests are required here, but {why}"
    );
    // Written past the test harness's capture, so the skip is seen.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: this test needs sockudo, a Pusher-protocol server: {why}; set HUMAN_PLUS_REQUIRE_SOCKUDO=1 to make this a failure"
    );
    None
}

/// How a [`Sockudo`] is configured.
#[derive(Debug, Clone)]
pub struct SockudoBuilder {
    app_id: String,
    key: String,
    secret: String,
    max_message_size: usize,
    max_event_payload_kb: Option<u32>,
    client_events_per_second: Option<u32>,
    activity_timeout: Option<u64>,
    client_messages: bool,
}

impl SockudoBuilder {
    /// The app id (default `human-plus`).
    #[must_use]
    pub fn app_id(mut self, id: &str) -> Self {
        id.clone_into(&mut self.app_id);
        self
    }

    /// The app key (default: random, `hp-` and 16 hex digits).
    #[must_use]
    pub fn key(mut self, key: &str) -> Self {
        key.clone_into(&mut self.key);
        self
    }

    /// The app secret (default: random, 32 hex digits).
    #[must_use]
    pub fn secret(mut self, secret: &str) -> Self {
        secret.clone_into(&mut self.secret);
        self
    }

    /// The largest WebSocket message it takes (`WEBSOCKET_MAX_MESSAGE_SIZE`,
    /// default 10,000 bytes: Reverb's `max_message_size`). Over it sockudo
    /// drops the connection with no close frame.
    #[must_use]
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// The app's client-event payload cap in KiB
    /// (`SOCKUDO_DEFAULT_APP_MAX_EVENT_PAYLOAD_IN_KB`; sockudo's default is
    /// 100, Pusher Channels documents 10). Over it the sender gets
    /// `pusher:error` 4301 "Event payload size (N bytes) exceeds limit
    /// (10KB)" and nobody receives the event.
    #[must_use]
    pub fn max_event_payload_kb(mut self, kb: u32) -> Self {
        self.max_event_payload_kb = Some(kb);
        self
    }

    /// Client events allowed per socket per second
    /// (`SOCKUDO_DEFAULT_APP_MAX_CLIENT_EVENTS_PER_SECOND`, sockudo's default
    /// 100): beyond, 4301 "Client event rejected due to rate limit".
    #[must_use]
    pub fn client_events_per_second(mut self, n: u32) -> Self {
        self.client_events_per_second = Some(n);
        self
    }

    /// The `activity_timeout` it announces, in seconds (`ACTIVITY_TIMEOUT`,
    /// sockudo's default 120).
    #[must_use]
    pub fn activity_timeout(mut self, seconds: u64) -> Self {
        self.activity_timeout = Some(seconds);
        self
    }

    /// Whether the app takes client events (whispers; default on).
    #[must_use]
    pub fn client_messages(mut self, on: bool) -> Self {
        self.client_messages = on;
        self
    }

    /// Starts sockudo and waits until it answers a WebSocket handshake, or
    /// returns `None` (skipped, said why) when `HUMAN_PLUS_SOCKUDO` names
    /// no binary.
    ///
    /// # Panics
    /// When sockudo is required and missing, or present and does not start
    /// (its output is in the message).
    #[must_use]
    pub fn start(self) -> Option<Sockudo> {
        let binary = binary()?;
        let mut last = String::new();
        for _ in 0..PORT_TRIES {
            match self.try_start(&binary) {
                Ok(server) => return Some(server),
                Err(why) => last = why,
            }
        }
        panic!("sockudo ({}) did not start: {last}", binary.display());
    }

    fn try_start(&self, binary: &Path) -> Result<Sockudo, String> {
        let port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let dir = scratch_dir().map_err(|e| format!("no temporary directory: {e}"))?;
        let log = dir.join("sockudo.log");
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut command = Command::new(binary);
        command
            .current_dir(&dir)
            .env_clear()
            .env("HOST", "127.0.0.1")
            .env("PORT", port.to_string())
            .env("METRICS_ENABLED", "false")
            // Plain text in its log (shown when it does not start).
            .env("LOG_COLORS_ENABLED", "false")
            .env(
                "WEBSOCKET_MAX_MESSAGE_SIZE",
                self.max_message_size.to_string(),
            )
            .env("SOCKUDO_DEFAULT_APP_ID", &self.app_id)
            .env("SOCKUDO_DEFAULT_APP_KEY", &self.key)
            .env("SOCKUDO_DEFAULT_APP_SECRET", &self.secret)
            .env(
                "SOCKUDO_DEFAULT_APP_ENABLE_CLIENT_MESSAGES",
                self.client_messages.to_string(),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        if let Some(kb) = self.max_event_payload_kb {
            command.env(
                "SOCKUDO_DEFAULT_APP_MAX_EVENT_PAYLOAD_IN_KB",
                kb.to_string(),
            );
        }
        if let Some(n) = self.client_events_per_second {
            command.env(
                "SOCKUDO_DEFAULT_APP_MAX_CLIENT_EVENTS_PER_SECOND",
                n.to_string(),
            );
        }
        if let Some(s) = self.activity_timeout {
            command.env("ACTIVITY_TIMEOUT", s.to_string());
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
        let mut server = Sockudo {
            child,
            dir,
            log,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            app_id: self.app_id.clone(),
            key: self.key.clone(),
            secret: self.secret.clone(),
        };
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("it exited ({status}): {}", server.log()));
            }
            if handshake(server.addr, &server.key) {
                return Ok(server);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no WebSocket handshake within {START_LIMIT:?}: {}",
                    server.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A running sockudo, killed on drop.
#[derive(Debug)]
pub struct Sockudo {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
    addr: SocketAddr,
    app_id: String,
    key: String,
    secret: String,
}

impl Sockudo {
    /// The default configuration: app `human-plus` with a random key and
    /// secret, client events on, 10,000-byte messages, sockudo's own event
    /// payload cap (100 KiB) and rate (100 client events per second).
    #[must_use]
    pub fn builder() -> SockudoBuilder {
        SockudoBuilder {
            app_id: "human-plus".to_owned(),
            key: format!("hp-{}", random_hex(8)),
            secret: random_hex(16),
            max_message_size: 10_000,
            max_event_payload_kb: None,
            client_events_per_second: None,
            activity_timeout: None,
            client_messages: true,
        }
    }

    /// Starts sockudo with [`Sockudo::builder`]'s defaults (see
    /// [`SockudoBuilder::start`]).
    #[must_use]
    pub fn start() -> Option<Sockudo> {
        Self::builder().start()
    }

    /// `ws://127.0.0.1:PORT/app/KEY`.
    #[must_use]
    pub fn ws_url(&self) -> String {
        format!("ws://{}/app/{}", self.addr, self.key)
    }

    /// The address it listens on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The app id.
    #[must_use]
    pub fn app_id(&self) -> &str {
        &self.app_id
    }

    /// The app key.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The app secret (what the auth bridge signs with).
    #[must_use]
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// What sockudo printed so far (its last 4,000 bytes).
    #[must_use]
    pub fn log(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        let tail = &text[text.len().saturating_sub(4_000)..];
        String::from_utf8_lossy(tail).into_owned()
    }
}

impl Drop for Sockudo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether a WebSocket handshake on `/app/KEY` is answered 101.
fn handshake(addr: SocketAddr, key: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!(
        "GET /app/{key}?protocol=7&client=human-plus-tests&version=0 HTTP/1.1\r\n\
         Host: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = Vec::new();
    let mut byte = [0_u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4_096 {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return false,
        }
    }
    head.starts_with(b"HTTP/1.1 101")
}

fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

fn scratch_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "human-plus-sockudo-{}-{}",
        std::process::id(),
        random_hex(6)
    ));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}
