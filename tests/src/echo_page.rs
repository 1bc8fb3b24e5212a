//! Seed 004's page, built on `laravel-echo` 2.5.0 + `pusher-js` 8.6.0 from
//! npm (`tests/echo-page/page.mjs`), run with Node as a child process: it
//! joins the session's private channel through the host app's auth bridge
//! and answers MCP over whispers as a small Human+ surface (tools
//! `read_cell`, `set_cell`, `changes_since`; revisions `r1`, `r2`, … on
//! every result; a stale pin refused with a JSON-RPC 409
//! `revision_mismatch` naming `current`; an attributed change feed).
//!
//! `.ci/echo-page` runs `npm ci` in `tests/echo-page` and prints
//! `export HUMAN_PLUS_ECHO_PAGE=<that directory>`. Without the variable,
//! or without the page's node modules there, or without `node` (or
//! `HUMAN_PLUS_NODE`), the test is skipped with a message, unless
//! `HUMAN_PLUS_REQUIRE_ECHO_PAGE=1` or `CI=true` (as in `.ci/run`), where
//! that is a failure.
//!
//! The page prints one JSON line per event (`ready`, `request`, `write`,
//! `refused`, `reply`, `notification`, `person_edit`, `server_error`,
//! `subscription_error`, `left`, …); [`EchoPage::wait_for`] follows them.
//! It reads commands on its stdin ([`EchoPage::person_edit`],
//! [`EchoPage::leave`], [`EchoPage::command`]). The token reaches it
//! through its environment, never its arguments.
//!
//! ```no_run
//! use human_plus_conformance::echo_page::{EchoPage, EchoPageOptions};
//! use std::time::Duration;
//!
//! let options = EchoPageOptions::new(
//!     "ws://127.0.0.1:6001/app/KEY",
//!     "http://127.0.0.1:8000/broadcasting/auth",
//!     "s-1",
//!     "the-token",
//! );
//! let Some(page) = EchoPage::start(&options) else {
//!     return; // skipped, said why
//! };
//! // … an agent calls tools over the channel …
//! let write = page.wait_for("write", Duration::from_secs(5));
//! let revision = page.person_edit("B4", "12"); // "r3"
//! page.leave();
//! # let _ = (write, revision);
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The variable naming the page's directory (with its node modules).
pub const VARIABLE: &str = "HUMAN_PLUS_ECHO_PAGE";
/// How long the page may take to join its channel.
pub const READY_LIMIT: Duration = Duration::from_secs(30);

fn required() -> bool {
    std::env::var("HUMAN_PLUS_REQUIRE_ECHO_PAGE").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Where the page and Node are.
#[derive(Debug, Clone)]
pub struct Install {
    /// The directory holding `page.mjs` and its `node_modules`.
    pub dir: PathBuf,
    /// The Node program.
    pub node: PathBuf,
}

/// The page's directory and Node, or `None` (skipped, said why).
///
/// # Panics
/// When the page is required and not there.
#[must_use]
pub fn install() -> Option<Install> {
    let why = match find() {
        Ok(install) => return Some(install),
        Err(why) => why,
    };
    assert!(
        !required(),
        "the Echo page tests are required here, but {why}"
    );
    // Written past the test harness's capture, so the skip is seen.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: this test needs the laravel-echo page: {why}; set HUMAN_PLUS_REQUIRE_ECHO_PAGE=1 to make this a failure"
    );
    None
}

fn find() -> Result<Install, String> {
    let Some(dir) = std::env::var_os(VARIABLE).map(PathBuf::from) else {
        return Err(format!(
            "{VARIABLE} is not set (run .ci/echo-page and evaluate the line it prints)"
        ));
    };
    for needed in [
        "page.mjs",
        "node_modules/laravel-echo/package.json",
        "node_modules/pusher-js/package.json",
    ] {
        if !dir.join(needed).is_file() {
            return Err(format!(
                "{} has no {needed} (run .ci/echo-page)",
                dir.display()
            ));
        }
    }
    let node = match std::env::var_os("HUMAN_PLUS_NODE") {
        Some(node) => Some(PathBuf::from(node)).filter(|p| p.is_file()),
        None => std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("node"))
                .find(|p| p.is_file())
        }),
    };
    let Some(node) = node else {
        return Err("no node program (install Node 20, or set HUMAN_PLUS_NODE)".to_owned());
    };
    Ok(Install { dir, node })
}

