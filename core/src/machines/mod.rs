//! The state machines that tie the floors together: the attachment record,
//! one agent's membership of one surface session (`attachment.rs`); the
//! receive leg of an operation and its exchanges over the relay
//! (`exchange.rs`); and every manager operation, driven by a runtime through
//! `handle_*` and `poll_*` (`ops.rs`).
//!
//! May use: every other folder. Nothing imports this one but the crate
//! root's re-exports.

pub(crate) mod attachment;
pub(crate) mod exchange;
pub(crate) mod halt;
pub(crate) mod ops;
