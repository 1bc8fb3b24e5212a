//! The demo surface's state and its MCP server: a one-sheet workbook, the
//! Human+ half of the contract (revisions, stale-pin refusal, an attributed
//! change feed), and the records tests assert on. Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::error::SurfaceError;
use super::record::{Actor, CallOutcome, CallRecord, Change, Notification};

/// How the surface treats revisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RevisionMode {
    /// Mint `_meta.revision` on every tool result and refuse a stale pin
    /// with a JSON-RPC 409 (default).
    #[default]
    Enforced,
    /// Mint revisions but read the pin nowhere: a stale pinned call is
    /// applied (the "first integrator" surface).
    MintOnly,
    /// Mint nothing and ignore pins.
    Off,
}

/// The only sheet of the demo workbook.
pub(crate) const SHEET: &str = "Sheet1";
/// The protocol version MicroMcpServer answers whatever is asked.
pub(crate) const PROTOCOL_VERSION: &str = "2025-06-18";
/// Largest range `sheet_get_range` answers.
const MAX_RANGE_CELLS: u64 = 10_000;
/// Largest column (ZZZ) and row accepted in an address.
const MAX_COL: u32 = 18_278;
const MAX_ROW: u32 = 1_048_576;
/// Most records kept of each kind (oldest dropped), so a hostile peer cannot
/// grow the surface without bound.
const MAX_RECORDS: usize = 10_000;

/// What a surface with Human+ behaviour switched on or off does.
#[derive(Debug, Clone)]
pub(crate) struct Behaviour {
    pub(crate) revisions: RevisionMode,
    pub(crate) change_feed: bool,
    pub(crate) feed_attribution: bool,
    pub(crate) feed_complete: bool,
    /// A read is answered whatever its pin.
    pub(crate) stale_reads: bool,
    /// A stale refusal names `current`.
    pub(crate) current_in_refusal: bool,
    pub(crate) server_name: String,
    pub(crate) server_version: String,
    /// MicroMcpServer's `protocolVersions` option (newest first): a listed
    /// requested version is echoed, else the first; empty answers
    /// [`PROTOCOL_VERSION`] whatever was asked.
    pub(crate) protocol_versions: Vec<String>,
}

/// The sheet and everything recorded about the session.
#[derive(Debug, Default)]
pub(crate) struct Sheet {
    /// (row, col) -> value; both 1-based.
    cells: BTreeMap<(u32, u32), String>,
    counter: u64,
    changes: Vec<(u64, Change)>,
    pub(crate) calls: Vec<CallRecord>,
    pub(crate) notifications: Vec<Notification>,
    pub(crate) peers: BTreeSet<String>,
    /// The method of every request received, in order.
    pub(crate) requests: Vec<String>,
    /// How the tools differ from the demo's set (changed while serving).
    pub(crate) tool_edits: ToolEdits,
}

/// Changes to the demo's tool set made while the surface serves: what a
/// page does when a component mounts, unmounts or is redefined.
#[derive(Debug, Default, Clone)]
pub(crate) struct ToolEdits {
    /// Tool name -> a new description (changes its digest).
    pub(crate) descriptions: BTreeMap<String, String>,
    /// Tools no longer offered.
    pub(crate) removed: BTreeSet<String>,
    /// Tools offered besides the demo's (whole definitions).
    pub(crate) added: Vec<Value>,
}

/// The default content: a small inventory.
pub(crate) fn default_cells() -> Vec<(String, String)> {
    [
        ("A1", "Item"),
        ("B1", "Qty"),
        ("C1", "Price"),
        ("A2", "Apples"),
        ("B2", "3"),
        ("C2", "0.50"),
        ("A3", "Pears"),
        ("B3", "5"),
        ("C3", "0.75"),
        ("A4", "Plums"),
        ("B4", "7"),
        ("C4", "1.20"),
    ]
    .into_iter()
    .map(|(a, v)| (a.to_owned(), v.to_owned()))
    .collect()
}

