//! How an agent reaches the page an invitation names: the HTTP relay (SSE +
//! POST, long-poll), or a Pusher-protocol private channel such as Laravel
//! Reverb's (seed 004's first transport).

use std::fmt;

use serde::{Deserialize, Serialize};
use url::{Host, Url};

/// The transport an invitation names. Records written before it existed
/// read as [`Transport::HttpRelay`].
///
/// ```
/// use human_plus_core::{ReverbChannel, Transport};
///
/// let reverb = ReverbChannel::new(
///     "wss://ws.app.example/app/app-key",
///     "https://app.example/broadcasting/auth",
///     "private-agent.session.S1_abcd",
///     false,
/// )?;
/// let t = Transport::Reverb(reverb);
/// assert_eq!(
///     serde_json::to_string(&t).unwrap(),
///     r#"{"kind":"reverb","ws_url":"wss://ws.app.example/app/app-key","auth_url":"https://app.example/broadcasting/auth","channel":"private-agent.session.S1_abcd"}"#,
/// );
/// assert_eq!(serde_json::from_str::<Transport>(r#"{"kind":"http_relay"}"#).unwrap(), Transport::HttpRelay);
/// # Ok::<(), human_plus_core::ReverbRefusal>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Transport {
    /// The HTTP relay at the invitation's relay URL (the default).
    #[default]
    HttpRelay,
    /// A Pusher-protocol private (or presence) channel; the invitation's
    /// relay URL is then the host app's auth bridge.
    Reverb(ReverbChannel),
}

impl Transport {
    /// Whether this is the HTTP relay.
    #[must_use]
    pub fn is_http_relay(&self) -> bool {
        matches!(self, Transport::HttpRelay)
    }

    /// The Reverb channel, when this is one.
    #[must_use]
    pub fn reverb(&self) -> Option<&ReverbChannel> {
        match self {
            Transport::Reverb(r) => Some(r),
            Transport::HttpRelay => None,
        }
    }
}

/// Which rule a Reverb channel's parts broke. No message quotes a URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum ReverbRefusal {
    /// The WebSocket URL is not `wss://host[:port][/prefix]/app/APP_KEY`
    /// (plain `ws://` only to a loopback host, when allowed), or has
    /// userinfo, a query or a fragment.
    #[error(
        "The Reverb WebSocket URL must be wss://host[:port]/app/APP_KEY without user name, query or fragment (plain ws:// only to a loopback host, when explicitly allowed)."
    )]
    WebSocketUrl,
    /// The auth bridge URL is not `https://` (plain `http://` only to a
    /// loopback host, when allowed), or has userinfo, a query or a
    /// fragment.
    #[error(
        "The Reverb auth bridge URL must be https:// without user name, query or fragment (plain http:// only to a loopback host, when explicitly allowed)."
    )]
    AuthUrl,
    /// The channel is not a private or presence channel name.
    #[error(
        "The Reverb channel must be a private or presence channel name (private-… or presence-…, at most 200 of letters, digits and _-=@,.;), not an encrypted channel."
    )]
    Channel,
}

/// A Pusher-protocol channel as an invitation names it: the WebSocket URL
/// (`wss://host:port/app/APP_KEY`), the host app's auth bridge (which signs
/// the channel's auth for the bearer of the invitation's token) and the
/// channel. Checked when built and when read back.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ReverbWire")]
pub struct ReverbChannel {
    ws_url: String,
    auth_url: String,
    channel: String,
    #[serde(skip)]
    app_key: String,
    #[serde(skip)]
    insecure: bool,
}

#[derive(Deserialize)]
struct ReverbWire {
    ws_url: String,
    auth_url: String,
    channel: String,
}

impl TryFrom<ReverbWire> for ReverbChannel {
    type Error = ReverbRefusal;

    /// Read back with loopback allowed: whether the invitation allows it is
    /// the invitation's check ([`crate::SurfaceInvitation`]).
    fn try_from(w: ReverbWire) -> Result<Self, ReverbRefusal> {
        ReverbChannel::new(w.ws_url, w.auth_url, w.channel, true)
    }
}

/// The longest URL a Reverb channel holds, in bytes.
pub const MAX_REVERB_URL_BYTES: usize = 2048;

