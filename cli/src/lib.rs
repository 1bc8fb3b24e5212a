//! # The `human-plus` command
//!
//! The library behind the `human-plus` binary, so its logic is testable:
//! a demo on an embedded relay and demo sheet, a local relay and page for
//! dogfooding, offline digests, the relay-facing commands (`tools`,
//! `call`, `changes`, `announce`), a probe that reports what a surface
//! really does, `status` (each profile, and whether one's relay and page
//! answer), and a stdio MCP bridge that puts Human+'s trust policy,
//! pins, revisions and framing between an MCP client and a live surface.
//!
//! Every protocol rule lives in `human_plus_core`; the commands drive one of
//! the three runtime crates through [`agent::Agent`], a synchronous view of
//! their identical `HumanPlus` API.
//!
//! ## The map
//!
//! The modules are public under the paths they have always had
//! (`human_plus_cli::connect`, `human_plus_cli::mcp`, ...); in `src/` they
//! are grouped in folders by concern, as floors (checked in CI by
//! `.ci/arrows`): a folder imports only the floors below it.
//!
//! ```text
//! 6  lib.rs                              runs a parsed command line
//! 5  demos/                              demo, web_demo: the demo's story, in a terminal and on the page
//! 4  subcommands/  bridge/  page/        tools, call, changes, announce, digest, probe, join, status, review;
//!                                        mcp, follow: the bridge; serve, web: the relay and the page server
//! 3  connecting/                         connect, agent: from options to an attached manager
//! 2  profiles/                           profile: saved profiles, pins and the token
//! 1  args.rs                             the command line
//! 0  output/                             exit, logs, style: exit codes, redacted logs, terminal text
//! ```
//!
//! ```
//! use clap::Parser;
//! use human_plus_cli::args::{Cli, Command};
//!
//! let cli = Cli::parse_from(["human-plus", "digest", "--json", "tools.json"]);
//! assert!(matches!(cli.command, Command::Digest(ref d) if d.json));
//! ```

pub mod args;
mod bridge;
mod connecting;
mod demos;
mod output;
mod page;
mod profiles;
mod subcommands;

// The public modules keep the paths they have always had.
pub use bridge::{follow, mcp};
pub use connecting::{agent, connect};
pub use demos::{demo, web_demo};
pub use output::{exit, logs, style};
pub use page::{serve, web};
pub use profiles::profile;
pub use subcommands::{commands, digest, join, launcher, probe, prompt, review, status};

use std::io::Write as _;

use args::{Cli, Command};
use exit::Failure;

/// Runs a parsed command line; returns the process exit code.
#[must_use]
pub fn run(cli: Cli) -> u8 {
    if cli.command.logs() {
        init_logging();
    }
    let outcome: Result<Option<String>, Failure> = match cli.command {
        Command::Demo(a) => demo::run(&a).map(|()| None),
        Command::Relay(a) => serve::relay(&a).map(|()| None),
        Command::Surface(a) => serve::surface(&a).map(|()| None),
        Command::Digest(a) => digest::run(a.input.as_deref(), a.json).map(Some),
        Command::Tools(a) => commands::tools(&a).map(Some),
        Command::Call(a) => commands::call(&a).map(Some),
        Command::Changes(a) => commands::changes(&a).map(Some),
        Command::Announce(a) => commands::announce(&a).map(Some),
        Command::Probe(a) => probe::run(&a).map(Some),
        Command::Join(a) => join::run(&a).map(|()| None),
        Command::Mcp(a) => mcp_main(&a).map(|()| None),
        Command::Status(a) => status::run(&a).map(Some),
        Command::Review(a) => review::run(&a).map(Some),
    };
    match outcome {
        Ok(text) => {
            if let Some(text) = text {
                let mut out = std::io::stdout().lock();
                if out
                    .write_all(text.as_bytes())
                    .and_then(|()| out.flush())
                    .is_err()
                {
                    return exit::INTERNAL;
                }
            }
            exit::OK
        }
        Err(f) => {
            f.print();
            f.exit
        }
    }
}

fn mcp_main(args: &args::McpArgs) -> Result<(), Failure> {
    let follow = follow::Follow::new(&args.connect, !args.no_warm)?;
    let connection = follow.connect()?;
    eprintln!(
        "human-plus mcp: attached to surface {} ({} runtime, {} transport); serving MCP on stdio{}",
        exit::printable(human_plus_core::surface_label(
            connection.attachment.invitation().surface_id()
        )),
        args.connect.transport.runtime.as_str(),
        if connection
            .attachment
            .invitation()
            .transport()
            .is_http_relay()
        {
            args.connect.transport.transport.as_str()
        } else {
            "reverb"
        },
        follow
            .profile_name()
            .map(|name| format!(", following profile {name}"))
            .unwrap_or_default()
    );
    let bridge = mcp::Bridge::following(connection, follow);
    // Kept here, so the manager serving at the end (and the runtime it may
    // own) is dropped on this thread, after the bridge's runtime stopped.
    let keeper = bridge.keeper();
    if !args.no_warm {
        drop(bridge.prefetch());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::internal(format!("cannot start the bridge's runtime: {e}")))?;
    let served = runtime.block_on(bridge.serve_io(tokio::io::stdin(), tokio::io::stdout()));
    // The standard input's reader thread may be blocked in a read: do not
    // wait for it.
    runtime.shutdown_background();
    let last = keeper
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    drop(last);
    served.map_err(|e| Failure::internal(format!("stdio failed: {e}")))
}

/// Logs every tracing event at `HUMAN_PLUS_LOG`'s level (`error`, `warn`,
/// `info`, `debug` or `trace`) or above to stderr, the `log` records of the
/// libraries below too; nothing when it is unset. The relay token and the
/// egress proxy's credentials are in no event at any level: the runtimes
/// never hand the token to a library that logs, and every line is redacted
/// of the secrets the command holds by exact value on its way out
/// ([`logs::Stderr`]). Installed once, by [`run`], for every relay-facing
/// command and `join`.
pub fn init_logging() {
    let Ok(level) = std::env::var(LOG_ENV) else {
        return;
    };
    let level = match level.trim().to_ascii_lowercase().as_str() {
        "error" => tracing::Level::ERROR,
        "warn" => tracing::Level::WARN,
        "info" => tracing::Level::INFO,
        "debug" => tracing::Level::DEBUG,
        "trace" => tracing::Level::TRACE,
        _ => return,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(logs::Stderr)
        .with_ansi(false)
        .try_init();
}

/// The environment variable naming the log level of the relay-facing
/// commands and `join`.
pub const LOG_ENV: &str = "HUMAN_PLUS_LOG";
