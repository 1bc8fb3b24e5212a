//! What the surface says back, as a model reads it: every result bounded and
//! framed as untrusted data (`guard.rs`), the change feed read and turned
//! into the model's answer (`changes.rs`), and what one call hands a model,
//! bounded as a whole (`answer.rs`).
//!
//! May use: `admission/` (a framed tool's name is checked as trust checks
//! it), `values/`, `error.rs` and `entropy.rs`.

pub(crate) mod answer;
pub(crate) mod changes;
pub(crate) mod guard;
