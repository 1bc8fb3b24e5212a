#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
mod common;
use common::Env;
use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::json;
use std::process::Stdio;
use std::time::Duration;

#[test]
fn count() {
    let bin = std::env::var("BRIDGE_BIN").unwrap();
    let env = Env::default_surface();
    env.rt.block_on(async {
        let mut cmd = tokio::process::Command::new(bin);
        cmd.arg("mcp")
            .args(env.connect_args())
            .args(["--allow", "sheet_get_cell,sheet_set_cell,changes_since"])
            .env("HUMAN_PLUS_TOKEN", &env.token)
            .env("HUMAN_PLUS_LOG", "debug");
        let (io, stderr) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let client = ().serve(io).await.unwrap();
        let step = Duration::from_secs(30);
        common::call_tool(&client, "sheet_get_cell", json!({"address":"C3"}), step).await;
        common::call_tool(&client, "sheet_get_cell", json!({"address":"C3"}), step).await;
        let before = (
            env.surface().requests("tools/list"),
            env.surface().requests("tools/call"),
            env.surface().requests("initialize"),
        );
        env.surface().person().set_cell("C3", "p").unwrap();
        let t = std::time::Instant::now();
        let r = common::call_tool(
            &client,
            "sheet_set_cell",
            json!({"address":"C3","value":"a"}),
            step,
        )
        .await;
        let took = t.elapsed();
        let after = (
            env.surface().requests("tools/list"),
            env.surface().requests("tools/call"),
            env.surface().requests("initialize"),
        );
        eprintln!(
            "refused={:?} took {took:?} before(list,call,init)={before:?} after={after:?}",
            r.is_error
        );
        let calls: Vec<String> = env.surface().calls().into_iter().map(|c| c.tool).collect();
        eprintln!("calls {calls:?}");
        client.cancel().await.unwrap();
        let mut s = String::new();
        use tokio::io::AsyncReadExt;
        let mut e = stderr.unwrap();
        let _ = tokio::time::timeout(step, e.read_to_string(&mut s)).await;
        let lines: Vec<&str> = s.lines().filter(|l| l.contains("relay request")).collect();
        eprintln!(
            "{} relay requests; last 8:\n{}",
            lines.len(),
            lines
                .iter()
                .rev()
                .take(8)
                .rev()
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    });
}
