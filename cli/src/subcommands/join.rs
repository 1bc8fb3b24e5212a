//! `human-plus join`: from the link a person shared to a saved profile and
//! one line for an MCP client.
//!
//! 1. The link is read from `--invitation-file`, `HUMAN_PLUS_INVITATION` or
//!    standard input (never a flag value) and parsed by the core, with the
//!    invitation's strictness. Pasted at a terminal, it is read without
//!    echo, as a password is ([`crate::prompt`]), and its parts are shown
//!    instead; a surface id or application the link carries is used only
//!    when it is a plain identifier, and join says when it is not.
//! 2. It shows the relay's host and port, the session and the egress the
//!    relay needs (for a link naming a Reverb channel: the channel, the
//!    channel server's host and port and the auth bridge's). Egress is
//!    never implied by the link: every host and port must be declared
//!    (`--allow-host`, `--allow-port`), or accepted by the person (asked on
//!    a terminal; `--yes` without one).
//! 3. It connects through the configured egress and discovers the tools
//!    through local trust (`--allow`, else every tool but the reserved
//!    confirmation tools), showing each admitted tool with its digest and
//!    each withheld one with its reason.
//! 4. On the person's say-so (`--yes`, or `--pin`, which also pins), it
//!    saves the profile: the admitted tools as an allowlist, and their
//!    definitions pinned when the person says so (`--pin`).
//! 5. It prints the line that adds the bridge to each common MCP client,
//!    and with `--write-config CLIENT` merges the entry into that client's
//!    configuration file.
//!
//! Without a terminal it asks nothing: what it would ask comes from flags.
//! Text from the surface is printed with control characters escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use human_plus_core::{
    EgressPolicy, InvitationLink, McpClient, NO_PINS, Participant, TrustPolicy, surface_label,
};
use serde_json::Value;

use crate::args::JoinArgs;
use crate::connecting::connect::{
    INVITATION_ENV, Resolved, connect_resolved, read_bounded, read_link_text,
};
use crate::output::console::Asker;
use crate::output::exit::{self, Failure, printable};
use crate::profiles::profile::{self, CONFIG_DIR_ENV, Profile, ProfileEgress};
use crate::subcommands::commands::discovery_text;
use crate::subcommands::launcher::{BridgeCommand, shell_quote};

/// The command's name. The entries `join` prints and writes name a full
/// path or the launcher instead (`crate::launcher`): a client started from
/// a desktop may not have `~/.cargo/bin` on its `PATH`.
pub const COMMAND: &str = "human-plus";

/// Prints a line on stdout as soon as it is known (join talks to a person
/// between its steps).
fn say(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::internal(format!("stdout: {e}")))
}

