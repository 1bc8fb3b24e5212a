//! The careless agent of issue 33, through the command and through the MCP
//! bridge, on every kind of enforcing surface (strict or lenient about a
//! stale read, with or without a change feed, naming its current revision
//! in a refusal or not), over both receive legs: read; the person edits;
//! the write is refused; the person edits again; the agent repeats its
//! write blindly — refused, and the person's second value stands; a read
//! then a write is applied (recovery within two calls), except on the one
//! kind that cannot be recovered without an unpinned call. Nothing after
//! the first call goes out unpinned.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::Env;
use common::text;
use human_plus_relay::DemoSurfaceBuilder;
use rmcp::ServiceExt;
use rmcp::model::CallToolResult;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

const ALLOW: &str = "sheet_get_cell,sheet_set_cell,changes_since";
const STEP: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy)]
struct Kind {
    stale_reads: bool,
    feed: bool,
    current: bool,
}

impl Kind {
    fn all() -> Vec<Kind> {
        let mut all = Vec::new();
        for stale_reads in [false, true] {
            for feed in [true, false] {
                for current in [true, false] {
                    all.push(Kind {
                        stale_reads,
                        feed,
                        current,
                    });
                }
            }
        }
        all
    }

    fn configure(self, b: DemoSurfaceBuilder) -> DemoSurfaceBuilder {
        b.stale_reads(self.stale_reads)
            .change_feed(self.feed)
            .current_in_refusal(self.current)
    }

    /// Strict about reads, and saying neither what changed nor where it
    /// is now: no recovery without an unpinned call, so none.
    fn unrecoverable(self) -> bool {
        !self.stale_reads && !self.feed && !self.current
    }
}

fn assert_all_pinned_after_the_first(env: &Env, kind: Kind) {
    let calls = env.surface().calls();
    assert!(calls[0].pinned.is_none(), "{kind:?}: the first call");
    for c in &calls[1..] {
        assert!(c.pinned.is_some(), "{kind:?}: unpinned: {c:?}");
    }
}

/// The revision a `call --json` result carries.
fn revision_of(stdout: &str) -> String {
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    v["revision"].as_str().unwrap().to_owned()
}

