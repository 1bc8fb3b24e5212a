//! # The three Human+ runtimes behind one synchronous interface
//!
//! `human-plus-tokio`, `human-plus-blocking` and `human-plus-async-std`
//! expose the same manager, written once in `human-plus-runtime`. This
//! crate picks one at run time ([`RuntimeKind`]) and makes it synchronous
//! ([`Agent`]): tokio on a runtime of its own, async-std's driver under
//! `async_io::block_on`, the blocking driver on the calling thread. The
//! `human-plus` command, the conformance suite and the benchmarks all drive
//! the runtimes through it. No protocol rule and no manager step lives
//! here.
//!
//! ```
//! use human_plus_any::{AgentSetup, RuntimeKind, build_agent};
//! use human_plus_core::{EgressPolicy, ManagerConfig, TrustPolicy};
//!
//! for kind in RuntimeKind::ALL {
//!     let config = ManagerConfig::new(
//!         EgressPolicy::new(["relay.fancy.example"]).egress_proxy("http://egress.internal:3128"),
//!         TrustPolicy::undeclared(),
//!     );
//!     let agent = build_agent(kind, AgentSetup::new(config))?;
//!     assert_eq!(agent.runtime(), kind);
//!     // Trust was never declared: refused before anything is sent.
//!     assert_eq!(agent.tools("owner", "surface_x").unwrap_err().code(), "tool_refused");
//! }
//! # Ok::<(), human_plus_core::Error>(())
//! ```

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use human_plus_core::{
    Activity, CallResult, ConflictDetection, Discovery, Error, ManagerConfig, Participant,
    ReceiveLeg, Seen, SurfaceAttachment, SurfaceChanges, SurfaceInvitation, SurfaceRevision,
    TransportError, TransportErrorKind,
};
use human_plus_runtime::{
    Attached, Driver, HumanPlus, HumanPlusBuilder, KeptLegBounds, Resolve, ResolveBlocking,
    ResolverOf, StaticResolver, TlsRoots,
};
use human_plus_store::{AsyncAttachmentStore, InMemoryAttachmentStore};
use serde_json::Value;

/// Which runtime an [`Agent`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum RuntimeKind {
    /// `human-plus-tokio` (hyper + rustls).
    #[default]
    Tokio,
    /// `human-plus-blocking` (ureq, a pooled thread per request).
    Blocking,
    /// `human-plus-async-std` (async-io / async-net).
    AsyncStd,
}

impl RuntimeKind {
    /// Every runtime.
    pub const ALL: [RuntimeKind; 3] = [
        RuntimeKind::Tokio,
        RuntimeKind::Blocking,
        RuntimeKind::AsyncStd,
    ];

    /// Its name, as on the command line and in tables.
    ///
    /// ```
    /// assert_eq!(human_plus_any::RuntimeKind::AsyncStd.as_str(), "async-std");
    /// ```
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Tokio => "tokio",
            RuntimeKind::Blocking => "blocking",
            RuntimeKind::AsyncStd => "async-std",
        }
    }
}

impl fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The two receive legs of the Fancy relay, as the suite and the
/// benchmarks run them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LegKind {
    /// SSE.
    Sse,
    /// The Fancy relay's long-poll (20 s wait).
    Poll,
}

impl LegKind {
    /// Both legs.
    pub const ALL: [LegKind; 2] = [LegKind::Sse, LegKind::Poll];

    /// The core's receive leg.
    ///
    /// ```
    /// use human_plus_any::LegKind;
    /// assert_eq!(LegKind::Sse.receive_leg(), human_plus_core::ReceiveLeg::Sse);
    /// ```
    #[must_use]
    pub fn receive_leg(self) -> ReceiveLeg {
        match self {
            LegKind::Sse => ReceiveLeg::Sse,
            LegKind::Poll => ReceiveLeg::FancyPoll {
                wait: Duration::from_secs(20),
            },
        }
    }

    /// Its name in tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            LegKind::Sse => "sse",
            LegKind::Poll => "fancy poll",
        }
    }
}

