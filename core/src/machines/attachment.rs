//! The attachment record: one agent's membership of one surface session.

use serde::{Deserialize, Serialize};

use crate::admission::listing::ListingVerdict;
use crate::answers::changes::ChangeFeed;
use crate::entropy::{Entropy, random_id};
use crate::error::Error;
use crate::invite::invitation::{Participant, SurfaceInvitation};
use crate::invite::owner::OwnerKey;
use crate::values::attachment_state::AttachmentState;
use crate::values::revision::{ConflictDetection, SurfaceRevision};

/// The prefix of the client ids this library mints.
pub const CLIENT_ID_PREFIX: &str = "rs_";

/// One agent's attachment to one surface session.
///
/// Every change to the record bumps its generation, revision writes
/// included, so two workers that each loaded generation `n` cannot both
/// store their version: the second compare-and-set fails instead of
/// silently losing the first worker's revision. The fields are private for
/// that reason; the `observe_*` and `record_*` methods are the only way to
/// change them, and each returns whether anything changed.
///
/// Its `Debug` shows everything but the relay token.
///
/// ```
/// use human_plus_core::*;
///
/// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "sheet:one", "Demo")?;
/// let mut a = SurfaceAttachment::mint(
///     OwnerKey::of("session:one")?, inv, Participant::new("agent:one", "One", "#000"), &mut SeededEntropy::new(1),
/// );
/// assert_eq!(a.generation(), 0);
/// assert!(a.record_revision(SurfaceRevision::observed("r1", "sheet_read").unwrap()));
/// assert_eq!(a.generation(), 1);
/// assert_eq!(a.conflict_detection(), ConflictDetection::Minted);
/// assert!(!format!("{a:?}").contains("0123456789abcdef"));
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "AttachmentWire")]
pub struct SurfaceAttachment {
    id: String,
    owner: OwnerKey,
    invitation: SurfaceInvitation,
    participant: Participant,
    client_id: String,
    generation: u64,
    state: AttachmentState,
    revision: Option<SurfaceRevision>,
    conflict_detection: ConflictDetection,
    change_feed: ChangeFeed,
    /// The verdict on the last listing, keyed by its bytes and the policy.
    /// Absent from records stored before it existed, and not written when
    /// there is none, so old and new records read each other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    listing: Option<ListingVerdict>,
    /// The fingerprints of the calls the surface refused as stale since a
    /// call was last answered (newest last, at most
    /// [`MAX_REFUSED_CALLS`]): none of them is sent again until another
    /// call has been answered. Absent from older records and not written
    /// when there is none; an older record's single `refused_call` reads
    /// as a list of one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    refused_calls: Vec<String>,
    /// After a stale refusal moved the pin: the refused pin, which the next
    /// change-feed question asks `since` (until a call is answered).
    /// Absent from older records and not written when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    feed_since: Option<SurfaceRevision>,
}

#[derive(Deserialize)]
struct AttachmentWire {
    id: String,
    owner: OwnerKey,
    invitation: SurfaceInvitation,
    participant: Participant,
    client_id: String,
    generation: u64,
    state: AttachmentState,
    #[serde(default)]
    revision: Option<SurfaceRevision>,
    #[serde(default)]
    conflict_detection: ConflictDetection,
    #[serde(default)]
    change_feed: ChangeFeed,
    #[serde(default)]
    listing: Option<ListingVerdict>,
    #[serde(default)]
    refused_call: Option<String>,
    #[serde(default)]
    refused_calls: Vec<String>,
    #[serde(default)]
    feed_since: Option<SurfaceRevision>,
}

impl TryFrom<AttachmentWire> for SurfaceAttachment {
    type Error = Error;

    fn try_from(w: AttachmentWire) -> Result<Self, Error> {
        let mut a =
            SurfaceAttachment::new(w.id, w.owner, w.invitation, w.participant, w.client_id)?;
        a.generation = w.generation;
        a.state = w.state;
        a.revision = w.revision;
        a.conflict_detection = w.conflict_detection;
        a.change_feed = w.change_feed;
        a.listing = w.listing;
        a.refused_calls = w.refused_calls;
        if let Some(old) = w.refused_call
            && !a.refused_calls.contains(&old)
        {
            a.refused_calls.insert(0, old);
        }
        let excess = a.refused_calls.len().saturating_sub(MAX_REFUSED_CALLS);
        a.refused_calls.drain(..excess);
        a.feed_since = w.feed_since;
        Ok(a)
    }
}

