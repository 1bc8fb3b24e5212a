//! Every manager operation as a sans-IO state machine over the attachment
//! record.
//!
//! A runtime builds an [`Operation`] from the stored record, drains
//! [`Operation::poll_transmit`] and performs the requests, feeds the
//! responses back through the `handle_*` methods, sleeps until
//! [`Operation::poll_timeout`], and repeats until
//! [`Operation::poll_outcome`] yields the [`Outcome`]: the result, the record
//! to store (if it changed) and the generation the store must still hold.
//!
//! Drain order after every input: `poll_transmit` until `None`, then
//! `poll_outcome`, then `poll_timeout`.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::admission::discovery::Discovery;
use crate::admission::listing::ListingReader;
use crate::admission::trust::TrustPolicy;
use crate::answers::changes::{ChangeActor, SurfaceChange};
use crate::answers::changes::{SurfaceChanges, is_change_feed_tool, read_feed_frame};
use crate::answers::guard::ResultGuard;
use crate::egress::endpoint::{EgressPolicy, RelayEndpoint};
use crate::egress::secrets::Secrets;
use crate::egress::wire::{HttpEvent, RequestId, SocketEvent, Transmit, TransportConfig};
use crate::entropy::{Entropy, random_id};
use crate::error::{
    ConflictDetectionUnavailable, DeliveryUnknown, Error, ListedChanges, ProtocolError,
    SurfaceChangedUnderYou, SurfaceError, ToolRefusal, Unauthorized, Unrecorded, WhatChanged,
};
use crate::formats::jsonrpc::{
    CLIENT_NAME, CLIENT_VERSION, MCP_PROTOCOL_VERSION, Reply, RequestIds, encode_notification,
    encode_request,
};
use crate::invite::invitation::{Activity, Participant, SurfaceInvitation};
use crate::invite::owner::OwnerKey;
use crate::machines::attachment::{SurfaceAttachment, call_fingerprint};
use crate::machines::exchange::{Acts, Exchange, Io, PostTarget, Seen, WarmLeg};
use crate::machines::halt::Halt;
use crate::pusher::channel::PusherConfig;
use crate::pusher::endpoint::ReverbEndpoint;
use crate::pusher::leg::ChannelLeg;
use crate::tools::tool::ToolDefinition;
use crate::values::attachment_state::AttachmentState;
use crate::values::revision::{
    ConflictDetection, SurfaceRevision, refusal_current, rejects_revision,
};

/// Everything a manager is configured with: egress, transport, trust,
/// framing and the two opt-ins.
///
/// ```
/// use human_plus_core::{EgressPolicy, ManagerConfig, TrustPolicy};
///
/// let config = ManagerConfig::new(
///     EgressPolicy::new(["relay.fancy.example"]).egress_proxy("http://egress.internal:3128"),
///     TrustPolicy::allowing(["sheet_read"], [("sheet_read", "sha256:5ab496568589a2e1901b1b49c27b22bc")]),
/// );
/// assert!(!config.require_revision);
/// assert!(!config.unregister_on_detach);
/// ```
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// The egress policy every relay URL and address passes.
    pub egress: EgressPolicy,
    /// How exchanges run.
    pub transport: TransportConfig,
    /// Which tools are admitted.
    pub trust: TrustPolicy,
    /// How results are bounded and framed.
    pub guard: ResultGuard,
    /// Refuse calls to a surface observed to mint no revision.
    pub require_revision: bool,
    /// POST `unregister` on detach. Off by default: on the Fancy relay any
    /// token holder's `unregister` ends the session for the person's page
    /// and every other agent.
    pub unregister_on_detach: bool,
    /// Over a Reverb channel: its message limit, rate and pings
    /// ([`PusherConfig::default`]: Reverb's 10,000-byte messages, 10 client
    /// events per second).
    pub channel: PusherConfig,
}

impl ManagerConfig {
    /// A configuration with default transport and guard, revision not
    /// required, and no `unregister` on detach.
    #[must_use]
    pub fn new(egress: EgressPolicy, trust: TrustPolicy) -> Self {
        ManagerConfig {
            egress,
            transport: TransportConfig::default(),
            trust,
            guard: ResultGuard::default(),
            require_revision: false,
            unregister_on_detach: false,
            channel: PusherConfig::default(),
        }
    }

    /// Sets the channel settings of Reverb invitations (the message limit
    /// a deployment's `max_message_size` sets, its client-event rate).
    ///
    /// ```
    /// use human_plus_core::*;
    ///
    /// let mut channel = PusherConfig::default();
    /// channel.max_message_bytes = 64_000;
    /// let config = ManagerConfig::new(EgressPolicy::new(["app.example"]), TrustPolicy::every_tool(NO_PINS))
    ///     .channel(channel);
    /// assert_eq!(config.channel.max_message_bytes, 64_000);
    /// ```
    #[must_use]
    pub fn channel(mut self, channel: PusherConfig) -> Self {
        self.channel = channel;
        self
    }

    /// Sets the transport configuration.
    #[must_use]
    pub fn transport(mut self, transport: TransportConfig) -> Self {
        self.transport = transport;
        self
    }

    /// Sets the result guard.
    #[must_use]
    pub fn guard(mut self, guard: ResultGuard) -> Self {
        self.guard = guard;
        self
    }

    /// Sets `require_revision`.
    #[must_use]
    pub fn require_revision(mut self, on: bool) -> Self {
        self.require_revision = on;
        self
    }

    /// Sets `unregister_on_detach`.
    #[must_use]
    pub fn unregister_on_detach(mut self, on: bool) -> Self {
        self.unregister_on_detach = on;
        self
    }
}

/// Which attachments have completed the MCP `initialize` handshake, held by
/// the runtime across operations.
///
/// It is keyed on the attachment id and client id, not on the generation:
/// every revision write bumps the generation, so a generation key would
/// re-initialise after every minted revision. An entry is dropped when the
/// attachment meets a terminal answer.
#[derive(Debug, Clone, Default)]
pub struct InitCache {
    done: BTreeMap<(String, String), InitInfo>,
}

/// The most attachments an [`InitCache`] remembers (about 150 bytes each:
/// some 10 MiB at most). Past it, one is forgotten for each new one; a
/// forgotten attachment's next operation sends `initialize` again, which
/// costs one exchange and changes nothing else.
///
/// ```
/// assert_eq!(human_plus_core::MAX_INITIALISED, 65_536);
/// ```
pub const MAX_INITIALISED: usize = 65_536;

/// What `initialize` told of the surface, kept with the init cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InitInfo {
    /// The surface declared `capabilities.tools.listChanged: true`: it
    /// sends `notifications/tools/list_changed` when its tools change, so a
    /// listing can be reused while none has arrived.
    pub list_changed: bool,
}

impl InitCache {
    /// An empty cache.
    #[must_use]
    pub fn new() -> Self {
        InitCache::default()
    }

    /// Whether `record` has been initialised.
    #[must_use]
    pub fn contains(&self, record: &SurfaceAttachment) -> bool {
        self.info(record).is_some()
    }

    /// What `initialize` told of `record`'s surface, once initialised.
    #[must_use]
    pub fn info(&self, record: &SurfaceAttachment) -> Option<InitInfo> {
        self.done
            .get(&(record.id().to_owned(), record.client_id().to_owned()))
            .copied()
    }

    /// Applies an outcome's [`InitUpdate`] for `record`.
    pub fn apply(&mut self, record: &SurfaceAttachment, update: InitUpdate) {
        let key = (record.id().to_owned(), record.client_id().to_owned());
        self.apply_key(&key, update);
    }

    fn apply_key(&mut self, key: &(String, String), update: InitUpdate) {
        let key = key.clone();
        match update {
            InitUpdate::Keep => {}
            InitUpdate::Set(info) => {
                if self.done.len() >= MAX_INITIALISED && !self.done.contains_key(&key) {
                    // Bounded: a forgotten attachment's next operation
                    // sends `initialize` again (one exchange), nothing else.
                    self.done.pop_first();
                }
                self.done.insert(key, info);
            }
            InitUpdate::Clear => {
                self.done.remove(&key);
            }
        }
    }

    /// How many attachments are initialised.
    #[must_use]
    pub fn len(&self) -> usize {
        self.done.len()
    }

    /// Whether none is.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }
}

/// What an operation learnt about initialisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitUpdate {
    /// Nothing changed.
    Keep,
    /// `initialize` completed, with what it told.
    Set(InitInfo),
    /// The attachment is terminal; forget it.
    Clear,
}

/// What discovery found among the admitted names.
#[derive(Debug, Default)]
struct Found {
    /// The tool a call acts on was admitted.
    offered: bool,
    /// The first admitted change-feed tool.
    feed: Option<String>,
}

/// The result of a tool call.
///
/// As JSON (serde): `{"text", "pinned", "revision", "revision_refused"}`,
/// each revision `{"token", "observed_from"}` or `null`; the crate
/// documentation's "Results as JSON" shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CallResult {
    /// The result text, bounded and framed as untrusted data.
    pub text: String,
    /// The revision the call was pinned to.
    pub pinned: Option<SurfaceRevision>,
    /// The revision the result carried (now stored), if any.
    pub revision: Option<SurfaceRevision>,
    /// The result carried a revision marker over 512 bytes: the result is
    /// returned, but the marker was not stored.
    pub revision_refused: bool,
}

