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
//! ```no_run
//! use human_plus_async_std::{
//!     Activity, EgressPolicy, HumanPlus, ManagerConfig, NO_PINS, Participant, Priority,
//!     SurfaceInvitation, TrustPolicy,
//! };
//! use serde_json::json;
//!
//! async fn work() -> Result<(), human_plus_async_std::Error> {
//!     let config = ManagerConfig::new(
//!         EgressPolicy::new(["relay.fancy.example"]).egress_proxy("http://egress.internal:3128"),
//!         TrustPolicy::allowing(["sheet_get_cell", "sheet_set_cell", "changes_since"], NO_PINS),
//!     );
//!     let human_plus = HumanPlus::new(config);
//!     let session = "conversation:42"; // the owner: any `Owner`
//!
//!     let invitation = SurfaceInvitation::new(
//!         "https://relay.fancy.example", "demo_001", "0123456789abcdef0123", "sheet:one", "sheets",
//!     )?;
//!     let attachment = human_plus
//!         .attach(session, invitation, Participant::new("agent-1", "Assistant", "#7c3aed"))
//!         .await?;
//!     let id = attachment.id();
//!
//!     let discovery = human_plus.tools(session, id).await?;
//!     for tool in &discovery.tools {
//!         println!("{} {}", tool.name(), tool.digest());
//!     }
//!     let cell = human_plus.call(session, id, "sheet_get_cell", json!({"address": "B4"})).await?;
//!     println!("{}", cell.text); // framed as untrusted data
//!
//!     human_plus.announce(session, id, &Activity::new("editing").target("B4").priority(Priority::Attention)).await?;
//!     match human_plus.call(session, id, "sheet_set_cell", json!({"address": "B4", "value": "12"})).await {
//!         Ok(written) => println!("now at {:?}", written.revision),
//!         // A person changed the sheet since the read: nothing was written.
//!         Err(e) if e.code() == "surface_changed_under_you" => {
//!             let changes = human_plus.changes_since(session, id).await?;
//!             println!("{changes:?}");
//!         }
//!         Err(e) => return Err(e),
//!     }
//!     human_plus.detach(session, id).await?;
//!     Ok(())
//! }
//!
//! fn main() -> Result<(), human_plus_async_std::Error> {
//!     // The same future under either executor:
//!     smol::block_on(work())?;
//!     async_std::task::block_on(work())
//! }
//! ```
//!
//! Tests and local development can point a name at any address with
//! [`StaticResolver`] and trust a private CA with [`TlsRoots::only`]; the
//! address must still pass the egress policy.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod driver;
mod resolve;
mod toolset;
mod transport;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::future;
use human_plus_core::{
    InitCache, Operation, OperationOutput, OwnerKey, StoreError, TransportErrorKind, WarmLeg,
};
use human_plus_runtime::{OsEntropy, client_config, os_entropy};
use tracing::Instrument;

pub use human_plus_core as core;
pub use human_plus_core::{
    Activity, CallResult, ConflictDetection, Discovery, EgressPolicy, Error, ManagerConfig,
    NO_PINS, Owner, Participant, Priority, ReceiveLeg, RelayAuth, ResultGuard, SurfaceAttachment,
    SurfaceChanges, SurfaceInvitation, TransportConfig, TrustPolicy,
};
pub use human_plus_runtime::TlsRoots;
pub use human_plus_store::{
    AsyncAttachmentStore, DEFAULT_LEASE, DEFAULT_LOCK_WAIT, InMemoryAttachmentStore, LockGuard,
};
#[cfg(feature = "redis")] // The Redis store (feature `redis`).
pub use human_plus_store::{AsyncRedisAttachmentStore, Keyring, RedisConfig};
pub use resolve::{Resolve, Resolving, StaticResolver, SystemResolver};
pub use toolset::{HumanPlusToolset, SurfaceTool, ToolHandle};

use transport::Context;

/// The default connect timeout: DNS, TCP, the proxy's CONNECT and the TLS
/// handshake together.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

