//! The values every floor speaks of, and the ones the error type names: a
//! JSON member and an object key as the rules read them (`scalar.rs`), the
//! strings Human+ may quote in its own sentences (`plain.rs`), the surface's
//! revision marker and what has been seen of its conflict detection
//! (`revision.rs`), and an attachment's lifecycle state
//! (`attachment_state.rs`).
//!
//! May use: nothing of the core. This is the bottom floor; `error.rs` stands
//! on it.

pub(crate) mod attachment_state;
pub(crate) mod plain;
pub(crate) mod revision;
pub(crate) mod scalar;
