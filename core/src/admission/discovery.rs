//! What a tool discovery admitted and withheld.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::admission::trust::Withheld;
use crate::tools::tool::{ToolClaims, ToolDefinition};

/// The tools discovery admitted, and what it withheld.
///
/// ```
/// use std::collections::BTreeMap;
/// use human_plus_core::{Discovery, ToolClaims, ToolDefinition};
///
/// let read = ToolDefinition::new("sheet_read", "Read.", serde_json::json!({}))?;
/// let d = Discovery {
///     tools: vec![read],
///     withheld: Vec::new(),
///     malformed: 0,
///     claims: BTreeMap::from([(
///         "sheet_read".to_owned(),
///         ToolClaims { read_only: Some(true), destructive: None },
///     )]),
/// };
/// assert_eq!(d.claims_of("sheet_read").labels(), ["read-only"]);
/// assert!(d.claims_of("sheet_write").is_empty());
/// # Ok::<(), human_plus_core::Error>(())
/// ```
///
/// As JSON (serde), for a service to send on: the same four fields, in
/// snake_case. Each admitted tool is `{"name", "description",
/// "input_schema", "digest"}` (the digest is what a pin holds; reading it
/// back recomputes it and refuses one that does not match, and takes
/// `inputSchema` too); each withheld tool is [`Withheld`]'s `{"name",
/// "code", "message"}`; `claims` maps a tool's name to [`ToolClaims`]'
/// `{"read_only", "destructive"}` (each only when claimed). Tool
/// descriptions and withheld names are the surface's words: untrusted.
///
/// ```
/// use human_plus_core::{Discovery, ToolClaims, ToolDefinition, ToolRefusal, Withheld};
/// use serde_json::json;
///
/// let d = Discovery {
///     tools: vec![ToolDefinition::new("sheet_read", "Read.", json!({"type": "object"}))?],
///     withheld: vec![Withheld { name: "sheet_confirm".into(), reason: ToolRefusal::Reserved("sheet_confirm".into()) }],
///     malformed: 1,
///     claims: [("sheet_read".to_owned(), ToolClaims { read_only: Some(true), destructive: None })].into(),
/// };
/// assert_eq!(serde_json::to_value(&d).unwrap(), json!({
///     "tools": [{
///         "name": "sheet_read",
///         "description": "Read.",
///         "input_schema": {"type": "object"},
///         "digest": "sha256:968e7ea577914b5d0c03d3a86f35b1ac",
///     }],
///     "withheld": [{
///         "name": "sheet_confirm",
///         "code": "reserved",
///         "message": "Human+ tool [sheet_confirm] is reserved for the human confirmation surface.",
///     }],
///     "malformed": 1,
///     "claims": {"sheet_read": {"read_only": true}},
/// }));
/// let back: Discovery = serde_json::from_value(serde_json::to_value(&d).unwrap()).unwrap();
/// assert_eq!(back, d);
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Discovery {
    /// The admitted tools, in surface order.
    pub tools: Vec<ToolDefinition>,
    /// Tools whose name the policy refused, with the reason, in surface order.
    pub withheld: Vec<Withheld>,
    /// Listed entries too malformed to be tools at all (no usable name, or
    /// a schema that is not an object).
    pub malformed: usize,
    /// What the surface claims about admitted tools' effects
    /// (`annotations.readOnlyHint` / `destructiveHint`), by name, for the
    /// tools that claim anything. Filled when the listing was read with its
    /// definitions (a `tools` operation, or a listing kept from one); empty
    /// on the names-only path. For a person to read, labelled as
    /// the surface's claims; never used by trust, never pin material.
    pub claims: BTreeMap<String, ToolClaims>,
}

impl Discovery {
    /// What the surface claims about the admitted tool `name` (nothing
    /// when it claims nothing, or was not listed with its definitions).
    #[must_use]
    pub fn claims_of(&self, name: &str) -> ToolClaims {
        self.claims.get(name).copied().unwrap_or_default()
    }
}

/// One admitted tool as [`Discovery`]'s JSON writes it.
#[derive(Serialize)]
struct ToolOut<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    digest: String,
}

/// [`Discovery`]'s JSON, borrowed.
#[derive(Serialize)]
struct DiscoveryOut<'a> {
    tools: Vec<ToolOut<'a>>,
    withheld: &'a [Withheld],
    malformed: usize,
    claims: &'a BTreeMap<String, ToolClaims>,
}

impl Serialize for Discovery {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        DiscoveryOut {
            tools: self
                .tools
                .iter()
                .map(|t| ToolOut {
                    name: t.name(),
                    description: t.description(),
                    input_schema: t.input_schema(),
                    digest: t.digest(),
                })
                .collect(),
            withheld: &self.withheld,
            malformed: self.malformed,
            claims: &self.claims,
        }
        .serialize(serializer)
    }
}

/// One admitted tool as [`Discovery`]'s JSON is read.
#[derive(Deserialize)]
struct ToolIn {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default, alias = "inputSchema")]
    input_schema: Value,
    #[serde(default)]
    digest: Option<String>,
}

/// [`Discovery`]'s JSON, read.
#[derive(Deserialize)]
struct DiscoveryIn {
    tools: Vec<ToolIn>,
    #[serde(default)]
    withheld: Vec<Withheld>,
    #[serde(default)]
    malformed: usize,
    #[serde(default)]
    claims: BTreeMap<String, ToolClaims>,
}

impl<'de> Deserialize<'de> for Discovery {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let wire = DiscoveryIn::deserialize(deserializer)?;
        let mut tools = Vec::with_capacity(wire.tools.len());
        for t in wire.tools {
            let tool = ToolDefinition::new(t.name, t.description, t.input_schema)
                .map_err(D::Error::custom)?;
            if t.digest.is_some_and(|d| d != tool.digest()) {
                return Err(D::Error::custom(
                    "a tool's digest does not match its definition",
                ));
            }
            tools.push(tool);
        }
        Ok(Discovery {
            tools,
            withheld: wire.withheld,
            malformed: wire.malformed,
            claims: wire.claims,
        })
    }
}
