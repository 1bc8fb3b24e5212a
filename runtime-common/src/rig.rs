//! Toolset handles as rig-core tools (feature `rig`, off by default:
//! rig-core turns on serde_json's `preserve_order`).
//!
//! `ToolHandle::into_rig_tool` turns a handle of an async manager into a
//! rig-core `DynamicTool`, and `ToolHandle::into_rig_tool_with_approval`
//! asks a callback before each call of a tool that requires approval.

use std::sync::Arc;

use human_plus_core::{Error, ProtocolError, SurfaceTool, ToolRefusal, redact_text};
use rig_core::message::ToolName;
use rig_core::tool::{DynamicTool, ToolErrorKind, ToolExecutionError, ToolOutput};
use serde_json::Value;

use human_plus_store::AsyncAttachmentStore;

use crate::driver::Driver;
use crate::manager::HumanPlus;
use crate::toolset::ToolHandle;

/// Decides whether a tool that requires approval may run with these
/// arguments (typically by asking a person).
pub type Approve = Arc<dyn Fn(&SurfaceTool, &Value) -> bool + Send + Sync>;

impl<D: Driver, S: AsyncAttachmentStore + 'static> ToolHandle<HumanPlus<D, S>> {
    /// This tool as a rig-core [`DynamicTool`]: the surface's name,
    /// description and input schema, called through the manager. A
    /// success is the framed text; a failure is a
    /// [`ToolExecutionError`] whose model feedback is the framed or
    /// model-readable text (see [`rig_error`]).
    ///
    /// It does not ask for approval: register tools that
    /// [`require approval`](ToolHandle::requires_approval) with
    /// [`ToolHandle::into_rig_tool_with_approval`].
    ///
    /// # Errors
    /// [`Error::Protocol`] if the name were empty (a listed tool's
    /// never is).
    ///
    /// ```no_run
    /// # fn example<D: human_plus_runtime::Driver>(tool: human_plus_runtime::ToolHandle<human_plus_runtime::HumanPlus<D>>) -> Result<(), human_plus_core::Error> {
    /// let dynamic = tool.into_rig_tool()?; // register it with a rig agent
    /// # let _ = dynamic;
    /// # Ok(()) }
    /// ```
    pub fn into_rig_tool(self) -> Result<DynamicTool, Error> {
        self.rig_tool(None)
    }

    /// As [`ToolHandle::into_rig_tool`], but when this tool requires
    /// approval, `approve` is asked before every call; a call it
    /// declines is refused (`ToolExecutionError::refused`) and never
    /// reaches the surface.
    ///
    /// # Errors
    /// As [`ToolHandle::into_rig_tool`].
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # fn example<D: human_plus_runtime::Driver>(tool: human_plus_runtime::ToolHandle<human_plus_runtime::HumanPlus<D>>) -> Result<(), human_plus_core::Error> {
    /// let dynamic = tool.into_rig_tool_with_approval(Arc::new(|tool, arguments| {
    ///     println!("allow {} with {arguments}?", tool.name);
    ///     false // ask the person; declined here
    /// }))?;
    /// # let _ = dynamic;
    /// # Ok(()) }
    /// ```
    pub fn into_rig_tool_with_approval(self, approve: Approve) -> Result<DynamicTool, Error> {
        self.rig_tool(Some(approve))
    }

    fn rig_tool(self, approve: Option<Approve>) -> Result<DynamicTool, Error> {
        let name = ToolName::new(self.tool.name.clone())
            .map_err(|_| Error::Protocol(ProtocolError::ToolWithoutName))?;
        let description = self.tool.description.clone();
        let parameters = self.tool.input_schema.clone();
        let handle = Arc::new(self);
        Ok(DynamicTool::new(
            name,
            description,
            parameters,
            move |arguments| {
                let handle = Arc::clone(&handle);
                let approve = approve.clone();
                Box::pin(async move {
                    if handle.requires_approval()
                        && let Some(approve) = &approve
                        && !approve(handle.tool(), &arguments)
                    {
                        return Err(ToolExecutionError::refused(format!(
                            "A person declined `{}`: nothing was sent to the surface.",
                            handle.name()
                        ))
                        .with_code("approval_declined"));
                    }
                    match handle.call(arguments).await {
                        Ok(result) => Ok(ToolOutput::text(result.text)),
                        Err(e) => Err(rig_error(&e)),
                    }
                })
            },
        ))
    }
}

/// A Human+ error as rig-core's [`ToolExecutionError`]: the core's code
/// as its code; as model feedback, the refusal a model must read
/// (`surface_changed_under_you`), the framed output of a failed tool,
/// or the redacted message. A stale pin and terminal answers are not
/// retryable.
#[must_use]
pub fn rig_error(error: &Error) -> ToolExecutionError {
    let text = redact_text(&error.to_string());
    let e = match error {
        Error::SurfaceChangedUnderYou(_) => {
            ToolExecutionError::new(ToolErrorKind::Other, text).with_retryable(false)
        }
        Error::ToolFailed { .. } | Error::SurfaceError(_) => {
            ToolExecutionError::new(ToolErrorKind::Other, text)
        }
        Error::ToolRefused(ToolRefusal::OverBudget { .. }) => {
            ToolExecutionError::new(ToolErrorKind::Other, text)
        }
        Error::ToolRefused(_) | Error::ConflictDetectionUnavailable(_) => {
            ToolExecutionError::refused(text)
        }
        Error::InvalidArguments => ToolExecutionError::new(ToolErrorKind::InvalidArgs, text),
        Error::Timeout => ToolExecutionError::new(ToolErrorKind::Timeout, text),
        Error::Transport(_) | Error::RelayFailed { .. } => {
            ToolExecutionError::new(ToolErrorKind::Network, text)
        }
        Error::SurfaceUnavailable | Error::RelayPathNotFound(_) => {
            ToolExecutionError::new(ToolErrorKind::NotFound, text).with_retryable(false)
        }
        Error::AttachmentUnauthorized(_) | Error::NotAttached(_) => {
            ToolExecutionError::new(ToolErrorKind::PermissionDenied, text).with_retryable(false)
        }
        _ => ToolExecutionError::new(ToolErrorKind::Other, text),
    };
    e.with_code(error.code())
}
