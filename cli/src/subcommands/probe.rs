//! `human-plus probe`: what a surface really does, observed rather than
//! claimed.
//!
//! What the probe sends, in order (each operation also runs the MCP
//! sequence the core always runs: `initialize` and
//! `notifications/initialized` once, `tools/list` before each step):
//!
//! 1. discovery (`tools/list`), admitted through local trust: `--allow` /
//!    `--every-tool` when given, else every tool (reserved confirmation
//!    tools are withheld under any policy);
//! 2. when a change-feed tool is admitted, ONE call of it through the
//!    manager's `changes_since` (no `since`: the attachment is new);
//! 3. only with `--read TOOL`: TOOL called with `--args`, pinned to the
//!    revision held (if the feed's answer carried one); then, when a
//!    revision has been minted, TOOL called again pinned to a revision the
//!    surface never issued (`human-plus-probe-stale-<random>`), to see
//!    whether a stale pin is refused.
//!
//! It never calls any other tool, never announces, never sends
//! `unregister`. `--read` must name a tool that changes nothing: the probe
//! calls it twice. A surface that refuses only markers older than its
//! current one and accepts markers it cannot parse reads as "not
//! enforced" here.

use std::fmt::Write as _;

use human_plus_core::{
    ChangeActor, ChangeFeed, ConflictDetection, Discovery, Error, SurfaceChanges, TrustPolicy, hex,
    is_change_feed_tool,
};
use human_plus_runtime::OsEntropy;
use serde_json::{Value, json};

use crate::args::ProbeArgs;
use crate::connecting::agent::store_revision;
use crate::connecting::connect::{Connection, connect};
use crate::output::exit::{Failure, printable};
use crate::subcommands::commands::{discovery_json, discovery_text, parse_object, withheld_reason};

/// What the probe saw of the change feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedFinding {
    /// The core's state after the probe.
    pub state: ChangeFeed,
    /// A short label: `attributed`, `offered, not attributed`, ...
    pub label: String,
    /// The feed tool called, if any.
    pub tool: Option<String>,
    /// How many changes it reported.
    pub changes: usize,
    /// Changes by actor: human, agent, other, unknown.
    pub by_actor: [usize; 4],
    /// Whether the answer was complete.
    pub complete: Option<bool>,
    /// The error code of a failed feed call.
    pub error: Option<String>,
    /// The finding in plain words.
    pub finding: String,
}

/// How the stale-pin experiment went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StalePin {
    /// Not tried (no `--read`, or nothing was minted).
    NotTried,
    /// Refused as stale: enforcement observed.
    Refused,
    /// Accepted: pins are not checked.
    Accepted,
    /// Failed otherwise (the error code).
    Failed(String),
}

impl StalePin {
    /// The wire value.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            StalePin::NotTried => "not_tried",
            StalePin::Refused => "refused",
            StalePin::Accepted => "accepted",
            StalePin::Failed(_) => "failed",
        }
    }
}

/// What the probe saw of conflict detection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictFinding {
    /// The core's state after the probe.
    pub state: ConflictDetection,
    /// A short label: `enforced`, `minted, not enforced`, ...
    pub label: String,
    /// The `--read` tool, if any.
    pub read_tool: Option<String>,
    /// The revision the surface minted, if any.
    pub revision: Option<String>,
    /// The stale-pin experiment.
    pub stale_pin: StalePin,
    /// The error code of a failed read.
    pub error: Option<String>,
    /// The finding in plain words.
    pub finding: String,
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    /// The surface id.
    pub surface: String,
    /// What discovery admitted and withheld.
    pub discovery: Discovery,
    /// The change feed.
    pub feed: FeedFinding,
    /// Conflict detection.
    pub conflict: ConflictFinding,
    /// The tool calls the probe made, in order.
    pub calls: Vec<String>,
}

