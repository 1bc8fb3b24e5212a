//! # Human+ for blocking code
//!
//! `human-plus-blocking` lets an AI agent join a live application surface
//! (a sheet, a graph, a canvas a person has open) from plain blocking Rust:
//! queue workers, scripts, CLIs. No async runtime is involved: every HTTP
//! request runs on a pooled request thread over [ureq](https://docs.rs/ureq)
//! 3, and the calling thread drives the sans-IO [`human_plus_core`], which
//! owns every protocol rule.
//!
//! ```no_run
//! use human_plus_blocking::{
//!     Activity, EgressPolicy, HumanPlus, ManagerConfig, Participant, SurfaceInvitation,
//!     TrustPolicy,
//! };
//! use serde_json::json;
//!
//! # fn main() -> Result<(), human_plus_blocking::Error> {
//! // Declare where the agent may connect and which tools it trusts.
//! let config = ManagerConfig::new(
//!     EgressPolicy::new(["relay.fancy.example"]).egress_proxy("http://egress.internal:3128"),
//!     TrustPolicy::allowing(["sheet_get_cell", "sheet_set_cell", "changes_since"], [(
//!         "sheet_set_cell",
//!         "sha256:0f3c5e8a9d7b6a5c4e3f2a1b0c9d8e7f",
//!     )]),
//! );
//! let human_plus = HumanPlus::new(config);
//!
//! // The invitation the person's page handed out (no network yet).
//! let invitation = SurfaceInvitation::new(
//!     "https://relay.fancy.example",
//!     "demo_001",
//!     "0123456789abcdef0123",
//!     "sheet:one",
//!     "Sheets",
//! )?;
//! let owner = "session:42";
//! let attachment = human_plus.attach(
//!     owner,
//!     invitation,
//!     Participant::new("agent-1", "Assistant", "#7c3aed"),
//! )?;
//!
//! // Discover the tools local trust admits, read, and write pinned to
//! // the revision the read returned.
//! let discovery = human_plus.tools(owner, attachment.id())?;
//! println!("{} tools admitted", discovery.tools.len());
//! let read = human_plus.call(owner, attachment.id(), "sheet_get_cell", json!({"address": "B4"}))?;
//! println!("{}", read.text);
//! match human_plus.call(owner, attachment.id(), "sheet_set_cell", json!({"address": "B4", "value": "12"})) {
//!     Ok(written) => println!("written at {:?}", written.revision),
//!     // The person changed the sheet since the read: nothing was written.
//!     Err(human_plus_blocking::Error::SurfaceChangedUnderYou(refusal)) => {
//!         println!("{refusal}");
//!         let changes = human_plus.changes_since(owner, attachment.id())?;
//!         println!("defer to: {:?}", changes.defer_to());
//!     }
//!     Err(other) => return Err(other),
//! }
//! human_plus.announce(owner, attachment.id(), &Activity::new("editing").target("cell:B4"))?;
//! human_plus.detach(owner, attachment.id())?;
//! # Ok(())
//! # }
//! ```
//!
//! ## How requests run
//!
//! Each operation takes the store's lock of the attachment, builds the
//! core's [`core::Operation`] and drives it on the calling thread. Every
//! HTTP request the core asks for runs on a request thread of its own,
//! which reports the response head, each body chunk as it arrives (8 KiB
//! reads, so the SSE leg streams), and the end, into a bounded channel; the
//! driver waits on that channel until the core's next timer. Request
//! threads are pooled per manager: a thread whose request has ended waits
//! up to 5 s for the next one, so a worker calling again and again reuses
//! them instead of starting threads on every call. There is no cap: a
//! request never waits for a thread.
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
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod driver;
mod pool;
mod resolve;
mod toolset;
mod transport;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

pub use human_plus_core as core;
pub use human_plus_core::{
    Activity, AttachmentState, CallResult, ConflictDetection, Discovery, EgressPolicy, Error,
    ManagerConfig, NO_PINS, Owner, Participant, Priority, ReceiveLeg, RelayAuth, ResultGuard,
    SurfaceAttachment, SurfaceChanges, SurfaceInvitation, TransportConfig, TrustPolicy,
};
pub use human_plus_runtime::TlsRoots;
pub use human_plus_store::{AttachmentStore, InMemoryAttachmentStore, LockGuard};
#[cfg(feature = "redis")] // The Redis store (feature `redis`).
pub use human_plus_store::{Keyring, RedisAttachmentStore, RedisConfig};
pub use resolve::{Resolve, StaticResolver, SystemResolver};
pub use toolset::{HumanPlusToolset, SurfaceTool, ToolHandle};