/// Echo's broadcaster option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Broadcaster {
    /// `broadcaster: 'reverb'` (default).
    #[default]
    Reverb,
    /// `broadcaster: 'pusher'` with `wsHost` and `wsPort`.
    Pusher,
}

/// How the page asks the auth bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// `authEndpoint` with `auth.headers` (`Authorization: Bearer …`):
    /// pusher-js POSTs the form itself (default).
    #[default]
    Endpoint,
    /// A custom `authorizer` POSTing JSON with the same header.
    Authorizer,
}

/// Which names the page's tools have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolNames {
    /// `read_cell`, `set_cell`, `changes_since` (default).
    #[default]
    Short,
    /// The Rust demo surface's: `sheet_get_cell`, `sheet_set_cell`,
    /// `changes_since` (so scenarios written for it run unchanged).
    Sheet,
}

/// What the page joins and how.
#[derive(Debug, Clone)]
pub struct EchoPageOptions {
    /// `ws(s)://host:port[/prefix]/app/APP_KEY`.
    pub ws_url: String,
    /// The auth bridge's URL.
    pub auth_url: String,
    /// The session id (the channel is `private-agent.session.<ID>`).
    pub session: String,
    /// The bearer token, sent only to the auth bridge.
    pub token: String,
    /// A channel other than `private-agent.session.<ID>` (a `presence-…`
    /// channel is joined as one).
    pub channel: Option<String>,
    /// Echo's broadcaster.
    pub broadcaster: Broadcaster,
    /// How the bridge is asked.
    pub auth_mode: AuthMode,
    /// The tools' names.
    pub tool_names: ToolNames,
}

impl EchoPageOptions {
    /// The default page: broadcaster `reverb`, `authEndpoint`, the channel
    /// `private-agent.session.<session>`, the short tool names.
    #[must_use]
    pub fn new(ws_url: &str, auth_url: &str, session: &str, token: &str) -> EchoPageOptions {
        EchoPageOptions {
            ws_url: ws_url.to_owned(),
            auth_url: auth_url.to_owned(),
            session: session.to_owned(),
            token: token.to_owned(),
            channel: None,
            broadcaster: Broadcaster::default(),
            auth_mode: AuthMode::default(),
            tool_names: ToolNames::default(),
        }
    }

    /// The channel `private-agent.session.<session>` (or the one set).
    #[must_use]
    pub fn channel_name(&self) -> String {
        self.channel
            .clone()
            .unwrap_or_else(|| format!("private-agent.session.{}", self.session))
    }
}

/// A running page, killed on drop.
pub struct EchoPage {
    child: Child,
    stdin: Mutex<Option<ChildStdin>>,
    events: Mutex<Receiver<Value>>,
    seen: Arc<Mutex<Vec<Value>>>,
    stderr: Arc<Mutex<String>>,
    ready: Value,
}

impl std::fmt::Debug for EchoPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EchoPage")
            .field("pid", &self.child.id())
            .field("ready", &self.ready)
            .finish_non_exhaustive()
    }
}

impl EchoPage {
    /// Starts the page and waits (at most [`READY_LIMIT`]) for its `ready`
    /// line (subscribed to its channel); `None` when the page is not
    /// installed (skipped, said why).
    ///
    /// # Panics
    /// When it is required and missing, or does not become ready (its
    /// events and stderr in the message).
    #[must_use]
    pub fn start(options: &EchoPageOptions) -> Option<EchoPage> {
        let mut page = Self::spawn(options)?;
        page.ready = page.wait_for("ready", READY_LIMIT);
        Some(page)
    }

    /// Starts the page without waiting for it to join (to watch a refusal:
    /// `wait_for("subscription_error", …)`); `None` when not installed.
    ///
    /// # Panics
    /// When it is required and missing, or Node cannot be run.
    #[must_use]
    pub fn spawn(options: &EchoPageOptions) -> Option<EchoPage> {
        let install = install()?;
        Some(Self::spawn_with(&install, options))
    }

