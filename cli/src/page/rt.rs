//! The tokio runtime a command blocks on.

use crate::output::exit::Failure;

/// A two-thread tokio runtime, or the internal failure to report.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::internal(format!("the tokio runtime could not start: {e}")))
}
