//! What a tool discovery admitted and withheld.

use crate::tool::ToolDefinition;
use crate::trust::Withheld;

/// The tools discovery admitted, and what it withheld.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovery {
    /// The admitted tools, in surface order.
    pub tools: Vec<ToolDefinition>,
    /// Tools whose name the policy refused, with the reason, in surface order.
    pub withheld: Vec<Withheld>,
    /// Listed entries too malformed to be tools at all (no usable name, or
    /// a schema that is not an object).
    pub malformed: usize,
}