/// Parses an A1 address (case-insensitive, surrounding spaces allowed)
/// into (row, col).
pub(crate) fn parse_address(raw: &str) -> Option<(u32, u32)> {
    let s = raw.trim();
    let letters = s.bytes().take_while(u8::is_ascii_alphabetic).count();
    let digits = &s[letters..];
    if letters == 0 || letters > 3 || digits.is_empty() || digits.len() > 7 {
        return None;
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    let mut col: u32 = 0;
    for b in s[..letters].bytes() {
        col = col * 26 + u32::from(b.to_ascii_uppercase() - b'A' + 1);
    }
    let row: u32 = digits.parse().ok()?;
    (col <= MAX_COL && (1..=MAX_ROW).contains(&row)).then_some((row, col))
}

/// Formats (row, col) as an A1 address.
pub(crate) fn format_address(row: u32, col: u32) -> String {
    let mut letters = Vec::new();
    let mut c = col;
    while c > 0 {
        let rem = (c - 1) % 26;
        letters.push(char::from(b'A' + u8::try_from(rem).unwrap_or(0)));
        c = (c - 1) / 26;
    }
    letters.reverse();
    let mut s: String = letters.into_iter().collect();
    s.push_str(&row.to_string());
    s
}

fn push_bounded<T>(list: &mut Vec<T>, item: T) {
    if list.len() >= MAX_RECORDS {
        list.remove(0);
    }
    list.push(item);
}

impl Sheet {
    pub(crate) fn new(cells: Vec<(String, String)>) -> Result<Sheet, SurfaceError> {
        let mut sheet = Sheet {
            counter: 1,
            ..Sheet::default()
        };
        for (address, value) in cells {
            let key = parse_address(&address).ok_or(SurfaceError::InvalidAddress(address))?;
            if !value.is_empty() {
                sheet.cells.insert(key, value);
            }
        }
        Ok(sheet)
    }

    pub(crate) fn revision(&self) -> String {
        format!("r{}", self.counter)
    }

    pub(crate) fn cell(&self, address: &str) -> Option<String> {
        parse_address(address).and_then(|k| self.cells.get(&k).cloned())
    }

    pub(crate) fn cells(&self) -> BTreeMap<String, String> {
        self.cells
            .iter()
            .map(|((r, c), v)| (format_address(*r, *c), v.clone()))
            .collect()
    }

    pub(crate) fn changes(&self) -> Vec<Change> {
        self.changes.iter().map(|(_, c)| c.clone()).collect()
    }

    // ------------------------------------------------------------- writes

    /// Sets (or, with an empty value, clears) a cell; bumps the revision and
    /// records an attributed change. Returns the new revision.
    pub(crate) fn set_cell(
        &mut self,
        actor: Actor,
        address: &str,
        value: &str,
    ) -> Result<String, SurfaceError> {
        let key = parse_address(address)
            .ok_or_else(|| SurfaceError::InvalidAddress(address.to_owned()))?;
        let before = if value.is_empty() {
            self.cells.remove(&key)
        } else {
            self.cells.insert(key, value.to_owned())
        };
        let change = match (before.is_some(), value.is_empty()) {
            (_, true) => "deleted",
            (false, false) => "created",
            (true, false) => "updated",
        };
        let handle = format_address(key.0, key.1);
        Ok(self.record_change(
            actor,
            handle.clone(),
            change,
            "cell",
            format!("{SHEET}!{handle}"),
        ))
    }

    /// Deletes a row, shifting the rows below it up. Returns the new revision.
    pub(crate) fn delete_row(&mut self, actor: Actor, row: u32) -> Result<String, SurfaceError> {
        if !(1..=MAX_ROW).contains(&row) {
            return Err(SurfaceError::InvalidAddress(format!("row {row}")));
        }
        let old = std::mem::take(&mut self.cells);
        for ((r, c), v) in old {
            if r < row {
                self.cells.insert((r, c), v);
            } else if r > row {
                self.cells.insert((r - 1, c), v);
            }
        }
        Ok(self.record_change(
            actor,
            format!("row:{row}"),
            "deleted",
            "row",
            format!("{SHEET} row {row}"),
        ))
    }

    fn record_change(
        &mut self,
        actor: Actor,
        handle: String,
        change: &str,
        kind: &str,
        label: String,
    ) -> String {
        self.counter += 1;
        let revision = self.revision();
        let entry = Change {
            revision: revision.clone(),
            handle,
            change: change.to_owned(),
            actor,
            kind: kind.to_owned(),
            label,
        };
        push_bounded(&mut self.changes, (self.counter, entry));
        revision
    }

    // ---------------------------------------------------------------- MCP

    /// Handles one inbound frame; returns the response frame to post, if any.
    pub(crate) fn handle_frame(&mut self, behaviour: &Behaviour, raw: &str) -> Option<Value> {
        let Ok(Value::Object(frame)) = serde_json::from_str::<Value>(raw) else {
            // Not JSON, or a batch: MicroMcpServer ignores both silently.
            return None;
        };
        let method = frame.get("method").and_then(Value::as_str)?.to_owned();
        let params = frame.get("params").cloned().unwrap_or(Value::Null);
        let id = frame.get("id").filter(|id| !id.is_null()).cloned();
        let Some(id) = id else {
            self.notification(&method, params);
            return None;
        };
        push_bounded(&mut self.requests, method.clone());
        let outcome = match method.as_str() {
            "initialize" => Ok(self.initialize(behaviour, &params)),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": self.tools(behaviour) })),
            "tools/call" => self.tools_call(behaviour, &params),
            other => Err(rpc_error(
                -32601,
                format!("Unsupported method: {other}"),
                None,
            )),
        };
        Some(match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        })
    }

    /// The tools offered now: the demo's, with the edits made since.
    pub(crate) fn tools(&self, behaviour: &Behaviour) -> Vec<Value> {
        let edits = &self.tool_edits;
        let mut tools: Vec<Value> = tool_definitions(behaviour)
            .into_iter()
            .filter(|t| {
                t.get("name")
                    .and_then(Value::as_str)
                    .is_none_or(|n| !edits.removed.contains(n))
            })
            .map(|mut t| {
                let name = t.get("name").and_then(Value::as_str).map(str::to_owned);
                if let Some(d) = name.and_then(|n| edits.descriptions.get(&n)) {
                    t["description"] = Value::String(d.clone());
                }
                t
            })
            .collect();
        tools.extend(edits.added.iter().cloned());
        tools
    }

    fn notification(&mut self, method: &str, params: Value) {
        let subscriber = params
            .get("subscriberId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (method, subscriber) {
            ("notifications/peer_joined", Some(id)) if self.peers.len() < MAX_RECORDS => {
                self.peers.insert(id);
            }
            ("notifications/peer_left", Some(id)) => {
                self.peers.remove(&id);
            }
            _ => {}
        }
        push_bounded(
            &mut self.notifications,
            Notification {
                method: method.to_owned(),
                params,
            },
        );
    }

    fn initialize(&self, behaviour: &Behaviour, params: &Value) -> Value {
        let asked = params.get("protocolVersion").and_then(Value::as_str);
        let version = match behaviour.protocol_versions.first() {
            None => PROTOCOL_VERSION,
            Some(first) => asked
                .filter(|a| behaviour.protocol_versions.iter().any(|v| v == a))
                .unwrap_or(first),
        };
        json!({
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {
                "name": behaviour.server_name,
                "version": behaviour.server_version,
                "title": "Human+ demo sheet",
            },
            "instructions": "A small spreadsheet a person has open. Read before you write; every result carries _meta.revision; pin writes to it.",
        })
    }

    fn tools_call(&mut self, behaviour: &Behaviour, params: &Value) -> Result<Value, Value> {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Err(rpc_error(-32602, "tools/call requires `name`".into(), None));
        };
        let arguments = match params.get("arguments") {
            Some(Value::Object(map)) => Value::Object(map.clone()),
            _ => Value::Object(Map::new()),
        };
        let pinned = params
            .get("_meta")
            .and_then(|m| m.get("revision"))
            .filter(|r| !r.is_null())
            .cloned();
        let known = self
            .tools(behaviour)
            .iter()
            .any(|t| t.get("name").and_then(Value::as_str) == Some(name));
        let mut record = CallRecord {
            tool: name.to_owned(),
            arguments: arguments.clone(),
            pinned: pinned.clone(),
            outcome: CallOutcome::Read,
        };
        if !known {
            let message = format!("Unknown tool: {name}");
            record.outcome = CallOutcome::Failed {
                message: message.clone(),
            };
            push_bounded(&mut self.calls, record);
            return Err(rpc_error(-32601, message, None));
        }
        let current = self.revision();
        let read = matches!(
            name,
            "sheet_describe" | "sheet_get_cell" | "sheet_get_range"
        );
        let enforced = behaviour.revisions == RevisionMode::Enforced
            && name != "changes_since"
            && !(read && behaviour.stale_reads);
        if enforced
            && let Some(pin) = &pinned
            && pin.as_str() != Some(current.as_str())
        {
            let shown = pin.as_str().map_or_else(|| pin.to_string(), str::to_owned);
            record.outcome = CallOutcome::Refused {
                current: current.clone(),
            };
            push_bounded(&mut self.calls, record);
            let (message, data) = if behaviour.current_in_refusal {
                (
                    format!(
                        "Revision mismatch: the sheet is at {current}, this call was pinned to {shown}. Nothing was applied; read the sheet again before writing."
                    ),
                    json!({"code": "revision_mismatch", "current": current, "pinned": pin}),
                )
            } else {
                (
                    format!(
                        "Revision mismatch: this call was pinned to {shown}, which is not the sheet's revision. Nothing was applied; read the sheet again before writing."
                    ),
                    json!({"code": "revision_mismatch", "pinned": pin}),
                )
            };
            return Err(rpc_error(409, message, Some(data)));
        }
        let (mut result, outcome) = self.run_tool(behaviour, name, &arguments);
        if behaviour.revisions != RevisionMode::Off
            && let Value::Object(map) = &mut result
        {
            let meta = map
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(meta) = meta {
                meta.insert("revision".into(), Value::String(self.revision()));
            }
        }
        record.outcome = outcome;
        push_bounded(&mut self.calls, record);
        Ok(result)
    }

    fn run_tool(
        &mut self,
        behaviour: &Behaviour,
        name: &str,
        args: &Value,
    ) -> (Value, CallOutcome) {
        let sheet = args.get("sheet").and_then(Value::as_str);
        if sheet.is_some_and(|s| s != SHEET) {
            return failed(format!("Unknown sheet: {}", sheet.unwrap_or_default()));
        }
        match name {
            "sheet_describe" => (self.describe(), CallOutcome::Read),
            "sheet_get_cell" => self.get_cell(args),
            "sheet_get_range" => self.get_range(args),
            "sheet_set_cell" => self.tool_set_cell(args),
            "sheet_delete_row" => self.tool_delete_row(args),
            "changes_since" => self.changes_since(behaviour, args),
            "sheet_confirm_edit" => {
                failed("No pending edit with that id: nothing was confirmed.".to_owned())
            }
            extra if extra.starts_with("extra_tool_") => (
                text_result(format!("{extra}: nothing to report."), None),
                CallOutcome::Read,
            ),
            other => failed(format!("Unknown tool: {other}")),
        }
    }

    fn describe(&self) -> Value {
        let columns = self.cells.keys().map(|(_, c)| *c).max().unwrap_or(0);
        let count = self.cells.len();
        text_result(
            format!("Active: {SHEET}\n{SHEET}: {count} cells, {columns} columns"),
            Some(json!({
                "activeSheetId": SHEET,
                "sheets": [{
                    "id": SHEET, "name": SHEET, "cellCount": count,
                    "columnCount": columns, "frozenRows": 0, "frozenCols": 0,
                }],
            })),
        )
    }

    fn get_cell(&self, args: &Value) -> (Value, CallOutcome) {
        let Some((row, col)) = args
            .get("address")
            .and_then(Value::as_str)
            .and_then(parse_address)
        else {
            return failed("`address` must be an A1 address such as B4.".to_owned());
        };
        let address = format_address(row, col);
        match self.cells.get(&(row, col)) {
            Some(v) => (
                text_result(
                    v.clone(),
                    Some(json!({"sheet": SHEET, "address": address, "value": v})),
                ),
                CallOutcome::Read,
            ),
            None => (
                text_result(
                    "(empty)".into(),
                    Some(json!({"sheet": SHEET, "address": address, "value": null})),
                ),
                CallOutcome::Read,
            ),
        }
    }

    fn get_range(&self, args: &Value) -> (Value, CallOutcome) {
        let start = args
            .get("start")
            .and_then(Value::as_str)
            .and_then(parse_address);
        let end = args
            .get("end")
            .and_then(Value::as_str)
            .and_then(parse_address);
        let (Some(a), Some(b)) = (start, end) else {
            return failed("`start` and `end` must be A1 addresses such as A1 and C4.".to_owned());
        };
        let (r0, r1) = (a.0.min(b.0), a.0.max(b.0));
        let (c0, c1) = (a.1.min(b.1), a.1.max(b.1));
        let size = u64::from(r1 - r0 + 1) * u64::from(c1 - c0 + 1);
        if size > MAX_RANGE_CELLS {
            return failed(format!("Range too large: at most {MAX_RANGE_CELLS} cells."));
        }
        let mut values = Vec::new();
        let mut lines = Vec::new();
        for r in r0..=r1 {
            let row: Vec<Value> = (c0..=c1)
                .map(|c| {
                    self.cells
                        .get(&(r, c))
                        .map_or(Value::Null, |v| Value::String(v.clone()))
                })
                .collect();
            lines.push(
                row.iter()
                    .map(|v| v.as_str().unwrap_or(""))
                    .collect::<Vec<_>>()
                    .join("\t"),
            );
            values.push(Value::Array(row));
        }
        let (start, end) = (format_address(r0, c0), format_address(r1, c1));
        (
            text_result(
                lines.join("\n"),
                Some(json!({"sheet": SHEET, "start": start, "end": end, "values": values})),
            ),
            CallOutcome::Read,
        )
    }

    fn tool_set_cell(&mut self, args: &Value) -> (Value, CallOutcome) {
        let Some(address) = args.get("address").and_then(Value::as_str) else {
            return failed("`address` must be an A1 address such as B4.".to_owned());
        };
        let value = match args.get("value") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(Value::Number(n)) => n.to_string(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(_) => return failed("`value` must be a string or a number.".to_owned()),
        };
        match self.set_cell(Actor::Agent, address, &value) {
            Ok(_) => {
                let (row, col) = parse_address(address).unwrap_or((0, 0));
                let address = format_address(row, col);
                (
                    text_result(
                        format!("{SHEET}!{address} = {value}"),
                        Some(json!({"sheet": SHEET, "address": address, "value": value})),
                    ),
                    CallOutcome::Written,
                )
            }
            Err(_) => failed("`address` must be an A1 address such as B4.".to_owned()),
        }
    }

    fn tool_delete_row(&mut self, args: &Value) -> (Value, CallOutcome) {
        let row = match args.get("row") {
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        let Some(row) = row
            .and_then(|r| u32::try_from(r).ok())
            .filter(|r| (1..=MAX_ROW).contains(r))
        else {
            return failed("`row` must be a row number, 1 or more.".to_owned());
        };
        match self.delete_row(Actor::Agent, row) {
            Ok(_) => (
                text_result(
                    format!("Deleted row {row} of {SHEET}"),
                    Some(json!({"sheet": SHEET, "row": row})),
                ),
                CallOutcome::Written,
            ),
            Err(e) => failed(e.to_string()),
        }
    }

    fn changes_since(&self, behaviour: &Behaviour, args: &Value) -> (Value, CallOutcome) {
        let since = match args.get("since") {
            None | Some(Value::Null) => Some(0),
            Some(Value::String(s)) => s
                .trim()
                .strip_prefix('r')
                .unwrap_or(s.trim())
                .parse::<u64>()
                .ok(),
            Some(Value::Number(n)) => n.as_u64(),
            Some(_) => None,
        };
        let Some(since) = since.filter(|s| *s <= self.counter) else {
            return failed(
                "Unknown revision: pass a revision this sheet returned, such as r3.".to_owned(),
            );
        };
        let rows: Vec<Value> = self
            .changes
            .iter()
            .filter(|(n, _)| *n > since)
            .map(|(_, c)| {
                let mut row = Map::new();
                row.insert("handle".into(), Value::String(c.handle.clone()));
                row.insert("change".into(), Value::String(c.change.clone()));
                if behaviour.feed_attribution {
                    row.insert("actor_type".into(), Value::String(c.actor.as_str().into()));
                }
                row.insert("kind".into(), Value::String(c.kind.clone()));
                row.insert("label".into(), Value::String(c.label.clone()));
                row.insert("revision".into(), Value::String(c.revision.clone()));
                Value::Object(row)
            })
            .collect();
        let text = if rows.is_empty() {
            format!("No changes since r{since}.")
        } else {
            let mut lines = vec![format!("{} change(s) since r{since}:", rows.len())];
            for (_, c) in self.changes.iter().filter(|(n, _)| *n > since) {
                if behaviour.feed_attribution {
                    lines.push(format!(
                        "{} {} by {} ({})",
                        c.handle,
                        c.change,
                        c.actor.as_str(),
                        c.revision
                    ));
                } else {
                    lines.push(format!("{} {} ({})", c.handle, c.change, c.revision));
                }
            }
            lines.join("\n")
        };
        let mut meta = Map::new();
        meta.insert("complete".into(), Value::Bool(behaviour.feed_complete));
        meta.insert("changes".into(), Value::Array(rows));
        (
            json!({"content": [{"type": "text", "text": text}], "_meta": Value::Object(meta)}),
            CallOutcome::Read,
        )
    }
}

