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

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use human_plus_core::{
    Activity, Busy, CallResult, ConflictDetection, Discovery, Error, InitCache, ManagerConfig,
    Operation, OperationOutput, Owner, OwnerKey, Participant, ReceiveLeg, Seen, StoreErrorKind,
    SurfaceAttachment, SurfaceChanges, SurfaceInvitation, TransportError, TransportErrorKind,
    WarmLeg,
};
use human_plus_store::{
    AsyncAttachmentStore, DEFAULT_LEASE, DEFAULT_LOCK_WAIT, InMemoryAttachmentStore, LockGuard,
};
use tracing::Instrument;

use crate::driver::{Drive, Driver, Flavour, KeptStream, ManagerOf, NetSettings, ResolverOf};
use crate::entropy::{OsEntropy, os_entropy};
use crate::lease::{Held, Keep, Keeper, Kept, Ticket, keep_beside};
use crate::parts::Parts;
use crate::tls::{TlsRoots, client_config};

/// The default bound on each connection step: 10 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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

/// The Human+ manager of an async runtime: attaches an agent to surfaces
/// and runs its operations, holding the attachment store's lock for each
/// (its short lease renewed while the operation runs: see
/// [`HumanPlusBuilder::lock_lease`]).
///
/// [`HumanPlus::shutdown`] gives back every lock its running operations
/// hold and closes its kept legs and connections; it starts nothing more.
/// A service calls it when it is told to stop (SIGTERM), so its
/// conversations are free for the other replicas at once. Dropping the
/// last handle closes what the manager keeps as far as a drop can (no
/// operation can be running then).
///
/// `human_plus_tokio::HumanPlus` and `human_plus_async_std::HumanPlus` are
/// this type over their runtime's driver. Cheap to clone (an [`Arc`]
/// inside); `Send + Sync`; every future it returns is `Send`.
///
/// Each operation runs in a `human_plus.<operation>` tracing span
/// (attachment id, tool, receive leg). The relay token never appears in a
/// span, an event, an error or `Debug` output.
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
    /// Warm attachments' receive legs between operations (warm mode).
    warm: Mutex<HashMap<String, WarmSlot<D>>>,
    /// What operations' receive legs showed, per attachment, not yet taken
    /// ([`HumanPlus::take_seen`]).
    seen: Mutex<HashMap<String, Seen>>,
    /// The attachments whose store lock an operation of this manager holds
    /// now, and the lock: another operation on one of them waits its turn
    /// for as long as its own timeout allows, not for the store's lock
    /// wait; a shutdown gives each back.
    holding: Mutex<HashMap<String, Arc<Held>>>,
    /// The keeper thread of a blocking manager's leases (unused by an
    /// async manager, which renews beside each operation).
    keeper: Keeper,
    /// Set by [`HumanPlus::shutdown`]: nothing more starts.
    shut: AtomicBool,
    connect_timeout: Duration,
    lock_lease: Duration,
    lock_wait: Duration,
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
    /// resolver and the default timeouts.
    ///
    /// Should the TLS configuration fail to build (it does not with the
    /// bundled roots), every HTTPS request fails with a TLS transport error;
    /// use [`HumanPlus::builder`] to see such an error up front.
    #[must_use]
    pub fn new(config: ManagerConfig) -> Self {
        HumanPlus::from_parts(HumanPlusBuilder::new(config).parts())
    }

    /// A builder starting from the defaults of [`HumanPlus::new`].
    #[must_use]
    pub fn builder(config: ManagerConfig) -> HumanPlusBuilder<D> {
        HumanPlusBuilder::new(config)
    }
}

