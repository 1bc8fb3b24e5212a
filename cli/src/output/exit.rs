//! Exit codes, and how a failure is told to a person: the core's stable
//! code, one line of explanation, and a hint naming the flag to change.
//! Never the token.

use std::fmt::Write as _;
use std::io::Write as _;

use human_plus_core::{
    ChannelError, EgressRule, Error, ReverbChannel, SurfaceInvitation, ToolRefusal, Unauthorized,
    redact_text,
};

/// Success.
pub const OK: u8 = 0;
/// Anything unexpected: the local relay could not start, stdout closed, ...
pub const INTERNAL: u8 = 1;
/// Usage or local input: a bad flag, an unreadable file, invalid JSON, an
/// invalid invitation, no token.
pub const USAGE: u8 = 2;
/// The egress policy refused the relay URL or its addresses
/// (`egress_refused`).
pub const EGRESS_REFUSED: u8 = 3;
/// Local trust refused a tool or a result (`tool_refused`,
/// `conflict_detection_unavailable`).
pub const TRUST_REFUSED: u8 = 4;
/// The relay says the session is gone, HTTP 410 (`surface_unavailable`).
pub const SURFACE_UNAVAILABLE: u8 = 5;
/// The relay refused the token, HTTP 401 (`attachment_unauthorized`).
pub const UNAUTHORIZED: u8 = 6;
/// The surface refused the call's stale revision; nothing was applied
/// (`surface_changed_under_you`).
pub const SURFACE_CHANGED: u8 = 7;
/// The exchange did not complete in time (`timeout`).
pub const TIMEOUT: u8 = 8;
/// Any other relay, protocol or transport failure (`relay_failed`,
/// `protocol_error`, `transport_failed`, ...).
pub const RELAY_FAILED: u8 = 9;
/// The tool ran and reported an error, or the surface answered with a
/// JSON-RPC error (`tool_error`, `surface_error`).
pub const TOOL_ERROR: u8 = 10;
/// The call was sent but its outcome never came back: it may have been
/// applied, and it was not sent again (`delivery_unknown`).
pub const DELIVERY_UNKNOWN: u8 = 11;
/// The egress proxy answered 407: it wants credentials, or refused the
/// ones given (`proxy_auth_required`).
pub const PROXY_AUTH: u8 = 12;
/// Over a Reverb channel: the request would be a WebSocket message over
/// the channel's limit (`--channel-limit`); it was refused here and never
/// sent (`channel_limit`).
pub const CHANNEL_LIMIT: u8 = 13;
/// Over a Reverb presence channel: the page left the channel, so nobody is
/// there to answer; nothing that acts was in flight (`page_left`).
pub const PAGE_LEFT: u8 = 14;
/// The person pressed Ctrl-C at `join`'s prompt (128 + SIGINT, as a shell
/// reports a command that Ctrl-C ended).
pub const INTERRUPTED: u8 = 130;

/// The exit-code table, as `human-plus --help` prints it.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
   0  ok
   1  internal failure (the local relay could not start, output closed)
   2  usage or local input (bad flag, unreadable file, invalid JSON or invitation, no token)
   3  egress refused: the relay URL or its addresses are not allowed (egress_refused)
   4  trust refused: the tool is not admitted or its pin changed (tool_refused)
   5  surface unavailable: the relay answered 410, the session is gone (surface_unavailable)
   6  attachment unauthorized: the relay answered 401 or the auth bridge 401/403, wrong token; or the channel server refused the bridge's signature (attachment_unauthorized)
   7  the surface changed under you: a stale pin was refused, nothing applied (surface_changed_under_you)
   8  timeout: no correlated reply in time (timeout, call_timeout; over a channel, the page may have left)
   9  other relay, protocol or transport failure (relay_failed, protocol_error, transport_failed, channel_closed, channel_auth_invalid)
  10  the tool reported an error (tool_error, surface_error)
  11  delivery unknown: the call was sent, its outcome was lost; it may have been applied and was not sent again (delivery_unknown; over a channel also page_left, channel_closed with the call in flight)
  12  the egress proxy wants credentials, or refused them: HTTP 407 (proxy_auth_required)
  13  over a Reverb channel: the request is over the channel's message limit, refused here, not sent (channel_limit)
  14  over a Reverb presence channel: the page left the channel, nobody is there to answer (page_left)
 130  interrupted: Ctrl-C at join's prompt; nothing was sent (interrupted)

