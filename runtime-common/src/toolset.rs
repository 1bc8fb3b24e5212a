//! The trusted tools of an attachment as tools a model can call (seed 001,
//! "With Prism and Harness"), over any manager.
//!
//! [`HumanPlusToolset::for_attachment`] discovers the surface's tools
//! through the manager (so trust and pins apply) and returns one
//! [`ToolHandle`] per admitted tool. Each carries the core's
//! [`SurfaceTool`] descriptor (name, description, parameters, required,
//! `requires_approval`) and calls through the manager's `call`, so
//! revisions, refusals and framing apply to every call. `requires_approval`
//! comes only from the caller's `approval_tools`, never from the surface's
//! annotations; asking a person before calling such a tool is the caller's
//! part.

use std::fmt;

use human_plus_core::{CallResult, Discovery, Error, Owner, OwnerKey, SurfaceTool, toolset};
use human_plus_store::{AsyncAttachmentStore, AttachmentStore};
use serde_json::Value;

use crate::blocking::BlockingHumanPlus;
use crate::driver::Driver;
use crate::manager::HumanPlus;

/// Turns an attachment's admitted tools into [`ToolHandle`]s, over the
/// manager `M` (an async [`HumanPlus`] or a [`BlockingHumanPlus`]).
#[derive(Clone)]
pub struct HumanPlusToolset<M> {
    manager: M,
}

impl<M> fmt::Debug for HumanPlusToolset<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HumanPlusToolset").finish_non_exhaustive()
    }
}

impl<M: Clone> HumanPlusToolset<M> {
    /// A toolset over `manager` (a cheap clone of it): the async manager
    /// ([`HumanPlus`]) or the blocking one ([`BlockingHumanPlus`]).
    ///
    /// ```no_run
    /// # use human_plus_runtime::HumanPlusToolset;
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let toolset = HumanPlusToolset::new(human_plus);
    /// let tools = toolset.for_attachment("conversation:42", attachment, &["sheet_set_cell"]).await?;
    /// # let _ = tools;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn new(manager: &M) -> Self {
        HumanPlusToolset {
            manager: manager.clone(),
        }
    }

    /// A handle per tool `discovery` admitted, in surface order, for
    /// `owner`'s `attachment`; a tool named in `approval_tools` (exact
    /// match) is marked as requiring approval.
    fn handles(
        &self,
        owner: &OwnerKey,
        attachment: &str,
        discovery: &Discovery,
        approval_tools: &[&str],
    ) -> Vec<ToolHandle<M>> {
        toolset(discovery, approval_tools)
            .into_iter()
            .map(|tool| ToolHandle {
                manager: self.manager.clone(),
                owner: owner.as_str().to_owned(),
                attachment: attachment.to_owned(),
                tool,
            })
            .collect()
    }
}

impl<D: Driver, S: AsyncAttachmentStore + 'static> HumanPlusToolset<HumanPlus<D, S>> {
    /// Discovers the attachment's tools through [`HumanPlus::tools`] (so trust
    /// and pins apply; one networked operation) and returns a handle per
    /// admitted tool, in surface order. A tool named in `approval_tools` (exact
    /// match) is marked as requiring approval: asking a person before calling
    /// it is the caller's part.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], and everything [`HumanPlus::tools`]
    /// returns.
    ///
    /// ```no_run
    /// # use serde_json::json;
    /// # use human_plus_runtime::HumanPlusToolset;
    /// # async fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::HumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let tools = HumanPlusToolset::new(human_plus)
    ///     .for_attachment("conversation:42", attachment, &["sheet_set_cell"])
    ///     .await?;
    /// for tool in &tools {
    ///     println!("{} approval={} {}", tool.name(), tool.requires_approval(), tool.tool().digest);
    /// }
    /// if let Some(read) = tools.iter().find(|t| t.name() == "sheet_get_cell") {
    ///     println!("{}", read.call(json!({"address": "B4"})).await?.text);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn for_attachment<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        approval_tools: &[&str],
    ) -> Result<Vec<ToolHandle<HumanPlus<D, S>>>, Error> {
        let owner = OwnerKey::of(owner)?;
        let discovery = self.manager.tools(owner.as_str(), attachment).await?;
        Ok(self.handles(&owner, attachment, &discovery, approval_tools))
    }
}

impl<D: Driver, S: AttachmentStore + 'static> HumanPlusToolset<BlockingHumanPlus<D, S>> {
    /// Discovers the attachment's tools through [`BlockingHumanPlus::tools`]
    /// (so trust and pins apply; one networked operation, on the calling
    /// thread) and returns a handle per admitted tool, in surface order. A tool
    /// named in `approval_tools` (exact match) is marked as requiring approval:
    /// asking a person before calling it is the caller's part.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`], and everything
    /// [`BlockingHumanPlus::tools`] returns.
    ///
    /// ```no_run
    /// # use serde_json::json;
    /// # use human_plus_runtime::HumanPlusToolset;
    /// # fn example<D: human_plus_runtime::Driver>(human_plus: &human_plus_runtime::BlockingHumanPlus<D>, attachment: &str) -> Result<(), human_plus_core::Error> {
    /// let tools = HumanPlusToolset::new(human_plus).for_attachment("job:7", attachment, &["sheet_set_cell"])?;
    /// if let Some(read) = tools.iter().find(|t| t.name() == "sheet_get_cell") {
    ///     println!("{}", read.call(json!({"address": "B4"}))?.text);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn for_attachment<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        approval_tools: &[&str],
    ) -> Result<Vec<ToolHandle<BlockingHumanPlus<D, S>>>, Error> {
        let owner = OwnerKey::of(owner)?;
        let discovery = self.manager.tools(owner.as_str(), attachment)?;
        Ok(self.handles(&owner, attachment, &discovery, approval_tools))
    }
}

