//! The change feed: what somebody else did since the agent's last marker.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::{Error, ProtocolError};
use crate::values::revision::{REVISION_KEYS, SurfaceRevision, revision_among, trim_ascii_php};
use crate::values::scalar::Key;
use crate::values::scalar::{Members, Scalar, Skip};

/// What has been observed of a surface's change feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeFeed {
    /// The surface has not listed its tools yet.
    #[default]
    NotObserved,
    /// The surface offers no change feed.
    Unavailable,
    /// The surface offers a feed; attribution is not yet observed.
    Offered,
    /// The feed has named an actor other than this agent.
    Attributed,
}

impl ChangeFeed {
    /// The wire value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeFeed::NotObserved => "not_observed",
            ChangeFeed::Unavailable => "unavailable",
            ChangeFeed::Offered => "offered",
            ChangeFeed::Attributed => "attributed",
        }
    }

    /// True for `Offered` and `Attributed`.
    #[must_use]
    pub fn is_answerable(self) -> bool {
        matches!(self, ChangeFeed::Offered | ChangeFeed::Attributed)
    }

    /// True for `Unavailable`.
    #[must_use]
    pub fn is_unavailable(self) -> bool {
        self == ChangeFeed::Unavailable
    }

    /// True for `Attributed`.
    #[must_use]
    pub fn is_proven(self) -> bool {
        self == ChangeFeed::Attributed
    }

    /// One sentence saying what is known.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            ChangeFeed::NotObserved => {
                "The surface has not listed its tools yet, so nothing is known about a change feed."
            }
            ChangeFeed::Unavailable => {
                "The surface offers no change feed, so what a human changed cannot be known here. An empty answer is not evidence that nothing changed."
            }
            ChangeFeed::Offered => {
                "The surface offers a change feed. Whether it names WHO made a change is not observable until something changes."
            }
            ChangeFeed::Attributed => {
                "The surface has reported a change made by someone other than this agent, so attribution is proven rather than assumed."
            }
        }
    }
}

impl fmt::Display for ChangeFeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The tool names a surface's change feed may have, compared after ASCII
/// lowercasing (no trimming). The first admitted tool whose name matches
/// is the feed tool.
pub const CHANGE_FEED_TOOLS: [&str; 7] = [
    "changes_since",
    "changessince",
    "surface_changes",
    "surfacechanges",
    "what_changed",
    "whatchanged",
    "changes",
];

/// Whether `name` is one of [`CHANGE_FEED_TOOLS`], ignoring ASCII case.
///
/// The comparison is exact otherwise: surrounding whitespace or a vendor
/// prefix makes it a different tool.
///
/// ```
/// use human_plus_core::is_change_feed_tool;
///
/// assert!(is_change_feed_tool("changes_since"));
/// assert!(is_change_feed_tool("What_Changed"));
/// assert!(!is_change_feed_tool(" changes"));
/// assert!(!is_change_feed_tool("sheet_changes"));
/// ```
#[must_use]
pub fn is_change_feed_tool(name: &str) -> bool {
    CHANGE_FEED_TOOLS
        .iter()
        .any(|tool| tool.eq_ignore_ascii_case(name))
}

/// Keys a change's handle is read from, in order.
#[cfg_attr(not(test), allow(dead_code))] // Field::of follows it (tested)
const HANDLE_KEYS: [&str; 7] = [
    "handle",
    "id",
    "screen_id",
    "screenId",
    "node_id",
    "nodeId",
    "key",
];

/// Keys a change's kind is read from, in order.
#[cfg_attr(not(test), allow(dead_code))] // Field::of follows it (tested)
const KIND_KEYS: [&str; 7] = [
    "change",
    "change_kind",
    "changeKind",
    "event",
    "action",
    "op",
    "kind",
];

/// Keys a change's actor is read from, in order. `actor_id` is never read.
#[cfg_attr(not(test), allow(dead_code))] // Field::of follows it (tested)
const ACTOR_KEYS: [&str; 7] = [
    "actor_type",
    "actorType",
    "actor",
    "by",
    "author",
    "changed_by",
    "changedBy",
];

/// Keys a change's label is read from, in order.
#[cfg_attr(not(test), allow(dead_code))] // Field::of follows it (tested)
const LABEL_KEYS: [&str; 5] = ["label", "title", "name", "component", "component_kind"];

/// Which field a row member is a candidate for, by the index of its key in
/// [`HANDLE_KEYS`], [`KIND_KEYS`], [`ACTOR_KEYS`] or [`LABEL_KEYS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Handle(usize),
    Kind(usize),
    Actor(usize),
    Label(usize),
}

impl Field {
    /// The field a row member named `key` is a candidate for, or `None`
    /// when no field is read from that key.
    fn of(key: &str) -> Option<Field> {
        Some(match key {
            "handle" => Field::Handle(0),
            "id" => Field::Handle(1),
            "screen_id" => Field::Handle(2),
            "screenId" => Field::Handle(3),
            "node_id" => Field::Handle(4),
            "nodeId" => Field::Handle(5),
            "key" => Field::Handle(6),
            "change" => Field::Kind(0),
            "change_kind" => Field::Kind(1),
            "changeKind" => Field::Kind(2),
            "event" => Field::Kind(3),
            "action" => Field::Kind(4),
            "op" => Field::Kind(5),
            "kind" => Field::Kind(6),
            "actor_type" => Field::Actor(0),
            "actorType" => Field::Actor(1),
            "actor" => Field::Actor(2),
            "by" => Field::Actor(3),
            "author" => Field::Actor(4),
            "changed_by" => Field::Actor(5),
            "changedBy" => Field::Actor(6),
            "label" => Field::Label(0),
            "title" => Field::Label(1),
            "name" => Field::Label(2),
            "component" => Field::Label(3),
            "component_kind" => Field::Label(4),
            _ => return None,
        })
    }
}

