//! The demo's story, told once (`story.rs`) and rendered for two audiences:
//! a reader at a terminal watching a programmatic person edit the demo sheet
//! (`demo.rs`), and a person at the web page in a browser (`web_demo.rs`).
//!
//! May use: every other folder (the page server for `demo --web`, the
//! `tools` command's words for a withheld tool).

pub mod demo;
pub(crate) mod story;
pub mod web_demo;
