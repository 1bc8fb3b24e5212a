//! The command line: every subcommand and option, as clap derives them.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ipnet::IpNet;

use crate::output::exit::EXIT_CODES_HELP;

/// `human-plus`: an AI agent and a person on the same live surface, across
/// a trust boundary.
#[derive(Debug, Parser)]
#[command(
    name = "human-plus",
    version,
    about = "Human+: an AI agent joins a live application surface a person has open, through a relay, across a trust boundary.",
    long_about = "Human+: an AI agent joins a live application surface a person has open, through a relay, across a trust boundary.\n\nStart with `human-plus demo`: it runs a relay and a demo sheet in-process and tells the whole story in a few screens. To connect your MCP client to a page somebody shared, pipe the link into `human-plus join`. The relay token (and a link, which holds it) is read only from the environment (HUMAN_PLUS_TOKEN, HUMAN_PLUS_INVITATION), a file (--token-file, --invitation-file, a --profile's token file) or join's standard input, never from a flag value, and is never printed; so are an egress proxy's credentials (HUMAN_PLUS_PROXY_AUTH or --proxy-auth-file).",
    after_help = EXIT_CODES_HELP,
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a relay and a demo sheet in-process on loopback and narrate the
    /// whole story: hostile invitations refused, trust, discovery, a stale
    /// write refused, the change feed, a successful write. Needs nothing set
    /// up. With --transport reverb, over a Pusher-protocol channel server,
    /// an auth bridge and the sheet on a private channel instead. With
    /// --web, the story plays in your browser and you are the person.
    Demo(DemoArgs),
    /// Run a local relay until Ctrl-C, for dogfooding (it speaks the
    /// protocol of the Fancy Node relay, agent-integrations-relay).
    Relay(RelayArgs),
    /// Open the demo sheet as a person's page on a relay; type edits such as
    /// `B4=12` on stdin, or, with --web, serve it as a page for a browser.
    Surface(SurfaceArgs),
    /// Print the digests of tool definitions (offline): one definition, a
    /// list, a `tools/list` result or a JSON-RPC reply carrying one.
    Digest(DigestArgs),
    /// Discover the surface's tools through local trust: admitted tools with
    /// their digests, and what was withheld.
    Tools(ToolsArgs),
    /// Call one admitted tool; the result is framed as untrusted data.
    Call(CallArgs),
    /// Ask the surface's change feed what somebody else changed.
    Changes(ChangesArgs),
    /// Announce the agent's activity to the people on the surface.
    Announce(AnnounceArgs),
    /// Report what a surface really does: tools and digests, what is
    /// withheld and why, observed conflict detection and change feed.
    Probe(ProbeArgs),
    /// From the link a person shared to a saved profile: show the relay,
    /// session and egress it needs, discover the tools through local
    /// trust, pin the reviewed definitions, and print the line that adds
    /// the bridge to an MCP client. The link comes from standard input,
    /// HUMAN_PLUS_INVITATION or --invitation-file, never a flag value.
    Join(JoinArgs),
    /// Serve the surface's admitted tools to an MCP client over stdio
    /// (newline-delimited JSON-RPC; MCP 2024-11-05 to 2026-07-28; logs on
    /// stderr, every event at HUMAN_PLUS_LOG=trace|debug|info|warn|error).
    Mcp(McpArgs),
    /// Each profile (relay host, session, surface, trusted and pinned
    /// tools), read from its files; with NAME, that profile, a short probe
    /// through it (does the relay answer, is a page there: relay
    /// unreachable, session ended, token refused, no page answering) and
    /// the MCP client configuration files that start a bridge on it. What
    /// to run when the agent says it cannot reach the surface.
    Status(StatusArgs),
    /// What changed on the surface since you reviewed a profile's tools
    /// (each tool unchanged, changed with its difference, new or gone),
    /// and, on your say-so, trust, pins and the reviewed definitions
    /// updated together; a running bridge picks them up without a restart.
    Review(ReviewArgs),
}