/// A member a row's rules read: a parsed `&Value`, or a [`Scalar`] read
/// from the bytes.
trait Candidate: Sized {
    /// What a kind or actor slot keeps of the member.
    type Word: Word;
    /// The member as a kind or actor slot keeps it.
    fn word(self) -> Self::Word;
    /// The member as the rules read it.
    fn scalar(&self) -> Scalar<'_>;
    /// Its string, if it is one.
    fn text(&self) -> Option<&str>;
}

/// A kind or actor candidate.
trait Word {
    /// [`ChangeKind::parse`] of the member.
    fn kind(&self) -> ChangeKind;
    /// [`ChangeActor::parse`] of the member.
    fn actor(&self) -> ChangeActor;
}

impl<'v> Candidate for &'v Value {
    /// Kept as it is, read when the rule gets to it (a parsed row costs
    /// nothing to keep).
    type Word = &'v Value;

    fn word(self) -> &'v Value {
        self
    }

    fn scalar(&self) -> Scalar<'_> {
        Scalar::of(self)
    }

    fn text(&self) -> Option<&str> {
        self.as_str()
    }
}

impl Word for &Value {
    fn kind(&self) -> ChangeKind {
        ChangeKind::of(&Scalar::of(self))
    }

    fn actor(&self) -> ChangeActor {
        ChangeActor::of(&Scalar::of(self))
    }
}

/// A member read as both a kind and an actor, from one normalisation.
#[derive(Debug, Clone, Copy)]
struct Words(ChangeKind, ChangeActor);

impl Word for Words {
    fn kind(&self) -> ChangeKind {
        self.0
    }

    fn actor(&self) -> ChangeActor {
        self.1
    }
}

impl Candidate for Scalar<'_> {
    /// Read as it is put: two bytes kept instead of the string.
    type Word = Words;

    fn word(self) -> Words {
        let mut buf = [0; WORD_BYTES];
        let word = normalised(&self, &mut buf);
        Words(ChangeKind::of_word(word), ChangeActor::of_word(word))
    }

    fn scalar(&self) -> Scalar<'_> {
        match self {
            Scalar::Str(s) => Scalar::Str(Cow::Borrowed(s)),
            other => other.clone(),
        }
    }

    fn text(&self) -> Option<&str> {
        self.as_str()
    }
}

/// A row's field candidates, by [`Field`]: each slot holds the last member
/// of its key (as `Value` keeps the last of duplicated keys), read only
/// when the rule gets to it. The same rules for a row read from a `Value`
/// and one read from the result's bytes.
struct RowSlots<T: Candidate> {
    handle: [Option<T>; 7],
    kind: [Option<T::Word>; 7],
    actor: [Option<T::Word>; 7],
    label: [Option<T>; 5],
}

impl<T: Candidate> RowSlots<T> {
    fn new() -> Self {
        RowSlots {
            handle: [const { None }; 7],
            kind: [const { None }; 7],
            actor: [const { None }; 7],
            label: [const { None }; 5],
        }
    }

    /// Puts the member of `field`'s key in its slot.
    fn put(&mut self, field: Field, value: T) {
        let (slot, word) = match field {
            Field::Handle(i) => (self.handle.get_mut(i), None),
            Field::Kind(i) => (None, self.kind.get_mut(i)),
            Field::Actor(i) => (None, self.actor.get_mut(i)),
            Field::Label(i) => (self.label.get_mut(i), None),
        };
        if let Some(slot) = slot {
            *slot = Some(value);
        } else if let Some(slot) = word {
            *slot = Some(value.word());
        }
    }

    /// The change these candidates make ([`SurfaceChange::from_row`]
    /// documents the rule), `None` without a handle.
    fn change(&self) -> Option<SurfaceChange> {
        let handle = self
            .handle
            .iter()
            .flatten()
            .find_map(|c| handle_text(&c.scalar()))?;
        let kind = self
            .kind
            .iter()
            .flatten()
            .map(Word::kind)
            .find(|kind| *kind != ChangeKind::Unknown)
            .unwrap_or_default();
        let actor = self
            .actor
            .iter()
            .flatten()
            .map(Word::actor)
            .find(|actor| *actor != ChangeActor::Unknown)
            .unwrap_or_default();
        let label = self
            .label
            .iter()
            .flatten()
            .filter_map(Candidate::text)
            .map(trim_ascii_php)
            .find(|label| !label.is_empty())
            .unwrap_or_default();
        Some(SurfaceChange {
            handle,
            kind,
            actor,
            label: label.to_owned(),
        })
    }
}

/// Keys the list of change rows is read from, in order (`_meta` first).
const ROW_KEYS: [&str; 6] = [
    "changes",
    "change_log",
    "changeLog",
    "events",
    "screens",
    "items",
];

/// Keys by which a surface claims its answer complete (`_meta` first).
const COMPLETE_KEYS: [&str; 3] = ["complete", "is_complete", "isComplete"];

/// Keys by which a surface admits its answer partial (`_meta` first).
const PARTIAL_KEYS: [&str; 4] = ["partial", "is_partial", "isPartial", "truncated"];

/// The longest word a kind or actor rule matches has 10 bytes; a longer
/// string matches none.
const WORD_BYTES: usize = 16;

/// The string content of `value`, PHP-trimmed and ASCII-lowercased into
/// `buf`, if it is a string short enough to be one of the words the kind
/// and actor rules match (`None` otherwise: it matches none of them).
fn normalised<'b>(value: &Scalar<'_>, buf: &'b mut [u8; WORD_BYTES]) -> Option<&'b str> {
    let word = trim_ascii_php(value.as_str()?).as_bytes();
    let out = buf.get_mut(..word.len())?;
    for (o, b) in out.iter_mut().zip(word) {
        *o = b.to_ascii_lowercase();
    }
    std::str::from_utf8(out).ok()
}