impl SurfaceAttachment {
    /// A new, attached record at generation 0.
    ///
    /// # Errors
    /// [`Error::InvalidAttachment`] when the id or the client id is empty,
    /// longer than 128 bytes, or not made of ASCII letters, digits, `_`,
    /// `-`, `.` and `:`.
    pub fn new(
        id: impl Into<String>,
        owner: OwnerKey,
        invitation: SurfaceInvitation,
        participant: Participant,
        client_id: impl Into<String>,
    ) -> Result<Self, Error> {
        let id = id.into();
        let client_id = client_id.into();
        if !is_token_like(&id) || !is_token_like(&client_id) {
            return Err(Error::InvalidAttachment);
        }
        Ok(SurfaceAttachment {
            id,
            owner,
            invitation,
            participant,
            client_id,
            generation: 0,
            state: AttachmentState::Attached,
            revision: None,
            conflict_detection: ConflictDetection::NotObserved,
            change_feed: ChangeFeed::NotObserved,
            listing: None,
            refused_calls: Vec::new(),
            feed_since: None,
        })
    }

    /// A new record with ids drawn from `entropy`: `surface_` + 24 hex for
    /// the id, [`CLIENT_ID_PREFIX`] + 16 hex for the client id.
    #[must_use]
    pub fn mint(
        owner: OwnerKey,
        invitation: SurfaceInvitation,
        participant: Participant,
        entropy: &mut dyn Entropy,
    ) -> Self {
        SurfaceAttachment {
            id: random_id(entropy, "surface_", 12),
            owner,
            invitation,
            participant,
            client_id: random_id(entropy, CLIENT_ID_PREFIX, 8),
            generation: 0,
            state: AttachmentState::Attached,
            revision: None,
            conflict_detection: ConflictDetection::NotObserved,
            change_feed: ChangeFeed::NotObserved,
            listing: None,
            refused_calls: Vec::new(),
            feed_since: None,
        }
    }

    /// A new record whose id is derived from `owner` and a key the caller
    /// chooses (a conversation id, a job's thread): [`keyed_attachment_id`].
    /// Attaching again under the same owner and key finds the same record,
    /// so a service needs no map of its own from its conversations to
    /// attachments. The client id is drawn from `entropy`, as
    /// [`SurfaceAttachment::mint`] draws it.
    ///
    /// # Errors
    /// [`Error::InvalidAttachment`] for a key that is empty or longer than
    /// 256 bytes.
    pub fn mint_keyed(
        owner: OwnerKey,
        key: &str,
        invitation: SurfaceInvitation,
        participant: Participant,
        entropy: &mut dyn Entropy,
    ) -> Result<Self, Error> {
        let id = keyed_attachment_id(&owner, key)?;
        let mut record = SurfaceAttachment::mint(owner, invitation, participant, entropy);
        record.id = id;
        Ok(record)
    }

    /// Takes the place of `previous`, a record stored under the same id
    /// (an ended attachment, or one to another session, replaced by a new
    /// one under the same key): the generation continues from it, so a
    /// worker still holding `previous` can never write over this record
    /// (its compare-and-set expects a generation this record never had).
    /// Nothing else is taken over; see [`SurfaceAttachment::carry_over`]
    /// for the same session.
    pub fn succeed(&mut self, previous: &SurfaceAttachment) {
        self.generation = previous.generation.saturating_add(1);
    }

    /// What a service may show or send on about this attachment, without
    /// the relay token: see [`AttachmentSummary`].
    #[must_use]
    pub fn summary(&self) -> AttachmentSummary {
        AttachmentSummary {
            id: self.id.clone(),
            state: self.state,
            relay_url: self.invitation.relay_url().to_owned(),
            session_id: self.invitation.session_id().to_owned(),
            surface_id: self.invitation.surface_id().to_owned(),
            participant_id: self.participant.id.clone(),
            revision: self.revision.as_ref().map(|r| r.token().to_owned()),
            conflict_detection: self.conflict_detection,
            change_feed: self.change_feed,
        }
    }

    /// The attachment id. It locates state; it is not a credential.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The owner that attached.
    #[must_use]
    pub fn owner(&self) -> &OwnerKey {
        &self.owner
    }

    /// The invitation.
    #[must_use]
    pub fn invitation(&self) -> &SurfaceInvitation {
        &self.invitation
    }

