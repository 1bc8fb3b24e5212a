//! The benchmark inputs: generated deterministically, written once to
//! `bench/data/`, and read back by the Rust and the Python benchmarks alike
//! (so both sides time the very same bytes).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use human_plus_core::{ToolDefinition, TrustPolicy};
use serde_json::{Map, Value, json};

/// Bumped whenever the generator changes, so stale inputs are rebuilt.
pub const DATA_VERSION: u32 = 1;

/// The JSON-RPC id the receive-leg workloads wait for.
pub const EXPECTED_ID: &str = "rs_5f1c0a9e3b7d2c48-8d0e61f2-2";

/// How many tools the `tools/list` answer carries.
pub const TOOL_COUNT: usize = 200;

/// How many rows the change feed answer carries.
pub const CHANGE_ROWS: usize = 1000;

/// The size of the result that is framed: the default budget, exactly.
pub const RESULT_BYTES: usize = 65_536;

/// How many frames the noisy correlation stream holds.
pub const NOISY_FRAMES: usize = 64;

/// How many events the SSE stream holds (keepalives not counted).
pub const SSE_EVENTS: usize = 64;

/// `bench/data`, next to this crate's manifest.
#[must_use]
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// splitmix64: a small deterministic generator (no dependency, same bytes
/// on every machine).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        let i = usize::try_from(self.below(items.len() as u64)).unwrap_or(0);
        items.get(i).copied().unwrap_or_default()
    }

    /// Log-uniform in `lo..=hi`.
    fn log_uniform(&mut self, lo: usize, hi: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
        ((l + u * (h - l)).exp() as usize).clamp(lo, hi)
    }
}

const WORDS: &[&str] = &[
    "budget", "forecast", "quarter", "revenue", "total", "region", "north", "south", "units",
    "price", "margin", "apples", "pears", "plums", "invoice", "due", "paid", "pending", "owner",
    "review", "draft", "final", "row", "column", "sheet", "cell", "value", "formula", "sum",
    "average", "note", "the", "and", "of", "for", "with", "a", "to", "in", "is",
];

fn sentence(rng: &mut Rng, words: usize) -> String {
    let mut s = String::new();
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(rng.pick(WORDS));
    }
    s
}

/// A text of about `len` bytes that looks like what a sheet tool returns:
/// tab-separated cells, one row per line, ASCII.
fn sheet_text(rng: &mut Rng, len: usize) -> String {
    let mut s = String::with_capacity(len + 64);
    let mut row = 1u32;
    while s.len() < len {
        let _ = writeln!(
            s,
            "A{row}\t{}\tB{row}\t{}\tC{row}\t{}.{:02}",
            rng.pick(WORDS),
            rng.below(100_000),
            rng.below(1000),
            rng.below(100)
        );
        row += 1;
    }
    s.truncate(len);
    s
}

/// One result frame as the surface sends it, of about `size` bytes on the
/// wire.
fn result_frame(rng: &mut Rng, id: &str, size: usize, revision: u64) -> String {
    let overhead = 120 + id.len();
    let text = sheet_text(rng, size.saturating_sub(overhead).max(16));
    let frame = json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {
            "content": [{"type": "text", "text": text}],
            "_meta": {"revision": format!("r{revision}")},
        },
    });
    frame.to_string()
}

fn other_id(rng: &mut Rng) -> String {
    format!(
        "rs_{:016x}-{:08x}-{}",
        rng.next(),
        rng.next() & 0xffff_ffff,
        1 + rng.below(4)
    )
}

fn notification(rng: &mut Rng) -> String {
    if rng.below(2) == 0 {
        json!({
            "jsonrpc": "2.0",
            "method": "notifications/peer_joined",
            "params": {"subscriberId": format!("sub_{:012x}", rng.next() & 0xffff_ffff_ffff), "client": other_id(rng)},
        })
        .to_string()
    } else {
        json!({
            "jsonrpc": "2.0",
            "method": "notifications/human-plus/activity",
            "params": {
                "actor": {"id": "agent-7", "name": "Assistant", "color": "#7c3aed", "type": "agent"},
                "surfaceId": "sheet:one", "sessionId": "demo_001", "action": "editing",
                "target": format!("B{}", rng.below(200)), "priority": "attention", "correlationId": null,
            },
        })
        .to_string()
    }
}

/// The SSE stream of one receive leg: 64 `event: mcp` result frames of
/// 1 KiB to 64 KiB (log-uniform: most small, some large), replies to other
/// agents, with `: keepalive` comments and notifications between them, and
/// the reply this client waits for last.
fn sse_stream(rng: &mut Rng) -> String {
    let mut out = String::new();
    for i in 0..SSE_EVENTS {
        let last = i + 1 == SSE_EVENTS;
        let size = rng.log_uniform(1024, 65_536);
        let id = if last {
            EXPECTED_ID.to_owned()
        } else {
            other_id(rng)
        };
        let frame = result_frame(rng, &id, size, 10 + i as u64);
        out.push_str("event: mcp\ndata: ");
        out.push_str(&frame);
        out.push_str("\n\n");
        if i % 4 == 3 {
            out.push_str(": keepalive\n\n");
        }
        if i % 8 == 5 {
            out.push_str("event: mcp\ndata: ");
            out.push_str(&notification(rng));
            out.push_str("\n\n");
        }
    }
    out
}