impl ReverbChannel {
    /// Checks the parts: see [`ReverbRefusal`] for the rules.
    /// `allow_insecure_loopback` lets either URL be plain (`ws://`,
    /// `http://`) to `127.0.0.1`, `[::1]` or `localhost`.
    ///
    /// ```
    /// use human_plus_core::{ReverbChannel, ReverbRefusal};
    ///
    /// let ok = ReverbChannel::new("ws://127.0.0.1:8080/app/k", "http://127.0.0.1:8000/auth", "private-a", true)?;
    /// assert_eq!(ok.app_key(), "k");
    /// assert_eq!((ok.ws_host(), ok.ws_port()), ("127.0.0.1".to_owned(), 8080));
    /// assert_eq!(
    ///     ReverbChannel::new("ws://127.0.0.1:8080/app/k", "http://127.0.0.1:8000/auth", "private-a", false),
    ///     Err(ReverbRefusal::WebSocketUrl),
    /// );
    /// assert_eq!(
    ///     ReverbChannel::new("wss://user@ws.example/app/k", "https://a.example/auth", "private-a", false),
    ///     Err(ReverbRefusal::WebSocketUrl),
    /// );
    /// # Ok::<(), ReverbRefusal>(())
    /// ```
    ///
    /// # Errors
    /// [`ReverbRefusal`] naming the part.
    pub fn new(
        ws_url: impl Into<String>,
        auth_url: impl Into<String>,
        channel: impl Into<String>,
        allow_insecure_loopback: bool,
    ) -> Result<ReverbChannel, ReverbRefusal> {
        let (ws_url, auth_url, channel) = (ws_url.into(), auth_url.into(), channel.into());
        let (ws, ws_insecure) = checked_url(&ws_url, "wss", "ws", allow_insecure_loopback)
            .ok_or(ReverbRefusal::WebSocketUrl)?;
        let (_, auth_insecure) = checked_url(&auth_url, "https", "http", allow_insecure_loopback)
            .ok_or(ReverbRefusal::AuthUrl)?;
        let segments: Vec<&str> = ws
            .path_segments()
            .map(Iterator::collect)
            .unwrap_or_default();
        let app_key = match segments.as_slice() {
            [prefix @ .., "app", key]
                if is_app_key(key)
                    && prefix.iter().all(|s| {
                        !s.is_empty()
                            && s.bytes().all(|b| {
                                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-')
                            })
                    }) =>
            {
                (*key).to_owned()
            }
            _ => return Err(ReverbRefusal::WebSocketUrl),
        };
        if !is_joinable_channel(&channel) {
            return Err(ReverbRefusal::Channel);
        }
        Ok(ReverbChannel {
            ws_url,
            auth_url,
            channel,
            app_key,
            insecure: ws_insecure || auth_insecure,
        })
    }

    /// The WebSocket URL, as given (`wss://host:port/app/APP_KEY`).
    #[must_use]
    pub fn ws_url(&self) -> &str {
        &self.ws_url
    }

    /// The URL to open: the WebSocket URL with the protocol version and a
    /// client name, as pusher-js asks (`?protocol=7&client=human-plus&version=…`).
    ///
    /// ```
    /// use human_plus_core::ReverbChannel;
    ///
    /// let r = ReverbChannel::new("wss://ws.example/app/k", "https://a.example/auth", "private-a", false)?;
    /// assert!(r.connect_url().starts_with("wss://ws.example/app/k?protocol=7&client=human-plus&version="));
    /// # Ok::<(), human_plus_core::ReverbRefusal>(())
    /// ```
    #[must_use]
    pub fn connect_url(&self) -> String {
        format!(
            "{}?protocol=7&client=human-plus&version={}",
            self.ws_url,
            env!("CARGO_PKG_VERSION")
        )
    }

    /// The host app's auth bridge URL.
    #[must_use]
    pub fn auth_url(&self) -> &str {
        &self.auth_url
    }

