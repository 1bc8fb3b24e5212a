//! Pins: `--pin NAME=sha256:...` and pins files.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::output::exit::Failure;

/// Parses `--pin NAME=sha256:...`.
///
/// # Errors
/// A usage failure for a malformed pin.
pub fn parse_pin(raw: &str) -> Result<(String, String), Failure> {
    let Some((name, digest)) = raw.split_once('=') else {
        return Err(Failure::usage(format!(
            "--pin {raw}: expected NAME=sha256:<32 hex digits>"
        )));
    };
    check_digest(name, digest)?;
    Ok((name.to_owned(), digest.to_owned()))
}

fn check_digest(name: &str, digest: &str) -> Result<(), Failure> {
    let hex = digest.strip_prefix(human_plus_core::DIGEST_PREFIX);
    let ok = hex.is_some_and(|h| {
        h.len() == 32
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if name.is_empty() || !ok {
        return Err(Failure::usage(format!(
            "pin for [{}]: expected sha256: followed by 32 lowercase hex digits (see `human-plus digest`)",
            crate::output::exit::printable(name)
        )));
    }
    Ok(())
}

/// Reads a pins file: `{"name": "sha256:..."}` (what `digest --json`
/// prints), a list of `{"name", "digest"}`, or `{"tools": [...]}` of those
/// (what `tools --json` and `probe --json` print).
///
/// # Errors
/// A usage failure when the file cannot be read or has another shape.
pub fn read_pins(path: &Path) -> Result<BTreeMap<String, String>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("cannot read --pins {}: {e}", path.display())))?;
    pins_from_text(&text, path)
}

/// The pins in `text`, read from the file at `path` (named in the
/// failure), in one of [`read_pins`]'s shapes.
///
/// # Errors
/// A usage failure when it is not JSON or has another shape.
pub fn pins_from_text(text: &str, path: &Path) -> Result<BTreeMap<String, String>, Failure> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Failure::usage(format!("pins {}: invalid JSON: {e}", path.display())))?;
    pins_from_json(&value).map_err(|m| Failure::usage(format!("pins {}: {m}", path.display())))
}

/// The pins in a JSON value of one of [`read_pins`]'s shapes.
///
/// # Errors
/// A message saying what was expected.
pub fn pins_from_json(value: &Value) -> Result<BTreeMap<String, String>, String> {
    let entries = match value {
        Value::Object(map) if map.get("tools").is_some_and(Value::is_array) => map
            .get("tools")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        Value::Object(map) => {
            let mut pins = BTreeMap::new();
            for (name, digest) in map {
                let Some(digest) = digest.as_str() else {
                    return Err(format!("the pin of [{name}] is not a string"));
                };
                check_digest(name, digest).map_err(|f| f.message)?;
                pins.insert(name.clone(), digest.to_owned());
            }
            return Ok(pins);
        }
        Value::Array(list) => list.clone(),
        _ => {
            return Err(
                "expected {\"name\": \"sha256:...\"} or a list of {\"name\", \"digest\"}".into(),
            );
        }
    };
    let mut pins = BTreeMap::new();
    for entry in entries {
        let (Some(name), Some(digest)) = (
            entry.get("name").and_then(Value::as_str),
            entry.get("digest").and_then(Value::as_str),
        ) else {
            return Err("every entry needs a string name and digest".into());
        };
        check_digest(name, digest).map_err(|f| f.message)?;
        pins.insert(name.to_owned(), digest.to_owned());
    }
    Ok(pins)
}
