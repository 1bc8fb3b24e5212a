//! Tool definitions as the surface lists them, and their digests.
//!
//! A [`ToolDefinition`] is what one entry of the surface's `tools/list`
//! answer says about a tool: its name, its description and its input schema.
//! All three are untrusted. Only local trust ([`crate::TrustPolicy`])
//! decides whether a model ever sees the tool, and the [digest] of the three
//! is what a pin compares against.
//!
//! [digest]: ToolDefinition::digest

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::entropy::hex;
use crate::error::{Error, ProtocolError};
use crate::tools::canonical::{write_canonical, write_string};

/// The prefix of every tool digest.
pub const DIGEST_PREFIX: &str = "sha256:";

/// One tool the surface offers: name, description and input schema.
///
/// The fields are private so the invariants hold: the name is a string that
/// is not blank (it is kept raw, untrimmed: local trust judges the exact
/// name), and the input schema is always a JSON object (`{}` when the
/// surface declared none). The surface's other fields (`title`,
/// `annotations`, `outputSchema`, ...) are dropped: nothing the surface
/// says about its own tools may widen trust, and they are not pin material.
///
/// On the wire (serde) it is `{"name", "description", "inputSchema"}`,
/// MCP's own names for a tool (what saved profiles and pins files hold);
/// deserializing applies [`ToolDefinition::from_listing`]'s rules. A
/// [`Discovery`](crate::Discovery) writes its tools in snake_case, with
/// their digests.
///
/// ```
/// use human_plus_core::ToolDefinition;
/// use serde_json::json;
///
/// let tool = ToolDefinition::from_listing(&json!({
///     "name": "surface_write",
///     "description": "Write to the surface.",
///     "inputSchema": {"type": "object"},
///     "annotations": {"readOnlyHint": true}
/// }))?;
/// assert_eq!(tool.name(), "surface_write");
/// assert_eq!(tool.digest(), "sha256:5ab496568589a2e1901b1b49c27b22bc");
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Value", rename_all = "camelCase")]
pub struct ToolDefinition {
    name: String,
    description: String,
    input_schema: Value,
}

impl ToolDefinition {
    /// A definition from its parts.
    ///
    /// `input_schema` may be `null` (read as `{}`) or a JSON object.
    ///
    /// # Errors
    /// [`ProtocolError::ToolWithoutName`] when `name` is blank (empty after
    /// trimming ASCII space, `\t \n \r \0 \x0B`);
    /// [`ProtocolError::MalformedToolSchema`] when `input_schema` is neither
    /// `null` nor an object.
    ///
    /// ```
    /// use human_plus_core::ToolDefinition;
    /// use serde_json::json;
    ///
    /// let ping = ToolDefinition::new("surface_ping", "Ping.", json!(null))?;
    /// assert_eq!(ping.input_schema(), &json!({}));
    /// assert_eq!(ping.digest(), "sha256:ac221a90693dc4f393b6c732d1699db1");
    /// assert!(ToolDefinition::new("x", "", json!([])).is_err());
    /// assert!(ToolDefinition::new(" \n", "", json!({})).is_err());
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Result<Self, Error> {
        let name = name.into();
        if is_blank(&name) {
            return Err(Error::Protocol(ProtocolError::ToolWithoutName));
        }
        let input_schema = match input_schema {
            Value::Null => Value::Object(Map::new()),
            Value::Object(map) => Value::Object(map),
            _ => return Err(Error::Protocol(ProtocolError::MalformedToolSchema)),
        };
        Ok(ToolDefinition {
            name,
            description: description.into(),
            input_schema,
        })
    }