/// 64 frames a receive leg may carry, one per line: notifications and
/// other agents' replies (200 B to 4 KiB), the awaited reply last.
fn noisy_frames(rng: &mut Rng) -> String {
    let mut out = String::new();
    for i in 0..NOISY_FRAMES {
        let frame = if i + 1 == NOISY_FRAMES {
            result_frame(rng, EXPECTED_ID, 512, 99)
        } else if i % 3 == 0 {
            notification(rng)
        } else {
            let size = rng.log_uniform(200, 4096);
            let id = other_id(rng);
            result_frame(rng, &id, size, 50 + i as u64)
        };
        out.push_str(&frame);
        out.push('\n');
    }
    out
}

const DOMAINS: &[&str] = &[
    "sheet", "chart", "doc", "canvas", "graph", "table", "form", "deck",
];
const VERBS: &[&str] = &[
    "get", "list", "set", "update", "insert", "move", "format", "find", "export", "merge",
];
const NOUNS: &[&str] = &[
    "cell", "range", "row", "column", "node", "edge", "slide", "shape", "style", "comment",
];
const TYPES: &[&str] = &[
    "string", "integer", "boolean", "string", "string", "integer",
];

/// One realistic tool: a description of 80 to 400 bytes and a schema of 2
/// to 8 properties (integers only, so every port digests it alike).
fn tool(rng: &mut Rng, name: &str) -> Value {
    let words = 12 + usize::try_from(rng.below(50)).unwrap_or(0);
    let mut description = sentence(rng, words);
    description.push_str(". Returns the result as text \u{2014} r\u{e9}sum\u{e9} of the change.");
    let mut properties = Map::new();
    let mut required = Vec::new();
    let count = 2 + rng.below(7);
    for p in 0..count {
        let key = format!("{}_{p}", rng.pick(NOUNS));
        let ty = rng.pick(TYPES);
        let mut prop = Map::new();
        prop.insert("type".into(), json!(ty));
        prop.insert("description".into(), json!(sentence(rng, 6)));
        match ty {
            "integer" => {
                prop.insert("minimum".into(), json!(0));
                prop.insert("maximum".into(), json!(1_048_576));
            }
            "string" if rng.below(3) == 0 => {
                prop.insert("enum".into(), json!(["values", "formulas", "both"]));
            }
            "string" => {
                prop.insert("maxLength".into(), json!(256));
            }
            _ => {}
        }
        if rng.below(2) == 0 {
            required.push(Value::String(key.clone()));
        }
        properties.insert(key, Value::Object(prop));
    }
    json!({
        "name": name,
        "title": name.replace('_', " "),
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        },
        "annotations": {"readOnlyHint": rng.below(2) == 0},
    })
}

/// The `tools/list` result (200 tools: 196 allowed and pinned, two reserved
/// confirmation tools, one malformed name, one not in the allowlist) and the
/// policy as `{"allow": [...], "pins": {name: digest}}`.
fn tools_and_policy(rng: &mut Rng) -> (Value, Value) {
    let mut tools = Vec::with_capacity(TOOL_COUNT);
    let mut allow = Vec::new();
    let mut pins = Map::new();
    for i in 0..TOOL_COUNT {
        let name = match i {
            17 => "sheet_confirm_edit".to_owned(),
            91 => "canvas.approve".to_owned(),
            133 => "bad name\n".to_owned(),
            177 => "doc_export_everything".to_owned(),
            _ => format!(
                "{}_{}_{}{i}",
                rng.pick(DOMAINS),
                rng.pick(VERBS),
                rng.pick(NOUNS)
            ),
        };
        let entry = tool(rng, &name);
        if i != 177 {
            allow.push(Value::String(name.clone()));
        }
        if ![17, 91, 133, 177].contains(&i)
            && let Ok(def) = ToolDefinition::from_listing(&entry)
        {
            pins.insert(name, Value::String(def.digest()));
        }
        tools.push(entry);
    }
    (
        json!({ "tools": tools }),
        json!({"allow": allow, "pins": pins}),
    )
}

/// A change feed answer with 1,000 attributed rows, as a surface writes it.
fn changes(rng: &mut Rng) -> Value {
    let kinds = ["updated", "created", "deleted", "moved"];
    let actors = ["human", "agent", "human", "system"];
    let rows: Vec<Value> = (0..CHANGE_ROWS)
        .map(|i| {
            let col = char::from(b'A' + u8::try_from(rng.below(8)).unwrap_or(0));
            let handle = format!("{col}{}", 1 + rng.below(500));
            json!({
                "revision": format!("r{}", i + 2),
                "screen_id": handle,
                "change": kinds[i % 4],
                "actor_type": actors[usize::try_from(rng.below(4)).unwrap_or(0)],
                "actor_id": format!("u-{}", rng.below(20)),
                "kind": "cell",
                "title": format!("Sheet1!{handle}"),
            })
        })
        .collect();
    json!({
        "content": [{"type": "text", "text": format!("{CHANGE_ROWS} changes since r1")}],
        "_meta": {"revision": format!("r{}", CHANGE_ROWS + 1), "complete": true, "changes": rows},
    })
}

