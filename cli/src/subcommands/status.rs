//! `human-plus status [NAME]`: what a person runs when the agent says it
//! cannot reach the sheet.
//!
//! Without NAME it lists every profile under the configuration directory
//! (`<config>/profiles/*`, [`profile::config_dir`]) from its files alone, no
//! network: its relay host, session, surface, the tools it trusts and which
//! of them are pinned; a profile that cannot be used says why. With NAME it
//! shows that profile, probes it, and names the MCP client configuration
//! files that start a bridge on it.
//!
//! The probe goes through the profile exactly as the bridge does (its
//! invitation, token file, trust, pins and egress: [`connect::resolve`],
//! then a connection that withholds a tool whose pin changed) and asks the
//! page for its tools once: the MCP handshake (`initialize`) and
//! `tools/list`, bounded by `--timeout` (5 s by default; opening a
//! connection by half of it). What came back tells apart a relay that
//! cannot be reached (a transport failure), a session that ended (410), a
//! token the relay refuses (401), and a relay that took the request while
//! no page answered (a timeout). It sends nothing else: no call, no
//! announcement, no `unregister`.
//!
//! The configuration files checked are the ones `join --write-config`
//! writes ([`join::default_config_path`]: Claude Code's `.mcp.json` in the
//! current directory, Claude Desktop's, Cursor's and VS Code's) and
//! `~/.claude.json` (its `mcpServers` and each project's); an entry names
//! the profile when its `args` hold `--profile NAME` (or
//! `--profile=NAME`).
//!
//! Every value read from a profile or a client's file is printed escaped
//! ([`printable`], [`shown_tool_name`], [`surface_label`]); the token is
//! never read but by the probe's connection, and never printed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use human_plus_core::{
    Error, McpClient, Participant, ReverbChannel, ToolRefusal, TransportErrorKind, escape_bounded,
    is_valid_profile_name, shown_tool_name, surface_label,
};
use serde_json::{Value, json};

use crate::args::{ConnectArgs, StatusArgs, TransportArgs};
use crate::connecting::connect::{self, Connection};
pub use crate::connecting::handshake::ProbeOutcome;
use crate::connecting::handshake::{Handshake, handshake};
use crate::output::exit::{Context, Failure, printable};
use crate::profiles::profile::{self, CONFIG_DIR_ENV};
use crate::subcommands::join;

/// The most characters of a value from a profile's files (its relay URL,
/// session, ...) a line shows.
const SHOWN_MAX: usize = 200;

/// What a profile's files say, as `status` shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileStatus {
    /// The profile's name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Why it cannot be used (unreadable, others can change it, not a
    /// profile), when it cannot.
    pub problem: Option<String>,
    /// The relay's base URL.
    pub relay: String,
    /// The relay's host (and port), from the URL.
    pub relay_host: String,
    /// The relay's port.
    pub relay_port: Option<u16>,
    /// The Reverb channel the page is on (the relay is then the host
    /// app's auth bridge), when the profile names one.
    pub reverb: Option<ReverbChannel>,
    /// The session id.
    pub session: String,
    /// The surface id, as Human+ writes it ([`surface_label`]).
    pub surface: String,
    /// The tools it trusts, in its order.
    pub trusted: Vec<String>,
    /// The tools it pins.
    pub pinned: Vec<String>,
}

impl ProfileStatus {
    fn unusable(name: &str, dir: PathBuf, problem: String) -> Self {
        ProfileStatus {
            name: name.to_owned(),
            dir,
            problem: Some(problem),
            relay: String::new(),
            relay_host: String::new(),
            relay_port: None,
            reverb: None,
            session: String::new(),
            surface: String::new(),
            trusted: Vec::new(),
            pinned: Vec::new(),
        }
    }
}

/// Reads profile `name` for `status`: never fails, an unusable profile
/// carries its problem (the message the other commands would give).
#[must_use]
pub fn profile_status(name: &str) -> ProfileStatus {
    let dir = profile::profile_dir(name).unwrap_or_default();
    match profile::load(name) {
        Ok(loaded) => {
            let p = &loaded.profile;
            let (relay_host, relay_port) = match url::Url::parse(&p.relay) {
                Ok(u) => (
                    u.host_str().unwrap_or_default().to_owned(),
                    u.port_or_known_default(),
                ),
                Err(_) => (String::new(), None),
            };
            ProfileStatus {
                name: name.to_owned(),
                dir: loaded.dir.clone(),
                problem: None,
                relay: p.relay.clone(),
                relay_host,
                relay_port,
                reverb: p.reverb.clone(),
                session: p.session.clone(),
                surface: surface_label(&p.surface).to_owned(),
                trusted: p.allow.clone(),
                pinned: loaded
                    .pins
                    .map(|p| p.into_keys().collect())
                    .unwrap_or_default(),
            }
        }
        Err(f) => ProfileStatus::unusable(name, dir, one_line(&f)),
    }
}

