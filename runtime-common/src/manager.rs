//! The manager: the one flow every runtime runs, above the core and the
//! store, generic over the runtime's [`Driver`].
//!
//! Every networked operation is the same steps: take the attachment's
//! store lock (its wait bounded by the runtime's timer), load the record,
//! build the core's [`Operation`] (reading the init cache once), hand it
//! the warm leg kept from the last operation, drive it, keep the warm leg
//! the outcome hands back, store the changed record with a compare-and-set
//! on the generation it was loaded at, settle the init cache, release the
//! lock. Those decisions are made here and nowhere else.
//!
//! ## How the public methods are documented
//!
//! The runtime crates show these docs as their own (each re-exports the
//! generic types inline, in its module `generic`, and its `HumanPlus`
//! alias page lists the same methods), so a reader of `human_plus_tokio`
//! reads exactly what is written here. Every public method says what it
//! does, what it costs (network or not, the lock), its errors under
//! `# Errors`, and has an example that compiles as this crate's doc test.
//! What a reader sees of an example is runtime-neutral; the setup is in
//! hidden lines (`# `):
//!
//! - A method of a manager: the example is a hidden generic function,
//!   `# async fn example<D: human_plus_runtime::Driver>(human_plus:
//!   &human_plus_runtime::HumanPlus<D>, attachment: &str) ->
//!   Result<(), human_plus_core::Error> {` (one line), the visible calls
//!   (`human_plus.call("conversation:42", attachment, "sheet_get_cell",
//!   json!({"address": "B4"})).await?`), then `# Ok(()) }`. It is marked
//!   `no_run`: it would need a relay.
//! - A constructor or a builder method needs a concrete driver: two hidden
//!   lines declare `Rt`, a driver that sends nothing, and `type HumanPlus =
//!   human_plus_runtime::HumanPlus<Rt>;`. Such an example runs (nothing is
//!   sent).
//! - What a reader would write comes from hidden `use human_plus_core::…`
//!   lines (every runtime crate re-exports those names at its top level),
//!   never from a visible crate path; an owner is a string such as
//!   `"conversation:42"`.
//! - The blocking manager's methods (`blocking.rs`) are written the same
//!   way, without `.await`.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use human_plus_core::{
    Activity, Busy, CallResult, ConflictDetection, Discovery, Error, InitCache, ManagerConfig,
    Operation, OperationOutput, Outcome, Owner, OwnerKey, Participant, ReceiveLeg, Seen,
    StoreErrorKind, SurfaceAttachment, SurfaceChanges, SurfaceInvitation, SurfaceRevision,
    TransportError, TransportErrorKind, WarmLeg,
};
use human_plus_store::{
    AsyncAttachmentStore, DEFAULT_LEASE, DEFAULT_LOCK_WAIT, InMemoryAttachmentStore, LockGuard,
};
use tracing::Instrument;

use crate::driver::{Drive, Driver, Flavour, KeptStream, ManagerOf, NetSettings, ResolverOf};
use crate::entropy::{OsEntropy, os_entropy};
use crate::kept::{KeptLegBounds, KeptLegs};
use crate::lease::{Held, Keep, Keeper, Kept, Ticket, keep_beside};
use crate::parts::Parts;
use crate::tls::{TlsRoots, client_config};

/// The default bound on each connection step: 10 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a shutdown lets the operations in flight finish by default:
/// 10 s, within the 30 s an orchestrator commonly grants a stopping
/// process (Kubernetes' `terminationGracePeriodSeconds`), and longer than a
/// call on a page that answers at all.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How much longer than its grace a shutdown waits for its operations to
/// store their records and give their locks back themselves.
const SHUTDOWN_SETTLE: Duration = Duration::from_secs(2);

/// What an attach that proves itself gives back
/// ([`HumanPlus::attach_verified`], [`HumanPlus::attach_as`]).
///
/// The attachment's own JSON is the store's record, relay token included:
/// send [`SurfaceAttachment::summary`] on, never the attachment.
#[derive(Debug, Clone)]
pub struct Attached {
    /// The stored attachment.
    pub attachment: SurfaceAttachment,
    /// What the verification found (the admitted tools), when this call
    /// created the attachment; `None` when an existing one was returned
    /// and nothing was sent.
    pub discovery: Option<Discovery>,
    /// Whether this call stored a new attachment (or replaced an ended one
    /// under the same key); false when the existing one was returned.
    pub created: bool,
}

/// The Human+ manager of an async runtime: attaches an agent to the
/// surfaces people hand it (a sheet, a graph, a canvas a person has open)
/// and runs the agent's operations on them, through the relay.
///
/// `human_plus_tokio::HumanPlus` and `human_plus_async_std::HumanPlus` are
/// this type over their runtime's driver `D`; `S` is the attachment store.
/// Make one per process and share it: it is cheap to clone (an [`Arc`]
/// inside), `Send + Sync`, and every future it returns is `Send`. It keeps
/// the kept connections, the warm legs and the renewal of the locks of
/// every attachment it serves.
///
/// | to | call | network |
/// |---|---|---|
/// | attach the surface a person handed over (a share link, read by [`SurfaceInvitation::from_link`]), proven first | [`attach_verified`](HumanPlus::attach_verified) | yes: the tools are listed once |
/// | … under a key of the caller's (a conversation id), idempotently, and find it again | [`attach_as`](HumanPlus::attach_as), [`find`](HumanPlus::find) | `attach_as`: yes, unless already attached |
/// | attach without sending anything (a mistake in the link shows at the first operation) | [`attach`](HumanPlus::attach) | no |
/// | list the tools local trust admits | [`tools`](HumanPlus::tools), [`tools_with_timeout`](HumanPlus::tools_with_timeout) | yes |
/// | call one, pinned to the revision last seen | [`call`](HumanPlus::call), [`call_with_timeout`](HumanPlus::call_with_timeout) | yes |
/// | learn what somebody else changed, and who | [`changes_since`](HumanPlus::changes_since), [`changes_since_with_timeout`](HumanPlus::changes_since_with_timeout) | yes |
/// | tell the person what the agent is doing | [`announce`](HumanPlus::announce), [`announce_with_timeout`](HumanPlus::announce_with_timeout) | yes |
/// | what the receive legs saw (a person active, the tools changed) | [`take_seen`](HumanPlus::take_seen), [`listing_current_for`](HumanPlus::listing_current_for) | no |
/// | the attachment itself | [`status`](HumanPlus::status), [`conflict_detection`](HumanPlus::conflict_detection) | no |
/// | leave the surface | [`detach`](HumanPlus::detach) | only with [`unregister_on_detach`](ManagerConfig::unregister_on_detach) |
/// | stop cleanly (SIGTERM) | [`shutdown`](HumanPlus::shutdown) | no |
///
/// Every operation names the attachment's **owner** (the conversation, user
/// or job it belongs to: any [`Owner`], such as the string
/// `"conversation:42"`) and its **id** ([`SurfaceAttachment::id`]); an
/// operation by another owner is refused. The id locates the record and is
/// not a credential: a service keeps it with its conversation.
///
/// **Which store.** [`HumanPlus::new`] keeps attachments in memory, in this
/// process only: right for one process. Several processes or replicas that
/// serve the same conversations share a Redis store
/// (`AsyncRedisAttachmentStore`, feature `redis` of `human-plus-tokio` and
/// `human-plus-async-std`), given with
/// `HumanPlus::builder(config).store(store).build()?`
/// ([`HumanPlusBuilder::store`]).
///
/// Each networked operation holds the attachment's store lock while it
/// runs, its short lease renewed meanwhile ([`HumanPlusBuilder::lock_lease`]);
/// a lock another worker holds is answered [`Error::Busy`] after the lock
/// wait. [`HumanPlus::shutdown`] gives back every lock its running
/// operations hold and closes its kept legs and connections; it starts
/// nothing more. Dropping the last handle closes what the manager keeps as
/// far as a drop can (no operation can be running then).
///
/// Each operation runs in a `human_plus.<operation>` tracing span
/// (attachment id, tool, receive leg). The relay token never appears in a
/// span, an event, an error or `Debug` output.
///
/// ```no_run
/// # use human_plus_core::{Error, LinkOptions, Participant, SurfaceInvitation};
/// # use serde_json::json;
/// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, link: &str) -> Result<(), human_plus_core::Error> {
/// // The link the person handed over, for conversation 42:
/// let invitation = SurfaceInvitation::from_link(link, &LinkOptions::default())?;
/// let owner = "conversation:42";
/// let participant = Participant::new("agent-1", "Assistant", "#7c3aed");
/// let attachment = human_plus.attach(owner, invitation, participant).await?;
/// let id = attachment.id(); // keep it with the conversation
///
/// let cell = human_plus.call(owner, id, "sheet_get_cell", json!({"address": "B4"})).await?;
/// println!("{}", cell.text); // framed as untrusted data: what the model reads
/// match human_plus.call(owner, id, "sheet_set_cell", json!({"address": "B4", "value": "12"})).await {
///     Ok(written) => println!("{}", written.text),
///     // A person changed the sheet since the read: nothing was written.
///     Err(Error::SurfaceChangedUnderYou(refusal)) => println!("{refusal}"),
///     Err(e) => return Err(e),
/// }
/// let changes = human_plus.changes_since(owner, id).await?;
/// println!("{}", changes.describe());
/// # Ok(()) }
/// ```
pub struct HumanPlus<D: Driver, S = InMemoryAttachmentStore> {
    inner: Arc<Inner<D, S>>,
}

/// A warm attachment's leg and open stream, between operations.
type WarmSlot<D> = (WarmLeg, Option<<D as Driver>::Stream>);

struct Inner<D: Driver, S> {
    config: ManagerConfig,
    store: Arc<S>,
    driver: D,
    init: Mutex<InitCache>,
    /// Warm attachments' receive legs between operations (warm mode),
    /// bounded ([`HumanPlusBuilder::kept_legs`]).
    warm: Mutex<KeptLegs<WarmSlot<D>>>,
    /// What operations' receive legs showed, per attachment, not yet taken
    /// ([`HumanPlus::take_seen`]).
    seen: Mutex<HashMap<String, Seen>>,
    /// The attachments whose store lock an operation of this manager holds
    /// now, and the lock: another operation on one of them waits its turn
    /// for as long as its own timeout allows, not for the store's lock
    /// wait; a shutdown gives each back.
    holding: Mutex<HashMap<String, Arc<Held>>>,
    /// The keeper thread of a blocking manager's leases (unused by an
    /// async manager, which renews beside each operation); it also closes
    /// a blocking manager's idle kept legs on time.
    keeper: Keeper,
    /// Whether the keeper thread sweeps this manager's idle kept legs now
    /// (a blocking manager keeping legs), and the ticket of that sweep.
    sweeping: Arc<AtomicBool>,
    sweep: Mutex<Option<Ticket>>,
    /// How long a kept leg may go unused.
    kept_leg_idle: Duration,
    /// Set by [`HumanPlus::shutdown`]: nothing more starts.
    shut: AtomicBool,
    connect_timeout: Duration,
    lock_lease: Duration,
    lock_wait: Duration,
    shutdown_grace: Duration,
}