/// The params of a pinned `tools/call`, as the core encodes them.
fn call_params() -> Value {
    json!({
        "name": "sheet_set_cell",
        "arguments": {"address": "B4", "value": "=SUM(B1:B3)", "sheet": "Sheet1"},
        "_meta": {"revision": "r7"},
    })
}

/// Every input file name and its content.
fn generate() -> Vec<(&'static str, String)> {
    let mut rng = Rng(0x4855_4d41_4e2b_2026);
    let sse = sse_stream(&mut rng);
    let noisy = noisy_frames(&mut rng);
    let (tools, policy) = tools_and_policy(&mut rng);
    let feed = changes(&mut rng);
    let result = sheet_text(&mut rng, RESULT_BYTES);
    let manifest = json!({
        "version": DATA_VERSION,
        "expected_id": EXPECTED_ID,
        "surface": "sheet:one",
        "tool": "sheet_get_range",
        "request_id": "rs_0123456789abcdef-9f1c2a3b-2",
    });
    vec![
        ("sse_stream.txt", sse),
        ("noisy_frames.jsonl", noisy),
        ("tools_list.json", tools.to_string()),
        ("policy.json", policy.to_string()),
        ("changes.json", feed.to_string()),
        ("result_64k.txt", result),
        ("call_params.json", call_params().to_string()),
        ("manifest.json", manifest.to_string()),
    ]
}

/// The 200-tool `tools/list` result and its policy
/// (`{"allow": [...], "pins": {name: digest}}`): the very values `gen`
/// writes to `tools_list.json` and `policy.json`, made in memory.
///
/// # Panics
/// Never: the generator writes both as JSON.
#[must_use]
pub fn listing() -> (Value, Value) {
    let files = generate();
    let parse = |name: &str| -> Value {
        files
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, text)| serde_json::from_str(text).ok())
            .unwrap_or_else(|| panic!("{name} is generated as JSON"))
    };
    (parse("tools_list.json"), parse("policy.json"))
}

/// Writes the inputs into `dir` unless they are there at this version.
///
/// # Errors
/// I/O errors.
pub fn ensure(dir: &Path) -> std::io::Result<()> {
    let current = std::fs::read(dir.join("manifest.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v.get("version").and_then(Value::as_u64))
        == Some(u64::from(DATA_VERSION));
    if current {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    for (name, content) in generate() {
        std::fs::write(dir.join(name), content)?;
    }
    Ok(())
}

/// The inputs, loaded.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The SSE stream (ASCII).
    pub sse: Vec<u8>,
    /// The frames of the noisy stream.
    pub noisy: Vec<Vec<u8>>,
    /// The `tools/list` result, raw.
    pub tools_bytes: Vec<u8>,
    /// The `tools/list` result, parsed.
    pub tools: Value,
    /// The trust policy (allowlist and pins).
    pub policy: TrustPolicy,
    /// The change feed result, raw.
    pub changes_bytes: Vec<u8>,
    /// The change feed result, parsed.
    pub changes: Value,
    /// The 64 KiB result text.
    pub result: String,
    /// The params of the encoded request.
    pub call_params: Value,
    /// The id of the encoded request.
    pub request_id: String,
}

/// Loads the inputs from `dir`, generating them first if needed.
///
/// # Errors
/// I/O errors, or unreadable inputs.
pub fn load(dir: &Path) -> Result<Inputs, Box<dyn std::error::Error>> {
    ensure(dir)?;
    let read = |name: &str| std::fs::read(dir.join(name));
    let tools_bytes = read("tools_list.json")?;
    let changes_bytes = read("changes.json")?;
    let policy: Value = serde_json::from_slice(&read("policy.json")?)?;
    let allow: Vec<String> = policy
        .get("allow")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let pins: Vec<(String, String)> = policy
        .get("pins")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let manifest: Value = serde_json::from_slice(&read("manifest.json")?)?;
    Ok(Inputs {
        sse: read("sse_stream.txt")?,
        noisy: read("noisy_frames.jsonl")?
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
        tools: serde_json::from_slice(&tools_bytes)?,
        tools_bytes,
        policy: TrustPolicy::allowing(allow, pins),
        changes: serde_json::from_slice(&changes_bytes)?,
        changes_bytes,
        result: String::from_utf8(read("result_64k.txt")?)?,
        call_params: serde_json::from_slice(&read("call_params.json")?)?,
        request_id: manifest
            .get("request_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    })
}
