//! # Human+ for blocking code
//!
//! `human-plus-blocking` lets an AI agent join a live application surface
//! (a sheet, a graph, a canvas a person has open) from plain blocking Rust:
//! queue workers, scripts, CLIs. No async runtime is involved: every HTTP
//! request runs on a pooled request thread over [ureq](https://docs.rs/ureq)
//! 3, and the calling thread drives the sans-IO [`human_plus_core`], which
//! owns every protocol rule.
//!
//! A worker gets **one link** from a person (the share link of the page
//! they have open) with a job, attaches the job's conversation to it, and
//! then calls the page's tools and reads what somebody else changed:
//!
//! ```no_run
//! use human_plus_blocking::{
//!     EgressPolicy, Error, HumanPlus, LinkOptions, ManagerConfig, NO_PINS, Participant,
//!     SurfaceInvitation, TrustPolicy,
//! };
//! use serde_json::json;
//!
//! /// The person handed over `link` for `conversation`: attach it, proven.
//! fn attach(human_plus: &HumanPlus, conversation: &str, link: &str) -> Result<String, Error> {
//!     let invitation = SurfaceInvitation::from_link(link, &LinkOptions::default())?;
//!     let participant = Participant::new("agent-1", "Assistant", "#7c3aed");
//!     // The page is asked for its tools before anything is kept: a wrong or
//!     // ended link is an error now, for the person who can fix it.
//!     let attached = human_plus.attach_verified(conversation, invitation, participant)?;
//!     // Keep the id with the conversation (or attach_as and find, by a key of yours).
//!     // Show or send on `attached.attachment.summary()`, never the attachment
//!     // itself: its JSON is the store's record, relay token included.
//!     Ok(attached.attachment.id().to_owned())
//! }
//!
//! /// A job of the conversation: read, write, and what somebody else changed.
//! fn job(human_plus: &HumanPlus, conversation: &str, attachment: &str) -> Result<(), Error> {
//!     let cell = human_plus.call(conversation, attachment, "sheet_get_cell", json!({"address": "B4"}))?;
//!     println!("{}", cell.text); // framed as untrusted data: what the model reads
//!     match human_plus.call(conversation, attachment, "sheet_set_cell", json!({"address": "B4", "value": "12"})) {
//!         Ok(written) => println!("{}", written.text),
//!         // A person changed the sheet since the read: nothing was written, and
//!         // the message tells the model what changed and to read again.
//!         Err(Error::SurfaceChangedUnderYou(refusal)) => println!("{refusal}"),
//!         Err(e) => return Err(e),
//!     }
//!     let changes = human_plus.changes_since(conversation, attachment)?;
//!     for change in changes.defer_to() {
//!         println!("a person changed {}: re-read it before touching it", change.handle());
//!     }
//!     Ok(())
//! }
//!
//! fn main() -> Result<(), Error> {
//!     // One manager per worker process, shared by its threads (clone it).
//!     let config = ManagerConfig::new(
//!         EgressPolicy::new(["app.example"]).egress_proxy("http://egress.internal:3128"),
//!         TrustPolicy::allowing(["sheet_get_cell", "sheet_set_cell", "changes_since"], NO_PINS),
//!     );
//!     let human_plus = HumanPlus::new(config); // in-memory store: one process (see "Which store")
//!     let link = "https://app.example/sheet#session=S1_abcd&token=0123456789abcdef0123456789abcdef";
//!     let attachment = attach(&human_plus, "conversation:42", link)?;
//!     job(&human_plus, "conversation:42", &attachment)
//! }
//! ```
//!
//! The guide's [queue worker](https://github.com/human-plus/human-plus-rs/blob/main/docs/guide/queue-worker.md) page says what the API
//! alone does not: one manager per process, workers on one Redis, which
//! errors to retry and what a stopped worker does.
//!
//! ## The API
//!
//! [`HumanPlus`] is the manager, over this crate's [`Blocking`] driver. Its
//! methods are written once, in `human_plus_runtime`, and documented here
//! on [`generic::BlockingHumanPlus`] (and listed on [`HumanPlus`]'s own page, under
//! *Implementations*):
//!
//! - attaching: [`attach_verified`](generic::BlockingHumanPlus::attach_verified) (the page answers before
//!   anything is kept), [`attach_as`](generic::BlockingHumanPlus::attach_as) and [`find`](generic::BlockingHumanPlus::find) (under a key of
//!   yours, idempotently), [`attach`](generic::BlockingHumanPlus::attach) (nothing sent);
//! - on the surface: [`tools`](generic::BlockingHumanPlus::tools), [`call`](generic::BlockingHumanPlus::call),
//!   [`changes_since`](generic::BlockingHumanPlus::changes_since), [`announce`](generic::BlockingHumanPlus::announce), each also
//!   bounded by a timeout of the call's own ([`tools_with_timeout`](generic::BlockingHumanPlus::tools_with_timeout),
//!   [`call_with_timeout`](generic::BlockingHumanPlus::call_with_timeout),
//!   [`changes_since_with_timeout`](generic::BlockingHumanPlus::changes_since_with_timeout),
//!   [`announce_with_timeout`](generic::BlockingHumanPlus::announce_with_timeout));
//! - known without the network: [`take_seen`](generic::BlockingHumanPlus::take_seen),
//!   [`listing_current_for`](generic::BlockingHumanPlus::listing_current_for), [`status`](generic::BlockingHumanPlus::status),
//!   [`close_idle_legs`](generic::BlockingHumanPlus::close_idle_legs) and [`next_idle_close`](generic::BlockingHumanPlus::next_idle_close)
//!   (a quiet manager's idle kept legs closed on time),
//!   [`conflict_detection`](generic::BlockingHumanPlus::conflict_detection);
//! - the end: [`detach`](generic::BlockingHumanPlus::detach), [`shutdown`](generic::BlockingHumanPlus::shutdown);
//! - making one: [`new`](generic::BlockingHumanPlus::new), [`builder`](generic::BlockingHumanPlus::builder).
//!
//! The builder's are on [`generic::HumanPlusBuilder`], the toolset's on
//! [`generic::HumanPlusToolset`] and [`generic::ToolHandle`]. The manager is
//! `Clone + Send + Sync`: one per process, shared by its threads.
//!
//! ## Which store
//!
//! | the workers run as | store | made with |
//! |---|---|---|
//! | one process (its threads share the manager) | [`InMemoryAttachmentStore`] (the default) | `HumanPlus::new(config)` |
//! | several processes taking jobs from one queue | `RedisAttachmentStore` (feature `redis`): the same Redis and keyring in each | `HumanPlus::builder(config).store(store).build()?` |
//!
//! With Redis a job's attachment id, kept with its conversation, is usable
//! by whichever worker takes the conversation's next job: the record (the
//! revision above all) is in Redis, and an operation holds the
//! conversation's lock there. The builder starts from the in-memory store
//! and [`store`](generic::HumanPlusBuilder::store) replaces it, so the
//! manager it builds is a `HumanPlus<RedisAttachmentStore>`:
//!
//! ```no_run
//! # #[cfg(feature = "redis")]
//! # fn worker(config: human_plus_blocking::ManagerConfig) -> Result<(), Box<dyn std::error::Error>> {
//! use human_plus_blocking::{HumanPlus, Keyring, RedisAttachmentStore, RedisConfig};
//!
//! let keyring = Keyring::new("2026-11", Keyring::key_from_hex(&std::env::var("HUMAN_PLUS_KEY")?)?)?;
//! let store = RedisAttachmentStore::open(RedisConfig::new("rediss://redis.internal:6380/", keyring))?;
//! let human_plus: HumanPlus<RedisAttachmentStore> = HumanPlus::builder(config).store(store).build()?;
//! # let _ = human_plus;
//! # Ok(())
//! # }
//! ```
//!
//! ## What to send on
//!
//! What [`call`](generic::BlockingHumanPlus::call),
//! [`tools`](generic::BlockingHumanPlus::tools),
//! [`changes_since`](generic::BlockingHumanPlus::changes_since) and
//! [`take_seen`](generic::BlockingHumanPlus::take_seen) return can be sent
//! on as JSON ([`CallResult`] and [`Discovery`] are `Serialize`, with
//! stable snake_case names; [`SurfaceChanges::to_json`]). A
//! [`SurfaceAttachment`] (what `attach` and `status` return) is not: its
//! own JSON is the store's record, relay token included, so never send it
//! on or log it; [`SurfaceAttachment::summary`] gives the
//! [`AttachmentSummary`], without the token.
//!
//! ## How requests run
//!
//! Each operation takes the store's lock of the attachment, builds the
//! core's [`core::Operation`] and drives it on the calling thread (the
//! manager flow is [`human_plus_runtime`]'s, once for every runtime, run to
//! completion here over the [`Blocking`] driver). Every
//! HTTP request the core asks for runs on a request thread of its own,
//! which reports the response head, each body chunk as it arrives (8 KiB
//! reads, so the SSE leg streams), and the end, into a bounded channel; the
//! driver waits on that channel until the core's next timer. Request
//! threads are pooled per manager: a thread whose request has ended waits
//! up to 5 s for the next one, so a worker calling again and again reuses
//! them instead of starting threads on every call. There is no cap: a
//! request never waits for a thread. Connections are kept and reused (one
//! ureq agent per connection key: scheme, host, port, vetted address,
//! egress proxy and auth), for a bounded time ([`TransportConfig::pool`]).
//!
//! In warm mode ([`TransportConfig::warm`], on by default; at most 512 legs,
//! each closed after 90 s unused: [`HumanPlusBuilder::kept_legs`](generic::HumanPlusBuilder::kept_legs)
//! and [`kept_leg_idle`](generic::HumanPlusBuilder::kept_leg_idle)) an attachment's
//! receive leg stays open between operations (the SSE stream, or a poll
//! parked on the relay), on a request thread of its own that keeps reading:
//! what it delivers meanwhile (a person's activity, a change of the tools)
//! is what the next operation, [`take_seen`](generic::BlockingHumanPlus::take_seen)
//! and [`listing_current_for`](generic::BlockingHumanPlus::listing_current_for)
//! read, as in the async runtimes. It costs that thread and one open
//! connection per kept leg for as long as the manager keeps it.
//!
//! The egress policy is enforced where the connection is made: the relay's
//! host is resolved through the [`Resolve`] configured on the builder, the
//! whole answer is vetted by the core, and only vetted addresses are ever
//! connected to (through the `egress_proxy`, the CONNECT target is the
//! vetted IP address, never the name). Redirects are never followed and no
//! proxy is taken from the environment. TLS uses
//! [`human_plus_runtime::client_config`] (rustls with the `ring`
//! provider).
//!
//! ## How long request threads live
//!
//! A request ends when its response ends or fails, and never later
//! than the request's deadline (the core's exchange deadline, applied as
//! ureq's global timeout, so a silent SSE stream ends too). When the core
//! cancels a request, or the operation ends with requests still open, the
//! request's socket is shut down, which wakes a blocked read at once; reads
//! also wake every 500 ms to check the cancel flag. A request still
//! connecting when cancelled ends when that connect attempt ends (bounded
//! by [`HumanPlusBuilder::connect_timeout`]). Its thread then waits 5 s
//! for another request and ends if none comes (all of them are named
//! `human-plus-request`). A lookup through a blocking
//! [`Resolve`] runs on a helper thread the request stops waiting for at its
//! deadline; that helper ends when the resolver returns.
//!
//! ## Logging
//!
//! This crate emits one `tracing` span per operation (`human_plus.tools`,
//! `human_plus.call`, ...: attachment id, tool, receive leg) and debug
//! events per request with the redacted URL; never the token, a raw URL or
//! a header. ureq itself logs through the `log` crate, and at `TRACE`
//! (target `ureq`) it writes the request line it is given: so it is never
//! given the token. Its URL carries
//! [`TOKEN_MARKER`](human_plus_core::TOKEN_MARKER) where the token goes,
//! and the connection puts the token back into the request line on its way
//! to the socket, below every logger.
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
//! use human_plus_blocking::{
//!     EgressPolicy, HumanPlus, LinkOptions, ManagerConfig, NO_PINS, Participant, SurfaceInvitation,
//!     TrustPolicy,
//! };
//!
//! # fn main() -> Result<(), human_plus_blocking::Error> {
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
//! let attachment = human_plus.attach("conversation:42", invitation, participant)?; // no network yet
//! assert_eq!(attachment.invitation().assumed_relay_path(), Some("agent-relay"));
//! # Ok(())
//! # }
//! ```
//!
//! ## Configuring
//!
//! ```
//! use std::sync::Arc;
//! use human_plus_blocking::{EgressPolicy, HumanPlus, ManagerConfig, StaticResolver, TlsRoots, TrustPolicy};
//!
//! let human_plus = HumanPlus::builder(ManagerConfig::new(
//!     EgressPolicy::new(["relay.test"]).allow_unverified_egress(true),
//!     TrustPolicy::undeclared(),
//! ))
//! .tls_roots(TlsRoots::only([]))
//! .resolver(Arc::new(StaticResolver::new()))
//! .build()?;
//! assert!(human_plus.store().is_empty());
//! # Ok::<(), human_plus_blocking::Error>(())
//! ```
//!
//! ## Queue workers on one Redis: busy, leases, shutting down
//!
//! Worker processes sharing one Redis each have a manager over a
//! `RedisAttachmentStore` (feature `redis`), shared by their threads. An
//! operation holds its conversation's lock for a short lease (6 s,
//! [`DEFAULT_LEASE`]); the calling thread is busy for the whole operation,
//! so one thread of the manager (`human-plus-lease`) renews the lease every
//! 2 s meanwhile, and a worker that dies frees its conversations within one
//! lease. A job on a conversation another worker holds for longer than the
//! lock wait is answered `attachment_busy` ([`Error::Busy`]): nothing was
//! sent, and the queue can put the job back for [`Error::retry_after`]
//! instead of holding a thread.
//!
//! ```no_run
//! use std::time::Duration;
//! use human_plus_blocking::{Error, HumanPlus};
//! use serde_json::json;
//!
//! # fn job(human_plus: &HumanPlus, owner: &str, attachment: &str) -> Result<Option<Duration>, Error> {
//! match human_plus.call(owner, attachment, "sheet_get_cell", json!({"address": "B4"})) {
//!     Ok(read) => println!("{}", read.text),
//!     // Another worker has this conversation: put the job back.
//!     Err(e) if e.is_busy() => return Ok(e.retry_after()),
//!     Err(e) => return Err(e),
//! }
//! # Ok(None)
//! # }
//! ```
//!
//! A worker told to stop (SIGTERM) shuts its manager down from the thread
//! that handles the signal, then exits: the locks its running jobs hold are
//! given back at once, and the other workers serve those conversations.
//!
//! ```no_run
//! # fn serve(human_plus: human_plus_blocking::HumanPlus, terminated: std::sync::mpsc::Receiver<()>) {
//! let manager = human_plus.clone();
//! std::thread::spawn(move || {
//!     let _ = terminated.recv(); // SIGTERM, as the process's signal handling reports it
//!     manager.shutdown(); // nothing more starts; locks given back; connections closed
//!     std::process::exit(0);
//! });
//! # }
//! ```
//!
//! Dropping the last handle of a manager closes what it keeps as far as a
//! drop can.
//!
//! ## Tools a model can call
//!
//! ```no_run
//! use human_plus_blocking::{HumanPlus, HumanPlusToolset};
//! use serde_json::json;
//!
//! # fn run(human_plus: HumanPlus, attachment: &str) -> Result<(), human_plus_blocking::Error> {
//! let tools = HumanPlusToolset::new(&human_plus).for_attachment("job:7", attachment, &["sheet_set_cell"])?;
//! if let Some(read) = tools.iter().find(|t| t.name() == "sheet_get_cell") {
//!     println!("{}", read.call(json!({"address": "B4"}))?.text);
//! }
//! # Ok(())
//! # }
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod ctl;
mod current;
mod driver;
mod failure;
mod pool;
mod resolve;
mod socket;
mod transport;

