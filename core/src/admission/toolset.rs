//! Tool descriptors for agent frameworks: the admitted tools of an
//! attachment as a model sees them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::admission::discovery::Discovery;
use crate::tools::tool::ToolDefinition;

/// One admitted surface tool, described for a model: name, description,
/// parameters (the schema's `properties`), the required parameter names,
/// and whether calling it needs a person's approval.
///
/// `requires_approval` comes only from the caller's `approval_tools`: the
/// surface's own annotations (`readOnlyHint`, `destructiveHint`, ...) are
/// never consulted, because they are the surface's claims about itself.
///
/// ```
/// use human_plus_core::{SurfaceTool, ToolDefinition};
/// use serde_json::json;
///
/// let def = ToolDefinition::new("sheet_set_cell", "Set a cell.", json!({
///     "type": "object",
///     "properties": {"address": {"type": "string"}, "value": {"type": "string"}},
///     "required": ["address", "value"],
///     "additionalProperties": false
/// }))?;
/// let tool = SurfaceTool::describe(&def, &["sheet_set_cell"]);
/// assert!(tool.requires_approval);
/// assert_eq!(tool.required, ["address", "value"]);
/// assert_eq!(tool.parameters.len(), 2);
/// # Ok::<(), human_plus_core::Error>(())
/// ```
///
/// As JSON (serde), its fields as they are named:
///
/// ```
/// use human_plus_core::{SurfaceTool, ToolDefinition};
/// use serde_json::json;
///
/// let def = ToolDefinition::new("sheet_read", "Read.", json!({"properties": {"address": {"type": "string"}}}))?;
/// let tool = SurfaceTool::describe(&def, &[]);
/// assert_eq!(serde_json::to_value(&tool).unwrap(), json!({
///     "name": "sheet_read",
///     "description": "Read.",
///     "parameters": {"address": {"type": "string"}},
///     "required": [],
///     "requires_approval": false,
///     "input_schema": {"properties": {"address": {"type": "string"}}},
///     "digest": def.digest(),
/// }));
/// assert_eq!(serde_json::from_value::<SurfaceTool>(serde_json::to_value(&tool).unwrap()).unwrap(), tool);
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SurfaceTool {
    /// The tool's name, as the surface listed it.
    pub name: String,
    /// The tool's description (untrusted text from the surface).
    pub description: String,
    /// The schema's `properties`: parameter name → its schema, in the
    /// schema's order.
    pub parameters: Map<String, Value>,
    /// The names listed in the schema's `required` that are parameters.
    pub required: Vec<String>,
    /// Whether the caller listed this tool as needing approval.
    pub requires_approval: bool,
    /// The whole input schema, for frameworks that take one.
    pub input_schema: Value,
    /// The definition's digest, to pin it.
    pub digest: String,
}

impl SurfaceTool {
    /// Describes `definition`; it requires approval when its name is in
    /// `approval_tools` (exact match).
    #[must_use]
    pub fn describe(definition: &ToolDefinition, approval_tools: &[&str]) -> Self {
        let schema = definition.input_schema();
        let parameters: Map<String, Value> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .filter(|(_, v)| v.is_object())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let required = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| {
                names
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|n| parameters.contains_key(*n))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        SurfaceTool {
            name: definition.name().to_owned(),
            description: definition.description().to_owned(),
            parameters,
            required,
            requires_approval: approval_tools.contains(&definition.name()),
            input_schema: schema.clone(),
            digest: definition.digest(),
        }
    }
}

/// The descriptors of every tool a discovery admitted, in surface order.
///
/// ```
/// use human_plus_core::{Discovery, ToolDefinition, toolset};
/// use serde_json::json;
///
/// let d = Discovery {
///     tools: vec![ToolDefinition::new("sheet_read", "Read.", json!({"type": "object"}))?],
///     withheld: vec![],
///     malformed: 0,
///     claims: Default::default(),
/// };
/// let tools = toolset(&d, &[]);
/// assert_eq!(tools[0].name, "sheet_read");
/// assert!(!tools[0].requires_approval);
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[must_use]
pub fn toolset(discovery: &Discovery, approval_tools: &[&str]) -> Vec<SurfaceTool> {
    discovery
        .tools
        .iter()
        .map(|t| SurfaceTool::describe(t, approval_tools))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn approval_comes_only_from_the_caller() {
        let def = ToolDefinition::new(
            "sheet_erase",
            "Erase.",
            json!({"type": "object", "properties": {"x": {"type": "string"}, "bad": 3}, "required": ["x", "ghost", 7]}),
        )
        .unwrap();
        let t = SurfaceTool::describe(&def, &[]);
        assert!(!t.requires_approval);
        assert_eq!(
            t.parameters.len(),
            1,
            "non-object property schemas are not parameters"
        );
        assert_eq!(t.required, ["x"]);
        assert!(t.digest.starts_with("sha256:"));
    }
}
