//! What a person reads before trusting a tool again: `review_tools` over
//! what was reviewed and what the surface lists now, `DefinitionDiff`,
//! `Baseline::from_profile`, `Review::text` and `Review::to_json`.
//!
//! Input: JSON text `{"before": [entry…], "after": [entry…], "kinds": [n…]}`
//! (entries read with `ToolDefinition::from_listing`, `kinds[i]` chooses
//! how before-tool `i` is kept: 0 its definition, 1 its digest, 2 a wrong
//! digest, 3 its name only), so seeds are readable; any other bytes build
//! both listings structurally: tools named from a small pool, descriptions
//! of a few lines, schemas from the protocol's keys, and each listed tool
//! sometimes a mutation of a reviewed one (a line changed, a member added,
//! removed or changed somewhere in its schema), so most pairs differ a
//! little, as a changed definition does.
//!
//! Properties:
//! - every listed name is reviewed once, in the listing's order, then each
//!   reviewed name no longer listed, once, as `gone`;
//! - `unchanged` exactly when the digests (or the pin) agree; `new` exactly
//!   when nothing was kept under that name; `not_comparable` exactly when
//!   only the name was;
//! - a changed definition always shows a difference; its description diff
//!   reads back both descriptions (kept + removed lines are the old text,
//!   kept + added the new one); the schema changes are bounded;
//! - the diff of a definition with itself is empty;
//! - the text has no control character but `\n`, nothing invisible, lines
//!   of bounded length, at most a bounded number of lines per tool;
//! - `to_json` names every tool with its status, and its description lines
//!   are the diff's;
//! - `Baseline::from_profile` names each tool once, `allow`'s order first,
//!   and keeps a reviewed definition only when it agrees with its pin.

#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use arbitrary::Unstructured;
use human_plus_core::{
    Baseline, ChangeDetail, DefinitionDiff, DiffLine, ReviewStatus, SCHEMA_CHANGES_MAX,
    SHOWN_CHANGES_MAX, ToolClaims, ToolDefinition, review_tools,
};
use human_plus_fuzz::{arb_json, arb_string};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

const NAMES: &[&str] = &["sheet_read", "sheet_write", "t", "sheet_erase", "bad name"];

/// The longest line `Review::text` may write: a schema path of
/// `SCHEMA_DEPTH_MAX` + 1 segments of at most 64 characters (or a quoted
/// key bounded to 48), then two values bounded to 80.
const LINE_MAX_CHARS: usize = 33 * 70 + 2 * 82 + 64;

fn description(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let n = u.int_in_range(0..=5)?;
    let mut lines = Vec::with_capacity(n);
    for _ in 0..n {
        lines.push(match u.int_in_range(0..=3)? {
            0 => "Write one cell.".to_owned(),
            1 => String::new(),
            _ => arb_string(u)?,
        });
    }
    Ok(lines.join("\n"))
}

fn schema(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    Ok(match u.int_in_range(0..=3)? {
        0 => {
            serde_json::json!({"type": "object", "properties": {"cell": {"type": "string"}, "n": {"type": "integer", "enum": [1, 2]}}, "required": ["cell"]})
        }
        _ => match arb_json(u, 4)? {
            Value::Object(m) => Value::Object(m),
            other => serde_json::json!({"type": "object", "properties": {"x": other}}),
        },
    })
}

/// `v` with one change somewhere below it.
fn mutate(u: &mut Unstructured<'_>, v: &mut Value, depth: u32) -> arbitrary::Result<()> {
    let descend = depth < 6 && u.ratio(2, 3)?;
    match v {
        Value::Object(m) if descend && !m.is_empty() => {
            let i = u.choose_index(m.len())?;
            let key = m.keys().nth(i).cloned().unwrap_or_default();
            if let Some(x) = m.get_mut(&key) {
                mutate(u, x, depth + 1)?;
            }
        }
        Value::Array(a) if descend && !a.is_empty() => {
            let i = u.choose_index(a.len())?;
            mutate(u, &mut a[i], depth + 1)?;
        }
        Value::Object(m) => match u.int_in_range(0..=2)? {
            0 if !m.is_empty() => {
                let i = u.choose_index(m.len())?;
                let key = m.keys().nth(i).cloned().unwrap_or_default();
                m.remove(&key);
            }
            _ => {
                let key = human_plus_fuzz::arb_key(u)?;
                m.insert(key, arb_json(u, 2)?);
            }
        },
        Value::Array(a) => match u.int_in_range(0..=2)? {
            0 if !a.is_empty() => {
                let i = u.choose_index(a.len())?;
                a.remove(i);
            }
            _ => a.push(arb_json(u, 1)?),
        },
        other => *other = arb_json(u, 2)?,
    }
    Ok(())
}

