//! What local trust admits of the surface's tools: the policy and its four
//! checks (`trust.rs`); a `tools/list` page read from its bytes, admitted
//! and digested, and its verdict kept (`listing.rs`), with its two readers
//! (`listed.rs`, the tree way; `listing_names.rs`, the names way); what a
//! discovery admitted and withheld (`discovery.rs`) and the descriptors an
//! agent framework gets (`toolset.rs`); and what a person reads before
//! trusting a tool (`summary.rs`) or trusting it again (`review.rs`).
//!
//! May use: `tools/`, `invite/` (the owner's constant-time comparison),
//! `values/`, `error.rs` and `entropy.rs`.

pub(crate) mod discovery;
pub(crate) mod listed;
pub(crate) mod listing;
pub(crate) mod listing_names;
pub(crate) mod review;
pub(crate) mod summary;
pub(crate) mod toolset;
pub(crate) mod trust;
