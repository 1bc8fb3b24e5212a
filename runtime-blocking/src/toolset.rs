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
//! ```no_run
//! use human_plus_blocking::{HumanPlus, HumanPlusToolset};
//! use serde_json::json;
//!
//! # fn run(human_plus: HumanPlus, attachment: &str) -> Result<(), human_plus_blocking::Error> {
//! let tools = HumanPlusToolset::new(&human_plus)
//!     .for_attachment("conversation:42", attachment, &["sheet_set_cell"])?;
//! for tool in &tools {
//!     println!("{} approval={} {}", tool.name(), tool.requires_approval(), tool.tool().digest);
//! }
//! if let Some(read) = tools.iter().find(|t| t.name() == "sheet_get_cell") {
//!     let result = read.call(json!({"address": "B4"}))?;
//!     println!("{}", result.text); // framed as untrusted data
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;

pub use human_plus_core::SurfaceTool;

use human_plus_core::{CallResult, Error, Owner, OwnerKey, toolset};
use serde_json::Value;

use crate::{AttachmentStore, HumanPlus, InMemoryAttachmentStore};

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

impl<S: AttachmentStore> HumanPlusToolset<S> {
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
    pub fn for_attachment<O: Owner + ?Sized>(
        &self,
        owner: &O,
        attachment: &str,
        approval_tools: &[&str],
    ) -> Result<Vec<ToolHandle<S>>, Error> {
        let owner = OwnerKey::of(owner)?.as_str().to_owned();
        let discovery = self.human_plus.tools(owner.as_str(), attachment)?;
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

impl<S: AttachmentStore> ToolHandle<S> {
    /// Calls the tool through [`HumanPlus::call`] with `arguments` (a JSON
    /// object, or null for `{}`): pinned to the last revision seen, the
    /// result framed as untrusted data.
    ///
    /// # Errors
    /// As [`HumanPlus::call`]; [`Error::SurfaceChangedUnderYou`]'s message
    /// is written for the model to read.
    pub fn call(&self, arguments: Value) -> Result<CallResult, Error> {
        self.human_plus.call(
            self.owner.as_str(),
            &self.attachment,
            &self.tool.name,
            arguments,
        )
    }
}

#[cfg(test)]
mod tests {
    use human_plus_core::{
        EgressPolicy, ManagerConfig, NO_PINS, Participant, SurfaceInvitation, TrustPolicy,
    };
    use human_plus_relay::{DemoSurface, RelayServer};
    use serde_json::json;

    use super::*;

    const OWNER: &str = "conversation:toolset";

    #[test]
    fn handles_describe_and_call_through_the_manager() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let token = "toolset-token-0123456789";
        let relay = rt.block_on(RelayServer::builder().start()).unwrap();
        let surface = rt
            .block_on(DemoSurface::builder(relay.base_url(), "toolset_1", token).start())
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
        let id = human_plus
            .attach(OWNER, invitation, Participant::new("a", "Agent", "#000000"))
            .unwrap()
            .id()
            .to_owned();

        let tools = HumanPlusToolset::new(&human_plus)
            .for_attachment(OWNER, &id, &["sheet_set_cell"])
            .unwrap();
        let names: Vec<&str> = tools.iter().map(ToolHandle::name).collect();
        assert_eq!(names, ["sheet_get_cell", "sheet_set_cell"]);
        let set = &tools[1];
        assert!(set.requires_approval() && !tools[0].requires_approval());
        assert_eq!(set.tool().required, ["address", "value"]);

        let read = tools[0].call(json!({"address": "B4"})).unwrap();
        assert!(read.text.contains("untrusted-tool-output"));
        surface.person().set_cell("B4", "12").unwrap();
        let stale = set.call(json!({"address": "B4", "value": "8"}));
        assert!(
            matches!(stale, Err(Error::SurfaceChangedUnderYou(_))),
            "{stale:?}"
        );
        assert_eq!(surface.cell("B4").as_deref(), Some("12"));

        let other = HumanPlusToolset::new(&human_plus).for_attachment("someone-else", &id, &[]);
        assert!(matches!(other, Err(Error::AttachmentUnauthorized(_))));
        rt.block_on(async {
            surface.shutdown().await;
            relay.shutdown().await;
        });
    }
}
