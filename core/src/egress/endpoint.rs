//! The relay endpoint and the egress policy, as pure functions.
//!
//! Every transport composes one [`RelayEndpoint`]: the URL shape, the host
//! and port allowlists, the address check, the proxy requirement and the
//! auth mode live here once, so two runtimes cannot drift apart on an SSRF
//! guard. Nothing here resolves a name or opens a socket: the runtime
//! resolves the host, passes the answer through
//! [`RelayEndpoint::vet_resolved`] and connects to the vetted addresses
//! only (or, for a literal IP host, to [`RelayEndpoint::resolved_literal`]
//! without any DNS). Redirects are never followed.
//!
//! The relay token is a bearer credential. It appears only in the URL that
//! [`RelayUrl::expose`] returns or in [`RelayEndpoint::auth_header`]; every
//! `Debug` and `Display` here redacts it, and no refusal names it.

use std::fmt::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use url::{Host, Url};

use crate::egress::proxy::{ProxyConnectRequest, ProxyCredentials, connect_request_with};
use crate::error::{EgressRefusal, EgressRule, Error, RelayPathNotFound};
use crate::invite::invitation::{RelayToken, SurfaceInvitation, is_loopback_host};

/// The broker dialect's default poll path (seed 000's `outbox`).
pub const DEFAULT_BROKER_POLL_PATH: &str = "outbox";

const EGRESS_PROXY_REQUIRED: &str = "Human+ relay transport requires a trusted egress proxy; explicitly opt into unverified egress only for isolated local dogfooding.";
const EGRESS_URL_SHAPE: &str =
    "Human+ relay URL must be credential-free HTTPS without query or fragment components.";
const EGRESS_PRIVATE: &str = "Human+ relay resolved to a private or reserved address.";
const EGRESS_NOT_RESOLVED: &str = "Human+ relay host did not resolve to a public address.";
const EGRESS_PROXY_URL: &str = "Human+ egress proxy must be an http://[user:password@]host:port URL without path, query or fragment.";
const EGRESS_NOT_A_RELAY: &str = "This Human+ invitation names a Reverb channel, not an HTTP relay: it is reached through its WebSocket server and auth bridge (ReverbEndpoint).";
const EGRESS_POLL_PATH: &str = "Human+ long-poll path must be one URL path segment of 1 to 64 letters, digits, '.', '_', '~' or '-'.";

/// Where the relay token goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum RelayAuth {
    /// `token=` first in the query string: the Fancy relay's contract,
    /// because a browser `EventSource` cannot set a header. The default.
    #[default]
    Query,
    /// `Authorization: Bearer <token>`, for relays that read the header.
    /// The token is then never in the URL.
    Bearer,
}

/// The local egress policy: which relay hosts and ports may be reached,
/// through which proxy, and how the token is sent.
///
/// Hosts are compared after the same normalisation the relay URL gets
/// (ASCII-lowercased, IDNA, IPv4 in dotted form, IPv6 bracketed), so
/// `Relay.Example.COM` declares `relay.example.com` and `0x7f.1` declares
/// `127.0.0.1`.
///
/// ```
/// use human_plus_core::{EgressPolicy, RelayAuth};
///
/// let policy = EgressPolicy::new(["relay.fancy.example"])
///     .egress_proxy("http://egress.internal:3128")
///     .auth(RelayAuth::Bearer);
/// assert_eq!(policy.allowed_ports(), [443]);
/// assert!(policy.allows_host("RELAY.fancy.example"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct EgressPolicy {
    allowed_hosts: Vec<String>,
    allowed_ports: Vec<u16>,
    /// The proxy URL with any userinfo taken out.
    egress_proxy: Option<String>,
    /// The userinfo taken out of the proxy URL, still percent-encoded.
    proxy_userinfo: Option<ProxyUserinfo>,
    proxy_credentials: Option<ProxyCredentials>,
    allow_unverified_egress: bool,
    allow_addresses: Vec<IpNet>,
    auth: RelayAuth,
}

impl EgressPolicy {
    /// A policy declaring `allowed_hosts`, port 443, no proxy, no
    /// unverified egress, no address exceptions and query auth.
    #[must_use]
    pub fn new<I, S>(allowed_hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        EgressPolicy {
            allowed_hosts: allowed_hosts
                .into_iter()
                .map(|h| egress_normalize_host(h.as_ref()))
                .collect(),
            allowed_ports: vec![443],
            egress_proxy: None,
            proxy_userinfo: None,
            proxy_credentials: None,
            allow_unverified_egress: false,
            allow_addresses: Vec::new(),
            auth: RelayAuth::Query,
        }
    }

    /// Replaces the declared ports (default `[443]`). A URL without a port
    /// uses its scheme's default: 443 for `https`, 80 for `http`.
    #[must_use]
    pub fn allow_ports(mut self, ports: impl IntoIterator<Item = u16>) -> Self {
        self.allowed_ports = ports.into_iter().collect();
        self
    }

    /// Sends every relay connection through this trusted HTTP CONNECT
    /// proxy, `http://host:port`, or `http://user:password@host:port` for a
    /// proxy that asks for credentials (percent-encoded as in any URL:
    /// `%40` for `@`, `%3A` for a `:` in the password is optional). Checked
    /// by [`RelayEndpoint::new`].
    ///
    /// The credentials are taken out of the URL at once: they are sent
    /// only as `Proxy-Authorization: Basic` on the CONNECT request to the
    /// proxy (never to the relay), and never appear in `Debug`, an error or
    /// a log line. [`EgressPolicy::proxy_url`] returns the URL without
    /// them.
    ///
    /// ```
    /// use human_plus_core::EgressPolicy;
    ///
    /// let policy = EgressPolicy::new(["relay.example"])
    ///     .egress_proxy("http://agent:s3cret@egress.internal:3128");
    /// assert_eq!(policy.proxy_url(), Some("http://egress.internal:3128"));
    /// assert!(!format!("{policy:?}").contains("s3cret"));
    /// ```
    #[must_use]
    pub fn egress_proxy(mut self, url: impl Into<String>) -> Self {
        let (url, userinfo) = split_userinfo(url.into());
        self.egress_proxy = Some(url);
        self.proxy_userinfo = userinfo.map(ProxyUserinfo);
        self
    }

    /// The egress proxy's credentials, given apart from its URL (read
    /// from a file or an environment variable, say). Giving them here and
    /// in the URL as well is refused by [`RelayEndpoint::new`].
    ///
    /// ```
    /// use human_plus_core::{EgressPolicy, ProxyCredentials};
    ///
    /// let policy = EgressPolicy::new(["relay.example"])
    ///     .egress_proxy("http://egress.internal:3128")
    ///     .proxy_credentials(ProxyCredentials::parse("agent:s3cret")?);
    /// assert!(policy.has_proxy_credentials());
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn proxy_credentials(mut self, credentials: ProxyCredentials) -> Self {
        self.proxy_credentials = Some(credentials);
        self
    }