impl<D: Driver, S> Clone for HumanPlus<D, S> {
    fn clone(&self) -> Self {
        HumanPlus {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<D: Driver, S> fmt::Debug for HumanPlus<D, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HumanPlus")
            .field("config", &self.inner.config)
            .field("connect_timeout", &self.inner.connect_timeout)
            .field("lock_lease", &self.inner.lock_lease)
            .field("lock_wait", &self.inner.lock_wait)
            .finish_non_exhaustive()
    }
}

impl<D: Driver> HumanPlus<D, InMemoryAttachmentStore> {
    /// A manager with an in-memory store, the webpki roots, the system
    /// resolver and the default timeouts ([`HumanPlusBuilder::new`]'s).
    ///
    /// The in-memory store keeps attachments in this process only: right for one
    /// process. Processes or replicas that share conversations give
    /// [`HumanPlus::builder`] a Redis store instead. Make one manager per process
    /// and clone it where it is needed.
    ///
    /// Should the TLS configuration fail to build (it does not with the
    /// bundled roots), every HTTPS request fails with a TLS transport error;
    /// use [`HumanPlus::builder`] to see such an error up front.
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// let config = ManagerConfig::new(
    ///     EgressPolicy::new(["relay.example"]).egress_proxy("http://egress.internal:3128"),
    ///     TrustPolicy::allowing(["sheet_get_cell", "sheet_set_cell", "changes_since"], NO_PINS),
    /// );
    /// let human_plus = HumanPlus::new(config); // one per process: clone it to share
    /// assert!(human_plus.store().is_empty());
    /// ```
    #[must_use]
    pub fn new(config: ManagerConfig) -> Self {
        HumanPlus::from_parts(HumanPlusBuilder::new(config).parts())
    }

    /// A builder starting from the defaults of [`HumanPlus::new`]: the store
    /// ([`HumanPlusBuilder::store`], a Redis store for several processes or
    /// replicas), TLS roots, resolver, connection timeout, lock lease and lock
    /// wait. [`HumanPlusBuilder::build`] makes the manager.
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use std::time::Duration;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// let human_plus = HumanPlus::builder(config)
    ///     .connect_timeout(Duration::from_secs(5))
    ///     .lock_wait(Duration::from_millis(250)) // then attachment_busy: put the job back
    ///     .build()?;
    /// # assert!(human_plus.store().is_empty());
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn builder(config: ManagerConfig) -> HumanPlusBuilder<D> {
        HumanPlusBuilder::new(config)
    }
}

impl<D: Driver, S> HumanPlus<D, S> {
    /// The manager made of `parts`: what [`HumanPlusBuilder::build`] does for an
    /// async runtime (through [`Flavour::manager`]). A service uses
    /// [`HumanPlus::new`] or [`HumanPlus::builder`]; this is for a runtime crate.
    /// Warm mode is turned off when the driver cannot keep a stream between
    /// operations ([`KeptStream::KEPT`]).
    ///
    /// ```no_run
    /// # use human_plus_runtime::{HumanPlus, InMemoryAttachmentStore, Parts};
    /// # fn example<D: human_plus_runtime::Driver>(parts: Parts<D, InMemoryAttachmentStore>) {
    /// let human_plus = HumanPlus::from_parts(parts);
    /// # let _: HumanPlus<D> = human_plus; }
    /// ```
    #[must_use]
    pub fn from_parts(parts: Parts<D, S>) -> Self {
        let mut config = parts.config;
        if !<D::Stream as KeptStream>::KEPT || parts.kept_legs.keeps_none() {
            config.transport.warm = false;
        }
        HumanPlus {
            inner: Arc::new(Inner {
                config,
                store: Arc::new(parts.store),
                driver: parts.driver,
                init: Mutex::new(InitCache::new()),
                warm: Mutex::new(KeptLegs::new(parts.kept_legs)),
                seen: Mutex::new(HashMap::new()),
                holding: Mutex::new(HashMap::new()),
                keeper: Keeper::default(),
                sweeping: Arc::new(AtomicBool::new(false)),
                sweep: Mutex::new(None),
                kept_leg_idle: parts.kept_legs.idle,
                shut: AtomicBool::new(false),
                connect_timeout: parts.connect_timeout,
                lock_lease: parts.lock_lease,
                lock_wait: parts.lock_wait,
                shutdown_grace: parts.shutdown_grace,
            }),
        }
    }