/// The revision the refusal's hint tells to pin the next call with.
fn next_pin(stderr: &str) -> String {
    let at = stderr
        .find("pin the next call with --revision ")
        .unwrap_or_else(|| panic!("no next pin in: {stderr}"));
    stderr[at + "pin the next call with --revision ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// `human-plus call`, each run a fresh attachment pinned with
/// `--revision` to what the last run said.
#[test]
fn through_the_command_on_every_kind_of_surface() {
    for transport in ["sse", "poll"] {
        for kind in Kind::all() {
            let env = Env::start(|b| kind.configure(b));
            let connect = env.connect_args();
            let run = |tool: &str, args: &str, revision: Option<&str>| {
                let mut argv: Vec<&str> = vec!["call", tool, args];
                if let Some(r) = revision {
                    argv.extend(["--revision", r]);
                }
                argv.extend(["--json", "--allow", ALLOW, "--transport", transport]);
                argv.extend(connect.iter().map(String::as_str));
                env.run(&argv)
            };
            let read = run("sheet_get_cell", r#"{"address":"C3"}"#, None);
            assert_eq!(read.code, 0, "{kind:?} {}", read.stderr);
            let r1 = revision_of(&read.stdout);
            env.surface().person().set_cell("C3", "person-1").unwrap();
            let write = r#"{"address":"C3","value":"agent-A"}"#;
            let refused = run("sheet_set_cell", write, Some(&r1));
            assert_ne!(refused.code, 0, "{kind:?}");
            assert!(
                refused.stderr.contains("surface_changed_under_you"),
                "{kind:?} {}",
                refused.stderr
            );
            let pin = next_pin(&refused.stderr);
            env.surface().person().set_cell("C3", "person-2").unwrap();
            // The blind repeat, pinned to what the refusal said.
            let again = run("sheet_set_cell", write, Some(&pin));
            assert_ne!(again.code, 0, "{kind:?} {}", again.stdout);
            assert_eq!(env.surface().cell("C3").as_deref(), Some("person-2"));
            let pin = next_pin(&again.stderr);
            let reread = run("sheet_get_cell", r#"{"address":"C3"}"#, Some(&pin));
            if kind.unrecoverable() {
                assert_ne!(reread.code, 0, "{kind:?}");
                assert_eq!(env.surface().cell("C3").as_deref(), Some("person-2"));
            } else {
                // The read answered at the current revision (a lenient
                // surface answers any pin and says where it is now).
                let pin = if reread.code == 0 {
                    revision_of(&reread.stdout)
                } else {
                    next_pin(&reread.stderr)
                };
                let written = run(
                    "sheet_set_cell",
                    r#"{"address":"C3","value":"agent-B"}"#,
                    Some(&pin),
                );
                assert_eq!(written.code, 0, "{kind:?} {}", written.stderr);
                assert_eq!(env.surface().cell("C3").as_deref(), Some("agent-B"));
            }
            assert_all_pinned_after_the_first(&env, kind);
        }
    }
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &str, a: Value) -> CallToolResult {
    common::call_tool(client, tool, a, STEP).await
}

/// One bridge process, as an MCP client keeps it: the same attachment for
/// every call, pinned by the bridge itself.
#[test]
fn through_the_bridge_on_every_kind_of_surface() {
    for transport in ["sse", "poll"] {
        for kind in Kind::all() {
            let env = Env::start(|b| kind.configure(b));
            env.rt.block_on(async {
                let mut cmd = tokio::process::Command::new(common::BIN);
                cmd.arg("mcp")
                    .args(env.connect_args())
                    .args(["--allow", ALLOW, "--transport", transport])
                    .env("HUMAN_PLUS_TOKEN", &env.token);
                let (io, _stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                let client = tokio::time::timeout(STEP, ().serve(io))
                    .await
                    .unwrap()
                    .unwrap();
                let read = call(&client, "sheet_get_cell", json!({"address": "C3"})).await;
                assert_eq!(read.is_error, Some(false), "{kind:?} {}", text(&read));
                env.surface()
                    .person()
                    .edit_cell("C3", "person-1")
                    .await
                    .unwrap();
                let write = json!({"address": "C3", "value": "agent-A"});
                let refused = call(&client, "sheet_set_cell", write.clone()).await;
                assert_eq!(refused.is_error, Some(true), "{kind:?}");
                let t = text(&refused);
                assert!(t.contains("`sheet_set_cell` was NOT applied"), "{t}");
                if kind.feed {
                    assert!(
                        t.contains("\nC3: ") && t.contains(" by a person"),
                        "{kind:?} {t}"
                    );
                }
                env.surface()
                    .person()
                    .edit_cell("C3", "person-2")
                    .await
                    .unwrap();
                let again = call(&client, "sheet_set_cell", write.clone()).await;
                assert_eq!(again.is_error, Some(true), "{kind:?} {}", text(&again));
                assert_eq!(env.surface().cell("C3").as_deref(), Some("person-2"));
                let _ = call(&client, "sheet_get_cell", json!({"address": "C3"})).await;
                let written = call(
                    &client,
                    "sheet_set_cell",
                    json!({"address": "C3", "value": "agent-B"}),
                )
                .await;
                if kind.unrecoverable() {
                    assert_eq!(written.is_error, Some(true), "{kind:?}");
                    assert_eq!(env.surface().cell("C3").as_deref(), Some("person-2"));
                } else {
                    assert_eq!(written.is_error, Some(false), "{kind:?} {}", text(&written));
                    assert_eq!(env.surface().cell("C3").as_deref(), Some("agent-B"));
                }
                client.cancel().await.unwrap();
            });
            assert_all_pinned_after_the_first(&env, kind);
        }
    }
}
