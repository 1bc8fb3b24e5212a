//! DNS, pluggable so tests can make a name resolve to any address.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

/// The future a [`Resolve`] returns: the addresses of a host, in the order
/// to try them.
pub type Resolving<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Resolves the relay's host name to addresses.
///
/// The runtime vets every answer through the core's egress policy
/// ([`human_plus_core::RelayEndpoint::vet_resolved`]) and connects only to
/// the vetted addresses, so a resolver cannot widen what is reachable; it
/// can only narrow it or, in tests, make a name point at an address the
/// policy must refuse.
///
/// ```
/// use std::net::IpAddr;
/// use human_plus_async_std::{Resolve, Resolving};
///
/// /// Every name is the documentation address 192.0.2.1.
/// struct Fixed;
/// impl Resolve for Fixed {
///     fn resolve<'a>(&'a self, _host: &'a str, _port: u16) -> Resolving<'a> {
///         Box::pin(async { Ok(vec!["192.0.2.1".parse::<IpAddr>().unwrap()]) })
///     }
/// }
/// let addrs = futures_lite::future::block_on(Fixed.resolve("relay.example", 443))?;
/// assert_eq!(addrs.len(), 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait Resolve: Send + Sync + 'static {
    /// The addresses of `host` (a name; the port is given for resolvers
    /// that care, such as SRV-aware ones).
    ///
    /// # Errors
    /// Any resolution failure; the runtime reports it as a transport error
    /// of kind `dns`.
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> Resolving<'a>;
}

/// The system resolver (`getaddrinfo`, through `async_net::resolve`, which
/// runs it on a blocking thread pool). The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> Resolving<'a> {
        Box::pin(async move {
            let addrs = async_net::resolve((host, port)).await?;
            Ok(addrs.into_iter().map(|a| a.ip()).collect())
        })
    }
}

/// A fixed map from host name to addresses, for tests: a name it does not
/// know fails to resolve (`NotFound`).
///
/// ```
/// use std::net::IpAddr;
/// use human_plus_async_std::{Resolve, StaticResolver};
///
/// let ip: IpAddr = "127.0.0.1".parse().unwrap();
/// let resolver = StaticResolver::new().with("relay.test", [ip]);
/// let found = futures_lite::future::block_on(resolver.resolve("relay.test", 443))?;
/// assert_eq!(found, [ip]);
/// assert_eq!(resolver.lookup("RELAY.test"), Some(&[ip][..]));
/// assert!(futures_lite::future::block_on(resolver.resolve("other.test", 443)).is_err());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StaticResolver {
    hosts: BTreeMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    /// An empty map: every name fails to resolve.
    #[must_use]
    pub fn new() -> Self {
        StaticResolver::default()
    }

    /// Maps `host` (compared ASCII case-insensitively) to `addrs`, replacing
    /// any earlier mapping.
    #[must_use]
    pub fn with(
        mut self,
        host: impl Into<String>,
        addrs: impl IntoIterator<Item = IpAddr>,
    ) -> Self {
        self.insert(host, addrs);
        self
    }

    /// Maps `host` to `addrs` in place, replacing any earlier mapping.
    pub fn insert(&mut self, host: impl Into<String>, addrs: impl IntoIterator<Item = IpAddr>) {
        self.hosts.insert(
            host.into().to_ascii_lowercase(),
            addrs.into_iter().collect(),
        );
    }

    /// The addresses `host` maps to, if it is known.
    #[must_use]
    pub fn lookup(&self, host: &str) -> Option<&[IpAddr]> {
        self.hosts
            .get(&host.to_ascii_lowercase())
            .map(Vec::as_slice)
    }
}

impl fmt::Debug for StaticResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.hosts.iter()).finish()
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
        let found = self.lookup(host).map(<[IpAddr]>::to_vec);
        Box::pin(async move {
            found.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "the host is not in the static resolver's map",
                )
            })
        })
    }
}
