//! The three runtimes' managers behind one synchronous interface.
//!
//! `human-plus-tokio`, `human-plus-blocking` and `human-plus-async-std`
//! expose the same `HumanPlus` methods; [`Agent`] is that API made
//! synchronous (tokio on its own current-thread runtime, async-std through
//! `async_io::block_on`), so every command runs on whichever runtime
//! `--runtime` names. No protocol rule lives here.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use human_plus_core::{
    Activity, CallResult, ConflictDetection, Discovery, Error, ManagerConfig, Participant,
    StoreError, SurfaceAttachment, SurfaceChanges, SurfaceInvitation, SurfaceRevision,
};
use human_plus_runtime::TlsRoots;
use human_plus_store::{AttachmentStore, InMemoryAttachmentStore};
use serde_json::Value;

use crate::args::RuntimeKind;

/// The manager API of every runtime, synchronously.
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
}

/// What a manager is built from.
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
}

impl AgentSetup {
    /// A setup with the bundled roots, the system resolver and a 10 s
    /// connect timeout.
    #[must_use]
    pub fn new(config: ManagerConfig) -> Self {
        AgentSetup {
            config,
            roots: TlsRoots::webpki(),
            hosts: Vec::new(),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

macro_rules! forward_agent {
    ($ty:ty, $kind:expr, |$s:ident, $e:ident| $wrap:expr) => {
        impl Agent for $ty {
            fn runtime(&self) -> RuntimeKind {
                $kind
            }
            fn attach(
                &self,
                owner: &str,
                invitation: SurfaceInvitation,
                participant: Participant,
            ) -> Result<SurfaceAttachment, Error> {
                let $s = self;
                let $e = $s.hp.attach(owner, invitation, participant);
                $wrap
            }
            fn tools(&self, owner: &str, id: &str) -> Result<Discovery, Error> {
                let $s = self;
                let $e = $s.hp.tools(owner, id);
                $wrap
            }
            fn call(
                &self,
                owner: &str,
                id: &str,
                tool: &str,
                args: Value,
            ) -> Result<CallResult, Error> {
                let $s = self;
                let $e = $s.hp.call(owner, id, tool, args);
                $wrap
            }
            fn changes_since(&self, owner: &str, id: &str) -> Result<SurfaceChanges, Error> {
                let $s = self;
                let $e = $s.hp.changes_since(owner, id);
                $wrap
            }
            fn announce(&self, owner: &str, id: &str, activity: &Activity) -> Result<(), Error> {
                let $s = self;
                let $e = $s.hp.announce(owner, id, activity);
                $wrap
            }
            fn conflict_detection(
                &self,
                owner: &str,
                id: &str,
            ) -> Result<ConflictDetection, Error> {
                let $s = self;
                let $e = $s.hp.conflict_detection(owner, id);
                $wrap
            }
            fn status(&self, owner: &str, id: &str) -> Result<SurfaceAttachment, Error> {
                let $s = self;
                let $e = $s.hp.status(owner, id);
                $wrap
            }
            fn detach(&self, owner: &str, id: &str) -> Result<SurfaceAttachment, Error> {
                let $s = self;
                let $e = $s.hp.detach(owner, id);
                $wrap
            }
            fn store(&self) -> &InMemoryAttachmentStore {
                self.hp.store()
            }
        }
    };
}

struct TokioAgent {
    rt: tokio::runtime::Runtime,
    hp: human_plus_tokio::HumanPlus,
}

forward_agent!(TokioAgent, RuntimeKind::Tokio, |s, e| s.rt.block_on(e));

struct BlockingAgent {
    hp: human_plus_blocking::HumanPlus,
}

forward_agent!(BlockingAgent, RuntimeKind::Blocking, |s, e| {
    let _ = s;
    e
});

struct AsyncStdAgent {
    hp: human_plus_async_std::HumanPlus,
}

forward_agent!(AsyncStdAgent, RuntimeKind::AsyncStd, |s, e| {
    let _ = s;
    async_io::block_on(e)
});

/// Builds the manager of `kind` from `setup`.
///
/// # Errors
/// [`Error::Transport`] when the TLS configuration cannot be built (a bad
/// root), or the tokio runtime cannot start.
pub fn build_agent(kind: RuntimeKind, setup: AgentSetup) -> Result<Box<dyn Agent>, Error> {
    let AgentSetup {
        config,
        roots,
        hosts,
        connect_timeout,
    } = setup;
    Ok(match kind {
        RuntimeKind::Tokio => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| {
                    Error::Transport(human_plus_core::TransportError::new(
                        human_plus_core::TransportErrorKind::Io,
                        format!("the tokio runtime could not start: {e}"),
                    ))
                })?;
            let mut b = human_plus_tokio::HumanPlus::builder(config)
                .tls_roots(roots)
                .connect_timeout(connect_timeout);
            if !hosts.is_empty() {
                let mut r = human_plus_tokio::StaticResolver::new();
                for (host, addrs) in hosts {
                    r = r.with(host, addrs);
                }
                b = b.resolver(Arc::new(r));
            }
            Box::new(TokioAgent { rt, hp: b.build()? })
        }
        RuntimeKind::Blocking => {
            let mut b = human_plus_blocking::HumanPlus::builder(config)
                .tls_roots(roots)
                .connect_timeout(connect_timeout);
            if !hosts.is_empty() {
                let mut r = human_plus_blocking::StaticResolver::new();
                for (host, addrs) in hosts {
                    r = r.with(&host, addrs);
                }
                b = b.resolver(Arc::new(r));
            }
            Box::new(BlockingAgent { hp: b.build()? })
        }
        RuntimeKind::AsyncStd => {
            let mut b = human_plus_async_std::HumanPlus::builder(config)
                .tls_roots(roots)
                .connect_timeout(connect_timeout);
            if !hosts.is_empty() {
                let mut r = human_plus_async_std::StaticResolver::new();
                for (host, addrs) in hosts {
                    r = r.with(host, addrs);
                }
                b = b.resolver(Arc::new(r));
            }
            Box::new(AsyncStdAgent { hp: b.build()? })
        }
    })
}

/// Stores `token` as the attachment's current revision, so the next call
/// is pinned to it, as if a result had carried it.
///
/// This is how `call --revision` and `changes --since` carry a revision
/// from one process to the next, and how `probe` pins a call to a revision
/// the surface never issued.
///
/// # Errors
/// [`Error::InvalidRevision`] for a blank or oversized marker,
/// [`Error::AttachmentMissing`], or the store's.
pub fn store_revision(
    agent: &dyn Agent,
    attachment: &str,
    token: &str,
    observed_from: &str,
) -> Result<(), Error> {
    let revision =
        SurfaceRevision::observed(token, observed_from).map_err(Error::InvalidRevision)?;
    let store = agent.store();
    let mut record = AttachmentStore::get(store, attachment)?.ok_or(Error::AttachmentMissing)?;
    let generation = record.generation();
    record.record_revision(revision);
    AttachmentStore::put(store, &record, Some(generation))
        .map_err(|e| Error::Store(StoreError::new(e.to_string())))
}
