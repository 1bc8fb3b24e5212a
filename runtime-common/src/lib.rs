//! # What every Human+ runtime shares
//!
//! The core is sans-IO; the runtime crates (`human-plus-tokio`,
//! `human-plus-blocking`, `human-plus-async-std`) each drive it over their
//! own sockets. Everything above the core that is not I/O lives here,
//! once:
//!
//! * the manager flow ([`HumanPlus`], and [`BlockingHumanPlus`] for
//!   blocking code), its builder ([`HumanPlusBuilder`]) and the toolset
//!   handles ([`HumanPlusToolset`], [`ToolHandle`]), generic over a
//!   runtime's [`Driver`]: a runtime supplies its driver loop, its clock
//!   and its timer, and nothing that decides;
//! * the resolver contracts ([`Resolve`], [`ResolveBlocking`]) and a fixed
//!   map for tests ([`StaticResolver`]);
//! * the operating system's entropy for ids and framing nonces, and the
//!   rustls client configuration (the `ring` provider chosen explicitly,
//!   webpki roots plus any roots the caller adds).
//!
//! ```
//! use human_plus_core::{Entropy, ResultGuard};
//! use human_plus_runtime::{OsEntropy, TlsRoots, client_config};
//!
//! let framed = ResultGuard::default().frame("s", "t", "text", &mut OsEntropy)?;
//! assert!(framed.contains("text"));
//! let config = client_config(&TlsRoots::webpki())?;
//! assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod block;
mod blocking;
mod body;
mod driver;
mod entropy;
mod failure;
mod flavours;
mod kept;
mod lease;
mod manager;
mod parts;
mod resolve;
#[cfg(feature = "rig")]
mod rig;
mod tls;
mod toolset;

pub use block::block_on;
pub use blocking::{BlockingHumanPlus, SyncStore};
pub use body::{BodyReport, WHOLE_BODY_CAP};
pub use driver::{
    AsyncFlavour, BlockingFlavour, Drive, Driven, Driver, Flavour, KeptStream, ManagerOf,
    NetSettings, ResolverOf,
};
pub use entropy::{OsEntropy, os_entropy};
pub use failure::RequestFailure;
pub use kept::{DEFAULT_KEPT_LEG_IDLE, DEFAULT_KEPT_LEGS, KeptLegBounds};
pub use manager::{
    Attached, DEFAULT_CONNECT_TIMEOUT, DEFAULT_SHUTDOWN_GRACE, HumanPlus, HumanPlusBuilder,
};
pub use parts::Parts;
pub use resolve::{Resolve, ResolveBlocking, Resolving, StaticResolver, SystemResolver};
#[cfg(feature = "rig")]
pub use rig::{Approve, rig_error};
pub use tls::{TlsRoots, client_config};
pub use toolset::{HumanPlusToolset, ToolHandle};

/// The store every manager uses by default.
pub use human_plus_store::InMemoryAttachmentStore;

/// The names every runtime crate re-exports (`pub use
/// human_plus_runtime::exports::*`), so all three speak one vocabulary:
/// the core's types (the share link a person hands over read by
/// [`SurfaceInvitation::from_link`](human_plus_core::SurfaceInvitation::from_link)
/// with [`LinkOptions`](human_plus_core::LinkOptions); what operations
/// return, each `Serialize`; an attachment's summary without the relay
/// token), the resolvers, the TLS roots, the in-memory
/// store and the default timeouts.
pub mod exports {
    pub use human_plus_core::{
        Activity, AttachmentState, AttachmentSummary, Busy, CallResult, ConflictDetection,
        DEFAULT_RELAY_PATH, DeliveryUnknown, Discovery, EgressPolicy, Error, InvitationLink,
        LinkForm, LinkNote, LinkOptions, ListedChanges, ManagerConfig, NO_PINS, Owner, OwnerKey,
        Participant, Priority, ReceiveLeg, RelayAuth, RelayPathNotFound, ResultGuard,
        SurfaceAttachment, SurfaceChangedUnderYou, SurfaceChanges, SurfaceInvitation,
        SurfaceRevision, SurfaceTool, ToolClaims, ToolDefinition, TransportConfig, TrustPolicy,
        Unrecorded, WhatChanged, Withheld, keyed_attachment_id,
    };
    pub use human_plus_store::{
        DEFAULT_LEASE, DEFAULT_LOCK_WAIT, InMemoryAttachmentStore, LockGuard,
    };

    pub use crate::{
        Attached, DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEPT_LEG_IDLE, DEFAULT_KEPT_LEGS,
        DEFAULT_SHUTDOWN_GRACE, KeptLegBounds, StaticResolver, SystemResolver, TlsRoots,
    };
}

