//! From connection options to an attached manager: the token (from the
//! environment or a file only), the invitation, trust and pins, egress,
//! transport and participant.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use human_plus_core::{
    EgressPolicy, InvitationLink, LinkOptions, ManagerConfig, Participant, ProxyCredentials,
    PusherConfig, ReceiveLeg, RelayAuth, ReverbChannel, Secrets, SurfaceAttachment,
    SurfaceInvitation, ToolDefinition, TransportConfig, TrustPolicy,
};
use human_plus_runtime::TlsRoots;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::args::{AuthMode, ConnectArgs, EgressArgs, LinkSourceArgs, Transport, TransportArgs};
use crate::connecting::agent::{Agent, AgentSetup, build_agent};
use crate::output::exit::{Context, Failure};
pub use crate::profiles::pins::{parse_pin, pins_from_json, read_pins};
pub use crate::profiles::token::{TOKEN_ENV, read_token};

/// The environment variable the egress proxy's credentials
/// (`user:password`) are read from.
pub const PROXY_AUTH_ENV: &str = "HUMAN_PLUS_PROXY_AUTH";

/// The owner every attachment of this process belongs to.
pub const OWNER: &str = "human-plus-cli";

/// An attached manager, ready for operations.
pub struct Connection {
    /// The manager.
    pub agent: Arc<dyn Agent>,
    /// The owner the attachment belongs to.
    pub owner: String,
    /// The attachment (as attached; ask the agent for its current state).
    pub attachment: SurfaceAttachment,
    /// What failures are reported against.
    pub context: Context,
    /// The secrets this connection holds (the token, the proxy's
    /// credentials), to redact by exact value wherever a text goes.
    pub secrets: Secrets,
    /// The definitions the person reviewed (a profile's `reviewed.json`)
    /// that this connection's trust admits, pins included: what the bridge
    /// offers before the surface has answered. `None` without them.
    pub reviewed: Option<Vec<ToolDefinition>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("runtime", &self.agent.runtime())
            .field("attachment", &self.attachment.id())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// The attachment id.
    #[must_use]
    pub fn id(&self) -> &str {
        self.attachment.id()
    }

    /// A failure for `error`, with this connection's context.
    #[must_use]
    pub fn fail(&self, error: &human_plus_core::Error) -> Failure {
        Failure::from_error(error, &self.context)
    }
}

/// Reads the egress proxy's credentials: `--proxy-auth-file` when given,
/// else `HUMAN_PLUS_PROXY_AUTH` when set and not empty, else none. Both hold
/// `user:password` (surrounding whitespace trimmed, nothing decoded).
///
/// # Errors
/// A usage failure when the file cannot be read or the credentials are
/// malformed; the message never quotes them.
pub fn read_proxy_credentials(
    proxy_auth_file: Option<&Path>,
) -> Result<Option<ProxyCredentials>, Failure> {
    let text = match proxy_auth_file {
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            Failure::usage(format!(
                "cannot read --proxy-auth-file {}: {e}",
                path.display()
            ))
        })?,
        // Empty counts as unset: an MCP client's configuration passes
        // `${HUMAN_PLUS_PROXY_AUTH}` through whether or not it is set.
        None => match std::env::var(PROXY_AUTH_ENV) {
            Ok(text) if text.trim().is_empty() => return Ok(None),
            Ok(text) => text,
            Err(std::env::VarError::NotPresent) => return Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(Failure::usage(format!("{PROXY_AUTH_ENV} is not UTF-8")));
            }
        },
    };
    let from = proxy_auth_file.map_or(PROXY_AUTH_ENV, |_| "--proxy-auth-file");
    ProxyCredentials::parse(&text).map(Some).map_err(|e| {
        let reason = match &e {
            human_plus_core::Error::EgressRefused(r) => r.message.clone(),
            other => other.to_string(),
        };
        Failure::usage(format!(
            "the egress proxy credentials in {from} are unusable: {reason}"
        ))
        .with_hint("write them as user:password (no ':' in the user name, no control characters)")
    })
}

