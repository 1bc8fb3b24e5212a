//! The link a person shares: `InvitationLink::parse` on any text, under
//! each relay path and with plain loopback `http` allowed or not.
//!
//! Input: byte 0 = mode (bit 0: allow insecure loopback; bits 1-2: the
//! relay path, one of `agent-relay`, ``, `whiteboard-share`, `a/b.c`); the
//! rest is the link's text (skipped unless it is UTF-8).
//!
//! Properties:
//! - `parse` never panics; a refusal is always
//!   `InvalidInvitation(Link(_))`, whose message is one of the fixed texts
//!   (it quotes nothing of the link);
//! - surrounding whitespace changes nothing;
//! - an accepted link has a valid session id, a token of 16 to 512
//!   visible ASCII bytes, a relay URL that is `https://` (or `http://` to
//!   `127.0.0.1`, `[::1]` or `localhost`, only when allowed) with no
//!   userinfo, query, fragment, whitespace or backslash; it becomes an
//!   invitation, and `RelayEndpoint::new` accepts that invitation under a
//!   policy declaring exactly the link's host and port, so the host and
//!   port the link shows are the ones the egress rules check;
//! - its `Debug` never shows the token (unless a public part spells it: the
//!   relay, the session, the surface id or the application);
//! - a link naming a Reverb channel carries the token in neither URL, its
//!   relay URL is the auth bridge's, and `ReverbEndpoint::new` accepts it
//!   under a policy declaring exactly its two hosts and ports (and
//!   `RelayEndpoint::new` refuses it: no relay routes on a bridge);
//! - written again as a relay session URL (`{relay}/{session}?token=…`),
//!   within the length bound, it reads back to the same relay, session and
//!   token.

#![no_main]

use human_plus_core::{
    EgressPolicy, Error, InvitationError, InvitationLink, IpNet, LinkOptions, MAX_LINK_BYTES,
    RELAY_ROUTE_SUFFIXES, RelayEndpoint, ReverbChannel, ReverbEndpoint,
};
use libfuzzer_sys::fuzz_target;

const PATHS: [&str; 4] = ["agent-relay", "", "whiteboard-share", "a/b.c"];

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

fn unbracket(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').to_owned()
}