    /// Whether credentials for the egress proxy were given (in its URL or
    /// apart).
    #[must_use]
    pub fn has_proxy_credentials(&self) -> bool {
        self.proxy_userinfo.is_some() || self.proxy_credentials.is_some()
    }

    /// Allows connecting without an egress proxy. For isolated local
    /// dogfooding only: application-level DNS checks are not a rebinding
    /// boundary, the proxy is. Resolved addresses are still vetted.
    #[must_use]
    pub fn allow_unverified_egress(mut self, allow: bool) -> Self {
        self.allow_unverified_egress = allow;
        self
    }

    /// Explicit exceptions to the address check, for tests and local
    /// development (a relay on `127.0.0.1` behind TLS, a lab network).
    ///
    /// **Dangerous**: every address in these networks becomes reachable
    /// for any declared host, including through DNS answers. The host and
    /// port must still be declared.
    #[must_use]
    pub fn allow_addresses(mut self, nets: impl IntoIterator<Item = IpNet>) -> Self {
        self.allow_addresses = nets.into_iter().collect();
        self
    }

    /// Sets where the token goes (default [`RelayAuth::Query`]).
    #[must_use]
    pub fn auth(mut self, auth: RelayAuth) -> Self {
        self.auth = auth;
        self
    }

    /// The declared hosts, normalised.
    #[must_use]
    pub fn allowed_hosts(&self) -> &[String] {
        &self.allowed_hosts
    }

    /// The declared ports.
    #[must_use]
    pub fn allowed_ports(&self) -> &[u16] {
        &self.allowed_ports
    }

    /// The configured proxy URL, unchecked, without the credentials it
    /// was given with.
    #[must_use]
    pub fn proxy_url(&self) -> Option<&str> {
        self.egress_proxy.as_deref()
    }

    /// Whether unverified (proxy-less) egress is allowed.
    #[must_use]
    pub fn unverified_egress_allowed(&self) -> bool {
        self.allow_unverified_egress
    }

    /// The address exceptions.
    #[must_use]
    pub fn address_exceptions(&self) -> &[IpNet] {
        &self.allow_addresses
    }

    /// The auth mode.
    #[must_use]
    pub fn auth_mode(&self) -> RelayAuth {
        self.auth
    }

    /// Whether `host` (normalised like the relay URL's) is declared.
    #[must_use]
    pub fn allows_host(&self, host: &str) -> bool {
        let host = egress_normalize_host(host);
        self.allowed_hosts.contains(&host)
    }

    /// Whether `port` is declared.
    #[must_use]
    pub fn allows_port(&self, port: u16) -> bool {
        self.allowed_ports.contains(&port)
    }
}

impl fmt::Debug for EgressPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The credentials were taken out of the proxy URL; a URL that
        // still holds an `@` (a malformed one, refused later) is not
        // printed either.
        let proxy = self
            .egress_proxy
            .as_deref()
            .map(|p| if p.contains('@') { "[redacted]" } else { p });
        f.debug_struct("EgressPolicy")
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_ports", &self.allowed_ports)
            .field("egress_proxy", &proxy)
            .field(
                "proxy_credentials",
                &self.has_proxy_credentials().then_some("[redacted]"),
            )
            .field("allow_unverified_egress", &self.allow_unverified_egress)
            .field("allow_addresses", &self.allow_addresses)
            .field("auth", &self.auth)
            .finish()
    }
}

/// A checked egress proxy address: connect here and send
/// [`ProxyAddr::connect_request`].
///
/// Two `ProxyAddr`s are equal only with the same credentials, so a kept
/// connection keyed on it is never reused under other credentials.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProxyAddr {
    /// The proxy host as a name or an IP address (IPv6 without brackets),
    /// ready for a resolver.
    pub host: String,
    /// The proxy port (80 when the URL had none).
    pub port: u16,
    /// The credentials sent on CONNECT, if the proxy asks for them
    /// (redacted in `Debug`).
    pub credentials: Option<ProxyCredentials>,
}

impl ProxyAddr {
    /// The CONNECT request head for a tunnel to `target_host:target_port`,
    /// with `Proxy-Authorization: Basic` when this proxy has credentials;
    /// see [`crate::proxy_connect_request`] for the arguments (pass the
    /// vetted IP address as `target_host`).
    ///
    /// ```
    /// use human_plus_core::{ProxyAddr, ProxyCredentials};
    ///
    /// let open = ProxyAddr { host: "egress.internal".into(), port: 3128, credentials: None };
    /// assert_eq!(
    ///     &*open.connect_request("93.184.215.14", 443, "relay.example"),
    ///     b"CONNECT 93.184.215.14:443 HTTP/1.1\r\nHost: relay.example:443\r\n\r\n"
    /// );
    /// let guarded = ProxyAddr { credentials: Some(ProxyCredentials::new("Aladdin", "open sesame")?), ..open };
    /// assert!(guarded
    ///     .connect_request("93.184.215.14", 443, "relay.example")
    ///     .ends_with(b"\r\nProxy-Authorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==\r\n\r\n"));
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn connect_request(
        &self,
        target_host: &str,
        target_port: u16,
        authority_host: &str,
    ) -> ProxyConnectRequest {
        connect_request_with(
            self.credentials.as_ref(),
            target_host,
            target_port,
            authority_host,
        )
    }
}

/// The userinfo taken out of a proxy URL (percent-encoded), redacted in
/// `Debug`.
#[derive(Clone, PartialEq, Eq)]
struct ProxyUserinfo(String);

impl fmt::Debug for ProxyUserinfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Takes the userinfo out of `scheme://userinfo@authority...`: the URL
/// without it, and the userinfo (split at the last `@` of the authority,
/// as URL parsers do). Anything else is returned as it is.
fn split_userinfo(raw: String) -> (String, Option<String>) {
    let Some(scheme_end) = raw.find("://").map(|i| i + 3) else {
        return (raw, None);
    };
    let after = raw.get(scheme_end..).unwrap_or_default();
    let authority_len = after.find(['/', '?', '#']).unwrap_or(after.len());
    let Some(at) = after.get(..authority_len).and_then(|a| a.rfind('@')) else {
        return (raw, None);
    };
    let userinfo = after.get(..at).unwrap_or_default().to_owned();
    let url = format!(
        "{}{}",
        raw.get(..scheme_end).unwrap_or_default(),
        after.get(at + 1..).unwrap_or_default()
    );
    (url, Some(userinfo))
}

/// The credentials of a proxy URL's userinfo: `user[:password]`, each
/// percent-decoded to UTF-8.
fn egress_parse_userinfo(raw: &str) -> Result<ProxyCredentials, Error> {
    let bad = |why: &str| -> Error {
        EgressRefusal::new(
            EgressRule::ProxyCredentials,
            format!("Human+ egress proxy credentials in the proxy URL are unusable: {why}."),
        )
        .into()
    };
    let (user, password) = raw.split_once(':').unwrap_or((raw, ""));
    let decode = |part: &str| -> Result<String, Error> {
        let bytes = part.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            if b == b'%' {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| bad("a '%' is not followed by two hex digits"))?;
                out.push(hex);
                i += 3;
            } else {
                out.push(b);
                i += 1;
            }
        }
        String::from_utf8(out).map_err(|_| bad("they do not decode to UTF-8"))
    };
    ProxyCredentials::new(decode(user)?, decode(password)?)
}

