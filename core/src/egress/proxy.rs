//! The HTTP CONNECT handshake with an egress proxy, as a pure codec.
//!
//! A runtime without a CONNECT helper connects to
//! [`crate::ProxyAddr`], writes [`crate::ProxyAddr::connect_request`]
//! (which carries `Proxy-Authorization: Basic` when the proxy has
//! [`ProxyCredentials`]), reads until [`ProxyConnectResponse::parse`]
//! returns the status and the length of the response head, and on a 2xx
//! starts TLS on the same connection with the bytes after the head (if
//! any) as the first tunnel bytes. Any other status becomes
//! [`ProxyConnectResponse::refusal`]; a 407 is its own error,
//! [`Error::ProxyAuthRequired`].
//!
//! The credentials go only into the CONNECT request, which the proxy
//! consumes: nothing after the proxy's answer (the tunnel, and every
//! request to the relay inside it) carries them.

use std::fmt::{self, Write as _};

use crate::error::{Error, ProxyAuthRequired, TransportError, TransportErrorKind};

/// The longest user name or password accepted in [`ProxyCredentials`]:
/// 1,024 bytes each.
pub const PROXY_CREDENTIAL_MAX_BYTES: usize = 1_024;

/// The credentials of an egress proxy that asks for them, sent as
/// `Proxy-Authorization: Basic` (RFC 7617, UTF-8) on CONNECT and nowhere
/// else.
///
/// Neither part appears in `Debug` (there is no `Display`): the user name
/// is often a service account's, and the pair is one secret.
///
/// ```
/// use human_plus_core::ProxyCredentials;
///
/// let c = ProxyCredentials::new("agent", "s3cret:with:colons")?;
/// assert_eq!(format!("{c:?}"), "ProxyCredentials([redacted])");
/// assert_eq!(c.user(), "agent");
/// // From a file or an environment variable: `user:password`.
/// assert_eq!(ProxyCredentials::parse("agent:s3cret:with:colons\n")?, c);
/// assert!(ProxyCredentials::new("a:b", "x").is_err()); // no ':' in the user
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProxyCredentials {
    user: String,
    password: String,
}

impl ProxyCredentials {
    /// Credentials from their two parts. The user name may be empty (a
    /// proxy that takes a bare token as the password), the pair may not.
    ///
    /// # Errors
    /// [`Error::EgressRefused`] (rule [`crate::EgressRule::ProxyCredentials`])
    /// when the user name contains `:` (Basic cannot carry it), either part
    /// contains a control character or is longer than
    /// [`PROXY_CREDENTIAL_MAX_BYTES`], or both are empty. The message never
    /// quotes them.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Result<Self, Error> {
        let (user, password) = (user.into(), password.into());
        let refuse = |why: &str| -> Error {
            crate::EgressRefusal::new(
                crate::EgressRule::ProxyCredentials,
                format!("Human+ egress proxy credentials are unusable: {why}."),
            )
            .into()
        };
        if user.contains(':') {
            return Err(refuse("the user name contains ':'"));
        }
        if user.chars().chain(password.chars()).any(char::is_control) {
            return Err(refuse("they contain a control character"));
        }
        if user.len() > PROXY_CREDENTIAL_MAX_BYTES || password.len() > PROXY_CREDENTIAL_MAX_BYTES {
            return Err(refuse("a part is longer than 1,024 bytes"));
        }
        if user.is_empty() && password.is_empty() {
            return Err(refuse("they are empty"));
        }
        Ok(ProxyCredentials { user, password })
    }

    /// Credentials written as `user:password` (the password may contain
    /// `:`), as a file or an environment variable holds them. Surrounding
    /// whitespace (a trailing newline) is trimmed; nothing is
    /// percent-decoded.
    ///
    /// # Errors
    /// As [`ProxyCredentials::new`], and when there is no `:`.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let Some((user, password)) = text.trim().split_once(':') else {
            return Err(crate::EgressRefusal::new(
                crate::EgressRule::ProxyCredentials,
                "Human+ egress proxy credentials must be written as user:password.",
            )
            .into());
        };
        ProxyCredentials::new(user, password)
    }

    /// The user name.
    #[must_use]
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The password, for [`crate::Secrets`] (which redacts it).
    pub(crate) fn password(&self) -> &str {
        &self.password
    }

    /// The `Proxy-Authorization` header's value: `Basic` and the base64
    /// of `user:password`.
    fn basic(&self) -> String {
        let mut pair = Vec::with_capacity(self.user.len() + 1 + self.password.len());
        pair.extend_from_slice(self.user.as_bytes());
        pair.push(b':');
        pair.extend_from_slice(self.password.as_bytes());
        let value = format!("Basic {}", base64(&pair));
        pair.fill(0);
        value
    }
}

