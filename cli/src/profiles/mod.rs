//! Profiles and secrets: a saved profile, what `join` writes and
//! `--profile NAME` reads (`profile.rs`); pins from flags and files
//! (`pins.rs`); the relay token, from the environment or a file only
//! (`token.rs`); random hex for session ids, tokens and default names
//! (`random.rs`).
//!
//! May use: `output/` and the command line (`args.rs`).

pub(crate) mod pins;
pub mod profile;
pub(crate) mod random;
pub(crate) mod token;
