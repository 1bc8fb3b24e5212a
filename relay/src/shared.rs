//! The state every connection of a relay server shares.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::broker::Broker;
use crate::cors::CorsPolicy;

/// What the state shared by every connection holds.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) broker: Mutex<Broker>,
    pub(crate) prefix: String,
    pub(crate) cors: CorsPolicy,
    /// Whether `Authorization: Bearer` is read where `?token=` is absent.
    pub(crate) bearer_auth: bool,
    pub(crate) keepalive: Duration,
    pub(crate) body_limit: usize,
    pub(crate) answer_413: bool,
    /// How long an idle keep-alive connection stays open.
    pub(crate) keep_alive_timeout: Duration,
    /// Connections accepted so far.
    pub(crate) accepted: std::sync::atomic::AtomicUsize,
    /// Bumped to close every connection once it is idle (see
    /// [`RelayHandle::close_idle_connections`](crate::RelayHandle::close_idle_connections);
    /// shutdown bumps it too).
    pub(crate) close_idle: watch::Sender<u64>,
}
