//! The hostile-invitation corpus (the PHP reference's RelayEgressPolicyTest
//! and its additional port cases), every refused address class, DNS
//! answer vetting, and relay URL building, all through the public API.
//!
//! Every transport composes one `RelayEndpoint`, so this corpus is the one
//! place the policy is pinned; the conformance suite runs the same rows
//! through each runtime.

use std::net::IpAddr;

use human_plus_core::{
    EgressAddressClass as C, EgressPolicy, EgressRefusal, EgressRule, Error, ProxyCredentials,
    RelayAuth, RelayEndpoint, SurfaceInvitation, egress_address_class,
};

/// A token with characters that must be percent-encoded.
const TOKEN: &str = "s3cr3t+tok/en with~space*";
const TOKEN_ENCODED: &str = "s3cr3t%2Btok%2Fen%20with~space%2A";
const PROXY: &str = "http://egress.internal:3128";

fn inv(url: &str) -> SurfaceInvitation {
    SurfaceInvitation::new(url, "demo_001", TOKEN, "sheet:one", "sheets").unwrap()
}

fn lo_inv(url: &str) -> SurfaceInvitation {
    SurfaceInvitation::new_insecure_loopback(url, "demo_001", TOKEN, "sheet:one", "sheets").unwrap()
}

fn proxied(hosts: &[&str]) -> EgressPolicy {
    EgressPolicy::new(hosts).egress_proxy(PROXY)
}

fn unverified(hosts: &[&str]) -> EgressPolicy {
    EgressPolicy::new(hosts).allow_unverified_egress(true)
}

fn ep(invitation: &SurfaceInvitation, policy: &EgressPolicy) -> Result<RelayEndpoint, Error> {
    RelayEndpoint::new(invitation, "rs_client", policy)
}

fn refusal(r: Result<RelayEndpoint, Error>) -> EgressRefusal {
    match r {
        Err(Error::EgressRefused(e)) => {
            assert_no_token(&e.message);
            e
        }
        other => panic!("expected an egress refusal, got {other:?}"),
    }
}