/// `human-plus join`.
///
/// # Errors
/// The failure to report: exit 2 for a link refused before anything was
/// sent, 3 for egress nobody accepted, 4 when no tool is admitted, and
/// the connection's own failures.
pub fn run(args: &JoinArgs) -> Result<(), Failure> {
    crate::connecting::connect::refuse_link_flags(&args.link, args.link_argument.as_deref())?;
    let stdin_is_terminal = std::io::stdin().is_terminal();
    // The file, then the environment, then standard input: standard input
    // is never read when the link came from elsewhere (it may be a pipe
    // that never ends), and what was used is said.
    let source = if args.link.invitation_file.is_some() {
        "--invitation-file"
    } else if std::env::var_os(INVITATION_ENV).is_some_and(|v| !v.is_empty()) {
        INVITATION_ENV
    } else {
        "standard input"
    };
    let (text, from_stdin) = match read_link_text(&args.link, true)? {
        Some(text) => (text, false),
        None if stdin_is_terminal && std::io::stderr().is_terminal() => {
            // A person at a terminal pastes the link: read as a password
            // is, never echoed (it holds the token), never in the process
            // list; its parts are shown below instead.
            let read = crate::subcommands::prompt::read_hidden(
                "Paste the link the page shared, then press Enter (it is not shown): ",
                human_plus_core::MAX_LINK_BYTES * 2,
            )
            .map_err(|e| Failure::usage(format!("cannot read the link: {e}")))?;
            match read {
                crate::subcommands::prompt::Hidden::Line(line) => (line, false),
                crate::subcommands::prompt::Hidden::Interrupted => {
                    return Err(Failure::interrupted(
                        "interrupted at the prompt: nothing was read, sent or saved",
                    ));
                }
                crate::subcommands::prompt::Hidden::End => {
                    return Err(Failure::usage("no link was pasted; nothing was sent"));
                }
            }
        }
        None if stdin_is_terminal => {
            return Err(Failure::usage("no link").with_hint(format!(
                "pipe the link into `human-plus join` (e.g. human-plus join < link.txt), or put it in {INVITATION_ENV} or a file named by --invitation-file PATH"
            )));
        }
        None => {
            let text = read_bounded(std::io::stdin().lock()).map_err(|e| {
                Failure::usage(format!("cannot read the link from standard input: {e}"))
            })?;
            (text, true)
        }
    };
    let asker = Asker {
        interactive: !from_stdin && stdin_is_terminal && std::io::stderr().is_terminal(),
    };
    let link = crate::connecting::connect::parse_link(
        &text,
        &args.link,
        args.egress.allow_insecure_loopback,
    )?;
    drop(text);

    let name = args
        .name
        .clone()
        .unwrap_or_else(|| link.session_id().to_owned());
    // Checked before any byte leaves: the name, a profile directory others
    // can change, the surface id the operator names, and a client file
    // that could not take the entry.
    let dir = profile::profile_dir(&name)?;
    profile::check_existing_dir(&dir)?;
    crate::connecting::connect::check_surface_flag(args.surface.as_deref())?;
    let write_config = match &args.write_config {
        Some(client) => {
            let client = McpClient::parse(client).ok_or_else(|| {
                Failure::usage(format!("--write-config {client}: unknown client"))
            })?;
            let path = match &args.config_path {
                Some(p) => p.clone(),
                None => default_config_path(client)?,
            };
            check_client_config(client, &path)?;
            Some((client, path))
        }
        None => None,
    };

    say(&describe(&link, args.surface.as_deref(), source))?;

    // Egress: declared by flags, or accepted by the person. A Reverb link
    // needs two hosts: the channel server's and the auth bridge's.
    let mut egress = args.egress.clone();
    let needed = needed_egress(&link);
    let missing: Vec<(String, u16)> = needed
        .iter()
        .filter(|(host, port)| !egress_declared(&egress, host, *port))
        .cloned()
        .collect();
    if missing.is_empty() {
        say("  egress:  declared by the flags given\n")?;
    } else {
        let shown: Vec<String> = missing
            .iter()
            .map(|(host, port)| format!("{} port {port}", printable(host)))
            .collect();
        let accepted = asker.confirm(
            &format!("Allow connections to {}?", shown.join(" and ")),
            false,
            args.yes,
        )?;
        if !accepted {
            let mut flags = Vec::new();
            for (host, port) in &missing {
                let host_flag = format!("--allow-host {}", printable(host));
                if !EgressPolicy::new(&egress.allow_host).allows_host(host)
                    && !flags.contains(&host_flag)
                {
                    flags.push(host_flag);
                }
                let port_flag = format!("--allow-port {port}");
                if !flags.contains(&port_flag) {
                    flags.push(port_flag);
                }
            }
            return Err(Failure {
                exit: exit::EGRESS_REFUSED,
                code: "egress_refused".to_owned(),
                message: format!(
                    "egress to {} is not declared, and was not accepted",
                    shown.join(" and ")
                ),
                hint: Some(format!(
                    "egress is never implied by a link: add {}, or --yes to accept what join shows",
                    flags.join(" ")
                )),
                detail: None,
            });
        }
        for (host, port) in &missing {
            if !EgressPolicy::new(&egress.allow_host).allows_host(host) {
                egress.allow_host.push(host.clone());
            }
            let ports_declared = if egress.allow_port.is_empty() {
                *port == 443
            } else {
                egress.allow_port.contains(port)
            };
            if !ports_declared {
                if egress.allow_port.is_empty() {
                    // Declaring a port replaces the default: keep 443 for
                    // a host that needs it.
                    if needed.iter().any(|(_, p)| *p == 443) {
                        egress.allow_port.push(443);
                    }
                }
                egress.allow_port.push(*port);
            }
        }
        say("  egress:  accepted\n")?;
    }

    // Discovery through local trust.
    let allow: Vec<String> = args
        .allow
        .iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let trust = if allow.is_empty() {
        TrustPolicy::every_tool(NO_PINS)
    } else {
        TrustPolicy::allowing(allow.clone(), NO_PINS)
    };
    let token = link.token().expose().to_owned();
    let invitation = link
        .clone()
        .into_invitation(args.surface.as_deref(), args.application.as_deref())
        .map_err(|e| Failure::from_error(&e, &exit::Context::default()))?;
    let relay = invitation.relay_url().to_owned();
    let surface = invitation.surface_id().to_owned();
    let application = invitation.application().to_owned();
    let connection = connect_resolved(
        Resolved {
            invitation,
            trust,
            egress: egress.clone(),
            reviewed: None,
        },
        &args.transport,
        Participant::new("human-plus-join", "Human+ join", "#7c3aed"),
        false,
        false,
    )?;
    let discovery = connection
        .agent
        .tools(&connection.owner, connection.id())
        .map_err(|e| connection.fail(&e))?;
    say("\nTools, through local trust:\n")?;
    say(&indent(&discovery_text(&discovery)))?;
    if discovery.tools.is_empty() {
        return Err(Failure {
            exit: exit::TRUST_REFUSED,
            code: "tool_refused".to_owned(),
            message: "local trust admits no tool of this surface; no profile was written"
                .to_owned(),
            hint: Some("--allow NAME[,NAME...] names the tools to trust".to_owned()),
            detail: None,
        });
    }

    let trusted: Vec<String> = discovery
        .tools
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    let save = asker.confirm(
        &format!(
            "Save profile {name}, trusting these {} tool{}?",
            trusted.len(),
            if trusted.len() == 1 { "" } else { "s" }
        ),
        false,
        // Asking to pin what was discovered is asking to keep it.
        args.yes || args.pin,
    )?;
    if !save {
        return Err(Failure::usage("nothing was saved")
            .with_hint("without a terminal, join saves only with --yes or --pin (which also pins the definitions shown)"));
    }
    let pin = asker.confirm(
        "Pin these reviewed definitions? (a definition the surface changes later is then withheld)",
        true,
        args.pin,
    )?;
    let pins: Option<BTreeMap<String, String>> = pin.then(|| {
        discovery
            .tools
            .iter()
            .map(|t| (t.name().to_owned(), t.digest().to_owned()))
            .collect()
    });

    let mut profile_egress = ProfileEgress::from_args(&egress);
    profile_egress.allow_insecure_loopback = link.is_insecure_loopback();
    let doc = Profile {
        version: profile::PROFILE_VERSION,
        relay,
        reverb: link.reverb().cloned(),
        session: link.session_id().to_owned(),
        surface,
        application,
        allow: trusted,
        egress: profile_egress,
    };
    let rejoining = dir.join(profile::PROFILE_FILE).exists();
    let saved = profile::save(&name, &doc, &token, pins.as_ref(), Some(&discovery.tools))?;
    debug_assert_eq!(saved, dir);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nSaved profile {name} in {} (the token in its own file, readable by you only{}).",
        saved.display(),
        if pins.is_some() {
            "; definitions pinned"
        } else {
            "; no pins"
        }
    );
    if rejoining {
        let _ = writeln!(
            out,
            "A bridge already running under {name} (`human-plus mcp --profile {name}` in your MCP client) picks this link up without a restart."
        );
    }
    out.push_str(&client_lines(&name));
    say(&out)?;

    if let Some((client, path)) = &write_config {
        let backup = write_client_config(*client, path, &name, &token)?;
        let mut out = format!("\nAdded {name} to {} ({client})", path.display());
        match backup {
            Some(b) => {
                let _ = writeln!(out, "; the previous file is kept as {}.", b.display());
            }
            None => out.push_str(".\n"),
        }
        say(&out)?;
    }
    Ok(())
}

