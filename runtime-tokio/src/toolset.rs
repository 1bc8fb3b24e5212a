//! The trusted tools of an attachment as tools a model can call (seed 001,
//! "With Prism and Harness").
//!
//! [`HumanPlusToolset::for_attachment`] discovers the surface's tools
//! through the manager (so trust and pins apply) and returns one
//! [`ToolHandle`] per admitted tool. Each carries the core's
//! [`SurfaceTool`] descriptor (name, description, parameters, required,
//! `requires_approval`) and calls through [`HumanPlus::call`], so revisions,
//! refusals and framing apply to every call. `requires_approval` comes only
//! from the caller's `approval_tools`, never from the surface's annotations;
//! asking a person before calling such a tool is the caller's part.
//!
//! With the `rig` feature (off by default), `ToolHandle::into_rig_tool`
//! turns a handle into a rig-core `DynamicTool`, and
//! `ToolHandle::into_rig_tool_with_approval` asks a callback before each
//! call of a tool that requires approval.
//!
//! ```no_run
//! use human_plus_tokio::{HumanPlus, HumanPlusToolset};
//! use serde_json::json;
//!
//! # async fn run(human_plus: HumanPlus, attachment: &str) -> Result<(), human_plus_tokio::Error> {
//! let tools = HumanPlusToolset::new(&human_plus)
//!     .for_attachment("conversation:42", attachment, &["sheet_set_cell"])
//!     .await?;
//! for tool in &tools {
//!     println!("{} approval={} {}", tool.name(), tool.requires_approval(), tool.tool().digest);
//! }
//! if let Some(read) = tools.iter().find(|t| t.name() == "sheet_get_cell") {
//!     let result = read.call(json!({"address": "B4"})).await?;
//!     println!("{}", result.text); // framed as untrusted data
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;

pub use human_plus_core::SurfaceTool;

use human_plus_core::{CallResult, Error, Owner, OwnerKey, toolset};
use serde_json::Value;

use crate::{AsyncAttachmentStore, HumanPlus, InMemoryAttachmentStore};

/// Turns an attachment's admitted tools into [`ToolHandle`]s.
pub struct HumanPlusToolset<S = InMemoryAttachmentStore> {
    human_plus: HumanPlus<S>,
}

impl<S> Clone for HumanPlusToolset<S> {
    fn clone(&self) -> Self {
        HumanPlusToolset {
            human_plus: self.human_plus.clone(),
        }
    }
}

impl<S> fmt::Debug for HumanPlusToolset<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HumanPlusToolset").finish_non_exhaustive()
    }
}

impl<S: AsyncAttachmentStore> HumanPlusToolset<S> {
    /// A toolset over `human_plus` (a cheap clone of the manager).
    #[must_use]
    pub fn new(human_plus: &HumanPlus<S>) -> Self {
        HumanPlusToolset {
            human_plus: human_plus.clone(),
        }
    }

    /// Discovers the attachment's tools (trust and pins apply) and returns
    /// a handle per admitted tool, in surface order. A tool named in
    /// `approval_tools` (exact match) is marked as requiring approval.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], and everything [`HumanPlus::tools`] returns.
    pub async fn for_attachment<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        approval_tools: &[&str],
    ) -> Result<Vec<ToolHandle<S>>, Error> {
        let owner = OwnerKey::of(owner)?.as_str().to_owned();
        let discovery = self.human_plus.tools(owner.as_str(), attachment).await?;
        Ok(toolset(&discovery, approval_tools)
            .into_iter()
            .map(|tool| ToolHandle {
                human_plus: self.human_plus.clone(),
                owner: owner.clone(),
                attachment: attachment.to_owned(),
                tool,
            })
            .collect())
    }
}

/// One admitted surface tool, callable through the manager.
pub struct ToolHandle<S = InMemoryAttachmentStore> {
    human_plus: HumanPlus<S>,
    owner: String,
    attachment: String,
    tool: SurfaceTool,
}