use std::sync::Arc;

use human_plus_core::OperationOutput;
use human_plus_runtime::{BlockingFlavour, Drive, Driven, Driver, NetSettings};

pub use driver::WarmStream;
use driver::{Net, drive};
pub use human_plus_core as core;
pub use human_plus_runtime::exports::*;
pub use human_plus_store::AttachmentStore;
#[cfg(feature = "redis")] // The Redis store (feature `redis`).
pub use human_plus_store::{Keyring, RedisAttachmentStore, RedisConfig};
use pool::Pool;
pub use resolve::Resolve;

human_plus_runtime::manager_names!(blocking Blocking);

/// The blocking driver: ureq 3 over our own connector (vetted addresses,
/// CONNECT tunnels, rustls), every request on a pooled request thread
/// reporting to the calling thread, which drives the core.
#[derive(Debug)]
pub struct Blocking {
    net: Arc<Net>,
}

impl Driver for Blocking {
    type Flavour = BlockingFlavour;
    type Stream = WarmStream;

    fn new(net: NetSettings<dyn Resolve>) -> Self {
        Blocking {
            net: Arc::new(Net {
                settings: net,
                pool: Pool::new(pool::IDLE_TIMEOUT),
                agents: std::sync::Mutex::default(),
            }),
        }
    }

    async fn drive<T: OperationOutput + Send>(&self, run: Drive<T, Self>) -> Driven<T, Self> {
        Ok(drive(&self.net, run.op, run.stream))
    }

    fn close_idle(&self) {
        // Each key's ureq agent holds its kept connections (and its
        // connector those opened ahead): dropped, they close.
        let agents = std::mem::take(
            &mut *self
                .net
                .agents
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        drop(agents);
    }
}