    /// The participant the agent joined as.
    #[must_use]
    pub fn participant(&self) -> &Participant {
        &self.participant
    }

    /// The client id sent as `client=` on every relay request.
    #[must_use]
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The generation, bumped by every change.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The lifecycle state.
    #[must_use]
    pub fn state(&self) -> AttachmentState {
        self.state
    }

    /// The revision every call is pinned to, if one is held.
    #[must_use]
    pub fn revision(&self) -> Option<&SurfaceRevision> {
        self.revision.as_ref()
    }

    /// What has been observed of the surface's conflict detection.
    #[must_use]
    pub fn conflict_detection(&self) -> ConflictDetection {
        self.conflict_detection
    }

    /// What has been observed of the surface's change feed.
    #[must_use]
    pub fn change_feed(&self) -> ChangeFeed {
        self.change_feed
    }

    /// Whether the attachment is `attached`.
    #[must_use]
    pub fn is_attached(&self) -> bool {
        self.state == AttachmentState::Attached
    }

    /// Checks that `owner` owns this attachment (constant time).
    ///
    /// # Errors
    /// [`Error::AttachmentUnauthorized`] when it does not.
    pub fn check_owner(&self, owner: &OwnerKey) -> Result<(), Error> {
        self.owner.check(owner)
    }

    /// Checks the owner and that the attachment is `attached`.
    ///
    /// # Errors
    /// [`Error::AttachmentUnauthorized`] for another owner; for an ended
    /// attachment, the relay's answer that ended it
    /// ([`Error::SurfaceUnavailable`] after a 410,
    /// [`Error::AttachmentUnauthorized`] after a 401), so every worker
    /// answers alike; [`Error::NotAttached`] once detached.
    pub fn require(&self, owner: &OwnerKey) -> Result<(), Error> {
        self.check_owner(owner)?;
        match self.state {
            AttachmentState::Attached => Ok(()),
            // The relay's own answer, whichever worker met it first: every
            // replica tells the same story of one ended session.
            AttachmentState::SurfaceUnavailable => Err(Error::SurfaceUnavailable),
            AttachmentState::AttachmentUnauthorized => Err(Error::AttachmentUnauthorized(
                crate::error::Unauthorized::Relay,
            )),
            AttachmentState::Detached => Err(Error::NotAttached(self.state)),
        }
    }

    fn bump(&mut self) -> bool {
        self.generation = self.generation.saturating_add(1);
        true
    }

    /// The verdict kept on the last listing admitted for this attachment
    /// (see [`ListingVerdict`]).
    #[must_use]
    pub fn listing_verdict(&self) -> Option<&ListingVerdict> {
        self.listing.as_ref()
    }

    /// Keeps `verdict` as the one on the last listing; a change bumps the
    /// generation.
    pub fn keep_listing_verdict(&mut self, verdict: ListingVerdict) -> bool {
        if self.listing.as_ref() == Some(&verdict) {
            return false;
        }
        self.listing = Some(verdict);
        self.bump()
    }

    /// Moves to `state`.
    pub fn transition(&mut self, state: AttachmentState) -> bool {
        if self.state == state {
            return false;
        }
        self.state = state;
        self.bump()
    }

    /// Stores a revision the surface minted; detection becomes `Minted`
    /// unless it is already `Enforced`.
    pub fn record_revision(&mut self, revision: SurfaceRevision) -> bool {
        let detection = if self.conflict_detection == ConflictDetection::Enforced {
            ConflictDetection::Enforced
        } else {
            ConflictDetection::Minted
        };
        if self.revision.as_ref() == Some(&revision) && self.conflict_detection == detection {
            return false;
        }
        self.revision = Some(revision);
        self.conflict_detection = detection;
        self.bump()
    }

    /// The surface refused a stale pin: detection is `Enforced` for good.
    ///
    /// The revision is **kept**: once an attachment has seen a revision, no
    /// call leaves it unpinned. (The PHP reference drops it "so the agent's
    /// next read is sent unpinned"; since the manager cannot tell the next
    /// read from the next write, that sends the next write unpinned, and a
    /// model's blind retry overwrites a person's later edit. Seed 000: "It
    /// does not know a read from a write, so it pins every call".) The
    /// operation that met the refusal moves the pin with
    /// [`SurfaceAttachment::record_revision`] when it learns the surface's
    /// current revision.
    pub fn observe_enforcement(&mut self) -> bool {
        if self.conflict_detection == ConflictDetection::Enforced {
            return false;
        }
        self.conflict_detection = ConflictDetection::Enforced;
        self.bump()
    }

