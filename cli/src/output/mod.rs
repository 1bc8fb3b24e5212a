//! What the command says, and how it ends: exit codes and a failure told
//! to a person in one line with a hint (`exit.rs`), log lines on standard
//! error with every secret redacted (`logs.rs`), terminal styling
//! (`style.rs`) and plain text to the terminal (`console.rs`).
//!
//! May use: nothing of the command. This is the bottom floor; every
//! subcommand reports through it.

pub(crate) mod console;
pub mod exit;
pub mod logs;
pub mod style;