/// Logs (at debug level) that a runtime starts `req`: its id, method, leg
/// and redacted URL — never the token or a header. Every runtime logs each
/// request through this, so the redaction rule of log lines is one.
pub fn log_request(req: &human_plus_core::HttpRequest) {
    tracing::debug!(
        request = %req.id,
        method = req.method.as_str(),
        leg = ?req.leg,
        url = %req.url,
        "relay request"
    );
}

/// Declares a runtime crate's public manager names over its driver:
/// `HumanPlus`, `HumanPlusBuilder`, `HumanPlusToolset` and `ToolHandle`,
/// each over the in-memory store by default. `async Driver` names the
/// async manager ([`HumanPlus`]), `blocking Driver` the blocking one
/// ([`BlockingHumanPlus`]). The names are type aliases: every method is
/// written once, here.
///
/// It also declares the runtime crate's module `generic`, an inline
/// re-export of the generic types the aliases name. That is what puts
/// every method, with its documentation and examples, in the runtime
/// crate's own pages (`cargo doc --no-deps`, as docs.rs builds it): a page
/// per type, in plain HTML, found by the crate's search, and the alias
/// pages list the same methods. Without it, rustdoc shows another crate's
/// impls on an alias page only through a script, without their intra-doc
/// links, and gives them no page of the crate's and no entry in its
/// search. `.ci/docs-api` checks the result.
///
/// ```ignore
/// human_plus_runtime::manager_names!(async Tokio);
/// ```
#[macro_export]
macro_rules! manager_names {
    (async $driver:ident) => {
        $crate::manager_names!(@names $driver, $crate::HumanPlus<$driver, S>, "async", HumanPlus);
    };
    (blocking $driver:ident) => {
        $crate::manager_names!(
            @names $driver, $crate::BlockingHumanPlus<$driver, S>, "blocking", BlockingHumanPlus
        );
    };
    (@names $driver:ident, $manager:ty, $flavour:literal, $generic:ident) => {
        #[doc = concat!(
            "The Human+ manager of this runtime: [`generic::", stringify!($generic), "`] (the ",
            $flavour, " manager) over the [`", stringify!($driver), "`] driver. It attaches an agent ",
            "to surfaces and runs its operations, holding the attachment store's lock for each. ",
            "Cheap to clone (an `Arc` inside), `Send + Sync`: one per process, shared.\n\n",
            "Every method is documented on [`generic::", stringify!($generic), "`], and listed below ",
            "under *Implementations*. `S` is the attachment store: the in-memory store by default ",
            "(one process), or a Redis store shared by several processes or replicas, chosen with ",
            "[`HumanPlusBuilder::store`](generic::HumanPlusBuilder::store)."
        )]
        pub type HumanPlus<S = $crate::InMemoryAttachmentStore> = $manager;

        #[doc = concat!(
            "Configures a [`HumanPlus`]: its store, TLS roots, resolver and timeouts: ",
            "[`generic::HumanPlusBuilder`] over the [`", stringify!($driver), "`] driver, ",
            "where every method is documented (and listed below under *Implementations*)."
        )]
        pub type HumanPlusBuilder<S = $crate::InMemoryAttachmentStore> =
            $crate::HumanPlusBuilder<$driver, S>;

        /// Turns an attachment's admitted tools into [`ToolHandle`]s (seed
        /// 001, "With Prism and Harness"): each calls through
        /// [`HumanPlus::call`], so trust, pins, revisions, refusals and
        /// framing apply to every call. `requires_approval` comes only from
        /// the caller's list, never from the surface's annotations.
        ///
        /// [`generic::HumanPlusToolset`] over this runtime's manager, where
        /// every method is documented (and listed below under
        /// *Implementations*).
        pub type HumanPlusToolset<S = $crate::InMemoryAttachmentStore> =
            $crate::HumanPlusToolset<HumanPlus<S>>;

        /// One admitted surface tool, callable through [`HumanPlus::call`]:
        /// [`generic::ToolHandle`] over this runtime's manager, where every
        /// method is documented (and listed below under *Implementations*).
        pub type ToolHandle<S = $crate::InMemoryAttachmentStore> = $crate::ToolHandle<HumanPlus<S>>;

        /// The generic types this crate's [`HumanPlus`], [`HumanPlusBuilder`],
        /// [`HumanPlusToolset`] and [`ToolHandle`] are aliases of, with every
        /// method and its documentation.
        ///
        /// They are written once, in `human_plus_runtime`, generic over the
        /// runtime's driver `D` and the store `S`, and re-exported here so
        /// that this crate's own documentation shows them. Use the aliases
        /// at the crate's top level in code: they fix `D` to this runtime's
        /// driver and default `S` to the in-memory store.
        pub mod generic {
            #[doc(inline)]
            pub use $crate::{$generic, HumanPlusBuilder, HumanPlusToolset, ToolHandle};
        }
    };
}