impl Command {
    /// Whether the command talks to a relay (and so installs the
    /// `HUMAN_PLUS_LOG` subscriber): `tools`, `call`, `changes`,
    /// `announce`, `probe`, `join`, `mcp` and `status`.
    #[must_use]
    pub fn logs(&self) -> bool {
        matches!(
            self,
            Command::Tools(_)
                | Command::Call(_)
                | Command::Changes(_)
                | Command::Announce(_)
                | Command::Probe(_)
                | Command::Join(_)
                | Command::Mcp(_)
                | Command::Status(_)
                | Command::Review(_)
        )
    }
}

pub use human_plus_any::RuntimeKind;

/// How replies come back from the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Transport {
    /// `GET /{session}/events`, a Server-Sent Events stream per exchange.
    #[default]
    Sse,
    /// The relay's long-poll, `GET /{session}/poll` (the Fancy Node relay's
    /// dialect): every leg is an ordinary short request (for proxies that
    /// buffer streams).
    Poll,
}

impl Transport {
    /// Both transports.
    pub const ALL: [Transport; 2] = [Transport::Sse, Transport::Poll];

    /// The name used on the command line.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Sse => "sse",
            Transport::Poll => "poll",
        }
    }
}

/// Where the relay token goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum AuthMode {
    /// In the query string, which every relay reads (the Fancy Node relay
    /// reads nothing else: browsers cannot set headers on an event stream).
    #[default]
    Query,
    /// In an `Authorization: Bearer` header, for relays that read it.
    Bearer,
}

/// How the demo's agent reaches the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum DemoTransport {
    /// The HTTP relay, replies on a Server-Sent Events stream (also
    /// spelled `relay`).
    #[default]
    #[value(alias = "relay")]
    Sse,
    /// The HTTP relay, replies by long-poll.
    Poll,
    /// A Pusher-protocol private channel (what Laravel Reverb serves):
    /// the project's own channel server, the host app's auth bridge and
    /// the page on the channel, all in-process on loopback.
    Reverb,
}

impl DemoTransport {
    /// The name used on the command line.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DemoTransport::Sse => "sse",
            DemoTransport::Poll => "poll",
            DemoTransport::Reverb => "reverb",
        }
    }

    /// The relay's receive leg; `None` over a channel.
    #[must_use]
    pub fn relay_leg(self) -> Option<Transport> {
        match self {
            DemoTransport::Sse => Some(Transport::Sse),
            DemoTransport::Poll => Some(Transport::Poll),
            DemoTransport::Reverb => None,
        }
    }
}

/// `demo` options.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// How the agent reaches the page: the HTTP relay with replies on an
    /// event stream (`sse`, also `relay`) or by long-poll (`poll`), or a
    /// Reverb (Pusher-protocol) channel (`reverb`; not with --web).
    #[arg(long, value_enum, default_value_t)]
    pub transport: DemoTransport,
    /// Which runtime crate drives the traffic.
    #[arg(long, value_enum, default_value_t)]
    pub runtime: RuntimeKind,
    /// Play the story against the web sheet in your browser: start the
    /// relay and the page server, print the page's URL, wait for a browser
    /// to open it, and ask you to type into the cell.
    #[arg(long)]
    pub web: bool,
    /// With --web: the page server's port on 127.0.0.1 (0, the default,
    /// picks a free one).
    #[arg(long, default_value_t = 0, requires = "web")]
    pub port: u16,
}

/// `relay` options.
#[derive(Debug, Clone, Args)]
pub struct RelayArgs {
    /// The address to listen on. The relay's `register` route is
    /// unauthenticated: think before listening beyond loopback.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// The port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8787)]
    pub port: u16,
    /// Serve every route under this path (e.g. `agent-relay`, the relay
    /// path links use by default): `/agent-relay/register`,
    /// `/agent-relay/ID/poll`, ..., as the Fancy Node relay's `--prefix`
    /// does.
    #[arg(long, value_name = "PATH", default_value = "")]
    pub prefix: String,
    /// Serve HTTPS with this PEM certificate chain (leaf first).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// How the demo sheet treats revisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Revisions {
    /// Mint a revision on every result and refuse a stale pin (409).
    #[default]
    Enforced,
    /// Mint revisions but never check a pin.
    MintOnly,
    /// Mint nothing, check nothing.
    Off,
}

