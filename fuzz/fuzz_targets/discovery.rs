//! Discovery and admission over arbitrary `tools/list` answers, page by
//! page: `ListingReader` (with definitions and names only, fresh and
//! against a kept verdict), the `Discovery` it makes, `toolset`,
//! `SurfaceTool`, `ToolSummary`, and `Discovery`'s JSON.
//!
//! Input: byte 0 = the trust policy (undeclared; every tool; an allowlist;
//! every tool with a pin on `sheet_read` that is right, wrong, or wrong and
//! withheld), byte 1 = which tools need approval; the rest is up to four
//! pages (`tools/list` results) separated by NUL bytes.
//!
//! Properties:
//! - what the tree way (definitions) and the names way admit is the same,
//!   on several pages too; a reader offered the verdict it just made for the
//!   same pages serves it (`reused`) with the same names, and one with a
//!   changed page does not;
//! - no reserved, malformed, disallowed or repeated name is admitted; with a
//!   policy that withholds changed pins, no admitted tool contradicts its
//!   pin; claims are of admitted tools only;
//! - a `Discovery` written as JSON reads back equal (its digests check);
//! - `toolset` describes every tool once, in order, with its digest;
//!   `required` names only declared parameters; approval exactly for the
//!   approval tools; a `SurfaceTool` reads back from its JSON;
//! - each `ToolSummary` line is bounded and shows no control or invisible
//!   character.

#![no_main]

use std::collections::BTreeSet;

use human_plus_core::{
    Discovery, ListingReader, NO_PINS, SUMMARY_LINE_MAX, SurfaceTool, ToolSummary, TrustPolicy,
    is_reserved_tool_name, is_well_formed_tool_name, toolset,
};
use libfuzzer_sys::fuzz_target;

const WRONG: &str = "sha256:00000000000000000000000000000000";
const APPROVAL: [&str; 3] = ["sheet_confirm_edit", "sheet_write", "t"];

fn policy(mode: u8, pages: &[String]) -> TrustPolicy {
    let first_digest = pages
        .first()
        .and_then(|p| human_plus_core::listing_digests(p.as_bytes()).ok())
        .and_then(|d| d.into_iter().find(|(n, _)| n == "sheet_read"))
        .map(|(_, d)| d);
    match mode % 6 {
        0 => TrustPolicy::undeclared(),
        1 => TrustPolicy::every_tool(NO_PINS),
        2 => TrustPolicy::allowing(["sheet_read", "sheet_write", "t", "changes_since"], NO_PINS),
        3 => TrustPolicy::every_tool(NO_PINS)
            .with_pin("sheet_read", first_digest.unwrap_or_else(|| WRONG.into())),
        4 => TrustPolicy::every_tool(NO_PINS).with_pin("sheet_read", WRONG),
        _ => TrustPolicy::every_tool(NO_PINS)
            .with_pin("sheet_read", WRONG)
            .withhold_changed_pins(true),
    }
}

fn read(
    pages: &[String],
    policy: &TrustPolicy,
    definitions: bool,
) -> Option<Result<ListingReader, human_plus_core::Error>> {
    let mut reader = ListingReader::new();
    for p in pages {
        if let Err(e) = reader.page(p.clone(), None, policy, definitions) {
            return Some(Err(e));
        }
    }
    Some(Ok(reader))
}

