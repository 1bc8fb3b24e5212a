//! Surface revisions, conflict classification, and what has been observed
//! of a surface's conflict detection.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::values::scalar::{Members, Scalar};

/// The keys a revision is read from, in order. For each key `_meta` is
/// looked at before the top level.
pub const REVISION_KEYS: [&str; 5] = [
    "revision",
    "surfaceRevision",
    "surface_revision",
    "version",
    "etag",
];

/// The longest revision marker accepted, in bytes.
pub const MAX_REVISION_BYTES: usize = 512;

/// The largest integer a float can spell exactly (2^53 − 1).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Trims the characters PHP's `trim()` removes: space, `\t`, `\n`, `\r`,
/// NUL and vertical tab. The reference trims markers, handles and labels
/// with exactly this set.
#[must_use]
pub fn trim_ascii_php(s: &str) -> &str {
    // Every trimmed character is one ASCII byte, and no byte of a
    // multi-byte character is ASCII: the cut points found on the bytes are
    // character boundaries.
    let trimmed = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0 | 0x0B);
    let bytes = s.as_bytes();
    let start = bytes
        .iter()
        .position(|b| !trimmed(b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !trimmed(b))
        .map_or(start, |i| i + 1);
    s.get(start..end).unwrap_or_default()
}

/// Why a revision marker was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RevisionError {
    /// The marker was blank.
    #[error("A surface revision cannot be empty; omit it instead of sending a blank marker.")]
    Empty,
    /// The marker was longer than 512 bytes.
    #[error(
        "A surface revision marker is longer than 512 bytes; a revision is an identifier, not a payload."
    )]
    TooLong,
}

/// An opaque marker the surface minted for the state a result showed.
///
/// It is never parsed, ordered or compared here: the surface decides
/// whether it is stale. It remembers which tool's result carried it, for
/// the refusal a model reads.
///
/// ```
/// use human_plus_core::SurfaceRevision;
///
/// let r = SurfaceRevision::observed("  r42 ", "sheet_read").unwrap();
/// assert_eq!(r.token(), "r42");
/// assert_eq!(r.observed_from(), "sheet_read");
/// assert!(SurfaceRevision::observed("   ", "t").is_err());
/// assert!(SurfaceRevision::observed("x".repeat(513), "t").is_err());
/// assert!(SurfaceRevision::observed("x".repeat(512), "t").is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RevisionWire")]
pub struct SurfaceRevision {
    token: String,
    observed_from: String,
}

#[derive(Deserialize)]
struct RevisionWire {
    token: String,
    #[serde(default = "unknown_tool")]
    observed_from: String,
}

fn unknown_tool() -> String {
    "unknown".to_owned()
}

impl TryFrom<RevisionWire> for SurfaceRevision {
    type Error = RevisionError;

    fn try_from(w: RevisionWire) -> Result<Self, RevisionError> {
        SurfaceRevision::observed(w.token, w.observed_from)
    }
}

impl SurfaceRevision {
    /// A marker `token` (trimmed) observed in the result of `observed_from`.
    ///
    /// # Errors
    /// [`RevisionError::Empty`] for a blank marker,
    /// [`RevisionError::TooLong`] for one over 512 bytes.
    pub fn observed(
        token: impl AsRef<str>,
        observed_from: impl Into<String>,
    ) -> Result<Self, RevisionError> {
        let token = trim_ascii_php(token.as_ref());
        if token.is_empty() {
            return Err(RevisionError::Empty);
        }
        if token.len() > MAX_REVISION_BYTES {
            return Err(RevisionError::TooLong);
        }
        Ok(SurfaceRevision {
            token: token.to_owned(),
            observed_from: observed_from.into(),
        })
    }

