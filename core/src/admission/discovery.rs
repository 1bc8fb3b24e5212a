//! What a tool discovery admitted and withheld.

use std::collections::BTreeMap;

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
