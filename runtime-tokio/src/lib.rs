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
//! ```no_run
//! use human_plus_tokio::{
//!     Activity, EgressPolicy, HumanPlus, ManagerConfig, NO_PINS, Participant, Priority,
//!     SurfaceInvitation, TrustPolicy,
//! };
//! use serde_json::json;
//!
//! # async fn run() -> Result<(), human_plus_tokio::Error> {
//! let config = ManagerConfig::new(
//!     EgressPolicy::new(["relay.fancy.example"]).egress_proxy("http://egress.internal:3128"),
//!     TrustPolicy::allowing(["sheet_get_cell", "sheet_set_cell", "changes_since"], NO_PINS),
//! );
//! let human_plus = HumanPlus::new(config);
//! let session = "conversation:42"; // the owner: only it can use the attachment
//!
//! let invitation = SurfaceInvitation::new(
//!     "https://relay.fancy.example", "demo_001", "0123456789abcdef0123", "sheet:one", "sheets",
//! )?;
//! let participant = Participant::new("agent-1", "Assistant", "#7c3aed");
//! let attachment = human_plus.attach(session, invitation, participant).await?;
//! let id = attachment.id();
//!
//! let discovery = human_plus.tools(session, id).await?;
//! for tool in &discovery.tools {
//!     println!("{} {}", tool.name(), tool.digest());
//! }
//! let cell = human_plus.call(session, id, "sheet_get_cell", json!({"address": "B4"})).await?;
//! println!("{}", cell.text); // framed as untrusted data
//!
//! human_plus.announce(session, id, &Activity::new("editing").target("B4").priority(Priority::Attention)).await?;
//! match human_plus.call(session, id, "sheet_set_cell", json!({"address": "B4", "value": "12"})).await {
//!     Ok(done) => println!("{}", done.text),
//!     Err(human_plus_tokio::Error::SurfaceChangedUnderYou(refusal)) => {
//!         // A person changed the sheet: nothing was applied. Read what changed, defer.
//!         println!("{refusal}");
//!         let changes = human_plus.changes_since(session, id).await?;
//!         println!("{}", changes.describe());
//!     }
//!     Err(other) => return Err(other),
//! }
//! human_plus.detach(session, id).await?;
//! # Ok(())
//! # }
//! # fn main() {
//! #     let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! #     let _ = rt.block_on(run());
//! # }
//! ```
//!
//! Tests and private relays configure the manager with
//! [`HumanPlus::builder`]: a [`StaticResolver`], extra TLS roots
//! ([`TlsRoots::only`]), another [`AsyncAttachmentStore`], timeouts.
//!
//! How a request reaches the relay: the relay's host is resolved (or taken
//! as the literal IP of the URL) and every address vetted by the egress
//! policy; a refused answer fails the request before any socket opens. With
//! an egress proxy configured, every request (the loopback development mode
//! included) goes through the proxy's HTTP CONNECT tunnel, whose target is
//! the vetted IP address, never the name; TLS (SNI and certificate check on
//! the relay's host) runs inside the tunnel. Without one, the TCP connection
//! goes straight to a vetted address. Each request opens its own connection
//! for now.
//!
//! Every operation's future is `Send`, so it can be spawned on a
//! multi-threaded runtime. Each runs in a `human_plus.<operation>` tracing
//! span (attachment id, tool, receive leg); requests are logged at debug
//! level with the redacted URL. The relay token never appears in a span, an
//! event, an error or `Debug` output.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod connect;
mod driver;
mod perform;
mod resolve;
mod toolset;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use human_plus_core::{
    InitCache, Operation, OperationOutput, OwnerKey, StoreError, TransportError,
    TransportErrorKind, WarmLeg,
};
use human_plus_runtime::{OsEntropy, client_config, os_entropy};
use tracing::Instrument;

