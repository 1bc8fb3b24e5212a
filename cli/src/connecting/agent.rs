//! The three runtimes' managers behind one synchronous interface: the
//! `human-plus-any` facade, so every command runs on whichever runtime
//! `--runtime` names, plus what the command does with an agent's store. No
//! protocol rule lives here.

use human_plus_core::{Error, StoreError, SurfaceAttachment, SurfaceRevision};
use human_plus_store::AttachmentStore;

pub use human_plus_any::{Agent, AgentSetup, build_agent};

/// Stores `token` as the attachment's current revision, so the next call
/// is pinned to it, as if a result had carried it.
///
/// This is how `call --revision` and `changes --since` carry a revision
/// from one process to the next, and how `probe` pins a call to a revision
/// the surface never issued.
///
/// # Errors
/// [`Error::InvalidRevision`] for a blank or oversized marker,
/// [`Error::AttachmentMissing`], or the store's.
pub fn store_revision(
    agent: &dyn Agent,
    attachment: &str,
    token: &str,
    observed_from: &str,
) -> Result<(), Error> {
    let revision =
        SurfaceRevision::observed(token, observed_from).map_err(Error::InvalidRevision)?;
    let store = agent.store();
    let mut record = AttachmentStore::get(store, attachment)?.ok_or(Error::AttachmentMissing)?;
    let generation = record.generation();
    record.record_revision(revision);
    AttachmentStore::put(store, &record, Some(generation))
        .map_err(|e| Error::Store(StoreError::new(e.to_string())))
}

/// Takes over, for `attachment`, what `previous` learnt of the same surface
/// session (its pin above all: [`SurfaceAttachment::carry_over`]), so the
/// new attachment's first call is pinned as the previous one's next call
/// would have been. Nothing is taken from another session.
///
/// This is how the `mcp` bridge joins the same session again (after the
/// relay restarted, or with new trust) without an unpinned call.
///
/// # Errors
/// [`Error::AttachmentMissing`], or the store's.
pub fn carry_over(
    agent: &dyn Agent,
    attachment: &str,
    previous: &SurfaceAttachment,
) -> Result<(), Error> {
    let store = agent.store();
    let mut record = AttachmentStore::get(store, attachment)?.ok_or(Error::AttachmentMissing)?;
    let generation = record.generation();
    if !record.carry_over(previous) {
        return Ok(());
    }
    AttachmentStore::put(store, &record, Some(generation))
        .map_err(|e| Error::Store(StoreError::new(e.to_string())))
}
