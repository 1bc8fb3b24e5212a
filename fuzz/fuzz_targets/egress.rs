//! The relay URL and the egress policy: `RelayEndpoint::new` on fuzzer-built
//! invitations and policies, the URL builders, `vet_resolved` and
//! `egress_address_class`.
//!
//! Properties:
//! - nothing panics;
//! - a refused invitation yields no endpoint (so no URL), and the refusal
//!   never carries the token (raw or percent-encoded);
//! - an accepted endpoint: its host and port are declared; a literal IP
//!   host is public or excepted (loopback in the loopback dev mode); plain
//!   HTTP only in the loopback dev mode; a proxy or unverified egress;
//! - every URL parses back to the same query: `token` first (query auth
//!   only), then a non-empty `client`, then the leg's parameters, values
//!   exactly as given; in bearer mode the token is only in the header;
//! - outside the query, in `Display`, in `redacted()` and in the
//!   endpoint's `Debug`, the token never appears (unless the invitation's
//!   own public parts, or the subscriber / cursor the caller passes,
//!   spell it);
//! - `vet_resolved` accepts only answers whose every address
//!   `egress_address_class` calls public (or an exception covers), keeps
//!   their order and drops duplicates, and refuses an empty answer;
//! - `egress_address_class` refuses everything the standard library calls
//!   loopback, private, link-local, multicast, broadcast, documentation,
//!   unspecified, unique-local or IPv4-mapped, and 6to4 / NAT64 embeddings
//!   follow the IPv4 address they embed.

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arbitrary::Arbitrary;
use human_plus_core::{
    EgressPolicy, EgressRule, Error, RelayAuth, RelayEndpoint, RelayUrl, SurfaceInvitation,
    egress_address_class,
};
use ipnet::IpNet;
use libfuzzer_sys::fuzz_target;

const HOSTS: &[&str] = &[
    "relay.example.com",
    "Relay.Example.COM",
    "relay.example.com.",
    "evil.relay.example.com",
    "169.254.169.254",
    "127.0.0.1",
    "[::1]",
    "::1",
    "localhost",
    "0x7f.1",
    "2130706433",
    "017700000001",
    "127.1",
    "0xA9FEA9FE",
    "93.184.215.14",
    "[2606:4700:4700::1111]",
    "10.0.0.1",
    "[::ffff:127.0.0.1]",
    "[::ffff:93.184.215.14]",
    "[2002:a00:1::]",
    "[64:ff9b::a9fe:a9fe]",
    "[fe80::1]",
    "ß.com",
    "xn--zca.com",
    "relay.exa\tmple.com",
];

const SCHEMES: &[&str] = &[
    "https://",
    "http://",
    "HTTPS://",
    "https:/",
    "https:///",
    "ftp://",
];
const USERINFO: &[&str] = &["", "", "", "user:pass@", "@", ":p@", "user@"];
const SUFFIX: &[&str] = &[
    "",
    "",
    "/",
    "?",
    "#",
    "?tenant=other",
    "/#",
    "/base//",
    "\\@evil.example",
];

#[derive(Arbitrary, Debug)]
enum HostChoice {
    Known(u8),
    V4([u8; 4]),
    V6([u16; 8]),
    Raw(String),
}

