//! The bridge, `human-plus mcp`: a stdio MCP server in front of one
//! surface attachment (`mcp.rs`), and what it follows while it lives as
//! long as its MCP client: its profile, re-read when the attachment can no
//! longer go on or the profile's files change, or the one invitation it was
//! given (`follow.rs`).
//!
//! May use: `connecting/`, `profiles/`, `output/` and the command line
//! (`args.rs`).

pub mod follow;
pub mod mcp;