/// The trust policy the options declare; `fallback` when they declare
/// none (`probe` uses every tool; the others stay undeclared, which the
/// core refuses before anything is sent).
///
/// # Errors
/// A usage failure for a malformed pin or pins file.
pub fn trust_policy(
    args: &ConnectArgs,
    fallback: Option<TrustPolicy>,
) -> Result<TrustPolicy, Failure> {
    Ok(trust_from(
        &args.allow,
        args.every_tool,
        flag_pins(args)?,
        fallback,
    ))
}

/// The pins of `--pins` and `--pin` (a `--pin` wins over the file's).
///
/// # Errors
/// A usage failure for a malformed pin or pins file.
pub fn flag_pins(args: &ConnectArgs) -> Result<BTreeMap<String, String>, Failure> {
    let mut pins = match &args.pins_file {
        Some(path) => read_pins(path)?,
        None => BTreeMap::new(),
    };
    for raw in &args.pin {
        let (name, digest) = parse_pin(raw)?;
        pins.insert(name, digest);
    }
    Ok(pins)
}

/// The trust policy of an allowlist (or every tool), pins, and a fallback
/// for when neither is declared.
#[must_use]
pub fn trust_from(
    allow: &[String],
    every_tool: bool,
    pins: BTreeMap<String, String>,
    fallback: Option<TrustPolicy>,
) -> TrustPolicy {
    let allow: Vec<String> = allow
        .iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    if every_tool {
        TrustPolicy::every_tool(pins)
    } else if !allow.is_empty() {
        TrustPolicy::allowing(allow, pins)
    } else if let Some(fallback) = fallback {
        pins.into_iter()
            .fold(fallback, |p, (name, digest)| p.with_pin(name, digest))
    } else {
        pins.into_iter()
            .fold(TrustPolicy::undeclared(), |p, (name, digest)| {
                p.with_pin(name, digest)
            })
    }
}

/// The egress policy the options declare. Nothing is implied by the relay
/// URL: every host and port is declared explicitly. The proxy's
/// credentials come from [`read_proxy_credentials`], never from the
/// `--egress-proxy` value (a flag value is visible in the process list and
/// the shell's history).
///
/// # Errors
/// A usage failure when `--egress-proxy` holds credentials, when
/// credentials are given without a proxy, or as [`read_proxy_credentials`].
pub fn egress_policy(args: &EgressArgs) -> Result<EgressPolicy, Failure> {
    let mut policy = EgressPolicy::new(&args.allow_host)
        .allow_unverified_egress(args.allow_unverified_egress)
        .auth(match args.auth.unwrap_or_default() {
            AuthMode::Query => RelayAuth::Query,
            AuthMode::Bearer => RelayAuth::Bearer,
        });
    if !args.allow_port.is_empty() {
        policy = policy.allow_ports(args.allow_port.iter().copied());
    }
    if let Some(proxy) = &args.egress_proxy {
        policy = policy.egress_proxy(proxy.clone());
        if policy.has_proxy_credentials() {
            return Err(Failure::usage(
                "--egress-proxy holds credentials; a flag value is visible in the process list",
            )
            .with_hint(format!(
                "pass --egress-proxy http://HOST:PORT and put user:password in {PROXY_AUTH_ENV} or a --proxy-auth-file"
            )));
        }
    }
    if let Some(credentials) = read_proxy_credentials(args.proxy_auth_file.as_deref())? {
        if args.egress_proxy.is_none() {
            return Err(Failure::usage(
                "egress proxy credentials were given, but no --egress-proxy",
            )
            .with_hint(format!(
                "add --egress-proxy http://HOST:PORT, or unset {PROXY_AUTH_ENV}"
            )));
        }
        policy = policy.proxy_credentials(credentials);
    }
    if !args.allow_address.is_empty() {
        policy = policy.allow_addresses(args.allow_address.iter().copied());
    }
    Ok(policy)
}

