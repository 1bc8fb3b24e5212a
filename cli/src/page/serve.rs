//! `human-plus relay` and `human-plus surface`: a local relay and the demo
//! sheet as a person's page, for dogfooding against your own agent.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use human_plus_core::{RelayToken, ShareLink};
use human_plus_relay::{
    CallOutcome, DemoSurface, RelayServer, RevisionMode, SurfaceLeg, TlsConfig,
};
use serde_json::Value;

use crate::args::{RelayArgs, Revisions, SurfaceArgs, Transport};
use crate::connecting::connect::{read_ca, read_token};
use crate::output::console::say;
use crate::output::exit::{Failure, printable};
use crate::page::rt::runtime;

/// `human-plus relay`: serves until Ctrl-C.
///
/// # Errors
/// A usage failure for unreadable TLS files; an internal one when the
/// address cannot be bound.
pub fn relay(args: &RelayArgs) -> Result<(), Failure> {
    let prefix = relay_prefix(&args.prefix)?;
    let rt = runtime()?;
    let mut builder = RelayServer::builder()
        .bind(SocketAddr::new(args.host, args.port))
        .prefix(prefix);
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let tls = TlsConfig::from_pem_files(cert, key)
            .map_err(|e| Failure::usage(format!("--tls-cert/--tls-key: {e}")))?;
        builder = builder.tls(tls);
    }
    let handle = rt.block_on(builder.start()).map_err(|e| {
        Failure::internal(format!("cannot listen on {}:{}: {e}", args.host, args.port))
    })?;
    let mut text = format!("Human+ relay listening at {}\n", handle.base_url());
    if !args.host.is_loopback() {
        text.push_str("warning: `register` is unauthenticated; anyone who can reach this address can open sessions\n");
    }
    let _ = writeln!(
        text,
        "Open the demo sheet in a browser:  human-plus surface --web --relay {}",
        handle.base_url()
    );
    let _ = writeln!(
        text,
        "or in a terminal:  HUMAN_PLUS_TOKEN=... human-plus surface --relay {} --session my_session",
        handle.base_url()
    );
    text.push_str("Press Ctrl-C to stop.\n");
    say(&text);
    let _ = rt.block_on(tokio::signal::ctrl_c());
    rt.block_on(handle.shutdown());
    say("relay stopped\n");
    Ok(())
}

/// The longest `--prefix` taken.
const MAX_PREFIX: usize = 200;

/// A relay `--prefix`, as the routes will use it: empty, or `/` and
/// segments of letters, digits and `-._~` (no `.` or `..` segment), with
/// no trailing `/`. `agent-relay`, `/agent-relay` and `/agent-relay/` are
/// the same prefix.
///
/// # Errors
/// A usage failure for anything else (a query, a fragment, an escape,
/// an empty or dot segment, a space), which could only match no path or
/// the wrong one.
pub fn relay_prefix(raw: &str) -> Result<String, Failure> {
    let trimmed = raw.strip_suffix('/').unwrap_or(raw);
    let trimmed = trimmed.strip_prefix('/').unwrap_or(trimmed);
    if raw.len() <= 1 && trimmed.is_empty() {
        return Ok(String::new());
    }
    let segment_ok = |seg: &str| {
        !seg.is_empty()
            && seg != "."
            && seg != ".."
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    };
    if trimmed.len() > MAX_PREFIX || !trimmed.split('/').all(segment_ok) {
        return Err(Failure::usage(format!(
            "--prefix must be a path such as agent-relay: segments of letters, digits and -._~ (got {})",
            printable(raw)
        )));
    }
    Ok(format!("/{trimmed}"))
}

/// The most rows `show` prints.
pub const GRID_ROWS: u32 = 50;

/// The most columns `show` prints (A to L).
pub const GRID_COLUMNS: u32 = 12;

/// The widest value `show` prints, in characters; a longer one is cut and
/// ends with `…`.
pub const GRID_VALUE_WIDTH: usize = 24;