    /// The channel to join.
    #[must_use]
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The app key (the WebSocket URL's last segment).
    #[must_use]
    pub fn app_key(&self) -> &str {
        &self.app_key
    }

    /// Whether either URL is plain (`ws://`, `http://`) to loopback.
    #[must_use]
    pub fn is_insecure_loopback(&self) -> bool {
        self.insecure
    }

    /// Whether the channel is a presence channel (members are reported, so
    /// a page that leaves is seen).
    #[must_use]
    pub fn is_presence(&self) -> bool {
        self.channel.starts_with("presence-")
    }

    /// The WebSocket server's host as the egress policy compares it.
    #[must_use]
    pub fn ws_host(&self) -> String {
        host_key(&self.ws_url)
    }

    /// The WebSocket server's port (443 for `wss`, 80 for `ws` unless
    /// given).
    #[must_use]
    pub fn ws_port(&self) -> u16 {
        port_of(&self.ws_url)
    }

    /// The auth bridge's host as the egress policy compares it.
    #[must_use]
    pub fn auth_host(&self) -> String {
        host_key(&self.auth_url)
    }

    /// The auth bridge's port.
    #[must_use]
    pub fn auth_port(&self) -> u16 {
        port_of(&self.auth_url)
    }
}

impl fmt::Display for ReverbChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}", self.channel, self.ws_url)
    }
}

fn host_key(url: &str) -> String {
    Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default()
}

fn port_of(url: &str) -> u16 {
    Url::parse(url)
        .ok()
        .and_then(|u| u.port_or_known_default())
        .unwrap_or(443)
}

/// `raw` parsed, when its scheme is `secure` (or `plain` to a loopback host
/// when allowed), with a host, no userinfo, query or fragment, no
/// whitespace, control or backslash, and within [`MAX_REVERB_URL_BYTES`];
/// with whether it is plain.
fn checked_url(raw: &str, secure: &str, plain: &str, allow_plain: bool) -> Option<(Url, bool)> {
    if raw.len() > MAX_REVERB_URL_BYTES
        || !raw.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')
        || raw.contains(['?', '#'])
    {
        return None;
    }
    let scheme_end = raw.find("://")?;
    let authority = raw[scheme_end + 3..].split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return None;
    }
    let url = Url::parse(raw).ok()?;
    // The scheme as written, lowercase (Url lowercases it), and the path as
    // written (no dot segment Url would remove).
    let raw_path = raw[scheme_end + 3..]
        .find('/')
        .map_or("/", |i| &raw[scheme_end + 3 + i..]);
    if raw.get(..scheme_end) != Some(url.scheme()) || url.path() != raw_path {
        return None;
    }
    let insecure = if url.scheme() == secure {
        false
    } else if url.scheme() == plain && allow_plain {
        true
    } else {
        return None;
    };
    let host_ok = match url.host() {
        Some(Host::Domain(d)) => !d.is_empty() && (!insecure || d == "localhost"),
        Some(Host::Ipv4(ip)) => !insecure || ip == std::net::Ipv4Addr::LOCALHOST,
        Some(Host::Ipv6(ip)) => !insecure || ip == std::net::Ipv6Addr::LOCALHOST,
        None => false,
    };
    (host_ok && url.username().is_empty() && url.password().is_none()).then_some((url, insecure))
}

/// An app key: 1 to 128 of `[A-Za-z0-9._-]`.
///
/// ```
/// use human_plus_core::is_app_key;
///
/// assert!(is_app_key("reverb-key_1.0"));
/// assert!(!is_app_key("a b"));
/// assert!(!is_app_key(""));
/// ```
#[must_use]
pub fn is_app_key(key: &str) -> bool {
    (1..=128).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The longest channel name accepted, in bytes (Pusher's documented limit).
pub const MAX_CHANNEL_NAME_BYTES: usize = 200;

/// A channel name Human+ may join: `private-…` or `presence-…` (never
/// `private-encrypted-…`, which needs end-to-end keys Human+ does not
/// have), at most [`MAX_CHANNEL_NAME_BYTES`], of `[A-Za-z0-9_\-=@,.;]`.
///
/// ```
/// use human_plus_core::is_joinable_channel;
///
/// assert!(is_joinable_channel("private-agent.session.S1"));
/// assert!(is_joinable_channel("presence-agent.session.S1"));
/// assert!(!is_joinable_channel("agent.session.S1"));
/// assert!(!is_joinable_channel("private-encrypted-agent"));
/// assert!(!is_joinable_channel("private-a b"));
/// ```
#[must_use]
pub fn is_joinable_channel(name: &str) -> bool {
    let prefixed = name
        .strip_prefix("private-")
        .or_else(|| name.strip_prefix("presence-"))
        .is_some_and(|rest| !rest.is_empty());
    prefixed
        && !name.starts_with("private-encrypted-")
        && name.len() <= MAX_CHANNEL_NAME_BYTES
        && name.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'=' | b'@' | b',' | b'.' | b';')
        })
}