/// What happened to a handle.
///
/// ```
/// use human_plus_core::ChangeKind;
/// use serde_json::json;
///
/// assert_eq!(ChangeKind::parse(&json!(" Removed ")), ChangeKind::Deleted);
/// assert_eq!(ChangeKind::parse(&json!("reparented")), ChangeKind::Moved);
/// assert_eq!(ChangeKind::parse(&json!("chart")), ChangeKind::Unknown);
/// assert_eq!(ChangeKind::parse(&json!(1)), ChangeKind::Unknown);
/// assert!(!ChangeKind::Deleted.leaves_handle_valid());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Something was added: `created`, `create`, `added`, `add`, `inserted`.
    Created,
    /// Something was edited: `updated`, `update`, `changed`, `edited`,
    /// `modified`.
    Updated,
    /// Something was removed: `deleted`, `delete`, `removed`, `remove`.
    Deleted,
    /// Something was moved: `moved`, `move`, `reordered`, `reorder`,
    /// `reparented`.
    Moved,
    /// Not a string, or a word not listed above.
    #[default]
    Unknown,
}

impl ChangeKind {
    /// Reads a kind: a string, PHP-trimmed and ASCII-lowercased, matched
    /// against the synonyms listed on each variant. Anything else is
    /// [`ChangeKind::Unknown`].
    #[must_use]
    pub fn parse(value: &Value) -> ChangeKind {
        ChangeKind::of(&Scalar::of(value))
    }

    /// [`ChangeKind::parse`] on either reading of a member.
    fn of(value: &Scalar<'_>) -> ChangeKind {
        ChangeKind::of_word(normalised(value, &mut [0; WORD_BYTES]))
    }

    /// The kind a [`normalised`] word names.
    fn of_word(word: Option<&str>) -> ChangeKind {
        match word {
            Some("created" | "create" | "added" | "add" | "inserted") => ChangeKind::Created,
            Some("updated" | "update" | "changed" | "edited" | "modified") => ChangeKind::Updated,
            Some("deleted" | "delete" | "removed" | "remove") => ChangeKind::Deleted,
            Some("moved" | "move" | "reordered" | "reorder" | "reparented") => ChangeKind::Moved,
            _ => ChangeKind::Unknown,
        }
    }

    /// The wire value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Updated => "updated",
            ChangeKind::Deleted => "deleted",
            ChangeKind::Moved => "moved",
            ChangeKind::Unknown => "unknown",
        }
    }

    /// True unless the handle was deleted.
    #[must_use]
    pub fn leaves_handle_valid(self) -> bool {
        self != ChangeKind::Deleted
    }
}

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who made a change, as the surface says it.
///
/// An actor this library does not recognise is [`ChangeActor::Unknown`],
/// never a default: quietly reading an unknown actor as the agent would
/// be the revert bug arriving through the parser.
///
/// ```
/// use human_plus_core::ChangeActor;
/// use serde_json::json;
///
/// assert_eq!(ChangeActor::parse(&json!("Human")), ChangeActor::Human);
/// assert_eq!(ChangeActor::parse(&json!("assistant")), ChangeActor::Agent);
/// assert_eq!(ChangeActor::parse(&json!("sales-team")), ChangeActor::Unknown);
/// assert_eq!(ChangeActor::parse(&json!({"type": "human"})), ChangeActor::Unknown);
/// assert!(ChangeActor::Unknown.deserves_deference());
/// assert!(!ChangeActor::Agent.deserves_deference());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeActor {
    /// A person: `human`, `user`, `person`, `operator`.
    Human,
    /// An agent, taken to be this one: `agent`, `assistant`, `self`, `me`.
    Agent,
    /// Some other participant: `other`, `system`, `job`, `service`.
    Other,
    /// Not a string, or a word not listed above.
    #[default]
    Unknown,
}

impl ChangeActor {
    /// Reads an actor: a string, PHP-trimmed and ASCII-lowercased, matched
    /// against the synonyms listed on each variant. Anything else,
    /// including an object such as `{"type": "human"}`, is
    /// [`ChangeActor::Unknown`].
    #[must_use]
    pub fn parse(value: &Value) -> ChangeActor {
        ChangeActor::of(&Scalar::of(value))
    }

    /// [`ChangeActor::parse`] on either reading of a member.
    fn of(value: &Scalar<'_>) -> ChangeActor {
        ChangeActor::of_word(normalised(value, &mut [0; WORD_BYTES]))
    }

    /// The actor a [`normalised`] word names.
    fn of_word(word: Option<&str>) -> ChangeActor {
        match word {
            Some("human" | "user" | "person" | "operator") => ChangeActor::Human,
            Some("agent" | "assistant" | "self" | "me") => ChangeActor::Agent,
            Some("other" | "system" | "job" | "service") => ChangeActor::Other,
            _ => ChangeActor::Unknown,
        }
    }

    /// The wire value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeActor::Human => "human",
            ChangeActor::Agent => "agent",
            ChangeActor::Other => "other",
            ChangeActor::Unknown => "unknown",
        }
    }

    /// True unless the surface positively said an agent made the change:
    /// a change is deferred to unless it can be shown to be the agent's own.
    #[must_use]
    pub fn deserves_deference(self) -> bool {
        self != ChangeActor::Agent
    }

    /// True for `Human` and `Other`: an actor that proves the feed
    /// attributes changes.
    fn attributes(self) -> bool {
        matches!(self, ChangeActor::Human | ChangeActor::Other)
    }
}