impl CallResult {
    /// The revision a decision made on this result carries (HTTP's `ETag`):
    /// the revision the result carried, else the one the call was pinned to
    /// and the surface accepted. Pass it to the next call that follows from
    /// this answer (the runtimes' `call_at`), so that call is refused if
    /// anything changed in between, whatever other calls of the same
    /// conversation learnt meanwhile. `None` when the surface has shown no
    /// revision yet.
    ///
    /// ```
    /// use human_plus_core::{CallResult, SurfaceRevision};
    ///
    /// let read = CallResult {
    ///     text: String::new(),
    ///     pinned: Some(SurfaceRevision::observed("r4", "sheet_read").unwrap()),
    ///     revision: Some(SurfaceRevision::observed("r5", "sheet_read").unwrap()),
    ///     revision_refused: false,
    /// };
    /// assert_eq!(read.revision_to_carry().map(SurfaceRevision::token), Some("r5"));
    /// ```
    #[must_use]
    pub fn revision_to_carry(&self) -> Option<&SurfaceRevision> {
        self.revision.as_ref().or(self.pinned.as_ref())
    }
}

/// What an operation produced, and what the runtime must store.
#[derive(Debug)]
pub struct Outcome<T> {
    /// The operation's result.
    pub result: Result<T, Error>,
    /// The record to store, when it changed. Store it with a
    /// compare-and-set on [`Outcome::expected_generation`].
    pub record: Option<SurfaceAttachment>,
    /// The generation the stored record must still have.
    pub expected_generation: u64,
    /// What to do to the [`InitCache`].
    pub init: InitUpdate,
    /// The attachment and client ids the init update is for.
    init_key: (String, String),
    /// The warm receive leg, still usable, to keep with the attachment for
    /// the next operation (warm mode only; `None` after a terminal answer,
    /// a detach, or a leg that broke). Its stream, if
    /// [`WarmLeg::has_stream`], must be kept running by the runtime.
    pub warm: Option<WarmLeg>,
    /// What the receive leg showed during the operation (and, warm, since
    /// the last one) that a caller may act on: a tool list change, a
    /// person's activity on the surface.
    pub seen: Seen,
    /// Whether something that acts on the surface was applied or may have
    /// been (a call answered, or sent and not answered): a failure to store
    /// the record is then reported as [`Error::Unrecorded`], never as an
    /// error that says nothing was applied.
    pub acted: bool,
}

impl<T> Outcome<T> {
    /// Settles the outcome once the record (if any) was stored: applies
    /// the init update to `init` and returns the result. When storing
    /// failed, pass that error as `stored`: it replaces the result (the
    /// operation's effect on the surface happened, but its record was not
    /// kept, which the caller must know).
    ///
    /// # Errors
    /// The operation's error, or the store's.
    pub fn settle(self, init: &mut InitCache, stored: Result<(), Error>) -> Result<T, Error> {
        init.apply_key(&self.init_key, self.init);
        if let Err(e) = stored {
            return Err(if self.acted {
                Error::Unrecorded(Unrecorded::new(e))
            } else {
                e
            });
        }
        self.result
    }
}

/// Validates the invitation against the egress policy and mints a new
/// attachment record. No network.
///
/// ```
/// use human_plus_core::*;
///
/// let inv = SurfaceInvitation::new("https://relay.fancy.example", "demo_001", "0123456789abcdef", "sheet:one", "sheets")?;
/// let policy = EgressPolicy::new(["relay.fancy.example"]).egress_proxy("http://egress.internal:3128");
/// let a = attach(&OwnerKey::of("session:one")?, inv, Participant::new("agent-1", "Assistant", "#7c3aed"), &policy, &mut SeededEntropy::new(1))?;
/// assert!(a.is_attached());
///
/// let hostile = SurfaceInvitation::new("https://169.254.169.254", "demo_001", "0123456789abcdef", "s", "a")?;
/// let err = attach(&OwnerKey::of("o")?, hostile, Participant::new("a", "A", "#000"), &EgressPolicy::new(["169.254.169.254"]).egress_proxy("http://p:3128"), &mut SeededEntropy::new(1));
/// assert_eq!(err.unwrap_err().code(), "egress_refused");
/// # Ok::<(), Error>(())
/// ```
///
/// # Errors
/// [`Error::EgressRefused`] when the policy refuses the relay URL.
pub fn attach(
    owner: &OwnerKey,
    invitation: SurfaceInvitation,
    participant: Participant,
    egress: &EgressPolicy,
    entropy: &mut dyn Entropy,
) -> Result<SurfaceAttachment, Error> {
    let record = SurfaceAttachment::mint(owner.clone(), invitation, participant, entropy);
    vet_invitation(record.invitation(), record.client_id(), egress)?;
    Ok(record)
}

/// [`attach`], for an attachment kept under a key the caller chooses (a
/// conversation id): the record's id is [`crate::keyed_attachment_id`] of the
/// owner and the key, so attaching again under the same owner and key
/// finds the same record. Validates the invitation against the egress
/// policy; no network.
///
/// ```
/// use human_plus_core::*;
///
/// let inv = SurfaceInvitation::new("https://relay.fancy.example", "demo_001", "0123456789abcdef", "sheet:one", "sheets")?;
/// let policy = EgressPolicy::new(["relay.fancy.example"]).egress_proxy("http://egress.internal:3128");
/// let owner = OwnerKey::of("tenant:7")?;
/// let a = attach_keyed(&owner, "conversation-42", inv, Participant::new("agent-1", "Assistant", "#7c3aed"), &policy, &mut SeededEntropy::new(1))?;
/// assert_eq!(a.id(), keyed_attachment_id(&owner, "conversation-42")?);
/// # Ok::<(), Error>(())
/// ```
///
/// # Errors
/// [`Error::EgressRefused`], or [`Error::InvalidAttachment`] for an empty
/// or over-long key.
pub fn attach_keyed(
    owner: &OwnerKey,
    key: &str,
    invitation: SurfaceInvitation,
    participant: Participant,
    egress: &EgressPolicy,
    entropy: &mut dyn Entropy,
) -> Result<SurfaceAttachment, Error> {
    let record =
        SurfaceAttachment::mint_keyed(owner.clone(), key, invitation, participant, entropy)?;
    vet_invitation(record.invitation(), record.client_id(), egress)?;
    Ok(record)
}

/// Runs the egress policy over an invitation's relay, or both hosts of its
/// Reverb channel.
fn vet_invitation(
    invitation: &SurfaceInvitation,
    client_id: &str,
    egress: &EgressPolicy,
) -> Result<(), Error> {
    if invitation.transport().is_http_relay() {
        RelayEndpoint::new(invitation, client_id, egress).map(drop)
    } else {
        ReverbEndpoint::new(invitation, client_id, egress).map(drop)
    }
}

/// The record, in any state, after checking the owner. No network.
///
/// # Errors
/// [`Error::AttachmentUnauthorized`] for another owner.
pub fn status<'a>(
    record: &'a SurfaceAttachment,
    owner: &OwnerKey,
) -> Result<&'a SurfaceAttachment, Error> {
    record.check_owner(owner)?;
    Ok(record)
}

/// What has been observed of the surface's conflict detection. No network.
///
/// # Errors
/// [`Error::AttachmentUnauthorized`] or [`Error::NotAttached`].
pub fn conflict_detection(
    record: &SurfaceAttachment,
    owner: &OwnerKey,
) -> Result<ConflictDetection, Error> {
    record.require(owner)?;
    Ok(record.conflict_detection())
}

#[derive(Debug)]
enum Kind {
    Tools,
    Call { tool: String, arguments: Value },
    Changes,
    Announce { frame: Vec<u8> },
    Detach,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Initialize,
    List,
    Act,
    /// A stale refusal is being completed: the change feed is asked what
    /// changed since the refused pin.
    Recover,
    /// An attach is learning the page's current revision from its change
    /// feed (`Operation::learning_revision`).
    Learn,
    Done,
}

/// The typed result of an operation kind: [`Discovery`], [`CallResult`],
/// [`SurfaceChanges`], `()` or [`SurfaceAttachment`]. Sealed.
pub trait OperationOutput: Sized + sealed::Sealed {}

impl<T: sealed::Sealed> OperationOutput for T {}

mod sealed {
    /// What any operation yields before it is typed.
    #[derive(Debug)]
    #[allow(clippy::large_enum_variant)] // built once per operation
    pub enum Produced {
        Tools(super::Discovery),
        Call(super::CallResult),
        Changes(crate::answers::changes::SurfaceChanges),
        Announced,
        Detached(crate::machines::attachment::SurfaceAttachment),
    }

    pub trait Sealed: Sized {
        fn from_produced(p: Produced) -> Option<Self>;
    }
}

use sealed::{Produced, Sealed};

impl Sealed for Discovery {
    fn from_produced(p: Produced) -> Option<Self> {
        match p {
            Produced::Tools(d) => Some(d),
            _ => None,
        }
    }
}

impl Sealed for CallResult {
    fn from_produced(p: Produced) -> Option<Self> {
        match p {
            Produced::Call(c) => Some(c),
            _ => None,
        }
    }
}

impl Sealed for SurfaceChanges {
    fn from_produced(p: Produced) -> Option<Self> {
        match p {
            Produced::Changes(c) => Some(c),
            _ => None,
        }
    }
}

impl Sealed for () {
    fn from_produced(p: Produced) -> Option<Self> {
        match p {
            Produced::Announced => Some(()),
            _ => None,
        }
    }
}

impl Sealed for SurfaceAttachment {
    fn from_produced(p: Produced) -> Option<Self> {
        match p {
            Produced::Detached(a) => Some(a),
            _ => None,
        }
    }
}