/// A failure's message (and hint) on one line.
fn one_line(f: &Failure) -> String {
    match &f.hint {
        Some(h) => format!("{} ({h})", f.message),
        None => f.message.clone(),
    }
}

/// Every profile under the configuration directory, by name (directories
/// whose name is not a profile name are skipped).
///
/// # Errors
/// A usage failure when the configuration directory cannot be found, or
/// its `profiles` directory exists and cannot be read.
pub fn list_profiles() -> Result<(PathBuf, Vec<ProfileStatus>), Failure> {
    let dir = profile::config_dir()?.join("profiles");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((dir, Vec::new())),
        Err(e) => {
            return Err(Failure::usage(format!(
                "cannot read {}: {e}",
                dir.display()
            )));
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_valid_profile_name(n))
        .collect();
    names.sort();
    Ok((dir, names.iter().map(|n| profile_status(n)).collect()))
}

/// The probe's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    /// What it found.
    pub outcome: ProbeOutcome,
    /// How long it took.
    pub elapsed: Duration,
    /// The tools the profile's trust admits now (when the page answered).
    pub admitted: Vec<String>,
    /// Trusted tools withheld because their definition no longer matches
    /// its pin.
    pub changed: Vec<String>,
    /// Tools on the surface the profile does not trust.
    pub untrusted: Vec<String>,
    /// The failure, when the page did not answer: what the other commands
    /// would report, in Human+'s words for a person.
    pub failure: Option<Failure>,
    /// The probe went over a Reverb channel (the channel server and the
    /// auth bridge), not an HTTP relay.
    pub channel: bool,
}

/// The connection options of profile `name` for the probe: nothing but the
/// profile, the transport and the timeout.
fn probe_args(name: &str, args: &StatusArgs) -> ConnectArgs {
    connect::profile_args(
        name,
        TransportArgs {
            transport: args.transport,
            runtime: args.runtime,
            timeout: args.timeout,
            channel_limit: human_plus_core::DEFAULT_MAX_MESSAGE_BYTES,
        },
        ("human-plus-status", "Human+ status"),
    )
}

/// Probes profile `name`: resolves it as every command does and runs the
/// handshake the bridge also uses (`connecting::handshake`: a connection
/// withholding a tool whose pin changed, opening it bounded by half the
/// timeout, and the tools listed once).
///
/// # Errors
/// A failure before anything is sent: the profile cannot be read, its
/// token file is unsafe, a bad `--timeout`, egress refused.
pub fn probe(name: &str, args: &StatusArgs) -> Result<ProbeReport, Failure> {
    let exchange = connect::timeout(args.timeout)?;
    let connect_args = probe_args(name, args);
    let resolved = connect::resolve(&connect_args, None)?;
    let context = Context::of(&resolved.invitation);
    let participant = Participant::new(
        &connect_args.participant_id,
        &connect_args.participant_name,
        &connect_args.participant_color,
    );
    let Handshake {
        outcome,
        elapsed,
        listing,
        connection,
    } = handshake(resolved, &connect_args.transport, participant, exchange)?;
    Ok(match listing {
        Ok(d) => {
            let mut changed = Vec::new();
            let mut untrusted = Vec::new();
            for w in &d.withheld {
                match &w.reason {
                    ToolRefusal::PinChanged(_) => changed.push(w.name.clone()),
                    ToolRefusal::NotAllowed(_) => untrusted.push(w.name.clone()),
                    _ => {}
                }
            }
            ProbeReport {
                outcome,
                elapsed,
                admitted: d.tools.iter().map(|t| t.name().to_owned()).collect(),
                changed,
                untrusted,
                failure: None,
                channel: context.channel.is_some(),
            }
        }
        Err(e) => ProbeReport {
            outcome,
            elapsed,
            admitted: Vec::new(),
            changed: Vec::new(),
            untrusted: Vec::new(),
            failure: Some(probe_failure(name, &e, &connection, args.timeout, &context)),
            channel: context.channel.is_some(),
        },
    })
}

