//! The invitation a surface issues, the participant an agent joins as, and
//! the activity it announces.

use std::fmt;

use serde::{Deserialize, Serialize};
use url::{Host, Url};

use crate::error::{Error, InvitationError};
use crate::invite::transport::{ReverbChannel, Transport};

/// The relay token of an invitation: a bearer credential.
///
/// It has no `Display`, and its `Debug` prints `[redacted]`, so it cannot
/// reach a log line or an error message by accident. Read it with
/// [`RelayToken::expose`] only where it goes onto the wire.
///
/// ```
/// use human_plus_core::RelayToken;
///
/// let t = RelayToken::new("0123456789abcdef-secret");
/// assert_eq!(format!("{t:?}"), "RelayToken([redacted])");
/// assert_eq!(t.expose(), "0123456789abcdef-secret");
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RelayToken(String);

impl RelayToken {
    /// Wraps a token.
    #[must_use]
    pub fn new(token: impl Into<String>) -> Self {
        RelayToken(token.into())
    }

    /// The token itself, for the one place that puts it on the wire.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RelayToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RelayToken([redacted])")
    }
}

/// An invitation to join a live surface: relay URL, session id, token,
/// surface id and application, validated when it is built.
///
/// * the relay URL must be absolute `https://`;
/// * the session id must be exactly `[A-Za-z0-9_-]{4,64}` (a trailing
///   newline is refused, unlike the reference's regex);
/// * the token must be at least 16 bytes.
///
/// [`SurfaceInvitation::new_insecure_loopback`] also accepts `http://` to
/// `127.0.0.1`, `::1` / `[::1]` or `localhost`, for local development only;
/// the egress policy must then allow unverified egress and declare the host
/// and port as well.
///
/// ```
/// use human_plus_core::SurfaceInvitation;
///
/// let inv = SurfaceInvitation::new(
///     "https://relay.fancy.example",
///     "demo_001",
///     "0123456789abcdef0123",
///     "sheet:one",
///     "sheets",
/// )?;
/// assert_eq!(inv.session_id(), "demo_001");
/// assert!(!format!("{inv:?}").contains("0123456789abcdef0123"));
///
/// assert!(SurfaceInvitation::new("http://relay.fancy.example", "demo_001", "0123456789abcdef", "s", "a").is_err());
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "InvitationWire")]
pub struct SurfaceInvitation {
    relay_url: String,
    session_id: String,
    token: RelayToken,
    surface_id: String,
    application: String,
    allow_insecure_loopback: bool,
    /// The relay path, when the link did not name it and it was assumed
    /// (a page link); not written when `None`, so records with and without
    /// it read each other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    assumed_relay_path: Option<String>,
    /// How the page is reached; not written for the HTTP relay, so records
    /// with and without it read each other.
    #[serde(default, skip_serializing_if = "Transport::is_http_relay")]
    transport: Transport,
}

/// The serialised form, validated again on the way in.
#[derive(Deserialize)]
struct InvitationWire {
    relay_url: String,
    session_id: String,
    token: RelayToken,
    surface_id: String,
    application: String,
    #[serde(default)]
    allow_insecure_loopback: bool,
    #[serde(default)]
    assumed_relay_path: Option<String>,
    #[serde(default)]
    transport: Transport,
}

impl TryFrom<InvitationWire> for SurfaceInvitation {
    type Error = Error;

    fn try_from(w: InvitationWire) -> Result<Self, Error> {
        let invitation = SurfaceInvitation::build(
            w.relay_url,
            w.session_id,
            w.token,
            w.surface_id,
            w.application,
            w.allow_insecure_loopback,
        )?;
        let invitation = match w.transport {
            Transport::HttpRelay => invitation,
            Transport::Reverb(channel) => invitation.with_reverb(channel)?,
        };
        match w.assumed_relay_path {
            Some(path) if !is_relay_path(&path) => Err(Error::InvalidInvitation(
                InvitationError::Link(crate::error::LinkRefusal::RelayPath),
            )),
            path => Ok(SurfaceInvitation {
                assumed_relay_path: path,
                ..invitation
            }),
        }
    }
}

/// The longest relay path, in bytes (segments of at most 64).
pub const MAX_RELAY_PATH_BYTES: usize = 256;

