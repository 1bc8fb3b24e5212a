//! The manager for blocking code: the same flow as [`HumanPlus`], run to
//! completion on the calling thread.
//!
//! A blocking runtime's driver performs every request and every store call
//! on the thread that polls it, so its futures never wait on a reactor:
//! [`block_on`] polls them on the calling thread (parking it, should one
//! ever return pending). No async runtime is involved.

use std::time::Duration;

use human_plus_core::{
    Activity, CallResult, ConflictDetection, Discovery, Error, ManagerConfig, Owner, Participant,
    Seen, SurfaceAttachment, SurfaceChanges, SurfaceInvitation, SurfaceRevision,
};
use human_plus_store::{AsyncAttachmentStore, AttachmentStore, InMemoryAttachmentStore, LockGuard};

use crate::block::block_on;
use crate::driver::Driver;
use crate::manager::{Attached, HumanPlus, HumanPlusBuilder};
use crate::parts::Parts;

/// A blocking [`AttachmentStore`] seen through the async store contract,
/// for a manager whose futures run on the calling thread: each call blocks
/// that thread, and the lock waits at most `wait` (the blocking contract's
/// own bound).
#[derive(Debug, Clone)]
pub struct SyncStore<S> {
    store: S,
    wait: Duration,
}

impl<S> SyncStore<S> {
    /// `store`, its lock waited for at most `wait`.
    #[must_use]
    pub fn new(store: S, wait: Duration) -> Self {
        SyncStore { store, wait }
    }

    /// The blocking store.
    #[must_use]
    pub fn get_ref(&self) -> &S {
        &self.store
    }
}

impl<S: AttachmentStore> AsyncAttachmentStore for SyncStore<S> {
    async fn get(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        self.store.get(id)
    }

    async fn put(&self, record: &SurfaceAttachment, expected: Option<u64>) -> Result<(), Error> {
        self.store.put(record, expected)
    }

    async fn lock(&self, id: &str, lease: Duration) -> Result<LockGuard, Error> {
        self.store.lock(id, lease, self.wait)
    }

