//! # Human+ for async-std and smol
//!
//! An AI agent joins a live application surface (a sheet, a graph, a canvas
//! a person has open) through an HTTP relay, as a named participant. This
//! crate is the runtime for async code outside tokio: a thin driver of the
//! sans-IO [`human_plus_core`], built on the stack async-std itself runs
//! on — `async-io` (timers and the reactor), `async-net` (TCP and DNS),
//! `futures-rustls` (TLS, with the `ring` provider) and hyper's HTTP/1.1
//! connection. It does **not** depend on `async-std`, which is discontinued
//! upstream (RUSTSEC-2025-0052); its futures run unchanged under
//! async-std's executor, under smol's, or under
//! `futures_lite::future::block_on`. Nothing is spawned: every request of an
//! operation runs inside the operation's own future, so dropping that
//! future cancels the operation and closes its connections.
//!
//! Every protocol rule (URLs and the egress policy, exchanges and their
//! timeouts, the MCP sequence, trust, framing, revisions, the change feed)
//! lives in the core. This crate owns only sockets, DNS, TLS, the clock,
//! randomness, the store's I/O and tracing — and enforces the egress policy
//! where the connection is made: every resolved address is vetted, and only
//! a vetted address is connected to (directly, or as the target of the
//! egress proxy's CONNECT tunnel, which is sent the address, never the
//! name).
//!
//! A service receives **one link** from a person (the share link of the
//! page they have open), attaches a conversation to it, and then calls the
//! page's tools and reads what somebody else changed:
//!
//! ```no_run
//! use human_plus_async_std::{
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
//! fn main() -> Result<(), Error> {
//!     // One manager per process, shared (clone it).
//!     let config = ManagerConfig::new(
//!         EgressPolicy::new(["app.example"]).egress_proxy("http://egress.internal:3128"),
//!         TrustPolicy::allowing(["sheet_get_cell", "sheet_set_cell", "changes_since"], NO_PINS),
//!     );
//!     let human_plus = HumanPlus::new(config); // in-memory store: one process (see "Which store")
//!     let link = "https://app.example/sheet#session=S1_abcd&token=0123456789abcdef0123456789abcdef";
//!     // The same futures under smol's executor, async-std's, or futures_lite::future::block_on:
//!     smol::block_on(async {
//!         let attachment = attach(&human_plus, "conversation:42", link).await?;
//!         turn(&human_plus, "conversation:42", &attachment).await
//!     })
//! }
//! ```
//!
//! The guide's [agent service](https://github.com/human-plus/human-plus-rs/blob/main/docs/guide/agent-service.md) page says what the API
//! alone does not: replicas on one Redis, leases, which errors to retry,
//! explicit pins (`call_at`) and kept legs.
//!
//! ## The API
//!
//! [`HumanPlus`] is the manager, over this crate's [`AsyncIo`] driver. Its
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
//! [`generic::HumanPlusToolset`] and [`generic::ToolHandle`].
//!
//! ## Which store
//!
//! | the service runs as | store | made with |
//! |---|---|---|
//! | one process | [`InMemoryAttachmentStore`] (the default) | `HumanPlus::new(config)` |
//! | several processes or replicas | `AsyncRedisAttachmentStore` (feature `redis`, on async-io): the same Redis and keyring in each | `HumanPlus::builder(config).store(store).build()?` |
//!
//! With Redis any replica serves any conversation: the record (the
//! revision above all) is in Redis, and an operation holds the
//! conversation's lock there. The builder starts from the in-memory store
//! and [`store`](generic::HumanPlusBuilder::store) replaces it, so the
//! manager it builds is a `HumanPlus<AsyncRedisAttachmentStore>`:
//!
//! ```no_run
//! # #[cfg(feature = "redis")]
//! # async fn replica(config: human_plus_async_std::ManagerConfig) -> Result<(), Box<dyn std::error::Error>> {
//! use human_plus_async_std::{AsyncRedisAttachmentStore, HumanPlus, Keyring, RedisConfig};
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
//! ## Kept connections and warm legs
//!
//! Connections are kept and reused, only for the same scheme, host, port,
//! vetted address, egress proxy and auth, and for a bounded time
//! ([`TransportConfig::pool`]). In warm mode ([`TransportConfig::warm`],
//! on by default; at most 512 legs, each closed after 90 s unused:
//! [`HumanPlusBuilder::kept_legs`](generic::HumanPlusBuilder::kept_legs) and
//! [`kept_leg_idle`](generic::HumanPlusBuilder::kept_leg_idle)) an attachment's receive leg stays open between
//! operations; since nothing is spawned, nothing reads it meanwhile: what
//! it delivered (a person's activity, a change of the tools) is read when
//! the next operation, [`take_seen`](generic::HumanPlus::take_seen) or
//! [`listing_current_for`](generic::HumanPlus::listing_current_for) asks,
//! each event taken to have arrived when the leg was kept (the earliest it
//! could have), so a silent leg never looks fresher than it is.
//!
//! Tests and local development can point a name at any address with
//! [`StaticResolver`] and trust a private CA with [`TlsRoots::only`]; the
//! address must still pass the egress policy.
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
//! use human_plus_async_std::{
//!     EgressPolicy, HumanPlus, LinkOptions, ManagerConfig, NO_PINS, Participant, SurfaceInvitation,
//!     TrustPolicy,
//! };
//!
//! # fn main() -> Result<(), human_plus_async_std::Error> {
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
//! let human_plus = HumanPlus::new(config);
//! let attachment = async_io::block_on(human_plus.attach("conversation:42", invitation, participant))?; // no network yet
//! assert_eq!(attachment.invitation().assumed_relay_path(), Some("agent-relay"));
//! # Ok(())
//! # }
//! ```
//!
//! ## Replicas, leases and shutting down
//!
//! Replicas on one Redis each have a manager over an
//! `AsyncRedisAttachmentStore` (feature `redis`). An operation holds its
//! conversation's lock for a short lease (6 s, [`DEFAULT_LEASE`]), renewed
//! every 2 s while it runs, so a replica that dies frees its conversations
//! within one lease; a call on a conversation another replica holds is
//! `attachment_busy` ([`Error::Busy`], [`Error::retry_after`]). A replica
//! told to stop shuts its manager down first: the locks of its running
//! operations are given back at once and its kept connections closed.
//!
//! ```no_run
//! # fn serve(human_plus: human_plus_async_std::HumanPlus, terminated: std::sync::mpsc::Receiver<()>) {
//! // The thread the process's SIGTERM handling wakes:
//! let _ = terminated.recv();
//! async_io::block_on(human_plus.shutdown());
//! std::process::exit(0);
//! # }
//! ```
//!
//! Dropping the last handle of a manager closes what it keeps as far as a
//! drop can.
//!
//! ## Tools a model can call
//!
//! ```no_run
//! use human_plus_async_std::{HumanPlus, HumanPlusToolset};
//! use serde_json::json;
//!
//! # async fn run(human_plus: HumanPlus, attachment: &str) -> Result<(), human_plus_async_std::Error> {
//! let tools = HumanPlusToolset::new(&human_plus)
//!     .for_attachment("conversation:42", attachment, &["sheet_set_cell"])
//!     .await?;
//! if let Some(read) = tools.iter().find(|t| t.name() == "sheet_get_cell") {
//!     println!("{}", read.call(json!({"address": "B4"})).await?.text);
//! }
//! # Ok(())
//! # }
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod driver;
mod socket;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use async_io::Timer;
use human_plus_core::{ConnectionPool, OperationOutput};
use human_plus_runtime::{AsyncFlavour, Drive, Driven, Driver, NetSettings};