/// A relay path as [`crate::LinkOptions::relay_path`] keeps it: empty, or
/// segments of `[A-Za-z0-9._~-]{1,64}` (not `.` or `..`) separated by `/`,
/// at most [`MAX_RELAY_PATH_BYTES`], no surrounding slash.
pub(crate) fn is_relay_path(path: &str) -> bool {
    path.is_empty()
        || (path.len() <= MAX_RELAY_PATH_BYTES && path.split('/').all(is_relay_path_segment))
}

/// One relay path segment: `[A-Za-z0-9._~-]{1,64}`, not `.` or `..`.
pub(crate) fn is_relay_path_segment(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'))
}

impl SurfaceInvitation {
    /// A validated invitation to an `https://` relay.
    ///
    /// # Errors
    /// [`Error::InvalidInvitation`] when a rule above is broken.
    pub fn new(
        relay_url: impl Into<String>,
        session_id: impl Into<String>,
        token: impl Into<String>,
        surface_id: impl Into<String>,
        application: impl Into<String>,
    ) -> Result<Self, Error> {
        Self::build(
            relay_url.into(),
            session_id.into(),
            RelayToken::new(token),
            surface_id.into(),
            application.into(),
            false,
        )
    }

    /// A validated invitation that may also use `http://` to a loopback
    /// host. For local development only.
    ///
    /// ```
    /// use human_plus_core::SurfaceInvitation;
    ///
    /// for url in ["http://127.0.0.1:8787", "http://[::1]:8787", "http://localhost:8787"] {
    ///     assert!(SurfaceInvitation::new_insecure_loopback(url, "demo_001", "0123456789abcdef", "s", "a").is_ok());
    /// }
    /// assert!(SurfaceInvitation::new_insecure_loopback("http://10.0.0.1", "demo_001", "0123456789abcdef", "s", "a").is_err());
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidInvitation`] when a rule is broken.
    pub fn new_insecure_loopback(
        relay_url: impl Into<String>,
        session_id: impl Into<String>,
        token: impl Into<String>,
        surface_id: impl Into<String>,
        application: impl Into<String>,
    ) -> Result<Self, Error> {
        Self::build(
            relay_url.into(),
            session_id.into(),
            RelayToken::new(token),
            surface_id.into(),
            application.into(),
            true,
        )
    }

    fn build(
        relay_url: String,
        session_id: String,
        token: RelayToken,
        surface_id: String,
        application: String,
        allow_insecure_loopback: bool,
    ) -> Result<Self, Error> {
        let fail = |e| Err(Error::InvalidInvitation(e));
        let Ok(url) = Url::parse(&relay_url) else {
            return fail(InvitationError::RelayUrl);
        };
        let scheme_ok = match url.scheme() {
            "https" => true,
            "http" => allow_insecure_loopback && is_loopback_host(&url),
            _ => false,
        };
        let host_ok = url.host().is_some_and(|h| match h {
            Host::Domain(d) => !d.is_empty(),
            _ => true,
        });
        if !scheme_ok || !host_ok {
            return fail(InvitationError::RelayUrl);
        }
        if !is_valid_session_id(&session_id) {
            return fail(InvitationError::SessionId);
        }
        if token.expose().len() < 16 {
            return fail(InvitationError::TokenTooShort);
        }
        Ok(SurfaceInvitation {
            relay_url,
            session_id,
            token,
            surface_id,
            application,
            allow_insecure_loopback,
            assumed_relay_path: None,
            transport: Transport::HttpRelay,
        })
    }

    /// A validated invitation to join a page over a Pusher-protocol channel
    /// (Laravel Reverb): the relay URL is the channel's auth bridge, the
    /// token goes only to it (as `Authorization: Bearer`), never to the
    /// WebSocket server and never into a URL. Plain `ws://` / `http://` to
    /// loopback is allowed when the channel was built allowing it.
    ///
    /// ```
    /// use human_plus_core::{ReverbChannel, SurfaceInvitation, Transport};
    ///
    /// let channel = ReverbChannel::new(
    ///     "wss://ws.app.example/app/app-key", "https://app.example/broadcasting/auth",
    ///     "private-agent.session.S1_abcd", false,
    /// ).unwrap();
    /// let inv = SurfaceInvitation::new_reverb(channel, "S1_abcd", "0123456789abcdef0123", "sheet:one", "sheets")?;
    /// assert_eq!(inv.relay_url(), "https://app.example/broadcasting/auth");
    /// assert_eq!(inv.transport().reverb().unwrap().app_key(), "app-key");
    ///
    /// // Read back, and an old record (no transport) is the HTTP relay.
    /// let json = serde_json::to_string(&inv).unwrap();
    /// assert_eq!(serde_json::from_str::<SurfaceInvitation>(&json).unwrap(), inv);
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidInvitation`]: the session id or token rules, or
    /// [`InvitationError::RelayUrl`] when the token appears in either URL.
    pub fn new_reverb(
        channel: ReverbChannel,
        session_id: impl Into<String>,
        token: impl Into<String>,
        surface_id: impl Into<String>,
        application: impl Into<String>,
    ) -> Result<Self, Error> {
        Self::build(
            channel.auth_url().to_owned(),
            session_id.into(),
            RelayToken::new(token),
            surface_id.into(),
            application.into(),
            channel.is_insecure_loopback(),
        )?
        .with_reverb(channel)
    }

    /// This invitation over `channel`, checked against it: the relay URL is
    /// the channel's auth bridge, plain loopback only where the invitation
    /// allows it, and the token in neither URL.
    pub(crate) fn with_reverb(mut self, channel: ReverbChannel) -> Result<Self, Error> {
        let token = self.token.expose();
        let consistent = self.relay_url == channel.auth_url()
            && (self.allow_insecure_loopback || !channel.is_insecure_loopback())
            && !channel.ws_url().contains(token)
            && !channel.auth_url().contains(token);
        if !consistent {
            return Err(Error::InvalidInvitation(InvitationError::RelayUrl));
        }
        self.transport = Transport::Reverb(channel);
        Ok(self)
    }

    /// How the page is reached: the HTTP relay at
    /// [`SurfaceInvitation::relay_url`], or a Reverb channel whose auth
    /// bridge is that URL.
    #[must_use]
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The same invitation, remembering that its relay path was not in the
    /// link but assumed (`path`, already checked as a relay path).
    pub(crate) fn with_assumed_relay_path(mut self, path: &str) -> Self {
        self.assumed_relay_path = Some(path.to_owned());
        self
    }

    /// The relay's base URL, as given.
    #[must_use]
    pub fn relay_url(&self) -> &str {
        &self.relay_url
    }

    /// The relay session id.
    #[must_use]
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The relay token (redacted in `Debug`).
    #[must_use]
    pub fn token(&self) -> &RelayToken {
        &self.token
    }

    /// The surface id, used as the provenance of framed results.
    #[must_use]
    pub fn surface_id(&self) -> &str {
        &self.surface_id
    }

    /// The application name.
    #[must_use]
    pub fn application(&self) -> &str {
        &self.application
    }

    /// Whether `http://` to a loopback host was allowed.
    #[must_use]
    pub fn allow_insecure_loopback(&self) -> bool {
        self.allow_insecure_loopback
    }