impl fmt::Display for ProxyAddr {
    /// `host:port`, with an IPv6 host in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Why an address is not public. `None` from [`egress_address_class`]
/// means public.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum EgressAddressClass {
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`.
    Private,
    /// `169.254.0.0/16` (cloud metadata included), `fe80::/10`.
    LinkLocal,
    /// Carrier-grade NAT, `100.64.0.0/10`.
    SharedAddressSpace,
    /// "This network", `0.0.0.0/8`.
    ThisNetwork,
    /// IETF protocol assignments, `192.0.0.0/24`.
    IetfProtocolAssignment,
    /// `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`,
    /// `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18.0.0/15`, `2001:2::/48`.
    Benchmarking,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `240.0.0.0/4` (broadcast included), the deprecated 6to4 relay
    /// anycast `192.88.99.0/24`, SRv6 SIDs `5f00::/16`, and IPv6 outside
    /// global unicast `2000::/3` not classified otherwise.
    Reserved,
    /// Unique local, `fc00::/7`.
    UniqueLocal,
    /// Deprecated site-local, `fec0::/10`.
    SiteLocal,
    /// Discard-only, `100::/64`.
    Discard,
    /// ORCHID, `2001:10::/28` and `2001:20::/28`.
    Orchid,
    /// IPv4-mapped, `::ffff:0:0/96` (refused whatever it embeds).
    Ipv4Mapped,
    /// IPv4-compatible (deprecated), `::/96` (refused whatever it embeds).
    Ipv4Compatible,
    /// IPv4-translated, `::ffff:0:0:0/96` (refused whatever it embeds).
    Ipv4Translated,
    /// Teredo, `2001::/32` (its client address is obfuscated, so refused
    /// outright).
    Teredo,
    /// 6to4, `2002::/16`, embedding a non-public IPv4 address.
    SixToFour,
    /// NAT64: `64:ff9b::/96` embedding a non-public IPv4 address, or the
    /// local-use prefix `64:ff9b:1::/48` (not globally reachable).
    Nat64,
}

impl EgressAddressClass {
    /// A stable `lower_snake_case` name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            EgressAddressClass::Unspecified => "unspecified",
            EgressAddressClass::Loopback => "loopback",
            EgressAddressClass::Private => "private",
            EgressAddressClass::LinkLocal => "link_local",
            EgressAddressClass::SharedAddressSpace => "shared_address_space",
            EgressAddressClass::ThisNetwork => "this_network",
            EgressAddressClass::IetfProtocolAssignment => "ietf_protocol_assignment",
            EgressAddressClass::Documentation => "documentation",
            EgressAddressClass::Benchmarking => "benchmarking",
            EgressAddressClass::Multicast => "multicast",
            EgressAddressClass::Reserved => "reserved",
            EgressAddressClass::UniqueLocal => "unique_local",
            EgressAddressClass::SiteLocal => "site_local",
            EgressAddressClass::Discard => "discard",
            EgressAddressClass::Orchid => "orchid",
            EgressAddressClass::Ipv4Mapped => "ipv4_mapped",
            EgressAddressClass::Ipv4Compatible => "ipv4_compatible",
            EgressAddressClass::Ipv4Translated => "ipv4_translated",
            EgressAddressClass::Teredo => "teredo",
            EgressAddressClass::SixToFour => "6to4",
            EgressAddressClass::Nat64 => "nat64",
        }
    }
}

impl fmt::Display for EgressAddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const fn egress_v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

const fn egress_v6(s: [u16; 8], len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
    )
}

/// The non-public IPv4 networks, checked in order.
const EGRESS_V4: [(Ipv4Net, EgressAddressClass); 15] = {
    use EgressAddressClass as C;
    [
        (egress_v4(0, 0, 0, 0, 8), C::ThisNetwork),
        (egress_v4(10, 0, 0, 0, 8), C::Private),
        (egress_v4(100, 64, 0, 0, 10), C::SharedAddressSpace),
        (egress_v4(127, 0, 0, 0, 8), C::Loopback),
        (egress_v4(169, 254, 0, 0, 16), C::LinkLocal),
        (egress_v4(172, 16, 0, 0, 12), C::Private),
        (egress_v4(192, 0, 0, 0, 24), C::IetfProtocolAssignment),
        (egress_v4(192, 0, 2, 0, 24), C::Documentation),
        (egress_v4(192, 88, 99, 0, 24), C::Reserved),
        (egress_v4(192, 168, 0, 0, 16), C::Private),
        (egress_v4(198, 18, 0, 0, 15), C::Benchmarking),
        (egress_v4(198, 51, 100, 0, 24), C::Documentation),
        (egress_v4(203, 0, 113, 0, 24), C::Documentation),
        (egress_v4(224, 0, 0, 0, 4), C::Multicast),
        // Broadcast 255.255.255.255 included.
        (egress_v4(240, 0, 0, 0, 4), C::Reserved),
    ]
};

/// The non-public IPv6 networks refused outright, checked in order (the
/// embedding prefixes 6to4 and NAT64 are handled separately).
const EGRESS_V6: [(Ipv6Net, EgressAddressClass); 17] = {
    use EgressAddressClass as C;
    [
        (egress_v6([0, 0, 0, 0, 0, 0, 0, 0], 128), C::Unspecified),
        (egress_v6([0, 0, 0, 0, 0, 0, 0, 1], 128), C::Loopback),
        (egress_v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96), C::Ipv4Mapped),
        (
            egress_v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96),
            C::Ipv4Translated,
        ),
        (egress_v6([0, 0, 0, 0, 0, 0, 0, 0], 96), C::Ipv4Compatible),
        (egress_v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), C::Nat64),
        (egress_v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), C::Discard),
        (egress_v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32), C::Teredo),
        (
            egress_v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48),
            C::Benchmarking,
        ),
        (egress_v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28), C::Orchid),
        (egress_v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28), C::Orchid),
        (
            egress_v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
            C::Documentation,
        ),
        (
            egress_v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),
            C::Documentation,
        ),
        (egress_v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16), C::Reserved),
        (egress_v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), C::UniqueLocal),
        (egress_v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), C::LinkLocal),
        (egress_v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), C::SiteLocal),
    ]
};

const EGRESS_V6_MULTICAST: Ipv6Net = egress_v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8);
const EGRESS_V6_GLOBAL: Ipv6Net = egress_v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);
const EGRESS_V6_6TO4: Ipv6Net = egress_v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16);
const EGRESS_V6_NAT64: Ipv6Net = egress_v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);

/// Classifies an address for egress: `None` means public (reachable),
/// `Some(class)` says why it is refused.
///
/// Refused: loopback, unspecified, private, link-local (cloud metadata
/// included), CGNAT, "this network", IETF protocol assignments,
/// documentation, benchmarking, multicast, reserved and broadcast, ULA,
/// site-local, discard, ORCHID, every IPv4-mapped / -compatible /
/// -translated IPv6 address, Teredo, the NAT64 local-use prefix, 6to4 and
/// well-known NAT64 addresses embedding a non-public IPv4 address, and
/// IPv6 outside global unicast `2000::/3`. A 6to4 or NAT64 address
/// embedding a public IPv4 address is public.
///
/// ```
/// use human_plus_core::{egress_address_class, EgressAddressClass};
///
/// assert_eq!(egress_address_class("169.254.169.254".parse()?), Some(EgressAddressClass::LinkLocal));
/// assert_eq!(egress_address_class("::ffff:127.0.0.1".parse()?), Some(EgressAddressClass::Ipv4Mapped));
/// assert_eq!(egress_address_class("2002:a00:1::".parse()?), Some(EgressAddressClass::SixToFour));
/// assert_eq!(egress_address_class("93.184.215.14".parse()?), None);
/// assert_eq!(egress_address_class("2606:2800:21f:cb07:6820:80da:af6b:8b2c".parse()?), None);
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[must_use]
pub fn egress_address_class(ip: IpAddr) -> Option<EgressAddressClass> {
    match ip {
        IpAddr::V4(v4) => egress_v4_class(v4),
        IpAddr::V6(v6) => egress_v6_class(v6),
    }
}

fn egress_v4_class(ip: Ipv4Addr) -> Option<EgressAddressClass> {
    if ip.is_unspecified() {
        return Some(EgressAddressClass::Unspecified);
    }
    EGRESS_V4
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|&(_, class)| class)
}