impl<S> Clone for ToolHandle<S> {
    fn clone(&self) -> Self {
        ToolHandle {
            human_plus: self.human_plus.clone(),
            owner: self.owner.clone(),
            attachment: self.attachment.clone(),
            tool: self.tool.clone(),
        }
    }
}

impl<S> fmt::Debug for ToolHandle<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolHandle")
            .field("tool", &self.tool.name)
            .field("attachment", &self.attachment)
            .field("requires_approval", &self.tool.requires_approval)
            .finish_non_exhaustive()
    }
}

impl<S> ToolHandle<S> {
    /// The tool's descriptor.
    #[must_use]
    pub fn tool(&self) -> &SurfaceTool {
        &self.tool
    }

    /// The tool's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.tool.name
    }

    /// Whether the caller listed this tool as needing a person's approval.
    #[must_use]
    pub fn requires_approval(&self) -> bool {
        self.tool.requires_approval
    }

    /// The attachment the tool belongs to.
    #[must_use]
    pub fn attachment(&self) -> &str {
        &self.attachment
    }
}

impl<S: AsyncAttachmentStore> ToolHandle<S> {
    /// Calls the tool through [`HumanPlus::call`] with `arguments` (a JSON
    /// object, or null for `{}`): pinned to the last revision seen, the
    /// result framed as untrusted data.
    ///
    /// # Errors
    /// As [`HumanPlus::call`]; [`Error::SurfaceChangedUnderYou`]'s message
    /// is written for the model to read.
    pub async fn call(&self, arguments: Value) -> Result<CallResult, Error> {
        self.human_plus
            .call(
                self.owner.as_str(),
                &self.attachment,
                &self.tool.name,
                arguments,
            )
            .await
    }
}

#[cfg(feature = "rig")]
mod rig {
    use std::sync::Arc;

    use human_plus_core::{Error, ProtocolError, SurfaceTool, ToolRefusal, redact_text};
    use rig_core::message::ToolName;
    use rig_core::tool::{DynamicTool, ToolErrorKind, ToolExecutionError, ToolOutput};
    use serde_json::Value;

    use super::ToolHandle;
    use crate::AsyncAttachmentStore;

    /// Decides whether a tool that requires approval may run with these
    /// arguments (typically by asking a person).
    pub type Approve = Arc<dyn Fn(&SurfaceTool, &Value) -> bool + Send + Sync>;

    impl<S: AsyncAttachmentStore + 'static> ToolHandle<S> {
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
            Error::SurfaceUnavailable => {
                ToolExecutionError::new(ToolErrorKind::NotFound, text).with_retryable(false)
            }
            Error::AttachmentUnauthorized(_) | Error::NotAttached(_) => {
                ToolExecutionError::new(ToolErrorKind::PermissionDenied, text).with_retryable(false)
            }
            _ => ToolExecutionError::new(ToolErrorKind::Other, text),
        };
        e.with_code(error.code())
    }
}

#[cfg(feature = "rig")]
pub use rig::{Approve, rig_error};

#[cfg(test)]
mod tests {
    use human_plus_core::{
        EgressPolicy, ManagerConfig, NO_PINS, Participant, SurfaceInvitation, TrustPolicy,
    };
    use human_plus_relay::{DemoSurface, RelayServer};
    use serde_json::json;

    use super::*;

    const OWNER: &str = "conversation:toolset";