    /// Reads the revision a result carries, if any.
    ///
    /// Keys are tried in [`REVISION_KEYS`] order, `_meta` before the top
    /// level for each key. A non-blank string is a marker; an integer (or a
    /// float that is a whole number no larger than 2^53 − 1) is its decimal
    /// text; anything else (booleans, fractions, objects, blank strings) is
    /// skipped in favour of the next candidate.
    ///
    /// ```
    /// use human_plus_core::SurfaceRevision;
    /// use serde_json::json;
    ///
    /// let r = |v| SurfaceRevision::from_result(&v, "t").unwrap().map(|r| r.token().to_owned());
    /// assert_eq!(r(json!({"_meta": {"revision": "r9"}})), Some("r9".into()));
    /// assert_eq!(r(json!({"etag": "r9"})), Some("r9".into()));
    /// assert_eq!(r(json!({"version": 9})), Some("9".into()));
    /// assert_eq!(r(json!({"_meta": {"revision": 1.0}})), Some("1".into()));
    /// assert_eq!(r(json!({"_meta": {"revision": true}})), None);
    /// assert_eq!(r(json!({"revision": "top", "_meta": {"version": "meta"}})), Some("top".into()));
    /// ```
    ///
    /// # Errors
    /// [`RevisionError::TooLong`] when the first usable candidate is over
    /// 512 bytes; there is no fallback to a later key.
    pub fn from_result(
        result: &Value,
        observed_from: &str,
    ) -> Result<Option<SurfaceRevision>, RevisionError> {
        let Some(top) = result.as_object() else {
            return Ok(None);
        };
        let meta = top.get("_meta").and_then(Value::as_object);
        revision_among([meta, Some(top)], observed_from)
    }

    /// The marker.
    #[must_use]
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The tool whose result carried it.
    #[must_use]
    pub fn observed_from(&self) -> &str {
        &self.observed_from
    }
}

impl fmt::Display for SurfaceRevision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.token)
    }
}

/// The revision of a result given as its `_meta` and its top level (in
/// that order): keys tried in [`REVISION_KEYS`] order, `sources` in order
/// for each key, the first candidate that qualifies decides
/// ([`SurfaceRevision::from_result`] documents the rule).
pub(crate) fn revision_among<M: Members>(
    sources: [Option<&M>; 2],
    observed_from: &str,
) -> Result<Option<SurfaceRevision>, RevisionError> {
    for key in REVISION_KEYS {
        for source in sources.into_iter().flatten() {
            let Some(value) = source.scalar(key) else {
                continue;
            };
            if let Some(token) = revision_text(&value) {
                return SurfaceRevision::observed(token, observed_from).map(Some);
            }
        }
    }
    Ok(None)
}

/// The text of a revision candidate, or `None` when it does not qualify.
fn revision_text<'s>(value: &'s Scalar<'_>) -> Option<Cow<'s, str>> {
    match value {
        Scalar::Str(s) if !trim_ascii_php(s).is_empty() => Some(Cow::Borrowed(s)),
        Scalar::Int(i) => Some(Cow::Owned(i.to_string())),
        // Beyond i64: the reference's JSON decoder makes it a float past
        // 2^53, which it refuses.
        Scalar::BigUint => None,
        Scalar::Float(f) => (f.is_finite() && f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER)
            .then(|| Cow::Owned(format!("{}", *f as i64))),
        _ => None,
    }
}

/// The members of a stale refusal's `data` that name the surface's current
/// revision, in the order they are tried.
pub const CURRENT_REVISION_KEYS: [&str; 3] = ["current", "currentRevision", "current_revision"];

/// The surface's current revision as a stale refusal names it, if it does:
/// the JSON-RPC `error`'s `data.current` (or `currentRevision`,
/// `current_revision`), read as a result's revision is (a non-blank string,
/// or an integer as its decimal text; at most 512 bytes, else ignored).
/// Nothing else in the error is read: a surface's `data.revision` could as
/// well be the stale pin it refused.
///
/// ```
/// use human_plus_core::refusal_current;
/// use serde_json::json;
///
/// let current = |v| refusal_current(&v, "sheet_set_cell").map(|r| r.token().to_owned());
/// assert_eq!(current(json!({"code": 409, "data": {"code": "revision_stale", "current": "r7"}})), Some("r7".into()));
/// assert_eq!(current(json!({"code": 409, "data": {"currentRevision": 12}})), Some("12".into()));
/// assert_eq!(current(json!({"code": 409, "data": {"revision": "r5"}})), None);
/// assert_eq!(current(json!({"code": 409, "data": {"current": ""}})), None);
/// assert_eq!(current(json!({"code": 409})), None);
/// ```
#[must_use]
pub fn refusal_current(error: &Value, observed_from: &str) -> Option<SurfaceRevision> {
    let data = error.get("data")?.as_object()?;
    CURRENT_REVISION_KEYS.iter().find_map(|key| {
        let value = data.scalar(key)?;
        let token = revision_text(&value)?;
        SurfaceRevision::observed(token, observed_from).ok()
    })
}