/// Runs the probe over an attached connection.
///
/// # Errors
/// The failure to report when discovery fails (the feed and the reads
/// report their own failures inside the report).
pub fn probe(c: &Connection, read: Option<(&str, Value)>) -> Result<ProbeReport, Failure> {
    let discovery = c.agent.tools(&c.owner, c.id()).map_err(|e| c.fail(&e))?;
    let mut calls = Vec::new();
    let feed = observe_feed(c, &discovery, &mut calls);
    let conflict = observe_conflict(c, read, &mut calls);
    Ok(ProbeReport {
        surface: human_plus_core::surface_label(c.attachment.invitation().surface_id()).to_owned(),
        discovery,
        feed,
        conflict,
        calls,
    })
}

/// A revision marker as the probe's sentences quote it: only when it is a
/// plain identifier (the surface's word, in Human+'s sentence).
fn shown_revision(revision: Option<&str>) -> String {
    match revision {
        Some(r) if human_plus_core::is_plain_identifier(r) => r.to_owned(),
        Some(_) => "a marker that is not a plain identifier, not shown".to_owned(),
        None => String::new(),
    }
}

fn state_of<T>(
    c: &Connection,
    get: impl Fn(&human_plus_core::SurfaceAttachment) -> T,
    default: T,
) -> T {
    c.agent
        .status(&c.owner, c.id())
        .map_or(default, |a| get(&a))
}

fn observe_feed(c: &Connection, d: &Discovery, calls: &mut Vec<String>) -> FeedFinding {
    let tool = d
        .tools
        .iter()
        .find(|t| is_change_feed_tool(t.name()))
        .map(|t| t.name().to_owned());
    let mut f = FeedFinding {
        state: state_of(c, |a| a.change_feed(), ChangeFeed::NotObserved),
        label: String::new(),
        tool: tool.clone(),
        changes: 0,
        by_actor: [0; 4],
        complete: None,
        error: None,
        finding: String::new(),
    };
    let Some(tool) = tool else {
        if let Some(w) = d.withheld.iter().find(|w| is_change_feed_tool(&w.name)) {
            f.label = "not admitted".into();
            f.finding = format!(
                "The surface lists `{}`, but local trust withheld it ({}), so the probe did not call it.",
                printable(&w.name),
                withheld_reason(w).1
            );
        } else {
            f.label = "unavailable".into();
            f.finding = "The surface offers no change-feed tool (changes_since, surface_changes, what_changed or changes), so an agent cannot learn what a person changed; an empty answer would not be evidence that nothing changed.".into();
        }
        return f;
    };
    calls.push(format!("{} (change feed, no since)", printable(&tool)));
    let shown = printable(&tool);
    match c.agent.changes_since(&c.owner, c.id()) {
        Err(e) => {
            f.label = "offered, failed".into();
            f.finding = format!(
                "The surface offers `{shown}`, but calling it failed: {} ({}).",
                e.code(),
                first_line(&e)
            );
            f.error = Some(e.code().to_owned());
        }
        Ok(s) => read_feed_answer(&mut f, &s, &shown),
    }
    f.state = state_of(c, |a| a.change_feed(), f.state);
    f
}

fn read_feed_answer(f: &mut FeedFinding, s: &SurfaceChanges, shown: &str) {
    f.changes = s.changes().len();
    f.complete = Some(s.complete());
    for change in s.changes() {
        let slot = match change.actor() {
            ChangeActor::Human => 0,
            ChangeActor::Agent => 1,
            ChangeActor::Other => 2,
            _ => 3,
        };
        if let Some(n) = f.by_actor.get_mut(slot) {
            *n += 1;
        }
    }
    let [human, agent, other, _] = f.by_actor;
    let n = f.changes;
    (f.label, f.finding) = if n == 0 {
        (
            "offered, attribution not observed".into(),
            format!(
                "`{shown}` answered and reported no changes, so whether it names who made a change is not observable yet: edit something on the surface and probe again."
            ),
        )
    } else if human + other > 0 {
        (
            "attributed".into(),
            format!(
                "`{shown}` reported {n} change(s) and named who made them ({human} by a person, {agent} by an agent, {other} by someone else), so an agent can defer to a person's edits instead of reverting them."
            ),
        )
    } else if agent > 0 {
        (
            "offered, attribution not observed".into(),
            format!(
                "`{shown}` reported {n} change(s), naming only an agent as actor ({agent}); no person's change has been seen yet, so attribution of a person's edit is not proven."
            ),
        )
    } else {
        (
            "offered, not attributed".into(),
            format!(
                "`{shown}` reported {n} change(s) without naming who made them, so an agent must defer to all of them: none can be shown to be its own, and it cannot tell a person's edit from its own last write."
            ),
        )
    };
    if !s.complete() {
        f.finding
            .push_str(" The surface declared the answer PARTIAL: some changes are not in it.");
    }
}