    /// The relay path (without surrounding slashes; empty for the page's
    /// origin itself) when the invitation came from a page link
    /// (`#session=`, `?session=`), which does not name where its relay
    /// lives: the path was then assumed from
    /// [`LinkOptions::relay_path`](crate::LinkOptions::relay_path). A 404
    /// from the relay is then [`Error::RelayPathNotFound`], which names the
    /// path and the option. `None` for an invitation built from its parts
    /// or read from a link that names its relay (a relay session URL, the
    /// JSON invitation).
    ///
    /// ```
    /// use human_plus_core::{LinkOptions, SurfaceInvitation};
    ///
    /// let token = "0123456789abcdef0123456789abcdef";
    /// let page = SurfaceInvitation::from_link(
    ///     &format!("https://app.example/board#session=S1_abcd&token={token}"),
    ///     &LinkOptions::default(),
    /// )?;
    /// assert_eq!(page.assumed_relay_path(), Some("agent-relay"));
    /// let relay = SurfaceInvitation::from_link(
    ///     &format!("https://app.example/agent-relay/S1_abcd#token={token}"),
    ///     &LinkOptions::default(),
    /// )?;
    /// assert_eq!(relay.assumed_relay_path(), None);
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn assumed_relay_path(&self) -> Option<&str> {
        self.assumed_relay_path.as_deref()
    }
}