    /// The fingerprints of the calls not to be sent again until another
    /// call has been answered (see [`call_fingerprint`]), oldest first.
    #[must_use]
    pub fn refused_calls(&self) -> &[String] {
        &self.refused_calls
    }

    /// Whether the call with this fingerprint was refused since a call was
    /// last answered (and so is not sent now).
    #[must_use]
    pub fn is_refused_call(&self, fingerprint: &str) -> bool {
        self.refused_calls.iter().any(|f| f == fingerprint)
    }

    /// Adds `fingerprint` to the calls not to send again until another call
    /// has been answered (the oldest goes past [`MAX_REFUSED_CALLS`]); a
    /// change bumps the generation.
    pub fn guard_refused_call(&mut self, fingerprint: String) -> bool {
        if self.is_refused_call(&fingerprint) {
            return false;
        }
        if self.refused_calls.len() >= MAX_REFUSED_CALLS {
            self.refused_calls.remove(0);
        }
        self.refused_calls.push(fingerprint);
        self.bump()
    }

    /// A call (or a feed question) was answered: every guarded call may be
    /// sent again. A change bumps the generation.
    pub fn lift_refused_calls(&mut self) -> bool {
        if self.refused_calls.is_empty() {
            return false;
        }
        self.refused_calls.clear();
        self.bump()
    }

    /// The revision the next change-feed question asks `since`: the
    /// refused pin while a stale refusal has moved the pin and no call has
    /// been answered since, else the pin itself. `None` only before any
    /// revision was seen.
    #[must_use]
    pub fn feed_since(&self) -> Option<&SurfaceRevision> {
        self.feed_since.as_ref().or(self.revision.as_ref())
    }

    /// Keeps `since` as the revision the next change-feed question asks
    /// `since` (`None`: the pin again); a change bumps the generation.
    pub fn keep_feed_since(&mut self, since: Option<SurfaceRevision>) -> bool {
        if self.feed_since == since {
            return false;
        }
        self.feed_since = since;
        self.bump()
    }

    /// Takes over what `previous` learnt of the same surface session: its
    /// revision (the pin), what was observed of conflict detection and of
    /// the change feed, and a guarded refused call. For a new attachment to
    /// a session another attachment already worked on (a bridge joining the
    /// same session again, a service re-attaching a conversation): its
    /// first call is then pinned, as the previous attachment's next call
    /// would have been. Nothing is taken from an attachment to another
    /// relay, session or surface. Returns whether anything changed.
    ///
    /// ```
    /// use human_plus_core::*;
    ///
    /// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "sheet:one", "Demo")?;
    /// let mint = |seed| SurfaceAttachment::mint(
    ///     OwnerKey::of("o").unwrap(), inv.clone(), Participant::new("a", "A", "#000"), &mut SeededEntropy::new(seed),
    /// );
    /// let mut old = mint(1);
    /// old.record_revision(SurfaceRevision::observed("r4", "sheet_read").unwrap());
    /// let mut new = mint(2);
    /// assert!(new.carry_over(&old));
    /// assert_eq!(new.revision().map(SurfaceRevision::token), Some("r4"));
    ///
    /// let elsewhere = SurfaceInvitation::new("https://relay.example", "demo_002", "0123456789abcdef", "sheet:one", "Demo")?;
    /// let mut other = SurfaceAttachment::mint(OwnerKey::of("o")?, elsewhere, Participant::new("a", "A", "#000"), &mut SeededEntropy::new(3));
    /// assert!(!other.carry_over(&old));
    /// assert_eq!(other.revision(), None);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn carry_over(&mut self, previous: &SurfaceAttachment) -> bool {
        let (a, b) = (&self.invitation, &previous.invitation);
        if a.relay_url() != b.relay_url()
            || a.session_id() != b.session_id()
            || a.surface_id() != b.surface_id()
        {
            return false;
        }
        let before = (
            self.revision.clone(),
            self.conflict_detection,
            self.change_feed,
            self.refused_calls.clone(),
            self.feed_since.clone(),
        );
        if previous.revision.is_some() {
            self.revision.clone_from(&previous.revision);
        }
        if previous.conflict_detection != ConflictDetection::NotObserved {
            self.conflict_detection = previous.conflict_detection;
        }
        if previous.change_feed != ChangeFeed::NotObserved {
            self.change_feed = previous.change_feed;
        }
        if !previous.refused_calls.is_empty() {
            self.refused_calls.clone_from(&previous.refused_calls);
        }
        if previous.feed_since.is_some() {
            self.feed_since.clone_from(&previous.feed_since);
        }
        let after = (
            self.revision.clone(),
            self.conflict_detection,
            self.change_feed,
            self.refused_calls.clone(),
            self.feed_since.clone(),
        );
        before != after && self.bump()
    }

    /// A result carried no revision: `NotObserved` becomes `Unavailable`;
    /// any other state (and the held revision) is kept.
    pub fn observe_no_revision(&mut self) -> bool {
        if self.conflict_detection != ConflictDetection::NotObserved {
            return false;
        }
        self.conflict_detection = ConflictDetection::Unavailable;
        self.bump()
    }

    /// The tool list did (`offered`) or did not offer a feed tool. An
    /// `Attributed` feed is never downgraded.
    pub fn observe_change_feed(&mut self, offered: bool) -> bool {
        if self.change_feed == ChangeFeed::Attributed {
            return false;
        }
        let next = if offered {
            ChangeFeed::Offered
        } else {
            ChangeFeed::Unavailable
        };
        if self.change_feed == next {
            return false;
        }
        self.change_feed = next;
        self.bump()
    }

    /// The feed named an actor other than this agent: `Attributed`, for
    /// good.
    pub fn observe_attribution(&mut self) -> bool {
        if self.change_feed == ChangeFeed::Attributed {
            return false;
        }
        self.change_feed = ChangeFeed::Attributed;
        self.bump()
    }
}

