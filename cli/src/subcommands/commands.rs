//! `tools`, `call`, `changes` and `announce`: one operation each, against a
//! real relay. Each run is a fresh attachment; `call --revision` and
//! `changes --since` carry a revision from an earlier run.

use std::fmt::Write as _;

use human_plus_core::{
    Activity, CallResult, Discovery, Priority, SurfaceChanges, ToolDefinition, ToolRefusal,
    ToolSummary, Withheld,
};
use serde_json::{Map, Value, json};

use crate::args::{AnnounceArgs, CallArgs, ChangesArgs, PriorityArg, ToolsArgs};
use crate::connecting::agent::store_revision;
use crate::connecting::connect::connect;
use crate::output::exit::{Failure, printable};

/// Why a tool was withheld, as a short code and a sentence.
#[must_use]
pub fn withheld_reason(w: &Withheld) -> (&'static str, String) {
    match &w.reason {
        ToolRefusal::Reserved(_) => (
            "reserved",
            "reserved for the person: a confirmation tool is never offered to an agent".to_owned(),
        ),
        ToolRefusal::NotAllowed(_) => (
            "not_allowed",
            "not in the trust allowlist (--allow)".to_owned(),
        ),
        ToolRefusal::MalformedName(_) => (
            "malformed_name",
            "not a well-formed tool name, so it is never offered".to_owned(),
        ),
        ToolRefusal::NotOffered(_) => (
            "duplicate",
            "listed more than once; only the first definition is offered".to_owned(),
        ),
        other => ("refused", other.to_string()),
    }
}

/// The `tools --json` document: admitted tools (name, digest,
/// description, inputSchema, and `claims` — `{"readOnly", "destructive"}`,
/// the surface's claims — when it claims anything), withheld ones (name,
/// code, reason) and the count of malformed entries. Its `tools` list is a
/// valid `--pins` file.
#[must_use]
pub fn discovery_json(d: &Discovery) -> Value {
    let tools: Vec<Value> = d
        .tools
        .iter()
        .map(|t| {
            let mut tool = json!({
                "name": t.name(),
                "digest": t.digest(),
                "description": t.description(),
                "inputSchema": t.input_schema(),
            });
            // MCP's spelling beside `inputSchema` (the library's JSON
            // writes `read_only`).
            let claims = d.claims_of(t.name());
            if !claims.is_empty() {
                let mut c = Map::new();
                if let Some(r) = claims.read_only {
                    c.insert("readOnly".into(), r.into());
                }
                if let Some(d) = claims.destructive {
                    c.insert("destructive".into(), d.into());
                }
                tool["claims"] = Value::Object(c);
            }
            tool
        })
        .collect();
    let withheld: Vec<Value> = d
        .withheld
        .iter()
        .map(|w| {
            let (code, reason) = withheld_reason(w);
            json!({"name": w.name, "code": code, "reason": reason})
        })
        .collect();
    json!({"tools": tools, "withheld": withheld, "malformed": d.malformed})
}

/// What a person reads of one admitted tool before trusting it
/// ([`ToolSummary`]): the first line of its description, its argument
/// names (required ones marked) and, when the surface claims anything about
/// its effects, those claims labelled as the surface's. Every string of the
/// surface's is escaped and bounded; the lines carry no indentation.
///
/// ```
/// use human_plus_cli::commands::tool_summary_lines;
/// use human_plus_core::{Discovery, ToolClaims, ToolDefinition};
/// use serde_json::json;
///
/// let tool = ToolDefinition::new(
///     "sheet_get_cell",
///     "Read one cell by A1 address.",
///     json!({"properties": {"address": {}, "sheet": {}}, "required": ["address"]}),
/// )?;
/// let mut d = Discovery { tools: vec![tool.clone()], ..Discovery::default() };
/// d.claims.insert("sheet_get_cell".into(), ToolClaims { read_only: Some(true), destructive: None });
/// assert_eq!(
///     tool_summary_lines(&d, &tool),
///     [
///         "Read one cell by A1 address.",
///         "arguments: address (required), sheet",
///         "the surface claims: read-only",
///     ]
/// );
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[must_use]
pub fn tool_summary_lines(d: &Discovery, tool: &ToolDefinition) -> Vec<String> {
    ToolSummary::of(tool, d.claims_of(tool.name())).lines()
}

/// The `tools` text: admitted tools with digests, each with what a person
/// needs to decide ([`tool_summary_lines`]), then what was withheld.
#[must_use]
pub fn discovery_text(d: &Discovery) -> String {
    let mut out = String::new();
    let width = d
        .tools
        .iter()
        .map(|t| printable(t.name()).chars().count())
        .chain(
            d.withheld
                .iter()
                .map(|w| printable(&w.name).chars().count()),
        )
        .max()
        .unwrap_or(0);
    let _ = writeln!(out, "admitted ({}):", d.tools.len());
    for t in &d.tools {
        let _ = writeln!(out, "  {:width$}  {}", printable(t.name()), t.digest());
        for line in tool_summary_lines(d, t) {
            let _ = writeln!(out, "      {line}");
        }
    }
    if !d.withheld.is_empty() {
        let _ = writeln!(out, "withheld ({}):", d.withheld.len());
        for w in &d.withheld {
            let _ = writeln!(
                out,
                "  {:width$}  {}",
                printable(&w.name),
                withheld_reason(w).1
            );
        }
    }
    if d.malformed > 0 {
        let _ = writeln!(
            out,
            "malformed: {} listed entr{} without a usable name or schema",
            d.malformed,
            if d.malformed == 1 { "y" } else { "ies" }
        );
    }
    out
}