fuzz_target!(|data: &[u8]| {
    let mode = data.first().copied().unwrap_or(0);
    let approval_mask = data.get(1).copied().unwrap_or(0);
    let rest = data.get(2..).unwrap_or_default();
    let pages: Vec<String> = rest
        .split(|b| *b == 0)
        .take(4)
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let policy = policy(mode, &pages);
    let approval: Vec<&str> = APPROVAL
        .iter()
        .enumerate()
        .filter(|(i, _)| approval_mask & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect();

    // The tree way and the names way.
    let tree = read(&pages, &policy, true)
        .unwrap()
        .and_then(|r| r.finish(&policy, None, true));
    let names = read(&pages, &policy, false)
        .unwrap()
        .and_then(|r| r.finish(&policy, None, false));
    match (&tree, &names) {
        (Ok(t), Ok(n)) => assert_eq!(t.admitted(), n.admitted(), "the two ways disagree"),
        (Err(a), Err(b)) => assert_eq!(a, b, "the two ways refuse differently"),
        (t, n) => panic!(
            "one way refuses: {:?} / {:?}",
            t.as_ref().err(),
            n.as_ref().err()
        ),
    }
    let Ok(outcome) = tree else { return };
    let Ok(names) = names else { return };
    assert!(!outcome.reused && !names.reused);

    // The kept verdict serves the same pages, and not changed ones.
    let verdict = names.verdict.into_owned();
    let mut again = ListingReader::new();
    for p in &pages {
        again
            .page(p.clone(), Some(&verdict), &policy, false)
            .expect("read before");
    }
    let served = again
        .finish(&policy, Some(&verdict), false)
        .expect("admitted before");
    assert!(served.reused, "the same pages were read again");
    assert_eq!(served.admitted(), verdict.admitted());
    let mut changed = ListingReader::new();
    for (i, p) in pages.iter().enumerate() {
        let p = if i + 1 == pages.len() {
            format!("{p} ")
        } else {
            p.clone()
        };
        changed
            .page(p, Some(&verdict), &policy, false)
            .expect("a space changes nothing");
    }
    let fresh = changed
        .finish(&policy, Some(&verdict), false)
        .expect("admitted before");
    assert!(!fresh.reused, "a changed page served the kept verdict");
    assert_eq!(fresh.admitted(), verdict.admitted());

    // What was admitted.
    let admission = outcome.admission.expect("definitions were asked for");
    let admitted: Vec<&str> = admission.admitted.iter().map(|t| t.name()).collect();
    assert_eq!(admitted, outcome.verdict.admitted());
    let unique: BTreeSet<&str> = admitted.iter().copied().collect();
    assert_eq!(unique.len(), admitted.len(), "a name admitted twice");
    for t in &admission.admitted {
        assert!(!is_reserved_tool_name(t.name()), "reserved {}", t.name());
        assert!(
            is_well_formed_tool_name(t.name()),
            "malformed {:?}",
            t.name()
        );
        assert!(policy.allows(t.name()));
        assert!(t.input_schema().is_object());
        if policy.withholds_changed_pins()
            && let Some(pin) = policy.pin(t.name())
        {
            assert_eq!(pin, t.digest(), "a changed pin admitted");
        }
    }
    for name in outcome.claims.keys() {
        assert!(
            unique.contains(name.as_str()),
            "a claim of a tool not admitted"
        );
    }
    let discovery = Discovery {
        tools: admission.admitted,
        withheld: admission.withheld,
        malformed: outcome.malformed,
        claims: outcome.claims,
    };

    // Its JSON reads back.
    let json = serde_json::to_string(&discovery).expect("a discovery is JSON");
    let back: Discovery = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("a discovery does not read back ({e}): {json}"));
    assert_eq!(back, discovery, "the discovery read back differently");

    // The tool set.
    let set = toolset(&discovery, &approval);
    assert_eq!(set.len(), discovery.tools.len());
    for (s, t) in set.iter().zip(&discovery.tools) {
        assert_eq!(s.name, t.name());
        assert_eq!(s.digest, t.digest());
        assert_eq!(s.requires_approval, approval.contains(&t.name()));
        for r in &s.required {
            assert!(
                s.parameters.contains_key(r),
                "required {r} is not a parameter"
            );
        }
        let text = serde_json::to_string(s).expect("a tool is JSON");
        let back: SurfaceTool = serde_json::from_str(&text).expect("a tool reads back");
        assert_eq!(&back, s);

        for line in ToolSummary::of(t, discovery.claims_of(t.name())).lines() {
            assert!(
                line.chars().count() <= 2 * SUMMARY_LINE_MAX + 12 * 60,
                "{line}"
            );
            assert!(
                !line.chars().any(human_plus_fuzz::must_be_escaped),
                "an unescaped character in {line:?}"
            );
        }
    }
});
