//! `human-plus probe` against the demo surface with its Human+ behaviours
//! on and off reports each state correctly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Env, with};
use human_plus_relay::RevisionMode;
use serde_json::Value;

fn probe(env: &Env, runtime: &str, read: bool) -> Value {
    let args = env.connect_args();
    let mut extra = vec!["probe", "--json", "--runtime", runtime];
    if read {
        extra.extend(["--read", "sheet_get_cell", "--args", r#"{"address":"A1"}"#]);
    }
    let run = env.run(&with(&args, &extra));
    assert_eq!(run.code, 0, "{run:?}");
    run.assert_no_secret(&env.token);
    serde_json::from_str(&run.stdout).unwrap()
}

fn names(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn enforced_and_attributed() {
    let env = Env::default_surface();
    env.surface().person().set_cell("B4", "12").unwrap();
    let report = probe(&env, "tokio", true);
    assert!(names(&report, "tools").contains(&"sheet_set_cell".to_owned()));
    assert_eq!(names(&report, "withheld"), ["sheet_confirm_edit"]);
    assert_eq!(report["withheld"][0]["code"], "reserved");
    for tool in report["tools"].as_array().unwrap() {
        assert!(tool["digest"].as_str().unwrap().starts_with("sha256:"));
    }
    let feed = &report["change_feed"];
    assert_eq!(feed["state"], "attributed", "{feed}");
    assert_eq!(feed["label"], "attributed");
    assert_eq!(feed["by_actor"]["human"], 1);
    let conflict = &report["conflict_detection"];
    assert_eq!(conflict["state"], "enforced", "{conflict}");
    assert_eq!(conflict["stale_pin"], "refused");
    assert_eq!(conflict["revision"], "r2");
    // The probe changed nothing on the sheet.
    assert_eq!(env.surface().cell("B4").as_deref(), Some("12"));
    assert!(env.surface().writes().is_empty());
    // The feed, a read, the stale read, and the feed the refusal asked
    // what changed since the pin: reads only.
    let calls: Vec<String> = env.surface().calls().into_iter().map(|c| c.tool).collect();
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_eq!(calls.last().map(String::as_str), Some("changes_since"));
}

#[test]
fn minted_but_not_enforced_and_not_attributed() {
    let env = Env::start(|b| b.revisions(RevisionMode::MintOnly).feed_attribution(false));
    env.surface().person().set_cell("B4", "12").unwrap();
    let report = probe(&env, "blocking", true);
    let feed = &report["change_feed"];
    assert_eq!(feed["state"], "offered", "{feed}");
    assert_eq!(feed["label"], "offered, not attributed");
    assert_eq!(feed["by_actor"]["unknown"], 1);
    let conflict = &report["conflict_detection"];
    assert_eq!(conflict["state"], "minted", "{conflict}");
    assert_eq!(conflict["label"], "minted, not enforced");
    assert_eq!(conflict["stale_pin"], "accepted");
}

#[test]
fn no_revisions_no_feed() {
    let env = Env::start(|b| b.revisions(RevisionMode::Off).change_feed(false));
    let report = probe(&env, "async-std", true);
    assert_eq!(report["change_feed"]["state"], "unavailable");
    assert_eq!(report["change_feed"]["tool"], Value::Null);
    let conflict = &report["conflict_detection"];
    assert_eq!(conflict["state"], "unavailable", "{conflict}");
    assert_eq!(conflict["stale_pin"], "not_tried");
    assert_eq!(conflict["revision"], Value::Null);
    assert!(!names(&report, "tools").contains(&"changes_since".to_owned()));
}

#[test]
fn no_revisions_but_an_attributed_feed() {
    let env = Env::start(|b| b.revisions(RevisionMode::Off));
    env.surface().person().set_cell("A2", "Quinces").unwrap();
    let report = probe(&env, "tokio", true);
    assert_eq!(report["change_feed"]["state"], "attributed");
    assert_eq!(report["conflict_detection"]["state"], "unavailable");
}

#[test]
fn without_read_nothing_but_the_feed_is_called() {
    let env = Env::default_surface();
    let report = probe(&env, "tokio", false);
    assert_eq!(
        report["change_feed"]["label"],
        "offered, attribution not observed"
    );
    assert_eq!(report["change_feed"]["changes"], 0);
    // The feed's own answer carried a revision: minted, enforcement untested.
    let conflict = &report["conflict_detection"];
    assert_eq!(conflict["state"], "minted");
    assert_eq!(conflict["label"], "minted, enforcement not observed");
    assert_eq!(conflict["stale_pin"], "not_tried");
    let calls = env.surface().calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tool, "changes_since");
}

#[test]
fn a_feed_withheld_by_trust_is_said_so_and_text_is_plain() {
    let env = Env::default_surface();
    let args = env.connect_args();
    let run = env.run(&with(
        &args,
        &[
            "probe",
            "--allow",
            "sheet_get_cell",
            "--read",
            "sheet_get_cell",
            "--args",
            r#"{"address": "B4"}"#,
        ],
    ));
    assert_eq!(run.code, 0, "{run:?}");
    run.assert_no_secret(&env.token);
    let out = &run.stdout;
    assert!(out.contains("Change feed: not admitted"), "{out}");
    assert!(out.contains("local trust withheld it"), "{out}");
    assert!(out.contains("Conflict detection: enforced"), "{out}");
    assert!(out.contains("was refused as stale"), "{out}");
    assert!(
        out.contains("sheet_confirm_edit  reserved for the person"),
        "{out}"
    );
    assert!(!out.contains('\x1b'));

    // A read that fails says why, in one line.
    let run = env.run(&with(&args, &["probe", "--read", "sheet_get_cell"]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains(
            "`sheet_get_cell` failed: tool_error (the tool reported an error; check --args)"
        ),
        "{}",
        run.stdout
    );
}