pub use human_plus_core as core;
pub use human_plus_core::{
    Activity, AttachmentState, CallResult, ConflictDetection, Discovery, EgressPolicy, Error,
    ManagerConfig, NO_PINS, Owner, Participant, Priority, ReceiveLeg, RelayAuth, ResultGuard,
    SurfaceAttachment, SurfaceChanges, SurfaceInvitation, TransportConfig, TrustPolicy,
};
pub use human_plus_runtime::TlsRoots;
pub use human_plus_store::{
    AsyncAttachmentStore, DEFAULT_LEASE, DEFAULT_LOCK_WAIT, InMemoryAttachmentStore, LockGuard,
};
#[cfg(feature = "redis")] // The Redis store (feature `redis`).
pub use human_plus_store::{AsyncRedisAttachmentStore, Keyring, RedisConfig};
pub use resolve::{Resolve, Resolving, StaticResolver, SystemResolver};
pub use rustls_pki_types::CertificateDer;
#[cfg(feature = "rig")]
pub use toolset::{Approve, rig_error};
pub use toolset::{HumanPlusToolset, SurfaceTool, ToolHandle};

use connect::Connector;
use driver::{WarmStream, drive, now};

/// The default connect timeout: 10 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The Human+ manager for tokio: attaches to surfaces and runs operations
/// on them, holding the attachment store's lock for each.
///
/// Cheap to clone (an [`Arc`] inside); `Send + Sync`.
pub struct HumanPlus<S = InMemoryAttachmentStore> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    config: ManagerConfig,
    store: S,
    connector: Arc<Connector>,
    init: Mutex<InitCache>,
    /// Warm attachments' receive legs between operations (warm mode).
    warm: Mutex<std::collections::HashMap<String, (WarmLeg, Option<WarmStream>)>>,
    lock_lease: Duration,
    lock_wait: Duration,
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
            .field("connect_timeout", &self.inner.connector.connect_timeout)
            .field("lock_lease", &self.inner.lock_lease)
            .field("lock_wait", &self.inner.lock_wait)
            .finish_non_exhaustive()
    }
}

impl HumanPlus<InMemoryAttachmentStore> {
    /// A manager with an in-memory store, the webpki roots and the system
    /// resolver.
    ///
    /// Should the TLS configuration fail to build (it does not with the
    /// bundled roots), every HTTPS request fails with a TLS transport error;
    /// use [`HumanPlus::builder`] to see such an error up front.
    #[must_use]
    pub fn new(config: ManagerConfig) -> Self {
        HumanPlus::builder(config).assemble()
    }

    /// A builder starting from an in-memory store, the webpki roots, the
    /// system resolver and the default timeouts.
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

/// Configures a [`HumanPlus`].
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use human_plus_tokio::{EgressPolicy, HumanPlus, InMemoryAttachmentStore, ManagerConfig, NO_PINS, StaticResolver, TlsRoots, TrustPolicy};
///
/// let config = ManagerConfig::new(
///     EgressPolicy::new(["relay.test"]).allow_unverified_egress(true),
///     TrustPolicy::every_tool(NO_PINS),
/// );
/// let human_plus = HumanPlus::builder(config)
///     .store(InMemoryAttachmentStore::new())
///     .tls_roots(TlsRoots::webpki())
///     .resolver(Arc::new(StaticResolver::new().with("relay.test", ["93.184.215.14".parse().unwrap()])))
///     .connect_timeout(Duration::from_secs(5))
///     .lock_wait(Duration::from_secs(2))
///     .build()?;
/// assert!(human_plus.store().is_empty());
/// # Ok::<(), human_plus_tokio::Error>(())
/// ```
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

impl<S> HumanPlusBuilder<S> {
    /// Uses `store` for attachment records.
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

    /// The resolver for relay host names (default [`SystemResolver`]). Its
    /// answers are vetted by the egress policy either way.
    #[must_use]
    pub fn resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = resolver;
        self
    }

    /// The bound on each connection step: resolution, each TCP connection
    /// attempt, the proxy's CONNECT answer, the TLS handshake (default
    /// 10 s). Every request is also bounded by its exchange's deadline.
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

    /// How long an operation waits for the store lock (default
    /// [`DEFAULT_LOCK_WAIT`]).
    #[must_use]
    pub fn lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    /// Builds the manager, and its rustls configuration once.
    ///
    /// # Errors
    /// [`Error::Transport`] of kind TLS when a root cannot be used.
    pub fn build(self) -> Result<HumanPlus<S>, Error> {
        let manager = self.assemble();
        if let Err(e) = &manager.inner.connector.tls {
            return Err(Error::Transport(e.clone()));
        }
        Ok(manager)
    }