/// The failure a probe reports: the other commands' exit code and code,
/// with a sentence and a hint for the person.
fn probe_failure(name: &str, e: &Error, c: &Connection, secs: f64, context: &Context) -> Failure {
    let mut f = c.fail(e);
    let rejoin = format!(
        "ask the person for a new link (the page shares one), then `human-plus join --name {name}`"
    );
    if let Some(channel) = &context.channel {
        let (message, hint) = channel_probe_words(e, &f, channel, secs, name, rejoin);
        f.message = message;
        f.hint = hint;
        return f;
    }
    let host = relay_host(context);
    let (message, hint) = match ProbeOutcome::of_error(e) {
        ProbeOutcome::SessionEnded => (
            "the relay says the session has ended (410): the page was closed or its session expired"
                .to_owned(),
            Some(rejoin),
        ),
        ProbeOutcome::TokenRefused => (
            "the relay refused the profile's token (401): the link was revoked or replaced"
                .to_owned(),
            Some(rejoin),
        ),
        ProbeOutcome::NoPage => (
            format!(
                "the relay took the request, but no page answered within {secs} s: the page may be closed, asleep or reloading"
            ),
            Some(format!(
                "ask the person to open (or reload) the page; if it shares a new link, `human-plus join --name {name}`"
            )),
        ),
        ProbeOutcome::RelayUnreachable => {
            let kind = match e {
                Error::Transport(t) if t.kind() == TransportErrorKind::Timeout => {
                    "no connection in time".to_owned()
                }
                Error::Transport(t) => t.kind().name().to_owned(),
                _ => String::new(),
            };
            (
                format!(
                    "the relay at {host} could not be reached ({kind}): {}",
                    f.message
                ),
                Some(
                    "check the network and the egress proxy, and that the relay is up".to_owned(),
                ),
            )
        }
        _ => (f.message.clone(), f.hint.clone()),
    };
    f.message = message;
    f.hint = hint;
    f
}

/// The probe's words for a page on a Reverb channel: the channel server and
/// the auth bridge instead of a relay.
fn channel_probe_words(
    e: &Error,
    f: &Failure,
    channel: &ReverbChannel,
    secs: f64,
    name: &str,
    rejoin: String,
) -> (String, Option<String>) {
    let server = printable(&format!("{} port {}", channel.ws_host(), channel.ws_port()));
    let bridge = printable(&format!(
        "{} port {}",
        channel.auth_host(),
        channel.auth_port()
    ));
    match (ProbeOutcome::of_error(e), e) {
        (ProbeOutcome::SessionEnded, _) => (
            format!("the auth bridge at {bridge} says the session has ended (410)"),
            Some(rejoin),
        ),
        (ProbeOutcome::TokenRefused, _) => (
            format!(
                "the auth bridge at {bridge} refused the profile's token ({}): the link was revoked or replaced",
                e.code()
            ),
            Some(rejoin),
        ),
        (ProbeOutcome::NoPage, Error::Channel(human_plus_core::ChannelError::PageLeft { .. })) => (
            format!(
                "the page left the channel {}: nobody is there to answer",
                printable(channel.channel())
            ),
            Some(format!(
                "ask the person to open the page again; if it shares a new link, `human-plus join --name {name}`"
            )),
        ),
        (ProbeOutcome::NoPage, _) => (
            format!(
                "the channel server at {server} and the auth bridge let the probe join the channel, but no page answered within {secs} s: the page may be closed (on a private channel nobody says when it leaves), asleep, or its answer over the channel's message limit"
            ),
            Some(format!(
                "ask the person to open (or reload) the page; if it shares a new link, `human-plus join --name {name}`"
            )),
        ),
        (ProbeOutcome::RelayUnreachable, _) => (
            format!(
                "the channel server at {server} or the auth bridge at {bridge} could not be reached: {}",
                f.message
            ),
            Some("check the network and the egress proxy, and that the host app's channel server is up".to_owned()),
        ),
        _ => (f.message.clone(), f.hint.clone()),
    }
}

fn relay_host(context: &Context) -> String {
    context
        .relay_url
        .as_deref()
        .and_then(|r| url::Url::parse(r).ok())
        .map(|u| {
            let host = u.host_str().unwrap_or_default().to_owned();
            match u.port_or_known_default() {
                Some(p) => format!("{host} port {p}"),
                None => host,
            }
        })
        .map_or_else(|| "its address".to_owned(), |h| printable(&h))
}