fn text_result(text: String, structured: Option<Value>) -> Value {
    let mut map = Map::new();
    map.insert("content".into(), json!([{"type": "text", "text": text}]));
    if let Some(s) = structured {
        map.insert("structuredContent".into(), s);
    }
    Value::Object(map)
}

fn failed(message: String) -> (Value, CallOutcome) {
    (
        json!({"content": [{"type": "text", "text": message.clone()}], "isError": true}),
        CallOutcome::Failed { message },
    )
}

fn rpc_error(code: i64, message: String, data: Option<Value>) -> Value {
    let mut map = Map::new();
    map.insert("code".into(), Value::from(code));
    map.insert("message".into(), Value::String(message));
    if let Some(data) = data {
        map.insert("data".into(), data);
    }
    Value::Object(map)
}

fn schema(properties: Value, required: &[&str]) -> Value {
    let mut map = Map::new();
    map.insert("type".into(), Value::String("object".into()));
    map.insert("properties".into(), properties);
    if !required.is_empty() {
        map.insert("required".into(), json!(required));
    }
    map.insert("additionalProperties".into(), Value::Bool(false));
    Value::Object(map)
}

/// The tools this surface offers, as `tools/list` answers them.
pub(crate) fn tool_definitions(behaviour: &Behaviour) -> Vec<Value> {
    let sheet = json!({"type": "string", "description": "Sheet id; defaults to the active sheet."});
    let mut tools = vec![
        json!({
            "name": "sheet_describe",
            "description": "Describe the workbook: its sheets and how many cells each holds.",
            "inputSchema": schema(json!({}), &[]),
        }),
        json!({
            "name": "sheet_get_cell",
            "description": "Read one cell by A1 address.",
            "inputSchema": schema(json!({"sheet": sheet, "address": {"type": "string", "description": "A1 address, e.g. B4."}}), &["address"]),
        }),
        json!({
            "name": "sheet_get_range",
            "description": "Read a rectangular range of cells (values, row by row).",
            "inputSchema": schema(json!({
                "sheet": sheet,
                "start": {"type": "string", "description": "Top-left A1 address."},
                "end": {"type": "string", "description": "Bottom-right A1 address."},
            }), &["start", "end"]),
        }),
        json!({
            "name": "sheet_set_cell",
            "description": "Write one cell. A value starting with = is a formula; an empty value clears the cell.",
            "inputSchema": schema(json!({
                "sheet": sheet,
                "address": {"type": "string", "description": "A1 address, e.g. B4."},
                "value": {"type": "string", "description": "The new value."},
            }), &["address", "value"]),
        }),
        json!({
            "name": "sheet_delete_row",
            "description": "Delete a row; the rows below move up.",
            "inputSchema": schema(json!({"sheet": sheet, "row": {"type": "integer", "minimum": 1, "description": "1-based row number."}}), &["row"]),
        }),
    ];
    if behaviour.change_feed {
        tools.push(json!({
            "name": "changes_since",
            "description": "What changed on the sheet after a revision, and who changed it.",
            "inputSchema": schema(json!({"since": {"type": "string", "description": "A revision this sheet returned, e.g. r3."}}), &["since"]),
        }));
    }
    tools.push(json!({
        "name": "sheet_confirm_edit",
        "description": "Confirm a staged edit on the person's behalf.",
        "inputSchema": schema(json!({"pendingId": {"type": "string", "description": "The staged edit's id."}}), &["pendingId"]),
    }));
    tools
}

