//! The I/O a runtime supplies to the one manager flow: its driver loop,
//! its clock and its timer.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use human_plus_core::{Error, Operation, OperationOutput, Outcome, PoolConfig, WarmLeg};

use crate::parts::Parts;

/// What a runtime's driver is built from: the TLS configuration (or why it
/// could not be built, which every `https` request then reports), the
/// resolver for relay host names, and the bound on each connection step.
pub struct NetSettings<R: ?Sized> {
    /// The rustls client configuration.
    pub tls: Result<Arc<rustls::ClientConfig>, Error>,
    /// The resolver; its answers are vetted by the egress policy.
    pub resolver: Arc<R>,
    /// The bound on each connection step (resolution, TCP, CONNECT, TLS).
    pub connect_timeout: Duration,
    /// How kept connections are bounded (from the manager's
    /// [`TransportConfig::pool`](human_plus_core::TransportConfig::pool)).
    pub pool: PoolConfig,
}

impl<R: ?Sized> std::fmt::Debug for NetSettings<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetSettings")
            .field("tls", &self.tls.as_ref().map(|_| "configured"))
            .field("connect_timeout", &self.connect_timeout)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

/// Which kind of manager a driver runs under: [`AsyncFlavour`] (the
/// manager's futures wait on the runtime's reactor) or [`BlockingFlavour`]
/// (they run to completion on the calling thread).
pub trait Flavour: Send + Sync + 'static {
    /// Whether the manager's futures block the thread that polls them (so
    /// nothing beside an operation is polled while it runs: the manager
    /// renews its leases on a thread of its own instead).
    const BLOCKING: bool = false;
    /// The resolver contract of this flavour (a trait object).
    type Resolver: ?Sized + Send + Sync + 'static;
    /// The default resolver: the system's ([`SystemResolver`](crate::SystemResolver)).
    fn system_resolver() -> Arc<Self::Resolver>;
    /// The manager type of this flavour, over driver `D` and store `S`.
    type Manager<D: Driver<Flavour = Self>, S>;
    /// Makes the manager out of its parts.
    fn manager<D: Driver<Flavour = Self>, S>(parts: Parts<D, S>) -> Self::Manager<D, S>;
}

/// The async flavour: the manager is [`HumanPlus`](crate::HumanPlus), the
/// resolver [`Resolve`](crate::Resolve).
#[derive(Debug)]
pub enum AsyncFlavour {}

/// The blocking flavour: the manager is
/// [`BlockingHumanPlus`](crate::BlockingHumanPlus), the resolver
/// [`ResolveBlocking`](crate::ResolveBlocking).
#[derive(Debug)]
pub enum BlockingFlavour {}

/// The manager a driver's builder makes, over store `S`.
pub type ManagerOf<D, S> = <<D as Driver>::Flavour as Flavour>::Manager<D, S>;

/// The resolver a driver takes.
pub type ResolverOf<D> = <<D as Driver>::Flavour as Flavour>::Resolver;

/// A warm attachment's open receive stream, kept by the manager between
/// operations.
pub trait KeptStream: Send + 'static {
    /// Whether this stream can be kept at all. A driver whose stream type
    /// is `Infallible` keeps none: warm mode is turned off when its manager
    /// is built.
    const KEPT: bool = true;

    /// Feeds `leg` whatever the stream delivered while no operation ran,
    /// without waiting; a stream that ended is the leg's end. Each event is
    /// stamped with when it arrived, or, by a runtime that does not read
    /// between operations, with the earliest moment it could have: when
    /// the stream was kept (so a leg's silence and a poll's age are never
    /// underestimated).
    fn drain_into(&mut self, leg: &mut WarmLeg);
}

/// The stream of a driver that keeps none.
impl KeptStream for Infallible {
    const KEPT: bool = false;

    fn drain_into(&mut self, _leg: &mut WarmLeg) {
        match *self {}
    }
}

/// One operation for a driver to run: the core's operation and, in warm
/// mode, the attachment's kept stream.
pub struct Drive<T, D: Driver> {
    /// The operation.
    pub op: Operation<T>,
    /// The stream kept from the attachment's last operation.
    pub stream: Option<D::Stream>,
}

impl<T, D: Driver> std::fmt::Debug for Drive<T, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drive")
            .field("op", &self.op)
            .field("kept_stream", &self.stream.is_some())
            .finish()
    }
}

/// What a driver hands back: the outcome, and the stream to keep when the
/// outcome keeps its warm leg open.
pub type Driven<T, D> = Result<(Outcome<T>, Option<<D as Driver>::Stream>), Error>;

/// Everything a runtime supplies to the manager flow, and nothing else: the
/// driver loop that runs one core [`Operation`] over its sockets, the open
/// stream a warm attachment keeps between operations, the monotonic clock
/// and a timer. Every decision (what to lock, when a record is stored and
/// with which expected generation, when the init cache is settled, when a
/// warm leg is kept) is the manager's, in this crate, once.
///
/// The three runtime crates implement it; so can any other executor.
pub trait Driver: Send + Sync + Sized + 'static {
    /// The manager flavour this driver runs under.
    type Flavour: Flavour;
    /// A warm attachment's open receive stream between operations
    /// (`Infallible` for a driver that keeps none).
    type Stream: KeptStream;

    /// Builds the driver.
    fn new(net: NetSettings<ResolverOf<Self>>) -> Self;

    /// Runs `op` to its outcome over `stream` (the attachment's open stream,
    /// in warm mode), and hands the stream back when the outcome keeps its
    /// warm leg open.
    ///
    /// # Errors
    /// Only when the operation cannot progress (the core waits for nothing
    /// while no request is in flight, which it never should).
    fn drive<T: OperationOutput + Send>(
        &self,
        run: Drive<T, Self>,
    ) -> impl Future<Output = Driven<T, Self>> + Send;

    /// The monotonic clock (the operating system's by default).
    fn now() -> Instant {
        Instant::now()
    }

    /// A timer firing after `wait`: what bounds the wait for the store's
    /// lock, and paces the renewal of a held lock's lease. The default
    /// never fires, for a driver whose store calls block the polling thread
    /// and bound their own wait (the blocking runtime, whose manager renews
    /// leases on a thread).
    fn sleep(wait: Duration) -> impl Future<Output = ()> + Send {
        let _ = wait;
        std::future::pending()
    }

    /// Closes every kept connection now (what the manager's shutdown
    /// does). The default keeps nothing to close.
    fn close_idle(&self) {}
}