/// `surface` options.
#[derive(Debug, Clone, Args)]
pub struct SurfaceArgs {
    /// The relay's base URL, e.g. http://127.0.0.1:8787.
    #[arg(long, value_name = "URL")]
    pub relay: String,
    /// The session id to register ([A-Za-z0-9_-]{4,64}). Not with --web:
    /// the page mints its own.
    #[arg(
        long,
        value_name = "ID",
        required_unless_present = "web",
        conflicts_with = "web"
    )]
    pub session: Option<String>,
    /// Read the session token from this file (else HUMAN_PLUS_TOKEN).
    #[arg(long, value_name = "PATH", conflicts_with = "web")]
    pub token_file: Option<PathBuf>,
    /// Serve the sheet as a web page for a browser instead of the terminal
    /// page: it mints and registers its own session and shows the
    /// invitation to hand to an agent.
    #[arg(long)]
    pub web: bool,
    /// With --web: the page server's port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 8788, requires = "web")]
    pub port: u16,
    /// The page's receive leg.
    #[arg(long, value_enum, default_value_t)]
    pub transport: Transport,
    /// How the sheet treats revisions (terminal page only).
    #[arg(long, value_enum, default_value_t, conflicts_with = "web")]
    pub revisions: Revisions,
    /// Offer no change feed (`changes_since`; terminal page only).
    #[arg(long, conflicts_with = "web")]
    pub no_change_feed: bool,
    /// Leave the actor off change-feed rows (terminal page only).
    #[arg(long, conflicts_with = "web")]
    pub no_feed_attribution: bool,
    /// Trust this PEM CA certificate for an https relay (terminal page
    /// only: a browser trusts what the browser trusts).
    #[arg(long, value_name = "PEM", conflicts_with = "web")]
    pub ca_cert: Option<PathBuf>,
}

/// `digest` options.
#[derive(Debug, Clone, Args)]
pub struct DigestArgs {
    /// A JSON file, or `-` (the default) for stdin.
    #[arg(value_name = "FILE|-")]
    pub input: Option<PathBuf>,
    /// Print `{"name": "sha256:..."}`, usable as a --pins file.
    #[arg(long)]
    pub json: bool,
}

/// Where a link a person shared comes from, besides the environment
/// (`HUMAN_PLUS_INVITATION`) and, for `join`, standard input. Never a flag
/// value: a flag value shows in the process list.
#[derive(Debug, Clone, Args)]
pub struct LinkSourceArgs {
    /// Read the link a person shared (or the web page's JSON invitation)
    /// from this file. Without it the link comes from the
    /// HUMAN_PLUS_INVITATION environment variable (or, for `join`, from
    /// standard input); it is never a flag value.
    #[arg(long, value_name = "PATH", help_heading = "Invitation")]
    pub invitation_file: Option<PathBuf>,
    /// The relay path of a share link (`page#session=..&token=..`): the
    /// relay is the page's origin + `/PATH` (`""` for the origin itself).
    /// A relay session URL names its own.
    #[arg(
        long,
        value_name = "PATH",
        default_value = human_plus_core::DEFAULT_RELAY_PATH,
        help_heading = "Invitation"
    )]
    pub relay_path: String,
    /// Refused: a link is never a flag value (it would show in the process
    /// list). Use HUMAN_PLUS_INVITATION or --invitation-file.
    #[arg(long = "invitation", value_name = "LINK", hide = true)]
    pub invitation_flag: Option<String>,
    /// Refused, as --invitation.
    #[arg(long = "link", value_name = "LINK", hide = true)]
    pub link_flag: Option<String>,
}