use human_plus_core::{
    InitCache, Operation, OperationOutput, OwnerKey, TransportError, TransportErrorKind,
};
use human_plus_runtime::{OsEntropy, client_config, os_entropy};

use driver::{Net, drive};
use pool::Pool;

/// The default TCP connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The Human+ manager for blocking code: attaches an agent to surfaces and
/// runs its operations.
///
/// Cheap to clone and share between threads (everything is behind an
/// `Arc`). Operations on one attachment are serialised by the store's lock;
/// operations on different attachments run in parallel.
pub struct HumanPlus<S = InMemoryAttachmentStore> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    config: ManagerConfig,
    store: S,
    net: Arc<Net>,
    lock_lease: Duration,
    lock_wait: Duration,
    init: Mutex<InitCache>,
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
            .field("connect_timeout", &self.inner.net.connect_timeout)
            .field("lock_lease", &self.inner.lock_lease)
            .field("lock_wait", &self.inner.lock_wait)
            .finish_non_exhaustive()
    }
}

/// Configures a [`HumanPlus`]: its store, TLS roots, DNS and timeouts.
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

fn tls_config_error(e: &rustls::Error) -> Error {
    Error::Transport(TransportError::new(
        TransportErrorKind::Tls,
        format!("the TLS client configuration could not be built: {e}"),
    ))
}

impl HumanPlus<InMemoryAttachmentStore> {
    /// A manager with an in-memory store, the webpki roots, the system
    /// resolver and the default timeouts.
    ///
    /// ```
    /// use human_plus_blocking::{EgressPolicy, HumanPlus, ManagerConfig, TrustPolicy};
    ///
    /// let human_plus = HumanPlus::new(ManagerConfig::new(
    ///     EgressPolicy::new(["relay.fancy.example"]).egress_proxy("http://egress.internal:3128"),
    ///     TrustPolicy::undeclared(),
    /// ));
    /// assert!(human_plus.store().is_empty());
    /// ```
    #[must_use]
    pub fn new(config: ManagerConfig) -> Self {
        let builder = Self::builder(config);
        // The webpki roots always form a valid configuration; should that
        // ever fail, the error is reported by each TLS request instead of
        // a panic here.
        let tls = client_config(&builder.roots).map_err(|e| tls_config_error(&e));
        builder.assemble(tls)
    }

    /// A builder starting from the defaults of [`HumanPlus::new`].
    #[must_use]
    pub fn builder(config: ManagerConfig) -> HumanPlusBuilder<InMemoryAttachmentStore> {
        HumanPlusBuilder {
            config,
            store: InMemoryAttachmentStore::new(),
            roots: TlsRoots::webpki(),
            resolver: Arc::new(SystemResolver),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            lock_lease: human_plus_store::DEFAULT_LEASE,
            lock_wait: human_plus_store::DEFAULT_LOCK_WAIT,
        }
    }
}

impl<S> HumanPlusBuilder<S> {
    /// Uses `store` for attachment records (default: a fresh
    /// [`InMemoryAttachmentStore`]).
    #[must_use]
    pub fn store<S2: AttachmentStore>(self, store: S2) -> HumanPlusBuilder<S2> {
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

    /// The DNS resolver (default [`SystemResolver`]). Its answers are still
    /// vetted by the egress policy.
    #[must_use]
    pub fn resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = resolver;
        self
    }

    /// The TCP connect timeout, covering the proxy tunnel and the TLS
    /// handshake too (default 10 s). A request never outlives its
    /// exchange's deadline whatever this is.
    #[must_use]
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// How long an operation's lock is leased (default
    /// [`human_plus_store::DEFAULT_LEASE`]).
    #[must_use]
    pub fn lock_lease(mut self, d: Duration) -> Self {
        self.lock_lease = d;
        self
    }

    /// How long an operation waits for the attachment's lock (default
    /// [`human_plus_store::DEFAULT_LOCK_WAIT`]).
    #[must_use]
    pub fn lock_wait(mut self, d: Duration) -> Self {
        self.lock_wait = d;
        self
    }