/// What join shows of a link read from `source`: relay host and port,
/// relay base, session, surface and the egress it needs, and what the link
/// carried that is not used ([`InvitationLink::notes`]). Never the token,
/// and the surface id only as [`surface_label`] writes it.
#[must_use]
pub fn describe(link: &InvitationLink, surface: Option<&str>, source: &str) -> String {
    let surface = surface
        .map(str::to_owned)
        .or_else(|| link.surface_id().map(str::to_owned))
        .unwrap_or_else(|| link.default_surface_id());
    let mut out = String::new();
    let _ = writeln!(out, "Invitation ({} link, from {source}):", link.form());
    if let Some(channel) = link.reverb() {
        let plain = |secure: bool| {
            if secure {
                ""
            } else {
                " (plain on loopback: local development only)"
            }
        };
        let ws_plain = channel.ws_url().starts_with("ws://");
        let auth_plain = channel.auth_url().starts_with("http://");
        let _ = writeln!(out, "  transport: Reverb channel (Pusher protocol)");
        let _ = writeln!(out, "  channel: {}", printable(channel.channel()));
        let _ = writeln!(out, "  session: {}", printable(link.session_id()));
        let _ = writeln!(out, "  surface: {}", surface_label(&surface));
        let _ = writeln!(
            out,
            "  server:  {}://{} port {}{}",
            if ws_plain { "ws" } else { "wss" },
            printable(&channel.ws_host()),
            channel.ws_port(),
            plain(!ws_plain)
        );
        let _ = writeln!(
            out,
            "  auth:    {}://{} port {}{}",
            if auth_plain { "http" } else { "https" },
            printable(&channel.auth_host()),
            channel.auth_port(),
            plain(!auth_plain)
        );
        let _ = writeln!(
            out,
            "  token:   sent only to the auth bridge (Authorization: Bearer), never to the channel server or in a URL"
        );
        for note in link.notes() {
            let _ = writeln!(out, "  note:    {note}");
        }
        return out;
    }
    let _ = writeln!(out, "  relay:   {}", printable(link.relay_url()));
    let _ = writeln!(out, "  session: {}", printable(link.session_id()));
    let _ = writeln!(out, "  surface: {}", surface_label(&surface));
    let _ = writeln!(
        out,
        "  needs:   {}://{} port {}{}",
        if link.is_insecure_loopback() {
            "http"
        } else {
            "https"
        },
        printable(link.relay_host()),
        link.relay_port(),
        if link.is_insecure_loopback() {
            " (plain http on loopback: local development only)"
        } else {
            ""
        }
    );
    for note in link.notes() {
        let _ = writeln!(out, "  note:    {note}");
    }
    out
}