/// A link naming a Reverb channel: the token in neither URL, the relay URL
/// the auth bridge's, plain loopback only when allowed, and both hosts
/// accepted by the egress rules under a policy declaring exactly them.
fn reverb_checks(link: &InvitationLink, reverb: &ReverbChannel, token: &str, loopback: bool) {
    assert!(!reverb.ws_url().contains(token) && !reverb.auth_url().contains(token));
    assert_eq!(link.relay_url(), reverb.auth_url());
    assert!(human_plus_core::is_joinable_channel(reverb.channel()));
    assert!(reverb.ws_url().starts_with("wss://") || reverb.ws_url().starts_with("ws://"));
    if reverb.is_insecure_loopback() || link.is_insecure_loopback() {
        assert!(loopback);
    }
    let (ws_host, auth_host) = (unbracket(&reverb.ws_host()), unbracket(&reverb.auth_host()));
    let policy = EgressPolicy::new([ws_host.as_str(), auth_host.as_str()])
        .allow_ports([reverb.ws_port(), reverb.auth_port()])
        .allow_unverified_egress(true)
        .allow_addresses(["0.0.0.0/0", "::/0"].map(|n| n.parse::<IpNet>().unwrap()));
    let invitation = link
        .clone()
        .into_invitation(None, None)
        .expect("an accepted link is a valid invitation");
    let endpoint = ReverbEndpoint::new(&invitation, "fuzz", &policy)
        .unwrap_or_else(|e| panic!("the egress rules refuse an accepted Reverb link: {e:?}"));
    assert_eq!(endpoint.socket().port(), reverb.ws_port());
    assert_eq!(endpoint.auth().port(), reverb.auth_port());
    assert!(!endpoint.connect_url().contains(token));
    assert!(RelayEndpoint::new(&invitation, "fuzz", &policy).is_err());
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let loopback = mode & 1 == 1;
    let options = LinkOptions::default()
        .relay_path(PATHS[usize::from((mode >> 1) & 3)])
        .expect("a fixed relay path is valid")
        .allow_insecure_loopback(loopback);

    let parsed = InvitationLink::parse(text, &options);
    assert_eq!(
        parsed,
        InvitationLink::parse(&format!(" \t{text}\r\n"), &options),
        "surrounding whitespace changed the reading"
    );
    let link = match parsed {
        Err(Error::InvalidInvitation(InvitationError::Link(refusal))) => {
            // The message is the variant's fixed text.
            let message = refusal.to_string();
            assert!(message.len() < 200 && !message.contains('\n'));
            return;
        }
        Err(other) => panic!("a link refusal of another kind: {other:?}"),
        Ok(link) => link,
    };

    // What the link tells of itself.
    assert_eq!(link.form().to_string(), link.form().as_str());
    assert_eq!(options.insecure_loopback_allowed(), loopback);
    assert_eq!(
        options.relay_path_str(),
        PATHS[usize::from((mode >> 1) & 3)]
    );
    for note in link.notes() {
        let text = note.to_string();
        assert!(text.len() < 200 && !text.contains('\n'));
    }
    let _ = (link.assumed_relay_path(), link.application());
    let shown = link.default_surface_id();
    assert!(human_plus_core::is_plain_identifier(&shown), "{shown:?}");
    if let Ok(i) = link
        .clone()
        .into_invitation(Some("sheet:fuzz"), Some("fuzz-app"))
    {
        assert_eq!(i.surface_id(), "sheet:fuzz");
        assert_eq!(i.application(), "fuzz-app");
    }

    let token = link.token().expose().to_owned();
    assert!((16..=512).contains(&token.len()));
    assert!(token.bytes().all(|b| b.is_ascii_graphic()));
    assert!(human_plus_core::is_valid_session_id(link.session_id()));
    let relay = link.relay_url().to_owned();
    assert!(
        !relay.contains(['?', '#', '@', '\\', ' ']) && !relay.chars().any(char::is_control),
        "relay URL {relay:?}"
    );
    if let Some(reverb) = link.reverb() {
        reverb_checks(&link, reverb, &token, loopback);
        return;
    }
    if link.is_insecure_loopback() {
        assert!(loopback);
        assert!(relay.starts_with("http://"));
        assert!(["127.0.0.1", "[::1]", "localhost"].contains(&link.relay_host()));
    } else {
        assert!(relay.starts_with("https://"));
    }
    // The public parts a `Debug` shows may spell the token by chance: the
    // relay, the session, the surface id, the application.
    let public = [
        relay.as_str(),
        link.session_id(),
        link.surface_id().unwrap_or_default(),
        link.application().unwrap_or_default(),
    ];
    if !public.iter().any(|p| p.contains(&token)) {
        assert!(
            !format!("{link:?}").contains(&token),
            "Debug shows the token"
        );
    }

    // The egress rules read the same host and port.
    let host = link
        .relay_host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let policy = EgressPolicy::new([host.as_str()])
        .allow_ports([link.relay_port()])
        .allow_unverified_egress(true)
        .allow_addresses(["0.0.0.0/0", "::/0"].map(|n| n.parse::<IpNet>().unwrap()));
    let invitation = link
        .clone()
        .into_invitation(None, None)
        .expect("an accepted link is a valid invitation");
    let endpoint = RelayEndpoint::new(&invitation, "fuzz", &policy)
        .unwrap_or_else(|e| panic!("the egress rules refuse an accepted link's relay: {e:?}"));
    assert_eq!(endpoint.port(), link.relay_port());
    assert!(policy.allows_host(endpoint.host()));

    // Written again as a relay session URL, it reads back the same (when
    // that text is still within the length bound: percent-encoding the
    // token can triple it).
    let again = format!("{relay}/{}?token={}", link.session_id(), pct(&token));
    if !RELAY_ROUTE_SUFFIXES.contains(&link.session_id()) && again.len() <= MAX_LINK_BYTES {
        let back = InvitationLink::parse(&again, &options)
            .unwrap_or_else(|e| panic!("{again:?} does not read back: {e:?}"));
        assert_eq!(back.relay_url(), relay);
        assert_eq!(back.session_id(), link.session_id());
        assert_eq!(back.token().expose(), token);
    }
});
