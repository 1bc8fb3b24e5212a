//! What a manager is made of.

use std::time::Duration;

use human_plus_core::ManagerConfig;

use crate::KeptLegBounds;

/// What a manager is made of, as its builder assembled it.
#[derive(Debug)]
pub struct Parts<D, S> {
    /// The manager configuration.
    pub config: ManagerConfig,
    /// The attachment store.
    pub store: S,
    /// The runtime's driver.
    pub driver: D,
    /// The bound on each connection step the driver was built with.
    pub connect_timeout: Duration,
    /// How long an operation's store lock is leased.
    pub lock_lease: Duration,
    /// How long an operation waits for the store lock.
    pub lock_wait: Duration,
    /// How long a shutdown lets the operations in flight finish.
    pub shutdown_grace: Duration,
    /// The bounds on the receive legs kept between operations.
    pub kept_legs: KeptLegBounds,
}