    /// The manager's configuration: the egress and trust policies, the transport
    /// (timeouts, the receive leg, warm mode) and the result guard it was made
    /// with.
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>) {
    /// let timeout = human_plus.config().transport.timeout; // each exchange's bound
    /// println!("a call waits at most {timeout:?} for the page");
    /// # }
    /// ```
    #[must_use]
    pub fn config(&self) -> &ManagerConfig {
        &self.inner.config
    }

    /// The attachment store: the in-memory store unless the builder was given
    /// another ([`HumanPlusBuilder::store`]).
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>) {
    /// println!("{} attachments kept in this process", human_plus.store().len());
    /// # }
    /// ```
    #[must_use]
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The runtime's driver (`human_plus_tokio::Tokio`,
    /// `human_plus_async_std::AsyncIo`): for a runtime's own use, never needed by
    /// a service.
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver + std::fmt::Debug>(human_plus: &human_plus_runtime::HumanPlus<D>) {
    /// println!("{:?}", human_plus.driver());
    /// # }
    /// ```
    #[must_use]
    pub fn driver(&self) -> &D {
        &self.inner.driver
    }
}

/// The operations, for the names of their spans.
#[derive(Debug, Clone, Copy)]
enum Op {
    Tools,
    Call,
    ChangesSince,
    Announce,
    Detach,
}

fn leg_label(leg: &ReceiveLeg) -> &'static str {
    match leg {
        ReceiveLeg::Sse => "sse",
        ReceiveLeg::FancyPoll { .. } => "fancy_poll",
        ReceiveLeg::BrokerPoll { .. } => "broker_poll",
    }
}

fn op_span(op: Op, attachment: &str, tool: &str, leg: &ReceiveLeg) -> tracing::Span {
    let leg = leg_label(leg);
    match op {
        Op::Tools => tracing::info_span!("human_plus.tools", attachment = %attachment, leg),
        Op::Call => {
            tracing::info_span!("human_plus.call", attachment = %attachment, tool = %tool, leg)
        }
        Op::ChangesSince => {
            tracing::info_span!("human_plus.changes_since", attachment = %attachment, leg)
        }
        Op::Announce => tracing::info_span!("human_plus.announce", attachment = %attachment, leg),
        Op::Detach => tracing::info_span!("human_plus.detach", attachment = %attachment, leg),
    }
}

/// What builds an [`Operation`] from the loaded record, the owner, the
/// configuration, the init cache and the clock.
trait Start<T>:
    FnOnce(
        SurfaceAttachment,
        &OwnerKey,
        &ManagerConfig,
        &InitCache,
        Instant,
    ) -> Result<Operation<T>, Error>
    + Send
{
}

impl<T, F> Start<T> for F where
    F: FnOnce(
            SurfaceAttachment,
            &OwnerKey,
            &ManagerConfig,
            &InitCache,
            Instant,
        ) -> Result<Operation<T>, Error>
        + Send
{
}

impl<D: Driver, S: AsyncAttachmentStore + 'static> HumanPlus<D, S> {
    /// Attaches the agent, as `participant`, to the surface `invitation` names,
    /// for `owner`: checks the invitation's relay against the egress policy,
    /// mints an attachment (a new id and client id, nothing learnt yet) and
    /// stores it. **Nothing is sent**: a wrong token, an ended session or a
    /// wrong relay path shows at the first operation (such as
    /// [`HumanPlus::tools`]), and the record stays in the store until
    /// [`HumanPlus::detach`] or the store's time to live.
    /// [`HumanPlus::attach_verified`] proves the link first and keeps nothing
    /// when it fails; [`HumanPlus::attach_as`] attaches under a key of the
    /// caller's, idempotently.
    ///
    /// The invitation is what a person handed over: one link, read by
    /// [`SurfaceInvitation::from_link`]. What `attach` returns is the store's
    /// record, relay token included, and its own JSON (`serde`) is that record:
    /// never send it on or log it. [`SurfaceAttachment::summary`] is what a
    /// service may show or send on (`AttachmentSummary`, without the token); keep
    /// [`SurfaceAttachment::id`] with the conversation.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`] for an empty owner; [`Error::EgressRefused`] when
    /// the egress policy refuses the invitation's relay; [`Error::ShutDown`]
    /// after [`HumanPlus::shutdown`]; the store's ([`Error::Store`]).
    ///
    /// ```no_run
    /// # use human_plus_core::{LinkOptions, Participant, SurfaceInvitation};
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, link: &str) -> Result<(), Box<dyn std::error::Error>> {
    /// let invitation = SurfaceInvitation::from_link(link, &LinkOptions::default())?;
    /// let participant = Participant::new("agent-1", "Assistant", "#7c3aed");
    /// let attachment = human_plus.attach("conversation:42", invitation, participant).await?;
    /// let id = attachment.id(); // what every operation names, with the owner
    /// let shown = serde_json::to_string(&attachment.summary())?; // without the token
    /// # let _ = (id, shown);
    /// # Ok(()) }
    /// ```
    pub fn attach<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> impl Future<Output = Result<SurfaceAttachment, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let span = tracing::info_span!(
            "human_plus.attach",
            attachment = tracing::field::Empty,
            surface = human_plus_core::surface_label(invitation.surface_id()),
        );
        async move {
            let owner = owner?;
            self.refuse_if_shut_down()?;
            let record = human_plus_core::attach(
                &owner,
                invitation,
                participant,
                &self.inner.config.egress,
                &mut OsEntropy,
            )?;
            tracing::Span::current().record("attachment", record.id());
            self.inner.store.put(&record, None).await?;
            tracing::debug!("attached");
            Ok(record)
        }
        .instrument(span)
    }

    /// [`HumanPlus::attach`], proven before it is kept: the attachment is
    /// minted, the session is asked for its tools (an MCP `initialize` and
    /// `tools/list`, through the trust policy, bounded by the exchange
    /// timeout), and only when the surface answered is the record stored.
    /// A wrong token, an ended session or a wrong relay path is its error
    /// here, at attach time, and leaves no record behind.
    ///
    /// # Errors
    /// As [`HumanPlus::attach`], and what [`HumanPlus::tools`] answers
    /// ([`Error::AttachmentUnauthorized`] for a token the relay refuses,
    /// [`Error::SurfaceUnavailable`] for an ended session,
    /// [`Error::RelayPathNotFound`](human_plus_core::Error::RelayPathNotFound)
    /// for a share link's relay path that is wrong, a timeout when no page
    /// answers, undeclared trust).
    ///
    /// What a service calls when the person hands over a link: one round trip
    /// set (`initialize`, `tools/list`) more than [`HumanPlus::attach`], and a
    /// mistake in the link is told at once, to the person who can fix it.
    ///
    /// ```no_run
    /// # use human_plus_core::{LinkOptions, Participant, SurfaceInvitation};
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, link: &str) -> Result<(), human_plus_core::Error> {
    /// let invitation = SurfaceInvitation::from_link(link, &LinkOptions::default())?;
    /// let participant = Participant::new("agent-1", "Assistant", "#7c3aed");
    /// let attached = human_plus.attach_verified("conversation:42", invitation, participant).await?;
    /// let id = attached.attachment.id(); // stored: the session answered
    /// if let Some(discovery) = &attached.discovery {
    ///     println!("{} tools admitted", discovery.tools.len());
    /// }
    /// # let _ = id;
    /// # Ok(()) }
    /// ```
    pub fn attach_verified<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> impl Future<Output = Result<Attached, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let span = tracing::info_span!(
            "human_plus.attach",
            attachment = tracing::field::Empty,
            surface = human_plus_core::surface_label(invitation.surface_id()),
        );
        async move {
            let owner = owner?;
            self.refuse_if_shut_down()?;
            let record = human_plus_core::attach(
                &owner,
                invitation,
                participant,
                &self.inner.config.egress,
                &mut OsEntropy,
            )?;
            tracing::Span::current().record("attachment", record.id());
            self.verify_and_store(&owner, record, None).await
        }
        .instrument(span)
    }

    /// Attaches `owner` under `key`, a name of the caller's (a
    /// conversation id, a job's thread), idempotently: the attachment's id
    /// is derived from the owner and the key
    /// ([`keyed_attachment_id`](human_plus_core::keyed_attachment_id)), so
    /// a service needs no map of its own from its conversations to
    /// attachments, and any replica finds it ([`HumanPlus::find`]).
    ///
    /// When an attachment is stored under the key, still `attached`, with
    /// the same invitation, it is returned as it is: nothing is sent
    /// ([`Attached::created`] false). Otherwise (none yet, an ended one, or
    /// one to another session or token) a new one is verified as
    /// [`HumanPlus::attach_verified`] verifies, and stored in its place
    /// only once the surface answered; one to the same session takes the
    /// old one's revision over, so its first call is pinned. Two callers
    /// racing on one key get one attachment.
    ///
    /// # Errors
    /// As [`HumanPlus::attach_verified`], and [`Error::InvalidAttachment`]
    /// for an empty key or one over 256 bytes.
    ///
    /// ```no_run
    /// # use human_plus_core::{LinkOptions, Participant, SurfaceInvitation};
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, link: &str) -> Result<(), human_plus_core::Error> {
    /// let invitation = SurfaceInvitation::from_link(link, &LinkOptions::default())?;
    /// let participant = Participant::new("agent-1", "Assistant", "#7c3aed");
    /// // The same owner and key give the same attachment, on any replica.
    /// let attached = human_plus.attach_as("user:7", "conversation:42", invitation, participant).await?;
    /// if !attached.created {
    ///     println!("already attached: nothing was sent");
    /// }
    /// let id = attached.attachment.id();
    /// # let _ = id;
    /// # Ok(()) }
    /// ```
    pub fn attach_as<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        key: &str,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> impl Future<Output = Result<Attached, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let key = key.to_owned();
        let span = tracing::info_span!(
            "human_plus.attach",
            attachment = tracing::field::Empty,
            surface = human_plus_core::surface_label(invitation.surface_id()),
        );
        async move {
            let owner = owner?;
            self.refuse_if_shut_down()?;
            let mut record = human_plus_core::attach_keyed(
                &owner,
                &key,
                invitation,
                participant,
                &self.inner.config.egress,
                &mut OsEntropy,
            )?;
            tracing::Span::current().record("attachment", record.id());
            let existing = self.inner.store.get(record.id()).await?;
            if let Some(existing) = existing.as_ref() {
                existing.check_owner(&owner)?;
                if reusable(existing, &record) {
                    tracing::debug!("attached already");
                    return Ok(Attached {
                        attachment: existing.clone(),
                        discovery: None,
                        created: false,
                    });
                }
                record.carry_over(existing);
                record.succeed(existing);
            }
            let replacing = existing.as_ref().map(SurfaceAttachment::generation);
            match self
                .verify_and_store(&owner, record.clone(), replacing)
                .await
            {
                Err(Error::StoreConflict { .. }) => {
                    // Another caller attached under this key meanwhile:
                    // theirs is the attachment, when it is what was asked.
                    match self.inner.store.get(record.id()).await? {
                        Some(theirs)
                            if theirs.check_owner(&owner).is_ok() && reusable(&theirs, &record) =>
                        {
                            Ok(Attached {
                                attachment: theirs,
                                discovery: None,
                                created: false,
                            })
                        }
                        _ => Err(Error::StoreConflict {
                            expected: replacing,
                            found: None,
                        }),
                    }
                }
                other => other,
            }
        }
        .instrument(span)
    }

    /// The attachment `owner` keeps under `key` ([`HumanPlus::attach_as`]),
    /// in any state, or `None`. No network, no lock.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::InvalidAttachment`] for an empty
    /// or over-long key, [`Error::AttachmentUnauthorized`] should the
    /// record belong to another owner, or the store's.
    ///
    /// ```no_run
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>) -> Result<(), human_plus_core::Error> {
    /// match human_plus.find("user:7", "conversation:42").await? {
    ///     Some(attachment) if attachment.is_attached() => println!("call through {}", attachment.id()),
    ///     Some(_) => println!("it ended: ask the person for a new link"),
    ///     None => println!("no attachment yet: ask the person for the link"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn find<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        key: &str,
    ) -> impl Future<Output = Result<Option<SurfaceAttachment>, Error>> + Send + use<'s, D, S, O>
    {
        let owner = OwnerKey::of(owner);
        let key = key.to_owned();
        async move {
            let owner = owner?;
            let id = human_plus_core::keyed_attachment_id(&owner, &key)?;
            match self.inner.store.get(&id).await? {
                Some(record) => {
                    record.check_owner(&owner)?;
                    Ok(Some(record))
                }
                None => Ok(None),
            }
        }
    }

    /// Verifies the unstored `record` (a `tools` operation over it, no
    /// lock: nobody else can reach a record that is not stored) and stores
    /// it once the surface answered: an insert, or a compare-and-set on
    /// `replacing`, the generation of the record it takes the place of.
    async fn verify_and_store(
        &self,
        owner: &OwnerKey,
        record: SurfaceAttachment,
        replacing: Option<u64>,
    ) -> Result<Attached, Error> {
        let inner = &*self.inner;
        inner.config.trust.assert_declared()?;
        let id = record.id().to_owned();
        let op = {
            let cache = inner.init.lock().unwrap_or_else(PoisonError::into_inner);
            Operation::tools(
                record.clone(),
                owner,
                &inner.config,
                &cache,
                os_entropy(),
                D::now(),
            )?
            // The first call is pinned to the page as it was now, when the
            // page keeps a change feed (issue 39).
            .learning_revision()
        };
        let (mut outcome, stream) =
            Box::pin(inner.driver.drive(Drive { op, stream: None })).await?;
        let verified = outcome.record.take().unwrap_or(record);
        let warm = outcome.warm.take();
        let seen = outcome.seen;
        let discovery = {
            let mut cache = inner.init.lock().unwrap_or_else(PoisonError::into_inner);
            outcome.settle(&mut cache, Ok(()))?
        };
        inner.store.put(&verified, replacing).await?;
        if seen != Seen::default() {
            let mut kept = inner.seen.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = kept.entry(id.clone()).or_default();
            *entry = entry.merged(seen);
        }
        if let Some(leg) = warm {
            let closed = self.kept().put(id, (leg, stream), D::now());
            drop(closed);
        }
        tracing::debug!("attached and verified");
        Ok(Attached {
            attachment: verified,
            discovery: Some(discovery),
            created: true,
        })
    }

    /// Lists the surface's tools and admits them through the trust policy: the
    /// admitted ones (with their definitions and digests, the digest being what
    /// a policy pins), and what was withheld and why. Reserved confirmation
    /// tools (`confirm`, `approve`, ...) are always withheld. It initialises the
    /// MCP session first when this process has not yet (one round trip more).
    /// Holds the attachment's lock while it runs.
    ///
    /// # Errors
    /// [`Error::ToolRefused`] when the trust policy declares nothing (nothing is
    /// sent) or a pinned tool's definition changed; and, as every networked
    /// operation, the attachment's ([`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`]
    /// for another owner, [`Error::NotAttached`] once detached or ended); the
    /// lock's ([`Error::Busy`]: another worker holds the conversation, nothing was
    /// sent; [`Error::Timeout`] behind another operation of this manager); the
    /// relay's ([`Error::SurfaceUnavailable`] when the person's page ended the
    /// session, [`Error::AttachmentUnauthorized`] for a token the relay refuses,
    /// [`Error::RelayPathNotFound`], [`Error::RelayFailed`], [`Error::Protocol`]);
    /// the connection's ([`Error::EgressRefused`] for an address the egress policy
    /// refuses, [`Error::Transport`], [`Error::ProxyAuthRequired`],
    /// [`Error::Timeout`]); [`Error::ShutDown`] after [`HumanPlus::shutdown`]; the
    /// store's ([`Error::Store`], [`Error::StoreConflict`] when another worker
    /// wrote the record first). [`Error::is_retryable`] says which may simply be
    /// tried again.
    ///
    /// ```no_run
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let discovery = human_plus.tools("conversation:42", attachment).await?;
    /// for tool in &discovery.tools {
    ///     println!("{} {}", tool.name(), tool.digest());
    /// }
    /// for withheld in &discovery.withheld {
    ///     println!("withheld {} ({})", withheld.name, withheld.code());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn tools<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<Discovery, Error>> + Send + use<'s, D, S, O> {
        self.tools_within(OwnerKey::of(owner), attachment, None)
    }

    /// Calls `tool` with `arguments` (a JSON object, or null for `{}`), pinned
    /// to the revision last seen, and returns its result framed as untrusted
    /// data ([`CallResult::text`](human_plus_core::CallResult::text), what a model
    /// reads) with the revision it carried, now stored for the next call. The
    /// exchange is bounded by the configured
    /// [`TransportConfig::timeout`](human_plus_core::TransportConfig::timeout)
    /// ([`HumanPlus::call_with_timeout`] sets its own). Holds the attachment's
    /// lock while it runs.
    ///
    /// # Errors
    /// [`Error::SurfaceChangedUnderYou`] when a person changed the surface since
    /// the pinned revision: nothing was applied, and the message (written for
    /// the model) says what changed and to read again; the next call is pinned
    /// to the current revision. [`Error::CallTimeout`] or
    /// [`Error::DeliveryUnknown`] when the call was sent and its answer never
    /// came: it may have been applied ([`Error::outcome_unknown`]), so read
    /// before trying again. [`Error::ToolRefused`] for a tool the trust policy
    /// does not admit or the surface did not offer (nothing is sent);
    /// [`Error::InvalidArguments`] for arguments that are not an object;
    /// [`Error::ToolFailed`] and [`Error::SurfaceError`] when the tool or the
    /// surface reported failure (framed); [`Error::ConflictDetectionUnavailable`]
    /// under [`ManagerConfig::require_revision`]; and, as every networked
    /// operation, the attachment's ([`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`]
    /// for another owner, [`Error::NotAttached`] once detached or ended); the
    /// lock's ([`Error::Busy`]: another worker holds the conversation, nothing was
    /// sent; [`Error::Timeout`] behind another operation of this manager); the
    /// relay's ([`Error::SurfaceUnavailable`] when the person's page ended the
    /// session, [`Error::AttachmentUnauthorized`] for a token the relay refuses,
    /// [`Error::RelayPathNotFound`], [`Error::RelayFailed`], [`Error::Protocol`]);
    /// the connection's ([`Error::EgressRefused`] for an address the egress policy
    /// refuses, [`Error::Transport`], [`Error::ProxyAuthRequired`],
    /// [`Error::Timeout`]); [`Error::ShutDown`] after [`HumanPlus::shutdown`]; the
    /// store's ([`Error::Store`], [`Error::StoreConflict`] when another worker
    /// wrote the record first). [`Error::is_retryable`] says which may simply be
    /// tried again.
    ///
    /// ```no_run
    /// # use human_plus_core::Error;
    /// # use serde_json::json;
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let owner = "conversation:42";
    /// let cell = human_plus.call(owner, attachment, "sheet_get_cell", json!({"address": "B4"})).await?;
    /// println!("{}", cell.text); // framed as untrusted data
    /// match human_plus.call(owner, attachment, "sheet_set_cell", json!({"address": "B4", "value": "12"})).await {
    ///     Ok(written) => println!("now at {:?}", written.revision),
    ///     // The person edited the sheet since the read: nothing was written.
    ///     Err(Error::SurfaceChangedUnderYou(refusal)) => println!("{refusal}"),
    ///     // It may have been applied: read before deciding.
    ///     Err(e) if e.outcome_unknown() => println!("{e}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn call<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
    ) -> impl Future<Output = Result<CallResult, Error>> + Send + use<'s, D, S, O> {
        self.call_within(OwnerKey::of(owner), attachment, tool, arguments, None, None)
    }

    /// [`HumanPlus::call`], pinned to `revision`: the revision the decision
    /// to make this call was made at (HTTP's `If-Match`), not the
    /// attachment's stored pin. The surface refuses it if anything changed
    /// since that revision, whatever other calls of the conversation learnt
    /// meanwhile. What parallel tool calls of one model turn, or a queue's
    /// jobs decided at one read, each carry: a refusal told to one of them
    /// never moves another's pin. The revision to carry is
    /// [`CallResult::revision_to_carry`] of the read the decision was made
    /// on (or a refusal's
    /// [`SurfaceChangedUnderYou::revision_to_carry`](human_plus_core::SurfaceChangedUnderYou::revision_to_carry),
    /// or a feed's [`SurfaceChanges::revision`]); the plain
    /// [`HumanPlus::call`] stays right for one model taking one turn at a
    /// time.
    ///
    /// # Errors
    /// As [`HumanPlus::call`]; a refusal is
    /// [`Error::SurfaceChangedUnderYou`], nothing applied.
    ///
    /// ```no_run
    /// # use serde_json::json;
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let owner = "conversation:42";
    /// let read = human_plus.call(owner, attachment, "sheet_get_range", json!({"range": "A1:B9"})).await?;
    /// // The model decides two writes from this one read; each carries it.
    /// if let Some(at) = read.revision_to_carry().cloned() {
    ///     let a = human_plus.call_at(owner, attachment, "sheet_set_cell", json!({"address": "A3", "value": "1"}), at.clone());
    ///     let b = human_plus.call_at(owner, attachment, "sheet_set_cell", json!({"address": "A9", "value": "2"}), at);
    ///     let (a, b) = (a.await, b.await);
    ///     # let _ = (a, b);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn call_at<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
        revision: SurfaceRevision,
    ) -> impl Future<Output = Result<CallResult, Error>> + Send + use<'s, D, S, O> {
        self.call_within(
            OwnerKey::of(owner),
            attachment,
            tool,
            arguments,
            Some(revision),
            None,
        )
    }

    /// [`HumanPlus::call_at`], bounded by `timeout` as
    /// [`HumanPlus::call_with_timeout`] is.
    ///
    /// # Errors
    /// As [`HumanPlus::call_at`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use serde_json::json;
    /// # use human_plus_core::SurfaceRevision;
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str, at: SurfaceRevision) -> Result<(), human_plus_core::Error> {
    /// let written = human_plus
    ///     .call_at_with_timeout("conversation:42", attachment, "sheet_set_cell", json!({"address": "B4", "value": "12"}), at, Duration::from_secs(5))
    ///     .await?;
    /// # let _ = written;
    /// # Ok(()) }
    /// ```
    pub fn call_at_with_timeout<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
        revision: SurfaceRevision,
        timeout: Duration,
    ) -> impl Future<Output = Result<CallResult, Error>> + Send + use<'s, D, S, O> {
        self.call_within(
            OwnerKey::of(owner),
            attachment,
            tool,
            arguments,
            Some(revision),
            Some(timeout),
        )
    }

    /// [`HumanPlus::call`], with the call's exchange bounded by `timeout`
    /// instead of the configured
    /// [`TransportConfig::timeout`](human_plus_core::TransportConfig::timeout):
    /// what a server in front of Human+ uses when its client's request says how
    /// long it will wait. The wait for the attachment's lock counts against it
    /// too. A call that was posted and not answered in time is reported as the
    /// core reports it ([`Error::CallTimeout`]: it may have been applied), never
    /// as refused.
    ///
    /// # Errors
    /// As [`HumanPlus::call`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use serde_json::json;
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let cell = human_plus
    ///     .call_with_timeout("conversation:42", attachment, "sheet_get_cell", json!({"address": "B4"}), Duration::from_secs(5))
    ///     .await?;
    /// println!("{}", cell.text);
    /// # Ok(()) }
    /// ```
    pub fn call_with_timeout<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
        timeout: Duration,
    ) -> impl Future<Output = Result<CallResult, Error>> + Send + use<'s, D, S, O> {
        self.call_within(
            OwnerKey::of(owner),
            attachment,
            tool,
            arguments,
            None,
            Some(timeout),
        )
    }

    /// `call`, pinned to `at` and bounded by `timeout` when given.
    fn call_within<'s>(
        &'s self,
        owner: Result<OwnerKey, Error>,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
        at: Option<SurfaceRevision>,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<CallResult, Error>> + Send + use<'s, D, S> {
        let name = tool.to_owned();
        self.operate(
            Op::Call,
            owner,
            attachment,
            tool,
            timeout,
            move |record, owner, config, init, now| {
                let op = Operation::call(
                    record,
                    owner,
                    &name,
                    arguments,
                    config,
                    init,
                    os_entropy(),
                    now,
                )?;
                Ok(match at {
                    Some(at) => op.pinned_to(at),
                    None => op,
                })
            },
        )
    }

    /// [`HumanPlus::tools`], bounded by `timeout` instead of the configured
    /// exchange timeout.
    ///
    /// # Errors
    /// As [`HumanPlus::tools`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let discovery = human_plus.tools_with_timeout("conversation:42", attachment, Duration::from_secs(5)).await?;
    /// # let _ = discovery;
    /// # Ok(()) }
    /// ```
    pub fn tools_with_timeout<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<Discovery, Error>> + Send + use<'s, D, S, O> {
        self.tools_within(OwnerKey::of(owner), attachment, Some(timeout))
    }

    /// `tools`, bounded by `timeout` when given.
    fn tools_within<'s>(
        &'s self,
        owner: Result<OwnerKey, Error>,
        attachment: &str,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Discovery, Error>> + Send + use<'s, D, S> {
        self.operate(
            Op::Tools,
            owner,
            attachment,
            "",
            timeout,
            |record, owner, config, init, now| {
                Operation::tools(record, owner, config, init, os_entropy(), now)
            },
        )
    }

    /// [`HumanPlus::changes_since`], bounded by `timeout` instead of the
    /// configured exchange timeout.
    ///
    /// # Errors
    /// As [`HumanPlus::changes_since`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let changes = human_plus
    ///     .changes_since_with_timeout("conversation:42", attachment, Duration::from_secs(5))
    ///     .await?;
    /// println!("{}", changes.describe());
    /// # Ok(()) }
    /// ```
    pub fn changes_since_with_timeout<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<SurfaceChanges, Error>> + Send + use<'s, D, S, O> {
        self.changes_within(OwnerKey::of(owner), attachment, Some(timeout))
    }

    /// `changes_since`, bounded by `timeout` when given.
    fn changes_within<'s>(
        &'s self,
        owner: Result<OwnerKey, Error>,
        attachment: &str,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<SurfaceChanges, Error>> + Send + use<'s, D, S> {
        self.operate(
            Op::ChangesSince,
            owner,
            attachment,
            "",
            timeout,
            |record, owner, config, init, now| {
                Operation::changes_since(record, owner, config, init, os_entropy(), now)
            },
        )
    }

    /// [`HumanPlus::announce`], bounded by `timeout` instead of the
    /// configured exchange timeout.
    ///
    /// # Errors
    /// As [`HumanPlus::announce`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use human_plus_core::Activity;
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let activity = Activity::new("editing").target("B4");
    /// human_plus.announce_with_timeout("conversation:42", attachment, &activity, Duration::from_secs(2)).await?;
    /// # Ok(()) }
    /// ```
    pub fn announce_with_timeout<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        activity: &Activity,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send + use<'s, D, S, O> {
        self.announce_within(OwnerKey::of(owner), attachment, activity, Some(timeout))
    }

    /// `announce`, bounded by `timeout` when given.
    fn announce_within<'s>(
        &'s self,
        owner: Result<OwnerKey, Error>,
        attachment: &str,
        activity: &Activity,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<(), Error>> + Send + use<'s, D, S> {
        let activity = activity.clone();
        self.operate(
            Op::Announce,
            owner,
            attachment,
            "",
            timeout,
            move |record, owner, config, _init, now| {
                Operation::announce(record, owner, &activity, config, os_entropy(), now)
            },
        )
    }

    /// What the attachment's receive legs have shown since this was last
    /// asked: a `notifications/tools/list_changed` (the surface's tools changed),
    /// a person acting on the surface (`notifications/agent_activity` with
    /// `source: "user"`). It gathers what every operation's leg saw and, in warm
    /// mode ([`TransportConfig::warm`](human_plus_core::TransportConfig::warm),
    /// kept in every runtime), what the kept leg delivered since the last
    /// operation, without waiting. Taking it resets it. No network, no lock.
    ///
    /// This is how a service tells its model "a person has been active on this
    /// surface since your last read", and how the `human-plus mcp` bridge learns
    /// that the surface's tools changed between calls. What was seen is kept in
    /// this manager (this process), not in the store.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::AttachmentMissing`],
    /// [`Error::AttachmentUnauthorized`] for another owner, or the store's.
    ///
    /// ```no_run
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let seen = human_plus.take_seen("conversation:42", attachment).await?;
    /// if seen.person_active {
    ///     println!("a person has been editing: read again before writing");
    /// }
    /// if seen.list_changed {
    ///     let discovery = human_plus.tools("conversation:42", attachment).await?; // list again
    /// #   let _ = discovery;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn take_seen<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<Seen, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        async move {
            self.owned(&owner?, &id).await?;
            let seen = self
                .inner
                .seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id)
                .unwrap_or_default();
            Ok(self
                .kept_leg(&id, WarmLeg::take_seen)
                .map_or(seen, |kept| seen.merged(kept)))
        }
    }

    /// How much longer the admitted listing kept with the attachment's warm
    /// leg stays provably current (the listing rule of
    /// [`TransportConfig::listing_max_age`](human_plus_core::TransportConfig::listing_max_age)),
    /// or `None` when the next [`HumanPlus::tools`] would list again: no warm leg
    /// (warm mode turned off, none kept yet, or closed idle or at the bound of
    /// [`HumanPlusBuilder::kept_legs`]), a surface that did
    /// not declare `tools.listChanged`, a list change seen, a gap, or the
    /// listing's age. Warm mode keeps a leg in every runtime. What the kept leg
    /// delivered since the last operation is read first. No network, no lock.
    ///
    /// # Errors
    /// As [`HumanPlus::take_seen`].
    ///
    /// ```no_run
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// match human_plus.listing_current_for("conversation:42", attachment).await? {
    ///     Some(left) => println!("the tools listed last are current for {left:?} more"),
    ///     None => println!("the next tools() lists again"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn listing_current_for<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<Option<Duration>, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        async move {
            self.owned(&owner?, &id).await?;
            Ok(self
                .kept_leg(&id, |leg| leg.listing_current_for(D::now()))
                .flatten())
        }
    }

    /// Closes every kept leg that has gone unused for the idle time
    /// ([`HumanPlusBuilder::kept_leg_idle`]) now, without an operation:
    /// what a quiet service calls on a timer, as hyper's pool closes its
    /// idle connections on one, so the person's page sees an agent that
    /// stopped working leave on time rather than at the manager's next
    /// operation. Returns how many it closed. Dropping a leg closes its
    /// stream; nothing is sent, no lock is taken. A blocking manager needs
    /// none of this: its keeper thread closes its idle legs by itself. An
    /// async manager spawns nothing of its own, so a service that may go
    /// quiet calls this (every [`HumanPlus::next_idle_close`], or every few
    /// seconds).
    ///
    /// ```no_run
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: human_plus_runtime::HumanPlus<D>) {
    /// // Beside the service (tokio: `tokio::spawn`), for as long as it runs.
    /// loop {
    ///     let wait = human_plus.next_idle_close().unwrap_or(std::time::Duration::from_secs(5));
    ///     D::sleep(wait).await;
    ///     let closed = human_plus.close_idle_legs();
    ///     # let _ = closed;
    /// }
    /// # }
    /// ```
    pub fn close_idle_legs(&self) -> usize {
        let closed = self.kept().expire(D::now());
        let n = closed.len();
        // Dropped outside the set's lock: closing a stream may take a
        // moment.
        drop(closed);
        n
    }

    /// How long until the least recently used kept leg falls idle (when
    /// [`HumanPlus::close_idle_legs`] would close it): `None` when no leg
    /// is kept (or the idle time never ends). No network, no lock.
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>) {
    /// match human_plus.next_idle_close() {
    ///     Some(wait) => println!("a kept leg falls idle in {wait:?}"),
    ///     None => println!("no leg kept"),
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn next_idle_close(&self) -> Option<Duration> {
        let at = self.kept().next_expiry()?;
        Some(at.saturating_duration_since(D::now()))
    }

    /// A blocking manager that kept a leg: its keeper thread closes the
    /// idle ones on time, for as long as any is kept.
    fn sweep_on_keeper(&self) {
        let inner = &*self.inner;
        if inner.sweeping.swap(true, Ordering::SeqCst) {
            return;
        }
        let idle = inner.kept_leg_idle;
        let sweeper: Arc<dyn Keep> = Arc::new(Sweeper::<D, S> {
            inner: Arc::downgrade(&self.inner),
            sweeping: Arc::clone(&inner.sweeping),
            every: (idle / 4).clamp(SWEEP_MIN, SWEEP_MAX),
        });
        let ticket = inner.keeper.keep(sweeper);
        let old = inner
            .sweep
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(ticket);
        drop(old);
    }

    /// Checks that the attachment `id` exists and belongs to `owner`.
    async fn owned(&self, owner: &OwnerKey, id: &str) -> Result<(), Error> {
        let record = self.load(id).await?;
        human_plus_core::status(&record, owner).map(|_| ())
    }

    /// Feeds the attachment's kept leg what its stream delivered since the
    /// last operation (without waiting), then applies `f` to it; `None`
    /// when no leg is kept (none yet, an operation running, or cold).
    fn kept_leg<T>(&self, id: &str, f: impl FnOnce(&mut WarmLeg) -> T) -> Option<T> {
        let mut warm = self.kept();
        let (slot, closed) = warm.peek(id, D::now());
        let found = slot.map(|(leg, stream)| {
            if let Some(s) = stream {
                s.drain_into(leg);
            }
            f(leg)
        });
        drop(warm);
        drop(closed);
        found
    }

    /// The kept legs (warm mode), locked. What the set closes is dropped
    /// after the lock (dropping a stream closes its leg).
    fn kept(&self) -> std::sync::MutexGuard<'_, KeptLegs<WarmSlot<D>>> {
        self.inner
            .warm
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the surface's change feed what changed since the revision the agent
    /// last saw, and by whom: the changes (each with its handle, its kind and
    /// who made it), the current revision, and whether the answer is complete.
    /// What a person changed deserves deference
    /// ([`SurfaceChanges::defer_to`](human_plus_core::SurfaceChanges::defer_to)):
    /// the model should read it again rather than write over it. A surface
    /// without a feed answers [`SurfaceChanges::unavailable`](human_plus_core::SurfaceChanges::unavailable),
    /// which is not evidence that nothing changed. The feed is called like any
    /// tool (pinned, framed), so the trust policy must admit it (the demo
    /// surface names it `changes_since`). Holds the attachment's lock while it
    /// runs.
    ///
    /// # Errors
    /// As [`HumanPlus::call`] (it is a call of the feed tool).
    ///
    /// ```no_run
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let changes = human_plus.changes_since("conversation:42", attachment).await?;
    /// for change in changes.defer_to() {
    ///     println!("re-read {} before touching it", change.handle());
    /// }
    /// println!("{}", changes.describe()); // a sentence for the model
    /// # Ok(()) }
    /// ```
    pub fn changes_since<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<SurfaceChanges, Error>> + Send + use<'s, D, S, O> {
        self.changes_within(OwnerKey::of(owner), attachment, None)
    }

    /// Tells the people on the surface what the agent is doing (a
    /// `notifications/human-plus/activity` notification: an action, a target
    /// handle, a priority), so the page can show it. It waits for the relay's
    /// answer to the POST, not for the surface. Holds the attachment's lock while
    /// it runs.
    ///
    /// # Errors
    /// [`Error::DeliveryUnknown`] when the connection broke after the
    /// notification was written; and, as every networked operation,
    /// the attachment's ([`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`]
    /// for another owner, [`Error::NotAttached`] once detached or ended); the
    /// lock's ([`Error::Busy`]: another worker holds the conversation, nothing was
    /// sent; [`Error::Timeout`] behind another operation of this manager); the
    /// relay's ([`Error::SurfaceUnavailable`] when the person's page ended the
    /// session, [`Error::AttachmentUnauthorized`] for a token the relay refuses,
    /// [`Error::RelayPathNotFound`], [`Error::RelayFailed`], [`Error::Protocol`]);
    /// the connection's ([`Error::EgressRefused`] for an address the egress policy
    /// refuses, [`Error::Transport`], [`Error::ProxyAuthRequired`],
    /// [`Error::Timeout`]); [`Error::ShutDown`] after [`HumanPlus::shutdown`]; the
    /// store's ([`Error::Store`], [`Error::StoreConflict`] when another worker
    /// wrote the record first). [`Error::is_retryable`] says which may simply be
    /// tried again.
    ///
    /// ```no_run
    /// # use human_plus_core::{Activity, Priority};
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let activity = Activity::new("editing").target("B4").priority(Priority::Attention);
    /// human_plus.announce("conversation:42", attachment, &activity).await?;
    /// # Ok(()) }
    /// ```
    pub fn announce<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        activity: &Activity,
    ) -> impl Future<Output = Result<(), Error>> + Send + use<'s, D, S, O> {
        self.announce_within(OwnerKey::of(owner), attachment, activity, None)
    }

    /// What has been observed of the surface's conflict detection: not yet
    /// observed, unavailable (it mints no revision: a concurrent edit would be
    /// lost), minted (every call is pinned) or enforced (it refused a stale pin).
    /// Read from the stored record. No network, no lock.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::AttachmentMissing`],
    /// [`Error::AttachmentUnauthorized`] for another owner, [`Error::NotAttached`],
    /// or the store's.
    ///
    /// ```no_run
    /// # use human_plus_core::ConflictDetection;
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// if human_plus.conflict_detection("conversation:42", attachment).await? == ConflictDetection::Unavailable {
    ///     println!("this surface cannot tell the agent about a person's concurrent edit");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn conflict_detection<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<ConflictDetection, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        async move {
            let owner = owner?;
            let record = self.load(&id).await?;
            human_plus_core::conflict_detection(&record, &owner)
        }
    }

    /// The attachment's record, in any state (attached, detached, or ended by the
    /// relay: `surface_unavailable`, `attachment_unauthorized`): the
    /// state, the invitation, the revision the next call is pinned to, what has
    /// been observed. Read from the store. No network, no lock.
    ///
    /// The record holds the relay token, and its own JSON is the store's
    /// record: send on [`SurfaceAttachment::summary`] (`AttachmentSummary`, no
    /// token), never the record.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::AttachmentMissing`],
    /// [`Error::AttachmentUnauthorized`] for another owner, or the store's.
    ///
    /// ```no_run
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let record = human_plus.status("conversation:42", attachment).await?;
    /// println!("{:?}, pinned to {:?}", record.state(), record.revision());
    /// let summary = record.summary(); // what may be shown or sent on
    /// # let _ = summary;
    /// # Ok(()) }
    /// ```
    pub fn status<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<SurfaceAttachment, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        async move {
            let owner = owner?;
            let record = self.load(&id).await?;
            human_plus_core::status(&record, &owner).cloned()
        }
    }

    /// Leaves the surface: the attachment becomes `detached` (the record is kept,
    /// with its new state) and every later operation on it but
    /// [`HumanPlus::status`] answers [`Error::NotAttached`]. The relay session
    /// (the person's page) stays alive and nothing is sent, unless
    /// [`ManagerConfig::unregister_on_detach`] is set: then it POSTs `unregister`
    /// first, which on the Fancy relay ends the session for the page and every
    /// other agent. Holds the attachment's lock while it runs.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::AttachmentMissing`],
    /// [`Error::AttachmentUnauthorized`], [`Error::NotAttached`] when it is
    /// already detached or ended, [`Error::Busy`], [`Error::ShutDown`], the
    /// store's, and with `unregister_on_detach` the relay's and the transport's.
    ///
    /// ```no_run
    /// # use human_plus_core::AttachmentState;
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let record = human_plus.detach("conversation:42", attachment).await?;
    /// assert_eq!(record.state(), AttachmentState::Detached);
    /// # Ok(()) }
    /// ```
    pub fn detach<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<SurfaceAttachment, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        self.operate(
            Op::Detach,
            owner,
            attachment,
            "",
            None,
            |record, owner, config, _init, now| {
                Operation::detach(record, owner, config, os_entropy(), now)
            },
        )
    }

    /// Shuts the manager down, keeping one writer per conversation:
    /// nothing more starts (every operation, and `attach`, answers
    /// [`Error::ShutDown`]: nothing was sent, retryable on another worker);
    /// the operations in flight get the shutdown's grace
    /// ([`HumanPlusBuilder::shutdown_grace`], 10 s by default) to finish,
    /// each keeping its lock, so another worker cannot write beside it; one
    /// still running when the grace ends is ended then (a call that was
    /// sent is answered [`Error::CallTimeout`], outcome unknown; one that
    /// had sent nothing that acts, [`Error::ShutDown`]) and stores its
    /// record; only then is its lock given back. It returns when every
    /// operation has ended (at the latest shortly after the grace: a lock
    /// still held then, by an operation stuck in the store, is given back
    /// and logged). Its kept legs and connections are closed. Calling it
    /// again does nothing more. It cannot fail: a lock it could not give
    /// back (the store unreachable) is logged and frees when its lease runs
    /// out.
    ///
    /// What a service calls when it is told to stop (SIGTERM: a rolling deploy,
    /// a node drained), before it exits:
    ///
    /// ```no_run
    /// # async fn serve<D: human_plus_runtime::Driver, S: human_plus_store::AsyncAttachmentStore + 'static>(
    /// #     human_plus: human_plus_runtime::HumanPlus<D, S>,
    /// #     terminated: impl std::future::Future<Output = ()>,
    /// # ) {
    /// terminated.await; // SIGTERM, from the runtime's signal handling
    /// human_plus.shutdown().await;
    /// // Exit: the other replicas serve this one's conversations now.
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        let inner = &*self.inner;
        inner.shut.store(true, Ordering::SeqCst);
        let grace_end = D::now() + inner.shutdown_grace;
        for lock in self.held_locks() {
            lock.halt.halt_at(grace_end);
        }
        // The operations end by the grace and give their locks back
        // themselves, after storing their records.
        let settle_end = grace_end + SHUTDOWN_SETTLE;
        while !self.held_locks().is_empty() && D::now() < settle_end {
            if <D::Flavour as Flavour>::BLOCKING {
                std::thread::sleep(SHUTDOWN_LOOK);
            } else {
                D::sleep(SHUTDOWN_LOOK).await;
            }
        }
        for lock in self.held_locks() {
            tracing::warn!(
                attachment = %lock.guard.id(),
                "shutdown: an operation still held its lock after the grace; given back now"
            );
            lock.stop();
            if let Err(e) = inner.store.release(&lock.guard).await {
                tracing::warn!(
                    attachment = %lock.guard.id(),
                    code = e.code(),
                    "shutdown: the lock could not be given back; it frees when its lease runs out"
                );
            }
        }
        // Dropping the kept streams closes the warm legs.
        let warm = self.kept().drain();
        drop(warm);
        inner.driver.close_idle();
        tracing::debug!("manager shut down");
    }

    /// The locks this manager's operations hold now.
    fn held_locks(&self) -> Vec<Arc<Held>> {
        self.inner
            .holding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// [`Error::ShutDown`] once [`HumanPlus::shutdown`] was called.
    fn refuse_if_shut_down(&self) -> Result<(), Error> {
        if self.inner.shut.load(Ordering::SeqCst) {
            Err(Error::ShutDown)
        } else {
            Ok(())
        }
    }

    async fn load(&self, id: &str) -> Result<SurfaceAttachment, Error> {
        self.inner
            .store
            .get(id)
            .await?
            .ok_or(Error::AttachmentMissing)
    }

    /// A networked operation in its span: the owner is checked and
    /// undeclared trust refused before the store is touched (the core
    /// checks both again when the operation is built). With a `timeout`,
    /// the operation is built with that exchange timeout instead of the
    /// configured one (the `*_with_timeout` forms), and the lock wait and
    /// the exchanges together are promised to end within it.
    fn operate<'s, T, F>(
        &'s self,
        op: Op,
        owner: Result<OwnerKey, Error>,
        attachment: &str,
        tool: &str,
        timeout: Option<Duration>,
        start: F,
    ) -> impl Future<Output = Result<T, Error>> + Send + use<'s, D, S, T, F>
    where
        T: OperationOutput + Send + 's,
        F: Start<T> + 's,
    {
        let span = op_span(op, attachment, tool, &self.inner.config.transport.leg);
        let id = attachment.to_owned();
        let needs_trust = matches!(op, Op::Tools | Op::Call | Op::ChangesSince);
        let bounded = timeout.map(|timeout| {
            let mut config = self.inner.config.clone();
            config.transport.timeout = timeout;
            config
        });
        async move {
            let owner = owner?;
            self.refuse_if_shut_down()?;
            if needs_trust {
                self.inner.config.trust.assert_declared()?;
            }
            let config = bounded.as_ref().unwrap_or(&self.inner.config);
            let result = self.locked(id, &owner, config, start).await;
            if let Err(e) = &result {
                tracing::debug!(code = e.code(), "operation failed");
            }
            result
        }
        .instrument(span)
    }

    /// The manager flow of every networked operation: take the store lock
    /// for the whole operation (its lease renewed while it runs), load the
    /// record, build the operation, hand it the warm leg, drive it, keep
    /// the warm leg it hands back, store the changed record with a
    /// compare-and-set on the loaded generation, settle the init cache,
    /// release the lock.
    async fn locked<T: OperationOutput + Send, F: Start<T>>(
        &self,
        id: String,
        owner: &OwnerKey,
        config: &ManagerConfig,
        start: F,
    ) -> Result<T, Error> {
        let inner = &*self.inner;
        let deadline = D::now() + config.transport.timeout;
        let (guard, record, queued) = self.take_turn(&id, deadline).await?;
        let lock = Arc::new(Held::new(guard, inner.lock_lease, deadline));
        let held = Holding::new(&inner.holding, &id, &lock);
        if inner.shut.load(Ordering::SeqCst) {
            // Shut down while it waited: give the lock back, start nothing.
            lock.stop();
            return Err(Error::ShutDown);
        }
        let work = async {
            let record = record.ok_or(Error::AttachmentMissing)?;
            // The operation reads the cache once, when it is built: no copy.
            let mut op = {
                let cache = inner.init.lock().unwrap_or_else(PoisonError::into_inner);
                start(record, owner, config, &cache, D::now())?
            }
            // A shutdown's grace ends it (`shutdown`).
            .with_halt(lock.halt.clone());
            if queued {
                // It waited behind another operation of this manager: what
                // is left of its timeout bounds it as a whole.
                op = op.with_deadline(deadline);
            }
            self.drive(id.clone(), op).await
        };
        let result = if <D::Flavour as Flavour>::BLOCKING {
            // Nothing beside a blocking operation is ever polled: the
            // manager's keeper thread renews the lease meanwhile.
            let _ticket = self.keep_on_thread(&lock);
            work.await
        } else {
            let renewing = async {
                keep_beside::<D, S>(&inner.store, &lock).await;
                // Lost or given back: the operation goes on, fenced.
                std::future::pending().await
            };
            futures_lite::future::or(work, renewing).await
        };
        let lock_halted = lock.halt.at().is_some();
        lock.stop();
        // Not held here any more before the lock is given back: the next
        // holder marks it again once it has the lock.
        drop(held);
        // The record stored and the lock given back before the answer, in
        // one store step (one round trip with Redis: issue 43), so the next
        // call, here or on another replica, finds it free rather than
        // queued behind a release on a background thread. A release that
        // failed is left to the guard's drop (a store disarms a guard it
        // gave back).
        let result = match result {
            Ok(outcome) => {
                let stored = match &outcome.record {
                    Some(record) => {
                        inner
                            .store
                            .put_and_release(&lock.guard, record, Some(outcome.expected_generation))
                            .await
                    }
                    None => {
                        let _ = inner.store.release(&lock.guard).await;
                        Ok(())
                    }
                };
                let mut cache = inner.init.lock().unwrap_or_else(PoisonError::into_inner);
                outcome.settle(&mut cache, stored)
            }
            Err(e) => {
                let _ = inner.store.release(&lock.guard).await;
                Err(e)
            }
        };
        drop(lock);
        // Ended by a shutdown's grace before anything that acts was sent:
        // nothing was sent, another worker serves it.
        match result {
            Err(Error::Timeout) if lock_halted => Err(Error::ShutDown),
            other => other,
        }
    }

    /// Has the keeper thread renew `lock` until the ticket drops.
    fn keep_on_thread(&self, lock: &Arc<Held>) -> Ticket {
        let kept: Arc<dyn Keep> = Arc::new(Kept {
            store: Arc::clone(&self.inner.store),
            held: Arc::clone(lock),
        });
        self.inner.keeper.keep(kept)
    }

    /// Takes the attachment's store lock for an operation promised to end
    /// by `deadline`, waiting at most the store's lock wait (or the
    /// deadline, whichever comes first) whoever holds it: another process,
    /// another manager, or another operation of this manager (a call of
    /// the same worker on a page that does not answer must not take every
    /// thread of the worker with it; issue 39 ends issue 27's rule that a
    /// wait behind one of ours lasted the whole timeout). When the wait
    /// runs out it answers [`Error::Busy`], with when a retry may succeed:
    /// for one of ours, when that operation is promised to end; for a lock
    /// held elsewhere, the holder's lease left, as the store last saw it.
    /// Also says whether the operation waited behind one of this manager's.
    async fn take_turn(
        &self,
        id: &str,
        deadline: Instant,
    ) -> Result<(LockGuard, Option<SurfaceAttachment>, bool), Error> {
        let inner = &*self.inner;
        let asked = D::now();
        let mut queued = false;
        loop {
            let now = D::now();
            let left = deadline.saturating_duration_since(now);
            let lock_left = inner
                .lock_wait
                .saturating_sub(now.saturating_duration_since(asked));
            queued |= self.held_here(id);
            let bound = left.min(lock_left);
            let lock = async { Some(inner.store.lock_and_get(id, inner.lock_lease, bound).await) };
            let wait = async {
                D::sleep(bound).await;
                None
            };
            let busy = match futures_lite::future::or(lock, wait).await {
                Some(Ok((guard, record))) => return Ok((guard, record, queued)),
                Some(Err(Error::Busy(busy))) => Some(busy),
                Some(Err(Error::Store(e))) if e.kind() == StoreErrorKind::LockWait => None,
                Some(Err(e)) => return Err(e),
                None => None,
            };
            let now = D::now();
            if let Some(ours) = self.holder_here(id) {
                if now < deadline && now.saturating_duration_since(asked) < inner.lock_wait {
                    // One of ours took it meanwhile: wait on, within the
                    // same bounds.
                    continue;
                }
                let retry_after = ours
                    .deadline
                    .saturating_duration_since(now)
                    .clamp(MIN_RETRY_AFTER, inner.lock_lease.max(MIN_RETRY_AFTER));
                tracing::debug!(
                    attachment = %id,
                    retry_after_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX),
                    "another call of this worker holds the attachment"
                );
                return Err(Error::Busy(Busy::new(retry_after)));
            }
            let busy = match busy {
                Some(busy) => busy,
                None => match self.last_attempt(id).await? {
                    Ok((guard, record)) => return Ok((guard, record, queued)),
                    Err(busy) => busy,
                },
            };
            tracing::debug!(
                attachment = %id,
                retry_after_ms = u64::try_from(busy.retry_after().as_millis()).unwrap_or(u64::MAX),
                "another worker holds the attachment"
            );
            return Err(Error::Busy(busy));
        }
    }

    /// When the wait for a lock held elsewhere ran out on the runtime's
    /// timer rather than in the store: one more attempt that does not wait,
    /// whose refusal says how long the holder's lease has left (bounded by
    /// [`LAST_ATTEMPT`], after which the whole lease is the answer).
    async fn last_attempt(
        &self,
        id: &str,
    ) -> Result<Result<(LockGuard, Option<SurfaceAttachment>), Busy>, Error> {
        let inner = &*self.inner;
        let attempt = async {
            Some(
                inner
                    .store
                    .lock_and_get(id, inner.lock_lease, Duration::ZERO)
                    .await,
            )
        };
        let bound = async {
            D::sleep(LAST_ATTEMPT).await;
            None
        };
        match futures_lite::future::or(attempt, bound).await {
            Some(Ok(taken)) => Ok(Ok(taken)),
            Some(Err(Error::Busy(busy))) => Ok(Err(busy)),
            Some(Err(e)) if !e.is_retryable() => Err(e),
            _ => Ok(Err(Busy::new(inner.lock_lease))),
        }
    }

    /// The lock an operation of this manager holds on attachment `id`.
    fn holder_here(&self, id: &str) -> Option<Arc<Held>> {
        self.inner
            .holding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    /// Whether an operation of this manager holds attachment `id`'s lock.
    fn held_here(&self, id: &str) -> bool {
        self.inner
            .holding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(id)
    }

    /// Drives `op` with the warm leg kept for `id`, keeps the warm leg and
    /// what the leg saw, and hands back the outcome, whose record the
    /// caller stores with a compare-and-set on the loaded generation as it
    /// gives the lock back, and then settles.
    async fn drive<T: OperationOutput + Send>(
        &self,
        id: String,
        mut op: Operation<T>,
    ) -> Result<Outcome<T>, Error> {
        let inner = &*self.inner;
        let mut stream = None;
        if inner.config.transport.warm {
            let (slot, closed) = self.kept().take(&id, D::now());
            drop(closed);
            if let Some((mut leg, kept)) = slot {
                if let Some(mut s) = kept {
                    s.drain_into(&mut leg);
                    stream = Some(s);
                }
                op = op.with_warm_leg(leg);
            }
        }
        // On the heap: the drive's state (the operation's machine and the
        // driver's loop) is most of an operation's size, and an inline one
        // makes every future that holds a call that much larger.
        let (mut outcome, stream) = Box::pin(inner.driver.drive(Drive { op, stream })).await?;
        if outcome.seen != Seen::default() {
            let mut seen = inner.seen.lock().unwrap_or_else(PoisonError::into_inner);
            let kept = seen.entry(id.clone()).or_default();
            *kept = kept.merged(outcome.seen);
        }
        if let Some(leg) = outcome.warm.take() {
            let closed = self.kept().put(id, (leg, stream), D::now());
            drop(closed);
            if <D::Flavour as Flavour>::BLOCKING {
                self.sweep_on_keeper();
            }
        }
        Ok(outcome)
    }
}