/// What an [`Agent`] is built from.
#[derive(Debug, Clone)]
pub struct AgentSetup {
    /// The manager configuration (egress, transport, trust, framing).
    pub config: ManagerConfig,
    /// The TLS roots.
    pub roots: TlsRoots,
    /// A fixed name → addresses map for the resolver; empty for the system
    /// resolver. Whatever it answers is vetted by the egress policy.
    pub hosts: Vec<(String, Vec<IpAddr>)>,
    /// The bound on each connection step.
    pub connect_timeout: Duration,
    /// How long an operation waits for the attachment's store lock while
    /// nothing of this manager holds it (then: `attachment_busy`).
    pub lock_wait: Duration,
    /// How long an operation's store lock is leased (renewed every third
    /// of it while the operation runs).
    pub lock_lease: Duration,
    /// The bounds on the receive legs the manager keeps between operations
    /// (in warm mode): how many, and how long unused.
    pub kept_legs: KeptLegBounds,
    /// The in-memory store the manager keeps its records in: a clone of
    /// another agent's store makes the two managers share records and
    /// locks, as two workers on one store.
    pub store: InMemoryAttachmentStore,
    /// How long a shutdown lets the operations in flight finish.
    pub shutdown_grace: Duration,
    /// The tokio runtime's worker threads: 0 for a current-thread runtime
    /// (which runs only while a call runs), more for a multi-threaded one.
    /// The default, 1, keeps kept connections and a warm leg read between
    /// calls.
    pub tokio_workers: usize,
}

impl AgentSetup {
    /// A setup with the bundled roots, the system resolver, a 10 s connect
    /// timeout, the store's default lock wait and lease, the default bounds
    /// on kept legs, a new in-memory store and a tokio runtime with one
    /// worker thread.
    #[must_use]
    pub fn new(config: ManagerConfig) -> Self {
        AgentSetup {
            config,
            roots: TlsRoots::webpki(),
            hosts: Vec::new(),
            connect_timeout: human_plus_runtime::DEFAULT_CONNECT_TIMEOUT,
            lock_wait: human_plus_store::DEFAULT_LOCK_WAIT,
            lock_lease: human_plus_store::DEFAULT_LEASE,
            kept_legs: KeptLegBounds::default(),
            store: InMemoryAttachmentStore::new(),
            shutdown_grace: human_plus_runtime::DEFAULT_SHUTDOWN_GRACE,
            tokio_workers: 1,
        }
    }
}

