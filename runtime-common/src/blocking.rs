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
    Seen, SurfaceAttachment, SurfaceChanges, SurfaceInvitation,
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
}

/// The Human+ manager for blocking code: attaches an agent to surfaces and
/// runs its operations on the calling thread.
///
/// `human_plus_blocking::HumanPlus` is this type over the blocking driver.
/// Cheap to clone and share between threads (everything is behind an
/// `Arc`). Operations on one attachment are serialised by the store's lock;
/// operations on different attachments run in parallel. Each method is
/// [`HumanPlus`]'s, run to completion.
///
/// The calling thread is busy for the whole operation, so the leases of
/// the locks its operations hold are renewed by one thread of the manager
/// (`human-plus-lease`, started with the first lock, ending 5 s after the
/// last). [`BlockingHumanPlus::shutdown`] gives those locks back and closes
/// what the manager keeps.
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
    /// Should the TLS configuration fail to build (it does not with the
    /// bundled roots), every HTTPS request fails with a TLS transport error;
    /// use [`BlockingHumanPlus::builder`] to see such an error up front.
    #[must_use]
    pub fn new(config: ManagerConfig) -> Self {
        BlockingHumanPlus::from_parts(HumanPlusBuilder::new(config).parts())
    }

    /// A builder starting from the defaults of [`BlockingHumanPlus::new`].
    #[must_use]
    pub fn builder(config: ManagerConfig) -> HumanPlusBuilder<D> {
        HumanPlusBuilder::new(config)
    }
}

impl<D: Driver, S> BlockingHumanPlus<D, S> {
    /// The manager made of `parts` (what [`Flavour::manager`](crate::Flavour::manager) does for a
    /// blocking runtime): the store's lock is waited for at most
    /// `parts.lock_wait`.
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
            }),
        }
    }

    /// The manager's configuration.
    #[must_use]
    pub fn config(&self) -> &ManagerConfig {
        self.inner.config()
    }

    /// The attachment store.
    #[must_use]
    pub fn store(&self) -> &S {
        self.inner.store().get_ref()
    }

    /// The flow underneath, whose futures perform every request and store
    /// call on the thread that polls them: poll them only where blocking is
    /// fine (with [`block_on`]), never on an async executor's worker.
    #[must_use]
    pub fn manager(&self) -> &HumanPlus<D, SyncStore<S>> {
        &self.inner
    }
}