impl fmt::Debug for ProxyCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProxyCredentials([redacted])")
    }
}

/// Standard base64 with padding (RFC 4648 section 4).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let index = usize::try_from((n >> (18 - 6 * i)) & 0x3f).unwrap_or(0);
                out.push(char::from(ALPHABET.get(index).copied().unwrap_or(b'A')));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A CONNECT request head, ready to write to the egress proxy. It may
/// carry the proxy's credentials, so its `Debug` shows only its length,
/// and its bytes are zeroed when it is dropped. It dereferences to the
/// bytes: `stream.write_all(&request)`.
///
/// ```
/// use human_plus_core::{EgressPolicy, RelayEndpoint, SurfaceInvitation};
///
/// let policy = EgressPolicy::new(["relay.example"])
///     .egress_proxy("http://agent:s3cret@egress.internal:3128");
/// let invitation = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "s", "a")?;
/// let endpoint = RelayEndpoint::new(&invitation, "client-1", &policy)?;
/// let request = endpoint.proxy().unwrap().connect_request("93.184.215.14", 443, endpoint.host());
/// assert!(request.ends_with(b"Proxy-Authorization: Basic YWdlbnQ6czNjcmV0\r\n\r\n"));
/// assert!(!format!("{request:?}").contains("YWdlbnQ6czNjcmV0"));
/// # Ok::<(), human_plus_core::Error>(())
/// ```
pub struct ProxyConnectRequest(Vec<u8>);

impl std::ops::Deref for ProxyConnectRequest {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for ProxyConnectRequest {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for ProxyConnectRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProxyConnectRequest({} bytes, [redacted])", self.0.len())
    }
}

impl Drop for ProxyConnectRequest {
    fn drop(&mut self) {
        self.0.fill(0);
        std::hint::black_box(&self.0);
    }
}

/// The CONNECT request head for `credentials` (if any), built by
/// [`crate::ProxyAddr::connect_request`].
pub(crate) fn connect_request_with(
    credentials: Option<&ProxyCredentials>,
    target_host: &str,
    target_port: u16,
    authority_host: &str,
) -> ProxyConnectRequest {
    let mut head = proxy_connect_request(target_host, target_port, authority_host);
    if let Some(credentials) = credentials {
        // Replace the final blank line with the header and a blank line.
        head.truncate(head.len().saturating_sub(2));
        let mut basic = credentials.basic().into_bytes();
        head.extend_from_slice(b"Proxy-Authorization: ");
        head.extend_from_slice(&basic);
        head.extend_from_slice(b"\r\n\r\n");
        basic.fill(0);
        std::hint::black_box(&basic);
    }
    ProxyConnectRequest(head)
}

/// The largest CONNECT response head accepted: 8 KiB.
pub const PROXY_CONNECT_MAX_HEAD_BYTES: usize = 8_192;