/// The strings that mark a JSON-RPC error as a stale-revision rejection
/// (compared after trimming and ASCII-lowercasing).
pub const CONFLICT_REASONS: [&str; 5] = [
    "conflict",
    "revision_mismatch",
    "revision_stale",
    "stale_revision",
    "precondition_failed",
];

/// Whether a JSON-RPC `error` object says the call's revision pin was
/// stale: its `code`, `data.code` or `data.reason` is the integer 409 or
/// one of [`CONFLICT_REASONS`].
///
/// The string `"409"` and the float `409.0` do not count, as in the
/// reference. (An HTTP 409 from the relay is recognised separately.)
///
/// ```
/// use human_plus_core::rejects_revision;
/// use serde_json::json;
///
/// assert!(rejects_revision(&json!({"code": 409})));
/// assert!(rejects_revision(&json!({"code": -32000, "data": {"code": "revision_mismatch"}})));
/// assert!(rejects_revision(&json!({"code": -32000, "data": {"reason": " Conflict "}})));
/// assert!(!rejects_revision(&json!({"code": "409"})));
/// assert!(!rejects_revision(&json!({"code": -32601, "message": "Method not found"})));
/// ```
#[must_use]
pub fn rejects_revision(error: &Value) -> bool {
    let Some(error) = error.as_object() else {
        return false;
    };
    let data = error.get("data").and_then(Value::as_object);
    let candidates = [
        error.get("code"),
        data.and_then(|d| d.get("code")),
        data.and_then(|d| d.get("reason")),
    ];
    candidates.into_iter().flatten().any(|c| match c {
        Value::Number(n) => n.as_i64() == Some(409) && !n.is_f64(),
        Value::String(s) => {
            let s = trim_ascii_php(s).to_ascii_lowercase();
            CONFLICT_REASONS.contains(&s.as_str())
        }
        _ => false,
    })
}

/// What has been OBSERVED of a surface's conflict detection: never what it
/// claims.
///
/// `Minted` is not protection: a surface can mint a revision on every
/// result and read the pin nowhere. Only `Enforced` is proven, because it
/// happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictDetection {
    /// The surface has not answered a call yet.
    #[default]
    NotObserved,
    /// It answered and minted nothing: a concurrent edit will be lost.
    Unavailable,
    /// It mints, so every call is pinned; enforcement is not observable.
    Minted,
    /// It refused a stale pin.
    Enforced,
}

impl ConflictDetection {
    /// The wire value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ConflictDetection::NotObserved => "not_observed",
            ConflictDetection::Unavailable => "unavailable",
            ConflictDetection::Minted => "minted",
            ConflictDetection::Enforced => "enforced",
        }
    }

    /// True only for `Unavailable`.
    #[must_use]
    pub fn is_unprotected(self) -> bool {
        self == ConflictDetection::Unavailable
    }

    /// True only for `Enforced`.
    #[must_use]
    pub fn is_proven(self) -> bool {
        self == ConflictDetection::Enforced
    }

    /// One sentence saying what is known.
    ///
    /// ```
    /// use human_plus_core::ConflictDetection;
    /// assert!(ConflictDetection::Minted.describe().contains("not observable"));
    /// ```
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            ConflictDetection::NotObserved => {
                "The surface has not answered a call yet, so nothing is known about conflict detection."
            }
            ConflictDetection::Unavailable => {
                "The surface mints no revision, so writes are unpinned and a concurrent edit will be lost silently."
            }
            ConflictDetection::Minted => {
                "The surface mints revisions and every call is pinned. Whether it ENFORCES the pin is not observable from here."
            }
            ConflictDetection::Enforced => {
                "The surface has refused a stale pin, so enforcement is proven rather than assumed."
            }
        }
    }
}