/// One manager operation in progress. `T` is what it produces:
/// [`Discovery`] (`tools`), [`CallResult`] (`call`), [`SurfaceChanges`]
/// (`changes_since`), `()` (`announce`) or [`SurfaceAttachment`] (`detach`).
pub struct Operation<T> {
    machine: Machine,
    _output: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Operation<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operation")
            .field("kind", &self.machine.kind)
            .field("step", &self.machine.step)
            .field("attachment", &self.machine.record.id())
            .finish_non_exhaustive()
    }
}

struct Machine {
    kind: Kind,
    record: SurfaceAttachment,
    loaded_generation: u64,
    io: Io,
    trust: TrustPolicy,
    guard: ResultGuard,
    require_revision: bool,
    entropy: Box<dyn Entropy + Send>,
    ids: RequestIds,
    step: Step,
    exchange: Option<Exchange>,
    /// A notification POSTed beside the program (`notifications/initialized`,
    /// which nothing waits for): only a gone session or a revoked token in
    /// its answer matters.
    aside: Option<Exchange>,
    init: InitUpdate,
    /// The listing's pages, as their bytes arrived.
    listing: ListingReader,
    cursor: Option<String>,
    discovery: Option<Discovery>,
    /// The tool acted on (call) or the feed tool (changes).
    acting_tool: Option<String>,
    pinned: Option<SurfaceRevision>,
    result: Option<Result<Produced, Error>>,
    delivered: bool,
    /// The start, deferred to the first poll so that a warm leg can be
    /// handed in first: (initialised, unregister on detach, now).
    pending: Option<(bool, bool, Instant)>,
    /// What `initialize` told of the surface (cached, or learnt now).
    info: Option<InitInfo>,
    /// The latest instant an input carried.
    now: Instant,
    /// The operation ended: the leg is closed or kept.
    concluded: bool,
    /// The leg kept for the next operation (warm mode).
    warm_out: Option<WarmLeg>,
    /// What the leg showed.
    seen: Seen,
    /// The most a listing may be reused, from the surface's `ttlMs`.
    list_ttl: Option<Duration>,
    /// The admitted change-feed tool, once discovery found one.
    feed: Option<String>,
    /// The current revision the last stale refusal named (its `data`).
    refusal_current: Option<SurfaceRevision>,
    /// A stale refusal waiting for the change feed's answer, with the
    /// current revision the refusal named.
    recovering: Option<(SurfaceChangedUnderYou, Option<SurfaceRevision>)>,
    /// The revision the caller's decision was made at: a call is pinned to
    /// exactly this, not to the stored pin (`Operation::pinned_to`).
    decided_at: Option<SurfaceRevision>,
    /// Learn the page's current revision from its change feed after the
    /// listing, when the record has none (`Operation::learning_revision`).
    learn_revision: bool,
    /// The discovery a learning attach returns once the feed answered.
    learnt: Option<Discovery>,
    /// Set by a stopping manager: no exchange waits past its instant.
    halt: Option<Halt>,
}

impl<T: OperationOutput> Operation<T> {
    fn start(
        kind: Kind,
        record: SurfaceAttachment,
        owner: &OwnerKey,
        config: &ManagerConfig,
        init: &InitCache,
        mut entropy: Box<dyn Entropy + Send>,
        now: Instant,
    ) -> Result<Self, Error> {
        record.require(owner)?;
        if matches!(kind, Kind::Tools | Kind::Call { .. } | Kind::Changes) {
            config.trust.assert_declared()?;
            // Computed once, on the configuration every operation clones
            // its policy from: a kept listing verdict is keyed by it.
            let _ = config.trust.digest();
        }
        let (endpoint, channel) = if record.invitation().transport().is_http_relay() {
            let endpoint =
                RelayEndpoint::new(record.invitation(), record.client_id(), &config.egress)?;
            (endpoint, None)
        } else {
            let reverb =
                ReverbEndpoint::new(record.invitation(), record.client_id(), &config.egress)?;
            let token = record.invitation().token().clone();
            (
                reverb.auth().clone(),
                Some(ChannelLeg::new(reverb, token, config.channel.clone())),
            )
        };
        let nonce = random_id(entropy.as_mut(), "", 4);
        let ids = RequestIds::new(record.client_id(), &nonce);
        let info = init.info(&record);
        let initialized = info.is_some();
        let loaded_generation = record.generation();
        let machine = Machine {
            kind,
            record,
            loaded_generation,
            io: {
                let mut io = Io::new(endpoint, config.transport.clone());
                if let Some(channel) = channel {
                    io.over_channel(channel);
                }
                io
            },
            trust: config.trust.clone(),
            guard: config.guard,
            require_revision: config.require_revision,
            entropy,
            ids,
            step: Step::Initialize,
            exchange: None,
            aside: None,
            init: InitUpdate::Keep,
            listing: ListingReader::new(),
            cursor: None,
            discovery: None,
            acting_tool: None,
            pinned: None,
            result: None,
            delivered: false,
            pending: Some((initialized, config.unregister_on_detach, now)),
            info,
            now,
            concluded: false,
            warm_out: None,
            seen: Seen::default(),
            list_ttl: None,
            feed: None,
            refusal_current: None,
            recovering: None,
            decided_at: None,
            learn_revision: false,
            learnt: None,
            halt: None,
        };
        Ok(Operation {
            machine,
            _output: PhantomData,
        })
    }

    /// Hands a warm attachment's receive leg to this operation (see
    /// [`TransportConfig::warm`]); call it right after building the
    /// operation, before anything else. Ignored when warm mode is off or
    /// the operation has started.
    #[must_use]
    pub fn with_warm_leg(mut self, leg: WarmLeg) -> Self {
        if self.machine.pending.is_some()
            && self.machine.io.config.warm
            && leg.channel.is_some() == self.machine.io.channel.is_some()
        {
            self.machine.io.leg = Some(leg.state);
            if leg.channel.is_some() {
                self.machine.io.channel = leg.channel;
            }
        }
        self
    }