/// The keeper thread's sweep of a blocking manager's idle kept legs: due
/// when the least recently used falls idle, and on for as long as any leg
/// is kept (a weak handle: the keeper never keeps a dropped manager alive).
struct Sweeper<D: Driver, S> {
    inner: std::sync::Weak<Inner<D, S>>,
    sweeping: Arc<AtomicBool>,
    every: Duration,
}

/// The least time between two sweeps of the keeper thread.
const SWEEP_MIN: Duration = Duration::from_millis(10);

/// The most time between two sweeps of the keeper thread: an idle leg
/// closes within its idle time and this.
const SWEEP_MAX: Duration = Duration::from_secs(5);

impl<D: Driver, S: Send + Sync + 'static> Keep for Sweeper<D, S> {
    fn renew_blocking(&self) -> bool {
        let Some(inner) = self.inner.upgrade() else {
            return false;
        };
        let (closed, empty) = {
            let mut kept = inner.warm.lock().unwrap_or_else(PoisonError::into_inner);
            let closed = kept.expire(D::now());
            // Off before the look, so a leg kept meanwhile either is seen
            // here or starts a sweep of its own.
            self.sweeping.store(false, Ordering::SeqCst);
            (closed, kept.is_empty())
        };
        drop(closed);
        !empty
            && self
                .sweeping
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    /// A fixed pace, a quarter of the idle time (between 10 ms and 5 s):
    /// the keeper asks for it under its own lock, where the manager must
    /// not be touched (were this the last handle, dropping it there would
    /// take that lock again).
    fn every(&self) -> Duration {
        self.every
    }
}

