//! What the demo surface records: who changed what, the calls it received
//! and what became of them, the notifications.

use serde_json::Value;

/// Who made a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Actor {
    /// The person at the page ([`Person`](super::Person)).
    Human,
    /// An agent, through a tool call.
    Agent,
}

impl Actor {
    /// `human` or `agent`, as the change feed writes it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Human => "human",
            Actor::Agent => "agent",
        }
    }
}

/// One row of the change log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The revision this change produced (`r<n>`).
    pub revision: String,
    /// What changed: an A1 address, or `row:<n>` for a deleted row.
    pub handle: String,
    /// `created`, `updated` or `deleted`.
    pub change: String,
    /// Who made it.
    pub actor: Actor,
    /// `cell` or `row`.
    pub kind: String,
    /// A readable label, e.g. `Sheet1!B4`.
    pub label: String,
}

/// What became of a `tools/call`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// Answered without changing anything.
    Read,
    /// Applied a write (the revision moved).
    Written,
    /// Refused for a stale pin; nothing was applied.
    Refused {
        /// The revision the sheet was at.
        current: String,
    },
    /// An error result or JSON-RPC error (unknown tool, bad arguments, …);
    /// nothing was applied.
    Failed {
        /// The message returned.
        message: String,
    },
}

/// A `tools/call` the surface received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    /// `params.name`.
    pub tool: String,
    /// `params.arguments` (`{}` when absent or not an object).
    pub arguments: Value,
    /// `params._meta.revision`, when present and not null.
    pub pinned: Option<Value>,
    /// What happened.
    pub outcome: CallOutcome,
}

/// A notification the surface received (presence frames included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Its method.
    pub method: String,
    /// Its params (`null` when absent).
    pub params: Value,
}