/// `count` generated read-only tools (`extra_tool_001`, …), each about
/// 300 bytes as listed: what makes a listing as large as a real page's.
pub(crate) fn extra_tool_definitions(count: usize) -> Vec<Value> {
    (1..=count)
        .map(|n| {
            json!({
                "name": format!("extra_tool_{n:03}"),
                "description": format!("Extra tool {n}: reads a summary of one part of the page. It changes nothing; it exists so the listing is as large as a real page's."),
                "inputSchema": schema(json!({"part": {"type": "string", "description": "Which part of the page to summarise."}}), &[]),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn behaviour() -> Behaviour {
        Behaviour {
            revisions: RevisionMode::Enforced,
            change_feed: true,
            feed_attribution: true,
            feed_complete: true,
            stale_reads: false,
            current_in_refusal: true,
            server_name: "demo".into(),
            server_version: "0".into(),
            protocol_versions: Vec::new(),
        }
    }

    fn call(
        sheet: &mut Sheet,
        b: &Behaviour,
        id: u64,
        name: &str,
        args: Value,
        pin: Option<&str>,
    ) -> Value {
        let mut params = json!({"name": name, "arguments": args});
        if let Some(pin) = pin {
            params["_meta"] = json!({"revision": pin});
        }
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        sheet
            .handle_frame(b, &frame.to_string())
            .expect("a response")
    }

    #[test]
    fn addresses_round_trip() {
        assert_eq!(parse_address("B4"), Some((4, 2)));
        assert_eq!(parse_address(" aa10 "), Some((10, 27)));
        assert_eq!(parse_address("ZZZ1"), Some((1, 18_278)));
        assert_eq!(parse_address("A0"), None);
        assert_eq!(parse_address("A01"), None);
        assert_eq!(parse_address("4B"), None);
        assert_eq!(parse_address("AAAA1"), None);
        assert_eq!(parse_address("A99999999"), None);
        assert_eq!(parse_address("Ä1"), None);
        assert_eq!(parse_address(""), None);
        for (r, c) in [(1, 1), (4, 2), (10, 27), (1, 702), (1, 703), (7, 18_278)] {
            assert_eq!(parse_address(&format_address(r, c)), Some((r, c)));
        }
    }

    #[test]
    fn stale_pin_is_refused_and_nothing_is_written() {
        let b = behaviour();
        let mut sheet = Sheet::new(default_cells()).unwrap();
        assert_eq!(sheet.revision(), "r1");
        sheet.set_cell(Actor::Human, "B4", "12").unwrap();
        assert_eq!(sheet.revision(), "r2");
        let reply = call(
            &mut sheet,
            &b,
            1,
            "sheet_set_cell",
            json!({"address": "B4", "value": "99"}),
            Some("r1"),
        );
        assert_eq!(reply["error"]["code"], 409);
        assert_eq!(reply["error"]["data"]["code"], "revision_mismatch");
        assert_eq!(reply["error"]["data"]["current"], "r2");
        assert_eq!(sheet.cell("B4").as_deref(), Some("12"));
        assert_eq!(sheet.revision(), "r2");
        let reply = call(
            &mut sheet,
            &b,
            2,
            "sheet_set_cell",
            json!({"address": "B4", "value": "99"}),
            Some("r2"),
        );
        assert_eq!(reply["result"]["_meta"]["revision"], "r3");
        assert_eq!(sheet.cell("B4").as_deref(), Some("99"));
        let feed = call(
            &mut sheet,
            &b,
            3,
            "changes_since",
            json!({"since": "r1"}),
            Some("r1"),
        );
        let rows = feed["result"]["_meta"]["changes"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["actor_type"], "human");
        assert_eq!(rows[1]["actor_type"], "agent");
        assert_eq!(rows[0]["handle"], "B4");
        assert_eq!(feed["result"]["_meta"]["complete"], true);
    }

    #[test]
    fn initialize_answers_like_micro_mcp_server() {
        let mut sheet = Sheet::new(default_cells()).unwrap();
        let ask = |sheet: &mut Sheet, b: &Behaviour, v: &str| -> Value {
            let frame = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": v}});
            let reply = sheet.handle_frame(b, &frame.to_string()).unwrap();
            reply["result"]["protocolVersion"].clone()
        };
        assert_eq!(ask(&mut sheet, &behaviour(), "2025-11-25"), "2025-06-18");
        let listed = Behaviour {
            protocol_versions: vec!["2025-11-25".into(), "2025-06-18".into()],
            ..behaviour()
        };
        assert_eq!(ask(&mut sheet, &listed, "2025-06-18"), "2025-06-18");
        assert_eq!(ask(&mut sheet, &listed, "2024-11-05"), "2025-11-25");
    }

    #[test]
    fn mint_only_applies_a_stale_pin() {
        let b = Behaviour {
            revisions: RevisionMode::MintOnly,
            ..behaviour()
        };
        let mut sheet = Sheet::new(default_cells()).unwrap();
        sheet.set_cell(Actor::Human, "B4", "12").unwrap();
        let reply = call(
            &mut sheet,
            &b,
            1,
            "sheet_set_cell",
            json!({"address": "B4", "value": "99"}),
            Some("r1"),
        );
        assert_eq!(reply["result"]["_meta"]["revision"], "r3");
        assert_eq!(sheet.cell("B4").as_deref(), Some("99"));
        let off = Behaviour {
            revisions: RevisionMode::Off,
            ..behaviour()
        };
        let reply = call(
            &mut sheet,
            &off,
            2,
            "sheet_get_cell",
            json!({"address": "B4"}),
            None,
        );
        assert!(reply["result"].get("_meta").is_none());
    }

    #[test]
    fn protocol_edges() {
        let b = behaviour();
        let mut sheet = Sheet::new(default_cells()).unwrap();
        let r = sheet
            .handle_frame(&b, r#"{"jsonrpc":"2.0","id":7,"method":"resources/list"}"#)
            .unwrap();
        assert_eq!(r["error"]["code"], -32601);
        let r = sheet
            .handle_frame(
                &b,
                r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{}}"#,
            )
            .unwrap();
        assert_eq!(r["error"]["code"], -32602);
        let r = sheet
            .handle_frame(
                &b,
                r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"nope"}}"#,
            )
            .unwrap();
        assert_eq!(r["error"]["code"], -32601);
        assert!(
            sheet
                .handle_frame(&b, r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#)
                .is_none()
        );
        assert!(sheet.handle_frame(&b, "garbage").is_none());
        assert!(
            sheet
                .handle_frame(&b, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
                .is_none()
        );
        assert!(sheet.handle_frame(&b, r#"{"jsonrpc":"2.0","method":"notifications/human-plus/activity","params":{"action":"x"}}"#).is_none());
        assert_eq!(sheet.notifications.len(), 1);
        let r = sheet
            .handle_frame(&b, r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#)
            .unwrap();
        assert_eq!(r, json!({"jsonrpc":"2.0","id":"p","result":{}}));
        let big = call(
            &mut sheet,
            &b,
            10,
            "sheet_get_range",
            json!({"start": "A1", "end": "ZZZ1000"}),
            None,
        );
        assert_eq!(big["result"]["isError"], true);
        let feed_off = Behaviour {
            change_feed: false,
            ..behaviour()
        };
        let r = call(
            &mut sheet,
            &feed_off,
            11,
            "changes_since",
            json!({"since": "r1"}),
            None,
        );
        assert_eq!(r["error"]["code"], -32601);
    }

    #[test]
    fn delete_row_shifts_up() {
        let mut sheet = Sheet::new(default_cells()).unwrap();
        sheet.delete_row(Actor::Human, 2).unwrap();
        assert_eq!(sheet.cell("A2").as_deref(), Some("Pears"));
        assert_eq!(sheet.cell("A3").as_deref(), Some("Plums"));
        assert_eq!(sheet.cell("A4"), None);
        let changes = sheet.changes();
        assert_eq!(changes[0].handle, "row:2");
        assert_eq!(changes[0].change, "deleted");
    }
}