struct Inner<S> {
    config: ManagerConfig,
    store: S,
    ctx: Arc<Context>,
    lock_lease: Duration,
    lock_wait: Duration,
    init: Mutex<InitCache>,
    /// Warm attachments' receive legs between operations (warm mode).
    warm: Mutex<std::collections::HashMap<String, (WarmLeg, Option<driver::WarmStream>)>>,
}

/// The Human+ manager: attaches an agent to surfaces and runs every
/// operation over the relay.
///
/// Cheap to clone (an `Arc` inside), `Send` and `Sync`; every async
/// method's future is `Send`, so it can be spawned on a multi-threaded
/// executor. `S` is the attachment store ([`InMemoryAttachmentStore`] by
/// default; any [`AsyncAttachmentStore`]).
pub struct HumanPlus<S = InMemoryAttachmentStore> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for HumanPlus<S> {
    fn clone(&self) -> Self {
        HumanPlus {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S> fmt::Debug for HumanPlus<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HumanPlus")
            .field("config", &self.inner.config)
            .field("connect_timeout", &self.inner.ctx.connect_timeout)
            .field("lock_lease", &self.inner.lock_lease)
            .field("lock_wait", &self.inner.lock_wait)
            .finish_non_exhaustive()
    }
}

/// Configures a [`HumanPlus`]: the store, TLS roots, resolver and timeouts.
pub struct HumanPlusBuilder<S = InMemoryAttachmentStore> {
    config: ManagerConfig,
    store: S,
    roots: TlsRoots,
    resolver: Arc<dyn Resolve>,
    connect_timeout: Duration,
    lock_lease: Duration,
    lock_wait: Duration,
}

impl<S> fmt::Debug for HumanPlusBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HumanPlusBuilder")
            .field("config", &self.config)
            .field("roots", &self.roots)
            .field("connect_timeout", &self.connect_timeout)
            .field("lock_lease", &self.lock_lease)
            .field("lock_wait", &self.lock_wait)
            .finish_non_exhaustive()
    }
}

impl HumanPlus<InMemoryAttachmentStore> {
    /// A manager with an in-memory store, the webpki roots and the system
    /// resolver.
    ///
    /// Should the TLS configuration fail to build (it does not with the
    /// bundled roots), the manager is still returned and every HTTPS
    /// request fails with that error; [`HumanPlusBuilder::build`] reports
    /// it up front instead.
    #[must_use]
    pub fn new(config: ManagerConfig) -> Self {
        let builder = HumanPlus::builder(config);
        let tls = builder.tls_config();
        builder.finish(tls)
    }

    /// A builder starting from the defaults of [`HumanPlus::new`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use human_plus_async_std::{EgressPolicy, HumanPlus, InMemoryAttachmentStore, ManagerConfig, NO_PINS, TrustPolicy};
    ///
    /// let config = ManagerConfig::new(
    ///     EgressPolicy::new(["relay.fancy.example"]).egress_proxy("http://egress.internal:3128"),
    ///     TrustPolicy::allowing(["sheet_get_cell"], NO_PINS),
    /// );
    /// let human_plus = HumanPlus::builder(config)
    ///     .store(InMemoryAttachmentStore::new())
    ///     .connect_timeout(Duration::from_secs(5))
    ///     .build()?;
    /// assert!(human_plus.store().is_empty());
    /// # Ok::<(), human_plus_async_std::Error>(())
    /// ```
    #[must_use]
    pub fn builder(config: ManagerConfig) -> HumanPlusBuilder<InMemoryAttachmentStore> {
        HumanPlusBuilder {
            config,
            store: InMemoryAttachmentStore::new(),
            roots: TlsRoots::webpki(),
            resolver: Arc::new(SystemResolver),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            lock_lease: DEFAULT_LEASE,
            lock_wait: DEFAULT_LOCK_WAIT,
        }
    }
}