impl fmt::Display for ChangeActor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of a change feed: which handle, what happened, who did it.
///
/// The label is untrusted text from the surface; [`SurfaceChanges`] frames
/// it before a model reads it (see [`SurfaceChanges::with_framed_labels`]).
/// Serialises as `{"handle", "kind", "actor", "label"}` in that order.
///
/// ```
/// use human_plus_core::{ChangeActor, ChangeKind, SurfaceChange};
/// use serde_json::json;
///
/// let c = SurfaceChange::from_row(&json!({
///     "screen_id": " screen_7 ", "change": "moved", "actor_type": "human",
///     "kind": "chart", "title": "Budget", "actor_id": "u-1",
/// })).unwrap();
/// assert_eq!(c.handle(), "screen_7");
/// assert_eq!(c.kind(), ChangeKind::Moved);
/// assert_eq!(c.actor(), ChangeActor::Human);
/// assert_eq!(c.label(), "Budget");
///
/// assert!(SurfaceChange::from_row(&json!({"change": "updated"})).is_none());
/// assert!(SurfaceChange::from_row(&json!({"id": 42.0})).is_none());
/// assert_eq!(SurfaceChange::from_row(&json!({"id": 42})).unwrap().handle(), "42");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct SurfaceChange {
    handle: String,
    kind: ChangeKind,
    actor: ChangeActor,
    label: String,
}

impl SurfaceChange {
    /// A change built by hand. The handle and label are PHP-trimmed;
    /// `None` when the handle is blank.
    #[must_use]
    pub fn new(
        handle: impl AsRef<str>,
        kind: ChangeKind,
        actor: ChangeActor,
        label: impl AsRef<str>,
    ) -> Option<SurfaceChange> {
        let handle = trim_ascii_php(handle.as_ref());
        if handle.is_empty() {
            return None;
        }
        Some(SurfaceChange {
            handle: handle.to_owned(),
            kind,
            actor,
            label: trim_ascii_php(label.as_ref()).to_owned(),
        })
    }

    /// Reads one row of a change feed; `None` when `row` is not an object
    /// or names no handle.
    ///
    /// - handle: the first of `handle`, `id`, `screen_id`, `screenId`,
    ///   `node_id`, `nodeId`, `key` that is a non-blank string (trimmed) or
    ///   a JSON integer within the signed 64-bit range (its decimal text).
    ///   Floats (even `42.0`), booleans and blank strings fall through to
    ///   the next key.
    /// - kind: for each of `change`, `change_kind`, `changeKind`, `event`,
    ///   `action`, `op`, `kind` present in the row, [`ChangeKind::parse`];
    ///   the first that is not `Unknown` wins. So `change` beats `kind`,
    ///   and a component type in `kind` alone is `Unknown`.
    /// - actor: the same rule over `actor_type`, `actorType`, `actor`,
    ///   `by`, `author`, `changed_by`, `changedBy`. `actor_id` is never
    ///   read: a person's identity is not needed to decide deference.
    /// - label: the first of `label`, `title`, `name`, `component`,
    ///   `component_kind` that is a non-blank string (trimmed), else `""`.
    #[must_use]
    pub fn from_row(row: &Value) -> Option<SurfaceChange> {
        let row = row.as_object()?;
        // One pass over the row's own keys: each key that names a field
        // lands in its slot, in the field's key order.
        let mut slots = RowSlots::new();
        for (key, value) in row {
            if let Some(field) = Field::of(key) {
                slots.put(field, value);
            }
        }
        slots.change()
    }

    /// The surface's own id for what changed (never blank).
    #[must_use]
    pub fn handle(&self) -> &str {
        &self.handle
    }

    /// What happened.
    #[must_use]
    pub fn kind(&self) -> ChangeKind {
        self.kind
    }

    /// Who did it, as the surface says.
    #[must_use]
    pub fn actor(&self) -> ChangeActor {
        self.actor
    }

    /// A short description from the surface (untrusted; `""` when none).
    /// Framed once it has passed through
    /// [`SurfaceChanges::with_framed_labels`].
    #[must_use]
    pub fn label(&self) -> &str {
        &self.label
    }

    /// True unless the surface positively said an agent made this change.
    #[must_use]
    pub fn deserves_deference(&self) -> bool {
        self.actor.deserves_deference()
    }

    /// Appends this change's compact JSON to `out`.
    fn write_json(&self, out: &mut String) {
        out.push_str("{\"handle\":");
        push_json_string(out, &self.handle);
        out.push_str(",\"kind\":\"");
        out.push_str(self.kind.as_str());
        out.push_str("\",\"actor\":\"");
        out.push_str(self.actor.as_str());
        out.push_str("\",\"label\":");
        push_json_string(out, &self.label);
        out.push('}');
    }
}