/// Whether `existing`, stored under a key, is the attachment `wanted`
/// asks for: still attached, with the same invitation (relay, session,
/// token, surface).
fn reusable(existing: &SurfaceAttachment, wanted: &SurfaceAttachment) -> bool {
    existing.is_attached() && existing.invitation() == wanted.invitation()
}

/// The least a busy answer behind a call of this worker asks to wait.
const MIN_RETRY_AFTER: Duration = Duration::from_millis(100);

/// How often a shutdown looks whether its operations have ended.
const SHUTDOWN_LOOK: Duration = Duration::from_millis(10);

/// How long the attempt after a lock wait that ran out on the runtime's
/// timer may take (one round trip to the store).
const LAST_ATTEMPT: Duration = Duration::from_secs(1);

/// An attachment whose store lock an operation of this manager holds, for
/// as long as this lives.
struct Holding<'a> {
    set: &'a Mutex<HashMap<String, Arc<Held>>>,
    id: String,
}

impl<'a> Holding<'a> {
    fn new(set: &'a Mutex<HashMap<String, Arc<Held>>>, id: &str, lock: &Arc<Held>) -> Self {
        set.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.to_owned(), Arc::clone(lock));
        Holding {
            set,
            id: id.to_owned(),
        }
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        let removed = self
            .set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
        drop(removed);
    }
}