fn first_line(e: &Error) -> String {
    match e {
        Error::ToolFailed { .. } => "the tool reported an error; check --args".to_owned(),
        Error::SurfaceError(s) => format!(
            "the surface answered with a JSON-RPC error{}",
            s.code.map(|c| format!(" {c}")).unwrap_or_default()
        ),
        e => human_plus_core::redact_text(e.to_string().lines().next().unwrap_or_default()),
    }
}

fn observe_conflict(
    c: &Connection,
    read: Option<(&str, Value)>,
    calls: &mut Vec<String>,
) -> ConflictFinding {
    let held = || {
        c.agent
            .status(&c.owner, c.id())
            .ok()
            .and_then(|a| a.revision().map(|r| r.token().to_owned()))
    };
    let mut f = ConflictFinding {
        state: state_of(
            c,
            |a| a.conflict_detection(),
            ConflictDetection::NotObserved,
        ),
        label: String::new(),
        read_tool: read.as_ref().map(|(t, _)| (*t).to_owned()),
        revision: held(),
        stale_pin: StalePin::NotTried,
        error: None,
        finding: String::new(),
    };
    let Some((tool, args)) = read else {
        (f.label, f.finding) = match f.state {
            ConflictDetection::Minted => (
                "minted, enforcement not observed".into(),
                format!(
                    "The change feed's answer carried a revision ({}), so calls are pinned. Whether the surface refuses a stale pin was not tested: pass --read TOOL (a read-only tool) to test it.",
                    shown_revision(f.revision.as_deref())
                ),
            ),
            _ => (
                "not observed".into(),
                "No call was made that could return a revision: pass --read TOOL (a read-only tool) to observe whether the surface mints revisions and refuses a stale pin.".into(),
            ),
        };
        return f;
    };
    let shown = printable(tool);
    calls.push(format!("{shown} (--read)"));
    match c.agent.call(&c.owner, c.id(), tool, args.clone()) {
        Err(e) => {
            f.label = "not observed".into();
            f.finding = format!("`{shown}` failed: {} ({}).", e.code(), first_line(&e));
            f.error = Some(e.code().to_owned());
            f.state = state_of(c, |a| a.conflict_detection(), f.state);
            return f;
        }
        Ok(r) => {
            f.revision = r
                .revision
                .as_ref()
                .map(|v| v.token().to_owned())
                .or_else(held);
        }
    }
    f.state = state_of(c, |a| a.conflict_detection(), f.state);
    if f.state != ConflictDetection::Minted {
        f.label = "unavailable".into();
        f.finding = format!(
            "`{shown}` answered without a revision marker, so calls cannot be pinned: a person's concurrent edit would be overwritten silently."
        );
        return f;
    }
    let rev = shown_revision(f.revision.as_deref());
    let mut nonce = [0u8; 6];
    human_plus_core::Entropy::fill_bytes(&mut OsEntropy, &mut nonce);
    let stale = format!("human-plus-probe-stale-{}", hex(&nonce));
    if let Err(e) = store_revision(c.agent.as_ref(), c.id(), &stale, "human-plus probe") {
        f.label = "minted, enforcement not observed".into();
        f.finding = format!(
            "`{shown}` returned revision {rev}; the stale-pin test could not run ({}).",
            e.code()
        );
        return f;
    }
    calls.push(format!(
        "{shown} (--read, pinned to a revision the surface never issued)"
    ));
    f.stale_pin = match c.agent.call(&c.owner, c.id(), tool, args) {
        Err(Error::SurfaceChangedUnderYou(_)) => StalePin::Refused,
        Ok(_) => StalePin::Accepted,
        Err(e) => StalePin::Failed(e.code().to_owned()),
    };
    f.state = state_of(c, |a| a.conflict_detection(), f.state);
    (f.label, f.finding) = match &f.stale_pin {
        StalePin::Refused => (
            "enforced".into(),
            format!(
                "`{shown}` returned revision {rev}, and the same call pinned to a revision the surface never issued was refused as stale: a write made from an out-of-date read would be refused, not applied."
            ),
        ),
        StalePin::Accepted => (
            "minted, not enforced".into(),
            format!(
                "`{shown}` returned revision {rev}, but the same call pinned to a revision the surface never issued was accepted: the surface does not check pins, so a person's concurrent edit would still be lost."
            ),
        ),
        StalePin::Failed(code) => {
            f.error = Some(code.clone());
            (
                "minted, enforcement unknown".into(),
                format!(
                    "`{shown}` returned revision {rev}; the call pinned to a revision the surface never issued failed with {code}, not with a recognised conflict."
                ),
            )
        }
        StalePin::NotTried => (String::new(), String::new()),
    };
    f
}

