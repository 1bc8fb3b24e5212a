//! # Human+ for tokio
//!
//! The tokio runtime of Human+: an AI agent joins a live application
//! surface (a sheet, a graph, a canvas a person has open) through an HTTP
//! relay, over hyper 1 and rustls. Every protocol rule lives in the sans-IO
//! [`core`]; this crate only moves bytes: DNS (vetted by the core's egress
//! policy before any socket opens), TCP, the egress proxy's CONNECT tunnel,
//! TLS, HTTP/1.1 (redirects never followed), the clock, randomness and the
//! attachment store's I/O.
//!
//! A service receives **one link** from a person (the share link of the
//! page they have open), attaches a conversation to it, and then calls the
//! page's tools and reads what somebody else changed:
//!
//! ```no_run
//! use human_plus_tokio::{
//!     EgressPolicy, Error, HumanPlus, LinkOptions, ManagerConfig, NO_PINS, Participant,
//!     SurfaceInvitation, TrustPolicy,
//! };
//! use serde_json::json;
//!
//! /// The person handed over `link` for `conversation`: attach it, proven.
//! async fn attach(human_plus: &HumanPlus, conversation: &str, link: &str) -> Result<String, Error> {
//!     let invitation = SurfaceInvitation::from_link(link, &LinkOptions::default())?;
//!     let participant = Participant::new("agent-1", "Assistant", "#7c3aed");
//!     // The page is asked for its tools before anything is kept: a wrong or
//!     // ended link is an error now, for the person who can fix it.
//!     let attached = human_plus.attach_verified(conversation, invitation, participant).await?;
//!     // Keep the id with the conversation (or attach_as and find, by a key of yours).
//!     // Show or send on `attached.attachment.summary()`, never the attachment
//!     // itself: its JSON is the store's record, relay token included.
//!     Ok(attached.attachment.id().to_owned())
//! }
//!
//! /// One turn of the model: read, write, and what somebody else changed.
//! async fn turn(human_plus: &HumanPlus, conversation: &str, attachment: &str) -> Result<(), Error> {
//!     let cell = human_plus.call(conversation, attachment, "sheet_get_cell", json!({"address": "B4"})).await?;
//!     println!("{}", cell.text); // framed as untrusted data: what the model reads
//!     match human_plus.call(conversation, attachment, "sheet_set_cell", json!({"address": "B4", "value": "12"})).await {
//!         Ok(written) => println!("{}", written.text),
//!         // A person changed the sheet since the read: nothing was written, and
//!         // the message tells the model what changed and to read again.
//!         Err(Error::SurfaceChangedUnderYou(refusal)) => println!("{refusal}"),
//!         Err(e) => return Err(e),
//!     }
//!     let changes = human_plus.changes_since(conversation, attachment).await?;
//!     for change in changes.defer_to() {
//!         println!("a person changed {}: re-read it before touching it", change.handle());
//!     }
//!     Ok(())
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Error> {
//!     // One manager per process, shared by every request (clone it into handlers).
//!     let config = ManagerConfig::new(
//!         EgressPolicy::new(["app.example"]).egress_proxy("http://egress.internal:3128"),
//!         TrustPolicy::allowing(["sheet_get_cell", "sheet_set_cell", "changes_since"], NO_PINS),
//!     );
//!     let human_plus = HumanPlus::new(config); // in-memory store: one process (see "Which store")
//!     let link = "https://app.example/sheet#session=S1_abcd&token=0123456789abcdef0123456789abcdef";
//!     let attachment = attach(&human_plus, "conversation:42", link).await?;
//!     turn(&human_plus, "conversation:42", &attachment).await?;
//!     human_plus.shutdown().await; // on SIGTERM: give the conversations back
//!     Ok(())
//! }
//! ```
//!
//! The guide's [agent service](https://github.com/human-plus/human-plus-rs/blob/main/docs/guide/agent-service.md) page says what the API
//! alone does not: replicas on one Redis, leases, which errors to retry,
//! explicit pins (`call_at`, ETag and If-Match) and kept legs.
//!
//! ## The API
//!
//! [`HumanPlus`] is the manager, over this crate's [`Tokio`] driver. Its
//! methods are written once, in `human_plus_runtime`, and documented here
//! on [`generic::HumanPlus`] (and listed on [`HumanPlus`]'s own page, under
//! *Implementations*):
//!
//! - attaching: [`attach_verified`](generic::HumanPlus::attach_verified) (the page answers before
//!   anything is kept), [`attach_as`](generic::HumanPlus::attach_as) and [`find`](generic::HumanPlus::find) (under a key of
//!   yours, idempotently), [`attach`](generic::HumanPlus::attach) (nothing sent);
//! - on the surface: [`tools`](generic::HumanPlus::tools), [`call`](generic::HumanPlus::call),
//!   [`changes_since`](generic::HumanPlus::changes_since), [`announce`](generic::HumanPlus::announce), each also
//!   bounded by a timeout of the call's own ([`tools_with_timeout`](generic::HumanPlus::tools_with_timeout),
//!   [`call_with_timeout`](generic::HumanPlus::call_with_timeout),
//!   [`changes_since_with_timeout`](generic::HumanPlus::changes_since_with_timeout),
//!   [`announce_with_timeout`](generic::HumanPlus::announce_with_timeout));
//! - known without the network: [`take_seen`](generic::HumanPlus::take_seen),
//!   [`listing_current_for`](generic::HumanPlus::listing_current_for), [`status`](generic::HumanPlus::status),
//!   [`close_idle_legs`](generic::HumanPlus::close_idle_legs) and [`next_idle_close`](generic::HumanPlus::next_idle_close)
//!   (a quiet manager's idle kept legs closed on time),
//!   [`conflict_detection`](generic::HumanPlus::conflict_detection);
//! - the end: [`detach`](generic::HumanPlus::detach), [`shutdown`](generic::HumanPlus::shutdown);
//! - making one: [`new`](generic::HumanPlus::new), [`builder`](generic::HumanPlus::builder).
//!
//! The builder's are on [`generic::HumanPlusBuilder`], the toolset's on
//! [`generic::HumanPlusToolset`] and [`generic::ToolHandle`]. Every future
//! they return is `Send`, so it can be spawned on a multi-threaded runtime.
//!
//! ## Which store
//!
//! | the service runs as | store | made with |
//! |---|---|---|
//! | one process | [`InMemoryAttachmentStore`] (the default) | `HumanPlus::new(config)` |
//! | several processes or replicas (a load balancer, a rolling deploy) | `AsyncRedisAttachmentStore` (feature `redis`): the same Redis and keyring in each | `HumanPlus::builder(config).store(store).build()?` |
//!
//! With Redis any replica serves any conversation: the record (the
//! revision above all) is in Redis, and an operation holds the
//! conversation's lock there. The builder starts from the in-memory store
//! and [`store`](generic::HumanPlusBuilder::store) replaces it, so the
//! manager it builds is a `HumanPlus<AsyncRedisAttachmentStore>`:
//!
//! ```no_run
//! # #[cfg(feature = "redis")]
//! # async fn replica(config: human_plus_tokio::ManagerConfig) -> Result<(), Box<dyn std::error::Error>> {
//! use human_plus_tokio::{AsyncRedisAttachmentStore, HumanPlus, Keyring, RedisConfig};
//!
//! let keyring = Keyring::new("2026-11", Keyring::key_from_hex(&std::env::var("HUMAN_PLUS_KEY")?)?)?;
//! let store = AsyncRedisAttachmentStore::connect(RedisConfig::new("rediss://redis.internal:6380/", keyring)).await?;
//! let human_plus: HumanPlus<AsyncRedisAttachmentStore> = HumanPlus::builder(config).store(store).build()?;
//! # let _ = human_plus;
//! # Ok(())
//! # }
//! ```
//!
//! ## What to send on
//!
//! What [`call`](generic::HumanPlus::call), [`tools`](generic::HumanPlus::tools),
//! [`changes_since`](generic::HumanPlus::changes_since) and
//! [`take_seen`](generic::HumanPlus::take_seen) return can be sent on as
//! JSON ([`CallResult`] and [`Discovery`] are `Serialize`, with stable
//! snake_case names; [`SurfaceChanges::to_json`]). A [`SurfaceAttachment`]
//! (what `attach` and `status` return) is not: its own JSON is the store's
//! record, relay token included, so never send it on or log it;
//! [`SurfaceAttachment::summary`] gives the [`AttachmentSummary`], without
//! the token.
//!
//! ## How a request reaches the relay
//!
//! The relay's host is resolved (or taken as the literal IP of the URL) and
//! every address vetted by the egress policy; a refused answer fails the
//! request before any socket opens. With an egress proxy configured, every
//! request (the loopback development mode included) goes through the
//! proxy's HTTP CONNECT tunnel, whose target is the vetted IP address, never
//! the name; TLS (SNI and certificate check on the relay's host) runs inside
//! the tunnel. Without one, the TCP connection goes straight to a vetted
//! address. Connections are kept and reused, only for the same scheme,
//! host, port, vetted address, egress proxy and auth, and for a bounded
//! time ([`TransportConfig::pool`]); in warm mode ([`TransportConfig::warm`],
//! on by default) an attachment's receive leg stays open between operations,
//! read by a task: at most 512 legs, each closed after 90 s unused
//! ([`HumanPlusBuilder::kept_legs`](generic::HumanPlusBuilder::kept_legs),
//! [`kept_leg_idle`](generic::HumanPlusBuilder::kept_leg_idle)).
//!
//! Each operation runs in a `human_plus.<operation>` tracing span
//! (attachment id, tool, receive leg); requests are logged at debug level
//! with the redacted URL. The relay token never appears in a span, an
//! event, an error or `Debug` output.
//!
//! ## From a share link
//!
//! A person hands an agent **one link** (`https://app/page#session=ID&token=T`,
//! the older `?session=` form, a relay session URL, or the web page's JSON).
//! [`SurfaceInvitation::from_link`] reads it into an invitation in one call,
//! with [`LinkOptions`] holding everything about reading links: the relay
//! path a page link's relay lives under (default `agent-relay`) and plain
//! `http` to a loopback relay for local development. Nothing is sent, and the
//! link implies no egress: the manager's [`EgressPolicy`] still decides
//! which relay hosts may be reached. A page link names no relay path, so
//! when its relay is mounted elsewhere the first operation fails with
//! [`Error::RelayPathNotFound`] (code `relay_failed`), naming the path it
//! assumed and [`LinkOptions::relay_path`].
//!
//! ```
//! use human_plus_tokio::{
//!     EgressPolicy, HumanPlus, LinkOptions, ManagerConfig, NO_PINS, Participant, SurfaceInvitation,
//!     TrustPolicy,
//! };
//!
//! # fn main() -> Result<(), human_plus_tokio::Error> {
//! // What your service received from the person (never a command-line argument).
//! let link = "https://app.example/whiteboard#session=S1_abcd&token=0123456789abcdef0123456789abcdef";
//! let invitation = SurfaceInvitation::from_link(link, &LinkOptions::default())?;
//! assert_eq!(invitation.relay_url(), "https://app.example/agent-relay");
//!
//! // A relay mounted under another path, or on this machine over plain http:
//! let dev = LinkOptions::default().relay_path("share")?.allow_insecure_loopback(true);
//! let local = SurfaceInvitation::from_link(
//!     "http://127.0.0.1:8787/whiteboard#session=S1_abcd&token=0123456789abcdef0123456789abcdef",
//!     &dev,
//! )?;
//! assert_eq!(local.relay_url(), "http://127.0.0.1:8787/share");
//!
//! let config = ManagerConfig::new(
//!     EgressPolicy::new(["app.example"]).egress_proxy("http://egress.internal:3128"),
//!     TrustPolicy::allowing(["sheet_get_cell"], NO_PINS),
//! );
//! let participant = Participant::new("agent-1", "Assistant", "#7c3aed");
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let attachment = rt.block_on(async {
//!     HumanPlus::new(config).attach("conversation:42", invitation, participant).await // no network yet
//! })?;
//! assert_eq!(attachment.invitation().assumed_relay_path(), Some("agent-relay"));
//! # Ok(())
//! # }
//! ```
//!
//! ## Configuring
//!
//! Tests and private relays configure the manager with the builder
//! ([`generic::HumanPlusBuilder`]): a [`StaticResolver`], extra TLS roots
//! ([`TlsRoots::only`]), another [`AsyncAttachmentStore`], timeouts.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use human_plus_tokio::{EgressPolicy, HumanPlus, InMemoryAttachmentStore, ManagerConfig, NO_PINS, StaticResolver, TlsRoots, TrustPolicy};
//!
//! let config = ManagerConfig::new(
//!     EgressPolicy::new(["relay.test"]).allow_unverified_egress(true),
//!     TrustPolicy::every_tool(NO_PINS),
//! );
//! let human_plus = HumanPlus::builder(config)
//!     .store(InMemoryAttachmentStore::new())
//!     .tls_roots(TlsRoots::webpki())
//!     .resolver(Arc::new(StaticResolver::new().with("relay.test", ["93.184.215.14".parse().unwrap()])))
//!     .connect_timeout(Duration::from_secs(5))
//!     .lock_wait(Duration::from_secs(2))
//!     .build()?;
//! assert!(human_plus.store().is_empty());
//! # Ok::<(), human_plus_tokio::Error>(())
//! ```
//!
//! ## Replicas, leases and shutting down
//!
//! A service run as several replicas on one Redis gives each its manager
//! over an `AsyncRedisAttachmentStore` (feature `redis`). An operation
//! holds its conversation's lock for a short lease (6 s,
//! [`DEFAULT_LEASE`]) that the manager renews every 2 s while the operation
//! runs, so a replica that dies frees its conversations within one lease. A
//! call on a conversation another replica holds for longer than the lock
//! wait is `attachment_busy` ([`Error::Busy`]): nothing was sent, and
//! [`Error::retry_after`] says when to try again. A replica told to stop
//! shuts its manager down, which gives back the locks its running
//! operations hold, so the others serve those conversations at once:
//!
//! ```no_run
//! use tokio::signal::unix::{SignalKind, signal};
//!
//! # async fn serve(human_plus: human_plus_tokio::HumanPlus) -> std::io::Result<()> {
//! let mut terminate = signal(SignalKind::terminate())?;
//! terminate.recv().await; // a rolling deploy, a node drained
//! human_plus.shutdown().await; // nothing more starts; locks given back; connections closed
//! # Ok(())
//! # }
//! ```
//!
//! Dropping the last handle of a manager closes what it keeps as far as a
//! drop can.
//!
//! ## Tools a model can call
//!
//! [`HumanPlusToolset`] turns an attachment's admitted tools into
//! [`ToolHandle`]s that call through [`HumanPlus::call`]. With the `rig`
//! feature (off by default), `ToolHandle::into_rig_tool` turns a handle
//! into a rig-core `DynamicTool`.
//!
//! ```no_run
//! use human_plus_tokio::{HumanPlus, HumanPlusToolset};
//! use serde_json::json;
//!
//! # async fn run(human_plus: HumanPlus, attachment: &str) -> Result<(), human_plus_tokio::Error> {
//! let tools = HumanPlusToolset::new(&human_plus)
//!     .for_attachment("conversation:42", attachment, &["sheet_set_cell"])
//!     .await?;
//! for tool in &tools {
//!     println!("{} approval={} {}", tool.name(), tool.requires_approval(), tool.tool().digest);
//! }
//! if let Some(read) = tools.iter().find(|t| t.name() == "sheet_get_cell") {
//!     let result = read.call(json!({"address": "B4"})).await?;
//!     println!("{}", result.text); // framed as untrusted data
//! }
//! # Ok(())
//! # }
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod clock;
mod connect;
mod driver;
mod perform;
mod socket;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use human_plus_core::OperationOutput;
use human_plus_runtime::{AsyncFlavour, Drive, Driven, Driver, NetSettings};

pub use driver::WarmStream;
pub use human_plus_core as core;
pub use human_plus_runtime::exports::*;
#[cfg(feature = "rig")]
pub use human_plus_runtime::{Approve, rig_error};
pub use human_plus_runtime::{Resolve, Resolving};
pub use human_plus_store::AsyncAttachmentStore;
#[cfg(feature = "redis")] // The Redis store (feature `redis`).
pub use human_plus_store::{AsyncRedisAttachmentStore, Keyring, RedisConfig};
pub use rustls_pki_types::CertificateDer;

use connect::Connector;

human_plus_runtime::manager_names!(async Tokio);

/// The tokio driver: hyper 1 over tokio's sockets and timers, tokio-rustls,
/// a vetting resolver and CONNECT tunnels to the vetted address. Each
/// request is a task; a warm attachment's stream is a task reading between
/// operations.
#[derive(Debug)]
pub struct Tokio {
    connector: Arc<Connector>,
}

impl Driver for Tokio {
    type Flavour = AsyncFlavour;
    type Stream = WarmStream;

    fn new(net: NetSettings<dyn Resolve>) -> Self {
        Tokio {
            connector: Arc::new(Connector::new(net)),
        }
    }

    fn drive<T: OperationOutput + Send>(
        &self,
        run: Drive<T, Self>,
    ) -> impl Future<Output = Driven<T, Self>> + Send {
        // The driver loop's own future, not one awaiting it: a wrapper
        // would keep room for `run` beside the operation moved into it.
        // The operation goes in a box of its own: an async fn keeps room
        // for its argument beside the local it is moved into, so an
        // operation held inline counted twice in the loop's future.
        let Drive { op, stream } = run;
        driver::drive(Box::new(op), &self.connector, stream)
    }

    fn now() -> Instant {
        clock::now()
    }

    fn sleep(wait: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(wait)
    }

    fn close_idle(&self) {
        // Dropping a kept connection's sender ends its connection task.
        self.connector
            .pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}
