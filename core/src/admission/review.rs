//! What changed between the definitions a person reviewed and the ones the
//! surface lists now, for `human-plus review NAME`.
//!
//! A pin says *that* a definition changed; a person deciding whether to
//! trust it again needs to see *what* changed. [`review_tools`] compares
//! what the person reviewed ([`Baseline`]: the definition, else its pinned
//! digest, else only the trusted name) with what is listed now, and says
//! per tool whether it is unchanged, **changed**, new on the surface, gone,
//! or cannot be compared. A changed definition comes with its difference
//! ([`DefinitionDiff`]): the description as a line diff ([`DiffLine`]) and
//! the input schema as the paths that were added, removed or changed
//! ([`SchemaChange`]): properties (nested), `type`, each name added to or
//! removed from `required`, each value added to or removed from `enum`,
//! `default`, and any other keyword at its path.
//!
//! Every string in a difference is the surface's (or a profile's) and
//! hostile. [`Review::text`] writes it for a terminal as `join` writes the
//! surface's words: control, invisible and direction characters escaped,
//! every line bounded, a name that is not plain quoted, and no surface text
//! inside a sentence Human+ writes. The work is bounded too: the line diff
//! is quadratic only up to [`DIFF_CELLS_MAX`] cells (past that, the
//! differing middle is shown as removed then added), the schema walk stops
//! at [`SCHEMA_DEPTH_MAX`] levels and keeps at most
//! [`SCHEMA_CHANGES_MAX`] changes.
//!
//! Comparison is the pins' own: a tool is unchanged exactly when its
//! [digest](ToolDefinition::digest) is (numbers as canonical JSON writes
//! them: `1.0` is `1`), and a changed one always shows at least one
//! difference.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{Map, Number, Value, json};

use crate::admission::summary::{SUMMARY_LINE_MAX, ToolSummary, escape_bounded, shown_tool_name};
use crate::tools::canonical::{canonical_json, write_number};
use crate::tools::tool::{ToolClaims, ToolDefinition};

/// The most cells (removed-side lines × added-side lines, after the common
/// beginning and end are set aside) the description's line diff computes
/// exactly. Past it, the differing middle is reported as removed, then
/// added: still correct, less precise, and linear.
pub const DIFF_CELLS_MAX: usize = 250_000;

/// The most lines of a description's diff kept ([`DescriptionDiff`]); the
/// others are counted.
pub const DIFF_LINES_MAX: usize = 2_000;

/// How deep the schema walk goes; below it, a difference is reported as
/// the whole value changed at that path.
pub const SCHEMA_DEPTH_MAX: usize = 32;

/// The most schema changes kept per tool; the others are counted.
pub const SCHEMA_CHANGES_MAX: usize = 1_000;

/// How many lines of a description's diff and how many schema changes
/// [`Review::text`] shows per tool; the others are counted.
pub const SHOWN_CHANGES_MAX: usize = 40;

/// The most characters of a JSON value [`Review::text`] shows.
pub const SHOWN_VALUE_MAX: usize = 80;

/// What the person reviewed of one tool: what its listed definition is
/// compared with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Baseline {
    /// The definition the person reviewed.
    Definition(ToolDefinition),
    /// Only its pinned digest was kept (a profile written before reviewed
    /// definitions were).
    Pinned {
        /// The tool's name.
        name: String,
        /// Its pinned digest.
        digest: String,
    },
    /// Only its name is trusted: neither its definition nor a pin was kept,
    /// so nothing can be compared.
    Trusted(String),
}

impl Baseline {
    /// The tool's name.
    #[must_use]
    pub fn name(&self) -> &str {
        match self {
            Baseline::Definition(d) => d.name(),
            Baseline::Pinned { name, .. } | Baseline::Trusted(name) => name,
        }
    }

    /// The digest the person reviewed or pinned, when one is known.
    #[must_use]
    pub fn digest(&self) -> Option<String> {
        match self {
            Baseline::Definition(d) => Some(d.digest()),
            Baseline::Pinned { digest, .. } => Some(digest.clone()),
            Baseline::Trusted(_) => None,
        }
    }

    /// The baseline of a profile: every tool it trusts (`allow`), pins or
    /// keeps a reviewed definition of, once, in that order (`allow`'s
    /// order, then the other reviewed definitions', then the other pins').
    /// Each gets its reviewed definition when there is one and it agrees
    /// with the tool's pin (or there is no pin); else its pin; else its
    /// name alone. A reviewed definition that disagrees with its pin is not
    /// what was pinned, and the pin is the standing decision.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use human_plus_core::{Baseline, ToolDefinition};
    ///
    /// let read = ToolDefinition::new("sheet_read", "Read.", serde_json::json!({}))?;
    /// let pins = BTreeMap::from([
    ///     ("sheet_read".to_owned(), read.digest()),
    ///     ("sheet_write".to_owned(), "sha256:5ab496568589a2e1901b1b49c27b22bc".to_owned()),
    /// ]);
    /// let allow = ["sheet_read", "sheet_write", "sheet_erase"].map(String::from);
    /// let baseline = Baseline::from_profile(&allow, &pins, &[read.clone()]);
    /// assert_eq!(baseline[0], Baseline::Definition(read));
    /// assert!(matches!(&baseline[1], Baseline::Pinned { name, .. } if name == "sheet_write"));
    /// assert_eq!(baseline[2], Baseline::Trusted("sheet_erase".into()));
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn from_profile(
        allow: &[String],
        pins: &BTreeMap<String, String>,
        reviewed: &[ToolDefinition],
    ) -> Vec<Baseline> {
        let mut seen = BTreeSet::new();
        let names = allow
            .iter()
            .map(String::as_str)
            .chain(reviewed.iter().map(ToolDefinition::name))
            .chain(pins.keys().map(String::as_str));
        let mut out = Vec::new();
        for name in names {
            if !seen.insert(name) {
                continue;
            }
            let pin = pins.get(name);
            let definition = reviewed
                .iter()
                .find(|d| d.name() == name)
                .filter(|d| pin.is_none_or(|p| *p == d.digest()));
            out.push(match (definition, pin) {
                (Some(d), _) => Baseline::Definition(d.clone()),
                (None, Some(p)) => Baseline::Pinned {
                    name: name.to_owned(),
                    digest: p.clone(),
                },
                (None, None) => Baseline::Trusted(name.to_owned()),
            });
        }
        out
    }
}

/// How one tool compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewStatus {
    /// Listed with the definition the person reviewed (or pinned).
    Unchanged,
    /// Listed with another definition than the one reviewed.
    Changed(ChangeDetail),
    /// Listed, and not in what the person reviewed: not trusted yet.
    New,
    /// Reviewed (trusted, pinned), and no longer listed.
    Gone,
    /// Trusted by name only: listed, but nothing was kept to compare it
    /// with.
    NotComparable,
}

impl ReviewStatus {
    /// A stable name: `unchanged`, `changed`, `new`, `gone` or
    /// `not_comparable`.
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            ReviewStatus::Unchanged => "unchanged",
            ReviewStatus::Changed(_) => "changed",
            ReviewStatus::New => "new",
            ReviewStatus::Gone => "gone",
            ReviewStatus::NotComparable => "not_comparable",
        }
    }
}

/// What is known of a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeDetail {
    /// The difference from the reviewed definition.
    Diff(DefinitionDiff),
    /// Only the reviewed digest was kept: the change cannot be shown, only
    /// the definition listed now.
    DigestOnly,
}