/// The `probe --json` document.
#[must_use]
pub fn report_json(r: &ProbeReport) -> Value {
    let mut doc = discovery_json(&r.discovery);
    let [human, agent, other, unknown] = r.feed.by_actor;
    if let Value::Object(map) = &mut doc {
        map.insert("surface".into(), json!(r.surface));
        map.insert(
            "change_feed".into(),
            json!({
                "state": r.feed.state.as_str(),
                "label": r.feed.label,
                "tool": r.feed.tool,
                "changes": r.feed.changes,
                "by_actor": {"human": human, "agent": agent, "other": other, "unknown": unknown},
                "complete": r.feed.complete,
                "error": r.feed.error,
                "finding": r.feed.finding,
            }),
        );
        map.insert(
            "conflict_detection".into(),
            json!({
                "state": r.conflict.state.as_str(),
                "label": r.conflict.label,
                "read_tool": r.conflict.read_tool,
                "revision": r.conflict.revision,
                "stale_pin": r.conflict.stale_pin.as_str(),
                "error": r.conflict.error,
                "finding": r.conflict.finding,
            }),
        );
        map.insert("calls".into(), json!(r.calls));
    }
    doc
}

/// The `probe` text.
#[must_use]
pub fn report_text(r: &ProbeReport) -> String {
    let mut out = format!("Surface {}\n\n", printable(&r.surface));
    out.push_str(&discovery_text(&r.discovery));
    let _ = writeln!(out, "\nChange feed: {}\n  {}", r.feed.label, r.feed.finding);
    let _ = writeln!(
        out,
        "\nConflict detection: {}\n  {}",
        r.conflict.label, r.conflict.finding
    );
    if r.calls.is_empty() {
        out.push_str("\nThe probe called no tool (discovery only).\n");
    } else {
        let _ = writeln!(out, "\nThe probe called: {}.", r.calls.join("; "));
    }
    out
}

/// `human-plus probe`.
///
/// # Errors
/// The failure to report.
pub fn run(args: &ProbeArgs) -> Result<String, Failure> {
    let read_args = parse_object(args.read_args.as_deref(), "--args")?;
    let c = connect(
        &args.connect,
        Some(TrustPolicy::every_tool(human_plus_core::NO_PINS)),
    )?;
    let report = probe(&c, args.read.as_deref().map(|t| (t, read_args)))?;
    Ok(if args.json {
        format!("{}\n", report_json(&report))
    } else {
        report_text(&report)
    })
}