impl fmt::Display for ConflictDetection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    proptest! {
        /// The byte trim cuts exactly where a `char` trim of PHP's set does.
        #[test]
        fn the_byte_trim_is_the_char_trim(
            s in "[ \t\n\r\u{0}\u{b}\u{c}\u{85}\u{a0}\u{2028}aé😀]{0,12}",
        ) {
            let by_char =
                s.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\0' | '\x0B'));
            prop_assert_eq!(trim_ascii_php(&s), by_char);
        }
    }

    fn tok(v: Value) -> Option<String> {
        SurfaceRevision::from_result(&v, "t")
            .unwrap()
            .map(|r| r.token)
    }

    #[test]
    fn reference_revision_table() {
        assert_eq!(tok(json!({"_meta":{"revision":"r9"}})), Some("r9".into()));
        assert_eq!(tok(json!({"revision":"r9"})), Some("r9".into()));
        assert_eq!(tok(json!({"surfaceRevision":"r9"})), Some("r9".into()));
        assert_eq!(tok(json!({"surface_revision":"r9"})), Some("r9".into()));
        assert_eq!(tok(json!({"etag":"r9"})), Some("r9".into()));
        assert_eq!(tok(json!({"version":9})), Some("9".into()));
        assert_eq!(tok(json!({"revision":41})), Some("41".into()));
    }

    #[test]
    fn numbers_follow_the_reference() {
        let parse = |s: &str| tok(serde_json::from_str(s).unwrap());
        assert_eq!(parse(r#"{"revision":1.0}"#), Some("1".into()));
        assert_eq!(parse(r#"{"revision":1e2}"#), Some("100".into()));
        assert_eq!(parse(r#"{"revision":-0.0}"#), Some("0".into()));
        assert_eq!(parse(r#"{"revision":1.5}"#), None);
        assert_eq!(parse(r#"{"revision":1e20}"#), None);
        assert_eq!(
            parse(r#"{"revision":9007199254740993}"#),
            Some("9007199254740993".into())
        );
        assert_eq!(parse(r#"{"revision":18446744073709551615}"#), None);
        assert_eq!(
            parse(r#"{"revision":9007199254740991.0}"#),
            Some("9007199254740991".into())
        );
    }

    #[test]
    fn precedence_is_key_major_meta_first() {
        assert_eq!(
            tok(json!({"revision":"top","_meta":{"revision":"meta"}})),
            Some("meta".into())
        );
        assert_eq!(
            tok(json!({"_meta":{"revision":true},"revision":"top"})),
            Some("top".into())
        );
        assert_eq!(
            tok(json!({"_meta":{"revision":"   "},"etag":"e"})),
            Some("e".into())
        );
        assert_eq!(tok(json!({"_meta":"nope","version":"v"})), Some("v".into()));
        assert_eq!(tok(json!(["revision"])), None);
        assert_eq!(tok(json!({})), None);
    }

    #[test]
    fn an_oversized_marker_is_an_error_not_a_fallback() {
        let v = json!({"_meta":{"revision":"x".repeat(513)},"etag":"e"});
        assert_eq!(
            SurfaceRevision::from_result(&v, "t"),
            Err(RevisionError::TooLong)
        );
    }

    #[test]
    fn conflict_signals() {
        for e in [
            json!({"code":409}),
            json!({"code":"conflict"}),
            json!({"code":"REVISION_MISMATCH"}),
            json!({"code":-32000,"data":{"code":"revision_stale"}}),
            json!({"code":-32000,"data":{"code":409}}),
            json!({"code":-32000,"data":{"reason":"stale_revision"}}),
            json!({"code":-32000,"data":{"reason":"precondition_failed"}}),
            json!({"code":-32000,"message":"stale","data":{"code":"revision_mismatch"}}),
        ] {
            assert!(rejects_revision(&e), "{e}");
        }
        for e in [
            json!({"code":"409"}),
            json!({"code":409.0}),
            json!({"code":-32601}),
            json!({"message":"conflict"}),
            json!({"data":"conflict"}),
            json!("conflict"),
            json!({"code":true}),
        ] {
            assert!(!rejects_revision(&e), "{e}");
        }
    }

    #[test]
    fn detection_predicates() {
        assert!(ConflictDetection::Unavailable.is_unprotected());
        assert!(!ConflictDetection::Minted.is_unprotected());
        assert!(ConflictDetection::Enforced.is_proven());
        assert!(!ConflictDetection::Minted.is_proven());
        assert_eq!(ConflictDetection::default(), ConflictDetection::NotObserved);
    }
}