/// One tool of a [`Review`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolReview {
    /// The tool's name (the surface's, or the profile's for a gone tool).
    pub name: String,
    /// How it compares.
    pub status: ReviewStatus,
    /// The definition listed now (`None` when gone).
    pub listed: Option<ToolDefinition>,
    /// The digest reviewed or pinned, when one was kept.
    pub reviewed_digest: Option<String>,
}

/// The difference between two definitions of one tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DefinitionDiff {
    /// The description's line diff (empty when it is the same).
    pub description: DescriptionDiff,
    /// The input schema's changes, in the order the walk met them (empty
    /// when it is the same).
    pub schema: Vec<SchemaChange>,
    /// Schema changes past [`SCHEMA_CHANGES_MAX`], counted, not kept.
    pub schema_left_out: usize,
}

impl DefinitionDiff {
    /// The difference from `before` to `after` (their names are not
    /// compared).
    ///
    /// ```
    /// use human_plus_core::{DefinitionDiff, DiffLine, SchemaChangeKind, ToolDefinition};
    /// use serde_json::json;
    ///
    /// let before = ToolDefinition::new("sheet_set_cell", "Write one cell.",
    ///     json!({"type": "object", "properties": {"address": {"type": "string"}}, "required": ["address"]}))?;
    /// let after = ToolDefinition::new("sheet_set_cell", "Write one cell.\nAlso emails it.",
    ///     json!({"type": "object", "properties": {"address": {"type": "integer"}, "cc": {"type": "string"}},
    ///            "required": ["address", "cc"]}))?;
    /// let diff = DefinitionDiff::between(&before, &after);
    /// assert_eq!(diff.description.lines, [
    ///     DiffLine::Same("Write one cell.".into()),
    ///     DiffLine::Added("Also emails it.".into()),
    /// ]);
    /// let paths: Vec<String> = diff.schema.iter().map(|c| c.path.to_string()).collect();
    /// assert_eq!(paths, ["properties.address.type", "properties.cc", "required"]);
    /// assert_eq!(diff.schema[2].kind, SchemaChangeKind::MemberAdded(json!("cc")));
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn between(before: &ToolDefinition, after: &ToolDefinition) -> Self {
        let description = if before.description() == after.description() {
            DescriptionDiff::default()
        } else {
            DescriptionDiff::between(before.description(), after.description())
        };
        let mut walk = Walk::default();
        walk.schema(before.input_schema(), after.input_schema(), 0);
        DefinitionDiff {
            description,
            schema: walk.changes,
            schema_left_out: walk.left_out,
        }
    }

    /// True when neither the description nor the schema differs.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.description.lines.iter().all(DiffLine::is_same)
            && self.description.left_out == 0
            && self.schema.is_empty()
            && self.schema_left_out == 0
    }
}

/// A description's line diff.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescriptionDiff {
    /// Every line of both descriptions (split at `\n`), in order: kept,
    /// removed or added; at most [`DIFF_LINES_MAX`].
    pub lines: Vec<DiffLine>,
    /// Lines past [`DIFF_LINES_MAX`], counted, not kept.
    pub left_out: usize,
}

impl DescriptionDiff {
    /// The line diff from `before` to `after`, split at `\n` (a `\r` stays
    /// in its line, and is escaped when shown): the longest common
    /// subsequence of lines when the differing middle is at most
    /// [`DIFF_CELLS_MAX`] cells, else that middle removed, then added. Two
    /// texts that differ always give at least one removed or added line.
    ///
    /// ```
    /// use human_plus_core::{DescriptionDiff, DiffLine};
    ///
    /// let d = DescriptionDiff::between("a\nb\nc", "a\nB\nc");
    /// assert_eq!(d.lines, [
    ///     DiffLine::Same("a".into()),
    ///     DiffLine::Removed("b".into()),
    ///     DiffLine::Added("B".into()),
    ///     DiffLine::Same("c".into()),
    /// ]);
    /// ```
    #[must_use]
    pub fn between(before: &str, after: &str) -> Self {
        let a: Vec<&str> = before.split('\n').collect();
        let b: Vec<&str> = after.split('\n').collect();
        let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        let suffix = a[prefix..]
            .iter()
            .rev()
            .zip(b[prefix..].iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        let (ma, mb) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
        let mut out = Lines::default();
        for line in &a[..prefix] {
            out.push(DiffLine::Same((*line).to_owned()));
        }
        if ma.len().saturating_mul(mb.len()) <= DIFF_CELLS_MAX {
            lcs_diff(ma, mb, &mut out);
        } else {
            for line in ma {
                out.push(DiffLine::Removed((*line).to_owned()));
            }
            for line in mb {
                out.push(DiffLine::Added((*line).to_owned()));
            }
        }
        for line in &a[a.len() - suffix..] {
            out.push(DiffLine::Same((*line).to_owned()));
        }
        DescriptionDiff {
            lines: out.lines,
            left_out: out.left_out,
        }
    }
}

/// Lines kept up to [`DIFF_LINES_MAX`], the others counted.
#[derive(Default)]
struct Lines {
    lines: Vec<DiffLine>,
    left_out: usize,
}

impl Lines {
    fn push(&mut self, line: DiffLine) {
        if self.lines.len() < DIFF_LINES_MAX {
            self.lines.push(line);
        } else {
            self.left_out += 1;
        }
    }
}

/// The exact line diff of `a` and `b` (`a.len() * b.len()` within
/// [`DIFF_CELLS_MAX`]): a longest common subsequence table, walked from the
/// start; removals before additions at each change.
fn lcs_diff(a: &[&str], b: &[&str], out: &mut Lines) {
    let (n, m) = (a.len(), b.len());
    let width = m + 1;
    // table[i * width + j]: the LCS length of a[i..] and b[j..].
    let mut table = vec![0u32; (n + 1) * width];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            let here = if a[i] == b[j] {
                table[(i + 1) * width + j + 1] + 1
            } else {
                table[(i + 1) * width + j].max(table[i * width + j + 1])
            };
            table[i * width + j] = here;
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(DiffLine::Same(a[i].to_owned()));
            i += 1;
            j += 1;
        } else if i < n && (j == m || table[(i + 1) * width + j] >= table[i * width + j + 1]) {
            out.push(DiffLine::Removed(a[i].to_owned()));
            i += 1;
        } else {
            out.push(DiffLine::Added(b[j].to_owned()));
            j += 1;
        }
    }
}

/// One line of a description's diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffLine {
    /// In both.
    Same(String),
    /// Only in the reviewed description.
    Removed(String),
    /// Only in the description listed now.
    Added(String),
}

impl DiffLine {
    /// True for a line in both.
    #[must_use]
    pub fn is_same(&self) -> bool {
        matches!(self, DiffLine::Same(_))
    }

    /// The line's text.
    #[must_use]
    pub fn text(&self) -> &str {
        match self {
            DiffLine::Same(t) | DiffLine::Removed(t) | DiffLine::Added(t) => t,
        }
    }
}

/// One step of a path into a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    /// An object member: a keyword, or a property's name.
    Key(String),
    /// An array element (`anyOf`, `oneOf`, `allOf`, `prefixItems`,
    /// `items` given as an array).
    Index(usize),
}

/// A path into an input schema, from its root.
///
/// Written (`Display`) as keys joined by `.` (`properties.address.type`),
/// indices in brackets (`anyOf[1]`), and a key that is not plain (ASCII
/// letters, digits, `_`, `-`, `$`; at most 64 bytes) as a quoted,
/// escaped and bounded string in brackets (`properties["a.b c"]`); the root
/// is `(the schema)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchemaPath(pub Vec<PathSegment>);

