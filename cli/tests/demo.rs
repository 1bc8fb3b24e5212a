//! `human-plus demo` exits 0 and tells the whole story, on every runtime and
//! transport, with no terminal styling when stdout is not a terminal.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

const KEY_LINES: &[&str] = &[
    "1  A hostile invitation is refused before a byte leaves",
    "https://169.254.169.254",
    "refused at attach: egress_refused",
    "https://sheets.corp.example  (its DNS answer is 10.0.0.7)",
    "refused after resolving, before connecting: egress_refused",
    "2  Trust is declared before the surface is asked anything",
    "3  Tools discovered from the surface's own tools/list",
    "admitted  sheet_set_cell      sha256:",
    "withheld  sheet_confirm_edit  reserved for the person",
    "4  The agent reads B4",
    "B4 = 7 at revision r1",
    "<untrusted-tool-output source=\"human-plus:sheet:demo\" tool=\"sheet_get_cell\"",
    "5  The person edits the same cell",
    "the sheet moves to r2",
    "6  The agent writes B4 = 8, pinned to r1: refused",
    "surface_changed_under_you: nothing was written (B4 is still 12)",
    "The surface changed while you were working on it, so `sheet_set_cell` was NOT applied.",
    "Do not simply repeat `sheet_set_cell` with the same arguments",
    "7  The change feed: defer to the person",
    "B4  updated by human: re-read it, do not correct it",
    "8  Re-read, then write where the person is not",
    "B4 = 12 at revision r2: the person's value stands.",
    "D4 = 14.40 (12 x 1.20), pinned to r2: applied, the sheet is at r3.",
    "9  What the page saw",
    "activity  Human+ demo agent (agent, #7c3aed) editing D4 [attention]",
    "sheet_set_cell refused (pinned r1, sheet at r2)",
    "sheet     B4 = 12 (the person's), D4 = 14.40 (the agent's)",
];

#[test]
fn demo_exits_zero_for_every_runtime_and_transport() {
    for runtime in ["tokio", "blocking", "async-std"] {
        for transport in ["sse", "poll"] {
            let run = common::run(
                &["demo", "--runtime", runtime, "--transport", transport],
                None,
            );
            assert_eq!(run.code, 0, "{runtime}/{transport}: {run:?}");
            for line in KEY_LINES {
                assert!(
                    run.stdout.contains(line),
                    "{runtime}/{transport}: missing {line:?} in\n{}",
                    run.stdout
                );
            }
            assert!(
                run.stdout
                    .contains(&format!("({runtime} runtime, {transport} transport)")),
                "{}",
                run.stdout
            );
            assert!(!run.stdout.contains('\x1b'), "ANSI escapes on a pipe");
            // The demo's token is `hp_` and 32 hex digits; it is never shown.
            assert!(!run.stdout.contains("hp_") && !run.stderr.contains("hp_"));
            assert!(run.stderr.is_empty(), "{}", run.stderr);
        }
    }
}

#[test]
fn help_documents_the_exit_codes() {
    let run = common::run(&["--help"], None);
    assert_eq!(run.code, 0);
    for line in [
        "Exit codes:",
        "3  egress refused",
        "4  trust refused",
        "5  surface unavailable",
        "6  attachment unauthorized",
        "7  the surface changed under you",
        "8  timeout",
    ] {
        assert!(run.stdout.contains(line), "{line:?} in {}", run.stdout);
    }
    let run = common::run(&["demo", "--runtime", "nope"], None);
    assert_eq!(run.code, 2);
}