/// Whether `url`'s host is one of the loopback hosts the development mode
/// accepts: `127.0.0.1`, `::1` (written `[::1]`) or `localhost`.
pub(crate) fn is_loopback_host(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(d)) => d == "localhost",
        Some(Host::Ipv4(ip)) => ip == std::net::Ipv4Addr::LOCALHOST,
        Some(Host::Ipv6(ip)) => ip == std::net::Ipv6Addr::LOCALHOST,
        None => false,
    }
}

/// `[A-Za-z0-9_-]{4,64}`, anchored at both ends with no trailing newline.
#[must_use]
pub fn is_valid_session_id(id: &str) -> bool {
    (4..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The agent as the people on the surface see it: an id, a name and a
/// colour. Not validated.
///
/// ```
/// use human_plus_core::Participant;
///
/// let p = Participant::new("agent-1", "Assistant", "#7c3aed");
/// assert_eq!(p.name, "Assistant");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Participant {
    /// The participant id.
    pub id: String,
    /// The display name.
    pub name: String,
    /// The display colour.
    pub color: String,
}

impl Participant {
    /// A participant.
    #[must_use]
    pub fn new(id: impl Into<String>, name: impl Into<String>, color: impl Into<String>) -> Self {
        Participant {
            id: id.into(),
            name: name.into(),
            color: color.into(),
        }
    }
}

/// How much an activity should draw a person's attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Background work.
    Background,
    /// Ordinary work (the default).
    #[default]
    Normal,
    /// Worth a look.
    Attention,
    /// Waiting on a person.
    Blocking,
}

impl Priority {
    /// The wire value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Background => "background",
            Priority::Normal => "normal",
            Priority::Attention => "attention",
            Priority::Blocking => "blocking",
        }
    }

    /// Parses a wire value.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "background" => Some(Priority::Background),
            "normal" => Some(Priority::Normal),
            "attention" => Some(Priority::Attention),
            "blocking" => Some(Priority::Blocking),
            _ => None,
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the agent is doing, announced to the surface as a
/// `notifications/human-plus/activity` notification.
///
/// ```
/// use human_plus_core::{Activity, Priority};
///
/// let a = Activity::new("editing").target("B4").priority(Priority::Attention).correlation_id("run-7");
/// assert_eq!(a.action, "editing");
/// assert_eq!(a.priority, Priority::Attention);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    /// What the agent is doing.
    pub action: String,
    /// The handle it is doing it to.
    pub target: Option<String>,
    /// How much attention it deserves.
    pub priority: Priority,
    /// A correlation id for the host.
    pub correlation_id: Option<String>,
}

impl Activity {
    /// An activity with no target, normal priority and no correlation id.
    #[must_use]
    pub fn new(action: impl Into<String>) -> Self {
        Activity {
            action: action.into(),
            target: None,
            priority: Priority::Normal,
            correlation_id: None,
        }
    }

    /// Sets the target handle.
    #[must_use]
    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = Some(target.into());
        self
    }

    /// Sets the priority.
    #[must_use]
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Sets the correlation id.
    #[must_use]
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }

    /// The notification's `params`, keys in the reference's order: `actor`
    /// (`id`, `name`, `color`, `type: "agent"`), `surfaceId`, `sessionId`,
    /// `action`, `target`, `priority`, `correlationId`.
    ///
    /// ```
    /// use human_plus_core::{Activity, Participant, Priority, SurfaceInvitation};
    ///
    /// let inv = SurfaceInvitation::new("https://relay.example", "demo_001", "0123456789abcdef", "sheet:one", "Demo")?;
    /// let p = Participant::new("agent:one", "One", "#000000");
    /// let activity = Activity::new("editing").target("cell:A1").priority(Priority::Attention);
    /// let params = activity.params(&p, &inv);
    /// assert_eq!(
    ///     serde_json::to_string(&params).unwrap(),
    ///     r##"{"actor":{"id":"agent:one","name":"One","color":"#000000","type":"agent"},"surfaceId":"sheet:one","sessionId":"demo_001","action":"editing","target":"cell:A1","priority":"attention","correlationId":null}"##
    /// );
    /// # Ok::<(), human_plus_core::Error>(())
    /// ```
    #[must_use]
    pub fn params<'a>(
        &'a self,
        participant: &'a Participant,
        invitation: &'a SurfaceInvitation,
    ) -> ActivityParams<'a> {
        ActivityParams {
            actor: ActivityActor {
                id: &participant.id,
                name: &participant.name,
                color: &participant.color,
                kind: "agent",
            },
            surface_id: invitation.surface_id(),
            session_id: invitation.session_id(),
            action: &self.action,
            target: self.target.as_deref(),
            priority: self.priority,
            correlation_id: self.correlation_id.as_deref(),
        }
    }
}