fn egress_v6_class(ip: Ipv6Addr) -> Option<EgressAddressClass> {
    if let Some(&(_, class)) = EGRESS_V6.iter().find(|(net, _)| net.contains(&ip)) {
        return Some(class);
    }
    if EGRESS_V6_MULTICAST.contains(&ip) {
        return Some(EgressAddressClass::Multicast);
    }
    let o = ip.octets();
    if EGRESS_V6_6TO4.contains(&ip) {
        let [_, _, a, b, c, d, ..] = o;
        return egress_v4_class(Ipv4Addr::new(a, b, c, d)).map(|_| EgressAddressClass::SixToFour);
    }
    if EGRESS_V6_NAT64.contains(&ip) {
        let [.., a, b, c, d] = o;
        return egress_v4_class(Ipv4Addr::new(a, b, c, d)).map(|_| EgressAddressClass::Nat64);
    }
    if !EGRESS_V6_GLOBAL.contains(&ip) {
        return Some(EgressAddressClass::Reserved);
    }
    None
}

/// The host as the policy compares it: lowercased, IDNA-mapped, IPv4 in
/// dotted form, IPv6 in brackets; left lowercased when it does not parse.
fn egress_normalize_host(host: &str) -> String {
    let lower = host.trim().to_ascii_lowercase();
    let unbracketed = lower
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(&lower);
    if let Ok(v6) = unbracketed.parse::<Ipv6Addr>() {
        return Host::<String>::Ipv6(v6).to_string();
    }
    match Host::parse(&lower) {
        Ok(h) => h.to_string(),
        Err(_) => lower,
    }
}

/// A client id: 1 to 128 of `[A-Za-z0-9_.:-]`.
fn egress_is_client_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

/// Appends `s` percent-encoded per RFC 3986: only the unreserved
/// characters `A-Z a-z 0-9 - . _ ~` stay as they are.
fn egress_pct_encode(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// Whether `url`-shaped text is free of anything the WHATWG parser would
/// silently drop or reinterpret: whitespace, controls, backslashes.
fn egress_has_hidden_bytes(raw: &str) -> bool {
    raw.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'\\')
}

fn egress_parse_proxy(raw: &str) -> Result<ProxyAddr, EgressRefusal> {
    let bad = || EgressRefusal::new(EgressRule::ProxyUrl, EGRESS_PROXY_URL);
    let Some(rest) = raw.strip_prefix("http://") else {
        return Err(bad());
    };
    if egress_has_hidden_bytes(raw) || rest.contains(['@', '?', '#']) {
        return Err(bad());
    }
    let url = Url::parse(raw).map_err(|_| bad())?;
    if url.scheme() != "http"
        || !url.username().is_empty()
        || url.password().is_some()
        || url.path() != "/"
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err(bad());
    }
    let host = match url.host() {
        Some(Host::Domain(d)) if !d.is_empty() => d.to_owned(),
        Some(Host::Ipv4(ip)) => ip.to_string(),
        Some(Host::Ipv6(ip)) => ip.to_string(),
        _ => return Err(bad()),
    };
    Ok(ProxyAddr {
        host,
        port: url.port_or_known_default().unwrap_or(80),
        credentials: None,
    })
}

/// Step 2: the raw URL's shape. The raw text is checked as well as the
/// parse, because the WHATWG parser drops an empty userinfo, strips tabs
/// and newlines, reads `\` as `/` and lowercases the scheme.
fn egress_parse_relay_url(raw: &str) -> Result<Url, EgressRefusal> {
    let bad = || EgressRefusal::new(EgressRule::UrlShape, EGRESS_URL_SHAPE);
    let Some(rest) = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"))
    else {
        return Err(bad());
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if egress_has_hidden_bytes(raw) || raw.contains(['?', '#']) || authority.contains('@') {
        return Err(bad());
    }
    let url = Url::parse(raw).map_err(|_| bad())?;
    let host_ok = match url.host() {
        Some(Host::Domain(d)) => !d.is_empty(),
        Some(_) => true,
        None => false,
    };
    if !matches!(url.scheme(), "https" | "http")
        || !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
        || !host_ok
    {
        return Err(bad());
    }
    Ok(url)
}

/// A full relay URL whose query (which carries the token in query-auth
/// mode) is redacted by `Debug` and `Display`.
///
/// ```
/// use human_plus_core::{EgressPolicy, RelayEndpoint, SurfaceInvitation};
///
/// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
/// let policy = EgressPolicy::new(["relay.example"]).egress_proxy("http://egress.internal:3128");
/// let url = RelayEndpoint::new(&inv, "rs_1", &policy)?.inbox_url();
/// assert_eq!(url.to_string(), "https://relay.example/demo_001/inbox?[redacted]");
/// assert_eq!(url.expose(), "https://relay.example/demo_001/inbox?token=0123456789abcdef&client=rs_1");
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RelayUrl {
    full: String,
    query_start: usize,
    /// Where the percent-encoded token value sits in `full` (query auth).
    token_span: Option<(usize, usize)>,
}

/// What [`RelayUrl::masked`] puts where the token was: URL-safe, and
/// distinctive enough never to occur in a real request line otherwise.
pub const TOKEN_MARKER: &str = "HUMAN-PLUS-TOKEN-MARKER";

impl RelayUrl {
    /// A URL that holds no token (a Reverb invitation's auth bridge: the
    /// token goes in the `authorization` header only).
    pub(crate) fn plain(url: &str) -> RelayUrl {
        RelayUrl {
            full: url.to_owned(),
            query_start: url.find('?').unwrap_or(url.len()),
            token_span: None,
        }
    }

    /// The full URL, token included in query-auth mode: only for the one
    /// place that sends the request.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.full
    }

    /// The URL with the token value replaced by [`TOKEN_MARKER`], and the
    /// percent-encoded token that belongs there (`None` in bearer mode,
    /// where the URL holds no token).
    ///
    /// For HTTP stacks that log the request line they are given: hand them
    /// the masked URL and put the token back into the bytes on their way to
    /// the socket, so no log line of theirs can hold it.
    ///
    /// ```
    /// use human_plus_core::{EgressPolicy, RelayEndpoint, SurfaceInvitation, TOKEN_MARKER};
    ///
    /// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
    /// let policy = EgressPolicy::new(["relay.example"]).egress_proxy("http://egress.internal:3128");
    /// let url = RelayEndpoint::new(&inv, "rs_1", &policy)?.inbox_url();
    /// let (masked, token) = url.masked();
    /// assert_eq!(masked, format!("https://relay.example/demo_001/inbox?token={TOKEN_MARKER}&client=rs_1"));
    /// assert_eq!(token.as_deref(), Some("0123456789abcdef"));
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn masked(&self) -> (String, Option<String>) {
        match self.token_span {
            Some((start, end)) => {
                let head = self.full.get(..start).unwrap_or_default();
                let tail = self.full.get(end..).unwrap_or_default();
                let token = self.full.get(start..end).unwrap_or_default();
                (
                    format!("{head}{TOKEN_MARKER}{tail}"),
                    Some(token.to_owned()),
                )
            }
            None => (self.full.clone(), None),
        }
    }

    /// The URL with its query replaced by `[redacted]`.
    #[must_use]
    pub fn redacted(&self) -> String {
        let base = self.full.get(..self.query_start).unwrap_or_default();
        format!("{base}?[redacted]")
    }
}

