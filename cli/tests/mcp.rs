//! The MCP bridge driven by a real MCP client library (rmcp's client over
//! the child process's stdio), against an in-process relay and demo sheet:
//! initialize, tools/list without the confirmation tool, calls, a refused
//! stale pin, the change feed, a terminal attachment, and the
//! `server/discover` fallback.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::Env;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::io::AsyncReadExt;

const ALLOW: &str = "sheet_get_cell,sheet_set_cell,changes_since,sheet_confirm_edit";
const STEP: Duration = Duration::from_secs(120);

fn bridge(
    env: &Env,
    runtime: &str,
    transport: &str,
) -> (TokioChildProcess, tokio::process::ChildStderr) {
    let mut cmd = tokio::process::Command::new(common::BIN);
    cmd.arg("mcp")
        .args(env.connect_args())
        .args([
            "--allow",
            ALLOW,
            "--runtime",
            runtime,
            "--transport",
            transport,
        ])
        .env("HUMAN_PLUS_TOKEN", &env.token)
        .env_remove("NO_COLOR");
    let (child, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, stderr.unwrap())
}

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

async fn call<S: ClientHandler>(
    client: &RunningService<RoleClient, S>,
    tool: &str,
    a: Value,
) -> CallToolResult {
    tokio::time::timeout(
        STEP,
        client.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args(a))),
    )
    .await
    .expect("the bridge answered in time")
    .expect("a CallToolResult")
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn collect(mut stderr: tokio::process::ChildStderr) -> String {
    let mut s = String::new();
    let _ = tokio::time::timeout(STEP, stderr.read_to_string(&mut s)).await;
    s
}

async fn story<S: ClientHandler>(env: &Env, client: &RunningService<RoleClient, S>) {
    let tools = tokio::time::timeout(STEP, client.list_all_tools())
        .await
        .unwrap()
        .unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["sheet_get_cell", "sheet_set_cell", "changes_since"]);
    let set = tools.iter().find(|t| t.name == "sheet_set_cell").unwrap();
    assert_eq!(set.input_schema["required"], json!(["address", "value"]));
    assert!(
        set.description
            .as_deref()
            .unwrap()
            .starts_with("Write one cell.")
    );

    // A read: framed, not an error.
    let read = call(client, "sheet_get_cell", json!({"address": "B4"})).await;
    assert_eq!(read.is_error, Some(false));
    let t = text(&read);
    assert!(
        t.contains("<untrusted-tool-output") && t.contains("\n7\n"),
        "{t}"
    );

    // The person edits between the agent's read and write.
    env.surface().person().set_cell("B4", "12").unwrap();
    let stale = call(
        client,
        "sheet_set_cell",
        json!({"address": "B4", "value": "8"}),
    )
    .await;
    assert_eq!(stale.is_error, Some(true));
    let t = text(&stale);
    assert!(
        t.starts_with(
            "The surface changed while you were working on it, so `sheet_set_cell` was NOT applied."
        ),
        "{t}"
    );
    assert!(
        t.contains("at revision r1, observed when you called `sheet_get_cell`"),
        "{t}"
    );
    assert!(t.contains("Do not simply repeat `sheet_set_cell`"), "{t}");
    assert_eq!(env.surface().cell("B4").as_deref(), Some("12"));

    // The change feed defers to the person.
    let feed = call(client, "changes_since", json!({"since": "r1"})).await;
    assert_eq!(feed.is_error, Some(false));
    let t = text(&feed);
    assert!(t.contains("- B4 (updated by human)"), "{t}");

    // Re-read, then a write pinned to the current revision lands.
    let reread = call(client, "sheet_get_cell", json!({"address": "B4"})).await;
    assert!(text(&reread).contains("\n12\n"));
    let write = call(
        client,
        "sheet_set_cell",
        json!({"address": "D4", "value": "14.40"}),
    )
    .await;
    assert_eq!(write.is_error, Some(false), "{}", text(&write));
    assert_eq!(env.surface().cell("D4").as_deref(), Some("14.40"));

    // A tool error comes back framed, as isError.
    let bad = call(client, "sheet_get_cell", json!({})).await;
    assert_eq!(bad.is_error, Some(true));
    assert!(
        text(&bad).contains("<untrusted-tool-output"),
        "{}",
        text(&bad)
    );

    // A withheld tool is refused, never forwarded.
    let confirm = call(client, "sheet_confirm_edit", json!({"pendingId": "p1"})).await;
    assert_eq!(confirm.is_error, Some(true));
    assert!(
        text(&confirm).starts_with("tool_refused:"),
        "{}",
        text(&confirm)
    );
    assert!(
        !env.surface()
            .calls()
            .iter()
            .any(|c| c.tool == "sheet_confirm_edit")
    );
}