/// A handle candidate's text: a non-blank string (trimmed) or an integer
/// the reference's JSON decoder keeps as an integer (signed 64-bit).
fn handle_text(value: &Scalar<'_>) -> Option<String> {
    match value {
        Scalar::Str(s) => {
            let s = trim_ascii_php(s);
            (!s.is_empty()).then(|| s.to_owned())
        }
        Scalar::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// An answer of the change feed: what somebody else did since the agent's
/// last marker, and how far that can be believed.
///
/// The feed state comes first: [`SurfaceChanges::answered`] false means
/// the list means nothing, and [`SurfaceChanges::nothing_changed`] is the
/// only calm signal. [`SurfaceChanges::defer_to`] lists every change not
/// positively attributed to the agent.
///
/// ```
/// use human_plus_core::{ChangeFeed, SurfaceChanges};
/// use serde_json::json;
///
/// let answer = SurfaceChanges::read_from(
///     &json!({"_meta": {"revision": "r1", "changes": [
///         {"screen_id": "screen_7", "change": "moved", "actor_type": "human", "title": "Budget"},
///     ]}}),
///     ChangeFeed::Offered,
/// );
/// assert_eq!(answer.feed(), ChangeFeed::Attributed);
/// assert!(answer.answered() && !answer.nothing_changed());
/// assert_eq!(answer.handles(), ["screen_7"]);
/// assert_eq!(
///     answer.to_json(),
///     r#"{"feed":"attributed","complete":true,"answered":true,"nothing_changed":false,"attributes":true,"revision":"r1","changes":[{"handle":"screen_7","kind":"moved","actor":"human","label":"Budget"}],"defer_to":["screen_7"],"handles":["screen_7"]}"#
/// );
///
/// let none = SurfaceChanges::unavailable();
/// assert!(!none.answered() && !none.nothing_changed());
/// assert!(none.describe().contains("not evidence that nothing changed"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceChanges {
    feed: ChangeFeed,
    changes: Vec<SurfaceChange>,
    revision: Option<SurfaceRevision>,
    complete: bool,
    revision_refused: bool,
}

impl SurfaceChanges {
    /// The answer when the surface offers no change feed: feed
    /// `Unavailable`, no changes, no revision, and NOT complete.
    #[must_use]
    pub fn unavailable() -> SurfaceChanges {
        SurfaceChanges {
            feed: ChangeFeed::Unavailable,
            changes: Vec::new(),
            revision: None,
            complete: false,
            revision_refused: false,
        }
    }

    /// Reads a feed tool's `result`, given what was known of the feed
    /// before (`Offered` or `Attributed` when the tool was called). Pure and
    /// total: any JSON in, an answer out. Labels are not framed.
    ///
    /// - Rows: for `changes`, `change_log`, `changeLog`, `events`,
    ///   `screens`, `items` in order, `_meta` before the top level for each,
    ///   the first value that is a JSON array is used, even an empty one.
    ///   Its non-object elements are discarded, and rows without a handle
    ///   are dropped ([`SurfaceChange::from_row`]). Any other value,
    ///   including a JSON object, is skipped. (Divergence: the PHP
    ///   reference decodes an empty object `{}` as an empty list, so there
    ///   `_meta.changes: {}` hides a top-level `changes` list; here it does
    ///   not.) There is no row limit: the frame byte budget bounds the input.
    /// - Feed: `Attributed` when some change names a `Human` or `Other`
    ///   actor and `feed` is answerable; otherwise `feed` unchanged, so
    ///   `Unavailable` is never upgraded.
    /// - Revision: [`SurfaceRevision::from_result`] with `observed_from`
    ///   `"changes"`, as the reference records it. A marker over 512 bytes
    ///   yields no revision and sets [`SurfaceChanges::revision_refused`].
    /// - Complete: for `complete`, `is_complete`, `isComplete` (each
    ///   `_meta` then top level) the first key that exists decides: only
    ///   JSON `true` is complete; `false`, `null`, `"true"`, `1`, anything
    ///   else is not. Failing that, for `partial`, `is_partial`,
    ///   `isPartial`, `truncated` the first existing key decides inverted:
    ///   only JSON `false` is complete. Failing both, complete. (Decision:
    ///   the reference uses PHP truthiness, under which `"false"` claims
    ///   completeness; here anything but a JSON boolean fails safe to not
    ///   complete.) A `result` that is not a JSON object is not complete.
    ///
    /// ```
    /// use human_plus_core::{ChangeFeed, SurfaceChanges};
    /// use serde_json::json;
    ///
    /// let read = |v| SurfaceChanges::read_from(&v, ChangeFeed::Offered);
    /// assert!(read(json!({"_meta": {"revision": "r9", "changes": []}})).nothing_changed());
    /// assert!(!read(json!({"changes": [], "complete": false})).nothing_changed());
    /// assert!(!read(json!({"changes": [], "complete": "false"})).complete());
    /// assert!(!read(json!({"changes": [], "truncated": true})).complete());
    /// assert!(read(json!({"changes": [], "complete": true, "partial": true})).complete());
    /// assert!(!read(json!(null)).complete());
    /// ```
    #[must_use]
    pub fn read_from(result: &Value, feed: ChangeFeed) -> SurfaceChanges {
        let Some(top) = result.as_object() else {
            return SurfaceChanges::not_an_object(feed);
        };
        let meta = top.get("_meta").and_then(Value::as_object);
        SurfaceChanges::decide(meta.map(ValueSource), ValueSource(top), feed)
    }

    /// [`SurfaceChanges::read_from`] on a feed tool's `result` as its bytes
    /// arrived: parsed once, each row read as it is parsed (no `Value`, no
    /// map per row; strings borrowed from the text unless escaped), by the
    /// same rules, to the same answer.
    ///
    /// ```
    /// use human_plus_core::{ChangeFeed, SurfaceChanges};
    ///
    /// let text = br#"{"_meta":{"revision":"r2","changes":[{"id":7,"change":"Moved","by":"user"}]}}"#;
    /// let answer = SurfaceChanges::read_from_bytes(text, ChangeFeed::Offered)?;
    /// let value: serde_json::Value = serde_json::from_slice(text).unwrap();
    /// assert_eq!(answer, SurfaceChanges::read_from(&value, ChangeFeed::Offered));
    /// assert_eq!(answer.handles(), ["7"]);
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`ProtocolError::MalformedResult`] when the bytes are not JSON that
    /// `serde_json::Value` reads (not UTF-8, not JSON, nested past its
    /// limit, a number beyond the double range).
    pub fn read_from_bytes(result: &[u8], feed: ChangeFeed) -> Result<SurfaceChanges, Error> {
        let malformed = || Error::Protocol(ProtocolError::MalformedResult);
        let text = std::str::from_utf8(result).map_err(|_| malformed())?;
        let mut de = serde_json::Deserializer::from_str(text);
        let read = ObjectSeed { top: true }
            .deserialize(&mut de)
            .and_then(|read| de.end().map(|()| read))
            .map_err(|_| malformed())?;
        Ok(match read {
            None => SurfaceChanges::not_an_object(feed),
            Some(top) => top.answer(feed),
        })
    }

    /// The answer to a `result` that is not a JSON object.
    fn not_an_object(feed: ChangeFeed) -> SurfaceChanges {
        SurfaceChanges {
            feed,
            changes: Vec::new(),
            revision: None,
            complete: false,
            revision_refused: false,
        }
    }

    /// The rules of [`SurfaceChanges::read_from`] over a result's `_meta`
    /// (when it is an object) and its top level, however they were read.
    fn decide<S: FeedSource>(mut meta: Option<S>, mut top: S, feed: ChangeFeed) -> SurfaceChanges {
        let changes: Vec<SurfaceChange> = ROW_KEYS
            .iter()
            .find_map(|key| {
                meta.as_mut()
                    .and_then(|m| m.rows(key))
                    .or_else(|| top.rows(key))
            })
            .unwrap_or_default();

        let attributed = changes.iter().any(|c| c.actor.attributes());
        let feed = if attributed && feed.is_answerable() {
            ChangeFeed::Attributed
        } else {
            feed
        };

        let (revision, revision_refused) =
            match revision_among([meta.as_ref(), Some(&top)], "changes") {
                Ok(revision) => (revision, false),
                Err(_) => (None, true),
            };

        let find = |key: &str| {
            meta.as_ref()
                .and_then(|m| m.scalar(key))
                .or_else(|| top.scalar(key))
        };
        let complete = if let Some(claim) = COMPLETE_KEYS.iter().find_map(|key| find(key)) {
            claim == Scalar::Bool(true)
        } else if let Some(admission) = PARTIAL_KEYS.iter().find_map(|key| find(key)) {
            admission == Scalar::Bool(false)
        } else {
            true
        };

        SurfaceChanges {
            feed,
            changes,
            revision,
            complete,
            revision_refused,
        }
    }

    /// What is known of the feed after this answer.
    #[must_use]
    pub fn feed(&self) -> ChangeFeed {
        self.feed
    }

    /// The changes, in the surface's order.
    #[must_use]
    pub fn changes(&self) -> &[SurfaceChange] {
        &self.changes
    }

    /// The revision the answer carried (observed from `"changes"`).
    #[must_use]
    pub fn revision(&self) -> Option<&SurfaceRevision> {
        self.revision.as_ref()
    }

    /// True when the answer carried a revision marker over 512 bytes, which
    /// was refused (so [`SurfaceChanges::revision`] is `None`).
    #[must_use]
    pub fn revision_refused(&self) -> bool {
        self.revision_refused
    }

    /// False when the surface declared the answer partial (or the feed is
    /// unavailable): some changes are not in it.
    #[must_use]
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// True when the feed answered at all. When false, the (empty) list
    /// means nothing: it is not evidence that nothing changed.
    #[must_use]
    pub fn answered(&self) -> bool {
        self.feed.is_answerable()
    }

    /// The only calm signal: answered, complete, and no changes.
    #[must_use]
    pub fn nothing_changed(&self) -> bool {
        self.answered() && self.complete && self.changes.is_empty()
    }

    /// True when the feed has named an actor other than this agent.
    #[must_use]
    pub fn attributes(&self) -> bool {
        self.feed.is_proven()
    }

    /// The changes to re-read rather than correct: every change whose actor
    /// is not `Agent` (human, other, unknown), in order, duplicates kept.
    /// Empty when the feed did not answer.
    #[must_use]
    pub fn defer_to(&self) -> Vec<&SurfaceChange> {
        if !self.answered() {
            return Vec::new();
        }
        self.changes
            .iter()
            .filter(|c| c.deserves_deference())
            .collect()
    }

    /// Every handle, without duplicates, in first-seen order.
    #[must_use]
    pub fn handles(&self) -> Vec<&str> {
        let mut seen = BTreeSet::new();
        self.changes
            .iter()
            .map(SurfaceChange::handle)
            .filter(|h| seen.insert(*h))
            .collect()
    }

    /// What this answer establishes, in the reference's sentences.
    ///
    /// ```
    /// use human_plus_core::{ChangeFeed, SurfaceChanges};
    /// use serde_json::json;
    ///
    /// let a = SurfaceChanges::read_from(
    ///     &json!({"changes": [{"id": "s1", "change": "updated"}], "partial": true}),
    ///     ChangeFeed::Offered,
    /// );
    /// assert_eq!(
    ///     a.describe(),
    ///     "The surface reports 1 change(s) since the last marker. \
    ///      The surface declared this answer PARTIAL, so some changes are not in it. \
    ///      It has never named an actor, so who made these changes is not known here."
    /// );
    /// ```
    #[must_use]
    pub fn describe(&self) -> String {
        if !self.answered() {
            return self.feed.describe().to_owned();
        }
        let mut text = if self.changes.is_empty() {
            "The surface reports no changes since the last marker.".to_owned()
        } else {
            format!(
                "The surface reports {} change(s) since the last marker.",
                self.changes.len()
            )
        };
        if !self.complete {
            text.push_str(
                " The surface declared this answer PARTIAL, so some changes are not in it.",
            );
        }
        if !self.attributes() {
            text.push_str(
                " It has never named an actor, so who made these changes is not known here.",
            );
        }
        text
    }

    /// The same answer with every non-empty label replaced by
    /// `frame(label)`, typically [`crate::ResultGuard::frame`]. Empty labels
    /// are left empty.
    ///
    /// # Errors
    /// The first error `frame` returns (for a guard: a label over budget).
    pub fn with_framed_labels<E>(
        mut self,
        mut frame: impl FnMut(&str) -> Result<String, E>,
    ) -> Result<SurfaceChanges, E> {
        for change in &mut self.changes {
            if !change.label.is_empty() {
                change.label = frame(&change.label)?;
            }
        }
        Ok(self)
    }

    /// The conformance shape as compact JSON, keys in this order: `feed`,
    /// `complete`, `answered`, `nothing_changed`, `attributes`, `revision`
    /// (token or `null`), `changes` (`{handle, kind, actor, label}` each),
    /// `defer_to` (handles), `handles`. Non-ASCII and `/` are written as
    /// they are. The [`Serialize`] impl produces the same.
    #[must_use]
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(160 + 64 * self.changes.len());
        out.push_str("{\"feed\":\"");
        out.push_str(self.feed.as_str());
        out.push_str("\",\"complete\":");
        out.push_str(bool_text(self.complete));
        out.push_str(",\"answered\":");
        out.push_str(bool_text(self.answered()));
        out.push_str(",\"nothing_changed\":");
        out.push_str(bool_text(self.nothing_changed()));
        out.push_str(",\"attributes\":");
        out.push_str(bool_text(self.attributes()));
        out.push_str(",\"revision\":");
        match &self.revision {
            Some(revision) => push_json_string(&mut out, revision.token()),
            None => out.push_str("null"),
        }
        out.push_str(",\"changes\":[");
        for (i, change) in self.changes.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            change.write_json(&mut out);
        }
        out.push_str("],\"defer_to\":");
        push_json_strings(
            &mut out,
            self.defer_to().into_iter().map(SurfaceChange::handle),
        );
        out.push_str(",\"handles\":");
        push_json_strings(&mut out, self.handles());
        out.push('}');
        out
    }
}

