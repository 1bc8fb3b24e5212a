//! `human-plus digest`: the digests of tool definitions, offline. Every
//! digest is the core's [`ToolDefinition::digest`]; nothing here hashes.

use std::io::Read;
use std::path::Path;

use human_plus_core::ToolDefinition;
use serde_json::{Map, Value};

use crate::output::exit::{Failure, printable};

/// The definitions in `value`: one definition (`{"name", ...}`), a list of
/// them, a `tools/list` result (`{"tools": [...]}`), or a JSON-RPC reply
/// carrying one (`{"jsonrpc", "id", "result": {"tools": [...]}}`). Each
/// entry is read with [`ToolDefinition::from_listing`].
///
/// # Errors
/// A message naming the entry and the core's code when an entry is not a
/// usable definition, or when the value has none of these shapes.
pub fn definitions(value: &Value) -> Result<Vec<ToolDefinition>, String> {
    let entries: &[Value] = match value {
        Value::Array(list) => list,
        Value::Object(map) => {
            if let Some(error) = map.get("error").filter(|e| !e.is_null()) {
                return Err(format!(
                    "the input is a JSON-RPC error, not a tools/list result: {}",
                    printable(&error.to_string())
                ));
            }
            if let Some(result) = map.get("result") {
                return definitions(result);
            }
            match map.get("tools") {
                Some(Value::Array(list)) => list,
                Some(_) => return Err("`tools` must be a list of tool definitions".into()),
                None if map.contains_key("name") => std::slice::from_ref(value),
                None => {
                    return Err(
                        "expected a tool definition, a list of them, a tools/list result or a JSON-RPC reply carrying one"
                            .into(),
                    );
                }
            }
        }
        _ => {
            return Err(
                "expected a tool definition, a list of them, a tools/list result or a JSON-RPC reply carrying one"
                    .into(),
            );
        }
    };
    entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            ToolDefinition::from_listing(entry)
                .map_err(|e| format!("entry {}: {} ({})", i + 1, e, e.code()))
        })
        .collect()
}

/// The `NAME sha256:...` lines.
#[must_use]
pub fn lines(defs: &[ToolDefinition]) -> String {
    defs.iter()
        .map(|d| format!("{} {}\n", printable(d.name()), d.digest()))
        .collect()
}

/// The `{"name": "sha256:..."}` object (a `--pins` file).
///
/// # Errors
/// A message when two definitions share a name (a pin is per name).
pub fn json(defs: &[ToolDefinition]) -> Result<String, String> {
    let mut map = Map::new();
    for d in defs {
        if map
            .insert(d.name().to_owned(), Value::String(d.digest()))
            .is_some()
        {
            return Err(format!(
                "two definitions are named [{}]; a pin is per name",
                printable(d.name())
            ));
        }
    }
    Ok(format!("{}\n", Value::Object(map)))
}

/// Runs `digest` on a file, or stdin for `None` or `-`; returns stdout.
///
/// # Errors
/// A usage failure when the input cannot be read or parsed.
pub fn run(input: Option<&Path>, as_json: bool) -> Result<String, Failure> {
    let text = match input {
        Some(path) if path != Path::new("-") => std::fs::read_to_string(path)
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?,
        _ => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Failure::usage(format!("cannot read stdin: {e}")))?;
            s
        }
    };
    let value: Value =
        serde_json::from_str(&text).map_err(|e| Failure::usage(format!("invalid JSON: {e}")))?;
    let defs = definitions(&value).map_err(Failure::usage)?;
    if as_json {
        json(&defs).map_err(Failure::usage)
    } else {
        Ok(lines(&defs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const WRITE: &str = "sha256:5ab496568589a2e1901b1b49c27b22bc";
    const PING: &str = "sha256:ac221a90693dc4f393b6c732d1699db1";

    fn write() -> Value {
        json!({"name": "surface_write", "description": "Write to the surface.", "inputSchema": {"type": "object"}})
    }

    fn ping() -> Value {
        json!({"name": "surface_ping", "description": "Ping.", "inputSchema": {}})
    }

    #[test]
    fn every_shape_gives_the_parity_digests() {
        let shapes = [
            json!([write(), ping()]),
            json!({"tools": [write(), ping()]}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [write(), ping()]}}),
        ];
        for shape in shapes {
            let defs = definitions(&shape).unwrap();
            assert_eq!(
                lines(&defs),
                format!("surface_write {WRITE}\nsurface_ping {PING}\n")
            );
        }
        assert_eq!(
            lines(&definitions(&write()).unwrap()),
            format!("surface_write {WRITE}\n")
        );
    }

    #[test]
    fn json_is_a_pins_file() {
        let defs = definitions(&json!([write(), ping()])).unwrap();
        let out: Value = serde_json::from_str(&json(&defs).unwrap()).unwrap();
        assert_eq!(out, json!({"surface_write": WRITE, "surface_ping": PING}));
        assert!(json(&definitions(&json!([write(), write()])).unwrap()).is_err());
    }

    #[test]
    fn bad_input_names_the_entry_and_code() {
        let e = definitions(&json!([write(), {"name": "x", "inputSchema": []}])).unwrap_err();
        assert!(e.contains("entry 2") && e.contains("protocol_error"), "{e}");
        assert!(definitions(&json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -1}})).is_err());
        assert!(definitions(&json!("x")).is_err());
        assert!(definitions(&json!({"tools": 3})).is_err());
    }
}