    /// Bounds the whole operation by `deadline`: no exchange of it waits
    /// past that instant (each is otherwise bounded by the exchange
    /// timeout from its own start), and one still waiting then ends as
    /// its deadline says (a [`Error::Timeout`], or for a call posted and
    /// not answered the core's usual verdict). A manager uses it for an
    /// operation that waited for another on the same attachment, so that
    /// the wait and the exchanges together stay within the timeout the
    /// caller was promised. Call it right after building the operation.
    ///
    /// ```
    /// # use human_plus_core::*;
    /// # use std::time::{Duration, Instant};
    /// let owner = OwnerKey::of("o")?;
    /// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
    /// let config = ManagerConfig::new(
    ///     EgressPolicy::new(["relay.example"]).egress_proxy("http://egress.internal:3128"),
    ///     TrustPolicy::every_tool(NO_PINS),
    /// );
    /// let record = attach(&owner, inv, Participant::new("a", "A", "#000"), &config.egress, &mut SeededEntropy::new(1))?;
    /// let now = Instant::now();
    /// let mut op = Operation::tools(record, &owner, &config, &InitCache::new(), Box::new(SeededEntropy::new(2)), now)?
    ///     .with_deadline(now + Duration::from_secs(2));
    /// while op.poll_transmit().is_some() {}
    /// // The operation wakes at its deadline, not after the 30 s exchange
    /// // timeout.
    /// assert!(op.poll_timeout().unwrap() <= now + Duration::from_secs(2));
    /// # Ok::<(), Error>(())
    /// ```
    #[must_use]
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.machine.io.cap = Some(deadline);
        self
    }

    /// Lets a stopping manager end this operation: once `halt` names an
    /// instant ([`Halt::halt_at`]), no exchange of it waits past that
    /// instant, and one still waiting then ends as its deadline says (an
    /// [`Error::Timeout`] when nothing that acts was sent, an
    /// [`Error::CallTimeout`] for a call that was sent and not answered:
    /// it may have been applied). Until then [`Operation::poll_timeout`]
    /// asks to be woken every 100 ms, so a halt set while the driver sleeps
    /// is seen. Call it right after building the operation.
    ///
    /// ```
    /// # use human_plus_core::*;
    /// # use std::time::{Duration, Instant};
    /// let owner = OwnerKey::of("o")?;
    /// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
    /// let config = ManagerConfig::new(
    ///     EgressPolicy::new(["relay.example"]).egress_proxy("http://egress.internal:3128"),
    ///     TrustPolicy::every_tool(NO_PINS),
    /// );
    /// let record = attach(&owner, inv, Participant::new("a", "A", "#000"), &config.egress, &mut SeededEntropy::new(1))?;
    /// let now = Instant::now();
    /// let halt = Halt::new();
    /// let mut op = Operation::tools(record, &owner, &config, &InitCache::new(), Box::new(SeededEntropy::new(2)), now)?
    ///     .with_halt(halt.clone());
    /// while op.poll_transmit().is_some() {}
    /// halt.halt_at(now + Duration::from_secs(1));
    /// op.handle_timeout(now + Duration::from_secs(1));
    /// while op.poll_transmit().is_some() {}
    /// let outcome = op.poll_outcome().expect("ended at the halt");
    /// assert!(matches!(outcome.result, Err(Error::Timeout)));
    /// # Ok::<(), Error>(())
    /// ```
    #[must_use]
    pub fn with_halt(mut self, halt: Halt) -> Self {
        self.machine.halt = Some(halt);
        self
    }

    /// The next HTTP intent to perform (or to cancel).
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.machine.ensure_begun();
        if self.machine.io.channel.is_none() {
            return self.machine.io.transmits.pop_front();
        }
        // Over a channel: the exchange machine's requests go to the
        // channel, and the runtime gets the channel's socket work (and the
        // auth bridge's request); what the channel answers is fed back at
        // once.
        loop {
            if self.machine.feed_channel() {
                let now = self.machine.now;
                self.machine.advance(now);
            }
            let now = self.machine.now;
            let m = &mut self.machine;
            let channel = m.io.channel.as_mut()?;
            if let Some(t) = m.io.transmits.pop_front() {
                channel.take(t, now);
                continue;
            }
            if let Some(t) = channel.poll_transmit(now) {
                return Some(t);
            }
            if channel.is_quiet() {
                return None;
            }
        }
    }

    /// When the operation next needs [`Operation::handle_timeout`]. While
    /// the operation is unfinished this is always `Some` (at the latest the
    /// current exchange's deadline), so a driver never waits unbounded.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if let Some((_, _, now)) = self.machine.pending {
            return Some(now);
        }
        if self.machine.result.is_some() {
            return None;
        }
        let own = self
            .machine
            .exchange
            .as_ref()
            .and_then(|x| x.poll_timeout(&self.machine.io));
        let channel = self
            .machine
            .io
            .channel
            .as_ref()
            .and_then(|c| c.poll_timeout());
        let own = match (own, channel) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match &self.machine.halt {
            // A stopping manager's instant, once set; until then a look
            // every HALT_LOOK, so a halt set while the driver sleeps is
            // seen within that (an operation in flight only).
            Some(halt) => {
                let look = halt
                    .at()
                    .unwrap_or(self.machine.now + crate::machines::halt::HALT_LOOK);
                Some(own.map_or(look, |own| own.min(look)))
            }
            None => own,
        }
    }

    /// The relay endpoint: the runtime vets resolved addresses through
    /// [`RelayEndpoint::vet_resolved`] and connects only to those.
    #[must_use]
    pub fn endpoint(&self) -> &RelayEndpoint {
        &self.machine.io.endpoint
    }

    /// Over a Reverb channel, the WebSocket server's endpoint: the runtime
    /// resolves its host, vets the addresses with its `vet_resolved`,
    /// connects through its egress proxy when it has one, and uses TLS
    /// when [`RelayEndpoint::uses_tls`] says ([`crate::SocketTransmit::Open`]).
    /// [`Operation::endpoint`] is then the host app's auth bridge, the one
    /// HTTP request of a channel. `None` for an HTTP relay.
    #[must_use]
    pub fn socket_endpoint(&self) -> Option<&RelayEndpoint> {
        self.machine
            .io
            .channel
            .as_ref()
            .map(|c| c.endpoint().socket())
    }

    /// Over a Reverb channel: what the channel's WebSocket did (see
    /// [`Transmit::Socket`]).
    pub fn handle_socket(&mut self, event: SocketEvent, now: Instant) {
        let m = &mut self.machine;
        m.ensure_begun();
        m.now = now;
        if let Some(channel) = m.io.channel.as_mut() {
            channel.handle_socket(event, now);
        }
        let _ = m.feed_channel();
        m.advance(now);
    }

    /// The response head of `request` arrived.
    pub fn handle_head(&mut self, request: RequestId, status: u16, now: Instant) {
        self.handle_event(request, HttpEvent::Head(status), now);
    }

    /// A chunk of the response body of `request` arrived.
    pub fn handle_body(&mut self, request: RequestId, chunk: &[u8], now: Instant) {
        self.handle_event(request, HttpEvent::Body(chunk.to_vec()), now);
    }

    /// The response body of `request` ended.
    pub fn handle_end(&mut self, request: RequestId, now: Instant) {
        self.handle_event(request, HttpEvent::End, now);
    }

    /// `request` failed before or while its response arrived, after some
    /// of it may have been written (see [`HttpEvent::Failed`]; a failure
    /// before anything was written is [`HttpEvent::NotSent`]).
    pub fn handle_error(&mut self, request: RequestId, error: Error, now: Instant) {
        self.handle_event(request, HttpEvent::Failed(error), now);
    }

    /// Feeds one [`HttpEvent`] of `request`.
    pub fn handle_event(&mut self, request: RequestId, event: HttpEvent, now: Instant) {
        let m = &mut self.machine;
        m.ensure_begun();
        m.now = now;
        match m.io.channel.as_mut() {
            Some(channel) if channel.owns(request) => {
                channel.handle_http(request, event, now);
                let _ = m.feed_channel();
            }
            _ => m.feed(request, event, now),
        }
        m.advance(now);
    }

    /// Time passed: `now` is at or after [`Operation::poll_timeout`].
    pub fn handle_timeout(&mut self, now: Instant) {
        self.machine.ensure_begun();
        self.machine.now = now;
        self.machine.apply_halt();
        if let Some(channel) = self.machine.io.channel.as_mut() {
            channel.handle_timeout(now);
            let _ = self.machine.feed_channel();
        }
        if let Some(x) = self.machine.exchange.as_mut() {
            x.handle_timeout(&mut self.machine.io, now);
        }
        self.machine.advance(now);
    }

    /// Whether the outcome is ready.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.machine.result.is_some() && !self.machine.delivered
    }

    /// The outcome, once, when the operation is finished. Any request still
    /// open has been cancelled through [`Operation::poll_transmit`] first.
    pub fn poll_outcome(&mut self) -> Option<Outcome<T>> {
        self.machine.ensure_begun();
        if self.machine.delivered
            || !self.machine.io.transmits.is_empty()
            || self
                .machine
                .io
                .channel
                .as_ref()
                .is_some_and(|c| !c.is_quiet())
        {
            return None;
        }
        let result = self.machine.result.take()?;
        self.machine.delivered = true;
        let record = (self.machine.record.generation() != self.machine.loaded_generation)
            .then(|| self.machine.record.clone());
        let acted = match &result {
            Ok(p) => matches!(p, Produced::Call(_) | Produced::Announced),
            Err(e) => e.outcome_unknown(),
        };
        let result = result.and_then(|p| {
            T::from_produced(p).ok_or(Error::Protocol(ProtocolError::MalformedResult))
        });
        Some(Outcome {
            acted,
            result,
            record,
            expected_generation: self.machine.loaded_generation,
            init: self.machine.init,
            init_key: (
                self.machine.record.id().to_owned(),
                self.machine.record.client_id().to_owned(),
            ),
            warm: self.machine.warm_out.take(),
            seen: self.machine.seen,
        })
    }
}

impl Operation<Discovery> {
    /// `tools`: initialise if needed, list the surface's tools (following
    /// `nextCursor`), and admit them through the trust policy.
    ///
    /// # Errors
    /// The owner check, the state check, undeclared trust and the egress
    /// policy are decided here, before any request exists.
    pub fn tools(
        record: SurfaceAttachment,
        owner: &OwnerKey,
        config: &ManagerConfig,
        init: &InitCache,
        entropy: Box<dyn Entropy + Send>,
        now: Instant,
    ) -> Result<Self, Error> {
        Self::start(Kind::Tools, record, owner, config, init, entropy, now)
    }
}

impl Operation<Discovery> {
    /// After the listing, when the attachment has no revision yet and a
    /// change-feed tool was admitted, asks the feed once (no `since`, not
    /// pinned) and keeps the revision it answers with: the attachment's
    /// first call is then pinned to the page as it was when it was
    /// attached, so a person's edit made after that is refused, not
    /// overwritten. One exchange, at attach only; a feed that fails or
    /// names no revision leaves the attachment unpinned, as before. What a
    /// runtime's attach that proves itself (`attach_verified`, `attach_as`)
    /// does. Call it right after building the operation.
    #[must_use]
    pub fn learning_revision(mut self) -> Self {
        self.machine.learn_revision = true;
        self
    }
}

impl Operation<CallResult> {
    /// Pins this call to `revision`, the revision the caller's decision was
    /// made at (HTTP's `If-Match`), instead of the attachment's stored pin:
    /// parallel tool calls of one model turn, or a queue's jobs decided at
    /// one read, each carry their own, so a refusal told to one of them
    /// never moves another's pin. The result's
    /// [`CallResult::revision_to_carry`], a refusal's
    /// [`SurfaceChangedUnderYou::revision_to_carry`] and a feed's
    /// [`SurfaceChanges::revision`] are the revisions to carry. Call it
    /// right after building the operation.
    ///
    /// ```
    /// # use human_plus_core::*;
    /// # use std::time::Instant;
    /// # use serde_json::json;
    /// let owner = OwnerKey::of("o")?;
    /// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
    /// let config = ManagerConfig::new(
    ///     EgressPolicy::new(["relay.example"]).egress_proxy("http://egress.internal:3128"),
    ///     TrustPolicy::every_tool(NO_PINS),
    /// );
    /// let record = attach(&owner, inv, Participant::new("a", "A", "#000"), &config.egress, &mut SeededEntropy::new(1))?;
    /// let decided_at = SurfaceRevision::observed("r7", "sheet_read").unwrap();
    /// let op = Operation::call(record, &owner, "sheet_set_cell", json!({"address": "A1", "value": "1"}), &config, &InitCache::new(), Box::new(SeededEntropy::new(2)), Instant::now())?
    ///     .pinned_to(decided_at);
    /// # let _ = op;
    /// # Ok::<(), Error>(())
    /// ```
    #[must_use]
    pub fn pinned_to(mut self, revision: SurfaceRevision) -> Self {
        self.machine.decided_at = Some(revision);
        self
    }