impl<D: Driver, S> HumanPlus<D, S> {
    /// The manager made of `parts` (what [`Flavour::manager`] does for an
    /// async runtime). Warm mode is turned off when the driver cannot keep
    /// a stream between operations.
    #[must_use]
    pub fn from_parts(parts: Parts<D, S>) -> Self {
        let mut config = parts.config;
        if !<D::Stream as KeptStream>::KEPT {
            config.transport.warm = false;
        }
        HumanPlus {
            inner: Arc::new(Inner {
                config,
                store: Arc::new(parts.store),
                driver: parts.driver,
                init: Mutex::new(InitCache::new()),
                warm: Mutex::new(HashMap::new()),
                seen: Mutex::new(HashMap::new()),
                holding: Mutex::new(HashMap::new()),
                keeper: Keeper::default(),
                shut: AtomicBool::new(false),
                connect_timeout: parts.connect_timeout,
                lock_lease: parts.lock_lease,
                lock_wait: parts.lock_wait,
            }),
        }
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

    /// The runtime's driver.
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
    /// Validates `invitation` against the egress policy, mints an
    /// attachment for `participant`, owned by `owner`, and stores it. No
    /// network.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], [`Error::EgressRefused`],
    /// [`Error::ShutDown`], or the store's.
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
            inner
                .warm
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id, (leg, stream));
        }
        tracing::debug!("attached and verified");
        Ok(Attached {
            attachment: verified,
            discovery: Some(discovery),
            created: true,
        })
    }

    /// Initialises the MCP session if needed, lists the surface's tools and
    /// admits them through the trust policy (reserved confirmation tools
    /// are always withheld): the admitted ones, and what was withheld.
    ///
    /// # Errors
    /// [`Error::ToolRefused`] for undeclared trust (nothing is sent) or a
    /// pin mismatch; the attachment's, the relay's and the transport's
    /// errors.
    pub fn tools<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
    ) -> impl Future<Output = Result<Discovery, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        self.operate(
            Op::Tools,
            owner,
            attachment,
            "",
            |record, owner, config, init, now| {
                Operation::tools(record, owner, config, init, os_entropy(), now)
            },
        )
    }

    /// Calls `tool` with `arguments` (a JSON object, or null for `{}`),
    /// pinned to the last revision seen; the result is framed as untrusted
    /// data.
    ///
    /// # Errors
    /// [`Error::SurfaceChangedUnderYou`] when the surface refused the pin
    /// (nothing was applied; the message is written for the model to read);
    /// [`Error::ToolRefused`], [`Error::ToolFailed`], the attachment's, the
    /// relay's and the transport's errors.
    pub fn call<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
    ) -> impl Future<Output = Result<CallResult, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let name = tool.to_owned();
        self.operate(
            Op::Call,
            owner,
            attachment,
            tool,
            move |record, owner, config, init, now| {
                Operation::call(
                    record,
                    owner,
                    &name,
                    arguments,
                    config,
                    init,
                    os_entropy(),
                    now,
                )
            },
        )
    }

    /// [`HumanPlus::call`], with the call's exchange bounded by `timeout`
    /// instead of the configured
    /// [`TransportConfig::timeout`](human_plus_core::TransportConfig::timeout):
    /// what a server in front of Human+ uses when its client's request says
    /// how long it will wait. A call that was posted and not answered in
    /// time is reported as the core reports it (it may have been applied),
    /// never as refused.
    ///
    /// # Errors
    /// As [`HumanPlus::call`].
    pub fn call_with_timeout<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        tool: &str,
        arguments: serde_json::Value,
        timeout: Duration,
    ) -> impl Future<Output = Result<CallResult, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let name = tool.to_owned();
        let bounded = self.bounded(timeout);
        self.operate_within(
            Op::Call,
            owner,
            attachment,
            tool,
            timeout,
            move |record, owner, _config, init, now| {
                Operation::call(
                    record,
                    owner,
                    &name,
                    arguments,
                    &bounded,
                    init,
                    os_entropy(),
                    now,
                )
            },
        )
    }

    /// [`HumanPlus::tools`], bounded by `timeout` instead of the configured
    /// exchange timeout.
    ///
    /// # Errors
    /// As [`HumanPlus::tools`].
    pub fn tools_with_timeout<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<Discovery, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let bounded = self.bounded(timeout);
        self.operate_within(
            Op::Tools,
            owner,
            attachment,
            "",
            timeout,
            move |record, owner, _config, init, now| {
                Operation::tools(record, owner, &bounded, init, os_entropy(), now)
            },
        )
    }

    /// [`HumanPlus::changes_since`], bounded by `timeout` instead of the
    /// configured exchange timeout.
    ///
    /// # Errors
    /// As [`HumanPlus::changes_since`].
    pub fn changes_since_with_timeout<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<SurfaceChanges, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let bounded = self.bounded(timeout);
        self.operate_within(
            Op::ChangesSince,
            owner,
            attachment,
            "",
            timeout,
            move |record, owner, _config, init, now| {
                Operation::changes_since(record, owner, &bounded, init, os_entropy(), now)
            },
        )
    }

    /// [`HumanPlus::announce`], bounded by `timeout` instead of the
    /// configured exchange timeout.
    ///
    /// # Errors
    /// As [`HumanPlus::announce`].
    pub fn announce_with_timeout<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        activity: &Activity,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let activity = activity.clone();
        let bounded = self.bounded(timeout);
        self.operate_within(
            Op::Announce,
            owner,
            attachment,
            "",
            timeout,
            move |record, owner, _config, _init, now| {
                Operation::announce(record, owner, &activity, &bounded, os_entropy(), now)
            },
        )
    }

    /// The manager's configuration with its exchange timeout replaced.
    fn bounded(&self, timeout: Duration) -> ManagerConfig {
        let mut bounded = self.inner.config.clone();
        bounded.transport.timeout = timeout;
        bounded
    }

    /// What the attachment's receive leg has shown since this was last
    /// asked: a `notifications/tools/list_changed`, a person acting on the
    /// surface (`notifications/agent_activity` with `source: "user"`). It
    /// gathers what every operation's leg saw and, in warm mode, reads
    /// what the kept leg delivered since the last operation (without
    /// waiting). Taking it resets it. No network, no lock.
    ///
    /// This is how a service tells its model "a person has been active on
    /// this surface since your last read", and how the `human-plus mcp`
    /// bridge learns that the surface's tools changed between calls.
    ///
    /// # Errors
    /// [`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`], or
    /// the store's.
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
    /// or `None` when the next [`HumanPlus::tools`] would list again (no
    /// warm leg, a surface that did not declare `tools.listChanged`, a list
    /// change seen, a gap, or the listing's age). What the kept leg
    /// delivered since the last operation is read first. No network, no
    /// lock.
    ///
    /// # Errors
    /// As [`HumanPlus::take_seen`].
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

    /// Checks that the attachment `id` exists and belongs to `owner`.
    async fn owned(&self, owner: &OwnerKey, id: &str) -> Result<(), Error> {
        let record = self.load(id).await?;
        human_plus_core::status(&record, owner).map(|_| ())
    }

    /// Feeds the attachment's kept leg what its stream delivered since the
    /// last operation (without waiting), then applies `f` to it; `None`
    /// when no leg is kept (none yet, an operation running, or cold).
    fn kept_leg<T>(&self, id: &str, f: impl FnOnce(&mut WarmLeg) -> T) -> Option<T> {
        let mut warm = self
            .inner
            .warm
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (leg, stream) = warm.get_mut(id)?;
        if let Some(s) = stream {
            s.drain_into(leg);
        }
        Some(f(leg))
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
    ) -> impl Future<Output = Result<SurfaceChanges, Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        self.operate(
            Op::ChangesSince,
            owner,
            attachment,
            "",
            |record, owner, config, init, now| {
                Operation::changes_since(record, owner, config, init, os_entropy(), now)
            },
        )
    }

    /// Tells the people on the surface what the agent is doing (a
    /// `notifications/human-plus/activity` notification).
    ///
    /// # Errors
    /// The attachment's, the relay's and the transport's errors.
    pub fn announce<'s, O: Owner + ?Sized>(
        &'s self,
        owner: &O,
        attachment: &str,
        activity: &Activity,
    ) -> impl Future<Output = Result<(), Error>> + Send + use<'s, D, S, O> {
        let owner = OwnerKey::of(owner);
        let activity = activity.clone();
        self.operate(
            Op::Announce,
            owner,
            attachment,
            "",
            move |record, owner, config, _init, now| {
                Operation::announce(record, owner, &activity, config, os_entropy(), now)
            },
        )
    }

    /// What has been observed of the surface's conflict detection. No
    /// network, no lock.
    ///
    /// # Errors
    /// [`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`],
    /// [`Error::NotAttached`], or the store's.
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

    /// The attachment, in any state. No network, no lock.
    ///
    /// # Errors
    /// [`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`], or
    /// the store's.
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

    /// Leaves the surface: the attachment becomes `detached`. The relay
    /// session (the person's page) stays alive unless
    /// [`ManagerConfig::unregister_on_detach`] is set.
    ///
    /// # Errors
    /// [`Error::AttachmentMissing`], [`Error::AttachmentUnauthorized`],
    /// [`Error::NotAttached`], the store's, and with `unregister_on_detach`
    /// the relay's.
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
            |record, owner, config, _init, now| {
                Operation::detach(record, owner, config, os_entropy(), now)
            },
        )
    }

    /// Shuts the manager down: nothing more starts (every operation, and
    /// `attach`, answers [`Error::ShutDown`]); the store lock of every
    /// operation still running is given back now (awaiting the store), so
    /// another worker can serve those conversations at once; its kept legs
    /// and connections are closed. An operation still running goes on to
    /// its end without the lock: its record's write is fenced by the
    /// generation (a worker that took the conversation over and wrote first
    /// wins, and this one's write is refused as `store_conflict`). Calling
    /// it again does nothing more.
    ///
    /// What a service calls when it is told to stop:
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
        let held: Vec<Arc<Held>> = inner
            .holding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for lock in held {
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
        let warm = std::mem::take(&mut *inner.warm.lock().unwrap_or_else(PoisonError::into_inner));
        drop(warm);
        inner.driver.close_idle();
        tracing::debug!("manager shut down");
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
    /// checks both again when the operation is built).
    fn operate<'s, T, F>(
        &'s self,
        op: Op,
        owner: Result<OwnerKey, Error>,
        attachment: &str,
        tool: &str,
        start: F,
    ) -> impl Future<Output = Result<T, Error>> + Send + use<'s, D, S, T, F>
    where
        T: OperationOutput + Send + 's,
        F: Start<T> + 's,
    {
        self.operate_within(
            op,
            owner,
            attachment,
            tool,
            self.inner.config.transport.timeout,
            start,
        )
    }

    /// [`HumanPlus::operate`], for an operation promised `timeout` (its
    /// exchange timeout).
    fn operate_within<'s, T, F>(
        &'s self,
        op: Op,
        owner: Result<OwnerKey, Error>,
        attachment: &str,
        tool: &str,
        timeout: Duration,
        start: F,
    ) -> impl Future<Output = Result<T, Error>> + Send + use<'s, D, S, T, F>
    where
        T: OperationOutput + Send + 's,
        F: Start<T> + 's,
    {
        let span = op_span(op, attachment, tool, &self.inner.config.transport.leg);
        let id = attachment.to_owned();
        let needs_trust = matches!(op, Op::Tools | Op::Call | Op::ChangesSince);
        async move {
            let owner = owner?;
            self.refuse_if_shut_down()?;
            if needs_trust {
                self.inner.config.trust.assert_declared()?;
            }
            let result = self.locked(id, &owner, timeout, start).await;
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
        timeout: Duration,
        start: F,
    ) -> Result<T, Error> {
        let inner = &*self.inner;
        let deadline = D::now() + timeout;
        let (guard, queued) = self.take_turn(&id, deadline).await?;
        let lock = Arc::new(Held::new(guard, inner.lock_lease));
        let held = Holding::new(&inner.holding, &id, &lock);
        if inner.shut.load(Ordering::SeqCst) {
            // Shut down while it waited: give the lock back, start nothing.
            lock.stop();
            return Err(Error::ShutDown);
        }
        let work = async {
            let record = self.load(&id).await?;
            // The operation reads the cache once, when it is built: no copy.
            let mut op = {
                let cache = inner.init.lock().unwrap_or_else(PoisonError::into_inner);
                start(record, owner, &inner.config, &cache, D::now())?
            };
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
        lock.stop();
        // Not held here any more before the lock is given back: the next
        // holder marks it again once it has the lock.
        drop(held);
        drop(lock);
        result
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
    /// by `deadline`. While an operation of this manager holds it (waiting
    /// for the surface, say), the wait lasts as long as `deadline` allows
    /// and ends as [`Error::Timeout`]: the caller asked for an answer
    /// within its timeout, the other operation is waiting on the surface,
    /// and the store is not at fault (issue 27's rule, kept). A lock held
    /// elsewhere (another process, another manager) is waited for up to
    /// the store's lock wait or the deadline, whichever comes first, and
    /// then answered [`Error::Busy`], with when a retry may succeed (the
    /// holder's lease left, as the store last saw it). Also says whether
    /// the operation waited behind one of this manager's.
    async fn take_turn(&self, id: &str, deadline: Instant) -> Result<(LockGuard, bool), Error> {
        let inner = &*self.inner;
        let asked = D::now();
        let mut queued = false;
        loop {
            let now = D::now();
            let left = deadline.saturating_duration_since(now);
            let lock_left = inner
                .lock_wait
                .saturating_sub(now.saturating_duration_since(asked));
            let local = self.held_here(id);
            queued |= local;
            // Behind one of ours the operation's own deadline bounds the
            // wait; elsewhere the lock wait too.
            let bound = if local { left } else { left.min(lock_left) };
            let lock = async { Some(inner.store.lock_within(id, inner.lock_lease, bound).await) };
            let wait = async {
                D::sleep(bound).await;
                None
            };
            let busy = match futures_lite::future::or(lock, wait).await {
                Some(Ok(guard)) => return Ok((guard, queued)),
                Some(Err(Error::Busy(busy))) => Some(busy),
                Some(Err(Error::Store(e))) if e.kind() == StoreErrorKind::LockWait => None,
                Some(Err(e)) => return Err(e),
                None => None,
            };
            if D::now() < deadline && self.held_here(id) {
                // One of ours holds it now: wait on, up to the deadline.
                continue;
            }
            if queued {
                tracing::debug!(attachment = %id, "no turn on the attachment before the deadline");
                return Err(Error::Timeout);
            }
            let busy = match busy {
                Some(busy) => busy,
                None => match self.last_attempt(id).await? {
                    Ok(guard) => return Ok((guard, queued)),
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
    async fn last_attempt(&self, id: &str) -> Result<Result<LockGuard, Busy>, Error> {
        let inner = &*self.inner;
        let attempt = async {
            Some(
                inner
                    .store
                    .lock_within(id, inner.lock_lease, Duration::ZERO)
                    .await,
            )
        };
        let bound = async {
            D::sleep(LAST_ATTEMPT).await;
            None
        };
        match futures_lite::future::or(attempt, bound).await {
            Some(Ok(guard)) => Ok(Ok(guard)),
            Some(Err(Error::Busy(busy))) => Ok(Err(busy)),
            Some(Err(e)) if !e.is_retryable() => Err(e),
            _ => Ok(Err(Busy::new(inner.lock_lease))),
        }
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
    /// what the leg saw, stores the changed record with a compare-and-set
    /// on the loaded generation and settles the init cache.
    async fn drive<T: OperationOutput + Send>(
        &self,
        id: String,
        mut op: Operation<T>,
    ) -> Result<T, Error> {
        let inner = &*self.inner;
        let mut stream = None;
        if inner.config.transport.warm {
            let slot = inner
                .warm
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
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
            inner
                .warm
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id, (leg, stream));
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
        let mut cache = inner.init.lock().unwrap_or_else(PoisonError::into_inner);
        outcome.settle(&mut cache, stored)
    }
}

/// Whether `existing`, stored under a key, is the attachment `wanted`
/// asks for: still attached, with the same invitation (relay, session,
/// token, surface).
fn reusable(existing: &SurfaceAttachment, wanted: &SurfaceAttachment) -> bool {
    existing.is_attached() && existing.invitation() == wanted.invitation()
}

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
}

impl<D: Driver, S> fmt::Debug for HumanPlusBuilder<D, S> {
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

impl<D: Driver> HumanPlusBuilder<D, InMemoryAttachmentStore> {
    /// A builder starting from an in-memory store, the webpki roots, the
    /// system resolver and the default timeouts
    /// ([`DEFAULT_CONNECT_TIMEOUT`], [`DEFAULT_LEASE`],
    /// [`DEFAULT_LOCK_WAIT`]).
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
    /// Uses `store` for attachment records: an async store
    /// (`AsyncAttachmentStore`) for the async runtimes, a blocking one
    /// (`AttachmentStore`) for the blocking runtime.
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
        }
    }

    /// The certificate authorities trusted for the relay's TLS (default
    /// [`TlsRoots::webpki`]).
    #[must_use]
    pub fn tls_roots(mut self, roots: TlsRoots) -> Self {
        self.roots = roots;
        self
    }

    /// The resolver for relay host names (default: the system's). Its
    /// answers are vetted by the egress policy either way.
    #[must_use]
    pub fn resolver(mut self, resolver: Arc<ResolverOf<D>>) -> Self {
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
    /// [`DEFAULT_LEASE`], 6 s). The manager renews it every third of it
    /// while the operation runs, however long that is; a worker that dies
    /// or is stopped stops renewing, and its conversations are free for the
    /// others within one lease. Shorter frees them sooner and costs a
    /// renewal (one store round trip) more often during a long operation.
    #[must_use]
    pub fn lock_lease(mut self, lease: Duration) -> Self {
        self.lock_lease = lease;
        self
    }

    /// How long an operation waits for a store lock another worker holds
    /// before answering [`Error::Busy`] (default [`DEFAULT_LOCK_WAIT`],
    /// never longer than the operation's own timeout). A queue worker that
    /// would rather put the job back than hold a thread sets it short and
    /// re-schedules after [`Error::retry_after`].
    #[must_use]
    pub fn lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    /// Builds the runtime's manager, and its rustls configuration once.
    ///
    /// # Errors
    /// [`Error::Transport`] of kind TLS when a root cannot be used.
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
        }
    }
}
