//! Connecting: from the command's connection options (flags, a link or a
//! profile) to an attached manager (`connect.rs`), on whichever runtime
//! `--runtime` names, behind one synchronous interface (`agent.rs`), and
//! the handshake that tells whether a page answers (`handshake.rs`, for
//! `status` and the bridge).
//!
//! May use: `profiles/`, `output/` and the command line (`args.rs`).

pub mod agent;
pub mod connect;
pub mod handshake;