/// The receive leg of a transport choice.
#[must_use]
pub fn receive_leg(transport: Transport) -> ReceiveLeg {
    match transport {
        Transport::Sse => ReceiveLeg::Sse,
        Transport::Poll => ReceiveLeg::fancy_poll(),
    }
}

/// The exchange timeout of `--timeout`.
///
/// # Errors
/// A usage failure unless it is a positive number of seconds.
pub fn timeout(secs: f64) -> Result<Duration, Failure> {
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
        return Err(Failure::usage(format!(
            "--timeout {secs}: expected a number of seconds above 0"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The channel settings of `--channel-limit`: the largest WebSocket
/// message a request may be over a Reverb channel.
///
/// # Errors
/// A usage failure for a limit of 0.
pub fn channel_config(limit: usize) -> Result<PusherConfig, Failure> {
    if limit == 0 {
        return Err(Failure::usage(
            "--channel-limit 0: expected the channel server's message limit in bytes (Reverb's default is 10000)",
        ));
    }
    let mut config = PusherConfig::default();
    config.max_message_bytes = limit;
    Ok(config)
}

/// Reads a PEM CA certificate file.
///
/// # Errors
/// A usage failure when it cannot be read or holds no certificate.
pub fn read_ca(path: &Path) -> Result<Vec<CertificateDer<'static>>, Failure> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| Failure::usage(format!("--ca-cert {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Failure::usage(format!(
            "--ca-cert {}: no certificate found",
            path.display()
        )));
    }
    Ok(certs)
}

/// Builds the manager the options describe and attaches (no network: the
/// first operation is the first request).
///
/// # Errors
/// A failure for bad options, a missing token, an invalid invitation or an
/// egress refusal.
pub fn connect(
    args: &ConnectArgs,
    fallback_trust: Option<TrustPolicy>,
) -> Result<Connection, Failure> {
    connect_with(args, fallback_trust, false)
}

/// The bridge's connection: [`connect`], with the receive leg kept open
/// between operations when `warm` (the bridge's default: one open
/// connection for the whole run, never closed for idling, so a call costs
/// one round trip and the page sees the agent join once), and a
/// tool whose pin no longer matches withheld rather than refusing every
/// listing and call ([`TrustPolicy::withhold_changed_pins`]).
///
/// # Errors
/// As [`connect`].
pub fn connect_bridge(args: &ConnectArgs, warm: bool) -> Result<Connection, Failure> {
    connect_inner(args, None, warm, true)
}

/// As [`connect`], with the receive leg kept open between operations when
/// `warm`.
///
/// # Errors
/// As [`connect`].
pub fn connect_with(
    args: &ConnectArgs,
    fallback_trust: Option<TrustPolicy>,
    warm: bool,
) -> Result<Connection, Failure> {
    connect_inner(args, fallback_trust, warm, false)
}

fn connect_inner(
    args: &ConnectArgs,
    fallback_trust: Option<TrustPolicy>,
    warm: bool,
    withhold_changed_pins: bool,
) -> Result<Connection, Failure> {
    let resolved = resolve(args, fallback_trust)?;
    let participant = Participant::new(
        &args.participant_id,
        &args.participant_name,
        &args.participant_color,
    );
    connect_resolved(
        resolved,
        &args.transport,
        participant,
        warm,
        withhold_changed_pins,
    )
}

/// Everything a connection needs, once flags, a link and a profile have
/// been read: the invitation (token included), trust and egress.
#[derive(Debug)]
pub struct Resolved {
    /// The invitation.
    pub invitation: SurfaceInvitation,
    /// The trust policy.
    pub trust: TrustPolicy,
    /// The egress options (flags over the profile's).
    pub egress: EgressArgs,
    /// The definitions the person reviewed, when a profile keeps them.
    pub reviewed: Option<Vec<ToolDefinition>>,
}