impl SchemaPath {
    /// The path as a JSON Pointer (RFC 6901: `/properties/address/type`,
    /// `~` written `~0` and `/` written `~1`), for scripts. Not escaped for
    /// a terminal.
    ///
    /// ```
    /// use human_plus_core::{PathSegment, SchemaPath};
    ///
    /// let p = SchemaPath(vec![PathSegment::Key("properties".into()), PathSegment::Key("a/b~".into()),
    ///     PathSegment::Index(2)]);
    /// assert_eq!(p.pointer(), "/properties/a~1b~0/2");
    /// assert_eq!(p.to_string(), "properties[\"a/b~\"][2]");
    /// ```
    #[must_use]
    pub fn pointer(&self) -> String {
        let mut out = String::new();
        for segment in &self.0 {
            out.push('/');
            match segment {
                PathSegment::Key(k) => out.push_str(&k.replace('~', "~0").replace('/', "~1")),
                PathSegment::Index(i) => {
                    let _ = write!(out, "{i}");
                }
            }
        }
        out
    }

    /// The last key, if the path ends in one.
    fn last_key(&self) -> Option<&str> {
        match self.0.last() {
            Some(PathSegment::Key(k)) => Some(k),
            _ => None,
        }
    }
}

impl std::fmt::Display for SchemaPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(the schema)");
        }
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                PathSegment::Key(k) if is_path_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                PathSegment::Key(k) => {
                    let quoted = serde_json::to_string(k).unwrap_or_default();
                    write!(f, "[{}]", escape_bounded(&quoted, 48))?;
                }
                PathSegment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// A key written bare in a path.
fn is_path_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 64
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'$'))
}

/// One change in an input schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaChange {
    /// Where: the keyword, or the property (`properties.NAME`), that
    /// changed.
    pub path: SchemaPath,
    /// What changed there.
    pub kind: SchemaChangeKind,
}

/// What changed at a schema path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaChangeKind {
    /// A keyword or a property that is new, with its value.
    Added(Value),
    /// A keyword or a property that is gone, with its value.
    Removed(Value),
    /// A value that is different (a `type`, a `default`, any keyword; a
    /// whole subtree past [`SCHEMA_DEPTH_MAX`]; `required` or `enum`
    /// reordered or with repeated members).
    Changed {
        /// The reviewed value.
        before: Value,
        /// The value now.
        after: Value,
    },
    /// A member added to a list keyword (a name to `required`, a value to
    /// `enum`); the path ends with the keyword.
    MemberAdded(Value),
    /// A member removed from a list keyword.
    MemberRemoved(Value),
}

impl SchemaChangeKind {
    /// A stable name: `added`, `removed`, `changed`, `member_added` or
    /// `member_removed`.
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            SchemaChangeKind::Added(_) => "added",
            SchemaChangeKind::Removed(_) => "removed",
            SchemaChangeKind::Changed { .. } => "changed",
            SchemaChangeKind::MemberAdded(_) => "member_added",
            SchemaChangeKind::MemberRemoved(_) => "member_removed",
        }
    }
}

/// Keywords whose value is an object of schemas by name.
const SCHEMA_MAPS: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// Keywords whose value is one schema (or, for `items`, an array of them).
const SCHEMA_ONE: [&str; 12] = [
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedItems",
    "unevaluatedProperties",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];

/// Keywords whose value is an array of schemas.
const SCHEMA_LISTS: [&str; 4] = ["anyOf", "oneOf", "allOf", "prefixItems"];

/// Keywords whose value is a set of members.
const SCHEMA_SETS: [&str; 2] = ["required", "enum"];

/// The schema walk: where it is, and what it found.
#[derive(Default)]
struct Walk {
    path: Vec<PathSegment>,
    changes: Vec<SchemaChange>,
    left_out: usize,
}

impl Walk {
    fn push(&mut self, kind: SchemaChangeKind) {
        if self.changes.len() < SCHEMA_CHANGES_MAX {
            self.changes.push(SchemaChange {
                path: SchemaPath(self.path.clone()),
                kind,
            });
        } else {
            self.left_out += 1;
        }
    }

    fn at<R>(&mut self, segment: PathSegment, f: impl FnOnce(&mut Self) -> R) -> R {
        self.path.push(segment);
        let r = f(self);
        self.path.pop();
        r
    }

    /// Two schemas (any JSON) at the current path.
    fn schema(&mut self, a: &Value, b: &Value, depth: usize) {
        if same(a, b) {
            return;
        }
        match (a, b) {
            (Value::Object(ma), Value::Object(mb)) if depth < SCHEMA_DEPTH_MAX => {
                for (key, x, y) in union(ma, mb) {
                    self.at(PathSegment::Key(key.to_owned()), |w| match (x, y) {
                        (Some(x), None) => w.push(SchemaChangeKind::Removed(x.clone())),
                        (None, Some(y)) => w.push(SchemaChangeKind::Added(y.clone())),
                        (Some(x), Some(y)) => w.keyword(key, x, y, depth),
                        (None, None) => {}
                    });
                }
            }
            _ => self.changed(a, b),
        }
    }

    fn changed(&mut self, a: &Value, b: &Value) {
        self.push(SchemaChangeKind::Changed {
            before: a.clone(),
            after: b.clone(),
        });
    }

    /// Keyword `key`'s two values, at its path, when they differ.
    fn keyword(&mut self, key: &str, x: &Value, y: &Value, depth: usize) {
        if same(x, y) {
            return;
        }
        if depth + 1 >= SCHEMA_DEPTH_MAX {
            self.changed(x, y);
            return;
        }
        match (x, y) {
            (Value::Object(mx), Value::Object(my)) if SCHEMA_MAPS.contains(&key) => {
                for (name, p, q) in union(mx, my) {
                    self.at(PathSegment::Key(name.to_owned()), |w| match (p, q) {
                        (Some(p), None) => w.push(SchemaChangeKind::Removed(p.clone())),
                        (None, Some(q)) => w.push(SchemaChangeKind::Added(q.clone())),
                        (Some(p), Some(q)) => w.schema(p, q, depth + 2),
                        (None, None) => {}
                    });
                }
            }
            (Value::Object(_), Value::Object(_)) if SCHEMA_ONE.contains(&key) => {
                self.schema(x, y, depth + 1);
            }
            (Value::Array(xs), Value::Array(ys))
                if xs.len() == ys.len() && (SCHEMA_LISTS.contains(&key) || key == "items") =>
            {
                for (i, (p, q)) in xs.iter().zip(ys).enumerate() {
                    if !same(p, q) {
                        self.at(PathSegment::Index(i), |w| w.schema(p, q, depth + 2));
                    }
                }
            }
            (Value::Array(xs), Value::Array(ys)) if SCHEMA_SETS.contains(&key) => {
                let canon = |v: &Vec<Value>| -> Vec<(String, Value)> {
                    v.iter().map(|m| (canonical_json(m), m.clone())).collect()
                };
                let (cx, cy) = (canon(xs), canon(ys));
                let kx: BTreeSet<&str> = cx.iter().map(|(c, _)| c.as_str()).collect();
                let ky: BTreeSet<&str> = cy.iter().map(|(c, _)| c.as_str()).collect();
                let mut found = false;
                let mut reported = BTreeSet::new();
                for (c, m) in &cx {
                    if !ky.contains(c.as_str()) && reported.insert(c.as_str()) {
                        self.push(SchemaChangeKind::MemberRemoved(m.clone()));
                        found = true;
                    }
                }
                for (c, m) in &cy {
                    if !kx.contains(c.as_str()) && reported.insert(c.as_str()) {
                        self.push(SchemaChangeKind::MemberAdded(m.clone()));
                        found = true;
                    }
                }
                if !found {
                    // The same members, reordered or repeated.
                    self.changed(x, y);
                }
            }
            _ => self.changed(x, y),
        }
    }
}

