//! The link writer and what reads a link or a credential a person types:
//! `ShareLink::new` / `expose` / `masked`, `SurfaceInvitation::from_link`,
//! and `ProxyCredentials::parse`.
//!
//! Input: byte 0 = mode (bit 0: the parts come as link text to read, else
//! as parts to write; bit 1: a surface id is given); the rest, split at NUL
//! bytes, is the relay URL, the session id, the token and the surface id
//! (lossy UTF-8), or the link's text; the whole rest is also read as proxy
//! credentials.
//!
//! Properties:
//! - a link written from parts reads back to exactly those parts (relay
//!   without its trailing `/`, session, token, surface) through
//!   `InvitationLink::parse` and `SurfaceInvitation::from_link`;
//! - `masked` is the link with the token's text replaced by the mask, and
//!   neither it nor `Debug` shows the token (unless a public part spells
//!   it);
//! - the writer is the inverse of the reader on valid links: any relay
//!   session link `parse` accepts is written again (unless its surface id
//!   is not a plain identifier, the one rule the writer adds), and that
//!   link reads back to the same relay, session, token and surface;
//! - `SurfaceInvitation::from_link` accepts exactly the links `parse`
//!   accepts, with the link's parts;
//! - `ProxyCredentials::parse` accepts exactly `user:password` (trimmed,
//!   split at the first `:`) with no control character, parts of at most
//!   1,024 bytes, not both empty; what it accepts writes back and reads the
//!   same; its `Debug` shows neither part.

#![no_main]

use human_plus_core::{
    InvitationLink, LinkForm, LinkOptions, MASKED_TOKEN, ProxyCredentials, RelayToken, ShareLink,
    SurfaceInvitation, is_plain_identifier,
};
use libfuzzer_sys::fuzz_target;

fn options() -> LinkOptions {
    LinkOptions::default().allow_insecure_loopback(true)
}

/// The link reads back to its parts, and hides its token.
fn check_written(link: &ShareLink, relay: &str, session: &str, token: &str, surface: Option<&str>) {
    let text = link.expose();
    let read = InvitationLink::parse(text, &options())
        .unwrap_or_else(|e| panic!("a written link does not read: {e:?}"));
    assert_eq!(read.form(), LinkForm::RelaySession);
    assert_eq!(read.relay_url(), relay);
    assert_eq!(read.session_id(), session);
    assert_eq!(read.token().expose(), token);
    assert_eq!(read.surface_id(), surface);
    let invitation = SurfaceInvitation::from_link(text, &options())
        .unwrap_or_else(|e| panic!("from_link refuses a written link: {e:?}"));
    assert_eq!(invitation.relay_url(), relay);
    assert_eq!(invitation.session_id(), session);
    assert_eq!(invitation.token().expose(), token);
    if let Some(s) = surface {
        assert_eq!(invitation.surface_id(), s);
    }

    // The mask replaces exactly the token's text.
    let start = text.find("#token=").expect("the token's place") + "#token=".len();
    let end = text[start..]
        .find("&surface=")
        .map_or(text.len(), |i| start + i);
    let masked = link.masked();
    assert_eq!(
        masked,
        format!("{}{MASKED_TOKEN}{}", &text[..start], &text[end..])
    );
    // What the link shows besides the token (the relay with its `/`, the
    // session, the surface) may spell the token by chance.
    let public = [&text[..start], &text[end..]];
    if !public.iter().any(|p| p.contains(token)) {
        assert!(!masked.contains(token), "the mask shows the token");
        assert!(
            !format!("{link:?}").contains(token),
            "Debug shows the token"
        );
    }
}

fn credentials(text: &str) {
    let parsed = ProxyCredentials::parse(text);
    let expected = text.trim().split_once(':').filter(|(user, password)| {
        !user.contains(':')
            && !user.chars().chain(password.chars()).any(char::is_control)
            && user.len() <= 1024
            && password.len() <= 1024
            && !(user.is_empty() && password.is_empty())
    });
    match (&parsed, expected) {
        (Ok(c), Some((user, password))) => {
            assert_eq!(c.user(), user);
            assert_eq!(format!("{c:?}"), "ProxyCredentials([redacted])");
            let again = ProxyCredentials::parse(&format!("{user}:{password}"))
                .expect("accepted credentials written back");
            assert_eq!(&again, c);
            assert_eq!(ProxyCredentials::new(user, password).as_ref(), Ok(c));
        }
        (Err(_), None) => {}
        (parsed, expected) => panic!("{text:?}: {parsed:?}, expected {expected:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    credentials(&String::from_utf8_lossy(rest));

    if mode & 1 == 1 {
        // A link read, then written again.
        let Ok(text) = std::str::from_utf8(rest) else {
            return;
        };
        let parsed = InvitationLink::parse(text, &options());
        let from_link = SurfaceInvitation::from_link(text, &options());
        match (&parsed, &from_link) {
            (Ok(l), Ok(i)) => {
                assert_eq!(l.relay_url(), i.relay_url());
                assert_eq!(l.session_id(), i.session_id());
                assert_eq!(l.token(), i.token());
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            (a, b) => panic!("parse and from_link disagree: {a:?} / {b:?}"),
        }
        let Ok(link) = parsed else { return };
        if link.form() != LinkForm::RelaySession {
            return;
        }
        let surface = link.surface_id();
        let written = ShareLink::new(link.relay_url(), link.session_id(), link.token(), surface);
        match written {
            Ok(w) => check_written(
                &w,
                link.relay_url(),
                link.session_id(),
                link.token().expose(),
                surface,
            ),
            Err(e) => assert!(
                surface.is_some_and(|s| !is_plain_identifier(s)),
                "a valid link is not written again: {e:?}"
            ),
        }
        return;
    }

    // Parts written, then read.
    let text = String::from_utf8_lossy(rest);
    let mut parts = text.split('\0');
    let relay = parts.next().unwrap_or_default();
    let session = parts.next().unwrap_or_default();
    let token = parts.next().unwrap_or_default();
    let surface = (mode & 2 == 2).then(|| parts.next().unwrap_or_default());
    if let Ok(link) = ShareLink::new(relay, session, &RelayToken::new(token), surface) {
        let relay = relay.strip_suffix('/').unwrap_or(relay);
        check_written(&link, relay, session, token, surface);
    }
});