/// The hosts (without brackets) and ports the link needs to reach: the
/// relay's, or a Reverb channel's server and then its auth bridge.
fn needed_egress(link: &InvitationLink) -> Vec<(String, u16)> {
    let bare = |h: &str| h.trim_start_matches('[').trim_end_matches(']').to_owned();
    match link.reverb() {
        Some(channel) => {
            let mut needed = vec![(bare(&channel.ws_host()), channel.ws_port())];
            let auth = (bare(&channel.auth_host()), channel.auth_port());
            if !needed.contains(&auth) {
                needed.push(auth);
            }
            needed
        }
        None => vec![(bare(link.relay_host()), link.relay_port())],
    }
}

fn egress_declared(egress: &crate::args::EgressArgs, host: &str, port: u16) -> bool {
    let policy = EgressPolicy::new(&egress.allow_host);
    let ports_ok = if egress.allow_port.is_empty() {
        port == 443
    } else {
        egress.allow_port.contains(&port)
    };
    policy.allows_host(host) && ports_ok
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// The environment an MCP client must pass for this profile: the
/// configuration directory, when it was overridden.
fn client_env() -> Vec<(String, String)> {
    match std::env::var(CONFIG_DIR_ENV) {
        Ok(dir) if !dir.is_empty() => {
            let dir = std::path::absolute(&dir).map_or(dir, |p| p.display().to_string());
            vec![(CONFIG_DIR_ENV.to_owned(), dir)]
        }
        _ => Vec::new(),
    }
}

/// The lines that add profile `name` to each common MCP client.
#[must_use]
pub fn client_lines(name: &str) -> String {
    let bridge = BridgeCommand::current();
    let mut env = bridge.env.clone();
    env.extend(client_env());
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let args = bridge.args(name);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut out = format!("\n{}\n", bridge.note());
    let env_flags: String = env
        .iter()
        .map(|(k, v)| format!(" -e {}", shell_quote(&format!("{k}={v}"))))
        .collect();
    let _ = writeln!(
        out,
        "\nClaude Code:\n  claude mcp add {name}{env_flags} -- {}",
        bridge.shell_line(name)
    );
    let entry = McpClient::ClaudeDesktop.server_entry(&bridge.program, &args, &env_ref);
    let _ = writeln!(
        out,
        "\nClaude Desktop (claude_desktop_config.json) and Cursor (mcp.json), under \"mcpServers\":\n  {}",
        serde_json::json!({ name: entry })
    );
    let entry = McpClient::VsCode.server_entry(&bridge.program, &args, &env_ref);
    let _ = writeln!(
        out,
        "\nVS Code (mcp.json), under \"servers\":\n  {}",
        serde_json::json!({ name: entry })
    );
    let _ = writeln!(
        out,
        "\nOr let join write it: --write-config claude-code|claude-desktop|cursor|vscode."
    );
    out
}

/// The usual configuration file of `client`.
///
/// # Errors
/// A usage failure when the home directory is unknown.
pub fn default_config_path(client: McpClient) -> Result<PathBuf, Failure> {
    let env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = || {
        env("HOME").ok_or_else(|| {
            Failure::usage("cannot find the home directory").with_hint("pass --config-path PATH")
        })
    };
    let config_home = || -> Result<PathBuf, Failure> {
        if cfg!(windows) {
            if let Some(d) = env("APPDATA") {
                return Ok(d);
            }
        } else if cfg!(target_os = "macos") {
            return Ok(home()?.join("Library").join("Application Support"));
        } else if let Some(d) = env("XDG_CONFIG_HOME").filter(|d| d.is_absolute()) {
            return Ok(d);
        }
        Ok(home()?.join(".config"))
    };
    Ok(match client {
        McpClient::ClaudeCode => PathBuf::from(".mcp.json"),
        McpClient::ClaudeDesktop => config_home()?
            .join("Claude")
            .join("claude_desktop_config.json"),
        McpClient::Cursor => home()?.join(".cursor").join("mcp.json"),
        McpClient::VsCode => config_home()?.join("Code").join("User").join("mcp.json"),
        _ => return Err(Failure::usage("pass --config-path PATH for this client")),
    })
}

/// Checks that `client`'s configuration file at `path` can take an entry
/// (it does not exist, or is a JSON object whose servers are an object).
///
/// # Errors
/// A usage failure saying why not; the file is not touched.
pub fn check_client_config(client: McpClient, path: &Path) -> Result<(), Failure> {
    let existing = read_client_config(path)?;
    client
        .merge_server(existing.as_deref(), "check", Value::Null)
        .map(|_| ())
        .map_err(|e| unmergeable(path, e))
}

fn read_client_config(path: &Path) -> Result<Option<String>, Failure> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Failure::usage(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

fn unmergeable(path: &Path, e: human_plus_core::McpConfigError) -> Failure {
    Failure::usage(format!("{}: {e}; it was left as it is", path.display()))
        .with_hint("fix the file, or add the entry join prints by hand")
}

/// Merges profile `name`'s entry into `client`'s configuration file at
/// `path`: other entries kept, the previous file copied to a backup first,
/// the new one written atomically with the old one's permissions. Returns
/// the backup's path (none when there was no file). The token is checked
/// to be in no byte written.
///
/// # Errors
/// A failure when the file is not a JSON object (it is left untouched), or
/// cannot be read or written.
pub fn write_client_config(
    client: McpClient,
    path: &Path,
    name: &str,
    token: &str,
) -> Result<Option<PathBuf>, Failure> {
    let existing = read_client_config(path)?;
    let bridge = BridgeCommand::current();
    let mut env = bridge.env.clone();
    env.extend(client_env());
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let args = bridge.args(name);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let entry: Value = client.server_entry(&bridge.program, &args, &env_ref);
    let text = client
        .merge_server(existing.as_deref(), name, entry)
        .map_err(|e| unmergeable(path, e))?;
    if text.contains(token) {
        return Err(Failure::internal(
            "refusing to write a client configuration that holds the token",
        ));
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| Failure::internal(format!("cannot create {}: {e}", parent.display())))?;
    }
    let mut mode = 0o600;
    let backup = match &existing {
        Some(old) => {
            #[cfg(unix)]
            if let Ok(meta) = std::fs::metadata(path) {
                use std::os::unix::fs::PermissionsExt as _;
                mode = meta.permissions().mode() & 0o777;
            }
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            let mut backup = path.as_os_str().to_owned();
            backup.push(format!(".{stamp}.bak"));
            let backup = PathBuf::from(backup);
            profile::write_atomic(&backup, old.as_bytes(), mode)?;
            Some(backup)
        }
        None => None,
    };
    profile::write_atomic(path, text.as_bytes(), mode)?;
    Ok(backup)
}