    /// Reads one entry of a `tools/list` answer's `tools` array.
    ///
    /// - `name` must be a string that is not blank (it is stored raw);
    /// - `inputSchema` missing or `null` is `{}`; anything else but an object
    ///   is refused;
    /// - `description` is used when it is a string, else it is `""`;
    /// - every other field is ignored.
    ///
    /// # Errors
    /// [`ProtocolError::ToolWithoutName`] when the entry is not an object or
    /// its name is missing, not a string or blank;
    /// [`ProtocolError::MalformedToolSchema`] when `inputSchema` is present,
    /// not `null` and not an object.
    ///
    /// ```
    /// use human_plus_core::{Error, ProtocolError, ToolDefinition};
    /// use serde_json::json;
    ///
    /// let t = ToolDefinition::from_listing(&json!({"name": " sheet_read ", "description": 7}))?;
    /// assert_eq!((t.name(), t.description()), (" sheet_read ", ""));
    /// assert_eq!(
    ///     ToolDefinition::from_listing(&json!({"name": "x", "inputSchema": []})),
    ///     Err(Error::Protocol(ProtocolError::MalformedToolSchema))
    /// );
    /// assert_eq!(
    ///     ToolDefinition::from_listing(&json!("sheet_read")),
    ///     Err(Error::Protocol(ProtocolError::ToolWithoutName))
    /// );
    /// # Ok::<(), Error>(())
    /// ```
    pub fn from_listing(entry: &Value) -> Result<Self, Error> {
        let name = match entry.get("name") {
            Some(Value::String(name)) if !is_blank(name) => name.clone(),
            _ => return Err(Error::Protocol(ProtocolError::ToolWithoutName)),
        };
        let description = match entry.get("description") {
            Some(Value::String(d)) => d.clone(),
            _ => String::new(),
        };
        let input_schema = match entry.get("inputSchema") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(Value::Object(map)) => Value::Object(map.clone()),
            Some(_) => return Err(Error::Protocol(ProtocolError::MalformedToolSchema)),
        };
        Ok(ToolDefinition {
            name,
            description,
            input_schema,
        })
    }

    /// The tool's name, exactly as the surface sent it.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tool's description (`""` when the surface sent none). Untrusted
    /// text: a model reads it, so pin the tools that matter.
    #[must_use]
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The tool's input schema; always a JSON object.
    #[must_use]
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// The canonical JSON (RFC 8785) of `{name, description, inputSchema}`:
    /// the material [`ToolDefinition::digest`] hashes.
    ///
    /// ```
    /// use human_plus_core::ToolDefinition;
    ///
    /// let t = ToolDefinition::new("surface_write", "Write to the surface.", serde_json::json!({"type": "object"}))?;
    /// assert_eq!(
    ///     t.canonical_material(),
    ///     r#"{"description":"Write to the surface.","inputSchema":{"type":"object"},"name":"surface_write"}"#
    /// );
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn canonical_material(&self) -> String {
        canonical_material(&self.name, &self.description, &self.input_schema)
    }

    /// The definition's digest, the value a pin is compared against:
    /// `sha256:` and the first 32 lowercase hex characters (128 bits) of
    /// SHA-256 over [`ToolDefinition::canonical_material`].
    ///
    /// It equals the TypeScript and Python ports' digest and the PHP
    /// reference's, except that PHP writes an empty schema as `[]` (so a
    /// schema-less tool has a different pin there) and Python writes an
    /// integral float such as `1.0` as `1.0`.
    ///
    /// ```
    /// use human_plus_core::ToolDefinition;
    ///
    /// let schema = serde_json::from_str(r#"{"type":"object","multipleOf":1.0}"#)?;
    /// let t = ToolDefinition::new("surface_write", "Write.", schema)?;
    /// assert_eq!(t.digest(), "sha256:b7c2af21f22352bafffd2aaff37aaf99");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn digest(&self) -> String {
        digest_of(&self.name, &self.description, &self.input_schema)
    }
}

impl ToolDefinition {
    /// A definition from parts already checked by the listing rules (a
    /// name that is not blank, a schema that is an object).
    pub(crate) fn from_checked_parts(
        name: String,
        description: String,
        input_schema: Value,
    ) -> Self {
        ToolDefinition {
            name,
            description,
            input_schema,
        }
    }
}

impl TryFrom<Value> for ToolDefinition {
    type Error = Error;

    /// Same as [`ToolDefinition::from_listing`], moving the entry's
    /// strings and schema instead of copying them.
    fn try_from(entry: Value) -> Result<Self, Error> {
        let Value::Object(mut entry) = entry else {
            return Err(Error::Protocol(ProtocolError::ToolWithoutName));
        };
        let name = match entry.remove("name") {
            Some(Value::String(name)) if !is_blank(&name) => name,
            _ => return Err(Error::Protocol(ProtocolError::ToolWithoutName)),
        };
        let description = match entry.remove("description") {
            Some(Value::String(d)) => d,
            _ => String::new(),
        };
        let input_schema = match entry.remove("inputSchema") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(schema @ Value::Object(_)) => schema,
            Some(_) => return Err(Error::Protocol(ProtocolError::MalformedToolSchema)),
        };
        Ok(ToolDefinition {
            name,
            description,
            input_schema,
        })
    }
}

