//! The share link the Human+ web page shows (`cli/web/app.js`), read by
//! the core's link parser: the relay's own session URL, prefix included,
//! with the token and the surface id in the fragment
//! (`{relay}/{session}#token=T&surface=S`). The page and the parser are
//! built apart; this holds them to the same form (`docs/guide/persons-page.md`,
//! "The share link").

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use human_plus_core::{InvitationLink, LinkForm, LinkOptions};

const TOKEN: &str = "hp_0123456789abcdef0123456789abcdef";

fn read(link: &str) -> InvitationLink {
    InvitationLink::parse(link, &LinkOptions::default().allow_insecure_loopback(true))
        .unwrap_or_else(|e| panic!("{link}: {e}"))
}

#[test]
fn the_pages_link_names_its_relay_session_and_token() {
    for (relay, session) in [
        ("http://127.0.0.1:8787/agent-relay", "web_0a1b2c3d4e5f"),
        ("http://127.0.0.1:8787", "web_0a1b2c3d4e5f"),
        ("http://localhost:41234/a/b", "web_ffffffffffff"),
        ("https://relay.example/agent-relay", "web_0a1b2c3d4e5f"),
    ] {
        let link = format!("{relay}/{session}#token={TOKEN}&surface=sheet%3Aweb");
        let parsed = read(&link);
        assert_eq!(parsed.relay_url(), relay, "{link}");
        assert_eq!(parsed.session_id(), session, "{link}");
        assert_eq!(parsed.token().expose(), TOKEN, "{link}");
        assert_eq!(parsed.form(), LinkForm::RelaySession, "{link}");
        assert_eq!(parsed.surface_id(), Some("sheet:web"), "{link}");
        assert!(!format!("{parsed:?}").contains(TOKEN));
        // The same parts in the Fancy Node relay's shape.
        let node = read(&format!("{relay}/{session}?token={TOKEN}"));
        assert_eq!(
            (node.relay_url(), node.session_id(), node.token().expose()),
            (relay, session, TOKEN)
        );
        assert_eq!(node.surface_id(), None);
    }
    // A surface id the label rule refuses refuses the link.
    let bad = format!("http://127.0.0.1:8787/web_0a1b2c3d4e5f#token={TOKEN}&surface=a%00b");
    assert!(
        InvitationLink::parse(&bad, &LinkOptions::default().allow_insecure_loopback(true)).is_err()
    );
    let twice = format!("http://127.0.0.1:8787/web_0a1b2c3d4e5f#token={TOKEN}&surface=a&surface=b");
    assert!(
        InvitationLink::parse(
            &twice,
            &LinkOptions::default().allow_insecure_loopback(true)
        )
        .is_err()
    );
}

#[test]
fn plain_http_off_loopback_is_still_refused() {
    let link = format!(
        "http://relay.example/agent-relay/web_0a1b2c3d4e5f#token={TOKEN}&surface=sheet%3Aweb"
    );
    assert!(
        InvitationLink::parse(&link, &LinkOptions::default().allow_insecure_loopback(true))
            .is_err()
    );
    let loopback = format!("http://127.0.0.1:8787/web_0a1b2c3d4e5f#token={TOKEN}");
    assert!(InvitationLink::parse(&loopback, &LinkOptions::default()).is_err());
}