The relay token comes only from HUMAN_PLUS_TOKEN, --token-file, a link (HUMAN_PLUS_INVITATION,
--invitation-file, or join's standard input) or a profile (--profile); an egress proxy's
credentials only from HUMAN_PLUS_PROXY_AUTH or --proxy-auth-file; neither is ever printed.";

/// A failure as the command line reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The process exit code.
    pub exit: u8,
    /// The stable code (the core's `code()`, or `usage` / `internal`).
    pub code: String,
    /// One line of explanation.
    pub message: String,
    /// What to do about it, naming the flag to add or change.
    pub hint: Option<String>,
    /// Longer text worth showing (the refusal a model reads, a tool's
    /// framed output).
    pub detail: Option<String>,
}

/// What a failure is reported against: the relay URL (and, for a page on
/// a Reverb channel, the channel), for hints.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The relay URL of the invitation (a Reverb invitation's auth bridge).
    pub relay_url: Option<String>,
    /// The Reverb channel, when the invitation names one: hints then name
    /// both hosts (the channel server's and the auth bridge's).
    pub channel: Option<ReverbChannel>,
}

impl Context {
    /// The context of `invitation`: its relay URL, and its channel when it
    /// is a Reverb invitation. Never its token.
    #[must_use]
    pub fn of(invitation: &SurfaceInvitation) -> Context {
        Context {
            relay_url: Some(invitation.relay_url().to_owned()),
            channel: invitation.transport().reverb().cloned(),
        }
    }

    /// The context of a relay URL alone.
    #[must_use]
    pub fn relay(relay_url: &str) -> Context {
        Context {
            relay_url: Some(relay_url.to_owned()),
            channel: None,
        }
    }
}

impl Failure {
    /// A usage or local-input failure (exit 2).
    #[must_use]
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            exit: USAGE,
            code: "usage".to_owned(),
            message: redact_text(&message.into()),
            hint: None,
            detail: None,
        }
    }

    /// An interruption by the person (exit 130, code `interrupted`).
    #[must_use]
    pub fn interrupted(message: impl Into<String>) -> Self {
        Failure {
            exit: INTERRUPTED,
            code: "interrupted".to_owned(),
            message: redact_text(&message.into()),
            hint: None,
            detail: None,
        }
    }

    /// An internal failure (exit 1).
    #[must_use]
    pub fn internal(message: impl Into<String>) -> Self {
        Failure {
            exit: INTERNAL,
            code: "internal".to_owned(),
            message: redact_text(&message.into()),
            hint: None,
            detail: None,
        }
    }

    /// Adds a hint.
    #[must_use]
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The failure for a core error.
    #[must_use]
    pub fn from_error(error: &Error, context: &Context) -> Self {
        // The surface's words (a framed result or error) are data: only the
        // secrets this process holds are taken out of them, by exact value
        // (when printed). Human+'s own messages quote library errors, which
        // like to quote URLs: those are redacted by pattern.
        let full = match error {
            Error::ToolFailed { .. }
            | Error::SurfaceError(_)
            | Error::SurfaceChangedUnderYou(_) => error.to_string(),
            _ => redact_text(&error.to_string()),
        };
        let (message, detail) = match error {
            Error::ToolFailed { .. } => (
                "the tool ran and reported an error; its framed output follows.".to_owned(),
                Some(full),
            ),
            _ => {
                let mut lines = full.lines();
                let first = lines.next().unwrap_or_default().trim_end().to_owned();
                let rest: Vec<&str> = lines.collect();
                let detail = (!rest.iter().all(|l| l.trim().is_empty())).then(|| full.clone());
                (first.trim_end_matches(':').to_owned(), detail)
            }
        };
        Failure {
            exit: exit_code(error),
            code: error.code().to_owned(),
            message,
            hint: hint(error, context),
            detail,
        }
    }

    /// The text printed on stderr: `human-plus: error[code]: message`, the
    /// hint, then the detail indented. Every line is redacted of the
    /// secrets the command holds (by exact value) and has its control
    /// characters escaped, so nothing a surface wrote can steer the
    /// terminal.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "human-plus: error[{}]: {}",
            self.code,
            printable(&redact_text(&self.message))
        );
        if let Some(hint) = &self.hint {
            let _ = writeln!(out, "human-plus: hint: {}", printable(&redact_text(hint)));
        }
        if let Some(detail) = &self.detail {
            for line in detail.lines() {
                let _ = writeln!(out, "  {}", printable(line));
            }
        }
        crate::output::logs::redact(&out)
    }

    /// Prints [`Failure::render`] on stderr.
    pub fn print(&self) {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(self.render().as_bytes());
        let _ = err.flush();
    }
}