/// Egress: which relay hosts and ports may be reached, and how.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct EgressArgs {
    /// Declare a host (repeatable): the relay's, or for a link naming a
    /// Reverb channel both the channel server's and the auth bridge's.
    /// Egress is never implied by a link.
    #[arg(long, value_name = "HOST", help_heading = "Egress")]
    pub allow_host: Vec<String>,
    /// Declare a port (repeatable; default 443): for a Reverb channel,
    /// both the channel server's and the auth bridge's.
    #[arg(long, value_name = "PORT", help_heading = "Egress")]
    pub allow_port: Vec<u16>,
    /// Send relay traffic through this HTTP CONNECT proxy (http://HOST:PORT).
    /// Its credentials never go in this flag: see --proxy-auth-file.
    #[arg(long, value_name = "URL", help_heading = "Egress")]
    pub egress_proxy: Option<String>,
    /// Read the egress proxy's credentials, `user:password`, from this
    /// file. Without it they come from the HUMAN_PLUS_PROXY_AUTH
    /// environment variable when it is set; they are never a flag value and
    /// are never printed.
    #[arg(long, value_name = "PATH", help_heading = "Egress")]
    pub proxy_auth_file: Option<PathBuf>,
    /// Connect without an egress proxy (local dogfooding only; resolved
    /// addresses are still vetted).
    #[arg(long, help_heading = "Egress")]
    pub allow_unverified_egress: bool,
    /// Accept an http:// relay on `127.0.0.1`, `[::1]` or `localhost` (local
    /// development only; needs --allow-unverified-egress too).
    #[arg(long, help_heading = "Egress")]
    pub allow_insecure_loopback: bool,
    /// Dangerous: treat addresses in this network as public (e.g.
    /// 127.0.0.1/32 for a TLS relay on this machine).
    #[arg(long, value_name = "CIDR", help_heading = "Egress")]
    pub allow_address: Vec<IpNet>,
    /// Trust this PEM CA certificate (in addition to the bundled roots) for
    /// the relay's TLS.
    #[arg(long, value_name = "PEM", help_heading = "Egress")]
    pub ca_cert: Option<PathBuf>,
    /// Where the token goes (default: query).
    #[arg(long, value_enum, help_heading = "Egress")]
    pub auth: Option<AuthMode>,
}

/// How the traffic is carried.
#[derive(Debug, Clone, Args)]
pub struct TransportArgs {
    /// How replies come back from the relay.
    #[arg(long, value_enum, default_value_t, help_heading = "Transport")]
    pub transport: Transport,
    /// Which runtime crate drives the traffic.
    #[arg(long, value_enum, default_value_t, help_heading = "Transport")]
    pub runtime: RuntimeKind,
    /// The cap on one exchange with the surface, in seconds.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 30.0,
        help_heading = "Transport"
    )]
    pub timeout: f64,
    /// Over a Reverb channel: the channel server's limit on one WebSocket
    /// message, in bytes (Reverb's `max_message_size`, 10000 by default). A
    /// request over it is refused here and never sent (`channel_limit`).
    /// No effect on an HTTP relay.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = human_plus_core::DEFAULT_MAX_MESSAGE_BYTES,
        value_parser = clap::value_parser!(usize),
        help_heading = "Transport"
    )]
    pub channel_limit: usize,
}

/// The options every relay-facing command shares: the invitation (flags,
/// a link, or a profile `join` wrote), trust, egress, transport and
/// participant.
#[derive(Debug, Clone, Args)]
pub struct ConnectArgs {
    /// Use the profile `human-plus join` wrote under this name: its
    /// invitation, token file, trust, pins and egress. Flags given as well
    /// override it (but not its relay and session).
    #[arg(long, value_name = "NAME", help_heading = "Invitation")]
    pub profile: Option<String>,
    /// Where a link comes from.
    #[command(flatten)]
    pub link: LinkSourceArgs,
    /// The relay's base URL (https://..., or http://127.0.0.1:PORT with
    /// --allow-insecure-loopback). HTTP relay only: a page on a Reverb
    /// channel is named by its link (or a profile `join` saved from it).
    #[arg(long, value_name = "URL", help_heading = "Invitation")]
    pub relay: Option<String>,
    /// The session id of the invitation.
    #[arg(long, value_name = "ID", help_heading = "Invitation")]
    pub session: Option<String>,
    /// The surface id of the invitation.
    #[arg(long, value_name = "ID", help_heading = "Invitation")]
    pub surface: Option<String>,
    /// The application name of the invitation (default human-plus).
    #[arg(long, value_name = "NAME", help_heading = "Invitation")]
    pub application: Option<String>,
    /// Read the relay token from this file. Without it the token comes from
    /// the link or profile, else the HUMAN_PLUS_TOKEN environment variable;
    /// it is never a flag value.
    #[arg(long, value_name = "PATH", help_heading = "Invitation")]
    pub token_file: Option<PathBuf>,