/// Connects with what [`resolve`] (or `join`) found. Opening a new
/// connection (DNS, TCP, the egress proxy's CONNECT, TLS) is bounded by the
/// exchange timeout, at most 10 s.
///
/// # Errors
/// A failure for bad options or an egress refusal.
pub fn connect_resolved(
    resolved: Resolved,
    transport_args: &TransportArgs,
    participant: Participant,
    warm: bool,
    withhold_changed_pins: bool,
) -> Result<Connection, Failure> {
    let connect_timeout = timeout(transport_args.timeout)?.min(Duration::from_secs(10));
    connect_resolved_within(
        resolved,
        transport_args,
        participant,
        warm,
        withhold_changed_pins,
        connect_timeout,
    )
}

/// [`connect_resolved`], with opening a new connection bounded by
/// `connect_timeout` instead: `status` keeps it under its exchange timeout,
/// so a relay that cannot be reached is told apart from a page that does
/// not answer.
///
/// # Errors
/// As [`connect_resolved`].
pub fn connect_resolved_within(
    resolved: Resolved,
    transport_args: &TransportArgs,
    participant: Participant,
    warm: bool,
    withhold_changed_pins: bool,
    connect_timeout: Duration,
) -> Result<Connection, Failure> {
    let context = Context::of(&resolved.invitation);
    let fail = |e: &human_plus_core::Error| Failure::from_error(e, &context);
    let trust = resolved.trust.withhold_changed_pins(withhold_changed_pins);
    // Judged by the trust this connection runs under: a reviewed
    // definition the flags no longer allow, or whose pin changed, is not
    // offered from here either.
    let reviewed = resolved
        .reviewed
        .and_then(|tools| trust.admit(tools).ok())
        .map(|admission| admission.admitted);
    let transport = TransportConfig::default()
        .receive_leg(receive_leg(transport_args.transport))
        .timeout(timeout(transport_args.timeout)?)
        .warm(warm);
    let config = ManagerConfig::new(egress_policy(&resolved.egress)?, trust)
        .transport(transport)
        .channel(channel_config(transport_args.channel_limit)?);
    let mut setup = AgentSetup::new(config);
    setup.connect_timeout = connect_timeout;
    if warm {
        // The bridge serves one person's page for as long as it runs: its
        // one leg is the agent's presence there, and how it hears of a
        // change of the tools between calls. Never closed for idling.
        setup.kept_legs.idle = Duration::MAX;
    }
    if let Some(ca) = &resolved.egress.ca_cert {
        setup.roots = read_ca(ca)?
            .into_iter()
            .fold(TlsRoots::webpki(), TlsRoots::with_root);
    }
    let agent: Arc<dyn Agent> =
        Arc::from(build_agent(transport_args.runtime, setup).map_err(|e| fail(&e))?);
    let secrets = Secrets::of(
        &resolved.invitation,
        read_proxy_credentials(resolved.egress.proxy_auth_file.as_deref())?.as_ref(),
    );
    crate::output::logs::hide(&secrets);
    let attachment = agent
        .attach(OWNER, resolved.invitation, participant)
        .map_err(|e| fail(&e))?;
    Ok(Connection {
        agent,
        owner: OWNER.to_owned(),
        attachment,
        context,
        secrets,
        reviewed,
    })
}