/// `host:port` for a request target or `Host` header: an IPv6 address in
/// brackets, and any other byte outside `[A-Za-z0-9._~-]` percent-encoded,
/// so no CR, LF, space or stray `:` can reach the request.
fn proxy_authority(host: &str, port: u16) -> String {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let mut out = String::with_capacity(bare.len() + 8);
    let v6 = bare.parse::<std::net::Ipv6Addr>().is_ok();
    if v6 {
        out.push('[');
    }
    for b in bare.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-') || (v6 && b == b':')
        {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    if v6 {
        out.push(']');
    }
    out.push(':');
    out.push_str(&port.to_string());
    out
}

/// The CONNECT request head for a tunnel to `target_host:target_port`,
/// without credentials (runtimes use [`crate::ProxyAddr::connect_request`],
/// which adds them when the proxy has some).
///
/// `target_host` is what the proxy connects to: pass the **vetted IP
/// address** (from [`crate::RelayEndpoint::vet_resolved`] or
/// [`crate::RelayEndpoint::resolved_literal`]) so the proxy does not
/// resolve the name again. `authority_host` is the relay's name
/// ([`crate::RelayEndpoint::host`]), sent in the `Host` header for the
/// proxy's own policy and logs. IPv6 addresses are bracketed; bytes that
/// cannot appear in a host are percent-encoded, so a hostile value cannot
/// inject a header.
///
/// ```
/// use human_plus_core::proxy_connect_request;
///
/// assert_eq!(
///     proxy_connect_request("93.184.215.14", 443, "relay.example"),
///     b"CONNECT 93.184.215.14:443 HTTP/1.1\r\nHost: relay.example:443\r\n\r\n"
/// );
/// assert!(proxy_connect_request("2001:4860::8888", 443, "relay.example")
///     .starts_with(b"CONNECT [2001:4860::8888]:443 "));
/// ```
#[must_use]
pub fn proxy_connect_request(target_host: &str, target_port: u16, authority_host: &str) -> Vec<u8> {
    format!(
        "CONNECT {} HTTP/1.1\r\nHost: {}\r\n\r\n",
        proxy_authority(target_host, target_port),
        proxy_authority(authority_host, target_port)
    )
    .into_bytes()
}

fn proxy_error(message: &str) -> Error {
    Error::Transport(TransportError::new(TransportErrorKind::Proxy, message))
}

/// The proxy's answer to a CONNECT request.
///
/// ```
/// use human_plus_core::ProxyConnectResponse;
///
/// assert_eq!(ProxyConnectResponse::parse(b"HTTP/1.1 200 Connection estab")?, None);
/// let buf = b"HTTP/1.1 200 Connection established\r\n\r\n\x16\x03\x01";
/// assert_eq!(ProxyConnectResponse::parse(buf)?, Some((200, 39)));
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyConnectResponse;

impl ProxyConnectResponse {
    /// Reads the response head at the start of `buf`: `Ok(None)` while it
    /// is incomplete, `Ok(Some((status, head_len)))` once the blank line
    /// arrived (`buf[head_len..]` already belongs to the tunnel). CRLF and
    /// bare LF line ends are accepted. The caller treats any status
    /// outside 200..=299 as a failure ([`ProxyConnectResponse::refusal`]).
    ///
    /// # Errors
    /// [`Error::Transport`] of kind [`TransportErrorKind::Proxy`] when the
    /// head exceeds [`PROXY_CONNECT_MAX_HEAD_BYTES`] or the status line is
    /// not `HTTP/1.x NNN ...`.
    pub fn parse(buf: &[u8]) -> Result<Option<(u16, usize)>, Error> {
        let window = buf.get(..PROXY_CONNECT_MAX_HEAD_BYTES).unwrap_or(buf);
        let mut head_len = None;
        for (i, _) in window.iter().enumerate().filter(|&(_, &b)| b == b'\n') {
            let rest = window.get(i + 1..).unwrap_or_default();
            if rest.starts_with(b"\n") {
                head_len = Some(i + 2);
                break;
            }
            if rest.starts_with(b"\r\n") {
                head_len = Some(i + 3);
                break;
            }
        }
        let Some(head_len) = head_len else {
            if buf.len() >= PROXY_CONNECT_MAX_HEAD_BYTES {
                return Err(proxy_error("egress proxy response head exceeds 8 KiB"));
            }
            return Ok(None);
        };
        let status_line = window.split(|&b| b == b'\n').next().unwrap_or_default();
        let status_line = status_line.strip_suffix(b"\r").unwrap_or(status_line);
        match proxy_status(status_line) {
            Some(status) => Ok(Some((status, head_len))),
            None => Err(proxy_error(
                "egress proxy answered CONNECT with a malformed status line",
            )),
        }
    }

    /// Reads the response head and decides: `Ok(None)` while it is
    /// incomplete, `Ok(Some(head_len))` once the tunnel is established (a
    /// 2xx status; `buf[head_len..]` already belongs to the tunnel), and the
    /// [`ProxyConnectResponse::refusal`] for any other status.
    ///
    /// ```
    /// use human_plus_core::ProxyConnectResponse;
    ///
    /// assert_eq!(ProxyConnectResponse::established(b"HTTP/1.1 200 OK\r\n\r\n")?, Some(19));
    /// assert_eq!(ProxyConnectResponse::established(b"HTTP/1.1 200 OK\r\n")?, None);
    /// assert!(ProxyConnectResponse::established(b"HTTP/1.1 407 Auth\r\n\r\n").is_err());
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`ProxyConnectResponse::parse`], and the refusal of a non-2xx
    /// status.
    pub fn established(buf: &[u8]) -> Result<Option<usize>, Error> {
        match Self::parse(buf)? {
            None => Ok(None),
            Some((status, head_len)) if (200..=299).contains(&status) => Ok(Some(head_len)),
            Some((407, head_len)) => Err(Error::ProxyAuthRequired(ProxyAuthRequired::new(
                offered_schemes(buf.get(..head_len).unwrap_or(buf)),
            ))),
            Some((status, _)) => Err(Self::refusal(status)),
        }
    }

    /// The error for a CONNECT answered with a non-2xx `status`: for 407
    /// (the proxy wants credentials, or refused the ones sent)
    /// [`Error::ProxyAuthRequired`], code `proxy_auth_required`; for any
    /// other (403: the proxy's policy refused the target) a transport
    /// error of kind `proxy`.
    ///
    /// ```
    /// use human_plus_core::ProxyConnectResponse;
    ///
    /// let e = ProxyConnectResponse::refusal(403);
    /// assert_eq!(e.code(), "transport_failed");
    /// assert!(e.to_string().contains("HTTP 403"));
    /// assert_eq!(ProxyConnectResponse::refusal(407).code(), "proxy_auth_required");
    /// ```
    #[must_use]
    pub fn refusal(status: u16) -> Error {
        if status == 407 {
            return Error::ProxyAuthRequired(ProxyAuthRequired::new(Vec::new()));
        }
        proxy_error(&format!(
            "egress proxy refused the CONNECT tunnel with HTTP {status}"
        ))
    }
}