    async fn lock_within(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<LockGuard, Error> {
        self.store.lock(id, lease, wait)
    }

    async fn renew(&self, guard: &LockGuard, lease: Duration) -> Result<bool, Error> {
        self.store.renew(guard, lease)
    }

    async fn release(&self, guard: &LockGuard) -> Result<(), Error> {
        self.store.release(guard)
    }

    async fn lock_and_get(
        &self,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<(LockGuard, Option<SurfaceAttachment>), Error> {
        self.store.lock_and_get(id, lease, wait)
    }

    async fn put_and_release(
        &self,
        guard: &LockGuard,
        record: &SurfaceAttachment,
        expected: Option<u64>,
    ) -> Result<(), Error> {
        self.store.put_and_release(guard, record, expected)
    }
}

/// The Human+ manager for blocking code (queue workers, scripts): attaches
/// an agent to the surfaces people hand it and runs its operations on the
/// calling thread. No async runtime is involved.
///
/// `human_plus_blocking::HumanPlus` is this type over the blocking driver;
/// `S` is the attachment store (a blocking `AttachmentStore`). Make one per
/// worker process and share it between its threads (clone it: everything
/// is behind an `Arc`); not one per job, which would start with an empty
/// store and no kept connections. Operations on one attachment are
/// serialised by the store's lock; operations on different attachments run
/// in parallel. Each method is [`HumanPlus`]'s, run to completion.
///
/// | to | call | network |
/// |---|---|---|
/// | attach the surface a person handed over (a share link, read by [`SurfaceInvitation::from_link`]), proven first | [`attach_verified`](BlockingHumanPlus::attach_verified) | yes: the tools are listed once |
/// | … under a key of the caller's (a conversation id), idempotently, and find it again | [`attach_as`](BlockingHumanPlus::attach_as), [`find`](BlockingHumanPlus::find) | `attach_as`: yes, unless already attached |
/// | attach without sending anything (a mistake in the link shows at the first operation) | [`attach`](BlockingHumanPlus::attach) | no |
/// | list the tools local trust admits | [`tools`](BlockingHumanPlus::tools), [`tools_with_timeout`](BlockingHumanPlus::tools_with_timeout) | yes |
/// | call one, pinned to the revision last seen | [`call`](BlockingHumanPlus::call), [`call_with_timeout`](BlockingHumanPlus::call_with_timeout) | yes |
/// | learn what somebody else changed, and who | [`changes_since`](BlockingHumanPlus::changes_since), [`changes_since_with_timeout`](BlockingHumanPlus::changes_since_with_timeout) | yes |
/// | tell the person what the agent is doing | [`announce`](BlockingHumanPlus::announce), [`announce_with_timeout`](BlockingHumanPlus::announce_with_timeout) | yes |
/// | what the receive legs saw (a person active, the tools changed) | [`take_seen`](BlockingHumanPlus::take_seen), [`listing_current_for`](BlockingHumanPlus::listing_current_for) | no |
/// | the attachment itself | [`status`](BlockingHumanPlus::status), [`conflict_detection`](BlockingHumanPlus::conflict_detection) | no |
/// | leave the surface | [`detach`](BlockingHumanPlus::detach) | only with [`unregister_on_detach`](ManagerConfig::unregister_on_detach) |
/// | stop cleanly (SIGTERM) | [`shutdown`](BlockingHumanPlus::shutdown) | no |
///
/// Every operation names the attachment's **owner** (the conversation a
/// job belongs to: any [`Owner`], such as the string
/// `"conversation:42"`) and its **id** ([`SurfaceAttachment::id`]).
///
/// **Which store.** [`BlockingHumanPlus::new`] keeps attachments in memory,
/// in this process only. Worker processes that take jobs of the same
/// conversations from one queue share a Redis store
/// (`RedisAttachmentStore`, feature `redis` of `human-plus-blocking`),
/// given with `HumanPlus::builder(config).store(store).build()?`
/// ([`HumanPlusBuilder::store`]): then a job's attachment id, kept with its
/// conversation, is usable by whichever worker takes the next job.
///
/// The calling thread is busy for the whole operation, so the leases of
/// the locks its operations hold are renewed by one thread of the manager
/// (`human-plus-lease`, started with the first lock, ending 5 s after the
/// last). [`BlockingHumanPlus::shutdown`] gives those locks back and closes
/// what the manager keeps.
///
/// ```no_run
/// # use human_plus_core::{Error, LinkOptions, Participant, SurfaceInvitation};
/// # use serde_json::json;
/// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, link: &str) -> Result<(), Error> {
/// // A job: the link the person handed over, for conversation 42.
/// let invitation = SurfaceInvitation::from_link(link, &LinkOptions::default())?;
/// let owner = "conversation:42";
/// let attachment = human_plus.attach(owner, invitation, Participant::new("agent-1", "Assistant", "#7c3aed"))?;
/// let id = attachment.id(); // keep it with the conversation, for the next job
///
/// let cell = human_plus.call(owner, id, "sheet_get_cell", json!({"address": "B4"}))?;
/// println!("{}", cell.text); // framed as untrusted data
/// let changes = human_plus.changes_since(owner, id)?;
/// println!("{}", changes.describe());
/// # Ok(()) }
/// ```
pub struct BlockingHumanPlus<D: Driver, S = InMemoryAttachmentStore> {
    inner: HumanPlus<D, SyncStore<S>>,
}

impl<D: Driver, S> Clone for BlockingHumanPlus<D, S> {
    fn clone(&self) -> Self {
        BlockingHumanPlus {
            inner: self.inner.clone(),
        }
    }
}

impl<D: Driver, S> std::fmt::Debug for BlockingHumanPlus<D, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<D: Driver> BlockingHumanPlus<D, InMemoryAttachmentStore> {
    /// A manager with an in-memory store, the webpki roots, the system
    /// resolver and the default timeouts.
    ///
    /// The in-memory store keeps attachments in this process only: right for
    /// one worker process (its threads share the manager). Worker processes
    /// that share conversations give [`BlockingHumanPlus::builder`] a Redis
    /// store instead. Make one manager per process, not one per job: it keeps
    /// connections, warm legs and request threads for every attachment.
    ///
    /// Should the TLS configuration fail to build (it does not with the
    /// bundled roots), every HTTPS request fails with a TLS transport error;
    /// use [`BlockingHumanPlus::builder`] to see such an error up front.
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::BlockingFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::ResolveBlocking>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::BlockingHumanPlus<Rt>;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// let config = ManagerConfig::new(
    ///     EgressPolicy::new(["relay.example"]).egress_proxy("http://egress.internal:3128"),
    ///     TrustPolicy::allowing(["sheet_get_cell", "sheet_set_cell", "changes_since"], NO_PINS),
    /// );
    /// let human_plus = HumanPlus::new(config); // one per process: clone it into each thread
    /// assert!(human_plus.store().is_empty());
    /// ```
    #[must_use]
    pub fn new(config: ManagerConfig) -> Self {
        BlockingHumanPlus::from_parts(HumanPlusBuilder::new(config).parts())
    }

    /// A builder starting from the defaults of [`BlockingHumanPlus::new`]: the
    /// store ([`HumanPlusBuilder::store`]: a `RedisAttachmentStore`, feature
    /// `redis` of `human-plus-blocking`, for several worker processes), TLS
    /// roots, resolver, connection timeout, lock lease and lock wait.
    /// [`HumanPlusBuilder::build`] makes the manager.
    ///
    /// ```
    /// # struct Rt; impl human_plus_runtime::Driver for Rt { type Flavour = human_plus_runtime::BlockingFlavour; type Stream = std::convert::Infallible; fn new(_: human_plus_runtime::NetSettings<dyn human_plus_runtime::ResolveBlocking>) -> Self { Rt } async fn drive<T: human_plus_core::OperationOutput + Send>(&self, _: human_plus_runtime::Drive<T, Self>) -> human_plus_runtime::Driven<T, Self> { Err(human_plus_core::Error::Timeout) } }
    /// # type HumanPlus = human_plus_runtime::BlockingHumanPlus<Rt>;
    /// # use std::time::Duration;
    /// # use human_plus_core::{EgressPolicy, ManagerConfig, NO_PINS, TrustPolicy};
    /// # let config = ManagerConfig::new(EgressPolicy::new(["relay.example"]), TrustPolicy::every_tool(NO_PINS));
    /// let human_plus = HumanPlus::builder(config)
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

impl<D: Driver, S> BlockingHumanPlus<D, S> {
    /// The manager made of `parts`: what [`HumanPlusBuilder::build`] does for
    /// a blocking runtime (through [`Flavour::manager`](crate::Flavour::manager)).
    /// The store's lock is waited for at most `parts.lock_wait`. A worker uses
    /// [`BlockingHumanPlus::new`] or [`BlockingHumanPlus::builder`]; this is for
    /// a runtime crate.
    ///
    /// ```no_run
    /// # use human_plus_runtime::{BlockingHumanPlus, InMemoryAttachmentStore, Parts};
    /// # fn example<D: human_plus_runtime::Driver>(parts: Parts<D, InMemoryAttachmentStore>) {
    /// let human_plus = BlockingHumanPlus::from_parts(parts);
    /// # let _: BlockingHumanPlus<D> = human_plus; }
    /// ```
    #[must_use]
    pub fn from_parts(parts: Parts<D, S>) -> Self {
        let wait = parts.lock_wait;
        BlockingHumanPlus {
            inner: HumanPlus::from_parts(Parts {
                config: parts.config,
                store: SyncStore::new(parts.store, wait),
                driver: parts.driver,
                connect_timeout: parts.connect_timeout,
                lock_lease: parts.lock_lease,
                lock_wait: wait,
                shutdown_grace: parts.shutdown_grace,
                kept_legs: parts.kept_legs,
            }),
        }
    }

    /// The manager's configuration: the egress and trust policies, the transport
    /// (timeouts, the receive leg, warm mode) and the result guard it was made
    /// with.
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>) {
    /// let timeout = human_plus.config().transport.timeout; // each exchange's bound
    /// println!("a call waits at most {timeout:?} for the page");
    /// # }
    /// ```
    #[must_use]
    pub fn config(&self) -> &ManagerConfig {
        self.inner.config()
    }

    /// The attachment store: the in-memory store unless the builder was given
    /// another ([`HumanPlusBuilder::store`]).
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>) {
    /// println!("{} attachments kept in this process", human_plus.store().len());
    /// # }
    /// ```
    #[must_use]
    pub fn store(&self) -> &S {
        self.inner.store().get_ref()
    }

    /// The flow underneath: the async [`HumanPlus`] over a [`SyncStore`] of this
    /// manager's store, whose futures perform every request and store call on
    /// the thread that polls them. Poll them only where blocking is fine (with
    /// [`block_on`]), never on an async executor's worker; a worker has no need
    /// of it.
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let seen = human_plus_runtime::block_on(human_plus.manager().take_seen("job:7", attachment))?;
    /// # let _ = seen;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn manager(&self) -> &HumanPlus<D, SyncStore<S>> {
        &self.inner
    }
}

impl<D: Driver, S: AttachmentStore + 'static> BlockingHumanPlus<D, S> {
    /// Attaches the agent, as `participant`, to the surface `invitation` names,
    /// for `owner`: checks the invitation's relay against the egress policy,
    /// mints an attachment (a new id and client id, nothing learnt yet) and
    /// stores it. **Nothing is sent**: a wrong token, an ended session or a
    /// wrong relay path shows at the first operation (such as
    /// [`BlockingHumanPlus::tools`]), and the record stays in the store until
    /// [`BlockingHumanPlus::detach`] or the store's time to live.
    /// [`BlockingHumanPlus::attach_verified`] proves the link first and keeps nothing
    /// when it fails; [`BlockingHumanPlus::attach_as`] attaches under a key of the
    /// caller's, idempotently.
    ///
    /// The invitation is what a person handed over: one link, read by
    /// [`SurfaceInvitation::from_link`]. What `attach` returns is the store's
    /// record, relay token included, and its own JSON (`serde`) is that record:
    /// never send it on or log it. [`SurfaceAttachment::summary`] is what a
    /// worker may show or send on (`AttachmentSummary`, without the token); keep
    /// [`SurfaceAttachment::id`] with the job's conversation, so the next job
    /// (on any worker sharing the store) names it.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`] for an empty owner; [`Error::EgressRefused`] when
    /// the egress policy refuses the invitation's relay; [`Error::ShutDown`]
    /// after [`BlockingHumanPlus::shutdown`]; the store's ([`Error::Store`]).
    ///
    /// ```no_run
    /// # use human_plus_core::{LinkOptions, Participant, SurfaceInvitation};
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, link: &str) -> Result<(), Box<dyn std::error::Error>> {
    /// let invitation = SurfaceInvitation::from_link(link, &LinkOptions::default())?;
    /// let participant = Participant::new("agent-1", "Assistant", "#7c3aed");
    /// let attachment = human_plus.attach("conversation:42", invitation, participant)?;
    /// let id = attachment.id(); // what every operation names, with the owner
    /// let shown = serde_json::to_string(&attachment.summary())?; // without the token
    /// # let _ = (id, shown);
    /// # Ok(()) }
    /// ```
    pub fn attach<O: Owner + ?Sized>(
        &self,
        owner: &O,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<SurfaceAttachment, Error> {
        block_on(self.inner.attach(owner, invitation, participant))
    }

    /// [`BlockingHumanPlus::attach`], proven before it is kept: the attachment
    /// is minted, the session is asked for its tools (an MCP `initialize` and
    /// `tools/list`, through the trust policy, bounded by the exchange timeout),
    /// and only when the surface answered is the record stored. A wrong token,
    /// an ended session or a wrong relay path is its error here, at attach time,
    /// and leaves no record behind.
    ///
    /// # Errors
    /// As [`BlockingHumanPlus::attach`], and what [`BlockingHumanPlus::tools`]
    /// answers ([`Error::AttachmentUnauthorized`] for a token the relay refuses,
    /// [`Error::SurfaceUnavailable`] for an ended session,
    /// [`Error::RelayPathNotFound`] for a share link's relay path that is wrong,
    /// a timeout when no page answers, undeclared trust).
    ///
    /// ```no_run
    /// # use human_plus_core::{LinkOptions, Participant, SurfaceInvitation};
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, link: &str) -> Result<(), human_plus_core::Error> {
    /// let invitation = SurfaceInvitation::from_link(link, &LinkOptions::default())?;
    /// let participant = Participant::new("agent-1", "Assistant", "#7c3aed");
    /// let attached = human_plus.attach_verified("conversation:42", invitation, participant)?;
    /// let id = attached.attachment.id(); // stored: the session answered
    /// # let _ = id;
    /// # Ok(()) }
    /// ```
    pub fn attach_verified<O: Owner + ?Sized>(
        &self,
        owner: &O,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<Attached, Error> {
        block_on(self.inner.attach_verified(owner, invitation, participant))
    }

    /// Attaches `owner` under `key`, a name of the caller's (a conversation id,
    /// a job's thread), idempotently: the attachment's id is derived from the
    /// owner and the key, so the same owner and key find the same attachment
    /// from any worker sharing the store ([`BlockingHumanPlus::find`]), and a
    /// queue needs no map of its own from conversations to attachments. An
    /// attachment still `attached` under the key with the same invitation is
    /// returned as it is, nothing sent ([`Attached::created`](crate::Attached::created)
    /// false); otherwise a new one is verified as
    /// [`BlockingHumanPlus::attach_verified`] verifies and stored in its place
    /// once the surface answered.
    ///
    /// # Errors
    /// As [`BlockingHumanPlus::attach_verified`], and [`Error::InvalidAttachment`]
    /// for an empty key or one over 256 bytes.
    ///
    /// ```no_run
    /// # use human_plus_core::{LinkOptions, Participant, SurfaceInvitation};
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, link: &str) -> Result<(), human_plus_core::Error> {
    /// let invitation = SurfaceInvitation::from_link(link, &LinkOptions::default())?;
    /// let participant = Participant::new("agent-1", "Assistant", "#7c3aed");
    /// let attached = human_plus.attach_as("user:7", "conversation:42", invitation, participant)?;
    /// let id = attached.attachment.id(); // the same for every job of the conversation
    /// # let _ = id;
    /// # Ok(()) }
    /// ```
    pub fn attach_as<O: Owner + ?Sized>(
        &self,
        owner: &O,
        key: &str,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<Attached, Error> {
        block_on(self.inner.attach_as(owner, key, invitation, participant))
    }

    /// The attachment `owner` keeps under `key`
    /// ([`BlockingHumanPlus::attach_as`]), in any state, or `None`: how a job
    /// finds its conversation's attachment. No network, no lock.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::InvalidAttachment`] for an empty or
    /// over-long key, [`Error::AttachmentUnauthorized`] should the record belong
    /// to another owner, or the store's.
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>) -> Result<(), human_plus_core::Error> {
    /// match human_plus.find("user:7", "conversation:42")? {
    ///     Some(attachment) if attachment.is_attached() => println!("call through {}", attachment.id()),
    ///     Some(_) => println!("it ended: ask the person for a new link"),
    ///     None => println!("no attachment yet: ask the person for the link"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn find<O: Owner + ?Sized>(
        &self,
        owner: &O,
        key: &str,
    ) -> Result<Option<SurfaceAttachment>, Error> {
        block_on(self.inner.find(owner, key))
    }

    /// [`BlockingHumanPlus::tools`], with the exchange bounded by `timeout`
    /// instead of the configured exchange timeout, so the calling thread is back
    /// within about that long.
    ///
    /// # Errors
    /// As [`BlockingHumanPlus::tools`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let discovery = human_plus.tools_with_timeout("job-conversation:42", attachment, Duration::from_secs(5))?;
    /// # let _ = discovery;
    /// # Ok(()) }
    /// ```
    pub fn tools_with_timeout<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        timeout: Duration,
    ) -> Result<Discovery, Error> {
        block_on(self.inner.tools_with_timeout(owner, attachment, timeout))
    }

    /// [`BlockingHumanPlus::changes_since`], with the exchange bounded by
    /// `timeout` instead of the configured exchange timeout, so the calling
    /// thread is back within about that long.
    ///
    /// # Errors
    /// As [`BlockingHumanPlus::changes_since`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let changes = human_plus.changes_since_with_timeout("job-conversation:42", attachment, Duration::from_secs(5))?;
    /// println!("{}", changes.describe());
    /// # Ok(()) }
    /// ```
    pub fn changes_since_with_timeout<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        timeout: Duration,
    ) -> Result<SurfaceChanges, Error> {
        block_on(
            self.inner
                .changes_since_with_timeout(owner, attachment, timeout),
        )
    }

    /// [`BlockingHumanPlus::announce`], with the exchange bounded by `timeout`
    /// instead of the configured exchange timeout.
    ///
    /// # Errors
    /// As [`BlockingHumanPlus::announce`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use human_plus_core::Activity;
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let activity = Activity::new("editing").target("B4");
    /// human_plus.announce_with_timeout("job-conversation:42", attachment, &activity, Duration::from_secs(2))?;
    /// # Ok(()) }
    /// ```
    pub fn announce_with_timeout<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        activity: &Activity,
        timeout: Duration,
    ) -> Result<(), Error> {
        block_on(
            self.inner
                .announce_with_timeout(owner, attachment, activity, timeout),
        )
    }