impl Serialize for SurfaceChanges {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let defer_to: Vec<&str> = self
            .defer_to()
            .into_iter()
            .map(SurfaceChange::handle)
            .collect();
        let mut s = serializer.serialize_struct("SurfaceChanges", 9)?;
        s.serialize_field("feed", &self.feed)?;
        s.serialize_field("complete", &self.complete)?;
        s.serialize_field("answered", &self.answered())?;
        s.serialize_field("nothing_changed", &self.nothing_changed())?;
        s.serialize_field("attributes", &self.attributes())?;
        s.serialize_field(
            "revision",
            &self.revision.as_ref().map(SurfaceRevision::token),
        )?;
        s.serialize_field("changes", &self.changes)?;
        s.serialize_field("defer_to", &defer_to)?;
        s.serialize_field("handles", &self.handles())?;
        s.end()
    }
}

/// One object the feed's rules read (a `result`, or its `_meta`).
trait FeedSource: Members {
    /// The rows of the member named `key` when it is an array: its objects
    /// read by [`SurfaceChange::from_row`]'s rule, the rest dropped.
    fn rows(&mut self, key: &str) -> Option<Vec<SurfaceChange>>;
}

/// A parsed object, as the feed's rules read it.
struct ValueSource<'v>(&'v Map<String, Value>);