/// Every key of `a` (in its order) then every key only in `b`, with each
/// side's value.
fn union<'m>(
    a: &'m Map<String, Value>,
    b: &'m Map<String, Value>,
) -> Vec<(&'m str, Option<&'m Value>, Option<&'m Value>)> {
    let mut out: Vec<_> = a
        .iter()
        .map(|(k, v)| (k.as_str(), Some(v), b.get(k)))
        .collect();
    out.extend(
        b.iter()
            .filter(|(k, _)| !a.contains_key(*k))
            .map(|(k, v)| (k.as_str(), None, Some(v))),
    );
    out
}

/// Equal as canonical JSON writes them (so as the digest sees them): `1.0`
/// and `1` are the same number.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || number_text(x) == number_text(y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn number_text(n: &Number) -> String {
    let mut out = String::new();
    write_number(n, &mut out);
    out
}

/// What changed between the definitions a person reviewed and the ones
/// listed now, tool by tool ([`review_tools`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Review {
    /// Every tool listed now, in the listing's order (a repeated name
    /// once, its first definition), then every reviewed tool no longer
    /// listed, in the baseline's order.
    pub tools: Vec<ToolReview>,
}

/// Compares what a person reviewed (`baseline`; a repeated name counts
/// once, its first entry) with the definitions listed now (`listed`, e.g.
/// [`crate::Discovery::tools`] under a policy that withholds nothing it
/// should review: every tool, no pins).
///
/// A listed tool is [unchanged](ReviewStatus::Unchanged) when its digest
/// equals the reviewed definition's (or the pinned digest),
/// [changed](ReviewStatus::Changed) otherwise (with its
/// [`DefinitionDiff`] when the definition was kept), [new](ReviewStatus::New)
/// when it is not in the baseline, and
/// [not comparable](ReviewStatus::NotComparable) when only its name was
/// trusted; a baseline tool not listed is [gone](ReviewStatus::Gone).
///
/// ```
/// use human_plus_core::{Baseline, ReviewStatus, ToolDefinition, review_tools};
/// use serde_json::json;
///
/// let read = ToolDefinition::new("sheet_read", "Read.", json!({}))?;
/// let write = ToolDefinition::new("sheet_write", "Write.", json!({}))?;
/// let erase = ToolDefinition::new("sheet_erase", "Erase.", json!({}))?;
/// let write_now = ToolDefinition::new("sheet_write", "Write, and email.", json!({}))?;
/// let email = ToolDefinition::new("sheet_email", "Email.", json!({}))?;
///
/// let baseline = [read.clone(), write, erase].map(Baseline::Definition);
/// let review = review_tools(&baseline, &[read, write_now, email]);
/// let statuses: Vec<(&str, &str)> =
///     review.tools.iter().map(|t| (t.name.as_str(), t.status.as_str())).collect();
/// assert_eq!(statuses, [
///     ("sheet_read", "unchanged"),
///     ("sheet_write", "changed"),
///     ("sheet_email", "new"),
///     ("sheet_erase", "gone"),
/// ]);
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[must_use]
pub fn review_tools(baseline: &[Baseline], listed: &[ToolDefinition]) -> Review {
    let mut by_name: BTreeMap<&str, &Baseline> = BTreeMap::new();
    for b in baseline {
        by_name.entry(b.name()).or_insert(b);
    }
    let mut listed_names = BTreeSet::new();
    let mut tools = Vec::new();
    for tool in listed {
        if !listed_names.insert(tool.name()) {
            continue;
        }
        let base = by_name.get(tool.name()).copied();
        let digest = tool.digest();
        let status = match base {
            None => ReviewStatus::New,
            Some(Baseline::Trusted(_)) => ReviewStatus::NotComparable,
            Some(Baseline::Definition(d)) if d.digest() == digest => ReviewStatus::Unchanged,
            Some(Baseline::Definition(d)) => {
                ReviewStatus::Changed(ChangeDetail::Diff(DefinitionDiff::between(d, tool)))
            }
            Some(Baseline::Pinned { digest: pin, .. }) if *pin == digest => ReviewStatus::Unchanged,
            Some(Baseline::Pinned { .. }) => ReviewStatus::Changed(ChangeDetail::DigestOnly),
        };
        tools.push(ToolReview {
            name: tool.name().to_owned(),
            status,
            listed: Some(tool.clone()),
            reviewed_digest: base.and_then(Baseline::digest),
        });
    }
    let mut gone = BTreeSet::new();
    for b in baseline {
        if !listed_names.contains(b.name()) && gone.insert(b.name()) {
            tools.push(ToolReview {
                name: b.name().to_owned(),
                status: ReviewStatus::Gone,
                listed: None,
                reviewed_digest: b.digest(),
            });
        }
    }
    Review { tools }
}

impl Review {
    /// The tools whose status is `status` (compared by
    /// [`ReviewStatus::as_str`]).
    pub fn with_status<'r>(&'r self, status: &'r str) -> impl Iterator<Item = &'r ToolReview> {
        self.tools
            .iter()
            .filter(move |t| t.status.as_str() == status)
    }

    /// True when nothing is changed, new or gone (tools that are not
    /// comparable aside).
    #[must_use]
    pub fn is_unchanged(&self) -> bool {
        self.tools.iter().all(|t| {
            matches!(
                t.status,
                ReviewStatus::Unchanged | ReviewStatus::NotComparable
            )
        })
    }