/// The manager API of every runtime, synchronously. Each method is the
/// runtime's method of the same name, run to completion.
pub trait Agent: Send + Sync {
    /// Which runtime this is.
    fn runtime(&self) -> RuntimeKind;
    /// `attach`: validates the invitation and mints an attachment. No
    /// network.
    ///
    /// # Errors
    /// As the runtime's `attach`.
    fn attach(
        &self,
        owner: &str,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<SurfaceAttachment, Error>;
    /// `attach_verified`: attaches, and stores the record only once the
    /// session answered.
    ///
    /// # Errors
    /// As the runtime's `attach_verified`.
    fn attach_verified(
        &self,
        owner: &str,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<Attached, Error>;
    /// `attach_as`: attaches under a key of the caller's, idempotently.
    ///
    /// # Errors
    /// As the runtime's `attach_as`.
    fn attach_as(
        &self,
        owner: &str,
        key: &str,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<Attached, Error>;
    /// `find`: the attachment kept under a key. No network.
    ///
    /// # Errors
    /// As the runtime's `find`.
    fn find(&self, owner: &str, key: &str) -> Result<Option<SurfaceAttachment>, Error>;
    /// `tools`
    ///
    /// # Errors
    /// As the runtime's `tools`.
    fn tools(&self, owner: &str, id: &str) -> Result<Discovery, Error>;
    /// `call`
    ///
    /// # Errors
    /// As the runtime's `call`.
    fn call(&self, owner: &str, id: &str, tool: &str, args: Value) -> Result<CallResult, Error>;
    /// `call_with_timeout`: `call`, its exchange bounded by `timeout`.
    ///
    /// # Errors
    /// As the runtime's `call_with_timeout`.
    fn call_with_timeout(
        &self,
        owner: &str,
        id: &str,
        tool: &str,
        args: Value,
        timeout: Duration,
    ) -> Result<CallResult, Error>;
    /// `take_seen`: what the receive legs showed since last asked (a list
    /// change, a person's activity); taking it resets it.
    ///
    /// # Errors
    /// `call_at`: the call pinned to `at`, the revision its decision was
    /// made at.
    ///
    /// # Errors
    /// As the runtime's `call_at`.
    fn call_at(
        &self,
        owner: &str,
        id: &str,
        tool: &str,
        args: Value,
        at: SurfaceRevision,
    ) -> Result<CallResult, Error>;
    /// As the runtime's `take_seen`.
    fn take_seen(&self, owner: &str, id: &str) -> Result<Seen, Error>;
    /// `listing_current_for`: how much longer the kept listing stays
    /// provably current, if one is kept.
    ///
    /// # Errors
    /// As the runtime's `listing_current_for`.
    fn listing_current_for(&self, owner: &str, id: &str) -> Result<Option<Duration>, Error>;
    /// `close_idle_legs`: closes the kept legs unused for the idle time,
    /// now; how many. An agent that keeps no legs closes none (the
    /// default).
    fn close_idle_legs(&self) -> usize {
        0
    }
    /// `changes_since`
    ///
    /// # Errors
    /// As the runtime's `changes_since`.
    fn changes_since(&self, owner: &str, id: &str) -> Result<SurfaceChanges, Error>;
    /// `announce`
    ///
    /// # Errors
    /// As the runtime's `announce`.
    fn announce(&self, owner: &str, id: &str, activity: &Activity) -> Result<(), Error>;
    /// `conflict_detection`
    ///
    /// # Errors
    /// As the runtime's `conflict_detection`.
    fn conflict_detection(&self, owner: &str, id: &str) -> Result<ConflictDetection, Error>;
    /// `status`
    ///
    /// # Errors
    /// As the runtime's `status`.
    fn status(&self, owner: &str, id: &str) -> Result<SurfaceAttachment, Error>;
    /// `detach`
    ///
    /// # Errors
    /// As the runtime's `detach`.
    fn detach(&self, owner: &str, id: &str) -> Result<SurfaceAttachment, Error>;
    /// The manager's attachment store.
    fn store(&self) -> &InMemoryAttachmentStore;
    /// `shutdown`: nothing more starts, the locks of running operations
    /// are given back, kept legs and connections are closed.
    fn shutdown(&self);
}

/// Runs a manager's futures to completion.
trait Exec: Send + Sync {
    fn run<F: Future>(&self, fut: F) -> F::Output;
}

/// tokio: a runtime of the agent's own.
struct OnTokio(tokio::runtime::Runtime);

impl Exec for OnTokio {
    fn run<F: Future>(&self, fut: F) -> F::Output {
        self.0.block_on(fut)
    }
}

/// async-std's driver: async-io's reactor and `block_on`.
struct OnAsyncIo;

impl Exec for OnAsyncIo {
    fn run<F: Future>(&self, fut: F) -> F::Output {
        async_io::block_on(fut)
    }
}

/// The blocking driver: its futures run on the calling thread.
struct OnThread;

impl Exec for OnThread {
    fn run<F: Future>(&self, fut: F) -> F::Output {
        human_plus_runtime::block_on(fut)
    }
}

/// A runtime's manager and what runs it: the one implementation of
/// [`Agent`].
struct Run<D: Driver, S, X> {
    kind: RuntimeKind,
    manager: HumanPlus<D, S>,
    exec: X,
    records: InMemoryAttachmentStore,
}

impl<D: Driver, S: AsyncAttachmentStore + 'static, X: Exec> Agent for Run<D, S, X> {
    fn runtime(&self) -> RuntimeKind {
        self.kind
    }
    fn attach(
        &self,
        owner: &str,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<SurfaceAttachment, Error> {
        self.exec
            .run(self.manager.attach(owner, invitation, participant))
    }
    fn attach_verified(
        &self,
        owner: &str,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<Attached, Error> {
        self.exec
            .run(self.manager.attach_verified(owner, invitation, participant))
    }
    fn attach_as(
        &self,
        owner: &str,
        key: &str,
        invitation: SurfaceInvitation,
        participant: Participant,
    ) -> Result<Attached, Error> {
        self.exec
            .run(self.manager.attach_as(owner, key, invitation, participant))
    }
    fn find(&self, owner: &str, key: &str) -> Result<Option<SurfaceAttachment>, Error> {
        self.exec.run(self.manager.find(owner, key))
    }
    fn tools(&self, owner: &str, id: &str) -> Result<Discovery, Error> {
        self.exec.run(self.manager.tools(owner, id))
    }
    fn call(&self, owner: &str, id: &str, tool: &str, args: Value) -> Result<CallResult, Error> {
        self.exec.run(self.manager.call(owner, id, tool, args))
    }
    fn call_with_timeout(
        &self,
        owner: &str,
        id: &str,
        tool: &str,
        args: Value,
        timeout: Duration,
    ) -> Result<CallResult, Error> {
        self.exec.run(
            self.manager
                .call_with_timeout(owner, id, tool, args, timeout),
        )
    }
    fn call_at(
        &self,
        owner: &str,
        id: &str,
        tool: &str,
        args: Value,
        at: SurfaceRevision,
    ) -> Result<CallResult, Error> {
        self.exec
            .run(self.manager.call_at(owner, id, tool, args, at))
    }
    fn take_seen(&self, owner: &str, id: &str) -> Result<Seen, Error> {
        self.exec.run(self.manager.take_seen(owner, id))
    }
    fn listing_current_for(&self, owner: &str, id: &str) -> Result<Option<Duration>, Error> {
        self.exec.run(self.manager.listing_current_for(owner, id))
    }
    fn close_idle_legs(&self) -> usize {
        self.manager.close_idle_legs()
    }
    fn changes_since(&self, owner: &str, id: &str) -> Result<SurfaceChanges, Error> {
        self.exec.run(self.manager.changes_since(owner, id))
    }
    fn announce(&self, owner: &str, id: &str, activity: &Activity) -> Result<(), Error> {
        self.exec.run(self.manager.announce(owner, id, activity))
    }
    fn conflict_detection(&self, owner: &str, id: &str) -> Result<ConflictDetection, Error> {
        self.exec.run(self.manager.conflict_detection(owner, id))
    }
    fn status(&self, owner: &str, id: &str) -> Result<SurfaceAttachment, Error> {
        self.exec.run(self.manager.status(owner, id))
    }
    fn detach(&self, owner: &str, id: &str) -> Result<SurfaceAttachment, Error> {
        self.exec.run(self.manager.detach(owner, id))
    }
    fn store(&self) -> &InMemoryAttachmentStore {
        &self.records
    }
    fn shutdown(&self) {
        self.exec.run(self.manager.shutdown());
    }
}

/// The runtime's builder, configured from `setup`.
fn builder<D: Driver>(
    setup: AgentSetup,
    resolver: Option<Arc<ResolverOf<D>>>,
) -> HumanPlusBuilder<D> {
    let builder = HumanPlusBuilder::<D>::new(setup.config)
        .store(setup.store)
        .tls_roots(setup.roots)
        .connect_timeout(setup.connect_timeout)
        .lock_wait(setup.lock_wait)
        .lock_lease(setup.lock_lease)
        .shutdown_grace(setup.shutdown_grace)
        .kept_legs(setup.kept_legs.max)
        .kept_leg_idle(setup.kept_legs.idle);
    match resolver {
        Some(resolver) => builder.resolver(resolver),
        None => builder,
    }
}

/// Builds the manager of `kind` from `setup`.
///
/// # Errors
/// [`Error::Transport`] when the TLS configuration cannot be built (a bad
/// root), or the tokio runtime cannot start.
pub fn build_agent(kind: RuntimeKind, setup: AgentSetup) -> Result<Box<dyn Agent>, Error> {
    let hosts =
        (!setup.hosts.is_empty()).then(|| setup.hosts.iter().cloned().collect::<StaticResolver>());
    Ok(match kind {
        RuntimeKind::Tokio => {
            let workers = setup.tokio_workers;
            let resolver = hosts.map(|r| Arc::new(r) as Arc<dyn Resolve>);
            let manager = builder::<human_plus_tokio::Tokio>(setup, resolver).build()?;
            let mut rt = if workers == 0 {
                tokio::runtime::Builder::new_current_thread()
            } else {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(workers);
                b
            };
            let rt = rt.enable_all().build().map_err(|e| {
                Error::Transport(TransportError::new(
                    TransportErrorKind::Io,
                    format!("the tokio runtime could not start: {e}"),
                ))
            })?;
            Box::new(Run {
                kind,
                records: manager.store().clone(),
                manager,
                exec: OnTokio(rt),
            })
        }
        RuntimeKind::Blocking => {
            let resolver = hosts.map(|r| Arc::new(r) as Arc<dyn ResolveBlocking>);
            let blocking = builder::<human_plus_blocking::Blocking>(setup, resolver).build()?;
            Box::new(Run {
                kind,
                records: blocking.store().clone(),
                manager: blocking.manager().clone(),
                exec: OnThread,
            })
        }
        RuntimeKind::AsyncStd => {
            let resolver = hosts.map(|r| Arc::new(r) as Arc<dyn Resolve>);
            let manager = builder::<human_plus_async_std::AsyncIo>(setup, resolver).build()?;
            Box::new(Run {
                kind,
                records: manager.store().clone(),
                manager,
                exec: OnAsyncIo,
            })
        }
    })
}