/// What a surface **claims** about a tool's effects: the two MCP
/// annotations a person weighs before trusting it, `readOnlyHint` and
/// `destructiveHint`, each kept only when it is a JSON boolean (`None`:
/// not claimed, or not a boolean).
///
/// These are the surface's words, shown to a person labelled as its claims
/// ("the surface claims: read-only"). They are never pin material (not in
/// [`ToolDefinition::digest`]) and never used by trust: a surface that
/// claims a tool is read-only gains nothing by it. They travel beside the
/// definitions, in [`crate::Discovery::claims`], only on the path that
/// builds definitions (a `tools` operation).
///
/// ```
/// use human_plus_core::ToolClaims;
/// use serde_json::json;
///
/// let claims = ToolClaims::from_listing(&json!({
///     "name": "sheet_delete_row",
///     "annotations": {"readOnlyHint": false, "destructiveHint": true, "title": "Delete"}
/// }));
/// assert_eq!(claims, ToolClaims { read_only: Some(false), destructive: Some(true) });
/// assert_eq!(claims.labels(), ["not read-only", "destructive"]);
///
/// // Only booleans count.
/// let odd = ToolClaims::from_listing(&json!({"annotations": {"readOnlyHint": "yes"}}));
/// assert!(odd.is_empty());
/// ```
///
/// As JSON (serde): `{"read_only", "destructive"}`, each only when claimed
/// (`readOnly` is read too).
///
/// ```
/// use human_plus_core::ToolClaims;
///
/// let claims = ToolClaims { read_only: Some(false), destructive: Some(true) };
/// assert_eq!(serde_json::to_string(&claims)?, r#"{"read_only":false,"destructive":true}"#);
/// assert_eq!(serde_json::to_string(&ToolClaims::default())?, "{}");
/// assert_eq!(serde_json::from_str::<ToolClaims>(r#"{"readOnly":false,"destructive":true}"#)?, claims);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolClaims {
    /// `annotations.readOnlyHint`, when it is a boolean.
    #[serde(default, alias = "readOnly", skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// `annotations.destructiveHint`, when it is a boolean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
}

impl ToolClaims {
    /// The claims of one entry of a `tools/list` answer: its
    /// `annotations` object's `readOnlyHint` and `destructiveHint`, each
    /// when it is a boolean. Anything else (no `annotations`, not an
    /// object, another type) claims nothing.
    #[must_use]
    pub fn from_listing(entry: &Value) -> Self {
        let hint = |key: &str| {
            entry
                .get("annotations")
                .and_then(|a| a.get(key))
                .and_then(Value::as_bool)
        };
        ToolClaims {
            read_only: hint("readOnlyHint"),
            destructive: hint("destructiveHint"),
        }
    }

    /// True when the surface claims neither.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.read_only.is_none() && self.destructive.is_none()
    }

    /// Each claim in Human+'s words, in a fixed order: `read-only` or
    /// `not read-only`, then `destructive` or `not destructive`; nothing
    /// for what is not claimed. Never the surface's own text.
    ///
    /// ```
    /// use human_plus_core::ToolClaims;
    ///
    /// let read = ToolClaims { read_only: Some(true), destructive: None };
    /// assert_eq!(read.labels(), ["read-only"]);
    /// assert!(ToolClaims::default().labels().is_empty());
    /// ```
    #[must_use]
    pub fn labels(&self) -> Vec<&'static str> {
        let mut out = Vec::with_capacity(2);
        match self.read_only {
            Some(true) => out.push("read-only"),
            Some(false) => out.push("not read-only"),
            None => {}
        }
        match self.destructive {
            Some(true) => out.push("destructive"),
            Some(false) => out.push("not destructive"),
            None => {}
        }
        out
    }
}

/// The digest of a definition given by its parts, without building a
/// [`ToolDefinition`] (no validation: the schema is digested as given, so
/// pass `{}` rather than `null` for a tool without one).
///
/// ```
/// use human_plus_core::digest_of;
///
/// assert_eq!(
///     digest_of("surface_write", "Write to the surface.", &serde_json::json!({"type": "object"})),
///     "sha256:5ab496568589a2e1901b1b49c27b22bc"
/// );
/// ```
#[must_use]
pub fn digest_of(name: &str, description: &str, input_schema: &Value) -> String {
    let material = canonical_material(name, description, input_schema);
    let hash = Sha256::digest(material.as_bytes());
    let mut out = String::with_capacity(DIGEST_PREFIX.len() + 32);
    out.push_str(DIGEST_PREFIX);
    out.push_str(&hex(hash.get(..16).unwrap_or_default()));
    out
}

/// `{"description":..,"inputSchema":..,"name":..}` in canonical form. The
/// three keys are already in UTF-16 order, so the object is written
/// directly instead of cloning the schema into a new map.
fn canonical_material(name: &str, description: &str, input_schema: &Value) -> String {
    let mut out = String::with_capacity(64 + name.len() + description.len());
    out.push_str("{\"description\":");
    write_string(description, &mut out);
    out.push_str(",\"inputSchema\":");
    write_canonical(input_schema, &mut out);
    out.push_str(",\"name\":");
    write_string(name, &mut out);
    out.push('}');
    out
}