/// Configures a manager: its store, TLS roots, resolver and timeouts.
/// `human_plus_tokio::HumanPlusBuilder`, `human_plus_async_std::HumanPlusBuilder`
/// and `human_plus_blocking::HumanPlusBuilder` are this type over their
/// runtime's driver; [`HumanPlusBuilder::build`] makes that runtime's
/// manager.
pub struct HumanPlusBuilder<D: Driver, S = InMemoryAttachmentStore> {
    config: ManagerConfig,
    store: S,
    roots: TlsRoots,
    resolver: Arc<ResolverOf<D>>,
    connect_timeout: Duration,
    lock_lease: Duration,
    lock_wait: Duration,
    shutdown_grace: Duration,
    kept_legs: KeptLegBounds,
}

impl<D: Driver, S> fmt::Debug for HumanPlusBuilder<D, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HumanPlusBuilder")
            .field("config", &self.config)
            .field("roots", &self.roots)
            .field("connect_timeout", &self.connect_timeout)
            .field("lock_lease", &self.lock_lease)
            .field("lock_wait", &self.lock_wait)
            .field("kept_legs", &self.kept_legs)
            .finish_non_exhaustive()
    }
}

impl<D: Driver> HumanPlusBuilder<D, InMemoryAttachmentStore> {
    /// A builder starting from an in-memory store, the webpki roots, the
    /// system resolver and the default timeouts
    /// ([`DEFAULT_CONNECT_TIMEOUT`], [`DEFAULT_LEASE`],
    /// [`DEFAULT_LOCK_WAIT`]). The same as [`HumanPlus::builder`] (or the
    /// blocking manager's `builder`).
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use human_plus_runtime::HumanPlusBuilder;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// let human_plus = HumanPlusBuilder::<Rt>::new(config).build()?;
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn new(config: ManagerConfig) -> Self {
        HumanPlusBuilder {
            config,
            store: InMemoryAttachmentStore::new(),
            roots: TlsRoots::webpki(),
            resolver: D::Flavour::system_resolver(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            lock_lease: DEFAULT_LEASE,
            lock_wait: DEFAULT_LOCK_WAIT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            kept_legs: KeptLegBounds::default(),
        }
    }
}

/// The TLS configuration error, as every runtime reports it.
fn tls_error(e: &rustls::Error) -> Error {
    Error::Transport(TransportError::new(
        TransportErrorKind::Tls,
        format!("the TLS client configuration could not be built: {e}"),
    ))
}

impl<D: Driver, S> HumanPlusBuilder<D, S> {
    /// Uses `store` for attachment records, in place of the in-memory store: an
    /// async store ([`AsyncAttachmentStore`]) for the async runtimes, a blocking
    /// one (`AttachmentStore`) for the blocking runtime.
    ///
    /// Which store: the in-memory store keeps attachments in this process only,
    /// right for one process. Several processes or replicas that serve the same
    /// conversations share one Redis: `AsyncRedisAttachmentStore` (feature
    /// `redis` of `human-plus-tokio` and of `human-plus-async-std`) or
    /// `RedisAttachmentStore` (feature `redis` of `human-plus-blocking`), each
    /// replica with its own manager over the same server and keyring. Any
    /// replica can then serve any conversation: its record, the revision above
    /// all, is in Redis, and an operation holds the conversation's lock there.
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use human_plus_runtime::InMemoryAttachmentStore;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// # let store = InMemoryAttachmentStore::new();
    /// // In a service of several replicas, `store` is the Redis store
    /// // (AsyncRedisAttachmentStore::connect(RedisConfig::new(url, keyring)).await?).
    /// let human_plus = HumanPlus::builder(config).store(store).build()?;
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn store<S2>(self, store: S2) -> HumanPlusBuilder<D, S2> {
        HumanPlusBuilder {
            config: self.config,
            store,
            roots: self.roots,
            resolver: self.resolver,
            connect_timeout: self.connect_timeout,
            lock_lease: self.lock_lease,
            lock_wait: self.lock_wait,
            shutdown_grace: self.shutdown_grace,
            kept_legs: self.kept_legs,
        }
    }