    /// Builds the manager, and the rustls configuration once.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use human_plus_blocking::{EgressPolicy, HumanPlus, ManagerConfig, StaticResolver, TlsRoots, TrustPolicy};
    ///
    /// let human_plus = HumanPlus::builder(ManagerConfig::new(
    ///     EgressPolicy::new(["relay.test"]).allow_unverified_egress(true),
    ///     TrustPolicy::undeclared(),
    /// ))
    /// .tls_roots(TlsRoots::only([]))
    /// .resolver(Arc::new(StaticResolver::new()))
    /// .build()?;
    /// # let _ = human_plus;
    /// # Ok::<(), human_plus_blocking::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Transport`] of kind [`TransportErrorKind::Tls`] when a root
    /// cannot be used.
    pub fn build(self) -> Result<HumanPlus<S>, Error> {
        let tls = client_config(&self.roots).map_err(|e| tls_config_error(&e))?;
        Ok(self.assemble(Ok(tls)))
    }

    fn assemble(self, tls: Result<Arc<rustls::ClientConfig>, Error>) -> HumanPlus<S> {
        let mut config = self.config;
        // The warm-attachment mode keeps a stream open between operations,
        // which a blocking worker has no thread to read: it is for the
        // async runtimes, and off here whatever the configuration says.
        config.transport.warm = false;
        HumanPlus {
            inner: Arc::new(Inner {
                config,
                store: self.store,
                net: Arc::new(Net {
                    tls,
                    resolver: self.resolver,
                    connect_timeout: self.connect_timeout,
                    pool: Pool::new(pool::IDLE_TIMEOUT),
                }),
                lock_lease: self.lock_lease,
                lock_wait: self.lock_wait,
                init: Mutex::new(InitCache::new()),
            }),
        }
    }
}

/// The operations, for the names of their spans.
#[derive(Clone, Copy)]
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

fn op_span(op: Op, attachment: &str, tool: Option<&str>, leg: &ReceiveLeg) -> tracing::Span {
    let leg = leg_label(leg);
    match op {
        Op::Tools => tracing::info_span!("human_plus.tools", attachment, leg),
        Op::Call => tracing::info_span!("human_plus.call", attachment, tool, leg),
        Op::ChangesSince => tracing::info_span!("human_plus.changes_since", attachment, leg),
        Op::Announce => tracing::info_span!("human_plus.announce", attachment, leg),
        Op::Detach => tracing::info_span!("human_plus.detach", attachment, leg),
    }
}

impl<S: AttachmentStore> HumanPlus<S> {
    /// Validates `invitation` against the egress policy and stores a new
    /// attachment for `owner`. No network.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::EgressRefused`] when the policy
    /// refuses the relay URL, or the store's error.
    pub fn attach<O: Owner + ?Sized>(
        &self,
        owner: &O,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<SurfaceAttachment, Error> {
        let owner = OwnerKey::of(owner)?;
        let record = human_plus_core::attach(
            &owner,
            invitation,
            participant,
            &self.inner.config.egress,
            &mut OsEntropy,
        )?;
        self.inner.store.put(&record, None)?;
        tracing::debug!(attachment = record.id(), "attached");
        Ok(record)
    }

    /// Initialises the MCP session if needed and lists the surface's tools
    /// through the trust policy: the admitted ones, and what was withheld.
    ///
    /// # Errors
    /// [`Error::ToolRefused`] for undeclared trust (before anything is
    /// touched) or a changed pin; the attachment's and the relay's errors.
    pub fn tools<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<Discovery, Error> {
        let owner = OwnerKey::of(owner)?;
        self.inner.config.trust.assert_declared()?;
        self.run(Op::Tools, attachment, None, |record, config, init, now| {
            Operation::tools(record, &owner, config, init, os_entropy(), now)
        })
    }

    /// Calls `tool` with `arguments` (a JSON object, or null), pinned to
    /// the attachment's last revision. The result text is framed as
    /// untrusted data.
    ///
    /// # Errors
    /// [`Error::SurfaceChangedUnderYou`] when the surface changed since the
    /// pinned revision (nothing was applied); [`Error::ToolRefused`],
    /// [`Error::ToolFailed`], the attachment's and the relay's errors.
    pub fn call<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
    ) -> Result<CallResult, Error> {
        let owner = OwnerKey::of(owner)?;
        self.inner.config.trust.assert_declared()?;
        self.run(
            Op::Call,
            attachment,
            Some(tool),
            |record, config, init, now| {
                Operation::call(
                    record,
                    &owner,
                    tool,
                    arguments,
                    config,
                    init,
                    os_entropy(),
                    now,
                )
            },
        )
    }