/// The authentication schemes a 407 head offers in its
/// `Proxy-Authenticate` headers: the first token of each value (a scheme
/// name is a token; anything else is skipped), lowercased, at most 8,
/// each at most 32 bytes. Parameters (the realm) are never read: they are
/// the proxy's text, not ours to repeat.
fn offered_schemes(head: &[u8]) -> Vec<String> {
    let mut schemes = Vec::new();
    for line in head.split(|&b| b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = line.split_at(colon);
        if !name.eq_ignore_ascii_case(b"proxy-authenticate") {
            continue;
        }
        let value = value.get(1..).unwrap_or_default();
        // A value may list several challenges: `Basic realm="x", Negotiate`.
        for part in value.split(|&b| b == b',') {
            let word: Vec<u8> = part
                .iter()
                .copied()
                .skip_while(u8::is_ascii_whitespace)
                .take_while(|b| !b.is_ascii_whitespace())
                .collect();
            let is_token = !word.is_empty()
                && word.len() <= 32
                && word
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            // `realm="x"` after a comma is a parameter, not a scheme: its
            // first word holds `=` and `"`, so it is not a token.
            if is_token {
                let scheme = String::from_utf8_lossy(&word).to_ascii_lowercase();
                if !schemes.contains(&scheme) && schemes.len() < 8 {
                    schemes.push(scheme);
                }
            }
        }
    }
    schemes
}

