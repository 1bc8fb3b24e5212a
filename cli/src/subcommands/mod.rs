//! The subcommands a person or a script runs against a relay or a profile:
//! `tools`, `call`, `changes` and `announce` (`commands.rs`), `digest`,
//! `probe`, `join` with the line an MCP client starts the bridge with
//! (`launcher.rs`) and the link read without echo (`prompt.rs`), `status`
//! and `review`.
//!
//! May use: `connecting/`, `profiles/`, `output/` and the command line
//! (`args.rs`). The bridge, the page server and the demo are apart.

pub mod commands;
pub mod digest;
pub mod join;
pub mod launcher;
pub mod probe;
pub mod prompt;
pub mod review;
pub mod status;
