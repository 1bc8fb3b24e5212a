//! The lifecycle state of an attachment.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The lifecycle state of an attachment. Only `Attached` is operable; the
/// others are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachmentState {
    /// Joined and usable.
    #[default]
    Attached,
    /// The relay said the session is gone (410).
    SurfaceUnavailable,
    /// The relay refused the token (401).
    AttachmentUnauthorized,
    /// The agent left.
    Detached,
}

impl AttachmentState {
    /// The wire value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            AttachmentState::Attached => "attached",
            AttachmentState::SurfaceUnavailable => "surface_unavailable",
            AttachmentState::AttachmentUnauthorized => "attachment_unauthorized",
            AttachmentState::Detached => "detached",
        }
    }
}

impl fmt::Display for AttachmentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