/// Renders the sheet's cells as a small grid: rows 1 to [`GRID_ROWS`],
/// columns A to L ([`GRID_COLUMNS`]), values up to [`GRID_VALUE_WIDTH`]
/// characters. What it leaves out it says: the cells beyond the grid (how
/// many, and the first few addresses) and that a cut value ends with `…`.
#[must_use]
pub fn grid(cells: &BTreeMap<String, String>) -> String {
    let parsed: Vec<((u32, u32), &str)> = cells
        .iter()
        .filter_map(|(a, v)| parse_a1(a).map(|rc| (rc, v.as_str())))
        .collect();
    if parsed.is_empty() {
        return "(the sheet is empty)\n".to_owned();
    }
    let rows = parsed
        .iter()
        .map(|((r, _), _)| *r)
        .max()
        .unwrap_or(1)
        .min(GRID_ROWS);
    let cols = parsed
        .iter()
        .map(|((_, c), _)| *c)
        .max()
        .unwrap_or(1)
        .min(GRID_COLUMNS);
    let mut table: BTreeMap<(u32, u32), String> = BTreeMap::new();
    let mut beyond: Vec<(u32, u32)> = Vec::new();
    for ((r, c), v) in parsed {
        if r > GRID_ROWS || c > GRID_COLUMNS {
            beyond.push((r, c));
        } else {
            table.insert((r, c), printable(v));
        }
    }
    let width = |c: u32| {
        (1..=rows)
            .filter_map(|r| table.get(&(r, c)).map(|v| v.chars().count()))
            .max()
            .unwrap_or(0)
            .max(column_name(c).len())
            .min(GRID_VALUE_WIDTH)
    };
    let widths: Vec<usize> = (1..=cols).map(width).collect();
    let mut cut = false;
    let mut out = String::from("    ");
    for (c, w) in (1..=cols).zip(&widths) {
        let _ = write!(out, " {:w$}", column_name(c));
    }
    out.push('\n');
    for r in 1..=rows {
        let _ = write!(out, "{r:>4}");
        for (c, w) in (1..=cols).zip(&widths) {
            let v = table.get(&(r, c)).map_or("", String::as_str);
            let v: String = if v.chars().count() > *w {
                cut = true;
                v.chars()
                    .take(w.saturating_sub(1))
                    .chain(std::iter::once('\u{2026}'))
                    .collect()
            } else {
                v.to_owned()
            };
            let _ = write!(out, " {v:w$}");
        }
        out.push('\n');
    }
    if !beyond.is_empty() {
        beyond.sort_unstable();
        const NAMED: usize = 5;
        let named: Vec<String> = beyond
            .iter()
            .take(NAMED)
            .map(|(r, c)| format!("{}{r}", column_name(*c)))
            .collect();
        let _ = writeln!(
            out,
            "(not shown: {} cell{} beyond column {} or row {GRID_ROWS}: {}{})",
            beyond.len(),
            if beyond.len() == 1 { "" } else { "s" },
            column_name(GRID_COLUMNS),
            named.join(", "),
            if beyond.len() > NAMED {
                ", \u{2026}"
            } else {
                ""
            }
        );
    }
    if cut {
        let _ = writeln!(
            out,
            "(values longer than {GRID_VALUE_WIDTH} characters are cut, ending with \u{2026})"
        );
    }
    out
}

fn column_name(mut c: u32) -> String {
    let mut name = Vec::new();
    while c > 0 {
        let rem = (c - 1) % 26;
        name.push(char::from(b'A' + u8::try_from(rem).unwrap_or(0)));
        c = (c - 1) / 26;
    }
    name.iter().rev().collect()
}

fn parse_a1(address: &str) -> Option<(u32, u32)> {
    let address = address.trim();
    let split = address.find(|c: char| c.is_ascii_digit())?;
    let (letters, digits) = address.split_at(split);
    if letters.is_empty() || !letters.chars().all(|c| c.is_ascii_alphabetic()) {
        return None;
    }
    let mut col: u32 = 0;
    for c in letters.chars() {
        col = col
            .checked_mul(26)?
            .checked_add(u32::from(c.to_ascii_uppercase()) - u32::from('A') + 1)?;
    }
    let row: u32 = digits.parse().ok()?;
    (row > 0).then_some((row, col))
}