/// One MCP client configuration entry that starts a bridge on a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientEntry {
    /// The client: `claude-code`, `claude-desktop`, `cursor`, `vscode`, or
    /// `claude-code (user)` / `claude-code (project PATH)` for
    /// `~/.claude.json`.
    pub client: String,
    /// The configuration file.
    pub path: PathBuf,
    /// The entry's server name.
    pub server: String,
    /// The entry sets `HUMAN_PLUS_CONFIG_DIR` to another directory than
    /// this command's, so it reads a profile of that name elsewhere.
    pub other_config_dir: bool,
}

/// True when an MCP client's server entry starts a bridge on profile
/// `name`: its `args` hold `--profile NAME` (or `--profile=NAME`).
///
/// ```
/// use human_plus_cli::status::entry_names_profile;
/// use serde_json::json;
///
/// let entry = json!({"command": "human-plus", "args": ["mcp", "--profile", "wb"]});
/// assert!(entry_names_profile(&entry, "wb"));
/// assert!(!entry_names_profile(&entry, "w"));
/// assert!(entry_names_profile(&json!({"args": ["mcp", "--profile=wb"]}), "wb"));
/// assert!(!entry_names_profile(&json!({"args": "mcp --profile wb"}), "wb"));
/// ```
#[must_use]
pub fn entry_names_profile(entry: &Value, name: &str) -> bool {
    let Some(args) = entry.get("args").and_then(Value::as_array) else {
        return false;
    };
    let args: Vec<Option<&str>> = args.iter().map(Value::as_str).collect();
    args.windows(2)
        .any(|w| w[0] == Some("--profile") && w[1] == Some(name))
        || args
            .iter()
            .any(|a| a.and_then(|a| a.strip_prefix("--profile=")) == Some(name))
}

/// The entries of a servers object (`mcpServers` / `servers`) that name
/// profile `name`, as (server name, sets another config dir).
fn entries_in(servers: Option<&Value>, name: &str, config: Option<&Path>) -> Vec<(String, bool)> {
    let Some(Value::Object(servers)) = servers else {
        return Vec::new();
    };
    servers
        .iter()
        .filter(|(_, entry)| entry_names_profile(entry, name))
        .map(|(server, entry)| {
            let other = entry
                .get("env")
                .and_then(|e| e.get(CONFIG_DIR_ENV))
                .and_then(Value::as_str)
                .is_some_and(|d| config.is_none_or(|c| Path::new(d) != c));
            (server.clone(), other)
        })
        .collect()
}

/// The MCP client configuration files that start a bridge on profile
/// `name`, and every file that was looked at.
#[must_use]
pub fn client_entries(name: &str) -> (Vec<ClientEntry>, Vec<PathBuf>) {
    let config = profile::config_dir()
        .ok()
        .map(|d| std::path::absolute(&d).unwrap_or(d));
    let mut found = Vec::new();
    let mut checked = Vec::new();
    let read = |path: &Path| -> Option<Value> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    };
    for client in McpClient::ALL {
        let Ok(path) = join::default_config_path(client) else {
            continue;
        };
        let path = std::path::absolute(&path).unwrap_or(path);
        if checked.contains(&path) {
            continue;
        }
        checked.push(path.clone());
        let Some(doc) = read(&path) else { continue };
        for (server, other) in entries_in(doc.get(client.servers_key()), name, config.as_deref()) {
            found.push(ClientEntry {
                client: client.as_str().to_owned(),
                path: path.clone(),
                server,
                other_config_dir: other,
            });
        }
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        let path = PathBuf::from(home).join(".claude.json");
        checked.push(path.clone());
        if let Some(doc) = read(&path) {
            for (server, other) in entries_in(doc.get("mcpServers"), name, config.as_deref()) {
                found.push(ClientEntry {
                    client: "claude-code (user)".to_owned(),
                    path: path.clone(),
                    server,
                    other_config_dir: other,
                });
            }
            if let Some(Value::Object(projects)) = doc.get("projects") {
                for (project, settings) in projects {
                    for (server, other) in
                        entries_in(settings.get("mcpServers"), name, config.as_deref())
                    {
                        found.push(ClientEntry {
                            client: format!("claude-code (project {})", printable(project)),
                            path: path.clone(),
                            server,
                            other_config_dir: other,
                        });
                    }
                }
            }
        }
    }
    (found, checked)
}