fn tool(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<ToolDefinition>> {
    let name = if u.ratio(7, 8)? {
        (*u.choose(NAMES)?).to_owned()
    } else {
        arb_string(u)?
    };
    Ok(ToolDefinition::new(name, description(u)?, schema(u)?).ok())
}

fn changed(u: &mut Unstructured<'_>, t: &ToolDefinition) -> arbitrary::Result<ToolDefinition> {
    let mut d = t.description().to_owned();
    if u.ratio(1, 2)? {
        let mut lines: Vec<String> = d.split('\n').map(str::to_owned).collect();
        let i = u.choose_index(lines.len())?;
        match u.int_in_range(0..=2)? {
            0 => lines[i] = arb_string(u)?,
            1 => lines.insert(i, arb_string(u)?),
            _ => {
                lines.remove(i);
            }
        }
        d = lines.join("\n");
    }
    let mut s = t.input_schema().clone();
    if u.ratio(2, 3)? {
        mutate(u, &mut s, 0)?;
    }
    if !s.is_object() {
        s = Value::Object(Map::new());
    }
    Ok(ToolDefinition::new(t.name(), d, s.clone())
        .unwrap_or_else(|_| ToolDefinition::new(t.name(), "", Value::Object(Map::new())).unwrap()))
}

struct Input {
    before: Vec<ToolDefinition>,
    after: Vec<ToolDefinition>,
    kinds: Vec<u8>,
    profile: bool,
}

fn from_json(v: &Value) -> Option<Input> {
    let list = |k: &str| -> Option<Vec<ToolDefinition>> {
        Some(
            v.get(k)?
                .as_array()?
                .iter()
                .filter_map(|e| ToolDefinition::from_listing(e).ok())
                .collect(),
        )
    };
    let kinds = v
        .get("kinds")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|k| k.as_u64().map_or(0, |k| (k % 4) as u8))
                .collect()
        })
        .unwrap_or_default();
    Some(Input {
        before: list("before")?,
        after: list("after")?,
        kinds,
        profile: v.get("profile").and_then(Value::as_bool).unwrap_or(false),
    })
}

fn structured(u: &mut Unstructured<'_>) -> arbitrary::Result<Input> {
    let mut before = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        if let Some(t) = tool(u)? {
            before.push(t);
        }
    }
    let mut after = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        let pick = u.int_in_range(0..=3)?;
        if pick > 0 && !before.is_empty() {
            let t = &before[u.choose_index(before.len())?];
            after.push(if pick == 1 { t.clone() } else { changed(u, t)? });
        } else if let Some(t) = tool(u)? {
            after.push(t);
        }
    }
    let kinds = (0..before.len())
        .map(|_| u.arbitrary::<u8>().map(|k| k % 4))
        .collect::<arbitrary::Result<_>>()?;
    Ok(Input {
        before,
        after,
        kinds,
        profile: u.ratio(1, 4)?,
    })
}

fn baseline(input: &Input) -> Vec<Baseline> {
    input
        .before
        .iter()
        .enumerate()
        .map(|(i, t)| match input.kinds.get(i).copied().unwrap_or(0) {
            0 => Baseline::Definition(t.clone()),
            1 => Baseline::Pinned {
                name: t.name().to_owned(),
                digest: t.digest(),
            },
            2 => Baseline::Pinned {
                name: t.name().to_owned(),
                digest: "sha256:00000000000000000000000000000000".to_owned(),
            },
            _ => Baseline::Trusted(t.name().to_owned()),
        })
        .collect()
}

/// The profile's baseline: allow the names of kinds 0 and 3, pin kinds 1
/// and 2 (2 with a wrong digest), keep every before definition as reviewed.
fn profile_baseline(input: &Input) -> Vec<Baseline> {
    let mut allow = Vec::new();
    let mut pins = BTreeMap::new();
    for (i, t) in input.before.iter().enumerate() {
        match input.kinds.get(i).copied().unwrap_or(0) {
            1 => {
                pins.insert(t.name().to_owned(), t.digest());
            }
            2 => {
                pins.insert(
                    t.name().to_owned(),
                    "sha256:00000000000000000000000000000000".to_owned(),
                );
            }
            _ => allow.push(t.name().to_owned()),
        }
    }
    let base = Baseline::from_profile(&allow, &pins, &input.before);
    // Each name once, `allow`'s order first.
    let names: Vec<&str> = base.iter().map(Baseline::name).collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len(), "a name twice in the baseline");
    let mut first_allow = Vec::new();
    for a in &allow {
        if !first_allow.contains(&a.as_str()) {
            first_allow.push(a.as_str());
        }
    }
    assert_eq!(&names[..first_allow.len()], &first_allow[..]);
    for b in &base {
        if let Baseline::Definition(d) = b {
            if let Some(pin) = pins.get(d.name()) {
                assert_eq!(*pin, d.digest(), "a reviewed definition its pin refuses");
            }
            let first = input.before.iter().find(|t| t.name() == d.name());
            assert_eq!(first, Some(d), "the first reviewed definition of a name");
        }
    }
    base
}