    /// `call`: discover, check the tool was admitted, then `tools/call`
    /// pinned to the stored revision (`params._meta.revision`), reads
    /// included. `arguments` must be a JSON object or null (sent as `{}`).
    ///
    /// A stale refusal ([`Error::SurfaceChangedUnderYou`]) never leaves the
    /// attachment unpinned: the change feed, when one was admitted, is
    /// asked what changed since the refused pin (one more exchange) and its
    /// rows are framed inside the refusal; the record is then pinned to the
    /// revision the feed or the refusal's `data.current` reported, or keeps
    /// the refused pin. When the pin moved without the model being told
    /// what changed, this very call (same tool, same arguments) is refused
    /// here, without being sent, until another call has been answered.
    ///
    /// # Errors
    /// As [`Operation::tools`], and [`Error::InvalidArguments`] for
    /// arguments that are not an object.
    #[allow(clippy::too_many_arguments)]
    pub fn call(
        record: SurfaceAttachment,
        owner: &OwnerKey,
        tool: &str,
        arguments: Value,
        config: &ManagerConfig,
        init: &InitCache,
        entropy: Box<dyn Entropy + Send>,
        now: Instant,
    ) -> Result<Self, Error> {
        let arguments = match arguments {
            Value::Null => Value::Object(Map::new()),
            Value::Object(m) => Value::Object(m),
            _ => return Err(Error::InvalidArguments),
        };
        Self::start(
            Kind::Call {
                tool: tool.to_owned(),
                arguments,
            },
            record,
            owner,
            config,
            init,
            entropy,
            now,
        )
    }
}

impl Operation<SurfaceChanges> {
    /// `changes_since`: discover, find the admitted feed tool, call it with
    /// `{"since": <revision>}` (pinned like any call) and read the answer.
    /// The revision is the stored one, or the refused pin after a stale
    /// refusal moved it and before a call was answered
    /// ([`SurfaceAttachment::feed_since`]): what changed since the agent's
    /// last look, never the whole history once a revision was seen.
    ///
    /// # Errors
    /// As [`Operation::tools`].
    pub fn changes_since(
        record: SurfaceAttachment,
        owner: &OwnerKey,
        config: &ManagerConfig,
        init: &InitCache,
        entropy: Box<dyn Entropy + Send>,
        now: Instant,
    ) -> Result<Self, Error> {
        Self::start(Kind::Changes, record, owner, config, init, entropy, now)
    }
}

impl Operation<()> {
    /// `announce`: POST a `notifications/human-plus/activity` notification;
    /// wait for nothing but the POST's status.
    ///
    /// # Errors
    /// The owner and state checks and the egress policy.
    pub fn announce(
        record: SurfaceAttachment,
        owner: &OwnerKey,
        activity: &Activity,
        config: &ManagerConfig,
        entropy: Box<dyn Entropy + Send>,
        now: Instant,
    ) -> Result<Self, Error> {
        let params = activity.params(record.participant(), record.invitation());
        let frame = encode_notification("notifications/human-plus/activity", Some(&params));
        Self::start(
            Kind::Announce { frame },
            record,
            owner,
            config,
            &InitCache::new(),
            entropy,
            now,
        )
    }
}

impl Operation<SurfaceAttachment> {
    /// `detach`: moves the attachment to `detached`. Sends nothing unless
    /// [`ManagerConfig::unregister_on_detach`] is set, in which case it
    /// POSTs `unregister` first (a gone session counts as success).
    ///
    /// # Errors
    /// The owner and state checks and the egress policy.
    pub fn detach(
        record: SurfaceAttachment,
        owner: &OwnerKey,
        config: &ManagerConfig,
        entropy: Box<dyn Entropy + Send>,
        now: Instant,
    ) -> Result<Self, Error> {
        Self::start(
            Kind::Detach,
            record,
            owner,
            config,
            &InitCache::new(),
            entropy,
            now,
        )
    }
}

impl Machine {
    /// One event of one of the exchange machine's requests.
    fn feed(&mut self, request: RequestId, event: HttpEvent, now: Instant) {
        match (self.aside.as_mut(), self.exchange.as_mut()) {
            (Some(aside), _) if aside.owns_post(request) => {
                aside.handle_event(&mut self.io, request, event, now);
                self.settle_aside();
            }
            (_, Some(x)) if !x.is_done() => x.handle_event(&mut self.io, request, event, now),
            _ => self.io.leg_event(request, event, now),
        }
    }

    /// Over a channel: feeds what the channel answered the exchange
    /// machine's requests.
    fn feed_channel(&mut self) -> bool {
        let now = self.now;
        let mut fed = false;
        while let Some((id, event)) = self.io.channel.as_mut().and_then(|c| c.poll_op_event()) {
            self.feed(id, event, now);
            fed = true;
        }
        fed
    }

    fn ensure_begun(&mut self) {
        if let Some((initialized, unregister, now)) = self.pending.take() {
            self.begin(initialized, unregister, now);
            // The first exchange may be decided at once (a warm leg the
            // relay already closed with 410/401).
            self.advance(now);
        }
    }

    fn begin(&mut self, initialized: bool, unregister: bool, now: Instant) {
        match &self.kind {
            Kind::Announce { frame } => {
                let frame = frame.clone();
                self.step = Step::Act;
                self.exchange = Some(Exchange::post_only(
                    &mut self.io,
                    PostTarget::Inbox,
                    Some(frame),
                    Acts::Yes(DeliveryUnknown::request(
                        "notifications/human-plus/activity",
                    )),
                    now,
                ));
            }
            Kind::Detach => {
                // A detached attachment keeps no receive leg.
                self.io.drop_leg();
                self.step = Step::Act;
                if unregister {
                    self.exchange = Some(Exchange::post_only(
                        &mut self.io,
                        PostTarget::Unregister,
                        None,
                        Acts::Yes(DeliveryUnknown::request("unregister")),
                        now,
                    ));
                } else {
                    self.record.transition(AttachmentState::Detached);
                    self.step = Step::Done;
                    self.result = Some(Ok(Produced::Detached(self.record.clone())));
                }
            }
            Kind::Call { tool, arguments }
                if self
                    .record
                    .is_refused_call(&call_fingerprint(tool, arguments)) =>
            {
                // The very call the surface just refused, with nothing
                // answered since: refused here, nothing is sent.
                let refusal =
                    SurfaceChangedUnderYou::repeated(tool.clone(), self.record.revision().cloned());
                self.fail(Error::SurfaceChangedUnderYou(refusal));
            }
            Kind::Tools | Kind::Call { .. } | Kind::Changes => {
                if initialized {
                    match self.current_listing(now) {
                        // Provably current: no need to list again.
                        Some(discovery) => self.on_discovery(discovery, now),
                        None => self.start_list(now),
                    }
                } else {
                    self.step = Step::Initialize;
                    // An attachment's first operation here: nothing is kept
                    // yet. Connections for the POSTs open while the leg
                    // subscribes: initialize, then `initialized` beside the
                    // first tools/list — which may leave before
                    // initialize's own HTTP answer frees its connection
                    // (its reply can come first, on the leg).
                    self.io.connect_ahead = 3;
                    let params = json!({
                        "protocolVersion": MCP_PROTOCOL_VERSION,
                        "capabilities": {},
                        "clientInfo": {"name": CLIENT_NAME, "version": CLIENT_VERSION},
                    });
                    self.request("initialize", Some(&params), Acts::No, now);
                }
            }
        }
    }

    /// The notification beside the program, once answered: a gone
    /// session or a revoked token ends the operation; any other failure is
    /// only the notification's.
    fn settle_aside(&mut self) {
        let Some(r) = self.aside.as_mut().and_then(Exchange::take_result) else {
            return;
        };
        self.aside = None;
        if let Err(e) = r
            && e.is_terminal()
            && self.result.is_none()
        {
            self.exchange = None;
            self.fail(e);
        }
    }

    fn request(&mut self, method: &str, params: Option<&Value>, acts: Acts, now: Instant) {
        let id = self.ids.next_id();
        let frame = encode_request(&id, method, params);
        self.exchange = Some(Exchange::request(&mut self.io, id, frame, acts, now));
    }

    /// The listing kept with the warm leg, when it is provably current: the
    /// leg stayed open without a gap since it was fetched, no
    /// `notifications/tools/list_changed` arrived since, the surface
    /// declared `tools.listChanged`, and it is younger than its bound.
    fn current_listing(&self, now: Instant) -> Option<Discovery> {
        if !self.info.is_some_and(|i| i.list_changed) {
            return None;
        }
        self.io.leg.as_ref()?.current_listing(now).cloned()
    }

    /// Keeps `discovery` with the leg for the next operations, when it may
    /// be reused at all (warm mode, a surface that declared
    /// `tools.listChanged`, a non-zero bound).
    fn keep_listing(&mut self, discovery: &Discovery, now: Instant) {
        let max = match self.list_ttl {
            Some(ttl) => ttl.min(self.io.config.listing_max_age),
            None => self.io.config.listing_max_age,
        };
        let reusable =
            self.io.config.warm && self.info.is_some_and(|i| i.list_changed) && !max.is_zero();
        if let Some(leg) = self.io.leg.as_mut().filter(|_| reusable) {
            leg.keep_listing(discovery.clone(), now + max);
        }
    }