/// The lines of one profile, indented.
fn profile_text(p: &ProfileStatus, out: &mut String) {
    let _ = writeln!(out, "{}", printable(&p.name));
    if let Some(problem) = &p.problem {
        let _ = writeln!(
            out,
            "  unusable: {}",
            escape_bounded(problem, 2 * SHOWN_MAX)
        );
        return;
    }
    let port = p
        .relay_port
        .map(|p| format!(" port {p}"))
        .unwrap_or_default();
    match &p.reverb {
        Some(channel) => {
            let _ = writeln!(
                out,
                "  channel:  {} on {} port {} ({})",
                escape_bounded(channel.channel(), SHOWN_MAX),
                escape_bounded(&channel.ws_host(), SHOWN_MAX),
                channel.ws_port(),
                escape_bounded(channel.ws_url(), SHOWN_MAX)
            );
            let _ = writeln!(
                out,
                "  auth:     {}{port} ({})",
                escape_bounded(&p.relay_host, SHOWN_MAX),
                escape_bounded(&p.relay, SHOWN_MAX)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "  relay:    {}{port} ({})",
                escape_bounded(&p.relay_host, SHOWN_MAX),
                escape_bounded(&p.relay, SHOWN_MAX)
            );
        }
    }
    let _ = writeln!(out, "  session:  {}", escape_bounded(&p.session, SHOWN_MAX));
    let _ = writeln!(out, "  surface:  {}", p.surface);
    let trusted: Vec<String> = p
        .trusted
        .iter()
        .map(|t| {
            if p.pinned.contains(t) {
                format!("{} (pinned)", shown_tool_name(t))
            } else {
                shown_tool_name(t)
            }
        })
        .collect();
    let _ = writeln!(
        out,
        "  trusted:  {}",
        if trusted.is_empty() {
            "none".to_owned()
        } else {
            trusted.join(", ")
        }
    );
    let pinned = p.pinned.iter().filter(|n| p.trusted.contains(n)).count();
    let _ = writeln!(
        out,
        "  pinned:   {pinned} of {} trusted tool{}",
        p.trusted.len(),
        if p.trusted.len() == 1 { "" } else { "s" }
    );
}

fn profile_json(p: &ProfileStatus) -> Value {
    let mut doc = json!({"name": p.name, "dir": p.dir});
    if let Some(problem) = &p.problem {
        doc["problem"] = json!(problem);
        return doc;
    }
    doc["relay"] = json!(p.relay);
    doc["relay_host"] = json!(p.relay_host);
    doc["relay_port"] = json!(p.relay_port);
    match &p.reverb {
        Some(channel) => {
            doc["transport"] = json!("reverb");
            doc["channel"] = json!(channel.channel());
            doc["ws_url"] = json!(channel.ws_url());
            doc["ws_host"] = json!(channel.ws_host());
            doc["ws_port"] = json!(channel.ws_port());
        }
        None => doc["transport"] = json!("http_relay"),
    }
    doc["session"] = json!(p.session);
    doc["surface"] = json!(p.surface);
    doc["trusted"] = json!(p.trusted);
    doc["pinned"] = json!(p.pinned);
    doc
}

fn names(list: &[String]) -> String {
    list.iter()
        .map(|n| shown_tool_name(n))
        .collect::<Vec<_>>()
        .join(", ")
}

fn probe_text(name: &str, r: &ProbeReport, out: &mut String) {
    let ms = r.elapsed.as_millis();
    match (&r.outcome, &r.failure) {
        (ProbeOutcome::PageAnswered, _) => {
            let _ = writeln!(
                out,
                "  probe:    {}, and a page answered the MCP handshake ({ms} ms)",
                if r.channel {
                    "the channel server and the auth bridge answered"
                } else {
                    "the relay answered"
                }
            );
            let _ = writeln!(
                out,
                "  tools:    {} admitted{}",
                r.admitted.len(),
                if r.admitted.is_empty() {
                    String::new()
                } else {
                    format!(": {}", names(&r.admitted))
                }
            );
            if !r.changed.is_empty() {
                let _ = writeln!(
                    out,
                    "  changed:  {} (withheld: the definition no longer matches its pin; `human-plus review {name}` shows what changed)",
                    names(&r.changed)
                );
            }
            if !r.untrusted.is_empty() {
                let _ = writeln!(out, "  not trusted: {}", names(&r.untrusted));
            }
        }
        (outcome, Some(f)) => {
            let _ = writeln!(
                out,
                "  probe:    {} ({ms} ms): {}",
                outcome.as_str().replace('_', " "),
                printable(&f.message)
            );
            if let Some(hint) = &f.hint {
                let _ = writeln!(out, "  do:       {}", printable(hint));
            }
        }
        (outcome, None) => {
            let _ = writeln!(out, "  probe:    {}", outcome.as_str());
        }
    }
}

