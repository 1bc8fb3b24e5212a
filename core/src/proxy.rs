//! The HTTP CONNECT handshake with an egress proxy, as a pure codec.
//!
//! A runtime without a CONNECT helper connects to
//! [`crate::ProxyAddr`], writes [`proxy_connect_request`], reads until
//! [`ProxyConnectResponse::parse`] returns the status and the length of
//! the response head, and on a 2xx starts TLS on the same connection with
//! the bytes after the head (if any) as the first tunnel bytes. Any other
//! status becomes [`ProxyConnectResponse::refusal`].

use std::fmt::Write as _;

use crate::error::{Error, TransportError, TransportErrorKind};

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

/// The CONNECT request head for a tunnel to `target_host:target_port`.
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
            Some((status, _)) => Err(Self::refusal(status)),
        }
    }

    /// The error for a CONNECT answered with a non-2xx `status` (407:
    /// the proxy wants credentials, 403: its policy refused the target).
    ///
    /// ```
    /// use human_plus_core::ProxyConnectResponse;
    ///
    /// let e = ProxyConnectResponse::refusal(403);
    /// assert_eq!(e.code(), "transport_failed");
    /// assert!(e.to_string().contains("HTTP 403"));
    /// ```
    #[must_use]
    pub fn refusal(status: u16) -> Error {
        proxy_error(&format!(
            "egress proxy refused the CONNECT tunnel with HTTP {status}"
        ))
    }
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
            "transport_failed"
        );
    }

    proptest! {
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