/// One line a person typed, understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageCommand {
    /// `B4=12` (an empty value clears the cell).
    Set(String, String),
    /// `delete 3`
    DeleteRow(u32),
    /// `redefine TOOL TEXT`: the page gives tool TOOL another description
    /// (its digest changes) and tells every agent its tools changed.
    Redefine(String, String),
    /// `show`
    Show,
    /// `link`: the share link with its token.
    Link,
    /// `changes`
    Changes,
    /// `help`
    Help,
    /// `quit` / `exit`
    Quit,
    /// An empty line.
    Nothing,
    /// Anything else.
    Unknown(String),
}

/// Parses one line of the page's stdin.
#[must_use]
pub fn parse_page_command(line: &str) -> PageCommand {
    let line = line.trim();
    match line {
        "" => return PageCommand::Nothing,
        "show" | "s" => return PageCommand::Show,
        "link" => return PageCommand::Link,
        "changes" | "log" => return PageCommand::Changes,
        "help" | "?" => return PageCommand::Help,
        "quit" | "exit" | "q" => return PageCommand::Quit,
        _ => {}
    }
    if let Some(rest) = line.strip_prefix("redefine ") {
        return match rest.trim().split_once(' ') {
            Some((tool, text)) if !text.trim().is_empty() => {
                PageCommand::Redefine(tool.to_owned(), text.trim().to_owned())
            }
            _ => PageCommand::Unknown(line.to_owned()),
        };
    }
    if let Some(rest) = line.strip_prefix("delete ") {
        return match rest.trim().parse() {
            Ok(row) => PageCommand::DeleteRow(row),
            Err(_) => PageCommand::Unknown(line.to_owned()),
        };
    }
    if let Some((address, value)) = line.split_once('=')
        && parse_a1(address).is_some()
    {
        return PageCommand::Set(address.trim().to_ascii_uppercase(), value.trim().to_owned());
    }
    PageCommand::Unknown(line.to_owned())
}

const PAGE_HELP: &str = "Type B4=12 to set a cell (B4= clears it), `delete 3` to delete a row, `show`, `changes`, `link` to show the share link with its token, `redefine TOOL TEXT` to give a tool another description (as a page that redefines a component does), `quit`.\n";

/// The surface id the terminal page names in its share link.
pub const TERMINAL_SURFACE_ID: &str = "sheet:terminal";

/// The profile name the terminal page's `join` line gives.
const TERMINAL_PROFILE: &str = "terminal-sheet";

/// What the terminal page shows of its share link when it opens: the link
/// with the token masked (as the web page shows it until Show), how to see
/// it whole, and the one `join` line that turns it into a profile and a
/// bridge. The token is in none of it.
#[must_use]
pub fn share_link_text(link: &Result<ShareLink, human_plus_core::Error>, relay: &str) -> String {
    match link {
        Ok(link) => {
            let loopback = if relay.starts_with("http:") {
                " --allow-insecure-loopback --allow-unverified-egress"
            } else {
                ""
            };
            format!(
                "Share link for an agent (the token hidden; type `link` to show it whole):\n  {}\n\
                 Paste it into:  (read -rs HUMAN_PLUS_INVITATION && export HUMAN_PLUS_INVITATION && human-plus join --name {TERMINAL_PROFILE}{loopback})\n",
                link.masked()
            )
        }
        Err(e) => format!(
            "No share link: an agent could not read one for this relay URL ({e}). Agents join with --relay, --session and the token instead.\n"
        ),
    }
}