fn check_diff(before: &ToolDefinition, after: &ToolDefinition, diff: &DefinitionDiff) {
    assert!(diff.schema.len() <= SCHEMA_CHANGES_MAX);
    if diff.description.left_out == 0 && before.description() != after.description() {
        let old: Vec<&str> = diff
            .description
            .lines
            .iter()
            .filter(|l| !matches!(l, DiffLine::Added(_)))
            .map(DiffLine::text)
            .collect();
        let new: Vec<&str> = diff
            .description
            .lines
            .iter()
            .filter(|l| !matches!(l, DiffLine::Removed(_)))
            .map(DiffLine::text)
            .collect();
        assert_eq!(old.join("\n"), before.description(), "the old description");
        assert_eq!(new.join("\n"), after.description(), "the new description");
    }
    if before.description() == after.description() {
        assert!(diff.description.lines.is_empty());
    }
}

fn run(input: &Input) {
    for t in input.before.iter().chain(&input.after) {
        assert!(
            DefinitionDiff::between(t, t).is_empty(),
            "a definition differs from itself"
        );
    }
    let base = if input.profile {
        profile_baseline(input)
    } else {
        baseline(input)
    };
    let review = review_tools(&base, &input.after);

    // Order and uniqueness.
    let mut listed = Vec::new();
    for t in &input.after {
        if !listed.contains(&t.name()) {
            listed.push(t.name());
        }
    }
    let mut gone = Vec::new();
    for b in &base {
        if !listed.contains(&b.name()) && !gone.contains(&b.name()) {
            gone.push(b.name());
        }
    }
    let names: Vec<&str> = review.tools.iter().map(|t| t.name.as_str()).collect();
    let expected: Vec<&str> = listed.iter().chain(&gone).copied().collect();
    assert_eq!(names, expected, "the review's tools and their order");

    let mut by_name: BTreeMap<&str, &Baseline> = BTreeMap::new();
    for b in &base {
        by_name.entry(b.name()).or_insert(b);
    }
    for r in &review.tools {
        let kept = by_name.get(r.name.as_str()).copied();
        assert_eq!(r.reviewed_digest, kept.and_then(Baseline::digest));
        let Some(now) = &r.listed else {
            assert_eq!(r.status, ReviewStatus::Gone);
            assert!(kept.is_some());
            continue;
        };
        let first = input.after.iter().find(|t| t.name() == r.name);
        assert_eq!(first, Some(now), "the first listed definition of a name");
        match (kept, &r.status) {
            (None, ReviewStatus::New) => {}
            (Some(Baseline::Trusted(_)), ReviewStatus::NotComparable) => {}
            (Some(b), ReviewStatus::Unchanged) => {
                assert_eq!(b.digest(), Some(now.digest()), "unchanged, digests differ");
            }
            (Some(Baseline::Definition(d)), ReviewStatus::Changed(ChangeDetail::Diff(diff))) => {
                assert_ne!(d.digest(), now.digest());
                assert!(!diff.is_empty(), "a changed definition shows no difference");
                check_diff(d, now, diff);
            }
            (
                Some(Baseline::Pinned { digest, .. }),
                ReviewStatus::Changed(ChangeDetail::DigestOnly),
            ) => {
                assert_ne!(*digest, now.digest());
            }
            (kept, status) => panic!("{status:?} for {kept:?}"),
        }
    }

    // The text.
    let mut claims = BTreeMap::new();
    for t in &input.after {
        let entry = serde_json::json!({"name": t.name(), "annotations": {"readOnlyHint": true, "destructiveHint": true}});
        claims.insert(t.name().to_owned(), ToolClaims::from_listing(&entry));
    }
    let text = review.text(&claims);
    let mut lines = 0usize;
    for line in text.lines() {
        lines += 1;
        assert!(
            line.chars().count() <= LINE_MAX_CHARS,
            "a line of {} characters",
            line.chars().count()
        );
        assert!(
            !line.chars().any(human_plus_fuzz::must_be_escaped),
            "an unescaped character in {line:?}"
        );
    }
    let unchanged = review.with_status("unchanged").count();
    assert!(
        lines <= 1 + 5 + review.tools.len() * (2 * SHOWN_CHANGES_MAX + 12) + unchanged,
        "{lines} lines"
    );

    // The JSON.
    let doc = review.to_json();
    let tools = doc["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), review.tools.len());
    for (j, r) in tools.iter().zip(&review.tools) {
        assert_eq!(j["name"], Value::String(r.name.clone()));
        assert_eq!(j["status"], r.status.as_str());
        if let ReviewStatus::Changed(ChangeDetail::Diff(diff)) = &r.status
            && !diff.description.lines.is_empty()
        {
            let texts: Vec<&str> = j["description"]
                .as_array()
                .expect("description lines")
                .iter()
                .filter_map(|l| l["line"].as_str())
                .collect();
            let want: Vec<&str> = diff.description.lines.iter().map(DiffLine::text).collect();
            assert_eq!(texts, want);
        }
    }
    serde_json::to_string(&doc).expect("the review is JSON");
}

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = serde_json::from_slice::<Value>(data)
        && let Some(input) = from_json(&v)
    {
        run(&input);
        return;
    }
    let mut u = Unstructured::new(data);
    if let Ok(input) = structured(&mut u) {
        run(&input);
    }
});