/// Parses a JSON object argument (`None` is `{}`).
///
/// # Errors
/// A usage failure unless it is a JSON object.
pub fn parse_object(raw: Option<&str>, what: &str) -> Result<Value, Failure> {
    let Some(raw) = raw else {
        return Ok(Value::Object(Map::new()));
    };
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(Failure::usage(format!(
            "{what} must be a JSON object, e.g. '{{\"address\": \"B4\"}}'"
        ))),
        Err(e) => Err(Failure::usage(format!("{what} is not valid JSON: {e}"))),
    }
}

/// `human-plus tools`.
///
/// # Errors
/// The failure to report.
pub fn tools(args: &ToolsArgs) -> Result<String, Failure> {
    let c = connect(&args.connect, None)?;
    let d = c.agent.tools(&c.owner, c.id()).map_err(|e| c.fail(&e))?;
    Ok(if args.json {
        format!("{}\n", discovery_json(&d))
    } else {
        discovery_text(&d)
    })
}

/// The `call --json` document.
#[must_use]
pub fn call_json(r: &CallResult) -> Value {
    json!({
        "text": r.text,
        "revision": r.revision.as_ref().map(|v| v.token()),
        "pinned": r.pinned.as_ref().map(|v| v.token()),
        "revision_refused": r.revision_refused,
    })
}

/// `human-plus call`.
///
/// # Errors
/// The failure to report.
pub fn call(args: &CallArgs) -> Result<String, Failure> {
    let arguments = parse_object(args.arguments.as_deref(), "ARGS-JSON")?;
    let c = connect(&args.connect, None)?;
    if let Some(rev) = &args.revision {
        store_revision(c.agent.as_ref(), c.id(), rev, "human-plus call --revision")
            .map_err(|e| c.fail(&e))?;
    }
    let r = c
        .agent
        .call(&c.owner, c.id(), &args.tool, arguments)
        .map_err(|e| c.fail(&e))?;
    if args.json {
        return Ok(format!(
            "{}\n",
            c.secrets.redact(&call_json(&r).to_string())
        ));
    }
    // The result is the surface's words: its terminal escapes are shown,
    // never obeyed, and the secrets this process holds are taken out.
    let mut out = human_plus_core::escape_controls_keep_lines(&c.secrets.redact(&r.text));
    if !out.ends_with('\n') {
        out.push('\n');
    }
    match (&r.revision, &r.pinned) {
        (Some(rev), Some(pin)) => {
            let _ = writeln!(
                out,
                "revision {} (the call was pinned to {})",
                printable(rev.token()),
                printable(pin.token())
            );
        }
        (Some(rev), None) => {
            let _ = writeln!(
                out,
                "revision {} (pin later calls with --revision {})",
                printable(rev.token()),
                printable(rev.token())
            );
        }
        (None, Some(pin)) => {
            let _ = writeln!(
                out,
                "no revision in the result (the call was pinned to {})",
                printable(pin.token())
            );
        }
        (None, None) => {
            let _ = writeln!(
                out,
                "no revision in the result: this surface's writes cannot be pinned"
            );
        }
    }
    if r.revision_refused {
        let _ = writeln!(
            out,
            "the result's revision marker was over 512 bytes and was not kept"
        );
    }
    Ok(out)
}

/// The `changes` text: what is known, whom to defer to, the revision.
#[must_use]
pub fn changes_text(s: &SurfaceChanges) -> String {
    let mut out = s.describe();
    out.push('\n');
    for c in s.changes() {
        let defer = if c.deserves_deference() {
            "defer: re-read it, do not correct it"
        } else {
            "the agent's own"
        };
        let _ = writeln!(
            out,
            "  {}  {} by {}  ({defer})",
            printable(c.handle()),
            c.kind().as_str(),
            c.actor().as_str()
        );
    }
    if let Some(rev) = s.revision() {
        let _ = writeln!(out, "revision {}", printable(rev.token()));
    }
    out
}

/// `human-plus changes`.
///
/// # Errors
/// The failure to report.
pub fn changes(args: &ChangesArgs) -> Result<String, Failure> {
    let c = connect(&args.connect, None)?;
    if let Some(rev) = &args.since {
        store_revision(c.agent.as_ref(), c.id(), rev, "human-plus changes --since")
            .map_err(|e| c.fail(&e))?;
    }
    let s = c
        .agent
        .changes_since(&c.owner, c.id())
        .map_err(|e| c.fail(&e))?;
    Ok(if args.json {
        format!("{}\n", s.to_json())
    } else {
        changes_text(&s)
    })
}

/// The core priority of a command-line priority.
#[must_use]
pub fn priority(p: PriorityArg) -> Priority {
    match p {
        PriorityArg::Background => Priority::Background,
        PriorityArg::Normal => Priority::Normal,
        PriorityArg::Attention => Priority::Attention,
        PriorityArg::Blocking => Priority::Blocking,
    }
}

/// `human-plus announce`.
///
/// # Errors
/// The failure to report.
pub fn announce(args: &AnnounceArgs) -> Result<String, Failure> {
    // Over a Reverb channel an announcement is a whisper: the core joins
    // the channel for it, and every runtime writes it before the outcome.
    // Over a relay, nothing but the announcement is sent.
    let c = connect(&args.connect, None)?;
    let mut activity = Activity::new(&args.action).priority(priority(args.priority));
    if let Some(t) = &args.target {
        activity = activity.target(t);
    }
    if let Some(id) = &args.correlation_id {
        activity = activity.correlation_id(id);
    }
    c.agent
        .announce(&c.owner, c.id(), &activity)
        .map_err(|e| c.fail(&e))?;
    Ok(format!(
        "announced: {}{} ({})\n",
        printable(&args.action),
        args.target
            .as_deref()
            .map(|t| format!(" {}", printable(t)))
            .unwrap_or_default(),
        priority(args.priority)
    ))
}