/// The most refused calls an attachment remembers at once
/// ([`SurfaceAttachment::guard_refused_call`]): parallel decisions of one
/// turn, or a queue's jobs, refused before any call was answered.
pub const MAX_REFUSED_CALLS: usize = 16;

/// The most bytes of a key [`keyed_attachment_id`] takes.
pub const MAX_ATTACHMENT_KEY_BYTES: usize = 256;

/// The attachment id of `owner`'s attachment under `key`: `surface_` and
/// 24 hex of SHA-256 over a version tag, the owner's key and `key` (each
/// length-prefixed). The same owner and key give the same id; another
/// owner's key, or another key, another id. The id locates state and is
/// no credential: every operation still checks the owner.
///
/// ```
/// use human_plus_core::{OwnerKey, keyed_attachment_id};
///
/// let owner = OwnerKey::of("tenant:7")?;
/// let id = keyed_attachment_id(&owner, "conversation-42")?;
/// assert!(id.starts_with("surface_") && id.len() == 32);
/// assert_eq!(id, keyed_attachment_id(&owner, "conversation-42")?);
/// assert_ne!(id, keyed_attachment_id(&OwnerKey::of("tenant:8")?, "conversation-42")?);
/// assert!(keyed_attachment_id(&owner, "").is_err());
/// # Ok::<(), human_plus_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidAttachment`] for an empty key or one over
/// [`MAX_ATTACHMENT_KEY_BYTES`].
pub fn keyed_attachment_id(owner: &OwnerKey, key: &str) -> Result<String, Error> {
    use sha2::{Digest, Sha256};
    if key.is_empty() || key.len() > MAX_ATTACHMENT_KEY_BYTES {
        return Err(Error::InvalidAttachment);
    }
    let mut hash = Sha256::new();
    hash.update(b"human-plus attachment key v1\0");
    for part in [owner.as_str(), key] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    Ok(format!("surface_{}", crate::entropy::hex(&digest[..12])))
}

/// What a service may show, log or send on about an attachment: its id,
/// state, where it is attached and what has been observed there — never
/// the relay token (a [`SurfaceAttachment`]'s own JSON is the store's
/// record, token included: never send it on).
///
/// ```
/// use human_plus_core::*;
///
/// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "sheet:one", "Demo")?;
/// let a = SurfaceAttachment::mint(OwnerKey::of("o")?, inv, Participant::new("agent-1", "A", "#000"), &mut SeededEntropy::new(1));
/// let json = serde_json::to_value(a.summary()).unwrap();
/// assert_eq!(json["session_id"], "demo_001");
/// assert_eq!(json["state"], "attached");
/// assert_eq!(json["revision"], serde_json::Value::Null);
/// assert!(!json.to_string().contains("0123456789abcdef"));
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentSummary {
    /// The attachment id.
    pub id: String,
    /// Its lifecycle state.
    pub state: AttachmentState,
    /// The relay's base URL (it holds no token).
    pub relay_url: String,
    /// The relay session.
    pub session_id: String,
    /// The surface id (provenance of framed results).
    pub surface_id: String,
    /// The participant id the agent joined as.
    pub participant_id: String,
    /// The revision the next call is pinned to, if any.
    pub revision: Option<String>,
    /// What has been observed of the surface's conflict detection.
    pub conflict_detection: ConflictDetection,
    /// What has been observed of the surface's change feed.
    pub change_feed: ChangeFeed,
}