/// One admitted surface tool, callable through the manager `M`.
#[derive(Clone)]
pub struct ToolHandle<M> {
    pub(crate) manager: M,
    owner: String,
    attachment: String,
    pub(crate) tool: SurfaceTool,
}

impl<M> fmt::Debug for ToolHandle<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolHandle")
            .field("tool", &self.tool.name)
            .field("attachment", &self.attachment)
            .field("requires_approval", &self.tool.requires_approval)
            .finish_non_exhaustive()
    }
}

impl<M> ToolHandle<M> {
    /// The tool's descriptor: name, description, parameters, required ones,
    /// the input schema, its digest and whether it requires approval (what a
    /// model's tool list is built from).
    ///
    /// ```no_run
    /// # fn example<M>(tool: &human_plus_runtime::ToolHandle<M>) {
    /// let schema = &tool.tool().input_schema; // for the model's tool definition
    /// println!("{}: {} {schema}", tool.name(), tool.tool().description);
    /// # }
    /// ```
    #[must_use]
    pub fn tool(&self) -> &SurfaceTool {
        &self.tool
    }

    /// The tool's name, as the surface lists it.
    ///
    /// ```no_run
    /// # fn example<M>(tool: &human_plus_runtime::ToolHandle<M>) {
    /// println!("{}", tool.name());
    /// # }
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.tool.name
    }

    /// Whether the caller listed this tool as needing a person's approval
    /// (`approval_tools` of `for_attachment`); never taken from the surface's
    /// annotations.
    ///
    /// ```no_run
    /// # fn example<M>(tool: &human_plus_runtime::ToolHandle<M>) {
    /// if tool.requires_approval() {
    ///     println!("ask the person before calling {}", tool.name());
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn requires_approval(&self) -> bool {
        self.tool.requires_approval
    }

    /// The attachment the tool belongs to.
    ///
    /// ```no_run
    /// # fn example<M>(tool: &human_plus_runtime::ToolHandle<M>) {
    /// println!("{} on attachment {}", tool.name(), tool.attachment());
    /// # }
    /// ```
    #[must_use]
    pub fn attachment(&self) -> &str {
        &self.attachment
    }
}

impl<D: Driver, S: AsyncAttachmentStore + 'static> ToolHandle<HumanPlus<D, S>> {
    /// Calls the tool through [`HumanPlus::call`] with `arguments` (a JSON
    /// object, or null for `{}`), for the owner and attachment the handle was
    /// made for: pinned to the last revision seen, the result framed as
    /// untrusted data.
    ///
    /// # Errors
    /// As [`HumanPlus::call`]; [`Error::SurfaceChangedUnderYou`]'s message
    /// is written for the model to read.
    ///
    /// ```no_run
    /// # use serde_json::json;
    /// # async fn example<D: human_plus_runtime::Driver>(tool: &human_plus_runtime::ToolHandle<human_plus_runtime::HumanPlus<D>>) -> Result<(), human_plus_core::Error> {
    /// let result = tool.call(json!({"address": "B4"})).await?;
    /// println!("{}", result.text);
    /// # Ok(()) }
    /// ```
    pub async fn call(&self, arguments: Value) -> Result<CallResult, Error> {
        self.manager
            .call(
                self.owner.as_str(),
                &self.attachment,
                &self.tool.name,
                arguments,
            )
            .await
    }
}

impl<D: Driver, S: AttachmentStore + 'static> ToolHandle<BlockingHumanPlus<D, S>> {
    /// Calls the tool through [`BlockingHumanPlus::call`] with `arguments`
    /// (a JSON object, or null for `{}`), for the owner and attachment the
    /// handle was made for: pinned to the last revision seen, the result framed
    /// as untrusted data.
    ///
    /// # Errors
    /// As [`BlockingHumanPlus::call`]; [`Error::SurfaceChangedUnderYou`]'s
    /// message is written for the model to read.
    ///
    /// ```no_run
    /// # use serde_json::json;
    /// # fn example<D: human_plus_runtime::Driver>(tool: &human_plus_runtime::ToolHandle<human_plus_runtime::BlockingHumanPlus<D>>) -> Result<(), human_plus_core::Error> {
    /// let result = tool.call(json!({"address": "B4"}))?;
    /// println!("{}", result.text);
    /// # Ok(()) }
    /// ```
    pub fn call(&self, arguments: Value) -> Result<CallResult, Error> {
        self.manager.call(
            self.owner.as_str(),
            &self.attachment,
            &self.tool.name,
            arguments,
        )
    }
}