/// `HTTP/1.<d> <ddd>` followed by the end of the line or a space.
fn proxy_status(line: &[u8]) -> Option<u16> {
    let rest = line.strip_prefix(b"HTTP/1.")?;
    let (&minor, rest) = rest.split_first()?;
    if !minor.is_ascii_digit() {
        return None;
    }
    let rest = rest.strip_prefix(b" ")?;
    let (code, tail) = rest.split_at_checked(3)?;
    if !(tail.is_empty() || tail.starts_with(b" ")) {
        return None;
    }
    let mut status: u16 = 0;
    for &d in code {
        if !d.is_ascii_digit() {
            return None;
        }
        status = status * 10 + u16::from(d - b'0');
    }
    (100..=599).contains(&status).then_some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn request_shapes() {
        assert_eq!(
            proxy_connect_request("[::1]", 8443, "localhost"),
            b"CONNECT [::1]:8443 HTTP/1.1\r\nHost: localhost:8443\r\n\r\n"
        );
        let evil = proxy_connect_request("1.2.3.4", 443, "relay.example\r\nX-Evil: 1");
        let text = String::from_utf8(evil).unwrap();
        assert_eq!(text.matches("\r\n").count(), 3);
        assert!(text.contains("Host: relay.example%0D%0AX-Evil%3A%201:443\r\n"));
    }

    #[test]
    fn responses() {
        assert_eq!(ProxyConnectResponse::parse(b""), Ok(None));
        assert_eq!(
            ProxyConnectResponse::parse(b"HTTP/1.1 200 OK\r\n"),
            Ok(None)
        );
        assert_eq!(
            ProxyConnectResponse::parse(b"HTTP/1.0 200\n\nrest"),
            Ok(Some((200, 14)))
        );
        assert_eq!(
            ProxyConnectResponse::parse(
                b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n"
            ),
            Ok(Some((407, 73)))
        );
        for bad in [
            &b"HTTP/2 200 OK\r\n\r\n"[..],
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"HTTP/1.1 2000\r\n\r\n",
            b"SSH-2.0-x\r\n\r\n",
            b"HTTP/1.1 099 x\r\n\r\n",
            b"\r\n\r\n",
        ] {
            assert!(ProxyConnectResponse::parse(bad).is_err(), "{bad:?}");
        }
        let mut big = b"HTTP/1.1 200 OK\r\n".to_vec();
        big.resize(PROXY_CONNECT_MAX_HEAD_BYTES, b'x');
        assert!(ProxyConnectResponse::parse(&big).is_err());
        big.truncate(PROXY_CONNECT_MAX_HEAD_BYTES - 1);
        assert_eq!(ProxyConnectResponse::parse(&big), Ok(None));
        assert_eq!(
            ProxyConnectResponse::refusal(407).code(),
            "proxy_auth_required"
        );
        assert_eq!(
            ProxyConnectResponse::refusal(502).code(),
            "transport_failed"
        );
    }

    #[test]
    fn base64_is_rfc4648() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
            ("Aladdin:open sesame", "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
        // RFC 7617's UTF-8 example.
        assert_eq!(base64("test:123£".as_bytes()), "dGVzdDoxMjPCow==");
    }

    #[test]
    fn credentials_are_checked_and_never_printed() {
        let c = ProxyCredentials::new("agent", "pa:ss").unwrap();
        assert_eq!(format!("{c:?}"), "ProxyCredentials([redacted])");
        assert_eq!(c.basic(), format!("Basic {}", base64(b"agent:pa:ss")));
        assert!(ProxyCredentials::new("", "token-only").is_ok());
        for (user, password) in [
            ("a:b", "x"),
            ("a\nb", "x"),
            ("a", "x\r\nX-Evil: 1"),
            ("a", "x\u{7f}"),
            ("", ""),
        ] {
            let e = ProxyCredentials::new(user, password).unwrap_err();
            assert_eq!(e.code(), "egress_refused");
            let Error::EgressRefused(r) = &e else {
                panic!("{e:?}")
            };
            assert_eq!(r.rule, crate::EgressRule::ProxyCredentials);
            assert!(!e.to_string().contains("X-Evil"));
        }
        let long = "x".repeat(PROXY_CREDENTIAL_MAX_BYTES + 1);
        assert!(ProxyCredentials::new("a", long.as_str()).is_err());
        assert!(ProxyCredentials::new(long.as_str(), "a").is_err());
        assert!(ProxyCredentials::parse("no-colon").is_err());
        assert_eq!(
            ProxyCredentials::parse("  u:p:q \n").unwrap(),
            ProxyCredentials::new("u", "p:q").unwrap()
        );
    }

    #[test]
    fn the_request_carries_the_header_once_and_only_with_credentials() {
        let c = ProxyCredentials::new("agent", "s3cret").unwrap();
        let with = connect_request_with(Some(&c), "1.2.3.4", 443, "relay.example");
        let text = String::from_utf8(with.to_vec()).unwrap();
        assert_eq!(
            text,
            "CONNECT 1.2.3.4:443 HTTP/1.1\r\nHost: relay.example:443\r\nProxy-Authorization: Basic YWdlbnQ6czNjcmV0\r\n\r\n"
        );
        assert_eq!(
            format!("{with:?}"),
            format!("ProxyConnectRequest({} bytes, [redacted])", text.len())
        );
        let without = connect_request_with(None, "1.2.3.4", 443, "relay.example");
        assert_eq!(
            &*without,
            &proxy_connect_request("1.2.3.4", 443, "relay.example")[..]
        );
    }

    #[test]
    fn a_407_is_its_own_error_naming_only_the_schemes() {
        let head = b"HTTP/1.1 407 Proxy Authentication Required\r\n\
            Proxy-Authenticate: Basic realm=\"corp \\\"secret\\\" realm\", charset=\"UTF-8\"\r\n\
            proxy-authenticate: Negotiate, NTLM\r\n\
            Content-Length: 0\r\n\r\nignored";
        let e = ProxyConnectResponse::established(head).unwrap_err();
        assert_eq!(e.code(), "proxy_auth_required");
        let Error::ProxyAuthRequired(auth) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(auth.offered(), ["basic", "negotiate", "ntlm"]);
        let text = e.to_string();
        assert!(!text.contains("corp") && !text.contains("secret"), "{text}");
        assert!(
            !text.contains("sends only Basic"),
            "Basic is offered: {text}"
        );
        let bare = ProxyConnectResponse::established(b"HTTP/1.1 407 x\r\n\r\n").unwrap_err();
        assert_eq!(bare, ProxyConnectResponse::refusal(407));
        let odd = ProxyConnectResponse::established(
            b"HTTP/1.1 407 x\r\nProxy-Authenticate: \x01\xff evil\r\n\r\n",
        )
        .unwrap_err();
        let Error::ProxyAuthRequired(auth) = &odd else {
            panic!("{odd:?}")
        };
        assert!(auth.offered().is_empty());
        // Other refusals stay transport errors of kind proxy.
        let e = ProxyConnectResponse::established(b"HTTP/1.1 403 Forbidden\r\n\r\n").unwrap_err();
        assert_eq!(e.code(), "transport_failed");
    }

    proptest! {
        #[test]
        fn offered_schemes_never_panic_and_stay_bounded(head in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut buf = b"HTTP/1.1 407 x\r\nProxy-Authenticate: ".to_vec();
            buf.extend_from_slice(&head);
            buf.extend_from_slice(b"\r\n\r\n");
            let schemes = offered_schemes(&buf);
            prop_assert!(schemes.len() <= 8);
            for s in schemes {
                prop_assert!(s.len() <= 32);
                prop_assert!(s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
            }
        }

        #[test]
        fn base64_round_trips_in_length(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let e = base64(&bytes);
            prop_assert_eq!(e.len(), bytes.len().div_ceil(3) * 4);
        }

        #[test]
        fn prefixes_are_incomplete_or_agree(
            body in proptest::collection::vec(
                prop_oneof![Just(b'\r'), Just(b'\n'), any::<u8>()], 0..64),
            status in 100u16..600,
            cut in any::<usize>(),
        ) {
            let mut buf = format!("HTTP/1.1 {status} X\r\n").into_bytes();
            buf.extend_from_slice(&body);
            let whole = ProxyConnectResponse::parse(&buf);
            let cut = cut % (buf.len() + 1);
            match ProxyConnectResponse::parse(&buf[..cut]) {
                Ok(None) => {}
                other => prop_assert_eq!(other, whole.clone()),
            }
            if let Ok(Some((s, len))) = whole {
                prop_assert_eq!(s, status);
                prop_assert!(len <= buf.len());
            }
        }
    }
}
