//! # The `human-plus` command
//!
//! The library behind the `human-plus` binary, so its logic is testable:
//! a demo on an embedded relay and demo sheet, a local relay and page for
//! dogfooding, offline digests, the relay-facing commands (`tools`,
//! `call`, `changes`, `announce`), a probe that reports what a surface
//! really does, and a stdio MCP bridge that puts Human+'s trust policy,
//! pins, revisions and framing between an MCP client and a live surface.
//!
//! Every protocol rule lives in `human_plus_core`; the commands drive one of
//! the three runtime crates through [`agent::Agent`], a synchronous view of
//! their identical `HumanPlus` API.
//!
//! ```
//! use clap::Parser;
//! use human_plus_cli::args::{Cli, Command};
//!
//! let cli = Cli::parse_from(["human-plus", "digest", "--json", "tools.json"]);
//! assert!(matches!(cli.command, Command::Digest(ref d) if d.json));
//! ```

pub mod agent;
pub mod args;
pub mod commands;
pub mod connect;
pub mod demo;
pub mod digest;
pub mod exit;
pub mod mcp;
pub mod probe;
pub mod serve;
pub mod style;
pub mod web;
pub mod web_demo;

use std::io::Write as _;

use args::{Cli, Command};
use exit::Failure;

/// Runs a parsed command line; returns the process exit code.
#[must_use]
pub fn run(cli: Cli) -> u8 {
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
        Command::Mcp(a) => mcp_main(&a).map(|()| None),
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
    let connection = connect::connect_with(&args.connect, None, !args.no_warm)?;
    eprintln!(
        "human-plus mcp: attached to surface {} ({} runtime, {} transport); serving MCP on stdio",
        exit::printable(connection.attachment.invitation().surface_id()),
        args.connect.runtime.as_str(),
        args.connect.transport.as_str()
    );
    let mut bridge = mcp::Bridge::new(connection);
    if !args.no_warm {
        drop(bridge.prefetch());
    }
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    mcp::serve(&mut bridge, stdin.lock(), stdout.lock())
        .map_err(|e| Failure::internal(format!("stdio failed: {e}")))
}
