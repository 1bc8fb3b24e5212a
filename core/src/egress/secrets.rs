//! Redaction by exact value: the secrets Human+ holds, in every encoding
//! they travel in, and nothing else.
//!
//! A surface's words are data. A cell that reads `total? yes bearer abc`
//! must reach the model as it is; rewriting it by pattern would change what
//! a person wrote. What must never reach a model, a log line or a terminal
//! is a secret this process holds: the relay token and the egress proxy's
//! credentials. [`Secrets`] knows those values and finds them, raw and
//! encoded, wherever a text came from.

use std::borrow::Cow;
use std::fmt;
use std::fmt::Write as _;

use crate::egress::proxy::ProxyCredentials;
use crate::invite::invitation::SurfaceInvitation;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Secret values shorter than this are found only in encodings long enough
/// to be unmistakable (the `Basic` pair): a short password redacted
/// wherever it occurs would rewrite ordinary words.
const MIN_SECRET_LEN: usize = 8;

/// The secrets one attachment holds, in every form they are written in:
/// the token as it is, percent-encoded (as in a query), as hex (as in a
/// hex dump), as base64; the proxy credentials' password, their
/// `user:password` pair and its base64 (the `Basic` value).
///
/// `Debug` shows only how many forms it holds.
///
/// ```
/// use human_plus_core::{ProxyCredentials, Secrets, SurfaceInvitation};
///
/// let invitation = SurfaceInvitation::new(
///     "https://relay.example", "demo_001", "tok_0123456789abcdef", "sheet:one", "sheets",
/// )?;
/// let secrets = Secrets::of(&invitation, Some(&ProxyCredentials::new("user", "pass")?));
/// // Ordinary data is untouched, even when it looks like a credential.
/// assert_eq!(secrets.redact("total? yes bearer abc"), "total? yes bearer abc");
/// assert_eq!(secrets.redact("Basic dXNlcjpwYXNz"), "Basic [redacted]");
/// // The token, however it is written, is not.
/// assert_eq!(secrets.redact("echo: tok_0123456789abcdef"), "echo: [redacted]");
/// assert_eq!(secrets.redact("746f6b5f30313233343536373839616263646566"), "[redacted]");
/// assert!(!format!("{secrets:?}").contains("tok_"));
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Secrets {
    /// Every form to find, longest first (so a longer encoding is replaced
    /// whole before a shorter form inside it).
    forms: Vec<String>,
}

impl Secrets {
    /// No secrets: [`Secrets::redact`] returns every text as it is.
    #[must_use]
    pub fn none() -> Self {
        Secrets::default()
    }

    /// The invitation's token and, when given, the egress proxy's
    /// credentials.
    #[must_use]
    pub fn of(invitation: &SurfaceInvitation, proxy: Option<&ProxyCredentials>) -> Self {
        let mut s = Secrets::none();
        s.add_token(invitation.token().expose());
        if let Some(p) = proxy {
            s.add_proxy_credentials(p);
        }
        s
    }

    /// Adds a bearer-style secret (a relay token) in every encoding:
    /// as it is, percent-encoded, lower- and upper-case hex, base64.
    pub fn add_token(&mut self, token: &str) {
        if token.len() < MIN_SECRET_LEN {
            return;
        }
        self.push(token.to_owned());
        let mut pct = String::with_capacity(token.len() * 3);
        for b in token.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                pct.push(char::from(b));
            } else {
                let _ = write!(pct, "%{b:02X}");
            }
        }
        self.push(pct.to_ascii_lowercase());
        self.push(pct);
        let hex: String = token.bytes().fold(String::new(), |mut h, b| {
            let _ = write!(h, "{b:02x}");
            h
        });
        self.push(hex.to_ascii_uppercase());
        self.push(hex);
        self.push(crate::egress::proxy::base64(token.as_bytes()));
    }

    /// Adds an egress proxy's credentials: the `user:password` pair and its
    /// base64 (a `Basic` value), and the password in the token's encodings
    /// when it is long enough to be unmistakable.
    pub fn add_proxy_credentials(&mut self, credentials: &ProxyCredentials) {
        let pair = format!("{}:{}", credentials.user(), credentials.password());
        self.push(crate::egress::proxy::base64(pair.as_bytes()));
        if pair.len() >= MIN_SECRET_LEN {
            self.push(pair);
        }
        self.add_token(credentials.password());
    }

    fn push(&mut self, form: String) {
        if !form.is_empty() && !self.forms.contains(&form) {
            self.forms.push(form);
            self.forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
        }
    }

    /// True when there is nothing to find.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }

    /// `text` with every occurrence of every form replaced by
    /// [`REDACTED`]; borrowed when there was none.
    #[must_use]
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !self.forms.iter().any(|f| text.contains(f.as_str())) {
            return Cow::Borrowed(text);
        }
        let mut out = text.to_owned();
        for form in &self.forms {
            if out.contains(form.as_str()) {
                out = out.replace(form.as_str(), REDACTED);
            }
        }
        Cow::Owned(out)
    }

    /// True when `text` holds any form of a secret.
    #[must_use]
    pub fn appears_in(&self, text: &str) -> bool {
        self.forms.iter().any(|f| text.contains(f.as_str()))
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets")
            .field("forms", &self.forms.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invitation(token: &str) -> SurfaceInvitation {
        SurfaceInvitation::new("https://relay.example", "demo_001", token, "s", "a").unwrap()
    }

    #[test]
    fn every_encoding_of_the_token_is_found() {
        let s = Secrets::of(&invitation("t0k:en/with+odd=chars"), None);
        for text in [
            "t0k:en/with+odd=chars",
            "t0k%3Aen%2Fwith%2Bodd%3Dchars",
            "t0k%3aen%2fwith%2bodd%3dchars",
            "74306b3a656e2f776974682b6f64643d6368617273",
            "74306B3A656E2F776974682B6F64643D6368617273",
            "dDBrOmVuL3dpdGgrb2RkPWNoYXJz",
        ] {
            assert_eq!(s.redact(&format!("a {text} b")), "a [redacted] b", "{text}");
        }
    }

    #[test]
    fn pattern_look_alikes_are_data() {
        let s = Secrets::of(&invitation("0123456789abcdef0123"), None);
        for text in [
            "total? yes bearer abc",
            "Authorization: Bearer something-else",
            "Basic dXNlcjpwYXNz",
            "https://x.example/?token=other",
        ] {
            assert_eq!(s.redact(text), text);
            assert!(matches!(s.redact(text), Cow::Borrowed(_)));
        }
    }

    #[test]
    fn a_short_password_is_found_only_in_its_basic_pair() {
        let p = ProxyCredentials::new("user", "pass").unwrap();
        let s = Secrets::of(&invitation("0123456789abcdef0123"), Some(&p));
        assert_eq!(s.redact("pass the salt"), "pass the salt");
        assert_eq!(s.redact("Basic dXNlcjpwYXNz"), "Basic [redacted]");
        assert_eq!(s.redact("user:pass"), "[redacted]");
    }
}