    async fn setup() -> (
        human_plus_relay::RelayHandle,
        DemoSurface,
        HumanPlus,
        String,
    ) {
        let relay = RelayServer::builder().start().await.unwrap();
        let token = "toolset-token-0123456789";
        let surface = DemoSurface::builder(relay.base_url(), "toolset_1", token)
            .start()
            .await
            .unwrap();
        let config = ManagerConfig::new(
            EgressPolicy::new(["127.0.0.1"])
                .allow_ports([relay.addr().port()])
                .allow_unverified_egress(true),
            TrustPolicy::allowing(
                ["sheet_get_cell", "sheet_set_cell", "sheet_confirm_edit"],
                NO_PINS,
            ),
        );
        let human_plus = HumanPlus::new(config);
        let invitation = SurfaceInvitation::new_insecure_loopback(
            relay.base_url(),
            "toolset_1",
            token,
            "sheet:one",
            "Demo",
        )
        .unwrap();
        let attachment = human_plus
            .attach(OWNER, invitation, Participant::new("a", "Agent", "#000000"))
            .await
            .unwrap();
        let id = attachment.id().to_owned();
        (relay, surface, human_plus, id)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn handles_describe_and_call_through_the_manager() {
        let (relay, surface, human_plus, id) = setup().await;
        let tools = HumanPlusToolset::new(&human_plus)
            .for_attachment(OWNER, &id, &["sheet_set_cell"])
            .await
            .unwrap();
        let names: Vec<&str> = tools.iter().map(ToolHandle::name).collect();
        assert_eq!(names, ["sheet_get_cell", "sheet_set_cell"]);
        let set = &tools[1];
        assert!(set.requires_approval() && !tools[0].requires_approval());
        assert_eq!(set.tool().required, ["address", "value"]);
        assert!(set.tool().digest.starts_with("sha256:"));

        let read = tools[0].call(json!({"address": "B4"})).await.unwrap();
        assert!(read.text.contains("untrusted-tool-output"));
        surface.person().set_cell("B4", "12").unwrap();
        let stale = set.call(json!({"address": "B4", "value": "8"})).await;
        assert!(
            matches!(stale, Err(Error::SurfaceChangedUnderYou(_))),
            "{stale:?}"
        );
        assert_eq!(surface.cell("B4").as_deref(), Some("12"));

        // Another owner cannot use the attachment through a toolset.
        let other = HumanPlusToolset::new(&human_plus)
            .for_attachment("someone-else", &id, &[])
            .await;
        assert!(matches!(other, Err(Error::AttachmentUnauthorized(_))));
        surface.shutdown().await;
        relay.shutdown().await;
    }

    #[cfg(feature = "rig")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rig_tools_call_through_the_manager() {
        use std::sync::Arc;

        let (relay, surface, human_plus, id) = setup().await;
        let mut tools = HumanPlusToolset::new(&human_plus)
            .for_attachment(OWNER, &id, &["sheet_set_cell"])
            .await
            .unwrap();
        let set = tools.pop().unwrap();
        let get = tools.pop().unwrap().into_rig_tool().unwrap();
        assert_eq!(get.name().to_string(), "sheet_get_cell");
        let def = get.definition();
        assert_eq!(def.parameters["required"], json!(["address"]));

        let out = get.execute(json!({"address": "B4"})).await.unwrap();
        assert!(
            out.render().contains("untrusted-tool-output"),
            "{}",
            out.render()
        );

        // Declined approval: refused, and nothing reaches the surface.
        let declined: Approve = Arc::new(|_, _| false);
        let gated = set.clone().into_rig_tool_with_approval(declined).unwrap();
        let before = surface.calls().len();
        let refused = gated
            .execute(json!({"address": "B4", "value": "8"}))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Some("approval_declined"));
        assert_eq!(surface.calls().len(), before);

        // A stale pin: the model reads the refusal.
        surface.person().set_cell("B4", "12").unwrap();
        let allowed: Approve = Arc::new(|_, _| true);
        let gated = set.into_rig_tool_with_approval(allowed).unwrap();
        let stale = gated
            .execute(json!({"address": "B4", "value": "8"}))
            .await
            .unwrap_err();
        assert_eq!(stale.code(), Some("surface_changed_under_you"));
        assert!(stale.model_output().render().contains("was NOT applied"));
        assert_eq!(surface.cell("B4").as_deref(), Some("12"));
        surface.shutdown().await;
        relay.shutdown().await;
    }
}
