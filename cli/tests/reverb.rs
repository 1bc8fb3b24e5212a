//! Every front end over a Reverb (Pusher-protocol) channel: `tools`,
//! `call`, `changes`, `join`, `status`, `mcp` and `demo --transport reverb`
//! take the page's link in the Reverb form
//! (`page#session=…&token=…&reverb=ws(s)://…/app/KEY&auth=…`) through the
//! same entry points as a relay link (`HUMAN_PLUS_INVITATION`,
//! `--invitation-file`, `join`'s standard input), with `--allow-host` /
//! `--allow-port` declaring both hosts: the channel server's and the host
//! app's auth bridge's. Real sockets on loopback: our `PusherServer`, our
//! `AuthBridge` and the demo sheet on the channel.
//!
//! The token goes only to the auth bridge: it is in no output, no log line
//! and no URL the channel server saw.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{ChannelEnv, Run};
use rmcp::ServiceExt;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

const RUNTIMES: [&str; 3] = ["tokio", "blocking", "async-std"];

/// The token is in no output and reached no URL of the channel server.
fn assert_token_kept(env: &ChannelEnv, run: &Run) {
    run.assert_no_secret(&env.token);
    for path in env.server().seen_paths() {
        assert!(!path.contains(&env.token), "the token in a URL: {path}");
    }
}