/// The `params` of a `notifications/human-plus/activity` notification.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityParams<'a> {
    /// Who is acting; always `type: "agent"`.
    pub actor: ActivityActor<'a>,
    /// The invitation's surface id.
    pub surface_id: &'a str,
    /// The invitation's session id.
    pub session_id: &'a str,
    /// What is being done.
    pub action: &'a str,
    /// To which handle.
    pub target: Option<&'a str>,
    /// With which priority.
    pub priority: Priority,
    /// The correlation id.
    pub correlation_id: Option<&'a str>,
}

/// The `actor` of an activity notification.
#[derive(Debug, Clone, Serialize)]
pub struct ActivityActor<'a> {
    /// The participant id.
    pub id: &'a str,
    /// The participant name.
    pub name: &'a str,
    /// The participant colour.
    pub color: &'a str,
    /// Always `"agent"`, so people can tell the agent from a human.
    #[serde(rename = "type")]
    pub kind: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn inv(url: &str) -> Result<SurfaceInvitation, Error> {
        SurfaceInvitation::new(url, "demo_001", TOKEN, "sheet:one", "Demo")
    }

    #[test]
    fn relay_url_must_be_absolute_https() {
        assert!(inv("https://relay.example.com").is_ok());
        assert!(inv("https://relay.example.com/base/path").is_ok());
        for bad in [
            "http://relay.example.com",
            "relay.example.com",
            "/relative",
            "ftp://relay.example.com",
            "https://",
            "",
            "wss://relay.example.com",
        ] {
            assert_eq!(
                inv(bad),
                Err(Error::InvalidInvitation(InvitationError::RelayUrl)),
                "{bad}"
            );
        }
    }

    #[test]
    fn loopback_http_needs_the_flag_and_a_loopback_host() {
        let lo = |u: &str| {
            SurfaceInvitation::new_insecure_loopback(u, "demo_001", TOKEN, "s", "a").is_ok()
        };
        assert!(lo("http://127.0.0.1:8787"));
        assert!(lo("http://[::1]:8787"));
        assert!(lo("http://localhost:8787"));
        assert!(lo("https://relay.example.com"));
        assert!(!lo("http://127.0.0.2"));
        assert!(!lo("http://relay.example.com"));
        assert!(!lo("http://10.0.0.1"));
        assert!(!lo("http://localhost.evil.example"));
        assert!(inv("http://127.0.0.1:8787").is_err());
    }

    #[test]
    fn session_id_is_exact() {
        let s = |id: &str| SurfaceInvitation::new("https://r.example", id, TOKEN, "s", "a");
        assert!(s("demo").is_ok());
        assert!(s(&"a".repeat(64)).is_ok());
        for bad in [
            "abc",
            "demo_001\n",
            "demo 001",
            "demo/001",
            "démo",
            &"a".repeat(65),
            "",
        ] {
            assert_eq!(
                s(bad),
                Err(Error::InvalidInvitation(InvitationError::SessionId)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn token_needs_sixteen_bytes() {
        let t = |tok: &str| SurfaceInvitation::new("https://r.example", "demo", tok, "s", "a");
        assert!(t("0123456789abcdef").is_ok());
        assert_eq!(
            t("0123456789abcde"),
            Err(Error::InvalidInvitation(InvitationError::TokenTooShort))
        );
    }

    #[test]
    fn serde_round_trip_revalidates_and_debug_hides_token() {
        let i = inv("https://relay.example.com").unwrap();
        let json = serde_json::to_string(&i).unwrap();
        let back: SurfaceInvitation = serde_json::from_str(&json).unwrap();
        assert_eq!(i, back);
        assert!(!format!("{i:?}").contains(TOKEN));
        let tampered = json.replace("demo_001", "x");
        assert!(serde_json::from_str::<SurfaceInvitation>(&tampered).is_err());
    }
}