impl HostChoice {
    fn text(&self) -> String {
        match self {
            HostChoice::Known(i) => HOSTS[usize::from(*i) % HOSTS.len()].to_owned(),
            HostChoice::V4(o) => Ipv4Addr::from(*o).to_string(),
            HostChoice::V6(s) => format!(
                "[{}]",
                Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
            ),
            HostChoice::Raw(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum UrlChoice {
    Built {
        scheme: u8,
        userinfo: u8,
        host: HostChoice,
        port: Option<u16>,
        path: String,
        suffix: u8,
    },
    Raw(String),
}

impl UrlChoice {
    fn text(&self) -> String {
        match self {
            UrlChoice::Built {
                scheme,
                userinfo,
                host,
                port,
                path,
                suffix,
            } => {
                let mut s = String::new();
                s.push_str(SCHEMES[usize::from(*scheme) % SCHEMES.len()]);
                s.push_str(USERINFO[usize::from(*userinfo) % USERINFO.len()]);
                s.push_str(&host.text());
                if let Some(p) = port {
                    s.push(':');
                    s.push_str(&p.to_string());
                }
                if !path.is_empty() {
                    s.push('/');
                    s.push_str(path);
                }
                s.push_str(SUFFIX[usize::from(*suffix) % SUFFIX.len()]);
                s
            }
            UrlChoice::Raw(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum AddrChoice {
    V4([u8; 4]),
    V6([u8; 16]),
    SixToFour([u8; 4], u16),
    Nat64([u8; 4]),
    Mapped([u8; 4]),
}

impl AddrChoice {
    fn ip(&self) -> IpAddr {
        match self {
            AddrChoice::V4(o) => IpAddr::V4(Ipv4Addr::from(*o)),
            AddrChoice::V6(o) => IpAddr::V6(Ipv6Addr::from(*o)),
            AddrChoice::SixToFour(o, tail) => IpAddr::V6(Ipv6Addr::new(
                0x2002,
                u16::from_be_bytes([o[0], o[1]]),
                u16::from_be_bytes([o[2], o[3]]),
                *tail,
                0,
                0,
                0,
                1,
            )),
            AddrChoice::Nat64(o) => IpAddr::V6(Ipv6Addr::new(
                0x64,
                0xff9b,
                0,
                0,
                0,
                0,
                u16::from_be_bytes([o[0], o[1]]),
                u16::from_be_bytes([o[2], o[3]]),
            )),
            AddrChoice::Mapped(o) => IpAddr::V6(Ipv4Addr::from(*o).to_ipv6_mapped()),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    url: UrlChoice,
    session: Option<String>,
    token: String,
    token_marker: bool,
    client: Option<String>,
    hosts: Vec<HostChoice>,
    ports: Option<Vec<u16>>,
    proxy: Option<Option<String>>,
    unverified: bool,
    exceptions: Vec<(AddrChoice, u8)>,
    bearer: bool,
    insecure_loopback: bool,
    resolved: Vec<AddrChoice>,
    poll_path: String,
    subscriber: Option<String>,
    after: Option<String>,
    wait: u32,
}

fn pct(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn check_class_against_std(ip: IpAddr) {
    let class = egress_address_class(ip);
    match ip {
        IpAddr::V4(v4) => {
            if v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_unspecified()
            {
                assert!(class.is_some(), "{ip} is not public");
            }
            // Embeddings follow the embedded address.
            let o = v4.octets();
            let six = IpAddr::V6(Ipv6Addr::new(
                0x2002,
                u16::from_be_bytes([o[0], o[1]]),
                u16::from_be_bytes([o[2], o[3]]),
                0,
                0,
                0,
                0,
                1,
            ));
            let nat = IpAddr::V6(Ipv6Addr::new(
                0x64,
                0xff9b,
                0,
                0,
                0,
                0,
                u16::from_be_bytes([o[0], o[1]]),
                u16::from_be_bytes([o[2], o[3]]),
            ));
            assert_eq!(
                egress_address_class(six).is_some(),
                class.is_some(),
                "6to4 {six}"
            );
            assert_eq!(
                egress_address_class(nat).is_some(),
                class.is_some(),
                "nat64 {nat}"
            );
            assert!(egress_address_class(IpAddr::V6(v4.to_ipv6_mapped())).is_some());
        }
        IpAddr::V6(v6) => {
            if v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unique_local()
                || v6.is_unicast_link_local()
                || v6.to_ipv4_mapped().is_some()
            {
                assert!(class.is_some(), "{ip} is not public");
            }
            // Outside 2000::/3 nothing is public but a well-known NAT64
            // address (64:ff9b::/96) embedding a public IPv4 address.
            let seg = v6.segments();
            let nat64 = seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
            if seg[0] & 0xe000 != 0x2000 && !nat64 {
                assert!(class.is_some(), "{ip} is outside global unicast");
            }
        }
    }
}

/// One case, from the `Arbitrary` input or from a readable text spec.
struct Case {
    url: String,
    session: String,
    token: String,
    client: String,
    hosts: Vec<String>,
    ports: Option<Vec<u16>>,
    proxy: Option<String>,
    unverified: bool,
    nets: Vec<IpNet>,
    bearer: bool,
    insecure_loopback: bool,
    resolved: Vec<IpAddr>,
    poll_path: String,
    subscriber: Option<String>,
    after: Option<String>,
    wait: u32,
}

/// The token is always marked with a byte no host, session id or
/// constant message holds, so any occurrence of it is a leak.
fn marked_token(marker: bool, rest: &str) -> String {
    let mut token = format!("{}{rest}", if marker { '§' } else { '|' });
    while token.len() < 16 {
        token.push('k');
    }
    token
}

impl Case {
    fn from_input(input: &Input) -> Case {
        let nets = input
            .exceptions
            .iter()
            .filter_map(|(a, len)| {
                let ip = a.ip();
                let max = if ip.is_ipv4() { 32 } else { 128 };
                IpNet::new(ip, len % (max + 1)).ok()
            })
            .collect();
        Case {
            url: input.url.text(),
            session: input
                .session
                .clone()
                .unwrap_or_else(|| "demo_001".to_owned()),
            token: marked_token(input.token_marker, &input.token),
            client: input
                .client
                .clone()
                .unwrap_or_else(|| "rs_client".to_owned()),
            hosts: input.hosts.iter().map(HostChoice::text).collect(),
            ports: input.ports.clone(),
            proxy: match &input.proxy {
                None => None,
                Some(None) => Some("http://egress.internal:3128".to_owned()),
                Some(Some(raw)) => Some(raw.clone()),
            },
            unverified: input.unverified,
            nets,
            bearer: input.bearer,
            insecure_loopback: input.insecure_loopback,
            resolved: input.resolved.iter().map(AddrChoice::ip).collect(),
            poll_path: input.poll_path.clone(),
            subscriber: input.subscriber.clone(),
            after: input.after.clone(),
            wait: input.wait,
        }
    }

    /// `spec` then one field per line: url, session, token (after its
    /// marker), client, hosts, ports (`-`: default), proxy (`-`: none,
    /// `+`: a good one), flags (`u` unverified, `b` bearer, `l` insecure
    /// loopback, `m` the `§` marker), exceptions (CIDRs), resolved
    /// addresses, poll path, subscriber (`-`: none), after (`-`: none),
    /// wait. Lists are space-separated.
    fn from_spec(text: &str) -> Case {
        let mut l = text.split('\n');
        let mut next = || l.next().unwrap_or_default().to_owned();
        let url = next();
        let session = next();
        let token_rest = next();
        let client = next();
        let hosts = next().split_whitespace().map(str::to_owned).collect();
        let ports = next();
        let ports = (ports.trim() != "-").then(|| {
            ports
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        });
        let proxy = match next().as_str() {
            "-" => None,
            "+" => Some("http://egress.internal:3128".to_owned()),
            raw => Some(raw.to_owned()),
        };
        let flags = next();
        let nets = next()
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        let resolved = next()
            .split_whitespace()
            .filter_map(|a| a.parse().ok())
            .collect();
        let poll_path = next();
        let opt = |s: String| (s != "-").then_some(s);
        let subscriber = opt(next());
        let after = opt(next());
        let wait = next().trim().parse().unwrap_or(0);
        Case {
            url,
            session,
            token: marked_token(flags.contains('m'), &token_rest),
            client,
            hosts,
            ports,
            proxy,
            unverified: flags.contains('u'),
            nets,
            bearer: flags.contains('b'),
            insecure_loopback: flags.contains('l'),
            resolved,
            poll_path,
            subscriber,
            after,
            wait,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let case = match data.strip_prefix(b"spec\n") {
        Some(spec) => Case::from_spec(&String::from_utf8_lossy(spec)),
        None => match Input::arbitrary_take_rest(arbitrary::Unstructured::new(data)) {
            Ok(input) => Case::from_input(&input),
            Err(_) => return,
        },
    };
    check(&case);
});

fn check(input: &Case) {
    for a in input.resolved.iter().chain(
        input
            .nets
            .iter()
            .map(|n| {
                // The network's own address.
                match n {
                    IpNet::V4(v) => IpAddr::V4(v.addr()),
                    IpNet::V6(v) => IpAddr::V6(v.addr()),
                }
            })
            .collect::<Vec<_>>()
            .iter(),
    ) {
        check_class_against_std(*a);
    }

    let token = input.token.clone();
    let url = input.url.clone();
    let session = input.session.clone();
    let client = input.client.clone();
    let host_texts = input.hosts.clone();

    let mut policy = EgressPolicy::new(&host_texts).allow_unverified_egress(input.unverified);
    if let Some(ports) = &input.ports {
        policy = policy.allow_ports(ports.iter().copied());
    }
    let proxy_text = input.proxy.clone();
    if let Some(p) = &proxy_text {
        policy = policy.egress_proxy(p.clone());
    }
    let nets = input.nets.clone();
    policy = policy.allow_addresses(nets.clone());
    if input.bearer {
        policy = policy.auth(RelayAuth::Bearer);
    }

    let invitation = if input.insecure_loopback {
        SurfaceInvitation::new_insecure_loopback(&url, &session, &token, "sheet:one", "sheets")
    } else {
        SurfaceInvitation::new(&url, &session, &token, "sheet:one", "sheets")
    };
    let Ok(invitation) = invitation else {
        return;
    };

    // Where the token may legitimately be spelled: the public parts.
    let encoded = pct(&token);
    let mut public: Vec<&str> = vec![&url, &session, &client];
    public.extend(host_texts.iter().map(String::as_str));
    if let Some(p) = &proxy_text {
        public.push(p);
    }
    // The caller's own query values (a hostile relay chooses the
    // subscriber and the cursor): the token may be spelled there too.
    public.extend(input.subscriber.as_deref());
    public.extend(input.after.as_deref());
    // Either spelling in a public part may come out in the other (values
    // are percent-encoded into the URL).
    let secret = !public
        .iter()
        .any(|p| p.contains(token.as_str()) || p.contains(encoded.as_str()));
    let assert_no_token = |text: &str, what: &str| {
        if secret {
            assert!(!text.contains(&token), "{what} leaks the token: {text}");
            assert!(
                !text.contains(&encoded),
                "{what} leaks the encoded token: {text}"
            );
        }
    };

    let endpoint = match RelayEndpoint::new(&invitation, &client, &policy) {
        Err(e) => {
            assert_no_token(&format!("{e} {e:?}"), "a refusal");
            if let Error::EgressRefused(r) = &e {
                assert_ne!(r.rule, EgressRule::NotResolved);
            }
            return;
        }
        Ok(ep) => ep,
    };

    // The accepted endpoint obeys the policy.
    assert!(
        policy.allows_host(endpoint.host()),
        "undeclared host {}",
        endpoint.host()
    );
    assert!(
        policy.allows_port(endpoint.port()),
        "undeclared port {}",
        endpoint.port()
    );
    let loopback = endpoint.is_loopback_dev();
    let allowed = |ip: IpAddr| {
        if loopback {
            ip.is_loopback() && (ip.is_ipv4() || ip == IpAddr::V6(Ipv6Addr::LOCALHOST))
        } else {
            egress_address_class(ip).is_none() || nets.iter().any(|n| n.contains(&ip))
        }
    };
    if let Some(ip) = endpoint.resolved_literal() {
        assert!(allowed(ip), "a refused literal address was accepted: {ip}");
    }
    if loopback {
        assert_eq!(endpoint.scheme(), "http");
        assert!(invitation.allow_insecure_loopback() && input.unverified);
    } else {
        assert_eq!(endpoint.scheme(), "https");
    }
    assert!(endpoint.proxy().is_some() || input.unverified);
    assert_eq!(endpoint.proxy().is_some(), proxy_text.is_some());
    assert_no_token(&format!("{endpoint:?}"), "the endpoint's Debug");

    // The URLs.
    let wait = input.wait.to_string();
    let sub = input.subscriber.clone();
    let mut urls: Vec<(RelayUrl, Vec<(&str, String)>)> = vec![
        (endpoint.inbox_url(), vec![]),
        (endpoint.unregister_url(), vec![]),
        (
            endpoint.events_url(),
            vec![("direction", "outbound".to_owned())],
        ),
    ];
    let mut poll_extra = vec![("direction", "outbound".to_owned()), ("wait", wait.clone())];
    if let Some(s) = &sub {
        poll_extra.push(("subscriber", s.clone()));
    }
    urls.push((endpoint.poll_url(input.wait, sub.as_deref()), poll_extra));
    match endpoint.broker_poll_url(&input.poll_path, input.wait, input.after.as_deref()) {
        Ok(u) => {
            let p = &input.poll_path;
            assert!((1..=64).contains(&p.len()) && p != "." && p != "..");
            assert!(
                p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'))
            );
            let mut extra = vec![("direction", "outbound".to_owned()), ("wait", wait.clone())];
            if let Some(a) = &input.after {
                extra.push(("after", a.clone()));
            }
            assert!(
                u.expose()
                    .split('?')
                    .next()
                    .unwrap()
                    .ends_with(&format!("/{p}"))
            );
            urls.push((u, extra));
        }
        Err(Error::EgressRefused(r)) => assert_eq!(r.rule, EgressRule::UrlShape),
        Err(other) => panic!("unexpected {other:?}"),
    }

    match endpoint.auth_header() {
        Some((name, value)) => {
            assert!(input.bearer);
            assert_eq!(name, "authorization");
            assert_eq!(value, format!("Bearer {token}"));
        }
        None => assert!(!input.bearer),
    }

    for (u, extra) in urls {
        let exposed = u.expose();
        let q = exposed.find('?').expect("every URL has a query");
        let base = &exposed[..q];
        assert_eq!(u.redacted(), format!("{base}?[redacted]"));
        assert_eq!(u.to_string(), u.redacted());
        assert_no_token(&u.redacted(), "a redacted URL");
        assert_no_token(&format!("{u:?}"), "a URL's Debug");
        let parsed = url::Url::parse(exposed).expect("a relay URL parses");
        assert_eq!(parsed.scheme(), endpoint.scheme());
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let mut want: Vec<(String, String)> = Vec::new();
        if !input.bearer {
            want.push(("token".to_owned(), token.clone()));
        } else if secret {
            assert!(
                !exposed.contains(&encoded),
                "bearer mode puts the token in the URL"
            );
        }
        want.push(("client".to_owned(), client.clone()));
        want.extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v)));
        assert_eq!(pairs, want, "the query reads back as built");
        assert!(!client.is_empty());
    }

    // Resolution.
    let addrs: Vec<IpAddr> = input.resolved.clone();
    match endpoint.vet_resolved(&addrs) {
        Ok(v) => {
            assert!(!addrs.is_empty());
            for ip in &addrs {
                assert!(allowed(*ip), "vet_resolved accepted {ip}");
            }
            let mut dedup: Vec<IpAddr> = Vec::new();
            for ip in &addrs {
                if !dedup.contains(ip) {
                    dedup.push(*ip);
                }
            }
            assert_eq!(v, dedup);
        }
        Err(r) => match r.rule {
            EgressRule::NotResolved => assert!(addrs.is_empty()),
            EgressRule::PrivateAddress => assert!(addrs.iter().any(|ip| !allowed(*ip))),
            other => panic!("unexpected rule {other:?}"),
        },
    }
}