    /// Trust exactly these tools (comma-separated or repeated).
    #[arg(
        long,
        value_name = "NAME",
        value_delimiter = ',',
        conflicts_with = "every_tool",
        help_heading = "Trust"
    )]
    pub allow: Vec<String>,
    /// Trust every well-formed tool that is not a reserved confirmation
    /// tool. Prefer --allow.
    #[arg(long, help_heading = "Trust")]
    pub every_tool: bool,
    /// Pin a tool's definition to its digest (repeatable).
    #[arg(long = "pin", value_name = "NAME=sha256:...", help_heading = "Trust")]
    pub pin: Vec<String>,
    /// Read pins from a JSON file: `{"name": "sha256:..."}` (what `digest
    /// --json` prints) or the `tools --json` output.
    #[arg(long = "pins", value_name = "FILE", help_heading = "Trust")]
    pub pins_file: Option<PathBuf>,

    /// Egress.
    #[command(flatten)]
    pub egress: EgressArgs,
    /// Transport.
    #[command(flatten)]
    pub transport: TransportArgs,

    /// The participant id the surface sees.
    #[arg(
        long,
        value_name = "ID",
        default_value = "human-plus-cli",
        help_heading = "Participant"
    )]
    pub participant_id: String,
    /// The participant name people on the surface see.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "Human+ agent",
        help_heading = "Participant"
    )]
    pub participant_name: String,
    /// The participant colour.
    #[arg(
        long,
        value_name = "COLOR",
        default_value = "#7c3aed",
        alias = "participant-colour",
        help_heading = "Participant"
    )]
    pub participant_color: String,
}

/// `join` options.
#[derive(Debug, Clone, Args)]
pub struct JoinArgs {
    /// Where the link comes from (else standard input).
    #[command(flatten)]
    pub link: LinkSourceArgs,
    /// The profile's name (also the MCP server's name; [A-Za-z0-9_-]{1,64};
    /// default: the session id).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Accept what join shows (the relay's host and port, the tools to
    /// trust) without asking: what a run without a terminal needs.
    #[arg(long)]
    pub yes: bool,
    /// Pin the definitions join discovered, and save the profile (without
    /// a terminal; with one, join asks). Egress the flags do not declare
    /// still needs --yes.
    #[arg(long)]
    pub pin: bool,
    /// Trust exactly these tools (default: every tool local trust admits,
    /// reserved confirmation tools never).
    #[arg(
        long,
        value_name = "NAME",
        value_delimiter = ',',
        help_heading = "Trust"
    )]
    pub allow: Vec<String>,
    /// The surface id to use (default: the link's, else HOST/SESSION).
    #[arg(long, value_name = "ID", help_heading = "Invitation")]
    pub surface: Option<String>,
    /// The application name (default: the link's, else human-plus).
    #[arg(long, value_name = "NAME", help_heading = "Invitation")]
    pub application: Option<String>,
    /// Merge the entry into this MCP client's configuration file (other
    /// entries kept, a backup written, the write atomic, no token in it).
    #[arg(long, value_name = "CLIENT", value_parser = ["claude-code", "claude-desktop", "cursor", "vscode"])]
    pub write_config: Option<String>,
    /// With --write-config: the configuration file (default: the client's
    /// usual one; claude-code: ./.mcp.json).
    #[arg(long, value_name = "PATH", requires = "write_config")]
    pub config_path: Option<PathBuf>,
    /// Egress.
    #[command(flatten)]
    pub egress: EgressArgs,
    /// Transport.
    #[command(flatten)]
    pub transport: TransportArgs,
    /// Refused: a link is never a command-line argument.
    #[arg(value_name = "LINK", hide = true)]
    pub link_argument: Option<String>,
}