impl fmt::Debug for RelayUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RelayUrl").field(&self.redacted()).finish()
    }
}

impl fmt::Display for RelayUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// The relay endpoint of one attachment: the invitation checked against
/// the local [`EgressPolicy`], and the URLs of every relay leg.
///
/// Built only through [`RelayEndpoint::new`], so holding one means the
/// URL passed the policy. `Debug` never shows the token.
///
/// ```
/// use human_plus_core::{EgressPolicy, EgressRule, Error, RelayEndpoint, SurfaceInvitation};
///
/// let inv = SurfaceInvitation::new("https://169.254.169.254", "demo_001", "0123456789abcdef", "s", "a")?;
/// let policy = EgressPolicy::new(["169.254.169.254"]).egress_proxy("http://egress.internal:3128");
/// match RelayEndpoint::new(&inv, "rs_1", &policy) {
///     Err(Error::EgressRefused(r)) => assert_eq!(r.rule, EgressRule::PrivateAddress),
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayEndpoint {
    /// `{base}/{session}`, no query.
    session_base: String,
    token: RelayToken,
    client_id: String,
    scheme: String,
    host: String,
    host_header: String,
    port: u16,
    literal: Option<IpAddr>,
    loopback_dev: bool,
    proxy: Option<ProxyAddr>,
    policy: EgressPolicy,
    /// The relay base URL and the relay path the link did not name (see
    /// [`SurfaceInvitation::assumed_relay_path`]).
    assumed: Option<(String, String)>,
}

impl RelayEndpoint {
    /// Checks `invitation` against `policy` and builds the endpoint for
    /// `client_id`. The rules, in order:
    ///
    /// 1. a proxy is configured, or unverified egress is allowed
    ///    ([`EgressRule::ProxyRequired`]); a configured proxy must be
    ///    `http://[user:password@]host[:port]` with no path, query or
    ///    fragment ([`EgressRule::ProxyUrl`]), and its credentials usable
    ///    and given once, in the URL or apart
    ///    ([`EgressRule::ProxyCredentials`]);
    /// 2. the URL is `https://` (scheme in lowercase), with no userinfo
    ///    (not even an empty `@`), no query and no fragment (not even an
    ///    empty `?` or `#`), no whitespace, control or `\`
    ///    ([`EgressRule::UrlShape`]); `http://` only in the loopback
    ///    development mode, which needs a loopback host (`127.0.0.1`,
    ///    `[::1]`, `localhost`), an invitation made with
    ///    [`SurfaceInvitation::new_insecure_loopback`] and unverified egress
    ///    ([`EgressRule::InsecureLoopback`], naming what is missing);
    /// 3. the host is declared ([`EgressRule::HostNotDeclared`]);
    /// 4. the port, explicit or the scheme's default (443 for `https`, 80
    ///    for `http`), is declared ([`EgressRule::PortNotDeclared`]);
    /// 5. a literal IP host is public ([`egress_address_class`]), or covered
    ///    by [`EgressPolicy::allow_addresses`]; in the loopback development
    ///    mode it must be loopback ([`EgressRule::PrivateAddress`]).
    ///    Non-canonical IPv4 spellings (`0x7f.1`, `2130706433`,
    ///    `017700000001`, `127.1`) are normalised first, so they are caught.
    ///
    /// A named host is checked when the runtime resolves it, with
    /// [`RelayEndpoint::vet_resolved`].
    ///
    /// # Errors
    /// [`Error::EgressRefused`] as above (the message names the host or
    /// port, never the token); [`Error::InvalidAttachment`] when
    /// `client_id` is not 1 to 128 of `[A-Za-z0-9_.:-]`.
    pub fn new(
        invitation: &SurfaceInvitation,
        client_id: &str,
        policy: &EgressPolicy,
    ) -> Result<RelayEndpoint, Error> {
        if !invitation.transport().is_http_relay() {
            // Its relay URL is the channel's auth bridge: relay routes
            // there would carry the token in a URL.
            return Err(EgressRefusal::new(EgressRule::UrlShape, EGRESS_NOT_A_RELAY).into());
        }
        Self::vet(
            &VetTarget {
                url: invitation.relay_url(),
                insecure_loopback_invitation: invitation.allow_insecure_loopback(),
                session_id: invitation.session_id(),
                token: invitation.token(),
                assumed: invitation
                    .assumed_relay_path()
                    .map(|path| (invitation.relay_url().to_owned(), path.to_owned())),
            },
            client_id,
            policy,
        )
    }