fn assert_no_token(text: &str) {
    assert!(!text.contains(TOKEN), "token leaked: {text}");
    assert!(
        !text.contains(TOKEN_ENCODED),
        "encoded token leaked: {text}"
    );
    assert!(!text.contains("s3cr3t"), "token prefix leaked: {text}");
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

// ---------------------------------------------------------------------
// The corpus rows (13.6).
// ---------------------------------------------------------------------

#[test]
fn row1_no_proxy_and_not_unverified_requires_a_proxy() {
    let r = refusal(ep(
        &inv("https://relay.example.com"),
        &EgressPolicy::new(["relay.example.com"]),
    ));
    assert_eq!(r.rule, EgressRule::ProxyRequired);
    assert_eq!(
        r.message,
        "Human+ relay transport requires a trusted egress proxy; explicitly opt into unverified egress only for isolated local dogfooding."
    );
    // The proxy rule comes first: even a URL that breaks every other rule
    // is refused for the proxy.
    let r = refusal(ep(
        &inv("https://user:pw@10.0.0.1:9?q#f"),
        &EgressPolicy::new(["x"]),
    ));
    assert_eq!(r.rule, EgressRule::ProxyRequired);
}

#[test]
fn row2_host_not_declared() {
    let r = refusal(ep(
        &inv("https://relay.example.com"),
        &unverified(&["trusted.example.com"]),
    ));
    assert_eq!(r.rule, EgressRule::HostNotDeclared);
    assert_eq!(
        r.message,
        "Relay host [relay.example.com] is not declared by local Human+ policy."
    );
    // Subdomains, suffixes and trailing dots are other hosts.
    for url in [
        "https://relay.example.com.evil.example",
        "https://evil.relay.example.com",
        "https://relay.example.com.",
    ] {
        let r = refusal(ep(&inv(url), &proxied(&["relay.example.com"])));
        assert_eq!(r.rule, EgressRule::HostNotDeclared, "{url}");
    }
}

#[test]
fn hosts_compare_case_insensitively() {
    let e = ep(
        &inv("https://Relay.Example.COM"),
        &proxied(&["RELAY.example.com"]),
    )
    .unwrap();
    assert_eq!(e.host(), "relay.example.com");
}

#[test]
fn row3_port_not_declared() {
    let r = refusal(ep(
        &inv("https://relay.example.com:8443"),
        &proxied(&["relay.example.com"]),
    ));
    assert_eq!(r.rule, EgressRule::PortNotDeclared);
    assert_eq!(
        r.message,
        "Relay port [8443] is not declared by local Human+ policy."
    );
    // Declared, it passes; the explicit default port is port 443.
    let p = proxied(&["relay.example.com"]).allow_ports([443, 8443]);
    assert_eq!(
        ep(&inv("https://relay.example.com:8443"), &p)
            .unwrap()
            .port(),
        8443
    );
    assert_eq!(
        ep(
            &inv("https://relay.example.com:443"),
            &proxied(&["relay.example.com"])
        )
        .unwrap()
        .port(),
        443
    );
    // Ports are checked after hosts.
    let r = refusal(ep(
        &inv("https://other.example.com:8443"),
        &proxied(&["relay.example.com"]),
    ));
    assert_eq!(r.rule, EgressRule::HostNotDeclared);
}

const SHAPE: &str =
    "Human+ relay URL must be credential-free HTTPS without query or fragment components.";

#[test]
fn rows4_5_and_more_url_shapes() {
    let p = proxied(&["relay.example.com"]);
    for url in [
        // Row 4: credentials, and every spelling of userinfo.
        "https://user:pass@relay.example.com",
        "https://user@relay.example.com",
        "https://:pass@relay.example.com",
        "https://@relay.example.com",
        // Row 5 and the additional cases: any query or fragment, even empty.
        "https://relay.example.com?tenant=other",
        "https://relay.example.com?",
        "https://relay.example.com/?",
        "https://relay.example.com#x",
        "https://relay.example.com#",
        "https://relay.example.com/#",
        "https://relay.example.com/base?token=other",
        // A scheme the WHATWG parser would lowercase.
        "HTTPS://relay.example.com",
        "Https://relay.example.com",
        // Bytes the WHATWG parser would drop or reinterpret.
        "https://relay.example.com\\@evil.example",
        "https://relay.exa\tmple.com",
        "https://relay.exa\nmple.com",
        "https://relay.example.com/a b",
    ] {
        let Ok(invitation) = SurfaceInvitation::new(url, "demo_001", TOKEN, "s", "a") else {
            // Refused at the invitation already: fine too.
            continue;
        };
        let r = refusal(ep(&invitation, &p));
        assert_eq!(r.rule, EgressRule::UrlShape, "{url}");
        assert_eq!(r.message, SHAPE, "{url}");
    }
    let r = refusal(ep(&inv("https://user:pass@relay.example.com"), &p));
    assert!(r.message.contains("credential-free"));
    let r = refusal(ep(&inv("https://relay.example.com?tenant=other"), &p));
    assert!(r.message.contains("query or fragment"));
}

#[test]
fn row6_plain_http_is_refused_at_the_invitation() {
    for url in [
        "http://relay.example.com",
        "http://10.0.0.1",
        "ftp://relay.example.com",
    ] {
        assert!(
            SurfaceInvitation::new(url, "demo_001", TOKEN, "s", "a").is_err(),
            "{url}"
        );
        assert!(
            SurfaceInvitation::new_insecure_loopback(url, "demo_001", TOKEN, "s", "a").is_err(),
            "{url}"
        );
    }
}

#[test]
fn row7_metadata_address_is_refused_even_with_a_proxy() {
    let r = refusal(ep(
        &inv("https://169.254.169.254"),
        &proxied(&["169.254.169.254"]),
    ));
    assert_eq!(r.rule, EgressRule::PrivateAddress);
    assert_eq!(
        r.message,
        "Human+ relay resolved to a private or reserved address."
    );
}

// Row 8 (an unknown auth mode) cannot be written: `RelayAuth` is an enum.

#[test]
fn row11_token_in_query_and_no_authorization_header_by_default() {
    let e = ep(
        &inv("https://relay.example.com"),
        &proxied(&["relay.example.com"]),
    )
    .unwrap();
    assert!(
        e.inbox_url()
            .expose()
            .contains(&format!("token={TOKEN_ENCODED}"))
    );
    assert_eq!(e.auth_header(), None);
    assert_eq!(e.policy().auth_mode(), RelayAuth::Query);
}

#[test]
fn loopback_literal_is_refused_over_https_even_unverified() {
    for url in ["https://127.0.0.1", "https://[::1]"] {
        let r = refusal(ep(&inv(url), &unverified(&["127.0.0.1", "::1"])));
        assert_eq!(r.rule, EgressRule::PrivateAddress, "{url}");
    }
}

#[test]
fn non_canonical_ipv4_spellings_are_normalised_then_refused() {
    for url in [
        "https://0x7f.1",
        "https://2130706433",
        "https://017700000001",
        "https://127.1",
        "https://0177.0.0.1",
        "https://0x7f.0.0.1",
        "https://127.000.000.001",
        "https://0xa9.0xfe.0xa9.0xfe",
        "https://2852039166",
        "https://0xA9FEA9FE",
    ] {
        let host = url.trim_start_matches("https://");
        // Declared under the same spelling...
        let r = refusal(ep(&inv(url), &proxied(&[host])));
        assert_eq!(r.rule, EgressRule::PrivateAddress, "{url}");
        // ... or the canonical one.
        let r = refusal(ep(&inv(url), &proxied(&["127.0.0.1", "169.254.169.254"])));
        assert_eq!(r.rule, EgressRule::PrivateAddress, "{url}");
    }
    // Not declared at all: the host rule names the canonical address.
    let r = refusal(ep(&inv("https://0x7f.1"), &proxied(&["relay.example.com"])));
    assert_eq!(
        r.message,
        "Relay host [127.0.0.1] is not declared by local Human+ policy."
    );
}

#[test]
fn ipv6_literals_embedding_private_addresses_are_refused() {
    for host in [
        "[::ffff:127.0.0.1]",
        "[::ffff:10.0.0.1]",
        "[::ffff:169.254.169.254]",
        "[::127.0.0.1]",
        "[::ffff:0:127.0.0.1]",
        "[2002:7f00:1::1]",
        "[2002:a9fe:a9fe::]",
        "[64:ff9b::127.0.0.1]",
        "[64:ff9b::169.254.169.254]",
        "[64:ff9b:1::a00:1]",
        "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
        "[fe80::1]",
        "[fd00::1]",
        "[::]",
    ] {
        let url = format!("https://{host}");
        let r = refusal(ep(&inv(&url), &proxied(&[host])));
        assert_eq!(r.rule, EgressRule::PrivateAddress, "{url}");
    }
}

#[test]
fn public_literals_pass_and_skip_dns() {
    let e = ep(&inv("https://93.184.215.14"), &proxied(&["93.184.215.14"])).unwrap();
    assert_eq!(e.resolved_literal(), Some(ip("93.184.215.14")));
    let e = ep(
        &inv("https://[2606:4700:4700::1111]:8443"),
        &proxied(&["2606:4700:4700::1111"]).allow_ports([8443]),
    )
    .unwrap();
    assert_eq!(e.resolved_literal(), Some(ip("2606:4700:4700::1111")));
    assert_eq!(e.host(), "2606:4700:4700::1111");
    assert_eq!(e.host_header(), "[2606:4700:4700::1111]:8443");
    // A 6to4 / NAT64 address embedding a public IPv4 address passes.
    for host in ["[2002:808:808::1]", "[64:ff9b::8.8.8.8]"] {
        assert!(
            ep(&inv(&format!("https://{host}")), &proxied(&[host])).is_ok(),
            "{host}"
        );
    }
    let named = ep(
        &inv("https://relay.example.com"),
        &proxied(&["relay.example.com"]),
    )
    .unwrap();
    assert_eq!(named.resolved_literal(), None);
}

#[test]
fn address_exceptions_are_explicit_and_still_need_the_host() {
    let p = proxied(&["10.1.2.3", "127.0.0.1"]).allow_addresses([
        "10.0.0.0/8".parse().unwrap(),
        "127.0.0.1/32".parse().unwrap(),
    ]);
    assert!(ep(&inv("https://10.1.2.3"), &p).is_ok());
    assert!(ep(&inv("https://127.0.0.1"), &p).is_ok());
    assert_eq!(
        refusal(ep(&inv("https://10.1.2.4"), &p)).rule,
        EgressRule::HostNotDeclared
    );
    assert_eq!(
        refusal(ep(
            &inv("https://192.168.0.1"),
            &p.clone().allow_ports([443])
        ))
        .rule,
        EgressRule::HostNotDeclared
    );
    let p2 = proxied(&["192.168.0.1"]).allow_addresses(["10.0.0.0/8".parse().unwrap()]);
    assert_eq!(
        refusal(ep(&inv("https://192.168.0.1"), &p2)).rule,
        EgressRule::PrivateAddress
    );
}

// ---------------------------------------------------------------------
// The loopback development mode.
// ---------------------------------------------------------------------

#[test]
fn loopback_dev_mode_needs_every_condition() {
    let dev = unverified(&["127.0.0.1", "localhost", "[::1]"]).allow_ports([8787]);
    for url in [
        "http://127.0.0.1:8787",
        "http://localhost:8787",
        "http://[::1]:8787",
    ] {
        let e = ep(&lo_inv(url), &dev).unwrap();
        assert!(e.is_loopback_dev(), "{url}");
        assert_eq!(e.scheme(), "http");
        assert_eq!(e.port(), 8787);
    }
    let e = ep(&lo_inv("http://[::1]:8787"), &dev).unwrap();
    assert_eq!((e.host(), e.host_header()), ("::1", "[::1]:8787"));
    assert_eq!(e.resolved_literal(), Some(ip("::1")));

    // No unverified egress (a proxy instead): refused, and the message says
    // what is missing.
    let r = refusal(ep(
        &lo_inv("http://127.0.0.1:8787"),
        &proxied(&["127.0.0.1"]).allow_ports([8787]),
    ));
    assert_eq!(r.rule, EgressRule::InsecureLoopback);
    assert!(r.message.contains("unverified egress"), "{}", r.message);
    assert!(!r.message.contains("loopback host ("), "{}", r.message);

    // The port defaults to 80 and must be declared.
    let r = refusal(ep(&lo_inv("http://127.0.0.1"), &unverified(&["127.0.0.1"])));
    assert_eq!(r.rule, EgressRule::PortNotDeclared);
    assert!(r.message.contains("[80]"));
    assert!(
        ep(
            &lo_inv("http://127.0.0.1"),
            &unverified(&["127.0.0.1"]).allow_ports([80])
        )
        .is_ok()
    );

    // The host must be declared.
    let r = refusal(ep(
        &lo_inv("http://localhost:8787"),
        &unverified(&["127.0.0.1"]).allow_ports([8787]),
    ));
    assert_eq!(r.rule, EgressRule::HostNotDeclared);

    // An https loopback invitation is no development mode.
    let r = refusal(ep(&lo_inv("https://127.0.0.1:8787"), &dev));
    assert_eq!(r.rule, EgressRule::PrivateAddress);
}

#[test]
fn loopback_dev_mode_vets_to_loopback_only() {
    let dev = unverified(&["localhost"]).allow_ports([8787]);
    let e = ep(&lo_inv("http://localhost:8787"), &dev).unwrap();
    assert_eq!(e.resolved_literal(), None);
    let ok = [ip("127.0.0.1"), ip("::1")];
    assert_eq!(e.vet_resolved(&ok).unwrap(), ok);
    for bad in ["8.8.8.8", "10.0.0.1", "::ffff:127.0.0.1", "192.168.1.1"] {
        let r = e.vet_resolved(&[ip("127.0.0.1"), ip(bad)]).unwrap_err();
        assert_eq!(r.rule, EgressRule::PrivateAddress, "{bad}");
    }
}

// ---------------------------------------------------------------------
// The proxy.
// ---------------------------------------------------------------------

#[test]
fn the_proxy_url_is_checked_and_its_credentials_never_printed() {
    let e = ep(
        &inv("https://relay.example.com"),
        &proxied(&["relay.example.com"]),
    )
    .unwrap();
    let proxy = e.proxy().unwrap();
    assert_eq!((proxy.host.as_str(), proxy.port), ("egress.internal", 3128));
    for bad in [
        "https://user:hunter2@egress.internal:3128",
        "https://egress.internal:3128",
        "http://egress.internal:3128/path",
        "http://egress.internal:3128?x=1",
        "socks5://egress.internal:1080",
        "egress.internal:3128",
    ] {
        let p = EgressPolicy::new(["relay.example.com"]).egress_proxy(bad);
        assert!(!format!("{p:?}").contains("hunter2"));
        let r = refusal(ep(&inv("https://relay.example.com"), &p));
        assert_eq!(r.rule, EgressRule::ProxyUrl, "{bad}");
        assert!(!r.message.contains("hunter2"));
    }
    let direct = ep(
        &inv("https://relay.example.com"),
        &unverified(&["relay.example.com"]),
    )
    .unwrap();
    assert!(direct.proxy().is_none());
}

#[test]
fn proxy_credentials_from_the_url_or_apart_and_never_printed() {
    let relay = inv("https://relay.example.com");
    let with = |url: &str| EgressPolicy::new(["relay.example.com"]).egress_proxy(url);
    // Percent-decoded, split at the last '@', a ':' kept in the password.
    for (url, user, password) in [
        (
            "http://agent:hunter2@egress.internal:3128",
            "agent",
            "hunter2",
        ),
        (
            "http://agent%40corp:hun%3Ater2@egress.internal:3128",
            "agent@corp",
            "hun:ter2",
        ),
        (
            "http://agent:hun@ter2@egress.internal:3128",
            "agent",
            "hun@ter2",
        ),
        (
            "http://agent:hun:ter2@egress.internal:3128/",
            "agent",
            "hun:ter2",
        ),
        ("http://:hunter2@egress.internal:3128", "", "hunter2"),
        ("http://agent@egress.internal:3128", "agent", ""),
        ("http://agent:p%C3%A4ss@[::1]:3128", "agent", "päss"),
    ] {
        let p = with(url);
        assert!(!format!("{p:?}").contains("hunter2"), "{url}");
        assert!(!p.proxy_url().unwrap().contains('@'), "{url}");
        let e = ep(&relay, &p).unwrap();
        let proxy = e.proxy().unwrap();
        let expected = ProxyCredentials::new(user, password).unwrap();
        assert_eq!(proxy.credentials.as_ref(), Some(&expected), "{url}");
        for text in [format!("{e:?}"), format!("{proxy:?}"), proxy.to_string()] {
            assert!(
                !text.contains("hunter2") && !text.contains("ter2"),
                "{url}: {text}"
            );
        }
        let request = proxy.connect_request("93.184.215.14", 443, e.host());
        assert_eq!(
            request
                .windows(21)
                .filter(|w| w == b"Proxy-Authorization: ")
                .count(),
            1,
            "{url}"
        );
        assert!(!format!("{request:?}").contains("Basic"));
    }
    // Apart from the URL: the same credentials, the same proxy.
    let apart = EgressPolicy::new(["relay.example.com"])
        .egress_proxy("http://egress.internal:3128")
        .proxy_credentials(ProxyCredentials::parse("agent:hunter2").unwrap());
    assert_eq!(
        ep(&relay, &apart).unwrap().proxy(),
        ep(&relay, &with("http://agent:hunter2@egress.internal:3128"))
            .unwrap()
            .proxy()
    );
    // Other credentials are another proxy (a kept connection keyed on it is
    // never shared).
    assert_ne!(
        ep(&relay, &with("http://agent:other@egress.internal:3128"))
            .unwrap()
            .proxy(),
        ep(&relay, &apart).unwrap().proxy()
    );
    // No credentials: no header.
    let open = ep(&relay, &proxied(&["relay.example.com"])).unwrap();
    let request = open
        .proxy()
        .unwrap()
        .connect_request("93.184.215.14", 443, open.host());
    assert!(!request.windows(6).any(|w| w == b"Proxy-"));

    for (case, policy) in [
        (
            "twice",
            with("http://agent:hunter2@egress.internal:3128")
                .proxy_credentials(ProxyCredentials::parse("agent:hunter2").unwrap()),
        ),
        (
            "bad percent",
            with("http://agent:hunter2%zz@egress.internal:3128"),
        ),
        (
            "not utf-8",
            with("http://agent:hunter2%ff@egress.internal:3128"),
        ),
        (
            "control",
            with("http://agent:hunter2%0d%0aX-Evil:%201@egress.internal:3128"),
        ),
        ("empty", with("http://@egress.internal:3128")),
    ] {
        assert!(!format!("{policy:?}").contains("hunter2"), "{case}");
        let r = refusal(ep(&relay, &policy));
        assert_eq!(r.rule, EgressRule::ProxyCredentials, "{case}");
        assert!(
            !r.message.contains("hunter2") && !r.message.contains("Evil"),
            "{case}: {}",
            r.message
        );
    }
}

// ---------------------------------------------------------------------
// Address classes.
// ---------------------------------------------------------------------

#[test]
fn every_refused_address_class() {
    let cases: &[(&str, C)] = &[
        ("0.0.0.0", C::Unspecified),
        ("::", C::Unspecified),
        ("127.0.0.1", C::Loopback),
        ("127.255.255.254", C::Loopback),
        ("::1", C::Loopback),
        ("10.0.0.1", C::Private),
        ("172.16.0.1", C::Private),
        ("172.31.255.255", C::Private),
        ("192.168.1.1", C::Private),
        ("169.254.169.254", C::LinkLocal),
        ("169.254.0.1", C::LinkLocal),
        ("fe80::1", C::LinkLocal),
        ("febf:ffff::1", C::LinkLocal),
        ("100.64.0.1", C::SharedAddressSpace),
        ("100.127.255.254", C::SharedAddressSpace),
        ("0.1.2.3", C::ThisNetwork),
        ("192.0.0.8", C::IetfProtocolAssignment),
        ("192.0.2.1", C::Documentation),
        ("198.51.100.7", C::Documentation),
        ("203.0.113.9", C::Documentation),
        ("2001:db8::1", C::Documentation),
        ("3fff::1", C::Documentation),
        ("3fff:fff::1", C::Documentation),
        ("198.18.0.1", C::Benchmarking),
        ("198.19.255.255", C::Benchmarking),
        ("2001:2::1", C::Benchmarking),
        ("224.0.0.1", C::Multicast),
        ("239.255.255.250", C::Multicast),
        ("ff02::1", C::Multicast),
        ("ff0e::1", C::Multicast),
        ("240.0.0.1", C::Reserved),
        ("255.255.255.255", C::Reserved),
        ("192.88.99.1", C::Reserved),
        ("5f00::1", C::Reserved),
        ("4000::1", C::Reserved),
        ("e000::1", C::Reserved),
        ("fc00::1", C::UniqueLocal),
        ("fd12:3456::1", C::UniqueLocal),
        ("fec0::1", C::SiteLocal),
        ("100::1", C::Discard),
        ("2001:10::1", C::Orchid),
        ("2001:1f::1", C::Orchid),
        ("2001:20::1", C::Orchid),
        ("2001:2f::1", C::Orchid),
        // Embeddings: mapped, compatible and translated refused whatever
        // they carry, public included.
        ("::ffff:127.0.0.1", C::Ipv4Mapped),
        ("::ffff:10.0.0.1", C::Ipv4Mapped),
        ("::ffff:169.254.169.254", C::Ipv4Mapped),
        ("::ffff:8.8.8.8", C::Ipv4Mapped),
        ("::127.0.0.1", C::Ipv4Compatible),
        ("::10.0.0.1", C::Ipv4Compatible),
        ("::169.254.169.254", C::Ipv4Compatible),
        ("::8.8.8.8", C::Ipv4Compatible),
        ("::2", C::Ipv4Compatible),
        ("::ffff:0:127.0.0.1", C::Ipv4Translated),
        ("::ffff:0:a9fe:a9fe", C::Ipv4Translated),
        ("2001::1", C::Teredo),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", C::Teredo),
        ("2002:7f00:1::", C::SixToFour),
        ("2002:a00:1::1", C::SixToFour),
        ("2002:a9fe:a9fe::", C::SixToFour),
        ("2002:c0a8:101:1::1", C::SixToFour),
        ("2002:6440:1::", C::SixToFour),
        ("64:ff9b::127.0.0.1", C::Nat64),
        ("64:ff9b::10.0.0.1", C::Nat64),
        ("64:ff9b::169.254.169.254", C::Nat64),
        ("64:ff9b::192.168.0.1", C::Nat64),
        ("64:ff9b:1::1.2.3.4", C::Nat64),
        ("64:ff9b:1:ffff::1", C::Nat64),
    ];
    for &(addr, class) in cases {
        assert_eq!(egress_address_class(ip(addr)), Some(class), "{addr}");
    }
    // At least one IPv4 and one IPv6 example of each class that has both.
    for class in [
        C::Unspecified,
        C::Loopback,
        C::LinkLocal,
        C::Documentation,
        C::Benchmarking,
        C::Multicast,
        C::Reserved,
    ] {
        let v4 = cases.iter().any(|(a, c)| *c == class && ip(a).is_ipv4());
        let v6 = cases.iter().any(|(a, c)| *c == class && ip(a).is_ipv6());
        assert!(v4 && v6, "{class}");
    }
}

#[test]
fn public_addresses_pass() {
    for addr in [
        "1.1.1.1",
        "8.8.8.8",
        "93.184.215.14",
        "172.15.255.255",
        "172.32.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "169.253.255.255",
        "192.0.1.255",
        "192.0.3.0",
        "198.17.255.255",
        "198.20.0.0",
        "223.255.255.255",
        "2606:4700:4700::1111",
        "2001:4860:4860::8888",
        "2001:3::1",
        "2001:30::1",
        "2002:808:808::1",
        "64:ff9b::8.8.8.8",
        "2a00:1450:4001:80b::200e",
        "3fff:1000::1",
    ] {
        assert_eq!(egress_address_class(ip(addr)), None, "{addr}");
    }
}

// ---------------------------------------------------------------------
// Vetting DNS answers.
// ---------------------------------------------------------------------

#[test]
fn vet_resolved_answers() {
    let e = ep(
        &inv("https://relay.example.com"),
        &proxied(&["relay.example.com"]),
    )
    .unwrap();
    let public = [ip("93.184.215.14"), ip("2606:4700:4700::1111")];
    assert_eq!(e.vet_resolved(&public).unwrap(), public);
    // Duplicates collapse, order kept.
    assert_eq!(
        e.vet_resolved(&[public[1], public[0], public[1]]).unwrap(),
        [public[1], public[0]]
    );
    // A mixed answer is refused whole.
    for bad in [
        "127.0.0.1",
        "169.254.169.254",
        "10.0.0.1",
        "::ffff:127.0.0.1",
        "fd00::1",
    ] {
        let r = e.vet_resolved(&[public[0], ip(bad)]).unwrap_err();
        assert_eq!(r.rule, EgressRule::PrivateAddress, "{bad}");
        assert_eq!(
            r.message,
            "Human+ relay resolved to a private or reserved address."
        );
    }
    let r = e.vet_resolved(&[]).unwrap_err();
    assert_eq!(r.rule, EgressRule::NotResolved);
    assert_eq!(
        r.message,
        "Human+ relay host did not resolve to a public address."
    );
    // Unverified egress does not relax the address check.
    let u = ep(
        &inv("https://relay.example.com"),
        &unverified(&["relay.example.com"]),
    )
    .unwrap();
    assert!(u.vet_resolved(&[ip("127.0.0.1")]).is_err());
    // An exception lets exactly its networks through.
    let x = ep(
        &inv("https://relay.example.com"),
        &proxied(&["relay.example.com"]).allow_addresses(["10.0.0.0/8".parse().unwrap()]),
    )
    .unwrap();
    assert!(x.vet_resolved(&[ip("10.9.8.7")]).is_ok());
    assert!(
        x.vet_resolved(&[ip("10.9.8.7"), ip("192.168.0.1")])
            .is_err()
    );
    assert!(x.vet_resolved(&[ip("127.0.0.1")]).is_err());
}

// ---------------------------------------------------------------------
// URL building.
// ---------------------------------------------------------------------

fn endpoint(url: &str, auth: RelayAuth) -> RelayEndpoint {
    RelayEndpoint::new(
        &inv(url),
        "rs_0123:a.b",
        &proxied(&["relay.example.com"]).auth(auth),
    )
    .unwrap()
}

#[test]
fn urls_in_query_mode() {
    let e = endpoint("https://relay.example.com/base//", RelayAuth::Query);
    let q = format!("token={TOKEN_ENCODED}&client=rs_0123%3Aa.b");
    let base = "https://relay.example.com/base/demo_001";
    assert_eq!(e.inbox_url().expose(), format!("{base}/inbox?{q}"));
    assert_eq!(
        e.events_url().expose(),
        format!("{base}/events?{q}&direction=outbound")
    );
    assert_eq!(
        e.poll_url(1500, None).expose(),
        format!("{base}/poll?{q}&direction=outbound&wait=1500")
    );
    assert_eq!(
        e.poll_url(0, Some("0123456789abcdef")).expose(),
        format!("{base}/poll?{q}&direction=outbound&wait=0&subscriber=0123456789abcdef")
    );
    assert_eq!(
        e.broker_poll_url("outbox", 5, None).unwrap().expose(),
        format!("{base}/outbox?{q}&direction=outbound&wait=5")
    );
    assert_eq!(
        e.broker_poll_url("pending", 1, Some("17 &x=/+"))
            .unwrap()
            .expose(),
        format!("{base}/pending?{q}&direction=outbound&wait=1&after=17%20%26x%3D%2F%2B")
    );
    assert_eq!(
        e.unregister_url().expose(),
        format!("{base}/unregister?{q}")
    );
    assert_eq!(e.auth_header(), None);
    // The token comes first, the client second.
    let inbox = e.inbox_url();
    let query = inbox.expose().split_once('?').unwrap().1;
    assert!(query.starts_with("token="));
    assert!(query.split('&').nth(1).unwrap().starts_with("client="));
}

#[test]
fn url_without_path_has_no_double_slash() {
    let e = endpoint("https://relay.example.com", RelayAuth::Query);
    assert!(
        e.inbox_url()
            .expose()
            .starts_with("https://relay.example.com/demo_001/inbox?")
    );
    let e = endpoint("https://relay.example.com:443/", RelayAuth::Query);
    assert!(
        e.inbox_url()
            .expose()
            .starts_with("https://relay.example.com/demo_001/inbox?")
    );
}

#[test]
fn broker_poll_path_must_be_one_segment() {
    let e = endpoint("https://relay.example.com", RelayAuth::Query);
    for bad in [
        "", ".", "..", "a/b", "/outbox", "out box", "a?b", "a#b", "%2e%2e", "é",
    ] {
        let r = e.broker_poll_url(bad, 5, None);
        assert!(
            matches!(&r, Err(Error::EgressRefused(x)) if x.rule == EgressRule::UrlShape),
            "{bad:?}: {r:?}"
        );
    }
    assert!(e.broker_poll_url("v1.outbox_x-y~", 5, None).is_ok());
}

#[test]
fn bearer_mode_keeps_the_token_out_of_every_url() {
    let e = endpoint("https://relay.example.com", RelayAuth::Bearer);
    for url in [
        e.inbox_url(),
        e.events_url(),
        e.poll_url(25_000, Some("s")),
        e.broker_poll_url("outbox", 5, Some("1")).unwrap(),
        e.unregister_url(),
    ] {
        assert!(!url.expose().contains("token="), "{}", url.expose());
        assert_no_token(url.expose());
        assert!(url.expose().contains("?client=rs_0123%3Aa.b"));
    }
    assert_eq!(
        e.auth_header(),
        Some(("authorization", format!("Bearer {TOKEN}")))
    );
}

#[test]
fn debug_and_display_never_show_the_token() {
    for auth in [RelayAuth::Query, RelayAuth::Bearer] {
        let e = endpoint("https://relay.example.com", auth);
        assert_no_token(&format!("{e:?}"));
        assert_no_token(&format!("{:?}", e.policy()));
        for url in [
            e.inbox_url(),
            e.events_url(),
            e.poll_url(1, Some("s")),
            e.unregister_url(),
        ] {
            assert_no_token(&format!("{url:?}"));
            assert_no_token(&url.to_string());
            assert_no_token(&url.redacted());
            assert!(url.to_string().ends_with("?[redacted]"));
        }
    }
    let e = endpoint("https://relay.example.com", RelayAuth::Query);
    assert_eq!(
        e.inbox_url().to_string(),
        "https://relay.example.com/demo_001/inbox?[redacted]"
    );
    assert_eq!(
        format!("{:?}", e.inbox_url()),
        "RelayUrl(\"https://relay.example.com/demo_001/inbox?[redacted]\")"
    );
}

#[test]
fn a_refusal_never_carries_the_token() {
    // A hostile invitation that puts its own token where a message quotes
    // the URL: in the host.
    let token = "0123456789abcdefghij";
    let invitation = SurfaceInvitation::new(
        format!("https://{token}.example"),
        "demo_001",
        token,
        "s",
        "a",
    )
    .unwrap();
    let r = refusal(ep(&invitation, &proxied(&["relay.example.com"])));
    assert_eq!(r.rule, EgressRule::HostNotDeclared);
    assert!(!r.message.contains(token), "{}", r.message);
    let err = Error::EgressRefused(r);
    assert!(!err.to_string().contains(token));
    assert!(!format!("{err:?}").contains(token));
    assert_eq!(err.code(), "egress_refused");

    // And the token in a query is refused without being quoted.
    let r = refusal(ep(
        &inv(&format!("https://relay.example.com/?token={TOKEN_ENCODED}")),
        &proxied(&["relay.example.com"]),
    ));
    assert_eq!(r.message, SHAPE);
}

#[test]
fn client_id_is_required() {
    let p = proxied(&["relay.example.com"]);
    let i = inv("https://relay.example.com");
    assert_eq!(
        RelayEndpoint::new(&i, "", &p),
        Err(Error::InvalidAttachment)
    );
    assert_eq!(
        RelayEndpoint::new(&i, "a&token=x", &p),
        Err(Error::InvalidAttachment)
    );
    assert_eq!(
        RelayEndpoint::new(&i, "rs_1", &p).unwrap().client_id(),
        "rs_1"
    );
}
