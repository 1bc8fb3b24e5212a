//! The names of an attachment's keys: the layouts, and the record's and
//! lock's key names.

/// How an attachment's keys are named: see the [module documentation](super#data-layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyLayout {
    /// `<prefix><id>`, `<prefix>lock:<id>`: the single-server default
    /// (and the layout of every store before cluster support).
    Plain,
    /// `<prefix>{<id>}`, `<prefix>lock:{<id>}`: one attachment's keys in
    /// one cluster hash slot. Required for a cluster.
    HashTagged,
}

pub(super) const RESERVED_ID_PREFIX: &str = "lock:";

pub(super) fn record(layout: KeyLayout, prefix: &str, id: &str) -> String {
    match layout {
        KeyLayout::Plain => format!("{prefix}{id}"),
        KeyLayout::HashTagged => format!("{prefix}{{{id}}}"),
    }
}

pub(super) fn lock(layout: KeyLayout, prefix: &str, id: &str) -> String {
    match layout {
        KeyLayout::Plain => format!("{prefix}{RESERVED_ID_PREFIX}{id}"),
        KeyLayout::HashTagged => format!("{prefix}{RESERVED_ID_PREFIX}{{{id}}}"),
    }
}

/// The record's name in the envelope's associated data: the same in
/// both layouts, so a record moved between them still opens.
pub(super) fn name(prefix: &str, id: &str) -> String {
    format!("{prefix}{id}")
}