impl Members for ValueSource<'_> {
    fn scalar(&self, key: &str) -> Option<Scalar<'_>> {
        self.0.scalar(key)
    }
}

impl FeedSource for ValueSource<'_> {
    fn rows(&mut self, key: &str) -> Option<Vec<SurfaceChange>> {
        let rows = self.0.get(key)?.as_array()?;
        Some(rows.iter().filter_map(SurfaceChange::from_row).collect())
    }
}

/// The keys of an object whose values the feed's rules read as scalars:
/// [`REVISION_KEYS`], [`COMPLETE_KEYS`], [`PARTIAL_KEYS`].
fn scalar_index(key: &str) -> Option<usize> {
    REVISION_KEYS
        .iter()
        .chain(&COMPLETE_KEYS)
        .chain(&PARTIAL_KEYS)
        .position(|k| *k == key)
}

/// How many keys [`scalar_index`] knows.
const SCALAR_KEYS: usize = REVISION_KEYS.len() + COMPLETE_KEYS.len() + PARTIAL_KEYS.len();

/// An object of a feed's `result` read from its bytes: for each key the
/// rules read, its last member (as `Value` keeps the last of duplicated
/// keys), the rows already read into changes.
#[derive(Default)]
struct ReadObject<'a> {
    /// By the index in [`ROW_KEYS`]: the rows when the last member is an
    /// array.
    rows: [Option<Vec<SurfaceChange>>; ROW_KEYS.len()],
    /// By [`scalar_index`].
    scalars: [Option<Scalar<'a>>; SCALAR_KEYS],
    /// The top level's last `_meta`, when it is an object.
    meta: Option<Box<ReadObject<'a>>>,
    /// The top level's last `isError` is `true`.
    is_error: bool,
}

impl ReadObject<'_> {
    /// The answer this `result` (the top level) gives.
    fn answer(mut self, feed: ChangeFeed) -> SurfaceChanges {
        let meta = self.meta.take().map(|m| *m);
        SurfaceChanges::decide(meta, self, feed)
    }
}

impl Members for ReadObject<'_> {
    fn scalar(&self, key: &str) -> Option<Scalar<'_>> {
        let i = scalar_index(key)?;
        self.scalars.get(i)?.clone()
    }
}

impl FeedSource for ReadObject<'_> {
    fn rows(&mut self, key: &str) -> Option<Vec<SurfaceChange>> {
        let i = ROW_KEYS.iter().position(|k| *k == key)?;
        self.rows.get_mut(i)?.take()
    }
}