    /// The checks of [`RelayEndpoint::new`] on one URL.
    pub(crate) fn vet(
        target: &VetTarget<'_>,
        client_id: &str,
        policy: &EgressPolicy,
    ) -> Result<RelayEndpoint, Error> {
        if !egress_is_client_id(client_id) {
            return Err(Error::InvalidAttachment);
        }
        let token = target.token;
        let refuse = |rule: EgressRule, message: String| {
            Error::EgressRefused(EgressRefusal::new(rule, egress_scrub(message, token)))
        };

        // 1. The proxy, and its credentials.
        let proxy = match &policy.egress_proxy {
            Some(raw) => {
                let mut proxy = egress_parse_proxy(raw)?;
                proxy.credentials = match (&policy.proxy_userinfo, &policy.proxy_credentials) {
                    (Some(_), Some(_)) => {
                        return Err(EgressRefusal::new(
                            EgressRule::ProxyCredentials,
                            "Human+ egress proxy credentials were given twice: in the proxy URL and apart.",
                        )
                        .into());
                    }
                    (Some(userinfo), None) => Some(egress_parse_userinfo(&userinfo.0)?),
                    (None, given) => given.clone(),
                };
                Some(proxy)
            }
            None if policy.allow_unverified_egress => None,
            None => {
                return Err(refuse(
                    EgressRule::ProxyRequired,
                    EGRESS_PROXY_REQUIRED.to_owned(),
                ));
            }
        };

        // 2. The URL's shape, and the loopback development mode.
        let url = egress_parse_relay_url(target.url)?;
        let loopback_dev = url.scheme() == "http";
        if loopback_dev {
            let mut missing = Vec::new();
            if !is_loopback_host(&url) {
                missing.push("a loopback host (127.0.0.1, [::1] or localhost)");
            }
            if !target.insecure_loopback_invitation {
                missing.push("an invitation created for insecure loopback");
            }
            if !policy.allow_unverified_egress {
                missing.push("a policy that allows unverified egress");
            }
            if !missing.is_empty() {
                return Err(refuse(
                    EgressRule::InsecureLoopback,
                    format!(
                        "Human+ relay URL uses plain HTTP, which is allowed only for a local loopback relay; missing: {}.",
                        missing.join(", ")
                    ),
                ));
            }
        }

        // 3. The host.
        let (host, literal) = match url.host() {
            Some(Host::Domain(d)) => (d.to_owned(), None),
            Some(Host::Ipv4(ip)) => (ip.to_string(), Some(IpAddr::V4(ip))),
            Some(Host::Ipv6(ip)) => (ip.to_string(), Some(IpAddr::V6(ip))),
            None => return Err(EgressRefusal::new(EgressRule::UrlShape, EGRESS_URL_SHAPE).into()),
        };
        let host_key = url.host_str().unwrap_or_default().to_owned();
        if !policy.allowed_hosts.contains(&host_key) {
            return Err(refuse(
                EgressRule::HostNotDeclared,
                format!("Relay host [{host_key}] is not declared by local Human+ policy."),
            ));
        }

        // 4. The port.
        let port = url
            .port_or_known_default()
            .unwrap_or(if loopback_dev { 80 } else { 443 });
        if !policy.allowed_ports.contains(&port) {
            return Err(refuse(
                EgressRule::PortNotDeclared,
                format!("Relay port [{port}] is not declared by local Human+ policy."),
            ));
        }

        let mut session_base = url.as_str().trim_end_matches('/').to_owned();
        session_base.push('/');
        egress_pct_encode(&mut session_base, target.session_id);
        let endpoint = RelayEndpoint {
            session_base,
            token: token.clone(),
            client_id: client_id.to_owned(),
            scheme: url.scheme().to_owned(),
            host,
            host_header: match url.port() {
                Some(p) => format!("{host_key}:{p}"),
                None => host_key,
            },
            port,
            literal,
            loopback_dev,
            proxy,
            policy: policy.clone(),
            assumed: target.assumed.clone(),
        };

        // 5. A literal address.
        if let Some(ip) = literal
            && !endpoint.address_allowed(ip)
        {
            return Err(refuse(
                EgressRule::PrivateAddress,
                EGRESS_PRIVATE.to_owned(),
            ));
        }
        Ok(endpoint)
    }

    fn address_allowed(&self, ip: IpAddr) -> bool {
        if self.loopback_dev {
            return match ip {
                IpAddr::V4(v4) => v4.is_loopback(),
                IpAddr::V6(v6) => v6 == Ipv6Addr::LOCALHOST,
            };
        }
        egress_address_class(ip).is_none()
            || self.policy.allow_addresses.iter().any(|n| n.contains(&ip))
    }

