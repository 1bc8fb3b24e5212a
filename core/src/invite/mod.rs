//! The way in: the invitation a surface issues and the participant an agent
//! joins as (`invitation.rs`), the one link a person shares
//! (`link.rs`), the owner every operation re-presents (`owner.rs`), and the
//! rules of a saved connection profile and of the MCP client entry that
//! points at it (`profile.rs`), and the transport an invitation names: the
//! HTTP relay or a Reverb channel (`transport.rs`).
//!
//! May use: `error.rs` and `values/`.

pub(crate) mod invitation;
pub(crate) mod link;
pub(crate) mod owner;
pub(crate) mod profile;
pub(crate) mod transport;