    fn spawn_with(install: &Install, options: &EchoPageOptions) -> EchoPage {
        let mut command = Command::new(&install.node);
        command
            .current_dir(&install.dir)
            .arg(install.dir.join("page.mjs"))
            .args(["--ws", &options.ws_url])
            .args(["--auth", &options.auth_url])
            .args(["--session", &options.session])
            .args([
                "--broadcaster",
                match options.broadcaster {
                    Broadcaster::Reverb => "reverb",
                    Broadcaster::Pusher => "pusher",
                },
            ])
            .args([
                "--auth-mode",
                match options.auth_mode {
                    AuthMode::Endpoint => "endpoint",
                    AuthMode::Authorizer => "authorizer",
                },
            ])
            .args([
                "--tool-names",
                match options.tool_names {
                    ToolNames::Short => "short",
                    ToolNames::Sheet => "sheet",
                },
            ])
            .env("HUMAN_PLUS_TOKEN", &options.token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(channel) = &options.channel {
            command.args(["--channel", channel]);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", install.node.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");
        let (tx, rx) = channel();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let event = serde_json::from_str::<Value>(&line)
                    .unwrap_or_else(|_| json!({"event": "unparsed", "line": line}));
                lock(&log).push(event.clone());
                if tx.send(event).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let text = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0_u8; 4_096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                lock(&text).push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        EchoPage {
            child,
            stdin: Mutex::new(stdin),
            events: Mutex::new(rx),
            seen,
            stderr,
            ready: Value::Null,
        }
    }

    /// The `ready` line: `{"event":"ready","channel":…,"socket_id":…,
    /// "revision":"r1","tools":[…]}` (`null` before it, after
    /// [`EchoPage::spawn`]).
    #[must_use]
    pub fn ready(&self) -> &Value {
        &self.ready
    }

    /// The next event not yet taken, within `timeout`.
    #[must_use]
    pub fn next_event(&self, timeout: Duration) -> Option<Value> {
        lock(&self.events).recv_timeout(timeout).ok()
    }

    /// The next event named `event` (earlier ones of other names are
    /// passed over; [`EchoPage::seen`] keeps them all).
    ///
    /// # Panics
    /// When none comes within `timeout` (every event seen and the page's
    /// stderr in the message).
    #[must_use]
    pub fn wait_for(&self, event: &str, timeout: Duration) -> Value {
        self.try_wait_for(event, timeout).unwrap_or_else(|| {
            panic!(
                "the Echo page printed no {event:?} within {timeout:?}; its events: {}; its stderr: {}",
                Value::Array(self.seen()),
                self.stderr()
            )
        })
    }

    /// [`EchoPage::wait_for`] without the panic.
    #[must_use]
    pub fn try_wait_for(&self, event: &str, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = self.next_event(left)?;
            if next["event"] == event {
                return Some(next);
            }
        }
    }

    /// Every event the page printed so far, in order.
    #[must_use]
    pub fn seen(&self) -> Vec<Value> {
        lock(&self.seen).clone()
    }

    /// What the page wrote on stderr so far.
    #[must_use]
    pub fn stderr(&self) -> String {
        lock(&self.stderr).clone()
    }

    /// Sends one command line (see `page.mjs`).
    ///
    /// # Panics
    /// When the page's stdin is closed.
    pub fn command(&self, command: &Value) {
        let mut stdin = lock(&self.stdin);
        let pipe = stdin.as_mut().expect("the page's stdin is open");
        writeln!(pipe, "{command}")
            .and_then(|()| pipe.flush())
            .expect("the page takes commands");
    }

    /// The person edits `cell`: the revision moves, the change is the
    /// person's in the feed, and the page whispers
    /// `notifications/agent_activity` with `source: "user"`. Returns the
    /// new revision.
    ///
    /// # Panics
    /// When the page does not confirm the edit within 5 s.
    #[must_use]
    pub fn person_edit(&self, cell: &str, value: &str) -> String {
        self.command(&json!({"person_edit": {"cell": cell, "value": value}}));
        let edit = self.wait_for("person_edit", Duration::from_secs(5));
        edit["revision"].as_str().unwrap_or_default().to_owned()
    }

    /// The cells and revision, as the page holds them:
    /// `{"revision":"rN","cells":{"A1":"Item",…}}`.
    #[must_use]
    pub fn state(&self) -> Value {
        self.command(&json!({"state": true}));
        self.wait_for("state", Duration::from_secs(5))
    }

    /// The page leaves its channel, disconnects and exits (killed if it
    /// has not within 5 s).
    pub fn leave(mut self) {
        self.command(&json!({"leave": true}));
        let _ = self.try_wait_for("left", Duration::from_secs(5));
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }

    /// Kills the page at once (a tab closed with no goodbye).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The page's process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for EchoPage {
    fn drop(&mut self) {
        lock(&self.stdin).take();
        self.kill();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