/// `human-plus surface`: the demo sheet as a page, edited from stdin,
/// until `quit` or Ctrl-C.
///
/// # Errors
/// A usage failure for a missing token or unreadable files; a failure of
/// class 5/6/9 when the relay refuses the page.
pub fn surface(args: &SurfaceArgs) -> Result<(), Failure> {
    if args.web {
        return crate::page::web_surface::surface(args);
    }
    let session = args
        .session
        .as_deref()
        .ok_or_else(|| Failure::usage("--session is required without --web"))?;
    let token = read_token(args.token_file.as_deref())?;
    let link_token = RelayToken::new(token.as_str());
    let rt = runtime()?;
    let mut builder = DemoSurface::builder(&args.relay, session, token)
        .leg(match args.transport {
            Transport::Sse => SurfaceLeg::Sse,
            Transport::Poll => SurfaceLeg::Poll,
        })
        .revisions(match args.revisions {
            Revisions::Enforced => RevisionMode::Enforced,
            Revisions::MintOnly => RevisionMode::MintOnly,
            Revisions::Off => RevisionMode::Off,
        })
        .change_feed(!args.no_change_feed)
        .feed_attribution(!args.no_feed_attribution);
    if let Some(ca) = &args.ca_cert {
        builder = builder.tls_roots(read_ca(ca)?);
    }
    let page = rt.block_on(builder.start()).map_err(|e| {
        let text = human_plus_core::redact_text(&e.to_string());
        match e {
            human_plus_relay::SurfaceError::SessionGone => Failure {
                exit: crate::output::exit::SURFACE_UNAVAILABLE,
                code: "surface_unavailable".into(),
                message: text,
                hint: None,
                detail: None,
            },
            human_plus_relay::SurfaceError::Unauthorized => Failure {
                exit: crate::output::exit::UNAUTHORIZED,
                code: "attachment_unauthorized".into(),
                message: text,
                hint: None,
                detail: None,
            },
            _ => Failure {
                exit: crate::output::exit::RELAY_FAILED,
                code: "relay_failed".into(),
                message: format!("the page could not open: {text}"),
                hint: None,
                detail: None,
            },
        }
    })?;
    let page = Arc::new(page);
    // The person's own page shows its own link, as the web page does: the
    // token masked until asked for (`link`), and only on this terminal,
    // never in a log.
    let link = ShareLink::new(&args.relay, session, &link_token, Some(TERMINAL_SURFACE_ID));
    say(&format!(
        "The demo sheet is open in session {} at revision {}.\n{}{}{PAGE_HELP}",
        printable(session),
        page.revision(),
        share_link_text(&link, &args.relay),
        grid(&page.cells())
    ));

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let page = Arc::clone(&page);
        let stop = Arc::clone(&stop);
        rt.spawn(async move {
            let (mut calls, mut notes, mut again) = (0, 0, 0);
            while !stop.load(Ordering::Relaxed) {
                page.wait_for(Duration::from_millis(500), |p| {
                    p.calls().len() != calls
                        || p.notifications().len() != notes
                        || p.registered_again() != again
                })
                .await;
                if page.registered_again() != again {
                    again = page.registered_again();
                    say("the relay had forgotten the session (it restarted): the page registered it again, with the same token\n");
                }
                let all = page.calls();
                for c in all.iter().skip(calls) {
                    say(&format!("agent: {}\n", describe_call(c)));
                }
                calls = all.len();
                let all = page.notifications();
                for note in all.iter().skip(notes) {
                    if note.method == "notifications/human-plus/activity" {
                        say(&format!(
                            "agent activity: {}\n",
                            describe_activity(&note.params)
                        ));
                    }
                }
                notes = all.len();
                if let Some(why) = page.ended() {
                    say(&format!("the page's session ended: {why}\n"));
                    break;
                }
            }
        })
    };

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Option<String>>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(Some(line)).is_err() {
                return;
            }
        }
        let _ = tx.send(None);
    });

    rt.block_on(async {
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                line = rx.recv() => match line {
                    Some(Some(line)) => {
                        if !page_command(&page, &line, link.as_ref().ok()).await {
                            break;
                        }
                    }
                    Some(None) | None => {
                        say("stdin closed; the page stays open until Ctrl-C.\n");
                        let _ = tokio::signal::ctrl_c().await;
                        break;
                    }
                },
            }
        }
    });
    stop.store(true, Ordering::Relaxed);
    let _ = rt.block_on(watcher);
    if let Ok(page) = Arc::try_unwrap(page) {
        rt.block_on(page.shutdown());
    }
    say("page closed\n");
    Ok(())
}

