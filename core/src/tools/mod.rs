//! A tool as the surface defines it: its definition and claims, and the
//! digest a pin compares (`tool.rs`), over canonical JSON (RFC 8785,
//! `canonical.rs`). Everything here is what the surface says; nothing here
//! decides whether it is trusted (`admission/`).
//!
//! May use: `error.rs` and `entropy.rs`.

pub(crate) mod canonical;
pub(crate) mod tool;