pub use driver::WarmStream;
pub use human_plus_core as core;
pub use human_plus_runtime::exports::*;
pub use human_plus_runtime::{Resolve, Resolving};
pub use human_plus_store::AsyncAttachmentStore;
#[cfg(feature = "redis")] // The Redis store (feature `redis`).
pub use human_plus_store::{AsyncRedisAttachmentStore, Keyring, RedisConfig};

use transport::Context;

human_plus_runtime::manager_names!(async AsyncIo);

/// The async-io driver: hyper's HTTP/1.1 connection over async-net's
/// sockets and futures-rustls, a vetting resolver, CONNECT tunnels to the
/// vetted address and async-io's timers. Nothing is spawned: every request
/// of an operation runs inside the operation's own future.
#[derive(Debug)]
pub struct AsyncIo {
    ctx: Arc<Context>,
}

impl Driver for AsyncIo {
    type Flavour = AsyncFlavour;
    type Stream = WarmStream;

    fn new(net: NetSettings<dyn Resolve>) -> Self {
        AsyncIo {
            ctx: Arc::new(Context {
                pool: std::sync::Mutex::new(ConnectionPool::new(net.pool)),
                lingering: std::sync::Mutex::default(),
                net,
            }),
        }
    }

    fn drive<T: OperationOutput + Send>(
        &self,
        run: Drive<T, Self>,
    ) -> impl Future<Output = Driven<T, Self>> + Send {
        // The driver loop's own future, not one awaiting it: a wrapper
        // would keep room for `run` beside the operation moved into it.
        let Drive { op, stream } = run;
        driver::drive(&self.ctx, op, stream)
    }

    async fn sleep(wait: Duration) {
        Timer::after(wait).await;
    }

    fn close_idle(&self) {
        let idle = std::mem::take(
            &mut *self
                .ctx
                .lingering
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        drop(idle);
        self.ctx
            .pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// An owner that is neither `Send` nor `Sync`.
    struct LocalOwner(Cell<u8>, std::marker::PhantomData<*const ()>);

    impl Owner for LocalOwner {
        fn key(&self) -> String {
            format!("local:{}", self.0.get())
        }
    }

    fn assert_send<F: Future + Send>(f: F) -> F {
        f
    }

    #[test]
    fn manager_and_futures_are_send() {
        fn send_sync<T: Send + Sync + Clone>() {}
        send_sync::<HumanPlus>();
        let hp = HumanPlus::new(ManagerConfig::new(
            EgressPolicy::new(["relay.example"]).egress_proxy("http://egress.internal:3128"),
            TrustPolicy::undeclared(),
        ));
        let tools = {
            let owner = LocalOwner(Cell::new(1), std::marker::PhantomData);
            // The future holds the owner's key, not the owner.
            assert_send(hp.tools(&owner, "surface_x"))
        };
        let undeclared = futures_lite::future::block_on(tools).unwrap_err();
        assert_eq!(undeclared.code(), "tool_refused");
        let owner = LocalOwner(Cell::new(1), std::marker::PhantomData);
        drop(assert_send(hp.call(
            &owner,
            "a",
            "t",
            serde_json::Value::Null,
        )));
        drop(assert_send(hp.changes_since(&owner, "a")));
        drop(assert_send(hp.announce(&owner, "a", &Activity::new("x"))));
        drop(assert_send(hp.detach(&owner, "a")));
        drop(assert_send(hp.status(&owner, "a")));
        drop(assert_send(hp.conflict_detection(&owner, "a")));
        drop(assert_send(hp.shutdown()));
        let missing = futures_lite::future::block_on(hp.status(&owner, "a")).unwrap_err();
        assert_eq!(missing, Error::AttachmentMissing);
    }
}