/// The fingerprint of a call: `sha256:` and 32 hex of SHA-256 over the
/// canonical JSON (RFC 8785, as tool digests are made) of
/// `{"arguments": …, "name": …}`. Two calls have the same fingerprint
/// exactly when they name the same tool with the same arguments, whatever
/// the order of their members.
///
/// ```
/// use human_plus_core::call_fingerprint;
/// use serde_json::json;
///
/// let a = call_fingerprint("sheet_set_cell", &json!({"address": "C3", "value": "x"}));
/// let b = call_fingerprint("sheet_set_cell", &json!({"value": "x", "address": "C3"}));
/// assert_eq!(a, b);
/// assert!(a.starts_with("sha256:") && a.len() == 39);
/// assert_ne!(a, call_fingerprint("sheet_set_cell", &json!({"address": "C3", "value": "y"})));
/// ```
#[must_use]
pub fn call_fingerprint(tool: &str, arguments: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    let call = serde_json::json!({"name": tool, "arguments": arguments});
    let canonical = crate::tools::canonical::canonical_json(&call);
    let hash = Sha256::digest(canonical.as_bytes());
    let mut out = String::with_capacity(39);
    out.push_str("sha256:");
    for b in hash.iter().take(16) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn is_token_like(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entropy::SeededEntropy;

    const TOKEN: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn record() -> SurfaceAttachment {
        let inv = SurfaceInvitation::new(
            "https://relay.example.com",
            "demo_001",
            TOKEN,
            "sheet:one",
            "Demo",
        )
        .unwrap();
        SurfaceAttachment::new(
            "surface_1",
            OwnerKey::of("session:one").unwrap(),
            inv,
            Participant::new("agent:one", "One", "#000000"),
            "rs_worker_1",
        )
        .unwrap()
    }

    #[test]
    fn every_change_bumps_the_generation_and_no_change_does_not() {
        let mut a = record();
        let r1 = SurfaceRevision::observed("r1", "read").unwrap();
        assert!(a.record_revision(r1.clone()));
        assert_eq!(a.generation(), 1);
        assert!(!a.record_revision(r1));
        assert_eq!(a.generation(), 1);
        assert!(a.observe_enforcement());
        assert_eq!(a.generation(), 2);
        assert_eq!(
            a.revision().map(SurfaceRevision::token),
            Some("r1"),
            "a refusal never leaves the attachment unpinned"
        );
        assert!(!a.observe_enforcement());
        assert!(a.record_revision(SurfaceRevision::observed("r2", "read").unwrap()));
        assert_eq!(a.conflict_detection(), ConflictDetection::Enforced);
        assert!(!a.observe_no_revision());
        assert!(a.observe_change_feed(true));
        assert!(!a.observe_change_feed(true));
        assert!(a.observe_attribution());
        assert!(!a.observe_change_feed(false));
        assert_eq!(a.change_feed(), ChangeFeed::Attributed);
        assert!(a.transition(AttachmentState::Detached));
        assert!(!a.transition(AttachmentState::Detached));
        assert_eq!(a.generation(), 6);
    }

    #[test]
    fn the_refused_call_guard_round_trips_and_older_records_read() {
        let mut a = record();
        let fp = call_fingerprint("sheet_set_cell", &serde_json::json!({"address": "C3"}));
        assert!(a.guard_refused_call(fp.clone()));
        assert!(!a.guard_refused_call(fp.clone()));
        let other = call_fingerprint("sheet_set_cell", &serde_json::json!({"address": "D4"}));
        assert!(a.guard_refused_call(other.clone()));
        let json = serde_json::to_string(&a).unwrap();
        let back: SurfaceAttachment = serde_json::from_str(&json).unwrap();
        assert_eq!(back.refused_calls(), &[fp.clone(), other.clone()]);
        assert!(back.is_refused_call(&other));
        // A record written before the list: one `refused_call`.
        let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
        value.as_object_mut().unwrap().remove("refused_calls");
        value["refused_call"] = serde_json::json!(fp);
        let old: SurfaceAttachment = serde_json::from_value(value).unwrap();
        assert_eq!(old.refused_calls(), std::slice::from_ref(&fp));
        assert!(a.lift_refused_calls());
        assert!(!a.lift_refused_calls());
        let json = serde_json::to_string(&a).unwrap();
        assert!(!json.contains("refused_call"), "not written when none");
        let back: SurfaceAttachment = serde_json::from_str(&json).unwrap();
        assert!(back.refused_calls().is_empty());
        // Bounded: the oldest goes.
        for n in 0..(MAX_REFUSED_CALLS + 3) {
            a.guard_refused_call(call_fingerprint("t", &serde_json::json!({"n": n})));
        }
        assert_eq!(a.refused_calls().len(), MAX_REFUSED_CALLS);
        assert!(!a.is_refused_call(&call_fingerprint("t", &serde_json::json!({"n": 0}))));
    }

    #[test]
    fn carry_over_takes_the_pin_only_from_the_same_session() {
        let mut old = record();
        old.record_revision(SurfaceRevision::observed("r5", "read").unwrap());
        old.observe_enforcement();
        old.observe_change_feed(true);
        let mut new = record();
        assert!(new.carry_over(&old));
        assert_eq!(new.revision().map(SurfaceRevision::token), Some("r5"));
        assert_eq!(new.conflict_detection(), ConflictDetection::Enforced);
        assert_eq!(new.change_feed(), ChangeFeed::Offered);
        assert!(!new.carry_over(&old), "nothing more to take");
        // A later revision of the new attachment is not rolled back by an
        // older record with none.
        let fresh = record();
        assert!(!new.carry_over(&fresh));
        assert_eq!(new.revision().map(SurfaceRevision::token), Some("r5"));
    }

    #[test]
    fn unavailable_only_from_not_observed_and_minted_upgrades_it() {
        let mut a = record();
        assert!(a.observe_no_revision());
        assert_eq!(a.conflict_detection(), ConflictDetection::Unavailable);
        assert!(!a.observe_no_revision());
        a.record_revision(SurfaceRevision::observed("r1", "read").unwrap());
        assert_eq!(a.conflict_detection(), ConflictDetection::Minted);
        assert!(!a.observe_no_revision());
        assert_eq!(a.revision().map(SurfaceRevision::token), Some("r1"));
    }

    #[test]
    fn serde_round_trip_and_debug_redaction() {
        let mut a = record();
        a.record_revision(SurfaceRevision::observed("r1", "read").unwrap());
        a.observe_change_feed(true);
        let json = serde_json::to_string(&a).unwrap();
        let back: SurfaceAttachment = serde_json::from_str(&json).unwrap();
        assert_eq!(a, back);
        assert!(!format!("{a:?}").contains(TOKEN));
        let bad = json.replace("rs_worker_1", "");
        assert!(serde_json::from_str::<SurfaceAttachment>(&bad).is_err());
    }

    #[test]
    fn minted_ids_have_the_documented_shape() {
        let inv = record().invitation().clone();
        let a = SurfaceAttachment::mint(
            OwnerKey::of("o").unwrap(),
            inv,
            Participant::new("a", "A", "#fff"),
            &mut SeededEntropy::new(9),
        );
        assert!(a.id().starts_with("surface_") && a.id().len() == 32);
        assert!(a.client_id().starts_with("rs_") && a.client_id().len() == 19);
    }

    #[test]
    fn owner_is_checked_before_state() {
        let mut a = record();
        a.transition(AttachmentState::SurfaceUnavailable);
        let other = OwnerKey::of("session:two").unwrap();
        assert!(matches!(
            a.require(&other),
            Err(Error::AttachmentUnauthorized(_))
        ));
        assert_eq!(
            a.require(&OwnerKey::of("session:one").unwrap()),
            Err(Error::SurfaceUnavailable),
            "the relay's answer, as the worker that met it gave it"
        );
        a.transition(AttachmentState::Detached);
        assert_eq!(
            a.require(&OwnerKey::of("session:one").unwrap()),
            Err(Error::NotAttached(AttachmentState::Detached))
        );
    }
}
