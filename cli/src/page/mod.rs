//! The page server, for dogfooding against your own agent: `human-plus
//! relay` and `human-plus surface` (`serve.rs`), the web page's own HTTP
//! server (`web.rs`), `surface --web` (`web_surface.rs`), and the tokio
//! runtime they block on (`rt.rs`).
//!
//! May use: `connecting/`, `profiles/`, `output/` and the command line
//! (`args.rs`).

pub(crate) mod rt;
pub mod serve;
pub mod web;
pub(crate) mod web_surface;