#[test]
fn rmcp_client_drives_the_bridge() {
    let env = Env::default_surface();
    env.rt.block_on(async {
        let (transport, stderr) = bridge(&env, "tokio", "sse");
        let stderr = tokio::spawn(collect(stderr));
        let client = tokio::time::timeout(
            STEP,
            ClientConfig::default()
                .with_protocol_version(ProtocolVersion::V_2025_11_25)
                .serve(transport),
        )
        .await
        .unwrap()
        .unwrap();
        let info = client.peer_info().unwrap();
        assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
        assert_eq!(info.server_info.as_ref().unwrap().name, "human-plus");
        assert!(info.capabilities.tools.is_some());

        story(&env, &client).await;

        // The session ends: a terminal attachment is a clear error result.
        assert!(env.relay().drop_session(&env.session));
        let gone = call(&client, "sheet_get_cell", json!({"address": "B4"})).await;
        assert_eq!(gone.is_error, Some(true));
        let t = text(&gone);
        assert!(t.starts_with("surface_unavailable:"), "{t}");
        assert!(t.contains("session has ended"), "{t}");
        let again = call(&client, "sheet_get_cell", json!({"address": "B4"})).await;
        assert_eq!(again.is_error, Some(true));
        assert!(
            text(&again).contains("session has ended"),
            "{}",
            text(&again)
        );

        client.cancel().await.unwrap();
        let log = stderr.await.unwrap();
        assert!(log.contains("attached to surface sheet:one"), "{log}");
        assert!(!log.contains(&env.token), "the token leaked into the log");
    });
}

#[test]
fn discover_falls_back_to_initialize_on_every_runtime_and_transport() {
    for (runtime, transport) in [
        ("blocking", "poll"),
        ("async-std", "sse"),
        ("tokio", "poll"),
    ] {
        let env = Env::default_surface();
        env.rt.block_on(async {
            let (transport_io, stderr) = bridge(&env, runtime, transport);
            let stderr = tokio::spawn(collect(stderr));
            // A current client: probe `server/discover` first, fall back to
            // `initialize` on the JSON-RPC error.
            let client = tokio::time::timeout(
                STEP,
                ClientConfig::default().serve_with_lifecycle(
                    transport_io,
                    ClientLifecycleMode::Auto {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                        legacy_version: Some(ProtocolVersion::V_2025_06_18),
                    },
                ),
            )
            .await
            .unwrap()
            .unwrap();
            let info = client.peer_info().unwrap();
            assert_eq!(info.protocol_version, ProtocolVersion::V_2025_06_18);
            story(&env, &client).await;
            client.cancel().await.unwrap();
            let log = stderr.await.unwrap();
            assert!(
                !log.contains(&env.token),
                "{runtime}/{transport}: the token leaked"
            );
            assert!(log.contains("server/discover: answered -32601"), "{log}");
        });
    }
}

#[test]
fn a_client_offering_an_unknown_version_is_offered_2025_06_18() {
    let env = Env::default_surface();
    env.rt.block_on(async {
        let (transport, stderr) = bridge(&env, "tokio", "sse");
        let _stderr = tokio::spawn(collect(stderr));
        // rmcp's default client asks for its latest version in `initialize`.
        let client = tokio::time::timeout(STEP, ().serve(transport))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            client.peer_info().unwrap().protocol_version,
            ProtocolVersion::V_2025_06_18
        );
        let tools = client.list_all_tools().await.unwrap();
        assert!(!tools.iter().any(|t| t.name == "sheet_confirm_edit"));
        client.cancel().await.unwrap();
    });
}