/// Reads one value of a feed's `result` text: `Some` object (the top level
/// when `top`, else `_meta`), `None` for any other JSON value. Accepts
/// exactly what `Value` accepts.
#[derive(Clone, Copy)]
struct ObjectSeed {
    top: bool,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed {
    type Value = Option<ReadObject<'de>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed {
    type Value = Option<ReadObject<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Skip.visit_seq(seq).map(|()| None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut read = ReadObject::default();
        while let Some(Key(key)) = map.next_key()? {
            if let Some(i) = ROW_KEYS.iter().position(|k| *k == key) {
                let rows = map.next_value_seed(RowsSeed)?;
                if let Some(slot) = read.rows.get_mut(i) {
                    *slot = rows;
                }
            } else if let Some(i) = scalar_index(&key) {
                let value: Scalar<'de> = map.next_value()?;
                if let Some(slot) = read.scalars.get_mut(i) {
                    *slot = Some(value);
                }
            } else if self.top && key == "_meta" {
                read.meta = map
                    .next_value_seed(ObjectSeed { top: false })?
                    .map(Box::new);
            } else if self.top && key == "isError" {
                read.is_error = map.next_value::<Scalar<'de>>()? == Scalar::Bool(true);
            } else {
                map.next_value_seed(Skip)?;
            }
        }
        Ok(Some(read))
    }
}

/// Reads the value of a row key: `Some` changes when it is an array.
struct RowsSeed;

impl<'de> DeserializeSeed<'de> for RowsSeed {
    type Value = Option<Vec<SurfaceChange>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for RowsSeed {
    type Value = Option<Vec<SurfaceChange>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Skip.visit_map(map).map(|()| None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut changes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(row) = seq.next_element_seed(RowSeed)? {
            changes.extend(row);
        }
        Ok(Some(changes))
    }
}

/// Reads one row: the change it makes, `None` for a row that is not an
/// object or names no handle.
struct RowSeed;

impl<'de> DeserializeSeed<'de> for RowSeed {
    type Value = Option<SurfaceChange>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for RowSeed {
    type Value = Option<SurfaceChange>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Skip.visit_seq(seq).map(|()| None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut slots = RowSlots::<Scalar<'de>>::new();
        while let Some(Key(key)) = map.next_key()? {
            match Field::of(&key) {
                Some(field) => slots.put(field, map.next_value::<Scalar<'de>>()?),
                None => map.next_value_seed(Skip)?,
            }
        }
        Ok(slots.change())
    }
}

/// Reads a JSON-RPC reply frame's text whose `result` is a feed tool's
/// answer: the answer [`SurfaceChanges::read_from`] gives on the frame's
/// `result`, when the frame is JSON that `Value` reads and its (last)
/// `result` is an object whose `isError` is not `true`; `None` otherwise
/// (the caller then takes the `Value` way, which says what is wrong).
pub(crate) fn read_feed_frame(frame: &str, feed: ChangeFeed) -> Option<SurfaceChanges> {
    struct Frame;
    impl<'de> Visitor<'de> for Frame {
        type Value = Option<Option<ReadObject<'de>>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON-RPC frame")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut result = None;
            while let Some(Key(key)) = map.next_key()? {
                if key == "result" {
                    result = Some(map.next_value_seed(ObjectSeed { top: true })?);
                } else {
                    map.next_value_seed(Skip)?;
                }
            }
            Ok(result)
        }
    }
    let mut de = serde_json::Deserializer::from_str(frame);
    let read = de.deserialize_any(Frame).ok()?;
    de.end().ok()?;
    let top = read.flatten()?;
    (!top.is_error).then(|| top.answer(feed))
}

/// [`read_feed_frame`], for the fuzz targets only (compiled under
/// `cargo fuzz`'s `--cfg fuzzing`, never in a release).
#[cfg(fuzzing)]
#[doc(hidden)]
#[must_use]
pub fn fuzz_read_feed_frame(frame: &str, feed: ChangeFeed) -> Option<SurfaceChanges> {
    read_feed_frame(frame, feed)
}

fn bool_text(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

/// Appends a JSON array of strings.
fn push_json_strings<'a>(out: &mut String, items: impl IntoIterator<Item = &'a str>) {
    out.push('[');
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_string(out, item);
    }
    out.push(']');
}

/// Appends `s` as a JSON string, escaped as `serde_json` escapes it: `"`,
/// `\` and control characters only (`\b \f \n \r \t`, others `\u00xx`);
/// `/` and non-ASCII are written as they are.
fn push_json_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let b = u32::from(c) as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[b >> 4]));
                out.push(char::from(HEX[b & 0xf]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply frame read from its bytes: the `Value` way's answer, or
    /// `None` where the `Value` way has something to say (an error).
    #[test]
    fn a_feed_frame_is_read_as_the_value_way_reads_it() {
        let feed = ChangeFeed::Offered;
        let value_way = |frame: &str| {
            let v: Value = serde_json::from_str(frame).ok()?;
            let result = v.get("result").filter(|r| r.is_object())?;
            (result.get("isError") != Some(&Value::Bool(true)))
                .then(|| SurfaceChanges::read_from(result, feed))
        };
        let deep = format!(
            r#"{{"id":"x","pad":{}{},"result":{{}}}}"#,
            "[".repeat(130),
            "]".repeat(130)
        );
        for frame in [
            r#"{"jsonrpc":"2.0","id":"x","result":{"_meta":{"revision":"r4","changes":[{"id":"a","by":"human"}]}}}"#,
            r#"{"id":"x","result":{"changes":[{"id":"a"}]},"result":{"changes":[{"id":"b"}]}}"#,
            r#"{"id":"x","result":{"changes":[{"id":"a"}]},"result":[1]}"#,
            r#"{"id":"x","result":{"isError":true,"content":[]}}"#,
            r#"{"id":"x","result":{"isError":false,"isError":true}}"#,
            r#"{"id":"x","result":{"isError":true,"isError":"yes","changes":[]}}"#,
            r#"{"id":"x","result":{"changes":[]},"extra":1e400}"#,
            r#"{"id":"x","result":"text"}"#,
            deep.as_str(),
        ] {
            assert_eq!(read_feed_frame(frame, feed), value_way(frame), "{frame}");
        }
    }

    #[test]
    fn row_fields_follow_the_documented_key_orders() {
        let check = |keys: &[&str], field: fn(usize) -> Field| {
            for (i, key) in keys.iter().enumerate() {
                assert_eq!(Field::of(key), Some(field(i)), "{key}");
            }
        };
        check(&HANDLE_KEYS, Field::Handle);
        check(&KIND_KEYS, Field::Kind);
        check(&ACTOR_KEYS, Field::Actor);
        check(&LABEL_KEYS, Field::Label);
        assert_eq!(Field::of("actor_id"), None, "actor_id is never read");
    }
}