    /// The operation has its result: the receive leg is kept (warm) or
    /// closed, and what it showed is reported.
    fn conclude(&mut self) {
        if self.concluded || self.result.is_none() {
            return;
        }
        self.concluded = true;
        let terminal = self
            .result
            .as_ref()
            .is_some_and(|r| r.as_ref().is_err_and(Error::is_terminal));
        if let Some(leg) = self.io.leg.as_mut() {
            self.seen = self.seen.merged(std::mem::take(&mut leg.seen));
        }
        self.exchange = None;
        if let Some(aside) = self.aside.take() {
            aside.release(&mut self.io);
        }
        self.warm_out = self.io.end_operation(terminal, self.now);
    }

    /// A listing started because the kept one was not yet proven current
    /// (a long-poll leg whose parked poll came back between operations:
    /// issue 43, two replicas on one conversation): the leg's first poll
    /// has been answered now without a change of the tools, so the kept
    /// listing is current again. Its `tools/list` POST, queued the moment
    /// the leg opened and not yet handed to the runtime, is taken back and
    /// the kept listing used: the page is not listed again.
    fn reuse_proven_listing(&mut self, now: Instant) {
        if !matches!(self.step, Step::List) || self.listing.pages() > 0 {
            return;
        }
        let Some(x) = self.exchange.as_ref().filter(|x| !x.is_done()) else {
            return;
        };
        let Some(discovery) = self.current_listing(now) else {
            return;
        };
        let queued = self
            .io
            .transmits
            .iter()
            .position(|t| matches!(t, Transmit::Request(r) if x.owns_post(r.id)));
        let Some(at) = queued else {
            return;
        };
        self.io.transmits.remove(at);
        self.exchange = None;
        self.on_discovery(discovery, now);
    }

    fn start_list(&mut self, now: Instant) {
        self.step = Step::List;
        let params = self.cursor.as_ref().map(|c| json!({ "cursor": c }));
        self.request("tools/list", params.as_ref(), Acts::No, now);
    }

    /// Moves the program on when the current exchange is done.
    fn advance(&mut self, now: Instant) {
        self.reuse_proven_listing(now);
        loop {
            if self.result.is_some() {
                self.conclude();
                return;
            }
            let Some(x) = self.exchange.as_mut() else {
                return;
            };
            if !x.is_done() {
                return;
            }
            let Some(r) = x.take_result() else {
                return;
            };
            self.exchange = None;
            self.on_exchange(r, now);
        }
    }

    fn fail(&mut self, error: Error) {
        match &error {
            Error::SurfaceUnavailable => {
                self.record.transition(AttachmentState::SurfaceUnavailable);
                self.init = InitUpdate::Clear;
            }
            Error::AttachmentUnauthorized(Unauthorized::Relay | Unauthorized::Bridge { .. }) => {
                self.record
                    .transition(AttachmentState::AttachmentUnauthorized);
                self.init = InitUpdate::Clear;
            }
            _ => {}
        }
        self.step = Step::Done;
        self.result = Some(Err(error));
    }

    fn succeed(&mut self, p: Produced) {
        self.step = Step::Done;
        self.result = Some(Ok(p));
    }

    fn on_exchange(&mut self, r: Result<Reply, Error>, now: Instant) {
        match self.step {
            Step::Initialize => match r
                .and_then(Reply::into_value)
                .and_then(|reply| self.rpc_result(reply, "initialize"))
            {
                Ok(result) => {
                    let version = result.get("protocolVersion");
                    if !version.and_then(Value::as_str).is_some_and(|v| {
                        crate::formats::jsonrpc::SURFACE_PROTOCOL_VERSIONS.contains(&v)
                    }) {
                        // Quoted later only when it has a version's shape.
                        let shown = version
                            .and_then(Value::as_str)
                            .filter(|v| crate::values::plain::is_protocol_version_shape(v))
                            .map(str::to_owned);
                        self.fail(Error::Protocol(ProtocolError::UnsupportedProtocolVersion(
                            shown,
                        )));
                        return;
                    }
                    let list_changed = result
                        .get("capabilities")
                        .and_then(|c| c.get("tools"))
                        .and_then(|t| t.get("listChanged"))
                        == Some(&Value::Bool(true));
                    let info = InitInfo { list_changed };
                    self.info = Some(info);
                    // `initialized` is not waited for (the seeds: "a
                    // non-blocking notifications/initialized"): it goes out
                    // first, and the first tools/list right beside it.
                    let frame = encode_notification::<()>("notifications/initialized", None);
                    self.aside = Some(Exchange::post_only(
                        &mut self.io,
                        PostTarget::Inbox,
                        Some(frame),
                        Acts::No,
                        now,
                    ));
                    self.init = InitUpdate::Set(info);
                    self.start_list(now);
                }
                Err(e) => self.fail(e),
            },
            Step::List => match r.and_then(|reply| self.listed_page(reply)) {
                Ok(result) => self.on_listed(result, now),
                Err(e) => self.fail(e),
            },
            Step::Act => match r {
                // A feed's answer on an SSE leg is read from the frame's
                // bytes; anything that reader declines (not JSON `Value`
                // reads, no object `result`, `isError`) goes the `Value`
                // way, which says what is wrong.
                Ok(reply)
                    if matches!(self.kind, Kind::Changes) && reply.result_text().is_some() =>
                {
                    let answer = reply
                        .frame_text()
                        .and_then(|frame| read_feed_frame(frame, self.record.change_feed()));
                    match answer {
                        Some(answer) => {
                            let tool = self.acting_tool.clone().unwrap_or_default();
                            self.settle_feed(&tool, answer);
                        }
                        None => self.on_acted(reply.into_value(), now),
                    }
                }
                r => self.on_acted(r.and_then(Reply::into_value), now),
            },
            Step::Recover => self.on_recovered(r),
            Step::Learn => self.on_learnt(r),
            Step::Done => {}
        }
    }

    /// A `tools/list` reply's `result`, exactly as its bytes arrived (an
    /// SSE frame's own bytes; a long-poll frame arrives parsed, and its
    /// `result` is written back with serde_json, one text per value).
    fn listed_page(&mut self, reply: Reply) -> Result<String, Error> {
        if let Some(text) = reply.result_text() {
            if !text.starts_with('{') {
                return Err(Error::Protocol(ProtocolError::MalformedResult));
            }
            return Ok(text.to_owned());
        }
        let result = self.rpc_result(reply.into_value()?, "tools/list")?;
        serde_json::to_string(&result).map_err(|_| Error::Protocol(ProtocolError::MalformedResult))
    }

    fn on_listed(&mut self, result: String, now: Instant) {
        // The definitions are built only when something needs them: a
        // `tools` operation, or a listing kept with a warm leg.
        let definitions = matches!(self.kind, Kind::Tools) || self.may_keep_listing();
        let next = match self.listing.page(
            result,
            self.record.listing_verdict(),
            &self.trust,
            definitions,
        ) {
            Ok(next) => next,
            Err(e) => {
                self.fail(e);
                return;
            }
        };
        // Any string is a cursor, the empty one too (2026-07-28 says so
        // outright); one equal to the cursor just sent would ask for the
        // same page again, for ever.
        if let Some(cursor) = next {
            if self.cursor.as_deref() == Some(cursor.as_str()) {
                self.fail(Error::Protocol(ProtocolError::CursorNotAdvancing));
                return;
            }
            if self.listing.pages() >= self.io.config.max_tool_pages {
                self.fail(Error::Protocol(ProtocolError::TooManyPages(
                    self.io.config.max_tool_pages,
                )));
                return;
            }
            self.cursor = Some(cursor);
            self.start_list(now);
            return;
        }
        let listing = std::mem::take(&mut self.listing);
        let outcome = match listing.finish(&self.trust, self.record.listing_verdict(), definitions)
        {
            Ok(o) => o,
            Err(e) => {
                self.fail(e);
                return;
            }
        };
        if let Some(ttl) = outcome.ttl_ms {
            self.list_ttl = Some(Duration::from_millis(ttl));
        }
        let found = self.find_in(outcome.admitted().iter().map(String::as_str));
        let admission = outcome.admission;
        let claims = outcome.claims;
        let (malformed, reused) = (outcome.malformed, outcome.reused);
        let verdict = (!reused).then(|| outcome.verdict.into_owned());
        if let Some(verdict) = verdict {
            self.record.keep_listing_verdict(verdict);
        }
        self.record.observe_change_feed(found.feed.is_some());
        match admission {
            Some(admission) => {
                let discovery = Discovery {
                    tools: admission.admitted,
                    withheld: admission.withheld,
                    malformed,
                    claims,
                };
                self.keep_listing(&discovery, now);
                self.on_discovery(discovery, now);
            }
            None => self.act(found, now),
        }
    }

    /// Whether a listing fetched now may be kept with the leg (warm mode,
    /// a surface that declared `tools.listChanged`, a non-zero bound).
    fn may_keep_listing(&self) -> bool {
        self.io.config.warm
            && self.info.is_some_and(|i| i.list_changed)
            && !self.io.config.listing_max_age.is_zero()
    }

    /// What the operation does with the admitted tools, listed now or kept.
    fn on_discovery(&mut self, discovery: Discovery, now: Instant) {
        if matches!(self.kind, Kind::Tools) {
            let feed = self
                .find_in(discovery.tools.iter().map(ToolDefinition::name))
                .feed;
            match feed {
                Some(feed) if self.learn_revision && self.record.revision().is_none() => {
                    // The page's revision now, with nothing pinned: the
                    // first call is pinned to it.
                    self.learnt = Some(discovery);
                    self.step = Step::Learn;
                    self.acting_tool = Some(feed.clone());
                    let params = json!({"name": feed, "arguments": {}});
                    self.request("tools/call", Some(&params), Acts::No, now);
                }
                _ => self.succeed(Produced::Tools(discovery)),
            }
            return;
        }
        let found = self.find_in(discovery.tools.iter().map(ToolDefinition::name));
        self.discovery = Some(discovery);
        self.act(found, now);
    }