impl<D: Driver, S: AttachmentStore + 'static> BlockingHumanPlus<D, S> {
    /// Validates `invitation` against the egress policy and stores a new
    /// attachment for `owner`. No network.
    ///
    /// # Errors
    /// As [`HumanPlus::attach`].
    pub fn attach<O: Owner + ?Sized>(
        &self,
        owner: &O,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<SurfaceAttachment, Error> {
        block_on(self.inner.attach(owner, invitation, participant))
    }

    /// Attaches and proves it: the session is asked for its tools before
    /// the record is stored, so a wrong token, an ended session or a wrong
    /// relay path is its error here and leaves no record behind.
    ///
    /// # Errors
    /// As [`HumanPlus::attach_verified`].
    pub fn attach_verified<O: Owner + ?Sized>(
        &self,
        owner: &O,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<Attached, Error> {
        block_on(self.inner.attach_verified(owner, invitation, participant))
    }

    /// Attaches `owner` under `key` (a conversation id, a job's thread),
    /// idempotently: the same owner and key find the same attachment, from
    /// any worker.
    ///
    /// # Errors
    /// As [`HumanPlus::attach_as`].
    pub fn attach_as<O: Owner + ?Sized>(
        &self,
        owner: &O,
        key: &str,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<Attached, Error> {
        block_on(self.inner.attach_as(owner, key, invitation, participant))
    }

    /// The attachment `owner` keeps under `key`, in any state, or `None`.
    /// No network, no lock.
    ///
    /// # Errors
    /// As [`HumanPlus::find`].
    pub fn find<O: Owner + ?Sized>(
        &self,
        owner: &O,
        key: &str,
    ) -> Result<Option<SurfaceAttachment>, Error> {
        block_on(self.inner.find(owner, key))
    }

    /// Lists the surface's tools with the exchange bounded by `timeout`.
    ///
    /// # Errors
    /// As [`HumanPlus::tools`].
    pub fn tools_with_timeout<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        timeout: Duration,
    ) -> Result<Discovery, Error> {
        block_on(self.inner.tools_with_timeout(owner, attachment, timeout))
    }

    /// Asks the change feed with the exchange bounded by `timeout`.
    ///
    /// # Errors
    /// As [`HumanPlus::changes_since`].
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

    /// Announces the agent's activity with the exchange bounded by
    /// `timeout`.
    ///
    /// # Errors
    /// As [`HumanPlus::announce`].
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

    /// Initialises the MCP session if needed and lists the surface's tools
    /// through the trust policy.
    ///
    /// # Errors
    /// As [`HumanPlus::tools`].
    pub fn tools<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<Discovery, Error> {
        block_on(self.inner.tools(owner, attachment))
    }

    /// Calls `tool` with `arguments` (a JSON object, or null), pinned to
    /// the attachment's last revision; the result is framed as untrusted
    /// data.
    ///
    /// # Errors
    /// As [`HumanPlus::call`].
    pub fn call<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
    ) -> Result<CallResult, Error> {
        block_on(self.inner.call(owner, attachment, tool, arguments))
    }

    /// Calls `tool` with its exchange bounded by `timeout`.
    ///
    /// # Errors
    /// As [`HumanPlus::call_with_timeout`].
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

    /// What the attachment's receive legs showed since this was last asked
    /// (a list change, a person's activity); taking it resets it. The
    /// blocking runtime keeps no leg between operations, so this is what
    /// the operations themselves saw.
    ///
    /// # Errors
    /// As [`HumanPlus::take_seen`].
    pub fn take_seen<O: Owner + ?Sized>(&self, owner: &O, attachment: &str) -> Result<Seen, Error> {
        block_on(self.inner.take_seen(owner, attachment))
    }

    /// How much longer a kept listing stays provably current (always `None`
    /// here: the blocking runtime keeps no leg between operations).
    ///
    /// # Errors
    /// As [`HumanPlus::listing_current_for`].
    pub fn listing_current_for<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<Option<Duration>, Error> {
        block_on(self.inner.listing_current_for(owner, attachment))
    }

    /// Asks the surface's change feed what changed since the attachment's
    /// revision, and who changed it.
    ///
    /// # Errors
    /// As [`HumanPlus::changes_since`].
    pub fn changes_since<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<SurfaceChanges, Error> {
        block_on(self.inner.changes_since(owner, attachment))
    }

    /// Tells the people on the surface what the agent is doing.
    ///
    /// # Errors
    /// As [`HumanPlus::announce`].
    pub fn announce<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        activity: &Activity,
    ) -> Result<(), Error> {
        block_on(self.inner.announce(owner, attachment, activity))
    }

    /// What has been observed of the surface's conflict detection. No
    /// network.
    ///
    /// # Errors
    /// As [`HumanPlus::conflict_detection`].
    pub fn conflict_detection<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<ConflictDetection, Error> {
        block_on(self.inner.conflict_detection(owner, attachment))
    }

    /// The attachment's record, in any state. No network.
    ///
    /// # Errors
    /// As [`HumanPlus::status`].
    pub fn status<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<SurfaceAttachment, Error> {
        block_on(self.inner.status(owner, attachment))
    }

    /// Detaches: the attachment becomes `detached`.
    ///
    /// # Errors
    /// As [`HumanPlus::detach`].
    pub fn detach<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<SurfaceAttachment, Error> {
        block_on(self.inner.detach(owner, attachment))
    }

    /// Shuts the manager down, as [`HumanPlus::shutdown`]: nothing more
    /// starts ([`Error::ShutDown`]), the lock of every operation still
    /// running (on other threads) is given back now, and the kept
    /// connections are closed. Call it from the thread that handles the
    /// process's SIGTERM, then exit: the other workers serve this one's
    /// conversations at once.
    pub fn shutdown(&self) {
        block_on(self.inner.shutdown());
    }
}