    /// The certificate authorities trusted for the relay's TLS (default
    /// [`TlsRoots::webpki`]): [`TlsRoots::only`] for a private CA alone, or
    /// [`TlsRoots::with_root`] to add one to the web's.
    ///
    /// ```no_run
    /// # use human_plus_runtime::TlsRoots;
    /// # fn example(private_ca: rustls_pki_types::CertificateDer<'static>) -> Result<(), human_plus_core::Error> {
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// let human_plus = HumanPlus::builder(config)
    ///     .tls_roots(TlsRoots::webpki().with_root(private_ca))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn tls_roots(mut self, roots: TlsRoots) -> Self {
        self.roots = roots;
        self
    }

    /// The resolver for relay host names (default: the system's). Its answers
    /// are vetted by the egress policy either way; [`StaticResolver`](crate::StaticResolver) pins names
    /// to addresses (tests, a relay on a private network).
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use std::sync::Arc;
    /// # use human_plus_runtime::StaticResolver;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// let resolver = StaticResolver::new().with("relay.example", ["93.184.215.14".parse().unwrap()]);
    /// let human_plus = HumanPlus::builder(config).resolver(Arc::new(resolver)).build()?;
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn resolver(mut self, resolver: Arc<ResolverOf<D>>) -> Self {
        self.resolver = resolver;
        self
    }