impl<S> HumanPlusBuilder<S> {
    /// Uses `store` for attachment records and their locks.
    #[must_use]
    pub fn store<S2: AsyncAttachmentStore>(self, store: S2) -> HumanPlusBuilder<S2> {
        HumanPlusBuilder {
            config: self.config,
            store,
            roots: self.roots,
            resolver: self.resolver,
            connect_timeout: self.connect_timeout,
            lock_lease: self.lock_lease,
            lock_wait: self.lock_wait,
        }
    }

    /// The certificate authorities trusted for the relay's TLS (default
    /// [`TlsRoots::webpki`]).
    #[must_use]
    pub fn tls_roots(mut self, roots: TlsRoots) -> Self {
        self.roots = roots;
        self
    }

    /// The resolver for the relay's host name (default [`SystemResolver`]).
    /// Its answers are vetted by the egress policy all the same.
    #[must_use]
    pub fn resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = resolver;
        self
    }

    /// The bound on connecting to the relay: DNS, TCP, the proxy's CONNECT
    /// and the TLS handshake together (default 10 s). Each request is also
    /// bounded by its exchange's deadline.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long an operation's store lock is leased (default
    /// [`DEFAULT_LEASE`]).
    #[must_use]
    pub fn lock_lease(mut self, lease: Duration) -> Self {
        self.lock_lease = lease;
        self
    }

    /// How long an operation waits for the store lock before failing with
    /// [`Error::Store`] (default [`DEFAULT_LOCK_WAIT`]).
    #[must_use]
    pub fn lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    fn tls_config(&self) -> Result<Arc<rustls::ClientConfig>, Error> {
        client_config(&self.roots).map_err(|e| {
            Error::Transport(human_plus_core::TransportError::new(
                TransportErrorKind::Tls,
                format!("cannot build the TLS configuration: {e}"),
            ))
        })
    }

    fn finish(self, tls: Result<Arc<rustls::ClientConfig>, Error>) -> HumanPlus<S> {
        HumanPlus {
            inner: Arc::new(Inner {
                config: self.config,
                store: self.store,
                ctx: Arc::new(Context {
                    tls,
                    resolver: self.resolver,
                    connect_timeout: self.connect_timeout,
                }),
                lock_lease: self.lock_lease,
                lock_wait: self.lock_wait,
                init: Mutex::new(InitCache::new()),
                warm: Mutex::new(std::collections::HashMap::new()),
            }),
        }
    }

    /// Builds the manager (and the rustls configuration, once).
    ///
    /// # Errors
    /// [`Error::Transport`] of kind `tls` when a root cannot be used.
    pub fn build(self) -> Result<HumanPlus<S>, Error> {
        let tls = self.tls_config()?;
        Ok(self.finish(Ok(tls)))
    }
}

fn store_error(message: String) -> Error {
    Error::Store(StoreError::new(message))
}