    /// Vets the addresses the runtime's resolver returned for
    /// [`host`](RelayEndpoint::host); the runtime must connect to the
    /// returned addresses only (duplicates removed, order kept).
    ///
    /// The whole answer is refused when any address is not public (and not
    /// excepted by [`EgressPolicy::allow_addresses`]): a mixed answer is a
    /// rebinding smell, not something to filter. In the loopback
    /// development mode only loopback addresses pass. This applies with
    /// unverified egress too.
    ///
    /// ```
    /// use human_plus_core::{EgressPolicy, EgressRule, RelayEndpoint, SurfaceInvitation};
    ///
    /// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
    /// let ep = RelayEndpoint::new(&inv, "rs_1", &EgressPolicy::new(["relay.example"]).allow_unverified_egress(true))?;
    /// let public = "93.184.215.14".parse().unwrap();
    /// let metadata = "169.254.169.254".parse().unwrap();
    /// assert_eq!(ep.vet_resolved(&[public]).unwrap(), [public]);
    /// assert_eq!(ep.vet_resolved(&[public, metadata]).unwrap_err().rule, EgressRule::PrivateAddress);
    /// assert_eq!(ep.vet_resolved(&[]).unwrap_err().rule, EgressRule::NotResolved);
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`EgressRule::NotResolved`] for an empty answer,
    /// [`EgressRule::PrivateAddress`] for a refused address.
    pub fn vet_resolved(&self, addrs: &[IpAddr]) -> Result<Vec<IpAddr>, EgressRefusal> {
        if addrs.is_empty() {
            return Err(EgressRefusal::new(
                EgressRule::NotResolved,
                EGRESS_NOT_RESOLVED,
            ));
        }
        if addrs.iter().any(|ip| !self.address_allowed(*ip)) {
            return Err(EgressRefusal::new(
                EgressRule::PrivateAddress,
                EGRESS_PRIVATE,
            ));
        }
        let mut vetted: Vec<IpAddr> = Vec::with_capacity(addrs.len());
        for ip in addrs {
            if !vetted.contains(ip) {
                vetted.push(*ip);
            }
        }
        Ok(vetted)
    }

    /// The host's address when the URL names a literal IP (already vetted
    /// by [`RelayEndpoint::new`]): connect to it without DNS.
    #[must_use]
    pub fn resolved_literal(&self) -> Option<IpAddr> {
        self.literal
    }

    /// Builds `{base}/{session}/{path}?` + the query: `token` (query auth
    /// only), `client`, then `extra` in order.
    fn leg(&self, path: &str, extra: &[(&str, &str)]) -> RelayUrl {
        let mut full = String::with_capacity(self.session_base.len() + path.len() + 96);
        full.push_str(&self.session_base);
        full.push('/');
        full.push_str(path);
        let query_start = full.len();
        let mut sep = '?';
        let mut param = |full: &mut String, key: &str, value: &str| {
            full.push(sep);
            sep = '&';
            egress_pct_encode(full, key);
            full.push('=');
            egress_pct_encode(full, value);
        };
        let mut token_span = None;
        if self.policy.auth == RelayAuth::Query {
            param(&mut full, "token", self.token.expose());
            let start = query_start + "?token=".len();
            token_span = Some((start, full.len()));
        }
        param(&mut full, "client", &self.client_id);
        for (key, value) in extra {
            param(&mut full, key, value);
        }
        RelayUrl {
            full,
            query_start,
            token_span,
        }
    }

    /// Whether requests go over TLS: `https`, or plain HTTP only in the
    /// loopback development mode (the only other case
    /// [`RelayEndpoint::new`] accepts).
    #[must_use]
    pub fn uses_tls(&self) -> bool {
        !self.loopback_dev
    }

    /// `POST {base}/{session}/inbox?token=…&client=…`: where frames go.
    #[must_use]
    pub fn inbox_url(&self) -> RelayUrl {
        self.leg("inbox", &[])
    }

    /// `GET {base}/{session}/events?token=…&client=…&direction=outbound`:
    /// the SSE receive leg.
    #[must_use]
    pub fn events_url(&self) -> RelayUrl {
        self.leg("events", &[("direction", "outbound")])
    }

    /// `GET {base}/{session}/poll?token=…&client=…&direction=outbound&wait=<ms>[&subscriber=<id>]`:
    /// the Fancy relay's long-poll leg (`wait` in milliseconds; the relay
    /// clamps it to 0..25000).
    #[must_use]
    pub fn poll_url(&self, wait_ms: u32, subscriber: Option<&str>) -> RelayUrl {
        let wait = wait_ms.to_string();
        match subscriber {
            Some(s) => self.leg(
                "poll",
                &[
                    ("direction", "outbound"),
                    ("wait", &wait),
                    ("subscriber", s),
                ],
            ),
            None => self.leg("poll", &[("direction", "outbound"), ("wait", &wait)]),
        }
    }

    /// `GET {base}/{session}/{path}?token=…&client=…&direction=outbound&wait=<s>[&after=<cursor>]`:
    /// seed 000's broker long-poll leg (`wait` in seconds; `path` is
    /// usually [`DEFAULT_BROKER_POLL_PATH`]).
    ///
    /// # Errors
    /// [`Error::EgressRefused`] ([`EgressRule::UrlShape`]) unless `path` is
    /// one segment of 1 to 64 of `[A-Za-z0-9._~-]`, and not `.` or `..`.
    pub fn broker_poll_url(
        &self,
        path: &str,
        wait_secs: u32,
        after: Option<&str>,
    ) -> Result<RelayUrl, Error> {
        let valid = (1..=64).contains(&path.len())
            && path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'))
            && path.bytes().any(|b| b != b'.');
        if !valid {
            return Err(EgressRefusal::new(EgressRule::UrlShape, EGRESS_POLL_PATH).into());
        }
        let wait = wait_secs.to_string();
        Ok(match after {
            Some(a) => self.leg(
                path,
                &[("direction", "outbound"), ("wait", &wait), ("after", a)],
            ),
            None => self.leg(path, &[("direction", "outbound"), ("wait", &wait)]),
        })
    }

    /// `POST {base}/{session}/unregister?token=…&client=…`. On the Fancy
    /// relay this ends the session for everyone: see the design's "detach"
    /// decision before sending it.
    #[must_use]
    pub fn unregister_url(&self) -> RelayUrl {
        self.leg("unregister", &[])
    }

    /// `("authorization", "Bearer <token>")` in bearer mode, `None` in
    /// query mode (the token is never in both places).
    #[must_use]
    pub fn auth_header(&self) -> Option<(&'static str, String)> {
        match self.policy.auth {
            RelayAuth::Query => None,
            RelayAuth::Bearer => Some(("authorization", format!("Bearer {}", self.token.expose()))),
        }
    }

    /// The host to resolve and to verify TLS against: a name, or an IP
    /// address (IPv6 without brackets).
    #[must_use]
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The `Host` header value: the host (IPv6 in brackets), with the port
    /// when the URL gave a non-default one.
    #[must_use]
    pub fn host_header(&self) -> &str {
        &self.host_header
    }

    /// The port to connect to (explicit, or the scheme's default).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `https`, or `http` in the loopback development mode.
    #[must_use]
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// Whether this is the plain-HTTP loopback development mode.
    #[must_use]
    pub fn is_loopback_dev(&self) -> bool {
        self.loopback_dev
    }

    /// The checked egress proxy, when one is configured (also in the
    /// loopback development mode; the runtime decides whether a loopback
    /// relay is reached through it).
    #[must_use]
    pub fn proxy(&self) -> Option<&ProxyAddr> {
        self.proxy.as_ref()
    }

    /// The policy this endpoint was checked against.
    #[must_use]
    pub fn policy(&self) -> &EgressPolicy {
        &self.policy
    }

    /// The client id sent as `client=`.
    #[must_use]
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// What a relay failure means for this endpoint: a 404
    /// ([`Error::RelayFailed`]) when the invitation's relay path was
    /// assumed ([`SurfaceInvitation::assumed_relay_path`]) is
    /// [`Error::RelayPathNotFound`], naming the path and the option that
    /// changes it; anything else is returned as it is. On the Fancy relay a
    /// 404 means only that no route matched (an unknown session is 410), so
    /// a wrong relay path is what it points at, on the first exchange or
    /// any later one.
    ///
    /// ```
    /// use human_plus_core::{EgressPolicy, Error, LinkOptions, RelayEndpoint, SurfaceInvitation};
    ///
    /// let policy = EgressPolicy::new(["app.example"]).allow_unverified_egress(true);
    /// let token = "0123456789abcdef0123456789abcdef";
    /// let page = SurfaceInvitation::from_link(
    ///     &format!("https://app.example/board#session=S1_abcd&token={token}"),
    ///     &LinkOptions::default(),
    /// )?;
    /// let ep = RelayEndpoint::new(&page, "c1", &policy)?;
    /// let e = ep.explain(Error::RelayFailed { status: 404 });
    /// assert!(matches!(&e, Error::RelayPathNotFound(n) if n.relay_path() == "agent-relay"));
    /// assert_eq!(ep.explain(Error::RelayFailed { status: 502 }), Error::RelayFailed { status: 502 });
    ///
    /// let named = SurfaceInvitation::from_link(
    ///     &format!("https://app.example/agent-relay/S1_abcd#token={token}"),
    ///     &LinkOptions::default(),
    /// )?;
    /// let ep = RelayEndpoint::new(&named, "c1", &policy)?;
    /// assert_eq!(ep.explain(Error::RelayFailed { status: 404 }), Error::RelayFailed { status: 404 });
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn explain(&self, error: Error) -> Error {
        match (&error, &self.assumed) {
            (Error::RelayFailed { status: 404 }, Some((url, path))) => {
                Error::RelayPathNotFound(RelayPathNotFound::new(url, path))
            }
            _ => error,
        }
    }

    /// Which kept connections a request of this endpoint may use: see
    /// [`ConnectionKey`].
    #[must_use]
    pub fn connection_key(&self) -> ConnectionKey {
        ConnectionKey {
            tls: self.uses_tls(),
            host: self.host.clone(),
            port: self.port,
            proxy: self.proxy.clone(),
            auth: self.policy.auth_mode(),
        }
    }
}