/// The channel a page joins when its link names none: seed 004's page
/// joins `Echo.private("agent.session." + sessionId)`, which Laravel Echo
/// names `private-agent.session.{sessionId}`.
///
/// ```
/// assert_eq!(human_plus_core::default_reverb_channel("S1_abcd"), "private-agent.session.S1_abcd");
/// ```
#[must_use]
pub fn default_reverb_channel(session_id: &str) -> String {
    format!("private-agent.session.{session_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const AUTH: &str = "https://app.example/broadcasting/auth";

    #[test]
    fn websocket_urls() {
        let ok = |ws: &str| ReverbChannel::new(ws, AUTH, "private-a", false);
        assert_eq!(ok("wss://ws.example/app/k").unwrap().ws_port(), 443);
        assert_eq!(ok("wss://ws.example:6001/app/k").unwrap().ws_port(), 6001);
        assert_eq!(ok("wss://ws.example/reverb/app/k").unwrap().app_key(), "k");
        assert_eq!(
            ok("wss://WS.Example/app/k").unwrap().ws_host(),
            "ws.example"
        );
        for bad in [
            "ws://ws.example/app/k",
            "https://ws.example/app/k",
            "WSS://ws.example/app/k",
            "wss://ws.example/app/",
            "wss://ws.example/app",
            "wss://ws.example/k",
            "wss://ws.example/app/k/",
            "wss://ws.example/app/k?protocol=7",
            "wss://ws.example/app/k#x",
            "wss://u:p@ws.example/app/k",
            "wss://@ws.example/app/k",
            "wss://ws.example/app/k%20",
            "wss://ws.example/a b/app/k",
            "wss://ws.example/../app/k",
            "wss://ws.example/x/%2e%2e/app/k",
            "wss://ws.example/./app/k",
            "wss:///app/k",
            "wss://ws.example\\@evil/app/k",
            "",
        ] {
            assert_eq!(ok(bad), Err(ReverbRefusal::WebSocketUrl), "{bad}");
        }
    }

    #[test]
    fn plain_only_to_loopback_when_allowed() {
        let lo = |ws: &str, auth: &str| ReverbChannel::new(ws, auth, "private-a", true);
        assert!(
            lo("ws://127.0.0.1:8080/app/k", "http://localhost:8000/a")
                .unwrap()
                .is_insecure_loopback()
        );
        assert!(lo("ws://[::1]:8080/app/k", "https://a.example/a").is_ok());
        assert!(
            !lo("wss://ws.example/app/k", "https://a.example/a")
                .unwrap()
                .is_insecure_loopback()
        );
        assert_eq!(
            lo("ws://127.0.0.2/app/k", "https://a.example/a"),
            Err(ReverbRefusal::WebSocketUrl)
        );
        assert_eq!(
            lo("ws://localhost.evil.example/app/k", "https://a.example/a"),
            Err(ReverbRefusal::WebSocketUrl)
        );
        assert_eq!(
            lo("wss://ws.example/app/k", "http://10.0.0.1/a"),
            Err(ReverbRefusal::AuthUrl)
        );
        assert_eq!(
            lo("wss://ws.example/app/k", "https://a.example/a?x=1"),
            Err(ReverbRefusal::AuthUrl)
        );
    }

    #[test]
    fn channels() {
        let ch = |c: &str| ReverbChannel::new("wss://w.example/app/k", AUTH, c, false);
        assert!(ch("presence-agent.session.S1").unwrap().is_presence());
        assert_eq!(ch("agent.session.S1"), Err(ReverbRefusal::Channel));
        assert_eq!(ch("private-encrypted-x"), Err(ReverbRefusal::Channel));
    }

    #[test]
    fn serde_reads_back_and_rechecks() {
        let r = ReverbChannel::new("wss://w.example/app/k", AUTH, "private-a", false).unwrap();
        let json = serde_json::to_string(&r).unwrap();
        let back: ReverbChannel = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.app_key(), "k");
        let tampered = json.replace("private-a", "public-a");
        assert!(serde_json::from_str::<ReverbChannel>(&tampered).is_err());
    }
}
