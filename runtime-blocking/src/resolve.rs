//! DNS: the system resolver, and the ureq resolver that vets every answer
//! through the core before ureq may connect to it. The contract
//! ([`Resolve`], the runtime crate's `ResolveBlocking`) and the fixed map
//! for tests are shared.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use human_plus_core::{Error, RelayEndpoint, TransportError, TransportErrorKind};
pub use human_plus_runtime::ResolveBlocking as Resolve;
use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

use crate::failure::FailureSlot;

/// Resolves `host` through `resolver`, giving up after `budget`.
///
/// A blocking resolver cannot be interrupted, so the lookup runs on its own
/// short-lived thread: the caller stops waiting at `budget`, and the lookup
/// thread ends when the resolver returns (for the system resolver, within
/// its own retry timeouts).
pub(crate) fn resolve_within(
    resolver: &Arc<dyn Resolve>,
    host: &str,
    port: u16,
    budget: Duration,
) -> io::Result<Vec<IpAddr>> {
    let (tx, rx) = mpsc::sync_channel(1);
    let resolver = Arc::clone(resolver);
    let name = host.to_owned();
    std::thread::Builder::new()
        .name("human-plus-dns".to_owned())
        .spawn(move || {
            let _ = tx.send(resolver.resolve(&name, port));
        })?;
    match rx.recv_timeout(budget) {
        Ok(answer) => answer,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "name resolution did not finish in time",
        )),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(io::Error::other(
            "the resolver thread ended without an answer",
        )),
    }
}

/// The ureq resolver of one request: resolves the relay's host (or takes
/// its literal address), vets the whole answer with
/// [`RelayEndpoint::vet_resolved`] and hands ureq only vetted addresses.
/// A refusal is kept in the [`FailureSlot`] and surfaces as
/// [`Error::EgressRefused`].
pub(crate) struct VettingResolver {
    pub(crate) endpoint: Arc<RelayEndpoint>,
    pub(crate) resolver: Arc<dyn Resolve>,
}

/// Records `f` in the running request's failure slot.
fn record(f: impl FnOnce(&FailureSlot)) {
    if let Some(slot) = crate::current::failures() {
        f(&slot);
    }
}

impl fmt::Debug for VettingResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VettingResolver")
            .field("host", &self.endpoint.host())
            .finish_non_exhaustive()
    }
}

/// The remaining budget of a ureq timeout, as a std duration.
pub(crate) fn budget_of(timeout: &NextTimeout) -> Duration {
    // `NotHappening` dereferences to an effectively infinite duration; the
    // runtime always sets a global timeout, so cap it at something sane.
    (*timeout.after).min(Duration::from_secs(24 * 3600))
}

fn bare_host(uri: &Uri) -> Option<&str> {
    let host = uri.host()?;
    Some(
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host),
    )
}

impl VettingResolver {
    fn answer(&self, uri: &Uri, timeout: &NextTimeout) -> Result<Vec<IpAddr>, ()> {
        // This resolver exists for one request to the relay: it resolves
        // nothing but the endpoint's host.
        if !bare_host(uri).is_some_and(|h| h.eq_ignore_ascii_case(self.endpoint.host())) {
            record(|f| {
                f.fail(
                    TransportErrorKind::Dns,
                    "the request's host is not the relay endpoint's host",
                );
            });
            return Err(());
        }
        match self.vetted(budget_of(timeout)) {
            Ok(vetted) => Ok(vetted),
            Err(Error::EgressRefused(refusal)) => {
                record(|f| f.refuse(refusal));
                Err(())
            }
            Err(e) => {
                record(|f| f.set(e));
                Err(())
            }
        }
    }

    /// The endpoint's addresses (its literal one, or the resolver's answer
    /// within `budget`), vetted by the core.
    pub(crate) fn vetted(&self, budget: Duration) -> Result<Vec<IpAddr>, Error> {
        let addrs = match self.endpoint.resolved_literal() {
            Some(ip) => vec![ip],
            None => resolve_within(
                &self.resolver,
                self.endpoint.host(),
                self.endpoint.port(),
                budget,
            )
            .map_err(|e| {
                let kind = if e.kind() == io::ErrorKind::TimedOut {
                    TransportErrorKind::Timeout
                } else {
                    TransportErrorKind::Dns
                };
                Error::Transport(TransportError::new(
                    kind,
                    format!(
                        "could not resolve the relay host [{}]: {e}",
                        self.endpoint.host()
                    ),
                ))
            })?,
        };
        self.endpoint.vet_resolved(&addrs).map_err(|refusal| {
            tracing::debug!(host = self.endpoint.host(), rule = ?refusal.rule, "resolved addresses refused by the egress policy");
            Error::EgressRefused(refusal)
        })
    }
}

impl Resolver for VettingResolver {
    fn resolve(
        &self,
        uri: &Uri,
        _config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let vetted = self
            .answer(uri, &timeout)
            .map_err(|()| ureq::Error::HostNotFound)?;
        let mut out = self.empty();
        for ip in vetted {
            if out
                .try_push(SocketAddr::new(ip, self.endpoint.port()))
                .is_err()
            {
                break;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use human_plus_runtime::StaticResolver;

    struct Slow;

    impl Resolve for Slow {
        fn resolve(&self, _host: &str, _port: u16) -> io::Result<Vec<IpAddr>> {
            std::thread::sleep(Duration::from_secs(2));
            Ok(vec![IpAddr::from([127, 0, 0, 1])])
        }
    }

    #[test]
    fn a_slow_resolver_is_abandoned_at_the_budget() {
        let slow: Arc<dyn Resolve> = Arc::new(Slow);
        let e = resolve_within(&slow, "slow.test", 443, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn the_vetting_resolver_resolves_only_the_endpoint_host() {
        let inv = human_plus_core::SurfaceInvitation::new(
            "https://relay.test",
            "session",
            "0123456789abcdef",
            "s",
            "a",
        )
        .unwrap();
        let policy = human_plus_core::EgressPolicy::new(["relay.test"])
            .allow_unverified_egress(true)
            .allow_addresses(["127.0.0.1/32".parse().unwrap()]);
        let endpoint = Arc::new(RelayEndpoint::new(&inv, "rs_1", &policy).unwrap());
        let failures = Arc::new(FailureSlot::default());
        let _entered = crate::current::enter(crate::current::Current {
            ctl: Arc::default(),
            failures: Arc::clone(&failures),
            token: None,
        });
        let resolver = VettingResolver {
            endpoint,
            resolver: Arc::new(
                StaticResolver::new()
                    .with("relay.test", [IpAddr::from([127, 0, 0, 1])])
                    .with("other.test", [IpAddr::from([127, 0, 0, 1])]),
            ),
        };
        let config = Config::default();
        let ok = resolver
            .resolve(
                &"https://relay.test/x".parse().unwrap(),
                &config,
                NextTimeout::default(),
            )
            .unwrap();
        assert_eq!(
            ok.to_vec(),
            ["127.0.0.1:443".parse::<SocketAddr>().unwrap()]
        );
        assert!(failures.take().is_none());
        assert!(
            resolver
                .resolve(
                    &"https://other.test/x".parse().unwrap(),
                    &config,
                    NextTimeout::default(),
                )
                .is_err()
        );
        assert_eq!(failures.take().unwrap().code(), "transport_failed");
    }
}
