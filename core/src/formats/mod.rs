//! The wire formats, parsed purely and within budgets: the relay's
//! Server-Sent Events (`sse.rs`), long-poll bodies in both dialects
//! (`poll.rs`), and JSON-RPC 2.0 frames, their ids and their correlation
//! (`jsonrpc.rs`).
//!
//! May use: `error.rs` and `values/`. Nothing here knows where a request
//! goes (`egress/`) or what a tool is (`tools/`).

pub(crate) mod jsonrpc;
pub(crate) mod poll;
pub(crate) mod sse;