/// Runs one typed command; false to quit.
async fn page_command(page: &DemoSurface, line: &str, link: Option<&ShareLink>) -> bool {
    let person = page.person();
    match parse_page_command(line) {
        PageCommand::Set(address, value) => match person.set_cell(&address, &value) {
            Ok(rev) => say(&format!(
                "you set {address} = {}; the sheet is at {rev}\n",
                printable(&value)
            )),
            Err(e) => say(&format!("cannot set {address}: {e}\n")),
        },
        PageCommand::DeleteRow(row) => match person.delete_row(row) {
            Ok(rev) => say(&format!("you deleted row {row}; the sheet is at {rev}\n")),
            Err(e) => say(&format!("cannot delete row {row}: {e}\n")),
        },
        PageCommand::Redefine(tool, text) => match page.redefine_tool(&tool, &text).await {
            Ok(()) => say(&format!(
                "the page redefined {}; agents are told its tools changed\n",
                printable(&tool)
            )),
            Err(e) => say(&format!("cannot tell the agents: {e}\n")),
        },
        PageCommand::Show => say(&format!(
            "revision {}\n{}",
            page.revision(),
            grid(&page.cells())
        )),
        PageCommand::Changes => {
            let mut text = String::new();
            for c in page.changes() {
                let _ = writeln!(
                    text,
                    "{}  {} {} by {}",
                    c.revision,
                    printable(&c.handle),
                    c.change,
                    c.actor.as_str()
                );
            }
            if text.is_empty() {
                text.push_str("no changes yet\n");
            }
            say(&text);
        }
        PageCommand::Link => say(&match link {
            Some(link) => format!(
                "Share link (it holds the token: hand it only to the agent you mean to let in):\n  {}\n",
                link.expose()
            ),
            None => "No share link for this relay URL.\n".to_owned(),
        }),
        PageCommand::Help => say(PAGE_HELP),
        PageCommand::Quit => return false,
        PageCommand::Nothing => {}
        PageCommand::Unknown(what) => say(&format!(
            "not understood: {}. {PAGE_HELP}",
            printable(&what)
        )),
    }
    true
}

fn describe_call(c: &human_plus_relay::CallRecord) -> String {
    let pinned = c
        .pinned
        .as_ref()
        .map(|p| format!(" pinned {}", printable(p.as_str().unwrap_or("?"))))
        .unwrap_or_default();
    let outcome = match &c.outcome {
        CallOutcome::Read => "read".to_owned(),
        CallOutcome::Written => "written".to_owned(),
        CallOutcome::Refused { current } => format!("refused, the sheet is at {current}"),
        CallOutcome::Failed { message } => format!("failed: {}", printable(message)),
    };
    format!(
        "{} {}{pinned} -> {outcome}",
        printable(&c.tool),
        printable(&c.arguments.to_string())
    )
}

