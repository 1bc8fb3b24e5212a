//! Revision extraction and conflict classification.
//!
//! Input: byte 0 = mode, the rest a JSON value (text, or built from the
//! bytes).
//!
//! Properties:
//! - `refusal_current` (a stale refusal's `data.current`,
//!   `currentRevision`, `current_revision`) equals an independent reading of
//!   its rule;
//! - `SurfaceRevision::from_result` never panics; a returned token is
//!   non-empty, ≤ 512 bytes, trimmed, and remembers its tool; an error is
//!   only `TooLong`; a non-object has no revision;
//! - `SurfaceRevision::observed` accepts exactly the non-blank markers of
//!   at most 512 bytes once trimmed;
//! - `rejects_revision` never panics and agrees with an independent
//!   reading of the rule (integer 409, or a conflict reason, in `code`,
//!   `data.code` or `data.reason`);
//! - deserialising a `SurfaceRevision` from any JSON never panics and
//!   keeps the invariants.

#![no_main]

use human_plus_core::{
    CONFLICT_REASONS, CURRENT_REVISION_KEYS, ConflictDetection, MAX_REVISION_BYTES, RevisionError,
    SurfaceRevision, refusal_current, rejects_revision, trim_ascii_php,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn check(r: &SurfaceRevision) {
    assert!(!r.token().is_empty());
    assert!(r.token().len() <= MAX_REVISION_BYTES);
    assert_eq!(trim_ascii_php(r.token()), r.token());
}

fn oracle(error: &Value) -> bool {
    let Some(o) = error.as_object() else {
        return false;
    };
    let data = o.get("data").and_then(Value::as_object);
    [
        o.get("code"),
        data.and_then(|d| d.get("code")),
        data.and_then(|d| d.get("reason")),
    ]
    .into_iter()
    .flatten()
    .any(|c| match c {
        Value::Number(n) => !n.is_f64() && n.as_i64() == Some(409),
        Value::String(s) => {
            let t = s
                .trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r' | '\0' | '\x0B'))
                .to_ascii_lowercase();
            CONFLICT_REASONS.iter().any(|r| *r == t)
        }
        _ => false,
    })
}

/// The current revision a refusal names, read independently: the first of
/// `current`, `currentRevision`, `current_revision` in its `data` that is a
/// non-blank string (trimmed) or an integer (as the reference reads it: a
/// JSON integer in the signed 64-bit range, or an integral float within
/// 2^53), at most 512 bytes.
fn current_oracle(e: &Value) -> Option<String> {
    let data = e.get("data")?.as_object()?;
    for key in CURRENT_REVISION_KEYS {
        let token = match data.get(key) {
            Some(Value::String(s)) if !trim_ascii_php(s).is_empty() => trim_ascii_php(s).to_owned(),
            Some(Value::Number(n)) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => i.to_string(),
                (None, Some(_), _) => continue,
                (None, None, Some(f))
                    if f.is_finite() && f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_991.0 =>
                {
                    format!("{}", f as i64)
                }
                _ => continue,
            },
            _ => continue,
        };
        if token.len() <= MAX_REVISION_BYTES {
            return Some(token);
        }
    }
    None
}

fuzz_target!(|data: &[u8]| {
    let (mode, rest) = data.split_first().unwrap_or((&0, &[]));
    let value = human_plus_fuzz::json_from_bytes(rest);

    match SurfaceRevision::from_result(&value, "tool_x") {
        Ok(Some(r)) => {
            check(&r);
            assert_eq!(r.observed_from(), "tool_x");
            assert!(value.is_object());
        }
        Ok(None) => {}
        Err(e) => {
            assert_eq!(e, RevisionError::TooLong);
            assert!(value.is_object());
        }
    }

    assert_eq!(rejects_revision(&value), oracle(&value), "rejects_revision");
    if let Some(e) = value.get("error") {
        assert_eq!(rejects_revision(e), oracle(e));
    }

    if let Ok(r) = serde_json::from_value::<SurfaceRevision>(value.clone()) {
        check(&r);
    }

    // A stale refusal's current revision: `refusal_current` against an
    // independent reading of its rule, on the value and on its `error`.
    for e in [Some(&value), value.get("error")].into_iter().flatten() {
        let got = refusal_current(e, "t").map(|r| r.token().to_owned());
        assert_eq!(got, current_oracle(e), "refusal_current on {e}");
    }

    // The conflict-detection states and the revision's `Display`.
    for c in [
        ConflictDetection::NotObserved,
        ConflictDetection::Unavailable,
        ConflictDetection::Minted,
        ConflictDetection::Enforced,
    ] {
        assert_eq!(c.to_string(), c.as_str());
        assert!(!c.describe().is_empty());
        assert_eq!(c.is_unprotected(), c == ConflictDetection::Unavailable);
        assert_eq!(c.is_proven(), c == ConflictDetection::Enforced);
    }

    if mode % 2 == 1 {
        let raw = String::from_utf8_lossy(rest);
        let t = trim_ascii_php(&raw);
        match SurfaceRevision::observed(&*raw, "t") {
            Ok(r) => {
                check(&r);
                assert_eq!(r.token(), t);
                assert_eq!(r.to_string(), t);
            }
            Err(RevisionError::Empty) => assert!(t.is_empty()),
            Err(RevisionError::TooLong) => assert!(t.len() > MAX_REVISION_BYTES),
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
});