    /// Among the admitted names: whether the tool a call acts on is one,
    /// and the first change-feed tool.
    fn find_in<'n>(&self, names: impl Iterator<Item = &'n str>) -> Found {
        let wanted = match &self.kind {
            Kind::Call { tool, .. } => Some(tool.as_str()),
            _ => None,
        };
        let mut found = Found::default();
        for name in names {
            found.offered |= wanted == Some(name);
            if found.feed.is_none() && is_change_feed_tool(name) {
                found.feed = Some(name.to_owned());
            }
        }
        found
    }

    /// Acts on what discovery admitted: the call, or the change feed.
    fn act(&mut self, found: Found, now: Instant) {
        self.feed.clone_from(&found.feed);
        match &self.kind {
            Kind::Call { tool, arguments } => {
                let tool = tool.clone();
                let arguments = arguments.clone();
                if !found.offered {
                    self.fail(Error::ToolRefused(ToolRefusal::NotOffered(tool)));
                    return;
                }
                if self.require_revision
                    && self.record.conflict_detection() == ConflictDetection::Unavailable
                {
                    self.fail(Error::ConflictDetectionUnavailable(
                        ConflictDetectionUnavailable::new(
                            self.record.invitation().surface_id(),
                            &tool,
                        ),
                    ));
                    return;
                }
                self.call_tool(tool, arguments, now);
            }
            Kind::Changes => match found.feed {
                None => self.succeed(Produced::Changes(SurfaceChanges::unavailable())),
                Some(feed) => {
                    let mut args = Map::new();
                    // After a refusal moved the pin, the refused pin: what
                    // changed since the agent's last look, never the whole
                    // history.
                    if let Some(rev) = self.record.feed_since() {
                        args.insert("since".to_owned(), Value::String(rev.token().to_owned()));
                    }
                    self.call_tool(feed, Value::Object(args), now);
                }
            },
            Kind::Tools | Kind::Announce { .. } | Kind::Detach => {}
        }
    }

    fn call_tool(&mut self, tool: String, arguments: Value, now: Instant) {
        self.step = Step::Act;
        self.pinned = match (&self.kind, &self.decided_at) {
            // The caller's decision's revision, exactly.
            (Kind::Call { .. }, Some(at)) => Some(at.clone()),
            _ => self.record.revision().cloned(),
        };
        let mut params = Map::new();
        params.insert("name".to_owned(), Value::String(tool.clone()));
        params.insert("arguments".to_owned(), arguments);
        if let Some(rev) = &self.pinned {
            params.insert("_meta".to_owned(), json!({ "revision": rev.token() }));
        }
        // A call acts on the surface: its lost answer is never retried.
        // The change feed is a read.
        let acts = if matches!(self.kind, Kind::Call { .. }) {
            Acts::Yes(DeliveryUnknown::call(&tool))
        } else {
            Acts::No
        };
        self.acting_tool = Some(tool);
        self.request("tools/call", Some(&Value::Object(params)), acts, now);
    }

    fn on_acted(&mut self, r: Result<Value, Error>, now: Instant) {
        match &self.kind {
            Kind::Announce { .. } => match r {
                Ok(_) => self.succeed(Produced::Announced),
                Err(e) => self.fail(e),
            },
            Kind::Detach => match r {
                Ok(_) => {
                    self.record.transition(AttachmentState::Detached);
                    let record = self.record.clone();
                    self.succeed(Produced::Detached(record));
                }
                Err(e) => self.fail(e),
            },
            Kind::Call { .. } | Kind::Changes => {
                let tool = self.acting_tool.clone().unwrap_or_default();
                let result = r.and_then(|reply| self.rpc_result(reply, &tool));
                match result {
                    Err(Error::RevisionRejected) => self.on_refused(tool, now),
                    Err(e) => self.fail(e),
                    Ok(result) => {
                        // Answered: a guarded refused call may be sent
                        // again, and the feed asks since the pin again.
                        self.record.lift_refused_calls();
                        if matches!(self.kind, Kind::Call { .. }) {
                            self.record.keep_feed_since(None);
                        }
                        if matches!(self.kind, Kind::Call { .. }) {
                            self.on_called(&tool, &result);
                        } else {
                            self.on_feed(&tool, &result);
                        }
                    }
                }
            }
            Kind::Tools => {}
        }
    }

    fn on_called(&mut self, tool: &str, result: &Value) {
        let mut revision_refused = false;
        let revision = match SurfaceRevision::from_result(result, tool) {
            Ok(Some(rev)) => {
                self.record.record_revision(rev.clone());
                Some(rev)
            }
            Ok(None) => {
                self.record.observe_no_revision();
                None
            }
            Err(_) => {
                // The tool ran; the result is returned, the marker is not
                // stored, and the outcome says so.
                revision_refused = true;
                None
            }
        };
        let text = result_text(result);
        let framed = match self.frame(tool, &text) {
            Ok(f) => f,
            Err(e) => {
                self.fail(e);
                return;
            }
        };
        if result.get("isError") == Some(&Value::Bool(true)) {
            self.fail(Error::ToolFailed { framed });
            return;
        }
        self.succeed(Produced::Call(CallResult {
            text: framed,
            pinned: self.pinned.clone(),
            revision,
            revision_refused,
        }));
    }

    fn on_feed(&mut self, tool: &str, result: &Value) {
        if result.get("isError") == Some(&Value::Bool(true)) {
            // A feed that failed must never read as "nothing changed".
            let text = result_text(result);
            match self.frame(tool, &text) {
                Ok(framed) => self.fail(Error::ToolFailed { framed }),
                Err(e) => self.fail(e),
            }
            return;
        }
        let answer = SurfaceChanges::read_from(result, self.record.change_feed());
        self.settle_feed(tool, answer);
    }

    /// Keeps what a feed's answer tells (its revision, attribution) and
    /// succeeds with it, its labels framed.
    fn settle_feed(&mut self, tool: &str, answer: SurfaceChanges) {
        self.record.lift_refused_calls();
        self.record.keep_feed_since(None);
        if let Some(rev) = answer.revision() {
            let rev = SurfaceRevision::observed(rev.token(), tool).unwrap_or_else(|_| rev.clone());
            self.record.record_revision(rev);
        }
        if answer.attributes() {
            self.record.observe_attribution();
        }
        let surface = self.record.invitation().surface_id().to_owned();
        let guard = self.guard;
        let secrets = self.secrets();
        let entropy = &mut self.entropy;
        let framed = answer.with_framed_labels(|label| {
            guard.frame(&surface, tool, &secrets.redact(label), entropy.as_mut())
        });
        match framed {
            Ok(a) => self.succeed(Produced::Changes(a)),
            Err(e) => self.fail(e),
        }
    }

    /// The surface refused the call's pin as stale. The attachment keeps a
    /// pin (never none: the next call could be a write): the current
    /// revision when the refusal or the change feed says it, else the
    /// refused one. A call's refusal asks the change feed what changed
    /// since the refused pin (one more exchange, only on a refusal), so the
    /// model reads it inside the refusal and the next pin is one it was
    /// told of.
    fn on_refused(&mut self, tool: String, now: Instant) {
        self.record.observe_enforcement();
        let pinned = self.pinned.clone();
        let current = self
            .refusal_current
            .take()
            .filter(|c| pinned.as_ref().is_none_or(|p| p.token() != c.token()));
        // The surface's claim decides the wording only (known when the
        // listing's definitions were read: a kept listing, or `tools`).
        let declared_read_only = self
            .discovery
            .as_ref()
            .and_then(|d| d.claims.get(&tool))
            .and_then(|c| c.read_only)
            == Some(true);
        let mut refusal = SurfaceChangedUnderYou::new(tool, pinned.clone());
        if declared_read_only {
            refusal = refusal.with_declared_read_only();
        }
        let is_call = matches!(self.kind, Kind::Call { .. });
        match (is_call, self.feed.clone(), pinned) {
            (true, Some(feed), Some(pinned)) => {
                self.step = Step::Recover;
                self.recovering = Some((refusal, current.clone()));
                let mut params = Map::new();
                params.insert("name".to_owned(), Value::String(feed.clone()));
                params.insert("arguments".to_owned(), json!({ "since": pinned.token() }));
                // Pinned too: to the current revision when the refusal
                // named it, else to the refused one.
                let pin = current.as_ref().unwrap_or(&pinned);
                params.insert("_meta".to_owned(), json!({ "revision": pin.token() }));
                self.acting_tool = Some(feed);
                self.request("tools/call", Some(&Value::Object(params)), Acts::No, now);
            }
            (true, None, _) => self.refused(refusal, current, WhatChanged::NoFeed, None),
            _ => self.refused(refusal, current, WhatChanged::NotAsked, None),
        }
    }

    /// The change feed's answer at attach: its revision becomes the pin
    /// (when the record still has none); any failure but a terminal one
    /// leaves the attachment unpinned and the attach succeeds.
    fn on_learnt(&mut self, r: Result<Reply, Error>) {
        let Some(discovery) = self.learnt.take() else {
            return;
        };
        let feed = self.acting_tool.clone().unwrap_or_default();
        let answer = r
            .and_then(Reply::into_value)
            .and_then(|reply| self.rpc_result(reply, &feed));
        match answer {
            Err(e) if e.is_terminal() => {
                self.fail(e);
                return;
            }
            Ok(result) if result.get("isError") != Some(&Value::Bool(true)) => {
                let answer = SurfaceChanges::read_from(&result, self.record.change_feed());
                if answer.attributes() {
                    self.record.observe_attribution();
                }
                if let Some(rev) = answer
                    .revision()
                    .and_then(|r| SurfaceRevision::observed(r.token(), feed.as_str()).ok())
                    && self.record.revision().is_none()
                {
                    self.record.record_revision(rev);
                }
            }
            _ => {}
        }
        self.succeed(Produced::Tools(discovery));
    }

    /// A stopping manager's instant, once set: no exchange waits past it.
    fn apply_halt(&mut self) {
        let Some(at) = self.halt.as_ref().and_then(Halt::at) else {
            return;
        };
        self.io.cap = Some(self.io.cap.map_or(at, |cap| cap.min(at)));
        if let Some(x) = self.exchange.as_mut() {
            x.cap_deadline(at);
        }
        if let Some(x) = self.aside.as_mut() {
            x.cap_deadline(at);
        }
    }

    /// The change feed's answer (or failure) while completing a refusal.
    fn on_recovered(&mut self, r: Result<Reply, Error>) {
        let Some((refusal, current)) = self.recovering.take() else {
            return;
        };
        let feed = self.acting_tool.clone().unwrap_or_default();
        let answer = r
            .and_then(Reply::into_value)
            .and_then(|reply| self.rpc_result(reply, &feed));
        let answer = match answer {
            Ok(result) if result.get("isError") != Some(&Value::Bool(true)) => {
                SurfaceChanges::read_from(&result, self.record.change_feed())
            }
            Err(e) if e.is_terminal() => {
                self.fail(e);
                return;
            }
            // The feed refused its own pin: it may still have named the
            // current revision.
            Err(Error::RevisionRejected) => {
                let current = current.or_else(|| self.refusal_current.take());
                self.refused(refusal, current, WhatChanged::FeedFailed, None);
                return;
            }
            _ => {
                self.refused(refusal, current, WhatChanged::FeedFailed, None);
                return;
            }
        };
        if !answer.answered() {
            self.refused(refusal, current, WhatChanged::FeedFailed, None);
            return;
        }
        if answer.attributes() {
            self.record.observe_attribution();
        }
        let listed_revision = answer
            .revision()
            .and_then(|r| SurfaceRevision::observed(r.token(), feed.as_str()).ok());
        match self.list_changes(&feed, &answer) {
            Ok(listed) => self.refused(
                refusal,
                current,
                WhatChanged::Listed(listed),
                listed_revision,
            ),
            Err(_) => self.refused(refusal, current, WhatChanged::FeedFailed, None),
        }
    }

    /// Ends a refusal with what was learnt: the next pin (the feed's
    /// revision, else the one the refusal named, else the refused pin
    /// kept), and the repeat guard when the pin moved without the model
    /// being told what changed.
    fn refused(
        &mut self,
        mut refusal: SurfaceChangedUnderYou,
        current: Option<SurfaceRevision>,
        changes: WhatChanged,
        listed_revision: Option<SurfaceRevision>,
    ) {
        let next = listed_revision.or(current).filter(|next| {
            refusal
                .pinned()
                .is_none_or(|pinned| pinned.token() != next.token())
        });
        // After any refusal the very same call is not sent again until
        // another call has been answered: with the changes in front of it
        // or not, an identical repeat is the blind one (seed 000).
        let fingerprint = match &self.kind {
            Kind::Call { tool, arguments } => Some(call_fingerprint(tool, arguments)),
            _ => None,
        };
        if let Some(next) = next {
            // The next change-feed question still asks since the refused
            // pin (what changed since the agent's last look), until a call
            // is answered.
            self.record.keep_feed_since(refusal.pinned().cloned());
            self.record.record_revision(next.clone());
            refusal = refusal.with_current(next);
        }
        if let Some(fingerprint) = fingerprint {
            refusal = refusal.with_repeat_guard();
            self.record.guard_refused_call(fingerprint);
        }
        self.fail(Error::SurfaceChangedUnderYou(refusal.with_changes(changes)));
    }

    /// The change feed's rows as a refusal shows them: one line each, in
    /// one frame, bounded (at most [`REFUSAL_ROWS`] rows and
    /// [`REFUSAL_ROW_BYTES`] bytes of text, within the result budget); the
    /// rows left out are counted, never cut.
    fn list_changes(
        &mut self,
        tool: &str,
        answer: &SurfaceChanges,
    ) -> Result<ListedChanges, Error> {
        let changes = answer.changes();
        let budget = match self.guard.max_bytes() {
            0 => REFUSAL_ROW_BYTES,
            max => REFUSAL_ROW_BYTES.min(max.saturating_sub(REFUSAL_RESERVE)),
        };
        let mut text = String::new();
        let mut shown = 0;
        for change in changes.iter().take(REFUSAL_ROWS) {
            let line = change_line(change);
            let needed = line.len() + usize::from(!text.is_empty());
            if text.len() + needed > budget {
                break;
            }
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&line);
            shown += 1;
        }
        let framed = if shown == 0 {
            None
        } else {
            Some(self.frame_within(tool, &text, REFUSAL_RESERVE)?)
        };
        Ok(ListedChanges {
            framed,
            total: changes.len(),
            shown,
            not_by_agents: changes.iter().filter(|c| c.deserves_deference()).count(),
            complete: answer.complete(),
        })
    }

    fn frame(&mut self, tool: &str, text: &str) -> Result<String, Error> {
        self.frame_within(tool, text, 0)
    }

    /// Frames `text` so that the frame and `reserve` more bytes (Human+'s
    /// sentence around it) fit the budget; the secrets this attachment
    /// holds are taken out of it first, by exact value.
    fn frame_within(&mut self, tool: &str, text: &str, reserve: usize) -> Result<String, Error> {
        let surface = self.record.invitation().surface_id().to_owned();
        let text = self.secrets().redact(text).into_owned();
        let guard = match self.guard.max_bytes() {
            0 => self.guard,
            budget => ResultGuard::new(budget.saturating_sub(reserve).max(1)),
        };
        guard.frame(&surface, tool, &text, self.entropy.as_mut())
    }

    /// The secrets this attachment holds: the relay token and the egress
    /// proxy's credentials.
    fn secrets(&self) -> Secrets {
        Secrets::of(
            self.record.invitation(),
            self.io
                .endpoint
                .proxy()
                .and_then(|p| p.credentials.as_ref()),
        )
    }

    /// Interprets a correlated JSON-RPC reply.
    fn rpc_result(&mut self, reply: Value, context: &str) -> Result<Value, Error> {
        let Value::Object(mut reply) = reply else {
            return Err(Error::Protocol(ProtocolError::Uncorrelated));
        };
        if let Some(error) = reply.remove("error").filter(|e| !e.is_null()) {
            if rejects_revision(&error) {
                self.refusal_current = refusal_current(&error, context);
                return Err(Error::RevisionRejected);
            }
            // JSON-RPC's code is an integer; anything else is dropped.
            let code = error.get("code").and_then(Value::as_i64);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .filter(|m| !m.trim().is_empty())
                .map(str::to_owned);
            // Human+'s sentence around the message counts in the budget.
            let reserve = SurfaceError {
                code,
                framed_message: Some(String::new()),
            }
            .to_string()
            .len();
            let framed_message = message.map(|m| {
                self.frame_within(context, &m, reserve).unwrap_or_else(|_| {
                    "[the surface's error message exceeds the byte budget and was withheld]"
                        .to_owned()
                })
            });
            return Err(Error::SurfaceError(SurfaceError {
                code,
                framed_message,
            }));
        }
        match reply.remove("result") {
            Some(result @ Value::Object(_)) => Ok(result),
            _ => Err(Error::Protocol(ProtocolError::MalformedResult)),
        }
    }
}