/// Blank as PHP's `trim()` sees it: only ASCII space, `\t \n \r \0 \x0B`.
pub(crate) fn is_blank(name: &str) -> bool {
    name.chars()
        .all(|c| matches!(c, ' ' | '\t' | '\n' | '\r' | '\0' | '\x0B'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::canonical::canonical_json;
    use serde_json::json;

    #[test]
    fn verified_vectors() {
        let write = ToolDefinition::new(
            "surface_write",
            "Write to the surface.",
            json!({"type": "object"}),
        )
        .unwrap();
        assert_eq!(write.digest(), "sha256:5ab496568589a2e1901b1b49c27b22bc");
        let ping = ToolDefinition::new("surface_ping", "Ping.", json!({})).unwrap();
        assert_eq!(ping.digest(), "sha256:ac221a90693dc4f393b6c732d1699db1");
        let float = ToolDefinition::new(
            "surface_write",
            "Write.",
            serde_json::from_str(r#"{"type":"object","multipleOf":1.0}"#).unwrap(),
        )
        .unwrap();
        assert_eq!(float.digest(), "sha256:b7c2af21f22352bafffd2aaff37aaf99");
    }

    #[test]
    fn material_equals_generic_canonical_json() {
        let t = ToolDefinition::new(
            "a\u{2028}\"b",
            "d\u{1}/é",
            json!({"z": [1.5, {"b": null, "a": 1e21}], "\u{10000}": 0, "\u{e000}": 1}),
        )
        .unwrap();
        let generic = canonical_json(&json!({
            "name": t.name(), "description": t.description(), "inputSchema": t.input_schema()
        }));
        assert_eq!(t.canonical_material(), generic);
    }

    #[test]
    fn listing_rules() {
        let missing = ToolDefinition::from_listing(&json!({"name": "x"})).unwrap();
        assert_eq!(missing.input_schema(), &json!({}));
        assert_eq!(missing.description(), "");
        let null =
            ToolDefinition::from_listing(&json!({"name": "x", "inputSchema": null})).unwrap();
        assert_eq!(null, missing);
        for bad in [json!("s"), json!(1), json!(true), json!([])] {
            assert_eq!(
                ToolDefinition::from_listing(&json!({"name": "x", "inputSchema": bad})),
                Err(Error::Protocol(ProtocolError::MalformedToolSchema))
            );
        }
        for bad in [
            json!({}),
            json!({"name": null}),
            json!({"name": 7}),
            json!({"name": ""}),
            json!({"name": " \t\n\r\u{0}\u{b}"}),
            json!(null),
            json!([{"name": "x"}]),
        ] {
            assert_eq!(
                ToolDefinition::from_listing(&bad),
                Err(Error::Protocol(ProtocolError::ToolWithoutName)),
                "{bad}"
            );
        }
        // Blank only for PHP's trim: a name of U+3000 is a (malformed) name.
        let odd = ToolDefinition::from_listing(&json!({"name": "\u{3000}"})).unwrap();
        assert_eq!(odd.name(), "\u{3000}");
        // The name check comes first.
        assert_eq!(
            ToolDefinition::from_listing(&json!({"inputSchema": []})),
            Err(Error::Protocol(ProtocolError::ToolWithoutName))
        );
    }

    #[test]
    fn serde_round_trip_uses_camel_case_and_the_listing_rules() {
        let t = ToolDefinition::new("sheet_read", "Read.", json!({"type": "object"})).unwrap();
        let wire = serde_json::to_value(&t).unwrap();
        assert_eq!(
            wire,
            json!({"name": "sheet_read", "description": "Read.", "inputSchema": {"type": "object"}})
        );
        let back: ToolDefinition = serde_json::from_value(wire).unwrap();
        assert_eq!(back, t);
        let lenient: ToolDefinition =
            serde_json::from_str(r#"{"name":"p","inputSchema":null,"title":"T"}"#).unwrap();
        assert_eq!(lenient.input_schema(), &json!({}));
        assert!(
            serde_json::from_str::<ToolDefinition>(r#"{"name":"p","inputSchema":[]}"#).is_err()
        );
        assert!(serde_json::from_str::<ToolDefinition>(r#"{"name":" "}"#).is_err());
    }

    #[test]
    fn digest_shape() {
        let d = digest_of("n", "", &json!({}));
        assert_eq!(d.len(), 7 + 32);
        assert!(d.starts_with("sha256:"));
        assert!(
            d[7..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
    }
}
