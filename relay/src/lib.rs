//! A faithful local Fancy relay and a demo surface, for tests, the demo and
//! dogfooding.
//!
//! [`RelayServer`] reproduces the Node relay (`agent-integrations-relay`
//! v0.46.0) over HTTP/1.1 on tokio and hyper, optionally behind TLS: the
//! same routes, statuses, error bodies, SSE and long-poll legs, presence
//! frames, client scoping of replies with its fail-closed rule, sliding
//! session TTL, and the same traps (a frame nobody is subscribed to is
//! dropped with `200`; request ids are recorded per session, so two
//! clients using the same id receive each other's replies; an oversize body
//! gets its connection dropped rather than a `413`). [`Faults`] makes it
//! misbehave on purpose. [`DemoSurface`] is the page side of a session: a
//! small sheet behind MCP that mints revisions, refuses stale pins with a
//! 409 and offers an attributed change feed. [`PusherServer`] is a
//! Pusher-protocol channel server (what Laravel Reverb speaks) and
//! [`AuthBridge`] the host app's auth bridge that signs its private
//! channels: seed 004's Reverb transport, on loopback; the demo surface
//! joins such a channel as seed 004's page does with
//! [`DemoSurface::channel_builder`].
//!
//! ```
//! use human_plus_relay::{DemoSurface, RelayServer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let relay = RelayServer::builder().start().await?;
//! let surface = DemoSurface::builder(relay.base_url(), "demo-session", "0123456789abcdef")
//!     .start()
//!     .await?;
//! assert_eq!(relay.sessions(), vec!["demo-session".to_owned()]);
//! assert_eq!(surface.revision(), "r1");
//!
//! // The person edits the sheet; the revision moves and the change is attributed.
//! let revision = surface.person().set_cell("B4", "12")?;
//! assert_eq!(revision, "r2");
//! assert_eq!(surface.cell("B4").as_deref(), Some("12"));
//!
//! surface.shutdown().await;
//! relay.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! Where this relay knowingly differs from the Node one, see the README of
//! this crate's directory ("Divergences").

mod body;
mod broker;
mod cors;
mod faults;
mod pusher_server;
mod routes;
mod server;
mod shared;
mod sse;
pub mod surface;
mod tls;
mod wire;

pub use broker::{Direction, ReceiveLeg, SubscriberInfo};
pub use cors::{CorsError, CorsPolicy};
pub use faults::{Faults, Leg};
pub use pusher_server::{
    AuthBridge, AuthBridgeBuilder, AuthBridgeHandle, DEFAULT_ACTIVITY_TIMEOUT,
    DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_PONG_GRACE, ErrorData, PusherHandle, PusherServer,
    PusherServerBuilder,
};
pub use server::{
    DEFAULT_BODY_LIMIT, DEFAULT_KEEP_ALIVE_TIMEOUT, DEFAULT_KEEPALIVE, DEFAULT_POLL_IDLE,
    DEFAULT_REAP_INTERVAL, DEFAULT_SESSION_TTL, RelayHandle, RelayServer, RelayServerBuilder,
};
pub use surface::{
    Actor, CallOutcome, CallRecord, Change, DemoSurface, DemoSurfaceBuilder, Notification, Person,
    RevisionMode, Rewrite, SurfaceError, SurfaceLeg,
};
pub use tls::{GeneratedCert, TlsConfig, TlsError, client_config_trusting};

/// Re-exported so callers can name certificate types without another
/// dependency.
pub use rustls_pki_types::CertificateDer;