/// The most change-feed rows a stale refusal shows.
pub const REFUSAL_ROWS: usize = 50;

/// The most bytes of change-feed rows a stale refusal shows (before its
/// frame), further bounded by the result budget.
pub const REFUSAL_ROW_BYTES: usize = 8 * 1024;

/// What a stale refusal's own sentences may take of the result budget.
const REFUSAL_RESERVE: usize = 4 * 1024;

/// One change-feed row as a refusal lists it: `C3: updated by a person
/// (label)`. The handle and the label are the surface's words; the line
/// goes inside a frame.
fn change_line(change: &SurfaceChange) -> String {
    let by = match change.actor() {
        ChangeActor::Human => "a person",
        ChangeActor::Agent => "an agent",
        ChangeActor::Other => "another participant",
        ChangeActor::Unknown => "someone not named",
    };
    let mut line = format!("{}: {} by {by}", change.handle(), change.kind());
    if !change.label().is_empty() {
        line.push_str(" (");
        line.push_str(change.label());
        line.push(')');
    }
    line
}

/// The text of a `tools/call` result: the `text` of every content part of
/// type `text`, joined with newlines; when there is none but
/// `structuredContent` is present, that JSON, compact.
///
/// ```
/// use human_plus_core::result_text;
/// use serde_json::json;
///
/// assert_eq!(result_text(&json!({"content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]})), "a\nb");
/// assert_eq!(result_text(&json!({"content": [], "structuredContent": {"x": 1}})), r#"{"x":1}"#);
/// assert_eq!(result_text(&json!({})), "");
/// ```
#[must_use]
pub fn result_text(result: &Value) -> String {
    let parts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null())
    {
        return serde_json::to_string(structured).unwrap_or_default();
    }
    parts.join("\n")
}