    fn assemble(self) -> HumanPlus<S> {
        let tls = client_config(&self.roots).map_err(|e| {
            TransportError::new(
                TransportErrorKind::Tls,
                format!("the TLS client configuration could not be built: {e}"),
            )
        });
        HumanPlus {
            inner: Arc::new(Inner {
                config: self.config,
                store: self.store,
                connector: Arc::new(Connector {
                    tls,
                    resolver: self.resolver,
                    connect_timeout: self.connect_timeout,
                }),
                init: Mutex::new(InitCache::new()),
                warm: Mutex::new(std::collections::HashMap::new()),
                lock_lease: self.lock_lease,
                lock_wait: self.lock_wait,
            }),
        }
    }
}

impl<S: AsyncAttachmentStore> HumanPlus<S> {
    /// Validates `invitation` against the egress policy, mints an
    /// attachment for `participant`, owned by `owner`, and stores it. No
    /// network.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::EgressRefused`], or the store's.
    pub fn attach<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> impl Future<Output = Result<SurfaceAttachment, Error>> + Send + use<'s, S, O> {
        let owner = OwnerKey::of(owner);
        let span = tracing::info_span!(
            "human_plus.attach",
            attachment = tracing::field::Empty,
            surface = invitation.surface_id(),
        );
        async move {
            let owner = owner?;
            let record = human_plus_core::attach(
                &owner,
                invitation,
                participant,
                &self.inner.config.egress,
                &mut OsEntropy,
            )?;
            tracing::Span::current().record("attachment", record.id());
            self.inner.store.put(&record, None).await?;
            Ok(record)
        }
        .instrument(span)
    }

    /// Discovers the surface's tools and admits them through the trust
    /// policy (reserved confirmation tools are always withheld).
    ///
    /// # Errors
    /// [`Error::ToolRefused`] for undeclared trust (nothing is sent) or a
    /// pin mismatch; the relay's and transport's errors.
    pub fn tools<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<Discovery, Error>> + Send + use<'s, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let span = tracing::info_span!("human_plus.tools", attachment = %id, leg = ?self.inner.config.transport.leg);
        async move {
            let owner = owner?;
            self.inner.config.trust.assert_declared()?;
            self.locked(id, move |record, config, init, now| {
                Operation::tools(record, &owner, config, init, os_entropy(), now)
            })
            .await
        }
        .instrument(span)
    }

    /// Calls `tool` with `arguments` (a JSON object, or null for `{}`),
    /// pinned to the last revision seen; the result is framed as untrusted
    /// data.
    ///
    /// # Errors
    /// [`Error::SurfaceChangedUnderYou`] when the surface refused the pin
    /// (nothing was applied); [`Error::ToolRefused`],
    /// [`Error::ToolFailed`], the relay's and transport's errors.
    pub fn call<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
    ) -> impl Future<Output = Result<CallResult, Error>> + Send + use<'s, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let tool = tool.to_owned();
        let span = tracing::info_span!("human_plus.call", attachment = %id, tool = %tool, leg = ?self.inner.config.transport.leg);
        async move {
            let owner = owner?;
            self.inner.config.trust.assert_declared()?;
            self.locked(id, move |record, config, init, now| {
                Operation::call(
                    record,
                    &owner,
                    &tool,
                    arguments,
                    config,
                    init,
                    os_entropy(),
                    now,
                )
            })
            .await
        }
        .instrument(span)
    }

    /// Asks the surface's change feed what changed since the last revision
    /// seen, and by whom.
    ///
    /// # Errors
    /// As [`HumanPlus::call`].
    pub fn changes_since<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<SurfaceChanges, Error>> + Send + use<'s, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let span = tracing::info_span!("human_plus.changes_since", attachment = %id, leg = ?self.inner.config.transport.leg);
        async move {
            let owner = owner?;
            self.inner.config.trust.assert_declared()?;
            self.locked(id, move |record, config, init, now| {
                Operation::changes_since(record, &owner, config, init, os_entropy(), now)
            })
            .await
        }
        .instrument(span)
    }

    /// Tells the surface what the agent is doing (a
    /// `notifications/human-plus/activity` notification).
    ///
    /// # Errors
    /// The relay's and transport's errors.
    pub fn announce<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        activity: &Activity,
    ) -> impl Future<Output = Result<(), Error>> + Send + use<'s, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let activity = activity.clone();
        let span = tracing::info_span!("human_plus.announce", attachment = %id, leg = ?self.inner.config.transport.leg);
        async move {
            let owner = owner?;
            self.locked(id, move |record, config, _init, now| {
                Operation::announce(record, &owner, &activity, config, os_entropy(), now)
            })
            .await
        }
        .instrument(span)
    }

    /// What has been observed of the surface's conflict detection. No
    /// network.
    ///
    /// # Errors
    /// [`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`],
    /// [`Error::NotAttached`], or the store's.
    pub fn conflict_detection<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<ConflictDetection, Error>> + Send + use<'s, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        async move {
            let owner = owner?;
            let record = self.load(&id).await?;
            human_plus_core::conflict_detection(&record, &owner)
        }
    }

    /// The attachment, in any state. No network, no lock.
    ///
    /// # Errors
    /// [`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`], or
    /// the store's.
    pub fn status<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<SurfaceAttachment, Error>> + Send + use<'s, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        async move {
            let owner = owner?;
            let record = self.load(&id).await?;
            human_plus_core::status(&record, &owner).cloned()
        }
    }

    /// Leaves the surface: the attachment becomes `detached`. The relay
    /// session (the person's page) stays alive unless
    /// [`ManagerConfig::unregister_on_detach`] is set.
    ///
    /// # Errors
    /// [`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`],
    /// [`Error::NotAttached`], or the store's.
    pub fn detach<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<SurfaceAttachment, Error>> + Send + use<'s, S, O> {
        let owner = OwnerKey::of(owner);
        let id = attachment.to_owned();
        let span = tracing::info_span!("human_plus.detach", attachment = %id, leg = ?self.inner.config.transport.leg);
        async move {
            let owner = owner?;
            self.locked(id, move |record, config, _init, now| {
                Operation::detach(record, &owner, config, os_entropy(), now)
            })
            .await
        }
        .instrument(span)
    }

    /// The manager's configuration.
    #[must_use]
    pub fn config(&self) -> &ManagerConfig {
        &self.inner.config
    }

    /// The attachment store.
    #[must_use]
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    async fn load(&self, id: &str) -> Result<SurfaceAttachment, Error> {
        self.inner
            .store
            .get(id)
            .await?
            .ok_or(Error::AttachmentMissing)
    }

    /// The manager flow of every networked operation: take the store lock
    /// for the whole operation, load the record, start the operation, drive
    /// it, store the changed record with a compare-and-set, settle the init
    /// cache, release the lock.
    async fn locked<T, F>(&self, id: String, start: F) -> Result<T, Error>
    where
        T: OperationOutput + Send,
        F: FnOnce(
                SurfaceAttachment,
                &ManagerConfig,
                &InitCache,
                Instant,
            ) -> Result<Operation<T>, Error>
            + Send,
    {
        let inner = &*self.inner;
        let lock = inner.store.lock(&id, inner.lock_lease);
        let guard = match tokio::time::timeout(inner.lock_wait, lock).await {
            Ok(guard) => guard?,
            Err(_) => {
                return Err(Error::Store(StoreError::new(format!(
                    "the lock of attachment {id} was not free within {:?}",
                    inner.lock_wait
                ))));
            }
        };
        let record = self.load(&id).await?;
        // The operation reads the cache once, when it is built: no copy.
        let mut op = {
            let cache = inner.init.lock().unwrap_or_else(PoisonError::into_inner);
            start(record, &inner.config, &cache, now())?
        };
        let mut stream = None;
        if inner.config.transport.warm {
            let slot = inner
                .warm
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            if let Some((mut leg, warm_stream)) = slot {
                if let Some(mut s) = warm_stream {
                    s.drain_into(&mut leg);
                    stream = Some(s);
                }
                op = op.with_warm_leg(leg);
            }
        }
        let (mut outcome, stream) = drive(op, &inner.connector, stream).await?;
        if let Some(leg) = outcome.warm.take() {
            inner
                .warm
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id.clone(), (leg, stream));
        }
        let stored = match &outcome.record {
            Some(record) => {
                inner
                    .store
                    .put(record, Some(outcome.expected_generation))
                    .await
            }
            None => Ok(()),
        };
        let result = {
            let mut cache = inner.init.lock().unwrap_or_else(PoisonError::into_inner);
            outcome.settle(&mut cache, stored)
        };
        drop(guard);
        result
    }
}