    /// The bound on each connection step: resolution, each TCP connection
    /// attempt, the proxy's CONNECT answer, the TLS handshake (default
    /// 10 s, [`DEFAULT_CONNECT_TIMEOUT`]). Every request is also bounded by its
    /// exchange's deadline.
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use std::time::Duration;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// let human_plus = HumanPlus::builder(config).connect_timeout(Duration::from_secs(3)).build()?;
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long an operation's store lock is leased (default
    /// [`DEFAULT_LEASE`], 6 s). The manager renews it every third of it
    /// while the operation runs, however long that is; a worker that dies
    /// or is stopped stops renewing, and its conversations are free for the
    /// others within one lease. Shorter frees them sooner and costs a
    /// renewal (one store round trip) more often during a long operation.
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use std::time::Duration;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// let human_plus = HumanPlus::builder(config).lock_lease(Duration::from_secs(3)).build()?;
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn lock_lease(mut self, lease: Duration) -> Self {
        self.lock_lease = lease;
        self
    }

    /// How long [`HumanPlus::shutdown`] lets the operations in flight
    /// finish (default [`DEFAULT_SHUTDOWN_GRACE`], 10 s). Each keeps its
    /// lock meanwhile, so no other worker writes beside it; one still
    /// running when the grace ends is ended then (a call that was sent is
    /// answered [`Error::CallTimeout`]: it may have been applied), and only
    /// then is its lock given back. Set it below the grace the process
    /// itself gets (SIGTERM to SIGKILL).
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use std::time::Duration;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// let human_plus = HumanPlus::builder(config).shutdown_grace(Duration::from_secs(5)).build()?;
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// How long an operation waits for a store lock another worker holds
    /// before answering [`Error::Busy`] (default [`DEFAULT_LOCK_WAIT`],
    /// never longer than the operation's own timeout). A queue worker that
    /// would rather put the job back than hold a thread sets it short and
    /// re-schedules after [`Error::retry_after`].
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use std::time::Duration;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// let human_plus = HumanPlus::builder(config).lock_wait(Duration::from_millis(250)).build()?;
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    /// At most how many receive legs the manager keeps open between
    /// operations (default [`DEFAULT_KEPT_LEGS`](crate::DEFAULT_KEPT_LEGS),
    /// 512); beyond it the least recently used is closed. Legs in use by a
    /// running operation are not counted.
    ///
    /// A kept leg is why a service's call costs one exchange: the POST and
    /// its reply on a leg already open, the tools listed once and reused
    /// while provably current, and the person's page sees the agent join
    /// once rather than at every call. Each costs a socket and about 42 KiB
    /// here (about 25 KiB at the relay); a conversation whose leg was closed
    /// opens a new one at its next operation, correct but one round trip
    /// and one listing dearer. Zero keeps none (as
    /// [`TransportConfig::warm`](human_plus_core::TransportConfig::warm)
    /// `false`): every operation opens its own leg and closes it.
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// // A replica serving a few hundred live conversations at a time:
    /// let human_plus = HumanPlus::builder(config).kept_legs(200).build()?;
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn kept_legs(mut self, max: usize) -> Self {
        self.kept_legs.max = max;
        self
    }

    /// How long a kept receive leg may go unused before it is closed
    /// (default [`DEFAULT_KEPT_LEG_IDLE`](crate::DEFAULT_KEPT_LEG_IDLE),
    /// 90 s, hyper's `pool_idle_timeout`). Measured on the runtime's clock
    /// from the end of the leg's last operation; an idle leg is closed at
    /// the manager's next operation or look at its legs
    /// ([`HumanPlus::take_seen`]), whichever attachment it is for, and
    /// never handed to an operation. The person's page sees the agent leave
    /// then. Zero keeps none.
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use std::time::Duration;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// // The agent stays on the person's page for a minute after its last call.
    /// let human_plus = HumanPlus::builder(config).kept_leg_idle(Duration::from_secs(60)).build()?;
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn kept_leg_idle(mut self, idle: Duration) -> Self {
        self.kept_legs.idle = idle;
        self
    }

    /// Builds the runtime's manager, and its rustls configuration once: a
    /// [`HumanPlus`] for an async runtime's driver, a
    /// [`BlockingHumanPlus`](crate::BlockingHumanPlus) for the blocking
    /// runtime's (which is what `human_plus_tokio::HumanPlus` and the others
    /// name).
    ///
    /// # Errors
    /// [`Error::Transport`] of kind TLS when a root cannot be used.
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::AsyncFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::Resolve>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::HumanPlus<Rt>;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// let human_plus = HumanPlus::builder(config).build()?;
    /// assert!(human_plus.store().is_empty());
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    pub fn build(self) -> Result<ManagerOf<D, S>, Error> {
        let tls = client_config(&self.roots).map_err(|e| tls_error(&e))?;
        Ok(D::Flavour::manager(self.parts_with(Ok(tls))))
    }

    /// The parts, with a TLS configuration error deferred to every HTTPS
    /// request (what the runtimes' `new` does).
    pub(crate) fn parts(self) -> Parts<D, S> {
        let tls = client_config(&self.roots).map_err(|e| tls_error(&e));
        self.parts_with(tls)
    }

    fn parts_with(self, tls: Result<Arc<rustls::ClientConfig>, Error>) -> Parts<D, S> {
        let driver = D::new(NetSettings {
            tls,
            resolver: self.resolver,
            connect_timeout: self.connect_timeout,
            pool: self.config.transport.pool,
        });
        Parts {
            config: self.config,
            store: self.store,
            driver,
            connect_timeout: self.connect_timeout,
            lock_lease: self.lock_lease,
            lock_wait: self.lock_wait,
            shutdown_grace: self.shutdown_grace,
            kept_legs: self.kept_legs,
        }
    }
}