    /// Lists the surface's tools and admits them through the trust policy: the
    /// admitted ones (with their definitions and digests, the digest being what
    /// a policy pins), and what was withheld and why. Reserved confirmation
    /// tools (`confirm`, `approve`, ...) are always withheld. It initialises the
    /// MCP session first when this process has not yet (one round trip more).
    /// Holds the attachment's lock, and the calling thread, while it runs.
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
    /// [`Error::Timeout`]); [`Error::ShutDown`] after
    /// [`BlockingHumanPlus::shutdown`]; the store's ([`Error::Store`],
    /// [`Error::StoreConflict`] when another worker wrote the record first).
    /// [`Error::is_retryable`] says which may simply be tried again (a queue puts
    /// the job back).
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let discovery = human_plus.tools("job:7", attachment)?;
    /// for tool in &discovery.tools {
    ///     println!("{} {}", tool.name(), tool.digest());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn tools<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<Discovery, Error> {
        block_on(self.inner.tools(owner, attachment))
    }

    /// Calls `tool` with `arguments` (a JSON object, or null for `{}`), pinned
    /// to the revision last seen, and returns its result framed as untrusted
    /// data ([`CallResult::text`](human_plus_core::CallResult::text), what a model
    /// reads) with the revision it carried, now stored for the next call (in the
    /// store every worker shares). The exchange is bounded by the configured
    /// [`TransportConfig::timeout`](human_plus_core::TransportConfig::timeout);
    /// the calling thread is blocked until then, and a call cannot be cancelled
    /// from another thread, so a worker that must answer within a time uses
    /// [`BlockingHumanPlus::call_with_timeout`]. Holds the attachment's lock
    /// while it runs.
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
    /// under `ManagerConfig::require_revision`; and, as every networked
    /// operation, the attachment's ([`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`]
    /// for another owner, [`Error::NotAttached`] once detached or ended); the
    /// lock's ([`Error::Busy`]: another worker holds the conversation, nothing was
    /// sent; [`Error::Timeout`] behind another operation of this manager); the
    /// relay's ([`Error::SurfaceUnavailable`] when the person's page ended the
    /// session, [`Error::AttachmentUnauthorized`] for a token the relay refuses,
    /// [`Error::RelayPathNotFound`], [`Error::RelayFailed`], [`Error::Protocol`]);
    /// the connection's ([`Error::EgressRefused`] for an address the egress policy
    /// refuses, [`Error::Transport`], [`Error::ProxyAuthRequired`],
    /// [`Error::Timeout`]); [`Error::ShutDown`] after
    /// [`BlockingHumanPlus::shutdown`]; the store's ([`Error::Store`],
    /// [`Error::StoreConflict`] when another worker wrote the record first).
    /// [`Error::is_retryable`] says which may simply be tried again (a queue puts
    /// the job back).
    ///
    /// ```no_run
    /// # use human_plus_core::Error;
    /// # use serde_json::json;
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let owner = "job-conversation:42";
    /// let cell = human_plus.call(owner, attachment, "sheet_get_cell", json!({"address": "B4"}))?;
    /// println!("{}", cell.text); // framed as untrusted data
    /// match human_plus.call(owner, attachment, "sheet_set_cell", json!({"address": "B4", "value": "12"})) {
    ///     Ok(written) => println!("now at {:?}", written.revision),
    ///     // The person edited the sheet since the read: nothing was written.
    ///     Err(Error::SurfaceChangedUnderYou(refusal)) => println!("{refusal}"),
    ///     // Another worker holds this conversation: put the job back.
    ///     Err(e) if e.is_busy() => println!("again in {:?}", e.retry_after()),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn call<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
    ) -> Result<CallResult, Error> {
        block_on(self.inner.call(owner, attachment, tool, arguments))
    }

    /// [`BlockingHumanPlus::call`], with the call's exchange bounded by
    /// `timeout` instead of the configured
    /// [`TransportConfig::timeout`](human_plus_core::TransportConfig::timeout),
    /// so the calling thread is back within about that long: what a worker uses
    /// when its job has a deadline. The wait for the attachment's lock counts
    /// against it too. A call that was posted and not answered in time is
    /// [`Error::CallTimeout`] (it may have been applied), never refused.
    ///
    /// # Errors
    /// As [`BlockingHumanPlus::call`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use serde_json::json;
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let cell = human_plus.call_with_timeout(
    ///     "job-conversation:42", attachment, "sheet_get_cell", json!({"address": "B4"}), Duration::from_secs(5),
    /// )?;
    /// println!("{}", cell.text);
    /// # Ok(()) }
    /// ```
    pub fn call_with_timeout<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
        timeout: Duration,
    ) -> Result<CallResult, Error> {
        block_on(
            self.inner
                .call_with_timeout(owner, attachment, tool, arguments, timeout),
        )
    }

    /// [`BlockingHumanPlus::call`], pinned to `revision`, the revision the
    /// job's decision was made at, as [`HumanPlus::call_at`]: a queue's
    /// jobs decided at one read each carry it, so a refusal told to one
    /// never moves another's pin.
    ///
    /// # Errors
    /// As [`BlockingHumanPlus::call`].
    ///
    /// ```no_run
    /// # use serde_json::json;
    /// # use human_plus_core::SurfaceRevision;
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str, decided_at: SurfaceRevision) -> Result<(), human_plus_core::Error> {
    /// // The job carries the revision its decision read.
    /// let written = human_plus.call_at(
    ///     "job-conversation:42", attachment, "sheet_set_cell", json!({"address": "B4", "value": "12"}), decided_at,
    /// )?;
    /// println!("{:?}", written.revision_to_carry());
    /// # Ok(()) }
    /// ```
    pub fn call_at<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
        revision: SurfaceRevision,
    ) -> Result<CallResult, Error> {
        block_on(
            self.inner
                .call_at(owner, attachment, tool, arguments, revision),
        )
    }

    /// [`BlockingHumanPlus::call_at`], bounded by `timeout` as
    /// [`BlockingHumanPlus::call_with_timeout`] is.
    ///
    /// # Errors
    /// As [`BlockingHumanPlus::call`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use serde_json::json;
    /// # use human_plus_core::SurfaceRevision;
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str, decided_at: SurfaceRevision) -> Result<(), human_plus_core::Error> {
    /// let written = human_plus.call_at_with_timeout(
    ///     "job-conversation:42", attachment, "sheet_set_cell", json!({"address": "B4", "value": "12"}), decided_at, Duration::from_secs(5),
    /// )?;
    /// # let _ = written;
    /// # Ok(()) }
    /// ```
    pub fn call_at_with_timeout<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
        revision: SurfaceRevision,
        timeout: Duration,
    ) -> Result<CallResult, Error> {
        block_on(
            self.inner
                .call_at_with_timeout(owner, attachment, tool, arguments, revision, timeout),
        )
    }

    /// What the attachment's receive legs have shown since this was last
    /// asked: a `notifications/tools/list_changed` (the surface's tools changed),
    /// a person acting on the surface (`notifications/agent_activity` with
    /// `source: "user"`). Taking it resets it. No network, no lock.
    ///
    /// It gathers what every operation's leg saw and, in warm mode
    /// ([`TransportConfig::warm`](human_plus_core::TransportConfig::warm)), what
    /// the kept leg delivered since the last operation: the blocking runtime
    /// keeps a warm attachment's leg open between operations on one of its
    /// request threads, so a person's edit between two jobs is seen without
    /// waiting. With warm mode turned off no leg is kept between operations,
    /// and this is what the operations themselves saw. What was
    /// seen is kept in this manager (this process), not in the shared store.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::AttachmentMissing`],
    /// [`Error::AttachmentUnauthorized`] for another owner, or the store's.
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// if human_plus.take_seen("job-conversation:42", attachment)?.person_active {
    ///     println!("a person has been editing: read again before writing");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn take_seen<O: Owner + ?Sized>(&self, owner: &O, attachment: &str) -> Result<Seen, Error> {
        block_on(self.inner.take_seen(owner, attachment))
    }

    /// Closes every kept leg unused for the idle time now, without an
    /// operation, and returns how many. A blocking manager rarely needs
    /// it: its keeper thread (`human-plus-lease`) closes idle legs by
    /// itself, within a quarter of the idle time (at most 5 s) after they
    /// fall idle, for as long as it keeps any, so a quiet worker's legs
    /// leave the person's page on time. Nothing is sent, no lock is taken.
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>) {
    /// let closed = human_plus.close_idle_legs();
    /// println!("{closed} idle legs closed");
    /// # }
    /// ```
    pub fn close_idle_legs(&self) -> usize {
        self.inner.close_idle_legs()
    }

    /// How long until the least recently used kept leg falls idle; `None`
    /// when none is kept. No network, no lock.
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>) {
    /// if let Some(wait) = human_plus.next_idle_close() {
    ///     println!("a kept leg falls idle in {wait:?}");
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn next_idle_close(&self) -> Option<Duration> {
        self.inner.next_idle_close()
    }

    /// How much longer the admitted listing kept with the attachment's warm leg
    /// stays provably current (the listing rule of
    /// [`TransportConfig::listing_max_age`](human_plus_core::TransportConfig::listing_max_age)),
    /// or `None` when the next [`BlockingHumanPlus::tools`] would list again. In
    /// warm mode the blocking runtime keeps the leg between operations (on a
    /// request thread) and the listing with it, as the async runtimes do; it is
    /// `None` with warm mode turned off, before a listing was kept (or once its
    /// leg was closed idle or at the bound), for a
    /// surface that did not declare `tools.listChanged`, after a list change or
    /// a gap, and once the listing is too old. No network, no lock.
    ///
    /// # Errors
    /// As [`BlockingHumanPlus::take_seen`].
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// match human_plus.listing_current_for("job-conversation:42", attachment)? {
    ///     Some(left) => println!("the tools listed last are current for {left:?} more"),
    ///     None => println!("the next tools() lists again"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn listing_current_for<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<Option<Duration>, Error> {
        block_on(self.inner.listing_current_for(owner, attachment))
    }

    /// Asks the surface's change feed what changed since the revision the agent
    /// last saw (the one kept in the store, whichever worker saw it), and by
    /// whom: the changes (each with its handle, its kind and who made it), the
    /// current revision, and whether the answer is complete. What a person
    /// changed deserves deference
    /// ([`SurfaceChanges::defer_to`](human_plus_core::SurfaceChanges::defer_to)).
    /// A surface without a feed answers
    /// [`SurfaceChanges::unavailable`](human_plus_core::SurfaceChanges::unavailable),
    /// which is not evidence that nothing changed. The feed is called like any
    /// tool, so the trust policy must admit it. Holds the attachment's lock, and
    /// the calling thread, while it runs.
    ///
    /// # Errors
    /// As [`BlockingHumanPlus::call`] (it is a call of the feed tool).
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let changes = human_plus.changes_since("job-conversation:42", attachment)?;
    /// for change in changes.defer_to() {
    ///     println!("re-read {} before touching it", change.handle());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn changes_since<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<SurfaceChanges, Error> {
        block_on(self.inner.changes_since(owner, attachment))
    }

    /// Tells the people on the surface what the agent is doing (a
    /// `notifications/human-plus/activity` notification: an action, a target
    /// handle, a priority), so the page can show it. It waits for the relay's
    /// answer to the POST, not for the surface. Holds the attachment's lock, and
    /// the calling thread, while it runs.
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
    /// [`Error::Timeout`]); [`Error::ShutDown`] after
    /// [`BlockingHumanPlus::shutdown`]; the store's ([`Error::Store`],
    /// [`Error::StoreConflict`] when another worker wrote the record first).
    /// [`Error::is_retryable`] says which may simply be tried again (a queue puts
    /// the job back).
    ///
    /// ```no_run
    /// # use human_plus_core::{Activity, Priority};
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let activity = Activity::new("editing").target("B4").priority(Priority::Attention);
    /// human_plus.announce("job-conversation:42", attachment, &activity)?;
    /// # Ok(()) }
    /// ```
    pub fn announce<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        activity: &Activity,
    ) -> Result<(), Error> {
        block_on(self.inner.announce(owner, attachment, activity))
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
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// if human_plus.conflict_detection("job-conversation:42", attachment)? == ConflictDetection::Unavailable {
    ///     println!("this surface cannot tell the agent about a person's concurrent edit");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn conflict_detection<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<ConflictDetection, Error> {
        block_on(self.inner.conflict_detection(owner, attachment))
    }

    /// The attachment's record, in any state (attached, detached, or ended by the
    /// relay: `surface_unavailable`, `attachment_unauthorized`): the state, the
    /// invitation, the revision the next call is pinned to, what has been
    /// observed. Read from the store. No network, no lock.
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
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let record = human_plus.status("job-conversation:42", attachment)?;
    /// println!("{:?}, pinned to {:?}", record.state(), record.revision());
    /// # Ok(()) }
    /// ```
    pub fn status<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<SurfaceAttachment, Error> {
        block_on(self.inner.status(owner, attachment))
    }

    /// Leaves the surface: the attachment becomes `detached` (the record is kept,
    /// with its new state) and every later operation on it but
    /// [`BlockingHumanPlus::status`] answers [`Error::NotAttached`]. The relay
    /// session (the person's page) stays alive and nothing is sent, unless
    /// [`ManagerConfig::unregister_on_detach`] is set: then it POSTs `unregister`
    /// first, which on the Fancy relay ends the session for the page and every
    /// other agent.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::AttachmentMissing`],
    /// [`Error::AttachmentUnauthorized`], [`Error::NotAttached`] when it is
    /// already detached or ended, [`Error::Busy`], [`Error::ShutDown`], the
    /// store's, and with `unregister_on_detach` the relay's and the transport's.
    ///
    /// ```no_run
    /// # use human_plus_core::AttachmentState;
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let record = human_plus.detach("job-conversation:42", attachment)?;
    /// assert_eq!(record.state(), AttachmentState::Detached);
    /// # Ok(()) }
    /// ```
    pub fn detach<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<SurfaceAttachment, Error> {
        block_on(self.inner.detach(owner, attachment))
    }

    /// Shuts the manager down, as [`HumanPlus::shutdown`]: nothing more
    /// starts ([`Error::ShutDown`]), the lock of every operation still
    /// running (on other threads) is given back now, and the kept legs and
    /// connections are closed. It does not wait for running operations: they
    /// go on without the lock, their record's write fenced (`store_conflict`
    /// should another worker have written first). Calling it again does nothing
    /// more. Call it from the thread that handles the process's SIGTERM, then
    /// exit: the other workers serve this one's conversations at once.
    ///
    /// ```no_run
    /// # fn serve<D: human_plus_runtime::Driver>(human_plus: human_plus_runtime::BlockingHumanPlus<D>, terminated: std::sync::mpsc::Receiver<()>) {
    /// let manager = human_plus.clone();
    /// std::thread::spawn(move || {
    ///     let _ = terminated.recv(); // SIGTERM, as the process's signal handling reports it
    ///     manager.shutdown(); // nothing more starts; locks given back; connections closed
    ///     std::process::exit(0);
    /// });
    /// # }
    /// ```
    pub fn shutdown(&self) {
        block_on(self.inner.shutdown());
    }
}