    /// The review as a terminal shows it: a count line, then the changed
    /// tools (the digest reviewed and now; the description's diff with a
    /// line of context around each change; the schema's changes, one per
    /// line), the new ones (with their [`ToolSummary`]), the gone ones, the
    /// ones that cannot be compared (with their summary), and the
    /// unchanged names. `claims` are what the surface claims now
    /// ([`crate::Discovery::claims`]), shown labelled as its claims.
    ///
    /// Every string from the surface or a profile is escaped (control,
    /// invisible and direction characters) and bounded
    /// ([`escape_bounded`]); names that are not well formed are quoted; at
    /// most [`SHOWN_CHANGES_MAX`] diff lines and schema changes are shown
    /// per tool, the others counted. A surface's text never stands inside
    /// one of Human+'s sentences: it is on a line of its own after a
    /// `-`/`+`/` ` marker, or after a path and a colon, as JSON.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use human_plus_core::{Baseline, ToolDefinition, review_tools};
    /// use serde_json::json;
    ///
    /// let before = ToolDefinition::new("sheet_set_cell", "Write one cell.",
    ///     json!({"type": "object", "properties": {}}))?;
    /// let after = ToolDefinition::new("sheet_set_cell", "Write one cell.\u{202e}",
    ///     json!({"type": "object", "properties": {"cc": {"type": "string"}}}))?;
    /// let text = review_tools(&[Baseline::Definition(before)], &[after]).text(&BTreeMap::new());
    /// assert!(text.contains("        - Write one cell.\n        + Write one cell.\\u{202e}\n"));
    /// assert!(text.contains("        added properties.cc: {\"type\":\"string\"}\n"));
    /// assert!(!text.contains('\u{202e}'));
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn text(&self, claims: &BTreeMap<String, ToolClaims>) -> String {
        let count = |s: &str| self.with_status(s).count();
        let mut out = String::new();
        let _ = write!(
            out,
            "{} changed, {} new, {} gone, {} unchanged",
            count("changed"),
            count("new"),
            count("gone"),
            count("unchanged")
        );
        if count("not_comparable") > 0 {
            let _ = write!(out, ", {} not comparable", count("not_comparable"));
        }
        out.push('\n');
        let claims_of = |name: &str| claims.get(name).copied().unwrap_or_default();
        let section = |out: &mut String, status: &str, title: &str| {
            let n = count(status);
            if n > 0 {
                let _ = writeln!(out, "{title} ({n}):");
            }
        };

        section(&mut out, "changed", "changed since reviewed");
        for t in self.with_status("changed") {
            let _ = writeln!(
                out,
                "  {}  {} (reviewed: {})",
                shown_tool_name(&t.name),
                t.listed
                    .as_ref()
                    .map(ToolDefinition::digest)
                    .unwrap_or_default(),
                t.reviewed_digest
                    .as_deref()
                    .map_or_else(|| "unknown".to_owned(), |d| escape_bounded(d, 48))
            );
            match &t.status {
                ReviewStatus::Changed(ChangeDetail::Diff(diff)) => render_diff(&mut out, diff),
                _ => {
                    out.push_str(
                        "      only the pinned digest was kept, so the change cannot be shown; the definition now:\n",
                    );
                    if let Some(tool) = &t.listed {
                        for line in ToolSummary::of(tool, ToolClaims::default()).lines() {
                            let _ = writeln!(out, "        {line}");
                        }
                    }
                }
            }
            let labels = claims_of(&t.name).labels();
            if !labels.is_empty() {
                let _ = writeln!(out, "      the surface claims: {}", labels.join(", "));
            }
        }

        for (status, title) in [
            ("new", "new on the surface, not trusted yet"),
            (
                "not_comparable",
                "trusted by name only, nothing kept to compare with",
            ),
        ] {
            section(&mut out, status, title);
            for t in self.with_status(status) {
                let Some(tool) = &t.listed else { continue };
                let _ = writeln!(out, "  {}  {}", shown_tool_name(&t.name), tool.digest());
                for line in ToolSummary::of(tool, claims_of(&t.name)).lines() {
                    let _ = writeln!(out, "      {line}");
                }
            }
        }

        section(&mut out, "gone", "gone: reviewed, no longer listed");
        for t in self.with_status("gone") {
            let _ = writeln!(out, "  {}", shown_tool_name(&t.name));
        }

        let unchanged: Vec<String> = self
            .with_status("unchanged")
            .map(|t| shown_tool_name(&t.name))
            .collect();
        if !unchanged.is_empty() {
            let _ = writeln!(out, "unchanged ({}):", unchanged.len());
            let mut line = String::from(" ");
            for name in unchanged {
                if line.len() > 1 && line.len() + name.len() + 2 > 100 {
                    let _ = writeln!(out, "{line}");
                    line = String::from(" ");
                }
                line.push(' ');
                line.push_str(&name);
            }
            let _ = writeln!(out, "{line}");
        }
        out
    }

    /// The review as JSON, for scripts: `{"tools": [{"name", "status",
    /// "digest", "reviewedDigest", "description": [{"line", "change":
    /// "same"|"removed"|"added"}], "descriptionLeftOut", "schema":
    /// [{"path" (a JSON Pointer), "change", "value" | "before"/"after"}],
    /// "schemaLeftOut"}]}`; `digest` is absent for a gone tool,
    /// `reviewedDigest` when none was kept, the diff fields unless the
    /// definition was kept and changed. Strings are as the surface wrote
    /// them (JSON-escaped only).
    ///
    /// ```
    /// use human_plus_core::{Baseline, ToolDefinition, review_tools};
    /// use serde_json::json;
    ///
    /// let before = ToolDefinition::new("t", "a", json!({"required": ["x"]}))?;
    /// let after = ToolDefinition::new("t", "a", json!({"required": []}))?;
    /// let doc = review_tools(&[Baseline::Definition(before)], &[after]).to_json();
    /// assert_eq!(doc["tools"][0]["status"], "changed");
    /// assert_eq!(doc["tools"][0]["schema"][0], json!({"path": "/required", "change": "member_removed", "value": "x"}));
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn to_json(&self) -> Value {
        let tools: Vec<Value> = self
            .tools
            .iter()
            .map(|t| {
                let mut doc = json!({"name": t.name, "status": t.status.as_str()});
                if let Some(tool) = &t.listed {
                    doc["digest"] = json!(tool.digest());
                }
                if let Some(d) = &t.reviewed_digest {
                    doc["reviewedDigest"] = json!(d);
                }
                if let ReviewStatus::Changed(ChangeDetail::Diff(diff)) = &t.status {
                    doc["description"] = diff
                        .description
                        .lines
                        .iter()
                        .map(|l| {
                            let change = match l {
                                DiffLine::Same(_) => "same",
                                DiffLine::Removed(_) => "removed",
                                DiffLine::Added(_) => "added",
                            };
                            json!({"line": l.text(), "change": change})
                        })
                        .collect();
                    doc["descriptionLeftOut"] = json!(diff.description.left_out);
                    doc["schema"] = diff
                        .schema
                        .iter()
                        .map(|c| {
                            let mut change =
                                json!({"path": c.path.pointer(), "change": c.kind.as_str()});
                            match &c.kind {
                                SchemaChangeKind::Added(v)
                                | SchemaChangeKind::Removed(v)
                                | SchemaChangeKind::MemberAdded(v)
                                | SchemaChangeKind::MemberRemoved(v) => change["value"] = v.clone(),
                                SchemaChangeKind::Changed { before, after } => {
                                    change["before"] = before.clone();
                                    change["after"] = after.clone();
                                }
                            }
                            change
                        })
                        .collect();
                    doc["schemaLeftOut"] = json!(diff.schema_left_out);
                }
                doc
            })
            .collect();
        json!({ "tools": tools })
    }
}

/// A JSON value as a terminal shows it: compact JSON, escaped, bounded.
fn shown_value(v: &Value) -> String {
    escape_bounded(
        &serde_json::to_string(v).unwrap_or_default(),
        SHOWN_VALUE_MAX,
    )
}