/// `args` (a command and its own options) with the environment's egress.
fn with_egress<'a>(env_args: &'a [String], args: &[&'a str]) -> Vec<&'a str> {
    common::with(env_args, args)
}

#[test]
fn tools_call_and_changes_take_a_reverb_link_in_every_runtime() {
    let env = ChannelEnv::private();
    let egress = env.egress_args();
    for (done, runtime) in RUNTIMES.into_iter().enumerate() {
        let tools = env.run(&with_egress(
            &egress,
            &["tools", "--every-tool", "--runtime", runtime],
        ));
        assert_eq!(tools.code, 0, "{runtime}: {tools:?}");
        assert!(tools.stdout.contains("sheet_set_cell"), "{tools:?}");
        assert_token_kept(&env, &tools);

        let call = env.run(&with_egress(
            &egress,
            &[
                "call",
                "sheet_get_cell",
                r#"{"address":"A2"}"#,
                "--allow",
                "sheet_get_cell",
                "--runtime",
                runtime,
            ],
        ));
        assert_eq!(call.code, 0, "{runtime}: {call:?}");
        assert!(call.stdout.contains("Apples"), "{call:?}");
        assert!(
            call.stdout.contains("<untrusted-tool-output"),
            "framed: {call:?}"
        );
        assert_token_kept(&env, &call);

        let changes = env.run(&with_egress(
            &egress,
            &["changes", "--allow", "changes_since", "--runtime", runtime],
        ));
        assert_eq!(changes.code, 0, "{runtime}: {changes:?}");
        assert_token_kept(&env, &changes);

        let announce = env.run(&with_egress(
            &egress,
            &[
                "announce",
                "editing",
                "--target",
                "B4",
                "--runtime",
                runtime,
            ],
        ));
        assert_eq!(announce.code, 0, "{runtime}: {announce:?}");
        assert_token_kept(&env, &announce);
        let seen = env.rt.block_on(
            env.page()
                .wait_for(Duration::from_secs(10), |p| p.activity().len() > done),
        );
        assert!(seen, "{runtime}: the page saw the announcement");
    }

    // probe: what the surface really does, over the channel.
    let probe = env.run(&with_egress(
        &egress,
        &[
            "probe",
            "--read",
            "sheet_get_cell",
            "--args",
            r#"{"address":"A2"}"#,
            "--json",
        ],
    ));
    assert_eq!(probe.code, 0, "{probe:?}");
    let report: Value = serde_json::from_str(&probe.stdout).unwrap();
    assert_eq!(
        report["conflict_detection"]["stale_pin"], "refused",
        "{report}"
    );
    assert_token_kept(&env, &probe);
    // Nothing but the channel's own requests reached the channel server.
    assert!(
        env.server()
            .seen_paths()
            .iter()
            .all(|p| p.starts_with(&format!("/app/{}?protocol=7", common::APP_KEY))),
        "{:?}",
        env.server().seen_paths()
    );
    assert!(env.bridge().signed() >= 9, "one signature per operation");
}

#[test]
fn an_invitation_file_holds_a_reverb_link_too() {
    let env = ChannelEnv::private();
    let dir = std::env::temp_dir().join(format!("hp-reverb-file-{}", common::random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("link.txt");
    std::fs::write(&file, format!("{}\n", env.link())).unwrap();
    let egress = env.egress_args();
    let run = common::run(
        &with_egress(
            &egress,
            &[
                "call",
                "sheet_get_cell",
                r#"{"address":"A3"}"#,
                "--allow",
                "sheet_get_cell",
                "--invitation-file",
                file.to_str().unwrap(),
            ],
        ),
        None,
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("Pears"), "{run:?}");
    assert_token_kept(&env, &run);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn both_hosts_must_be_declared_and_nothing_leaves_otherwise() {
    let env = ChannelEnv::private();
    let base = [
        "--allow-host",
        "127.0.0.1",
        "--allow-unverified-egress",
        "--allow-insecure-loopback",
        "--every-tool",
    ];
    let accepted = env.server().connections_accepted();
    let asked = env.bridge().requests();
    for (declared, missing) in [(env.ws_port, env.auth_port), (env.auth_port, env.ws_port)] {
        let port = declared.to_string();
        let mut args = vec!["tools", "--allow-port", &port];
        args.extend(base);
        let run = env.run(&args);
        assert_eq!(run.code, 3, "{run:?}");
        assert!(run.stderr.contains("error[egress_refused]"), "{run:?}");
        assert!(
            run.stderr.contains(&format!("--allow-port {missing}")),
            "the hint names the missing port: {run:?}"
        );
        assert_token_kept(&env, &run);
    }
    // A host not declared: the hint names the flag, for the channel server.
    let run = env.run(&[
        "tools",
        "--allow-host",
        "localhost",
        "--allow-unverified-egress",
        "--allow-insecure-loopback",
        "--every-tool",
    ]);
    assert_eq!(run.code, 3, "{run:?}");
    assert!(run.stderr.contains("--allow-host 127.0.0.1"), "{run:?}");
    assert_eq!(
        env.server().connections_accepted(),
        accepted,
        "a refused channel reached the channel server"
    );
    assert_eq!(
        env.bridge().requests(),
        asked,
        "a refused channel reached the auth bridge"
    );
}

#[test]
fn the_bridges_refusal_and_the_channels_limit_have_their_own_exit_codes() {
    let env = ChannelEnv::private();
    let egress = env.egress_args();
    // A token the auth bridge does not grant: 403, exit 6, in the words of
    // the auth bridge (not the relay's 401).
    let wrong = format!("tok{}", common::random_hex(16));
    let run = common::run_with_env(
        &with_egress(&egress, &["tools", "--every-tool"]),
        None,
        &[("HUMAN_PLUS_INVITATION", &env.link_with(&wrong))],
    );
    assert_eq!(run.code, 6, "{run:?}");
    assert!(
        run.stderr.contains("error[attachment_unauthorized]"),
        "{run:?}"
    );
    assert!(run.stderr.contains("auth bridge"), "{run:?}");
    assert!(run.stderr.contains("403"), "{run:?}");
    run.assert_no_secret(&wrong);

    // A request over the channel's limit: refused here, not sent, exit 13,
    // naming the limit; `--channel-limit` sets it.
    let big = json!({"address": "C1", "value": "x".repeat(12_000)}).to_string();
    let calls = env.page().calls().len();
    let run = env.run(&with_egress(
        &egress,
        &["call", "sheet_set_cell", &big, "--allow", "sheet_set_cell"],
    ));
    assert_eq!(run.code, 13, "{run:?}");
    assert!(run.stderr.contains("error[channel_limit]"), "{run:?}");
    assert!(run.stderr.contains("10000 bytes"), "{run:?}");
    let small = json!({"address": "C1", "value": "x".repeat(400)}).to_string();
    let run = env.run(&with_egress(
        &egress,
        &[
            "call",
            "sheet_set_cell",
            &small,
            "--allow",
            "sheet_set_cell",
            "--channel-limit",
            "300",
        ],
    ));
    assert_eq!(run.code, 13, "{run:?}");
    assert!(run.stderr.contains("300 bytes"), "{run:?}");
    assert_eq!(env.page().calls().len(), calls, "nothing reached the page");
    assert_token_kept(&env, &run);
}

/// What a channel cannot tell is said in words. On a private channel
/// nobody says the page left: a one-shot command waits for its timeout and
/// says what may have happened (exit 8). On a presence channel the bridge,
/// which saw the page, hears it leave: its next call ends at once with
/// `page_left`, before anything is sent.
#[test]
fn a_page_that_left_is_said_in_words() {
    for presence in [false, true] {
        let env = ChannelEnv::start(presence, |b| b);
        env.leave();
        let mut args = vec![
            "tools".to_owned(),
            "--every-tool".to_owned(),
            "--timeout".to_owned(),
            "2".to_owned(),
        ];
        args.extend(
            env.egress_args()
                .into_iter()
                .take_while(|a| a != "--timeout"),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = env.run(&args);
        assert_eq!(run.code, 8, "{run:?}");
        assert!(run.stderr.contains("error[timeout]"), "{run:?}");
        assert!(run.stderr.contains("the page may have left"), "{run:?}");
        assert!(
            run.stderr
                .contains("ask the person whether the page is still open"),
            "{run:?}"
        );
        assert_token_kept(&env, &run);
    }

    let env = ChannelEnv::start(true, |b| b);
    let mut cmd = tokio::process::Command::new(common::BIN);
    cmd.arg("mcp")
        .args(env.egress_args())
        .args(["--allow", "sheet_get_cell,sheet_set_cell"])
        .env("HUMAN_PLUS_INVITATION", env.link())
        .env_remove("HUMAN_PLUS_TOKEN")
        .env_remove("HUMAN_PLUS_CONFIG_DIR");
    env.rt.block_on(async {
        let io = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
        let step = Duration::from_secs(60);
        let client = tokio::time::timeout(step, ().serve(io))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(client.list_all_tools().await.unwrap().len(), 2);
        env.page().leave().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = std::time::Instant::now();
        let write = common::call_tool(
            &client,
            "sheet_set_cell",
            json!({"address": "A1", "value": "agent"}),
            step,
        )
        .await;
        let text = common::text(&write);
        assert_eq!(write.is_error, Some(true), "{text}");
        assert!(
            text.starts_with("page_left: The page left the channel"),
            "{text}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "not waited on");
        assert!(!text.contains(&env.token));
        client.cancel().await.unwrap();
    });
    assert_eq!(env.page().cell("A1").as_deref(), Some("Item"));
}

/// `join` with a Reverb link: both hosts shown and declared, the profile
/// saved with its channel, then `tools`, `status` and the bridge through
/// the profile.
#[test]
fn join_saves_a_reverb_profile_that_every_command_uses() {
    let env = ChannelEnv::private();
    let config = std::env::temp_dir().join(format!("hp-reverb-join-{}", common::random_hex(6)));
    let config_s = config.to_str().unwrap().to_owned();
    let egress = env.egress_args();

    // Without the auth bridge's port declared, and no --yes: refused,
    // naming what is missing; nothing sent.
    let accepted = env.server().connections_accepted();
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.args([
        "join",
        "--name",
        "rv",
        "--allow-host",
        "127.0.0.1",
        "--allow-port",
        &env.ws_port.to_string(),
        "--allow-unverified-egress",
        "--allow-insecure-loopback",
    ])
    .env("HUMAN_PLUS_CONFIG_DIR", &config)
    .env_remove("HUMAN_PLUS_INVITATION")
    .env_remove("HUMAN_PLUS_TOKEN");
    let run = common::run_command(cmd, Some(&format!("{}\n", env.link())));
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("--allow-port {}", env.auth_port)),
        "{run:?}"
    );
    assert_eq!(env.server().connections_accepted(), accepted);
    assert_token_kept(&env, &run);

    // Declared: join shows both hosts and the channel, discovers, saves.
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.args(["join", "--yes", "--pin", "--name", "rv"])
        .args(&egress)
        .env("HUMAN_PLUS_CONFIG_DIR", &config)
        .env_remove("HUMAN_PLUS_INVITATION")
        .env_remove("HUMAN_PLUS_TOKEN");
    let run = common::run_command(cmd, Some(&format!("{}\n", env.link())));
    assert_eq!(run.code, 0, "{run:?}");
    for line in [
        "transport: Reverb channel (Pusher protocol)".to_owned(),
        format!("channel: {}", env.channel),
        format!("server:  ws://127.0.0.1 port {}", env.ws_port),
        format!("auth:    http://127.0.0.1 port {}", env.auth_port),
        "token:   sent only to the auth bridge".to_owned(),
        "egress:  declared by the flags given".to_owned(),
        "sheet_set_cell".to_owned(),
        "Saved profile rv".to_owned(),
    ] {
        assert!(run.stdout.contains(&line), "missing {line:?}: {run:?}");
    }
    assert_token_kept(&env, &run);
    let profile: Value = serde_json::from_str(
        &std::fs::read_to_string(config.join("profiles/rv/profile.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(profile["reverb"]["ws_url"], env.ws_url.as_str());
    assert_eq!(profile["reverb"]["auth_url"], env.auth_url.as_str());
    assert_eq!(profile["reverb"]["channel"], env.channel.as_str());
    assert!(!profile.to_string().contains(&env.token));

    let from_profile = |args: &[&str]| {
        common::run_with_env(args, None, &[("HUMAN_PLUS_CONFIG_DIR", config_s.as_str())])
    };
    let run = from_profile(&[
        "call",
        "--profile",
        "rv",
        "sheet_get_cell",
        r#"{"address":"A2"}"#,
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("Apples"), "{run:?}");

    // The bridge from the profile, as a client's entry starts it.
    let mut cmd = tokio::process::Command::new(common::BIN);
    cmd.args(["mcp", "--profile", "rv"])
        .env("HUMAN_PLUS_CONFIG_DIR", &config)
        .env_remove("HUMAN_PLUS_INVITATION")
        .env_remove("HUMAN_PLUS_TOKEN");
    env.rt.block_on(async {
        let io = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
        let step = Duration::from_secs(60);
        let client = tokio::time::timeout(step, ().serve(io))
            .await
            .unwrap()
            .unwrap();
        assert!(client.list_all_tools().await.unwrap().len() >= 6);
        let read =
            common::call_tool(&client, "sheet_get_cell", json!({"address": "A3"}), step).await;
        assert!(
            common::text(&read).contains("Pears"),
            "{}",
            common::text(&read)
        );
        client.cancel().await.unwrap();
    });

    // review: nothing changed since join.
    let run = from_profile(&["review", "rv", "--json"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_token_kept(&env, &run);

    // status lists it from its files, and probes it through the channel.
    let run = from_profile(&["status"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains(&format!(
            "channel:  {} on 127.0.0.1 port {}",
            env.channel, env.ws_port
        )),
        "{run:?}"
    );
    assert!(
        run.stdout
            .contains(&format!("auth:     127.0.0.1 port {}", env.auth_port)),
        "{run:?}"
    );
    let run = from_profile(&["status", "rv"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains("probe:    the channel server and the auth bridge answered, and a page answered the MCP handshake"),
        "{run:?}"
    );
    let run = from_profile(&["status", "rv", "--json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["profile"]["transport"], "reverb");
    assert_eq!(doc["profile"]["channel"], env.channel.as_str());
    assert_eq!(doc["probe"]["outcome"], "page_answered");
    assert_token_kept(&env, &run);

    // The page leaves: status says no page answered, in the channel's words.
    env.leave();
    let run = from_profile(&["status", "rv", "--timeout", "1"]);
    assert_eq!(run.code, 8, "{run:?}");
    assert!(run.stdout.contains("probe:    no page"), "{run:?}");
    assert!(run.stdout.contains("channel"), "{run:?}");
    assert_token_kept(&env, &run);
    std::fs::remove_dir_all(&config).unwrap();
}

/// The bridge over a channel, driven by rmcp's client, on every runtime:
/// tools listed, a read, a stale write refused, the feed; the token in no
/// log line at TRACE.
#[test]
fn the_bridge_serves_a_page_on_a_channel() {
    for runtime in RUNTIMES {
        let env = ChannelEnv::private();
        let mut cmd = tokio::process::Command::new(common::BIN);
        cmd.arg("mcp")
            .args(env.egress_args())
            .args([
                "--allow",
                "sheet_get_cell,sheet_set_cell,changes_since",
                "--runtime",
                runtime,
            ])
            .env("HUMAN_PLUS_INVITATION", env.link())
            .env("HUMAN_PLUS_LOG", "trace")
            .env_remove("HUMAN_PLUS_TOKEN")
            .env_remove("HUMAN_PLUS_CONFIG_DIR");
        env.rt.block_on(async {
            let (io, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut stderr = stderr.unwrap();
            let log = tokio::spawn(async move {
                let mut s = String::new();
                let _ =
                    tokio::time::timeout(Duration::from_secs(120), stderr.read_to_string(&mut s))
                        .await;
                s
            });
            let step = Duration::from_secs(60);
            let client = tokio::time::timeout(step, ().serve(io))
                .await
                .unwrap()
                .unwrap();
            let tools = client.list_all_tools().await.unwrap();
            assert_eq!(tools.len(), 3, "{runtime}: {tools:?}");
            let read =
                common::call_tool(&client, "sheet_get_cell", json!({"address": "A2"}), step).await;
            assert_eq!(read.is_error, Some(false), "{runtime}");
            assert!(common::text(&read).contains("Apples"));
            env.page().person().edit_cell("A1", "person").await.unwrap();
            let stale = common::call_tool(
                &client,
                "sheet_set_cell",
                json!({"address": "A1", "value": "agent"}),
                step,
            )
            .await;
            assert_eq!(stale.is_error, Some(true), "{runtime}");
            assert!(
                common::text(&stale).contains("NOT applied"),
                "{}",
                common::text(&stale)
            );
            let feed = common::call_tool(&client, "changes_since", json!({}), step).await;
            assert_eq!(feed.is_error, Some(false), "{runtime}");
            client.cancel().await.unwrap();
            let log = log.await.unwrap();
            assert!(
                log.contains("(") && log.contains("reverb transport"),
                "{runtime}: the bridge says its transport: {log}"
            );
            for line in log.lines() {
                assert!(!line.contains(&env.token), "{runtime}: {line}");
            }
        });
        assert_eq!(env.page().cell("A1").as_deref(), Some("person"));
        for path in env.server().seen_paths() {
            assert!(!path.contains(&env.token));
        }
    }
}

const DEMO_LINES: &[&str] = &[
    "1  A hostile invitation is refused before a byte leaves",
    "wss://169.254.169.254/app/",
    "refused at attach: egress_refused",
    "auth https://sheets.corp.example",
    "refused after resolving, before connecting: egress_refused",
    "2  Trust is declared before the surface is asked anything",
    "3  Tools discovered from the surface's own tools/list",
    "admitted  sheet_set_cell      sha256:",
    "withheld  sheet_confirm_edit  reserved for the person",
    "4  The agent reads B4",
    "B4 = 7 at revision r1",
    "6  The agent writes B4 = 8, pinned to r1: refused",
    "surface_changed_under_you: nothing was written (B4 is still 12)",
    "7  The change feed: defer to the person",
    "8  Re-read, then write where the person is not",
    "D4 = 14.40 (12 x 1.20), pinned to r2: applied, the sheet is at r3.",
    "9  What the page saw",
    "activity  Human+ demo agent (agent, #7c3aed) editing D4 [attention]",
    "sheet     B4 = 12 (the person's), D4 = 14.40 (the agent's)",
];

#[test]
fn the_demo_runs_over_a_channel_in_every_runtime() {
    for runtime in RUNTIMES {
        let run = common::run(
            &["demo", "--transport", "reverb", "--runtime", runtime],
            None,
        );
        assert_eq!(run.code, 0, "{runtime}: {run:?}");
        for line in DEMO_LINES {
            assert!(
                run.stdout.contains(line),
                "{runtime}: missing {line:?} in\n{}",
                run.stdout
            );
        }
        assert!(
            run.stdout.contains("channel   ws://127.0.0.1:"),
            "{}",
            run.stdout
        );
        assert!(
            run.stdout
                .contains(&format!("({runtime} runtime, reverb transport)")),
            "{}",
            run.stdout
        );
        assert!(!run.stdout.contains("hp_") && !run.stderr.contains("hp_"));
        assert!(run.stderr.is_empty(), "{}", run.stderr);
    }
    // `relay` is the default's other name; the web demo is relay-only.
    let run = common::run(&["demo", "--web", "--transport", "reverb"], None);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("relay"), "{run:?}");
}