/// The connection options of profile `name` alone (no flag overrides it),
/// with `transport` and a participant `(id, name)` of Human+'s own: what
/// `status` and `review` connect with.
#[must_use]
pub fn profile_args(name: &str, transport: TransportArgs, who: (&str, &str)) -> ConnectArgs {
    ConnectArgs {
        profile: Some(name.to_owned()),
        link: LinkSourceArgs {
            invitation_file: None,
            relay_path: human_plus_core::DEFAULT_RELAY_PATH.to_owned(),
            invitation_flag: None,
            link_flag: None,
        },
        relay: None,
        session: None,
        surface: None,
        application: None,
        token_file: None,
        allow: Vec::new(),
        every_tool: false,
        pin: Vec::new(),
        pins_file: None,
        egress: EgressArgs::default(),
        transport,
        participant_id: who.0.to_owned(),
        participant_name: who.1.to_owned(),
        participant_color: "#7c3aed".to_owned(),
    }
}

/// The environment variable a link a person shared is read from.
pub const INVITATION_ENV: &str = "HUMAN_PLUS_INVITATION";

/// Refuses a link given as a flag value or an argument: it would show in
/// the process list. The message never repeats it.
///
/// # Errors
/// A usage failure (exit 2) when one was given.
pub fn refuse_link_flags(link: &LinkSourceArgs, argument: Option<&str>) -> Result<(), Failure> {
    let flag = if link.invitation_flag.is_some() {
        Some("--invitation")
    } else if link.link_flag.is_some() {
        Some("--link")
    } else if argument.is_some() {
        Some("an argument")
    } else {
        None
    };
    match flag {
        Some(how) => Err(Failure::usage(format!(
            "a link is never accepted as {how}: a command line shows in the process list"
        ))
        .with_hint(format!(
            "put the link in {INVITATION_ENV}, in a file named by --invitation-file PATH, or (join) on standard input"
        ))),
        None => Ok(()),
    }
}

/// Reads a link's text from `--invitation-file`, else `HUMAN_PLUS_INVITATION`
/// when `use_env`, else `None`.
///
/// # Errors
/// A usage failure when the file cannot be read or is too long.
pub fn read_link_text(link: &LinkSourceArgs, use_env: bool) -> Result<Option<String>, Failure> {
    if let Some(path) = &link.invitation_file {
        let text = read_bounded(std::fs::File::open(path).map_err(|e| {
            Failure::usage(format!(
                "cannot read --invitation-file {}: {e}",
                path.display()
            ))
        })?)
        .map_err(|e| {
            Failure::usage(format!(
                "cannot read --invitation-file {}: {e}",
                path.display()
            ))
        })?;
        return Ok(Some(text));
    }
    if !use_env {
        return Ok(None);
    }
    match std::env::var(INVITATION_ENV) {
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => Ok(Some(text)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Failure::usage(format!("{INVITATION_ENV} is not UTF-8")))
        }
    }
}

/// Reads at most a little over [`human_plus_core::MAX_LINK_BYTES`] (the
/// parser refuses anything longer), as UTF-8.
///
/// # Errors
/// The I/O error, or invalid UTF-8.
pub fn read_bounded(reader: impl std::io::Read) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut buf = Vec::new();
    reader
        .take(u64::try_from(human_plus_core::MAX_LINK_BYTES * 2).unwrap_or(u64::MAX))
        .read_to_end(&mut buf)?;
    String::from_utf8(buf)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
}

/// Parses a link with the options' relay path and loopback allowance.
///
/// # Errors
/// A usage failure (exit 2) naming the rule the link broke, never quoting it.
pub fn parse_link(
    text: &str,
    link: &LinkSourceArgs,
    allow_insecure_loopback: bool,
) -> Result<InvitationLink, Failure> {
    let options = LinkOptions::default()
        .relay_path(&link.relay_path)
        .map_err(|e| Failure::from_error(&e, &Context::default()))?
        .allow_insecure_loopback(allow_insecure_loopback);
    InvitationLink::parse(text, &options).map_err(|e| Failure::from_error(&e, &Context::default()))
}

