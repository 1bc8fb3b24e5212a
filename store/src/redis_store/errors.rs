//! The store's errors, and what a redis-rs error is.

use std::sync::Arc;

use human_plus_core::{Error, StoreError, StoreErrorKind};

pub(super) fn store_error(message: impl AsRef<str>) -> Error {
    Error::Store(StoreError::new(message))
}

pub(super) fn store_error_of(kind: StoreErrorKind, message: impl AsRef<str>) -> Error {
    Error::Store(StoreError::with_kind(kind, message))
}

pub(super) fn config_error(message: impl AsRef<str>) -> Error {
    store_error_of(StoreErrorKind::Config, message)
}

/// What a redis-rs error is, for the caller and for the retry loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Classified {
    pub(crate) kind: StoreErrorKind,
    /// Worth another attempt on a fresh connection: the server did not
    /// answer, the connection broke, or the cluster is failing over.
    pub(crate) retryable: bool,
}

/// Whether a rustls error sits anywhere in `e`'s chain of sources (redis-rs
/// keeps its cause behind an `Arc`, and an `io::Error` carries a rustls
/// error as its inner error).
pub(super) fn is_tls_failure(e: &redis::RedisError) -> bool {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    pub(super) fn is_rustls(err: &(dyn std::error::Error + 'static)) -> bool {
        if err.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(arc) = err.downcast_ref::<Shared>() {
            return is_rustls(&**arc);
        }
        err.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .is_some_and(|inner| is_rustls(inner))
    }
    let mut current: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = current {
        if is_rustls(err) {
            return true;
        }
        current = err.source();
    }
    false
}

pub(crate) fn classify(e: &redis::RedisError) -> Classified {
    use redis::{ErrorKind as K, ServerErrorKind as S};
    let of = |kind, retryable| Classified { kind, retryable };
    if is_tls_failure(e) {
        return of(StoreErrorKind::Tls, false);
    }
    match e.kind() {
        K::InvalidClientConfig => of(StoreErrorKind::Config, false),
        K::Server(
            S::ClusterDown
            | S::TryAgain
            | S::MasterDown
            | S::ReadOnly
            | S::BusyLoading
            | S::Moved
            | S::Ask,
        )
        | K::ClusterConnectionNotFound => of(StoreErrorKind::Other, true),
        _ if e.is_timeout() => of(StoreErrorKind::Timeout, true),
        _ if e.is_connection_refusal() || e.is_connection_dropped() || e.is_io_error() => {
            of(StoreErrorKind::Connect, true)
        }
        _ => of(StoreErrorKind::Other, false),
    }
}

pub(crate) fn redis_error(op: &str, e: &redis::RedisError) -> Error {
    store_error_of(classify(e).kind, format!("redis {op} failed: {e}"))
}