/// `tools` options.
#[derive(Debug, Clone, Args)]
pub struct ToolsArgs {
    /// Connection options.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print JSON (usable as a --pins file).
    #[arg(long)]
    pub json: bool,
}

/// `call` options.
#[derive(Debug, Clone, Args)]
pub struct CallArgs {
    /// The tool to call.
    #[arg(value_name = "TOOL")]
    pub tool: String,
    /// Its arguments, a JSON object (default `{}`).
    #[arg(value_name = "ARGS-JSON")]
    pub arguments: Option<String>,
    /// Pin the call to this revision (one an earlier call printed), so a
    /// surface that changed since refuses it instead of overwriting.
    #[arg(long, value_name = "REV")]
    pub revision: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Connection options.
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// `changes` options.
#[derive(Debug, Clone, Args)]
pub struct ChangesArgs {
    /// Ask for changes after this revision (else: everything the feed
    /// reports).
    #[arg(long, value_name = "REV")]
    pub since: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Connection options.
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// An activity priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum PriorityArg {
    /// Background work.
    Background,
    /// Ordinary work.
    #[default]
    Normal,
    /// Worth a look.
    Attention,
    /// Waiting on a person.
    Blocking,
}

/// `announce` options.
#[derive(Debug, Clone, Args)]
pub struct AnnounceArgs {
    /// What the agent is doing, e.g. `editing`.
    #[arg(value_name = "ACTION")]
    pub action: String,
    /// The handle it is doing it to, e.g. `B4`.
    #[arg(long, value_name = "T")]
    pub target: Option<String>,
    /// How much it should draw a person's attention.
    #[arg(long, value_enum, default_value_t)]
    pub priority: PriorityArg,
    /// A correlation id.
    #[arg(long, value_name = "ID")]
    pub correlation_id: Option<String>,
    /// Connection options.
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// `probe` options.
#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    /// A READ-ONLY tool the probe may call twice to observe revisions: once
    /// as is, once pinned to a revision the surface never issued.
    #[arg(long, value_name = "TOOL")]
    pub read: Option<String>,
    /// The arguments of --read, a JSON object (default `{}`).
    #[arg(long = "args", value_name = "JSON", requires = "read")]
    pub read_args: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Connection options (trust defaults to --every-tool here).
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// `review` options.
#[derive(Debug, Clone, Args)]
pub struct ReviewArgs {
    /// The profile to review (a name `join` saved).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Accept these tools without asking: a changed one's new definition,
    /// a new one's trust.
    #[arg(long, value_delimiter = ',', value_name = "TOOL[,TOOL...]")]
    pub accept: Vec<String>,
    /// Accept everything the review shows as changed or new, without
    /// asking.
    #[arg(long)]
    pub yes: bool,
    /// Print the review as JSON.
    #[arg(long)]
    pub json: bool,
    /// How the traffic is carried.
    #[command(flatten)]
    pub transport: TransportArgs,
}

/// `mcp` options.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Open a receive leg per operation instead of keeping one open for
    /// the whole run (the default keeps it: a call then costs one round
    /// trip, at the price of one open connection to the relay).
    #[arg(long)]
    pub no_warm: bool,
    /// Connection options.
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// `status` options.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// The profile to show and probe (default: list every profile, from
    /// their files alone, without a network).
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// With NAME: how long the probe waits for the page, in seconds
    /// (opening a connection gets half of it).
    #[arg(long, value_name = "SECS", default_value_t = 5.0, requires = "name")]
    pub timeout: f64,
    /// With NAME: show the profile and the client files only; send
    /// nothing.
    #[arg(long, requires = "name")]
    pub no_probe: bool,
    /// With NAME: how the probe's replies come back (as the bridge's
    /// --transport).
    #[arg(long, value_enum, default_value_t, requires = "name")]
    pub transport: Transport,
    /// With NAME: which runtime crate drives the probe.
    #[arg(long, value_enum, default_value_t, requires = "name")]
    pub runtime: RuntimeKind,
}