/// Refuses a `--surface` that is not a plain identifier
/// ([`human_plus_core::is_plain_identifier`]): the surface id is written in
/// every frame's header, Human+'s sentences and its logs, where only a
/// plain identifier may go. The message does not repeat it.
///
/// # Errors
/// A usage failure (exit 2) for such a value.
pub fn check_surface_flag(surface: Option<&str>) -> Result<(), Failure> {
    match surface {
        Some(s) if !human_plus_core::is_plain_identifier(s) => Err(Failure::usage(
            "--surface must be a plain identifier: 1 to 64 bytes of letters, digits and . _ : / + = # @ -",
        )
        .with_hint("e.g. --surface sheet:budget")),
        _ => Ok(()),
    }
}

/// Reads flags, a link (`--invitation-file` or `HUMAN_PLUS_INVITATION`) and
/// a profile (`--profile`) into one invitation, trust and egress. Flags
/// override a profile's trust, pins and egress; the relay and session come
/// from exactly one place (flags, a link or a profile), so a token is never
/// sent to a relay it was not issued for.
///
/// # Errors
/// A usage failure for conflicting or missing sources, an unreadable or
/// hostile link, a profile whose token file others can read, or bad options.
pub fn resolve(
    args: &ConnectArgs,
    fallback_trust: Option<TrustPolicy>,
) -> Result<Resolved, Failure> {
    refuse_link_flags(&args.link, None)?;
    check_surface_flag(args.surface.as_deref())?;
    if args.profile.is_some() && args.link.invitation_file.is_some() {
        return Err(
            Failure::usage("--profile and --invitation-file both name an invitation")
                .with_hint("give one of them"),
        );
    }
    let named_by_flags = args.relay.is_some() || args.session.is_some();
    let profile = match &args.profile {
        Some(name) => Some(crate::profiles::profile::load(name)?),
        None => None,
    };
    // The environment's link is used only when nothing on the command
    // line names an invitation.
    let link_text = read_link_text(&args.link, profile.is_none() && !named_by_flags)?;
    if named_by_flags && (profile.is_some() || link_text.is_some()) {
        return Err(Failure::usage(
            "--relay and --session cannot be combined with a link or a profile: the token would go to a relay it was not issued for",
        )
        .with_hint("drop --relay/--session, or the link/--profile"));
    }
    let egress = match &profile {
        Some(p) => p.profile.egress.under(&args.egress)?,
        None => args.egress.clone(),
    };
    // Per setting, the flags win over the profile: the allowlist (or
    // --every-tool), and the pins (--pin/--pins over pins.json).
    let flags_pin = !args.pin.is_empty() || args.pins_file.is_some();
    let pins = match &profile {
        Some(p) if !flags_pin => p.pins.clone().unwrap_or_default(),
        _ => flag_pins(args)?,
    };
    let trust = match &profile {
        Some(p) if args.allow.is_empty() && !args.every_tool => {
            trust_from(&p.profile.allow, false, pins, fallback_trust)
        }
        _ => trust_from(&args.allow, args.every_tool, pins, fallback_trust),
    };
    let invalid =
        |e: human_plus_core::Error, relay: &str| Failure::from_error(&e, &Context::relay(relay));
    let invitation = if let Some(text) = link_text {
        if args.token_file.is_some() {
            return Err(Failure::usage(
                "--token-file cannot be combined with a link: the link carries its token",
            ));
        }
        let link = parse_link(&text, &args.link, egress.allow_insecure_loopback)?;
        let relay = link.relay_url().to_owned();
        link.into_invitation(args.surface.as_deref(), args.application.as_deref())
            .map_err(|e| invalid(e, &relay))?
    } else if let Some(p) = &profile {
        let token = match &args.token_file {
            Some(path) => read_token(Some(path))?,
            None => crate::profiles::profile::read_token(&p.token_path())?,
        };
        let pr = &p.profile;
        let surface = args.surface.as_deref().unwrap_or(&pr.surface);
        let application = args.application.as_deref().unwrap_or(&pr.application);
        match &pr.reverb {
            Some(channel) => reverb_invitation(
                channel,
                &pr.relay,
                &pr.session,
                token,
                surface,
                application,
                egress.allow_insecure_loopback,
            )
            .map_err(|e| invalid(e, &pr.relay))?,
            None => build_invitation(
                &pr.relay,
                &pr.session,
                token,
                surface,
                application,
                egress.allow_insecure_loopback,
            )
            .map_err(|e| invalid(e, &pr.relay))?,
        }
    } else {
        let (Some(relay), Some(session), Some(surface)) =
            (&args.relay, &args.session, &args.surface)
        else {
            return Err(Failure::usage("no invitation").with_hint(format!(
                "pass --profile NAME (see `human-plus join`), a link in {INVITATION_ENV} or --invitation-file PATH, or --relay URL --session ID --surface ID"
            )));
        };
        let token = read_token(args.token_file.as_deref())?;
        build_invitation(
            relay,
            session,
            token,
            surface,
            args.application.as_deref().unwrap_or(DEFAULT_APPLICATION),
            egress.allow_insecure_loopback,
        )
        .map_err(|e| invalid(e, relay))?
    };
    let reviewed = profile.and_then(|p| p.reviewed);
    Ok(Resolved {
        invitation,
        trust,
        egress,
        reviewed,
    })
}