/// The exit code of a core error.
#[must_use]
pub fn exit_code(error: &Error) -> u8 {
    match error {
        Error::InvalidInvitation(_)
        | Error::InvalidOwner
        | Error::InvalidAttachment
        | Error::InvalidArguments
        | Error::InvalidRevision(_) => USAGE,
        Error::EgressRefused(_) => EGRESS_REFUSED,
        Error::ToolRefused(_) | Error::ConflictDetectionUnavailable(_) => TRUST_REFUSED,
        Error::SurfaceUnavailable => SURFACE_UNAVAILABLE,
        Error::AttachmentUnauthorized(_) => UNAUTHORIZED,
        Error::SurfaceChangedUnderYou(_) | Error::RevisionRejected => SURFACE_CHANGED,
        Error::Timeout | Error::CallTimeout(_) => TIMEOUT,
        Error::Transport(t) if t.kind() == human_plus_core::TransportErrorKind::Timeout => TIMEOUT,
        Error::ToolFailed { .. } | Error::SurfaceError(_) => TOOL_ERROR,
        Error::DeliveryUnknown(_) | Error::Unrecorded(_) => DELIVERY_UNKNOWN,
        Error::ProxyAuthRequired(_) => PROXY_AUTH,
        Error::Channel(c) => channel_exit_code(c),
        _ => RELAY_FAILED,
    }
}

/// The exit code of what a channel could not carry or tell: a request over
/// the limit 13; a wait that ended at the deadline 8, as a timeout; the
/// page gone from a presence channel 14; the connection ended 9 (a
/// transport failure); the bridge's unusable answer 9. A request that
/// acted and may have been applied when the page left or the connection
/// ended is 11, as every outcome that was lost.
#[must_use]
pub fn channel_exit_code(error: &ChannelError) -> u8 {
    match error {
        ChannelError::TooLarge { .. } => CHANNEL_LIMIT,
        ChannelError::Unanswered { .. } => TIMEOUT,
        ChannelError::PageLeft { call: Some(_) } | ChannelError::Closed { call: Some(_), .. } => {
            DELIVERY_UNKNOWN
        }
        ChannelError::PageLeft { call: None } => PAGE_LEFT,
        _ => RELAY_FAILED,
    }
}

fn relay_host_port(context: &Context) -> (Option<String>, Option<u16>) {
    let Some(raw) = &context.relay_url else {
        return (None, None);
    };
    match url::Url::parse(raw) {
        Ok(u) => (u.host_str().map(str::to_owned), u.port_or_known_default()),
        Err(_) => (None, None),
    }
}