impl<S: AsyncAttachmentStore> HumanPlus<S> {
    /// Validates `invitation` against the egress policy and stores a new
    /// attachment for `owner`. No network.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::EgressRefused`], or the store's
    /// error.
    pub fn attach<'a, O: Owner + ?Sized>(
        &'a self,
        owner: &O,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> impl Future<Output = Result<SurfaceAttachment, Error>> + Send + use<'a, S, O> {
        let owner = OwnerKey::of(owner);
        let span = tracing::info_span!("human_plus.attach", attachment = tracing::field::Empty);
        let record_span = span.clone();
        async move {
            let owner = owner?;
            let record = human_plus_core::attach(
                &owner,
                invitation,
                participant,
                &self.inner.config.egress,
                &mut OsEntropy,
            )?;
            record_span.record("attachment", record.id());
            self.inner.store.put(&record, None).await?;
            Ok(record)
        }
        .instrument(span)
    }

    /// The attachment, in any state, after checking its owner. No lock, no
    /// network.
    ///
    /// # Errors
    /// [`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`], or
    /// the store's error.
    pub fn status<'a, O: Owner + ?Sized>(
        &'a self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<SurfaceAttachment, Error>> + Send + use<'a, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let span = tracing::info_span!("human_plus.status", attachment = %id);
        async move {
            let owner = owner?;
            let record = self.load(&id).await?;
            human_plus_core::status(&record, &owner).cloned()
        }
        .instrument(span)
    }

    /// What has been observed of the surface's conflict detection. No lock,
    /// no network.
    ///
    /// # Errors
    /// [`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`],
    /// [`Error::NotAttached`], or the store's error.
    pub fn conflict_detection<'a, O: Owner + ?Sized>(
        &'a self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<ConflictDetection, Error>> + Send + use<'a, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let span = tracing::info_span!("human_plus.conflict_detection", attachment = %id);
        async move {
            let owner = owner?;
            let record = self.load(&id).await?;
            human_plus_core::conflict_detection(&record, &owner)
        }
        .instrument(span)
    }

    /// Discovers the surface's tools and admits them through the trust
    /// policy (reserved confirmation tools never; pins checked).
    ///
    /// # Errors
    /// [`Error::ToolRefused`] (undeclared trust, before anything is
    /// touched; a pin mismatch), the relay's terminal answers
    /// ([`Error::SurfaceUnavailable`], [`Error::AttachmentUnauthorized`]),
    /// [`Error::Timeout`], [`Error::EgressRefused`], [`Error::Transport`],
    /// and the store's errors.
    pub fn tools<'a, O: Owner + ?Sized>(
        &'a self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<Discovery, Error>> + Send + use<'a, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let span = tracing::info_span!(
            "human_plus.tools",
            attachment = %id,
            leg = ?self.inner.config.transport.leg,
        );
        async move {
            let owner = owner?;
            let config = &self.inner.config;
            config.trust.assert_declared()?;
            self.run(&id, |record, init| {
                Operation::tools(record, &owner, config, init, os_entropy(), Instant::now())
            })
            .await
        }
        .instrument(span)
    }

    /// Calls `tool` with `arguments` (a JSON object, or null for `{}`),
    /// pinned to the last revision seen. The result is framed as untrusted
    /// data.
    ///
    /// # Errors
    /// As [`HumanPlus::tools`], and [`Error::SurfaceChangedUnderYou`] when
    /// the surface refused the pin (nothing was applied),
    /// [`Error::ToolFailed`], [`Error::SurfaceError`],
    /// [`Error::InvalidArguments`].
    pub fn call<'a, O: Owner + ?Sized>(
        &'a self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
    ) -> impl Future<Output = Result<CallResult, Error>> + Send + use<'a, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let tool = tool.to_owned();
        let span = tracing::info_span!(
            "human_plus.call",
            attachment = %id,
            tool = %tool,
            leg = ?self.inner.config.transport.leg,
        );
        async move {
            let owner = owner?;
            let config = &self.inner.config;
            config.trust.assert_declared()?;
            self.run(&id, |record, init| {
                Operation::call(
                    record,
                    &owner,
                    &tool,
                    arguments,
                    config,
                    init,
                    os_entropy(),
                    Instant::now(),
                )
            })
            .await
        }
        .instrument(span)
    }

    /// What changed on the surface since the stored revision, through the
    /// surface's change-feed tool (when one is offered and trusted).
    ///
    /// # Errors
    /// As [`HumanPlus::call`].
    pub fn changes_since<'a, O: Owner + ?Sized>(
        &'a self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<SurfaceChanges, Error>> + Send + use<'a, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let span = tracing::info_span!(
            "human_plus.changes_since",
            attachment = %id,
            leg = ?self.inner.config.transport.leg,
        );
        async move {
            let owner = owner?;
            let config = &self.inner.config;
            config.trust.assert_declared()?;
            self.run(&id, |record, init| {
                Operation::changes_since(record, &owner, config, init, os_entropy(), Instant::now())
            })
            .await
        }
        .instrument(span)
    }

    /// Tells the people on the surface what the agent is doing (a
    /// `notifications/human-plus/activity` notification).
    ///
    /// # Errors
    /// The relay's terminal answers, [`Error::Timeout`],
    /// [`Error::EgressRefused`], [`Error::Transport`], and the store's
    /// errors.
    pub fn announce<'a, O: Owner + ?Sized>(
        &'a self,
        owner: &O,
        attachment: &str,
        activity: &Activity,
    ) -> impl Future<Output = Result<(), Error>> + Send + use<'a, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let activity = activity.clone();
        let span = tracing::info_span!("human_plus.announce", attachment = %id);
        async move {
            let owner = owner?;
            let config = &self.inner.config;
            self.run(&id, |record, _| {
                Operation::announce(
                    record,
                    &owner,
                    &activity,
                    config,
                    os_entropy(),
                    Instant::now(),
                )
            })
            .await
        }
        .instrument(span)
    }

    /// Detaches: the attachment moves to `detached`. The relay session is
    /// left alive unless [`ManagerConfig::unregister_on_detach`] is set.
    ///
    /// # Errors
    /// The owner and state checks, and with `unregister_on_detach` the
    /// relay's errors; the store's errors.
    pub fn detach<'a, O: Owner + ?Sized>(
        &'a self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<SurfaceAttachment, Error>> + Send + use<'a, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let span = tracing::info_span!("human_plus.detach", attachment = %id);
        async move {
            let owner = owner?;
            let config = &self.inner.config;
            self.run(&id, |record, _| {
                Operation::detach(record, &owner, config, os_entropy(), Instant::now())
            })
            .await
        }
        .instrument(span)
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ManagerConfig {
        &self.inner.config
    }

    /// The attachment store.
    #[must_use]
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    fn init_cache(&self) -> MutexGuard<'_, InitCache> {
        self.inner
            .init
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn load(&self, id: &str) -> Result<SurfaceAttachment, Error> {
        self.inner
            .store
            .get(id)
            .await?
            .ok_or(Error::AttachmentMissing)
    }

    /// Takes the store lock, its wait bounded by the async-io timer.
    async fn lock(&self, id: &str) -> Result<LockGuard, Error> {
        let wait = self.inner.lock_wait;
        let lock = self.inner.store.lock(id, self.inner.lock_lease);
        let timeout = async move {
            Timer::after(wait).await;
            Err(store_error(format!(
                "the lock of attachment {id} was not free within {wait:?}"
            )))
        };
        future::or(lock, timeout).await
    }

    /// One networked operation: lock, load, build, drive, store, settle.
    async fn run<T, F>(&self, id: &str, build: F) -> Result<T, Error>
    where
        T: OperationOutput,
        F: FnOnce(SurfaceAttachment, &InitCache) -> Result<Operation<T>, Error>,
    {
        let guard = self.lock(id).await?;
        let record = self.load(id).await?;
        // The operation reads the cache once, when it is built: no copy.
        let mut op = build(record, &self.init_cache())?;
        let mut stream = None;
        if self.inner.config.transport.warm {
            let slot = self
                .inner
                .warm
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id);
            if let Some((mut leg, warm_stream)) = slot {
                if let Some(mut s) = warm_stream {
                    s.drain_into(&mut leg);
                    stream = Some(s);
                }
                op = op.with_warm_leg(leg);
            }
        }
        let (mut outcome, stream) = driver::drive(&self.inner.ctx, op, stream).await;
        if let Some(leg) = outcome.warm.take() {
            self.inner
                .warm
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id.to_owned(), (leg, stream));
        }
        let stored = match &outcome.record {
            Some(record) => {
                self.inner
                    .store
                    .put(record, Some(outcome.expected_generation))
                    .await
            }
            None => Ok(()),
        };
        let result = outcome.settle(&mut self.init_cache(), stored);
        guard.release();
        result
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
        let missing = futures_lite::future::block_on(hp.status(&owner, "a")).unwrap_err();
        assert_eq!(missing, Error::AttachmentMissing);
    }
}