fn probe_json(r: &ProbeReport) -> Value {
    let mut doc = json!({
        "outcome": r.outcome.as_str(),
        "elapsed_ms": u64::try_from(r.elapsed.as_millis()).unwrap_or(u64::MAX),
    });
    if r.outcome == ProbeOutcome::PageAnswered {
        doc["admitted"] = json!(r.admitted);
        doc["changed"] = json!(r.changed);
        doc["not_trusted"] = json!(r.untrusted);
    }
    if let Some(f) = &r.failure {
        doc["code"] = json!(f.code);
        doc["exit"] = json!(f.exit);
        doc["message"] = json!(f.message);
        doc["hint"] = json!(f.hint);
    }
    doc
}

fn clients_text(name: &str, found: &[ClientEntry], checked: &[PathBuf], out: &mut String) {
    if found.is_empty() {
        let _ = writeln!(
            out,
            "  clients:  no MCP client configuration names it (looked in {})",
            checked
                .iter()
                .map(|p| printable(&p.display().to_string()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            out,
            "            `human-plus join --name {name} --write-config CLIENT` adds it"
        );
        return;
    }
    for (i, e) in found.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {}{} in {}, as {}{}",
            if i == 0 { "clients:  " } else { "          " },
            e.client,
            printable(&e.path.display().to_string()),
            printable(&serde_json::to_string(&e.server).unwrap_or_default()),
            if e.other_config_dir {
                " (with another HUMAN_PLUS_CONFIG_DIR: it reads a profile of that name elsewhere)"
            } else {
                ""
            }
        );
    }
}

fn clients_json(found: &[ClientEntry], checked: &[PathBuf]) -> Value {
    json!({
        "entries": found.iter().map(|e| json!({
            "client": e.client,
            "path": e.path,
            "server": e.server,
            "other_config_dir": e.other_config_dir,
        })).collect::<Vec<_>>(),
        "checked": checked,
    })
}

/// `human-plus status [NAME]`: the report on stdout. With NAME, a probe
/// that did not reach a page prints the report, then returns the failure
/// the other commands would (its exit code: 5 session ended, 6 token
/// refused, 8 no page answered, 9 relay unreachable, 3 egress refused).
///
/// # Errors
/// A usage failure when the configuration directory cannot be read, or
/// profile NAME does not exist or cannot be used; the probe's failure.
pub fn run(args: &StatusArgs) -> Result<String, Failure> {
    let Some(name) = &args.name else {
        let (dir, profiles) = list_profiles()?;
        if args.json {
            let doc = json!({
                "profiles_dir": dir,
                "profiles": profiles.iter().map(profile_json).collect::<Vec<_>>(),
            });
            return Ok(format!("{doc}\n"));
        }
        let mut out = format!(
            "Profiles in {} ({}):\n",
            printable(&dir.display().to_string()),
            profiles.len()
        );
        if profiles.is_empty() {
            out.push_str(
                "  none yet: `human-plus join --name NAME` makes one from the link a person shared\n",
            );
        }
        for p in &profiles {
            out.push('\n');
            profile_text(p, &mut out);
        }
        return Ok(out);
    };
    // The profile's own failure (missing, unsafe) is the other commands'.
    profile::load(name)?;
    let status = profile_status(name);
    let report = if args.no_probe {
        None
    } else {
        Some(probe(name, args)?)
    };
    let (found, checked) = client_entries(name);
    let text = if args.json {
        let mut doc = json!({
            "profile": profile_json(&status),
            "clients": clients_json(&found, &checked),
        });
        if let Some(r) = &report {
            doc["probe"] = probe_json(r);
        }
        format!("{doc}\n")
    } else {
        let mut out = String::new();
        profile_text(&status, &mut out);
        if let Some(r) = &report {
            probe_text(name, r, &mut out);
        }
        clients_text(name, &found, &checked, &mut out);
        out
    };
    match report.and_then(|r| r.failure) {
        None => Ok(text),
        Some(failure) => {
            let mut stdout = std::io::stdout().lock();
            use std::io::Write as _;
            stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
                .map_err(|e| Failure::internal(format!("stdout: {e}")))?;
            Err(failure)
        }
    }
}