/// `host` as a flag takes it: an IPv6 address without its brackets.
fn bare(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The hint for an error over a Reverb channel, when it has one of its own:
/// egress names both hosts, the auth bridge's refusals are its own, and
/// what the channel could not carry or tell says what to do.
fn channel_hint(error: &Error, channel: &ReverbChannel) -> Option<String> {
    let (ws_host, ws_port) = (channel.ws_host(), channel.ws_port());
    let (auth_host, auth_port) = (channel.auth_host(), channel.auth_port());
    let both = |flag: &str, a: &str, b: &str| {
        if a == b {
            format!("{flag} {a}")
        } else {
            format!("{flag} {a} {flag} {b}")
        }
    };
    Some(match error {
        Error::EgressRefused(refusal) => match refusal.rule {
            EgressRule::HostNotDeclared => format!(
                "egress is never implied by the link: over a Reverb channel both hosts must be declared, the channel server's and the auth bridge's: {}",
                both("--allow-host", bare(&ws_host), bare(&auth_host))
            ),
            EgressRule::PortNotDeclared => format!(
                "over a Reverb channel both ports must be declared, the channel server's ({ws_port}) and the auth bridge's ({auth_port}): {}",
                both("--allow-port", &ws_port.to_string(), &auth_port.to_string())
            ),
            EgressRule::InsecureLoopback => "plain ws:// and http:// are accepted only on loopback, with --allow-insecure-loopback and --allow-unverified-egress (local development only)".to_owned(),
            EgressRule::PrivateAddress => "the channel server or the auth bridge is (or resolves to) a private or reserved address; for a TLS server on this machine only, --allow-address 127.0.0.1/32".to_owned(),
            EgressRule::UrlShape => "a Reverb link needs reverb=wss://HOST[:PORT]/app/APP_KEY and auth=https://HOST[:PORT]/PATH, without credentials, query or fragment".to_owned(),
            _ => return None,
        },
        Error::AttachmentUnauthorized(Unauthorized::Bridge { status }) => format!(
            "the host app's auth bridge at {} port {auth_port} refused the link's token (HTTP {status}): the link was revoked or replaced, or is for another channel; ask the person for a new link",
            bare(&auth_host)
        ),
        Error::AttachmentUnauthorized(Unauthorized::Channel) => "the channel server refused the signature the host app's auth bridge made (Pusher error 4009): the bridge and the channel server do not share an app key and secret; tell whoever runs the page, trying again will not help".to_owned(),
        Error::SurfaceUnavailable => {
            "the auth bridge says the session is gone (410); ask the person for a new link".to_owned()
        }
        Error::Channel(ChannelError::TooLarge { limit, .. }) => format!(
            "send less at once; if the channel server allows messages over {limit} bytes, say so with --channel-limit BYTES"
        ),
        Error::Channel(ChannelError::Unanswered { call: Some(_), .. }) => {
            "the call was sent and may have been applied: read the surface (or `human-plus changes`) before deciding whether to call again; ask the person whether the page is still open".to_owned()
        }
        Error::Channel(ChannelError::Unanswered { call: None, presence, .. }) => format!(
            "{}; a long tool listing or a large result may be over the channel server's message limit; raise --timeout if the page is slow",
            if *presence {
                "the page was still on the channel: it may not be responding"
            } else if channel.is_presence() {
                "ask the person whether the page is still open: nobody else was on the channel"
            } else {
                "ask the person whether the page is still open (on a private channel nobody says when it leaves; a presence- channel does)"
            }
        ),
        Error::Channel(ChannelError::PageLeft { call: None }) => {
            "ask the person to open the page again; nothing was sent".to_owned()
        }
        Error::Channel(ChannelError::PageLeft { call: Some(_) } | ChannelError::Closed { call: Some(_), .. }) => {
            "read the surface (or `human-plus changes`) before deciding whether to call again: the call may have been applied".to_owned()
        }
        Error::Channel(ChannelError::Closed { call: None, .. }) => format!(
            "the channel server at {} port {ws_port} ended the connection; nothing that acts was sent, so trying again is safe",
            bare(&ws_host)
        ),
        Error::Channel(ChannelError::AuthAnswer) => format!(
            "the auth bridge at {} port {auth_port} answered without a channel signature: the link's auth= may not be the host app's broadcasting auth endpoint (Laravel: /broadcasting/auth), or it signs for another app key",
            bare(&auth_host)
        ),
        Error::Timeout => {
            "raise --timeout; ask the person whether the page is still open".to_owned()
        }
        _ => return None,
    })
}

fn hint(error: &Error, context: &Context) -> Option<String> {
    if let Some(channel) = &context.channel
        && let Some(hint) = channel_hint(error, channel)
    {
        return Some(hint);
    }
    let (host, port) = relay_host_port(context);
    let host = host.unwrap_or_else(|| "HOST".to_owned());
    let port = port.map_or_else(|| "PORT".to_owned(), |p| p.to_string());
    Some(match error {
        Error::EgressRefused(refusal) => match refusal.rule {
            EgressRule::HostNotDeclared => format!(
                "egress is never implied by the relay URL: add --allow-host {host} if you mean to reach it"
            ),
            EgressRule::PortNotDeclared => format!("add --allow-port {port} to declare the relay's port"),
            EgressRule::ProxyRequired => "pass --egress-proxy http://PROXY:PORT (production), or --allow-unverified-egress for local dogfooding".to_owned(),
            EgressRule::InsecureLoopback => "a plain-http relay is accepted only on loopback, with --allow-insecure-loopback and --allow-unverified-egress (local development only)".to_owned(),
            EgressRule::PrivateAddress => "the relay is (or resolves to) a private or reserved address; for a TLS relay on this machine only, --allow-address 127.0.0.1/32".to_owned(),
            EgressRule::NotResolved => format!("the relay host {host} did not resolve to any address"),
            EgressRule::UrlShape => "the relay URL must be https://HOST[:PORT][/PATH], without credentials, query or fragment".to_owned(),
            EgressRule::ProxyUrl => "--egress-proxy must be http://HOST:PORT".to_owned(),
            EgressRule::ProxyCredentials => "the egress proxy's credentials must be user:password (no ':' in the user name, no control characters), in HUMAN_PLUS_PROXY_AUTH or a --proxy-auth-file".to_owned(),
            _ => return None,
        },
        Error::ToolRefused(refusal) => match refusal {
            ToolRefusal::Undeclared => {
                "declare trust before discovery: --allow NAME[,NAME...] (preferred) or --every-tool".to_owned()
            }
            ToolRefusal::EmptyAllowlist => "--allow needs at least one tool name".to_owned(),
            ToolRefusal::NotAllowed(name) | ToolRefusal::NotOffered(name)
                if human_plus_core::is_reserved_tool_name(name) =>
            {
                "confirmation tools are reserved for the person on the surface and are never offered to an agent, under any trust policy".to_owned()
            }
            ToolRefusal::NotAllowed(name) | ToolRefusal::NotOffered(name) => format!(
                "`human-plus tools` lists what is admitted; add --allow {} if you trust it",
                printable(name)
            ),
            ToolRefusal::Reserved(_) => {
                "confirmation tools are reserved for the person on the surface and are never offered to an agent".to_owned()
            }
            ToolRefusal::PinChanged(name) => format!(
                "the surface changed the definition of {}: review it (`human-plus tools --json`) before updating the pin",
                printable(name)
            ),
            _ => return None,
        },
        Error::SurfaceUnavailable => {
            "the relay says the session is gone (410); ask the surface for a new invitation".to_owned()
        }
        Error::AttachmentUnauthorized(Unauthorized::Relay) => {
            "the relay refused the token (401); check HUMAN_PLUS_TOKEN or --token-file".to_owned()
        }
        Error::SurfaceChangedUnderYou(refusal) => match refusal.next_pin() {
            Some(next) if human_plus_core::is_plain_identifier(next.token()) => format!(
                "somebody changed the surface since that revision: read it again, then decide; pin the next call with --revision {}",
                next.token()
            ),
            _ => "somebody changed the surface since that revision: read it again, then decide; pin the next call with the revision it reports".to_owned(),
        },
        Error::RelayPathNotFound(_) => {
            "give the page's relay path with --relay-path PATH (--relay-path '' for a relay at the page's origin), or use the relay's own session URL as the link".to_owned()
        }
        Error::Timeout => {
            "raise --timeout, or try --transport poll if a proxy buffers the event stream".to_owned()
        }
        Error::CallTimeout(_) => {
            "the call was sent and may have been applied: read the surface (or `human-plus changes`) before deciding whether to call again; raise --timeout if the page is slow".to_owned()
        }
        Error::DeliveryUnknown(_) => {
            "read the surface (or `human-plus changes`) before deciding whether to call again: the call may have been applied".to_owned()
        }
        Error::AttachmentUnauthorized(Unauthorized::Bridge { status }) => format!(
            "the host app's auth bridge refused the link's token (HTTP {status}); ask the person for a new link"
        ),
        Error::Channel(ChannelError::TooLarge { .. }) => {
            "send less at once, or give the channel server's limit with --channel-limit BYTES".to_owned()
        }
        Error::ProxyAuthRequired(_) => {
            "the egress proxy asks for credentials (407): set HUMAN_PLUS_PROXY_AUTH=user:password or pass --proxy-auth-file PATH, or check the ones given".to_owned()
        }
        Error::InvalidInvitation(human_plus_core::InvitationError::Link(_)) => {
            "pass the link exactly as the page shared it (https://HOST/PAGE#session=ID&token=TOKEN, with &reverb=wss://HOST/app/KEY&auth=URL for a Reverb channel, a relay session URL, or the page's JSON), in HUMAN_PLUS_INVITATION, a file named by --invitation-file, or (join) on standard input; nothing was sent".to_owned()
        }
        Error::InvalidInvitation(_) => {
            "check --relay (https://..., or http://127.0.0.1:PORT with --allow-insecure-loopback), --session ([A-Za-z0-9_-]{4,64}) and the token (16 characters or more)".to_owned()
        }
        _ => return None,
    })
}

/// An untrusted name or line with control characters (and invisible or
/// direction-changing ones) escaped, for one line of a terminal.
#[must_use]
pub fn printable(name: &str) -> String {
    human_plus_core::escape_controls(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use human_plus_core::{EgressRefusal, SurfaceChangedUnderYou, SurfaceRevision};

    #[test]
    fn every_class_has_its_code() {
        let ctx = Context::default();
        let cases = [
            (
                Error::EgressRefused(EgressRefusal::new(EgressRule::HostNotDeclared, "x")),
                EGRESS_REFUSED,
            ),
            (Error::ToolRefused(ToolRefusal::Undeclared), TRUST_REFUSED),
            (Error::SurfaceUnavailable, SURFACE_UNAVAILABLE),
            (
                Error::AttachmentUnauthorized(Unauthorized::Relay),
                UNAUTHORIZED,
            ),
            (
                Error::SurfaceChangedUnderYou(SurfaceChangedUnderYou::new("t", None)),
                SURFACE_CHANGED,
            ),
            (Error::Timeout, TIMEOUT),
            (Error::RelayFailed { status: 502 }, RELAY_FAILED),
            (
                Error::RelayPathNotFound(human_plus_core::RelayPathNotFound::new(
                    "https://app.example/agent-relay",
                    "agent-relay",
                )),
                RELAY_FAILED,
            ),
            (Error::ToolFailed { framed: "x".into() }, TOOL_ERROR),
            (
                human_plus_core::ProxyConnectResponse::refusal(407),
                PROXY_AUTH,
            ),
            (
                human_plus_core::ProxyConnectResponse::refusal(403),
                RELAY_FAILED,
            ),
            (
                Error::AttachmentUnauthorized(Unauthorized::Bridge { status: 403 }),
                UNAUTHORIZED,
            ),
            (
                Error::AttachmentUnauthorized(Unauthorized::Channel),
                UNAUTHORIZED,
            ),
            (
                Error::Channel(ChannelError::TooLarge {
                    size: 10_001,
                    limit: 10_000,
                    method: "tools/call".into(),
                }),
                CHANNEL_LIMIT,
            ),
            (
                Error::Channel(ChannelError::PageLeft { call: None }),
                PAGE_LEFT,
            ),
            (
                Error::Channel(ChannelError::PageLeft {
                    call: Some(human_plus_core::DeliveryUnknown::call("sheet_set_cell")),
                }),
                DELIVERY_UNKNOWN,
            ),
            (
                Error::Channel(ChannelError::Closed {
                    reason: "1006".into(),
                    call: None,
                }),
                RELAY_FAILED,
            ),
            (Error::Channel(ChannelError::AuthAnswer), RELAY_FAILED),
            (
                Error::Channel(ChannelError::Unanswered {
                    call: None,
                    presence: false,
                    refused: None,
                }),
                TIMEOUT,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(Failure::from_error(&error, &ctx).exit, code, "{error:?}");
        }
    }

    #[test]
    fn a_refusal_is_one_line_with_the_model_text_as_detail() {
        let rev = SurfaceRevision::observed("r1", "sheet_get_cell").unwrap();
        let e =
            Error::SurfaceChangedUnderYou(SurfaceChangedUnderYou::new("sheet_set_cell", Some(rev)));
        let f = Failure::from_error(&e, &Context::default());
        assert_eq!(f.code, "surface_changed_under_you");
        assert!(!f.message.contains('\n'));
        assert!(f.detail.unwrap().contains("Do not simply repeat"));
    }

    #[test]
    fn egress_hints_name_the_flag() {
        let ctx = Context::relay("https://relay.example:8443");
        let e = Error::EgressRefused(EgressRefusal::new(EgressRule::HostNotDeclared, "x"));
        assert!(
            Failure::from_error(&e, &ctx)
                .hint
                .unwrap()
                .contains("--allow-host relay.example")
        );
        let e = Error::EgressRefused(EgressRefusal::new(EgressRule::PortNotDeclared, "x"));
        assert!(
            Failure::from_error(&e, &ctx)
                .hint
                .unwrap()
                .contains("--allow-port 8443")
        );
    }

    #[test]
    fn channel_hints_name_both_hosts() {
        let channel = ReverbChannel::new(
            "wss://ws.app.example:6001/app/k",
            "https://app.example/broadcasting/auth",
            "private-agent.session.S1_abcd",
            false,
        )
        .unwrap();
        let invitation =
            SurfaceInvitation::new_reverb(channel, "S1_abcd", "0123456789abcdef0123", "s", "a")
                .unwrap();
        let ctx = Context::of(&invitation);
        let hint = |e: Error| Failure::from_error(&e, &ctx).hint.unwrap();
        assert!(
            hint(Error::EgressRefused(EgressRefusal::new(
                EgressRule::HostNotDeclared,
                "x"
            )))
            .contains("--allow-host ws.app.example --allow-host app.example")
        );
        assert!(
            hint(Error::EgressRefused(EgressRefusal::new(
                EgressRule::PortNotDeclared,
                "x"
            )))
            .contains("--allow-port 6001 --allow-port 443")
        );
        let bridge = hint(Error::AttachmentUnauthorized(Unauthorized::Bridge {
            status: 403,
        }));
        assert!(bridge.contains("auth bridge at app.example port 443") && bridge.contains("403"));
        assert!(!format!("{ctx:?}").contains("0123456789abcdef0123"));
    }

    #[test]
    fn rendering_redacts_query_strings() {
        let f =
            Failure::usage("could not reach https://r.example/s/inbox?token=secret123&client=c");
        assert!(!f.render().contains("secret123"));
    }
}