    /// Asks the surface's change feed what changed since the attachment's
    /// revision, and who changed it.
    ///
    /// # Errors
    /// As [`HumanPlus::call`].
    pub fn changes_since<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<SurfaceChanges, Error> {
        let owner = OwnerKey::of(owner)?;
        self.inner.config.trust.assert_declared()?;
        self.run(
            Op::ChangesSince,
            attachment,
            None,
            |record, config, init, now| {
                Operation::changes_since(record, &owner, config, init, os_entropy(), now)
            },
        )
    }

    /// Tells the people on the surface what the agent is doing.
    ///
    /// # Errors
    /// The attachment's and the relay's errors.
    pub fn announce<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        activity: &Activity,
    ) -> Result<(), Error> {
        let owner = OwnerKey::of(owner)?;
        self.run(
            Op::Announce,
            attachment,
            None,
            |record, config, _init, now| {
                Operation::announce(record, &owner, activity, config, os_entropy(), now)
            },
        )
    }

    /// What has been observed of the surface's conflict detection. No
    /// network.
    ///
    /// # Errors
    /// [`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`],
    /// [`Error::NotAttached`], or the store's error.
    pub fn conflict_detection<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<ConflictDetection, Error> {
        let owner = OwnerKey::of(owner)?;
        let record = self.load(attachment)?;
        human_plus_core::conflict_detection(&record, &owner)
    }

    /// The attachment's record, in any state. No network.
    ///
    /// # Errors
    /// [`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`], or
    /// the store's error.
    pub fn status<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<SurfaceAttachment, Error> {
        let owner = OwnerKey::of(owner)?;
        let record = self.load(attachment)?;
        human_plus_core::status(&record, &owner).cloned()
    }

    /// Detaches: the attachment becomes `detached`. The relay session (the
    /// person's page) stays alive unless the configuration asks for
    /// `unregister_on_detach`.
    ///
    /// # Errors
    /// The attachment's and, with `unregister_on_detach`, the relay's
    /// errors.
    pub fn detach<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
    ) -> Result<SurfaceAttachment, Error> {
        let owner = OwnerKey::of(owner)?;
        self.run(
            Op::Detach,
            attachment,
            None,
            |record, config, _init, now| {
                Operation::detach(record, &owner, config, os_entropy(), now)
            },
        )
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

    fn load(&self, attachment: &str) -> Result<SurfaceAttachment, Error> {
        self.inner
            .store
            .get(attachment)?
            .ok_or(Error::AttachmentMissing)
    }

    /// Runs one networked operation under the attachment's lock: load,
    /// build, drive, store the changed record (compare-and-set on the
    /// loaded generation), settle the init cache.
    fn run<T: OperationOutput>(
        &self,
        op: Op,
        attachment: &str,
        tool: Option<&str>,
        build: impl FnOnce(
            SurfaceAttachment,
            &ManagerConfig,
            &InitCache,
            Instant,
        ) -> Result<Operation<T>, Error>,
    ) -> Result<T, Error> {
        let inner = &*self.inner;
        let span = op_span(op, attachment, tool, &inner.config.transport.leg);
        let _entered = span.enter();
        let _lock = inner
            .store
            .lock(attachment, inner.lock_lease, inner.lock_wait)?;
        let record = self.load(attachment)?;
        // The operation reads the cache once, when it is built: no copy.
        let operation = {
            let init = inner.init.lock().unwrap_or_else(PoisonError::into_inner);
            build(record, &inner.config, &init, Instant::now())?
        };
        let outcome = drive(&inner.net, operation);
        let stored = match &outcome.record {
            Some(record) => inner.store.put(record, Some(outcome.expected_generation)),
            None => Ok(()),
        };
        let mut init = inner.init.lock().unwrap_or_else(PoisonError::into_inner);
        let result = outcome.settle(&mut init, stored);
        if let Err(e) = &result {
            tracing::debug!(code = e.code(), "operation failed");
        }
        result
    }
}