fn describe_activity(a: &Value) -> String {
    let text = |v: &Value| v.as_str().map(printable).unwrap_or_default();
    format!(
        "{} ({}) {} {} [{}]",
        text(&a["actor"]["name"]),
        text(&a["actor"]["type"]),
        text(&a["action"]),
        text(&a["target"]),
        text(&a["priority"])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_commands() {
        assert_eq!(
            parse_page_command(" b4 = 12 "),
            PageCommand::Set("B4".into(), "12".into())
        );
        assert_eq!(
            parse_page_command("B4="),
            PageCommand::Set("B4".into(), String::new())
        );
        assert_eq!(parse_page_command("delete 3"), PageCommand::DeleteRow(3));
        assert_eq!(
            parse_page_command("redefine sheet_set_cell Writes a cell, and more."),
            PageCommand::Redefine("sheet_set_cell".into(), "Writes a cell, and more.".into())
        );
        assert!(matches!(
            parse_page_command("redefine sheet_set_cell"),
            PageCommand::Unknown(_)
        ));
        assert_eq!(parse_page_command("show"), PageCommand::Show);
        assert_eq!(parse_page_command("quit"), PageCommand::Quit);
        assert!(matches!(
            parse_page_command("x=1=2"),
            PageCommand::Unknown(_)
        ));
        assert!(matches!(
            parse_page_command("4B=1"),
            PageCommand::Unknown(_)
        ));
    }

    #[test]
    fn relay_prefixes() {
        for (raw, prefix) in [
            ("", ""),
            ("/", ""),
            ("agent-relay", "/agent-relay"),
            ("/agent-relay", "/agent-relay"),
            ("/agent-relay/", "/agent-relay"),
            ("a/b_c.d~e", "/a/b_c.d~e"),
        ] {
            assert_eq!(relay_prefix(raw).unwrap(), prefix, "{raw:?}");
        }
        for bad in [
            "//",
            "a//b",
            "../x",
            "a/./b",
            "a b",
            "a?b",
            "a#b",
            "a%2fb",
            "a\\b",
            "\u{e9}",
            &"x".repeat(201),
        ] {
            assert!(relay_prefix(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn grids() {
        let cells: BTreeMap<String, String> = [("A1", "Item"), ("B2", "3"), ("AA1", "far")]
            .into_iter()
            .map(|(a, v)| (a.to_owned(), v.to_owned()))
            .collect();
        let g = grid(&cells);
        assert!(g.contains("Item"), "{g}");
        // AA1 is beyond column L: the grid says so, naming it.
        assert_eq!(g.lines().count(), 4, "{g}");
        assert!(
            g.ends_with("(not shown: 1 cell beyond column L or row 50: AA1)\n"),
            "{g}"
        );
        assert_eq!(column_name(27), "AA");
        assert_eq!(parse_a1("AA10"), Some((10, 27)));

        // Everything inside the grid: no note.
        let inside: BTreeMap<String, String> = [("A1", "x"), ("L50", "y")]
            .into_iter()
            .map(|(a, v)| (a.to_owned(), v.to_owned()))
            .collect();
        assert!(!grid(&inside).contains("not shown"), "{}", grid(&inside));

        // Many beyond: five named, then an ellipsis; a long value cut and
        // marked.
        let mut many: BTreeMap<String, String> = (51..=58)
            .map(|r| (format!("A{r}"), "v".to_owned()))
            .collect();
        many.insert("B2".into(), "x".repeat(30));
        let g = grid(&many);
        assert!(
            g.contains(
                "(not shown: 8 cells beyond column L or row 50: A51, A52, A53, A54, A55, \u{2026})"
            ),
            "{g}"
        );
        assert!(g.contains(&format!("{}\u{2026}", "x".repeat(23))), "{g}");
        assert!(!g.contains(&"x".repeat(24)), "{g}");
        assert!(
            g.ends_with("(values longer than 24 characters are cut, ending with \u{2026})\n"),
            "{g}"
        );
    }

    #[test]
    fn the_share_link_shown_when_the_page_opens() {
        let token = RelayToken::new("hp_0123456789abcdef0123456789abcdef");
        let link = ShareLink::new(
            "http://127.0.0.1:8787",
            "my_session",
            &token,
            Some(TERMINAL_SURFACE_ID),
        );
        let text = share_link_text(&link, "http://127.0.0.1:8787");
        assert!(!text.contains(token.expose()), "{text}");
        assert!(
            text.contains("http://127.0.0.1:8787/my_session#token=\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}&surface=sheet%3Aterminal"),
            "{text}"
        );
        assert!(
            text.contains("human-plus join --name terminal-sheet --allow-insecure-loopback --allow-unverified-egress)"),
            "{text}"
        );
        let tls = ShareLink::new("https://relay.example", "my_session", &token, None);
        let text = share_link_text(&tls, "https://relay.example");
        assert!(
            text.contains("human-plus join --name terminal-sheet)"),
            "{text}"
        );
        // A relay URL no agent could read a link for: said, and no link.
        let lan = ShareLink::new("http://192.168.1.5:8787", "my_session", &token, None);
        let text = share_link_text(&lan, "http://192.168.1.5:8787");
        assert!(text.starts_with("No share link"), "{text}");
        assert!(!text.contains(token.expose()), "{text}");
        assert_eq!(parse_page_command("link"), PageCommand::Link);
    }
}