/// One URL to vet, with what the rules need of its invitation.
pub(crate) struct VetTarget<'a> {
    /// The URL (`https://`, or `http://` in the loopback development mode).
    pub(crate) url: &'a str,
    /// Whether the invitation allows plain loopback.
    pub(crate) insecure_loopback_invitation: bool,
    /// The session id, for relay routes.
    pub(crate) session_id: &'a str,
    /// The token, scrubbed from messages.
    pub(crate) token: &'a RelayToken,
    /// The relay URL and the relay path a page link did not name.
    pub(crate) assumed: Option<(String, String)>,
}

/// Which connections to the relay are interchangeable: a kept connection
/// is reused only for a request with the same key — the same scheme, host
/// and port, the same egress proxy (the tunnel is the proxy's) and the
/// same way of sending the token.
///
/// The address a connection went to is not part of the key but a property
/// of the connection: it was resolved and vetted by the egress policy when
/// the connection was made, for this host, and a connection older than
/// [`PoolConfig::lifetime`](crate::PoolConfig::lifetime) is not reused, so
/// the name is resolved and vetted again. Resolving on every request to
/// look a connection up would cost a lookup (a round trip to a resolver)
/// per request, which is what keeping connections saves.
///
/// ```
/// use human_plus_core::{EgressPolicy, RelayEndpoint, SurfaceInvitation};
///
/// let a = SurfaceInvitation::new("https://relay.test", "s_one", "0123456789abcdef", "x", "y")?;
/// let b = SurfaceInvitation::new("https://relay.test", "s_two", "fedcba9876543210", "x", "y")?;
/// let proxied = EgressPolicy::new(["relay.test"]).egress_proxy("http://egress.internal:3128");
/// let key = |inv: &SurfaceInvitation, policy: &EgressPolicy| RelayEndpoint::new(inv, "c", policy).map(|e| e.connection_key());
/// // Two sessions on one relay share connections; another proxy does not.
/// assert_eq!(key(&a, &proxied)?, key(&b, &proxied)?);
/// let other = EgressPolicy::new(["relay.test"]).egress_proxy("http://egress.other:3128");
/// assert_ne!(key(&a, &proxied)?, key(&a, &other)?);
/// assert!(key(&a, &proxied)?.uses_tls());
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionKey {
    tls: bool,
    host: String,
    port: u16,
    proxy: Option<ProxyAddr>,
    auth: RelayAuth,
}

impl ConnectionKey {
    /// Whether the connection runs TLS.
    #[must_use]
    pub fn uses_tls(&self) -> bool {
        self.tls
    }

    /// The relay host.
    #[must_use]
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The relay port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The egress proxy the connection tunnels through.
    #[must_use]
    pub fn proxy(&self) -> Option<&ProxyAddr> {
        self.proxy.as_ref()
    }
}

/// Belt and braces: a message built from the URL cannot carry the token
/// even when a hostile invitation put it in the host.
fn egress_scrub(message: String, token: &RelayToken) -> String {
    let secret = token.expose();
    if !secret.is_empty() && message.contains(secret) {
        message.replace(secret, "[redacted]")
    } else {
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef-token";

    fn inv(url: &str) -> SurfaceInvitation {
        SurfaceInvitation::new(url, "demo_001", TOKEN, "s", "a").unwrap()
    }

    fn rule(r: Result<RelayEndpoint, Error>) -> EgressRule {
        match r {
            Err(Error::EgressRefused(e)) => e.rule,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn normalisation_of_declared_hosts() {
        assert_eq!(
            egress_normalize_host(" Relay.Example.COM "),
            "relay.example.com"
        );
        assert_eq!(egress_normalize_host("0x7f.1"), "127.0.0.1");
        assert_eq!(egress_normalize_host("::1"), "[::1]");
        assert_eq!(egress_normalize_host("[0:0::1]"), "[::1]");
        assert_eq!(egress_normalize_host("ß.com"), "xn--zca.com");
        assert_eq!(egress_normalize_host("a b"), "a b");
    }

    #[test]
    fn percent_encoding_is_rfc3986() {
        let mut s = String::new();
        egress_pct_encode(&mut s, "a b+c/d~e*f_g.h-i%é");
        assert_eq!(s, "a%20b%2Bc%2Fd~e%2Af_g.h-i%25%C3%A9");
    }

    #[test]
    fn proxy_urls() {
        let ok = egress_parse_proxy("http://egress.internal:3128").unwrap();
        assert_eq!(ok.to_string(), "egress.internal:3128");
        assert_eq!(egress_parse_proxy("http://[::1]:8080").unwrap().host, "::1");
        assert_eq!(egress_parse_proxy("http://proxy/").unwrap().port, 80);
        for bad in [
            "https://proxy:3128",
            "http://user:pw@proxy:3128",
            "http://@proxy:3128",
            "http://proxy:3128/path",
            "http://proxy:3128?x",
            "http://proxy:3128#",
            "proxy:3128",
            "http://",
            "http://pro xy:1",
            "HTTP://proxy:1",
        ] {
            assert!(egress_parse_proxy(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn host_header_and_ports() {
        let p = EgressPolicy::new(["relay.example"])
            .allow_unverified_egress(true)
            .allow_ports([443, 8443]);
        let a = RelayEndpoint::new(&inv("https://relay.example:443/"), "c", &p).unwrap();
        assert_eq!((a.host_header(), a.port()), ("relay.example", 443));
        let b = RelayEndpoint::new(&inv("https://relay.example:8443"), "c", &p).unwrap();
        assert_eq!((b.host_header(), b.port()), ("relay.example:8443", 8443));
        assert_eq!(
            rule(RelayEndpoint::new(
                &inv("https://relay.example:444"),
                "c",
                &p
            )),
            EgressRule::PortNotDeclared
        );
    }

    #[test]
    fn client_id_is_checked() {
        let p = EgressPolicy::new(["relay.example"]).allow_unverified_egress(true);
        for bad in ["", "a b", "a&token=x", &"x".repeat(129)] {
            assert_eq!(
                RelayEndpoint::new(&inv("https://relay.example"), bad, &p),
                Err(Error::InvalidAttachment)
            );
        }
    }

    #[test]
    fn scrub_removes_the_token() {
        let t = RelayToken::new("secret-secret-secret");
        assert_eq!(
            egress_scrub("a secret-secret-secret b".into(), &t),
            "a [redacted] b"
        );
    }

    #[test]
    fn tables_are_consistent() {
        // Every table network classifies as its own class (order matters
        // only for the IPv6 compat/mapped overlap, which is deliberate).
        for (net, class) in EGRESS_V4 {
            if net.addr() != Ipv4Addr::UNSPECIFIED && net.prefix_len() < 32 {
                assert_eq!(egress_v4_class(net.addr()), Some(class), "{net}");
            }
        }
        for (net, class) in EGRESS_V6 {
            let probe = net.hosts().nth(5).unwrap_or(net.addr());
            assert_eq!(egress_v6_class(probe), Some(class), "{net}");
        }
    }
}