/// A changed definition's difference, indented under its tool.
fn render_diff(out: &mut String, diff: &DefinitionDiff) {
    let lines = &diff.description.lines;
    if lines.iter().any(|l| !l.is_same()) || diff.description.left_out > 0 {
        out.push_str("      description:\n");
        // A kept line is shown next to a change (one line of context);
        // runs of others are counted.
        let near_change = |i: usize| {
            i.checked_sub(1)
                .and_then(|p| lines.get(p))
                .is_some_and(|l| !l.is_same())
                || lines.get(i + 1).is_some_and(|l| !l.is_same())
        };
        let mut shown = 0usize;
        let mut skipped = 0usize;
        let mut left = 0usize;
        for (i, line) in lines.iter().enumerate() {
            let marker = match line {
                DiffLine::Same(_) if !near_change(i) => {
                    skipped += 1;
                    continue;
                }
                DiffLine::Same(_) => ' ',
                DiffLine::Removed(_) => '-',
                DiffLine::Added(_) => '+',
            };
            if shown >= SHOWN_CHANGES_MAX {
                left += 1;
                continue;
            }
            if skipped > 0 {
                let _ = writeln!(
                    out,
                    "        \u{2026} {skipped} unchanged line{}",
                    plural(skipped)
                );
                skipped = 0;
            }
            let _ = writeln!(
                out,
                "        {marker} {}",
                escape_bounded(line.text(), SUMMARY_LINE_MAX)
            );
            shown += 1;
        }
        if skipped > 0 && left == 0 {
            let _ = writeln!(
                out,
                "        \u{2026} {skipped} unchanged line{}",
                plural(skipped)
            );
        }
        let left = left + diff.description.left_out;
        if left > 0 {
            let _ = writeln!(
                out,
                "        \u{2026} and {left} more line{} of the diff",
                plural(left)
            );
        }
    }
    if !diff.schema.is_empty() || diff.schema_left_out > 0 {
        out.push_str("      input schema:\n");
        for c in diff.schema.iter().take(SHOWN_CHANGES_MAX) {
            let _ = writeln!(out, "        {}", schema_line(c));
        }
        let left = diff.schema.len().saturating_sub(SHOWN_CHANGES_MAX) + diff.schema_left_out;
        if left > 0 {
            let _ = writeln!(
                out,
                "        \u{2026} and {left} more change{}",
                plural(left)
            );
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// One schema change in Human+'s words: the path (escaped), then the
/// value(s) as escaped, bounded JSON.
fn schema_line(c: &SchemaChange) -> String {
    let path = c.path.to_string();
    match &c.kind {
        SchemaChangeKind::Added(v) => format!("added {path}: {}", shown_value(v)),
        SchemaChangeKind::Removed(v) => format!("removed {path}: {}", shown_value(v)),
        SchemaChangeKind::Changed { before, after } => format!(
            "changed {path}: {} \u{2192} {}",
            shown_value(before),
            shown_value(after)
        ),
        SchemaChangeKind::MemberAdded(v) => {
            format!("added to {path}: {}", shown_value(v))
        }
        SchemaChangeKind::MemberRemoved(v) => {
            format!("removed from {path}: {}", shown_value(v))
        }
    }
}

impl SchemaChange {
    /// True when the change is at a keyword named `keyword` (the path's
    /// last key), e.g. `type`, `required`, `default`.
    #[must_use]
    pub fn is_at(&self, keyword: &str) -> bool {
        self.path.last_key() == Some(keyword)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn def(description: &str, schema: Value) -> ToolDefinition {
        ToolDefinition::new("sheet_tool", description, schema).unwrap()
    }

    fn key(k: &str) -> PathSegment {
        PathSegment::Key(k.to_owned())
    }

    fn path(keys: &[&str]) -> SchemaPath {
        SchemaPath(keys.iter().map(|k| key(k)).collect())
    }

    fn only_change(before: &ToolDefinition, after: &ToolDefinition) -> SchemaChange {
        let diff = DefinitionDiff::between(before, after);
        assert_eq!(diff.schema.len(), 1, "{diff:#?}");
        diff.schema[0].clone()
    }

    #[test]
    fn identical_and_canonically_equal_definitions_are_unchanged() {
        let a = def("Read.", json!({"type": "object", "multipleOf": 1}));
        let b = ToolDefinition::new(
            "sheet_tool",
            "Read.",
            serde_json::from_str(r#"{"multipleOf": 1.0, "type": "object"}"#).unwrap(),
        )
        .unwrap();
        assert_eq!(a.digest(), b.digest());
        let r = review_tools(&[Baseline::Definition(a.clone())], &[b]);
        assert_eq!(r.tools[0].status, ReviewStatus::Unchanged);
        assert!(r.is_unchanged());
        assert!(DefinitionDiff::between(&a, &a).is_empty());
    }

    #[test]
    fn every_kind_of_schema_change_at_its_path() {
        let base = json!({
            "type": "object",
            "properties": {
                "address": {"type": "string", "default": "A1"},
                "mode": {"type": "string", "enum": ["one", "two"]},
                "nested": {"type": "object", "properties": {"deep": {"type": "integer", "minimum": 1}}}
            },
            "required": ["address"]
        });
        let before = def("d", base.clone());
        let edit = |f: &dyn Fn(&mut Value)| {
            let mut v = base.clone();
            f(&mut v);
            def("d", v)
        };
        let c = only_change(
            &before,
            &edit(&|v| v["properties"]["cc"] = json!({"type": "string"})),
        );
        assert_eq!(c.path, path(&["properties", "cc"]));
        assert_eq!(c.kind, SchemaChangeKind::Added(json!({"type": "string"})));
        let c = only_change(
            &before,
            &edit(&|v| {
                v["properties"].as_object_mut().unwrap().remove("mode");
            }),
        );
        assert_eq!(c.path, path(&["properties", "mode"]));
        assert!(matches!(c.kind, SchemaChangeKind::Removed(_)));
        let c = only_change(
            &before,
            &edit(&|v| v["properties"]["address"]["type"] = json!("integer")),
        );
        assert_eq!(c.path, path(&["properties", "address", "type"]));
        assert_eq!(
            c.kind,
            SchemaChangeKind::Changed {
                before: json!("string"),
                after: json!("integer")
            }
        );
        assert!(c.is_at("type"));
        let c = only_change(
            &before,
            &edit(&|v| v["required"] = json!(["address", "mode"])),
        );
        assert_eq!(
            (c.path.clone(), c.kind),
            (
                path(&["required"]),
                SchemaChangeKind::MemberAdded(json!("mode"))
            )
        );
        let c = only_change(&before, &edit(&|v| v["required"] = json!([])));
        assert_eq!(c.kind, SchemaChangeKind::MemberRemoved(json!("address")));
        let c = only_change(
            &before,
            &edit(&|v| v["properties"]["mode"]["enum"] = json!(["one", "two", "all"])),
        );
        assert_eq!(
            (c.path.clone(), c.kind),
            (
                path(&["properties", "mode", "enum"]),
                SchemaChangeKind::MemberAdded(json!("all"))
            )
        );
        let c = only_change(
            &before,
            &edit(&|v| v["properties"]["address"]["default"] = json!("B4")),
        );
        assert_eq!(c.path, path(&["properties", "address", "default"]));
        assert!(c.is_at("default"));
        let c = only_change(
            &before,
            &edit(&|v| v["properties"]["nested"]["properties"]["deep"]["minimum"] = json!(0)),
        );
        assert_eq!(
            c.path,
            path(&["properties", "nested", "properties", "deep", "minimum"])
        );
        let c = only_change(
            &before,
            &edit(&|v| v["additionalProperties"] = json!(false)),
        );
        assert_eq!(
            (c.path.clone(), c.kind),
            (
                path(&["additionalProperties"]),
                SchemaChangeKind::Added(json!(false))
            )
        );
        // Reordered: the same members, still a change, at the keyword.
        let c = only_change(
            &before,
            &edit(&|v| v["properties"]["mode"]["enum"] = json!(["two", "one"])),
        );
        assert_eq!(c.path, path(&["properties", "mode", "enum"]));
        assert!(matches!(c.kind, SchemaChangeKind::Changed { .. }));
        // A property named like a keyword is a property.
        let before = def("d", json!({"properties": {"type": {"type": "string"}}}));
        let after = def("d", json!({"properties": {"type": {"type": "number"}}}));
        assert_eq!(
            only_change(&before, &after).path,
            path(&["properties", "type", "type"])
        );
        // Schemas in lists, by index.
        let before = def(
            "d",
            json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
        );
        let after = def(
            "d",
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
        );
        assert_eq!(
            only_change(&before, &after).path,
            SchemaPath(vec![key("anyOf"), PathSegment::Index(1), key("type")])
        );
    }

    #[test]
    fn baselines_new_gone_and_not_comparable() {
        let read = def("Read.", json!({}));
        let pinned_now = ToolDefinition::new("sheet_pinned", "Now.", json!({})).unwrap();
        let pinned_was = ToolDefinition::new("sheet_pinned", "Was.", json!({})).unwrap();
        let named = ToolDefinition::new("sheet_named", "N.", json!({})).unwrap();
        let new = ToolDefinition::new("sheet_new", "New.", json!({})).unwrap();
        let baseline = [
            Baseline::Definition(read.clone()),
            Baseline::Pinned {
                name: "sheet_pinned".into(),
                digest: pinned_was.digest(),
            },
            Baseline::Trusted("sheet_named".into()),
            Baseline::Trusted("sheet_gone".into()),
            Baseline::Trusted("sheet_gone".into()),
        ];
        let r = review_tools(
            &baseline,
            &[new.clone(), read.clone(), pinned_now, named, new],
        );
        let got: Vec<(&str, &str)> = r
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.status.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("sheet_new", "new"),
                ("sheet_tool", "unchanged"),
                ("sheet_pinned", "changed"),
                ("sheet_named", "not_comparable"),
                ("sheet_gone", "gone"),
            ]
        );
        assert_eq!(
            r.tools[2].status,
            ReviewStatus::Changed(ChangeDetail::DigestOnly)
        );
        assert_eq!(r.tools[2].reviewed_digest, Some(pinned_was.digest()));
        assert!(!r.is_unchanged());
        let text = r.text(&BTreeMap::new());
        assert!(
            text.starts_with("1 changed, 1 new, 1 gone, 1 unchanged, 1 not comparable\n"),
            "{text}"
        );
        assert!(text.contains("only the pinned digest was kept"), "{text}");
        assert!(
            text.contains("new on the surface, not trusted yet (1):\n  sheet_new  sha256:"),
            "{text}"
        );
        assert!(
            text.contains("gone: reviewed, no longer listed (1):\n  sheet_gone\n"),
            "{text}"
        );
        assert!(text.contains("unchanged (1):\n  sheet_tool\n"), "{text}");
    }

    #[test]
    fn from_profile_prefers_a_definition_that_agrees_with_its_pin() {
        let read = def("Read.", json!({}));
        let other = def("Other.", json!({}));
        let pins = BTreeMap::from([("sheet_tool".to_owned(), other.digest())]);
        let b = Baseline::from_profile(&["sheet_tool".to_owned()], &pins, &[read]);
        assert_eq!(
            b,
            [Baseline::Pinned {
                name: "sheet_tool".into(),
                digest: other.digest()
            }]
        );
    }

    /// Characters a line must never hold: controls (a line break aside),
    /// invisible and direction characters.
    fn assert_printable(text: &str) {
        for line in text.lines() {
            for c in line.chars() {
                assert!(
                    crate::values::plain::escape_controls(c.encode_utf8(&mut [0u8; 4]))
                        .chars()
                        .count()
                        == 1,
                    "{c:?} in {line:?}"
                );
            }
            assert!(line.chars().count() <= 400, "{line:?}");
        }
    }

    #[test]
    fn hostile_strings_are_escaped_bounded_and_quoted() {
        let evil = "x\u{1b}]52;c;cHduZWQ=\u{7}\u{202e}\u{200b}\r\u{1b}[2K";
        let before = ToolDefinition::new(
            "sheet_tool",
            format!("Read.\n{evil}"),
            json!({"properties": {"a": {"enum": ["x"]}}, "required": ["a"]}),
        )
        .unwrap();
        let long = "y".repeat(10_000);
        let mut props = Map::new();
        props.insert(format!("b.c \"{evil}"), json!({"default": evil}));
        props.insert("a".into(), json!({"enum": ["x", evil, long.clone()]}));
        let after = ToolDefinition::new(
            "sheet_tool",
            format!("Read.\n{long}{evil}\n</untrusted-tool-output>"),
            json!({"properties": props, "required": ["a", evil], evil: long}),
        )
        .unwrap();
        let baseline = [
            Baseline::Definition(before),
            Baseline::Pinned {
                name: format!("gone{evil}"),
                digest: format!("sha256:{evil}"),
            },
        ];
        let new = ToolDefinition::new(format!("new {evil}"), evil, json!({})).unwrap();
        let r = review_tools(&baseline, &[after, new]);
        let text = r.text(&BTreeMap::new());
        assert_printable(&text);
        assert!(
            text.contains("added to properties.a.enum: \"x\\u001b]52"),
            "{text}"
        );
        assert!(
            text.contains("added properties[\"b.c \\\"x\\u001b]52;c;cHduZWQ=\\u0007\\u{202e}"),
            "{text}"
        );
        assert!(text.contains("  \"gone"), "{text}");
        assert!(text.contains("  \"new x"), "{text}");
        // No surface text inside one of Human+'s sentences: the only lines
        // carrying it start with a marker, a path, or a quoted name.
        for line in text.lines() {
            if line.contains("untrusted-tool-output") {
                assert!(line.starts_with("        + "), "{line}");
            }
        }
        let doc = r.to_json();
        assert_eq!(doc["tools"][0]["status"], "changed");
    }

    #[test]
    fn hostile_sizes_are_bounded() {
        // 40,000 lines all different: the coarse diff, bounded storage.
        let a: String = (0..40_000).map(|i| format!("a{i}\n")).collect();
        let b: String = (0..40_000).map(|i| format!("b{i}\n")).collect();
        let d = DescriptionDiff::between(&a, &b);
        assert_eq!(d.lines.len(), DIFF_LINES_MAX);
        assert_eq!(d.lines.len() + d.left_out, 80_001);
        // A schema nested past the depth bound, and thousands of changes.
        let mut deep = json!({"type": "string"});
        let mut deeper = json!({"type": "integer"});
        for _ in 0..100 {
            deep = json!({"properties": {"p": deep}});
            deeper = json!({"properties": {"p": deeper}});
        }
        let diff = DefinitionDiff::between(&def("d", deep), &def("d", deeper));
        assert_eq!(diff.schema.len(), 1);
        assert!(diff.schema[0].path.0.len() <= SCHEMA_DEPTH_MAX + 1);
        let many: Map<String, Value> = (0..5_000).map(|i| (format!("p{i}"), json!({}))).collect();
        let diff =
            DefinitionDiff::between(&def("d", json!({})), &def("d", json!({"properties": many})));
        assert_eq!(diff.schema.len(), 1);
        let mut props = Map::new();
        for i in 0..5_000 {
            props.insert(format!("p{i}"), json!({}));
        }
        let diff = DefinitionDiff::between(
            &def("d", json!({"properties": {}})),
            &def("d", json!({"properties": props})),
        );
        assert_eq!(diff.schema.len() + diff.schema_left_out, 5_000);
        assert_eq!(diff.schema.len(), SCHEMA_CHANGES_MAX);
        let r = review_tools(
            &[Baseline::Definition(def("d", json!({"properties": {}})))],
            &[def("d", json!({"properties": props}))],
        );
        let text = r.text(&BTreeMap::new());
        assert!(text.lines().count() < 60, "{text}");
        assert!(text.contains("\u{2026} and 4960 more changes"), "{text}");
    }

    /// A schema as tools write them: types, descriptions, defaults, enums,
    /// required names and nested properties (some named like keywords).
    fn arb_schema() -> impl Strategy<Value = Value> {
        let name = prop_oneof![
            "[a-c]{1,2}",
            Just("type".to_owned()),
            Just("required".to_owned()),
            Just("a.b c".to_owned()),
        ];
        let leaf = (
            prop::option::of(prop_oneof![Just("string"), Just("integer"), Just("object")]),
            prop::option::of("[a-z ]{0,8}"),
            prop::option::of(0i64..5),
            prop::option::of(prop::collection::btree_set(0i64..6, 1..4)),
        )
            .prop_map(|(t, d, def, en)| {
                let mut m = Map::new();
                if let Some(t) = t {
                    m.insert("type".into(), json!(t));
                }
                if let Some(d) = d {
                    m.insert("description".into(), json!(d));
                }
                if let Some(v) = def {
                    m.insert("default".into(), json!(v));
                }
                if let Some(en) = en {
                    m.insert("enum".into(), json!(en.into_iter().collect::<Vec<_>>()));
                }
                Value::Object(m)
            });
        leaf.prop_recursive(3, 24, 4, move |inner| {
            (
                inner,
                prop::collection::btree_map(name.clone(), inner_clone(), 0..4),
                any::<u8>(),
            )
                .prop_map(|(mut node, props, req)| {
                    let names: Vec<String> = props.keys().cloned().collect();
                    if !props.is_empty() {
                        node["properties"] = Value::Object(props.into_iter().collect());
                    }
                    let required: Vec<&String> = names
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| req & (1 << i) != 0)
                        .map(|(_, n)| n)
                        .collect();
                    if !required.is_empty() {
                        node["required"] = json!(required);
                    }
                    node
                })
        })
    }

    /// The leaf schemas used inside `properties` (kept small).
    fn inner_clone() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!({})),
            Just(json!({"type": "string"})),
            Just(json!({"type": "integer", "default": 1})),
            Just(json!({"enum": [1, 2]})),
        ]
    }

    /// Every path to a schema object: the root, and each property's.
    fn schema_paths(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(at.clone());
        if let Some(Value::Object(props)) = v.get("properties") {
            for (k, p) in props {
                at.push("properties".into());
                at.push(k.clone());
                schema_paths(p, at, out);
                at.pop();
                at.pop();
            }
        }
    }

    fn node_mut<'v>(v: &'v mut Value, at: &[String]) -> &'v mut Value {
        at.iter().fold(v, |v, k| &mut v[k.as_str()])
    }

    proptest! {
        /// The same definition is unchanged, with an empty difference.
        #[test]
        fn identical_definitions_are_unchanged(schema in arb_schema(), d in "[a-z\n]{0,20}") {
            let t = def(&d, schema);
            let r = review_tools(&[Baseline::Definition(t.clone())], std::slice::from_ref(&t));
            prop_assert_eq!(&r.tools[0].status, &ReviewStatus::Unchanged);
            prop_assert!(DefinitionDiff::between(&t, &t).is_empty());
        }

        /// One edit anywhere in a schema is reported once, at its path.
        #[test]
        fn a_single_edit_is_reported_at_its_path(
            schema in arb_schema(),
            at in any::<prop::sample::Index>(),
            edit in 0u8..7,
        ) {
            let mut paths = Vec::new();
            schema_paths(&schema, &mut Vec::new(), &mut paths);
            let node_path = at.get(&paths).clone();
            let mut after = schema.clone();
            let node = node_mut(&mut after, &node_path);
            let mut expect: Vec<String> = node_path.clone();
            let kind: &str;
            match edit {
                0 => {
                    let was = node.get("type").cloned();
                    node["type"] = json!(if was == Some(json!("array")) { "null" } else { "array" });
                    expect.push("type".into());
                    kind = if was.is_some() { "changed" } else { "added" };
                }
                1 => {
                    if node.get("properties").is_some() {
                        node["properties"]["zz_new"] = json!({"type": "string"});
                        expect.extend(["properties".into(), "zz_new".into()]);
                    } else {
                        node["properties"] = json!({"zz_new": {"type": "string"}});
                        expect.push("properties".into());
                    }
                    kind = "added";
                }
                2 => {
                    let Some(Value::Object(props)) = node.get_mut("properties") else {
                        return Ok(());
                    };
                    let first = props.keys().next().cloned().unwrap();
                    props.remove(&first);
                    if props.is_empty() {
                        node.as_object_mut().unwrap().remove("properties");
                        expect.push("properties".into());
                    } else {
                        expect.extend(["properties".into(), first]);
                    }
                    kind = "removed";
                }
                3 => {
                    kind = if let Some(Value::Array(req)) = node.get_mut("required") {
                        req.push(json!("zz_req"));
                        "member_added"
                    } else {
                        node["required"] = json!(["zz_req"]);
                        "added"
                    };
                    expect.push("required".into());
                }
                4 => {
                    kind = if let Some(Value::Array(en)) = node.get_mut("enum") {
                        en.push(json!(999));
                        "member_added"
                    } else {
                        node["enum"] = json!([999]);
                        "added"
                    };
                    expect.push("enum".into());
                }
                5 => {
                    kind = if node.get("default").is_some() { "changed" } else { "added" };
                    node["default"] = json!("zz_default");
                    expect.push("default".into());
                }
                _ => {
                    node["minLength"] = json!(3);
                    expect.push("minLength".into());
                    kind = "added";
                }
            }
            let diff = DefinitionDiff::between(&def("d", schema), &def("d", after));
            prop_assert_eq!(diff.schema.len(), 1, "{:#?}", diff);
            let change = &diff.schema[0];
            let expected = SchemaPath(expect.iter().map(|k| key(k)).collect());
            prop_assert_eq!(&change.path, &expected);
            prop_assert_eq!(change.kind.as_str(), kind);
            prop_assert!(diff.description.lines.iter().all(DiffLine::is_same));
        }

        /// Digests differ exactly when the difference is not empty, and the
        /// text of any review is printable and bounded.
        #[test]
        fn changed_exactly_when_the_digest_differs(
            a in arb_schema(), b in arb_schema(),
            da in "[ab\n\u{202e}\u{1b}]{0,12}", db in "[ab\n\u{202e}\u{1b}]{0,12}",
        ) {
            let (x, y) = (def(&da, a), def(&db, b));
            let diff = DefinitionDiff::between(&x, &y);
            prop_assert_eq!(x.digest() == y.digest(), diff.is_empty());
            let r = review_tools(&[Baseline::Definition(x)], &[y]);
            assert_printable(&r.text(&BTreeMap::new()));
        }

        /// The line diff holds both texts: its kept and removed lines are the
        /// first, its kept and added lines the second.
        #[test]
        fn the_line_diff_rebuilds_both_texts(a in "[abc\n]{0,40}", b in "[abc\n]{0,40}") {
            let d = DescriptionDiff::between(&a, &b);
            let before: Vec<&str> = d.lines.iter().filter(|l| !matches!(l, DiffLine::Added(_))).map(DiffLine::text).collect();
            let after: Vec<&str> = d.lines.iter().filter(|l| !matches!(l, DiffLine::Removed(_))).map(DiffLine::text).collect();
            prop_assert_eq!(before.join("\n"), a.clone());
            prop_assert_eq!(after.join("\n"), b.clone());
            prop_assert_eq!(a == b, d.lines.iter().all(DiffLine::is_same));
        }
    }
}
