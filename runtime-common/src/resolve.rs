//! Name resolution, pluggable so tests (and deployments with their own DNS)
//! can decide what a host name resolves to: the async [`Resolve`] the
//! tokio and async-std runtimes take, the blocking [`ResolveBlocking`] the
//! blocking runtime takes, and [`StaticResolver`], a fixed map for both.
//!
//! Whatever a resolver answers is vetted by the core
//! ([`RelayEndpoint::vet_resolved`](human_plus_core::RelayEndpoint::vet_resolved))
//! before any connection is made, and the connection goes to a vetted
//! address only: a resolver cannot widen what the egress policy allows; it
//! can only narrow it or, in tests, make a name point at an address the
//! policy must refuse.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::pin::Pin;

/// The future a [`Resolve`] returns: the addresses of a host, in the order
/// to try them.
pub type Resolving<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// DNS for the async runtimes.
///
/// ```
/// use std::net::{IpAddr, ToSocketAddrs};
/// use human_plus_runtime::{Resolve, Resolving};
///
/// /// Every name is the documentation address 192.0.2.1.
/// struct Fixed;
/// impl Resolve for Fixed {
///     fn resolve<'a>(&'a self, _host: &'a str, _port: u16) -> Resolving<'a> {
///         Box::pin(async { Ok(vec!["192.0.2.1".parse::<IpAddr>().unwrap()]) })
///     }
/// }
/// let addrs = human_plus_runtime::block_on(Fixed.resolve("relay.example", 443))?;
/// assert_eq!(addrs.len(), 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait Resolve: Send + Sync + 'static {
    /// The addresses of `host` (a name; never an IP literal, which the
    /// runtime uses as it is), for a connection to `port`. An empty answer
    /// is refused by the egress policy as "not resolved".
    ///
    /// # Errors
    /// Any resolution failure; the runtime reports it as a transport error
    /// of kind `dns`.
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> Resolving<'a>;
}

/// DNS for the blocking runtime (`human_plus_blocking::Resolve`).
///
/// ```
/// use std::net::{IpAddr, ToSocketAddrs};
/// use human_plus_runtime::{ResolveBlocking, StaticResolver};
///
/// let dns = StaticResolver::new().with("relay.test", ["127.0.0.1".parse::<IpAddr>()?]);
/// assert_eq!(dns.resolve("relay.test", 443)?, ["127.0.0.1".parse::<IpAddr>()?]);
/// assert!(dns.resolve("elsewhere.test", 443).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait ResolveBlocking: Send + Sync + 'static {
    /// The addresses of `host` (a name; never an IP literal), for a
    /// connection to `port`.
    ///
    /// # Errors
    /// Any failure to resolve; it becomes a transport error of kind `dns`.
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>>;
}

/// The operating system's resolver (`getaddrinfo`, through
/// [`std::net::ToSocketAddrs`]): the default of every runtime. Blocking,
/// it resolves on the calling thread; async, on a short-lived helper thread
/// whose answer the future awaits (lookups are rare: one per new
/// connection).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

fn system_lookup(host: &str, port: u16) -> io::Result<Vec<IpAddr>> {
    Ok((host, port).to_socket_addrs()?.map(|a| a.ip()).collect())
}

impl ResolveBlocking for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>> {
        system_lookup(host, port)
    }
}

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> Resolving<'a> {
        let (tx, rx) = futures_channel::oneshot::channel();
        let name = host.to_owned();
        let spawned = std::thread::Builder::new()
            .name("human-plus-dns".to_owned())
            .spawn(move || {
                let _ = tx.send(system_lookup(&name, port));
            });
        Box::pin(async move {
            spawned?;
            rx.await.unwrap_or_else(|_| {
                Err(io::Error::other(
                    "the resolver thread ended without an answer",
                ))
            })
        })
    }
}

/// A fixed map from host name to addresses, for tests: a name it does not
/// know fails to resolve (`io::ErrorKind::NotFound`; it never falls back
/// to the system). Names are compared ASCII case-insensitively.
///
/// ```
/// use std::net::{IpAddr, ToSocketAddrs};
/// use human_plus_runtime::StaticResolver;
///
/// let resolver = StaticResolver::new()
///     .with("relay.test", ["127.0.0.1".parse::<IpAddr>()?])
///     .with("metadata.test", ["169.254.169.254".parse::<IpAddr>()?]);
/// assert_eq!(resolver.lookup("RELAY.test").map(<[IpAddr]>::len), Some(1));
/// assert!(resolver.lookup("elsewhere.test").is_none());
///
/// let collected: StaticResolver = [("relay.test", vec!["127.0.0.1".parse::<IpAddr>()?])].into_iter().collect();
/// assert_eq!(collected.lookup("relay.test"), resolver.lookup("relay.test"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaticResolver {
    hosts: BTreeMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    /// A resolver that knows no name.
    #[must_use]
    pub fn new() -> Self {
        StaticResolver::default()
    }

    /// This resolver, with `host` resolving to `addrs`, in that order,
    /// replacing any earlier entry.
    #[must_use]
    pub fn with(
        mut self,
        host: impl Into<String>,
        addrs: impl IntoIterator<Item = IpAddr>,
    ) -> Self {
        self.insert(host, addrs);
        self
    }

    /// Makes `host` resolve to `addrs` (in place).
    pub fn insert(&mut self, host: impl Into<String>, addrs: impl IntoIterator<Item = IpAddr>) {
        self.hosts.insert(
            host.into().to_ascii_lowercase(),
            addrs.into_iter().collect(),
        );
    }

    /// What `host` resolves to, if it is known.
    #[must_use]
    pub fn lookup(&self, host: &str) -> Option<&[IpAddr]> {
        self.hosts
            .get(&host.to_ascii_lowercase())
            .map(Vec::as_slice)
    }

    fn answer(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        self.lookup(host)
            .map(<[IpAddr]>::to_vec)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, NotKnown(host.to_owned())))
    }
}

impl<H: Into<String>> FromIterator<(H, Vec<IpAddr>)> for StaticResolver {
    fn from_iter<I: IntoIterator<Item = (H, Vec<IpAddr>)>>(iter: I) -> Self {
        let mut resolver = StaticResolver::new();
        for (host, addrs) in iter {
            resolver.insert(host, addrs);
        }
        resolver
    }
}

impl Resolve for StaticResolver {
    fn resolve<'a>(&'a self, host: &'a str, _port: u16) -> Resolving<'a> {
        Box::pin(std::future::ready(self.answer(host)))
    }
}

impl ResolveBlocking for StaticResolver {
    fn resolve(&self, host: &str, _port: u16) -> io::Result<Vec<IpAddr>> {
        self.answer(host)
    }
}

/// The error of a name a [`StaticResolver`] does not know.
#[derive(Debug)]
struct NotKnown(String);

impl fmt::Display for NotKnown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the static resolver knows no host [{}]", self.0)
    }
}

impl std::error::Error for NotKnown {}
