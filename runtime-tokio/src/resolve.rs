//! Name resolution, pluggable so tests can make a name resolve to any
//! address (a private one above all, to show it is refused).
//!
//! Whatever a [`Resolve`] answers is vetted by the core
//! ([`RelayEndpoint::vet_resolved`](human_plus_core::RelayEndpoint::vet_resolved))
//! before any connection is made, and the connection goes to a vetted
//! address only.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

/// The future a [`Resolve`] returns: the addresses of a host.
pub type Resolving<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// DNS, pluggable so tests can make a name resolve to a private address.
///
/// ```
/// use std::io;
/// use std::net::{IpAddr, Ipv4Addr};
/// use human_plus_tokio::{Resolve, Resolving};
///
/// /// Every name is the same public address.
/// struct Fixed;
///
/// impl Resolve for Fixed {
///     fn resolve<'a>(&'a self, _host: &'a str, _port: u16) -> Resolving<'a> {
///         Box::pin(async { Ok::<_, io::Error>(vec![IpAddr::V4(Ipv4Addr::new(93, 184, 215, 14))]) })
///     }
/// }
/// ```
pub trait Resolve: Send + Sync + 'static {
    /// The addresses of `host` (a name; `port` is the port that will be
    /// dialled, for resolvers that care). An empty answer is refused by the
    /// egress policy as "not resolved".
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> Resolving<'a>;
}

/// The system resolver (`getaddrinfo`, on tokio's blocking pool through
/// [`tokio::net::lookup_host`]). The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> Resolving<'a> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host, port)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// A fixed map from host name to addresses, for tests: a name it does not
/// know fails to resolve (`io::ErrorKind::NotFound`).
///
/// ```
/// use human_plus_tokio::StaticResolver;
///
/// let resolver = StaticResolver::new()
///     .with("relay.test", ["127.0.0.1".parse().unwrap()])
///     .with("metadata.test", ["169.254.169.254".parse().unwrap()]);
/// assert_eq!(resolver.lookup("relay.test").unwrap().len(), 1);
/// assert!(resolver.lookup("elsewhere.test").is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct StaticResolver {
    hosts: BTreeMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    /// A resolver that knows no name.
    #[must_use]
    pub fn new() -> Self {
        StaticResolver::default()
    }

    /// Makes `host` (compared ASCII case-insensitively) resolve to `addrs`,
    /// in that order, replacing any earlier entry.
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
        let answer = match self.lookup(host) {
            Some(addrs) => Ok(addrs.to_vec()),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                NotKnown(host.to_owned()),
            )),
        };
        Box::pin(std::future::ready(answer))
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