/// The application name an invitation gets when nothing names one.
pub const DEFAULT_APPLICATION: &str = "human-plus";

/// A profile's invitation to a page on a Reverb channel: the channel read
/// back from `profile.json`, checked again under the profile's loopback
/// allowance, its auth bridge equal to the profile's `relay`.
fn reverb_invitation(
    channel: &ReverbChannel,
    relay: &str,
    session: &str,
    token: String,
    surface: &str,
    application: &str,
    allow_insecure_loopback: bool,
) -> Result<SurfaceInvitation, human_plus_core::Error> {
    let invalid =
        || human_plus_core::Error::InvalidInvitation(human_plus_core::InvitationError::RelayUrl);
    if channel.auth_url() != relay {
        return Err(invalid());
    }
    let channel = ReverbChannel::new(
        channel.ws_url(),
        channel.auth_url(),
        channel.channel(),
        allow_insecure_loopback,
    )
    .map_err(|_| invalid())?;
    SurfaceInvitation::new_reverb(channel, session, token, surface, application)
}

fn build_invitation(
    relay: &str,
    session: &str,
    token: String,
    surface: &str,
    application: &str,
    allow_insecure_loopback: bool,
) -> Result<SurfaceInvitation, human_plus_core::Error> {
    if allow_insecure_loopback {
        SurfaceInvitation::new_insecure_loopback(relay, session, token, surface, application)
    } else {
        SurfaceInvitation::new(relay, session, token, surface, application)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pins_files_in_three_shapes() {
        let d = "sha256:5ab496568589a2e1901b1b49c27b22bc";
        for v in [
            json!({"surface_write": d}),
            json!([{"name": "surface_write", "digest": d}]),
            json!({"tools": [{"name": "surface_write", "digest": d, "description": "x"}]}),
        ] {
            assert_eq!(pins_from_json(&v).unwrap()["surface_write"], d);
        }
        assert!(pins_from_json(&json!({"x": "md5:00"})).is_err());
        assert!(pins_from_json(&json!(3)).is_err());
    }

    #[test]
    fn pin_flags() {
        assert!(parse_pin("a=sha256:5ab496568589a2e1901b1b49c27b22bc").is_ok());
        assert!(parse_pin("a").is_err());
        assert!(parse_pin("a=sha256:XYZ").is_err());
        assert!(parse_pin("=sha256:5ab496568589a2e1901b1b49c27b22bc").is_err());
    }

    #[test]
    fn timeouts() {
        assert!(timeout(0.0).is_err());
        assert!(timeout(f64::NAN).is_err());
        assert_eq!(timeout(1.5).unwrap(), Duration::from_millis(1500));
    }
}
