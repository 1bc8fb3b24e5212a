//! `human-plus join`, `--profile`, `--invitation-file` and
//! `HUMAN_PLUS_INVITATION`, over real sockets against the embedded relay
//! and demo surface: the link a person shares becomes a profile, the
//! profile drives the other commands, a hostile link is refused before any
//! byte leaves (on every runtime), and the token is in no output and no
//! file but its own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, COMMAND_TIMEOUT, Env, Run};

/// A fresh scratch directory under the system's temporary directory.
fn scratch(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hp-{what}-{}", common::random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the binary with `stdin` as its standard input, these environment
/// variables, and no ambient token, link, log level or config directory.
fn run_input(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
    run_input_in(None, args, stdin, env)
}

/// [`run_input`], in directory `cwd` when given.
fn run_input_in(
    cwd: Option<&Path>,
    args: &[&str],
    stdin: Option<&str>,
    env: &[(&str, &str)],
) -> Run {
    let mut cmd = Command::new(BIN);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    cmd.args(args)
        .env_remove("HUMAN_PLUS_TOKEN")
        .env_remove("HUMAN_PLUS_PROXY_AUTH")
        .env_remove("HUMAN_PLUS_INVITATION")
        .env_remove("HUMAN_PLUS_LOG")
        .env_remove("HUMAN_PLUS_CONFIG_DIR")
        .env_remove("NO_COLOR")
        .envs(env.iter().copied());
    common::run_command(cmd, stdin)
}

/// The loopback development flags for `env`'s relay.
fn loopback_egress(env: &Env) -> Vec<String> {
    [
        "--allow-insecure-loopback",
        "--allow-unverified-egress",
        "--allow-host",
        "127.0.0.1",
        "--allow-port",
        &env.port.to_string(),
        "--timeout",
        "60",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// What a new user does: the link on standard input, `join --yes --pin
/// --name X`, then `tools` and `call` from the profile alone.
#[test]
fn join_writes_a_profile_that_the_other_commands_use() {
    let env = Env::default_surface();
    let config = scratch("join-config");
    let config_s = config.to_str().unwrap().to_owned();
    let cfg = [("HUMAN_PLUS_CONFIG_DIR", config_s.as_str())];
    // The relay session URL form, with a route suffix, as a person may
    // copy it from a relay's log.
    let link = format!("{}/{}/events?token={}\n", env.base, env.session, env.token);
    let mut args = vec!["join", "--yes", "--pin", "--name", "sheet-one"];
    let egress = loopback_egress(&env);
    args.extend(strs(&egress));
    let run = run_input(&args, Some(&link), &cfg);
    assert_eq!(run.code, 0, "{run:?}");
    run.assert_no_secret(&env.token);
    // It showed the relay, session and egress, the tools with digests and
    // the withheld confirmation tool with its reason.
    assert!(
        run.stdout.contains(&format!("session: {}", env.session)),
        "{run:?}"
    );
    assert!(
        run.stdout.contains(&format!("port {}", env.port)),
        "{run:?}"
    );
    assert!(
        run.stdout.contains("sheet_set_cell      sha256:"),
        "{run:?}"
    );
    assert!(
        run.stdout
            .contains("sheet_confirm_edit  reserved for the person"),
        "{run:?}"
    );
    assert!(
        run.stdout
            .contains("claude mcp add sheet-one -e HUMAN_PLUS_CONFIG_DIR="),
        "{run:?}"
    );
    // The printed entries name the binary by its full path, as the
    // written ones do (a client started from a desktop has a minimal PATH).
    assert!(
        run.stdout.contains("/human-plus mcp --profile sheet-one"),
        "{run:?}"
    );
    assert!(run.stdout.contains("\"command\":\"/"), "{run:?}");
    assert!(run.stdout.contains("\"mcpServers\""), "{run:?}");
    assert!(run.stdout.contains("\"type\":\"stdio\""), "{run:?}");

    let dir = config.join("profiles").join("sheet-one");
    let token_file = dir.join("token");
    assert_eq!(
        std::fs::read_to_string(&token_file).unwrap().trim(),
        env.token
    );
    #[cfg(unix)]
    assert_eq!(mode(&token_file), 0o600);
    for file in files_under(&config) {
        if file != token_file {
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(!text.contains(&env.token), "the token is in {file:?}");
        }
    }
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("profile.json")).unwrap()).unwrap();
    assert_eq!(profile["session"], env.session.as_str());
    assert_eq!(profile["relay"], env.base.as_str());
    let allow: Vec<&str> = profile["allow"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(allow.contains(&"sheet_set_cell") && !allow.contains(&"sheet_confirm_edit"));
    let pins: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("pins.json")).unwrap()).unwrap();
    assert!(
        pins["sheet_set_cell"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );

    // The profile alone drives the other commands: no token in the
    // environment, no relay flags.
    let run = run_input(&["tools", "--profile", "sheet-one"], None, &cfg);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("sheet_get_cell"), "{run:?}");
    run.assert_no_secret(&env.token);
    let run = run_input(
        &[
            "call",
            "sheet_get_cell",
            r#"{"address":"A1"}"#,
            "--profile",
            "sheet-one",
        ],
        None,
        &cfg,
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("revision "), "{run:?}");
    run.assert_no_secret(&env.token);
    // The profile's pins are enforced: a definition that no longer
    // matches its pin is refused (exit 4).
    let pins_path = dir.join("pins.json");
    let reviewed = std::fs::read_to_string(&pins_path).unwrap();
    std::fs::write(
        &pins_path,
        r#"{"sheet_get_cell": "sha256:00000000000000000000000000000000"}"#,
    )
    .unwrap();
    let run = run_input(
        &[
            "call",
            "sheet_get_cell",
            r#"{"address":"A1"}"#,
            "--profile",
            "sheet-one",
        ],
        None,
        &cfg,
    );
    assert_eq!(run.code, 4, "{run:?}");
    assert!(run.stderr.contains("pin"), "{run:?}");
    std::fs::write(&pins_path, reviewed).unwrap();
    // Every runtime runs from the profile.
    for runtime in ["blocking", "async-std"] {
        let run = run_input(
            &["tools", "--profile", "sheet-one", "--runtime", runtime],
            None,
            &cfg,
        );
        assert_eq!(run.code, 0, "{runtime}: {run:?}");
        assert!(run.stdout.contains("sheet_get_cell"), "{runtime}: {run:?}");
    }
    // Flags override the profile: a narrower allowlist.
    let run = run_input(
        &[
            "tools",
            "--profile",
            "sheet-one",
            "--allow",
            "sheet_get_cell",
        ],
        None,
        &cfg,
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("admitted (1)"), "{run:?}");
    // ... but never its relay: the token would go elsewhere.
    let run = run_input(
        &[
            "tools",
            "--profile",
            "sheet-one",
            "--relay",
            "https://elsewhere.example",
            "--session",
            "other1",
        ],
        None,
        &cfg,
    );
    assert_eq!(run.code, 2, "{run:?}");

    // HUMAN_PLUS_LOG works for the one-shot commands, and never shows the
    // token.
    let mut logged = cfg.to_vec();
    logged.push(("HUMAN_PLUS_LOG", "trace"));
    for runtime in ["tokio", "blocking", "async-std"] {
        let run = run_input(
            &["changes", "--profile", "sheet-one", "--runtime", runtime],
            None,
            &logged,
        );
        assert_eq!(run.code, 0, "{run:?}");
        assert!(
            run.stderr.contains("DEBUG") && run.stderr.contains("relay request"),
            "{runtime} logged: {run:?}"
        );
        run.assert_no_secret(&env.token);
    }

    // A token file others can read is refused, as ssh refuses such a key.
    #[cfg(unix)]
    {
        chmod(&token_file, 0o644);
        let run = run_input(&["tools", "--profile", "sheet-one"], None, &cfg);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.contains("accessible by others"), "{run:?}");
        assert!(run.stderr.contains("chmod 600"), "{run:?}");
        run.assert_no_secret(&env.token);
        chmod(&token_file, 0o640);
        let run = run_input(&["mcp", "--profile", "sheet-one"], None, &cfg);
        assert_eq!(run.code, 2, "{run:?}");
        chmod(&token_file, 0o600);
    }
    let run = run_input(&["tools", "--profile", "no-such-profile"], None, &cfg);
    assert_eq!(run.code, 2, "{run:?}");
    let run = run_input(&["tools", "--profile", "../escape"], None, &cfg);
    assert_eq!(run.code, 2, "{run:?}");
    std::fs::remove_dir_all(&config).unwrap();
}

/// The fragment form `buildShareUrl` mints, with the relay at the page's
/// origin (`--relay-path ""`), from HUMAN_PLUS_INVITATION; and the page's
/// JSON from --invitation-file, straight into `tools`.
#[test]
fn the_fragment_link_and_the_pages_json() {
    let env = Env::default_surface();
    let config = scratch("join-fragment");
    let config_s = config.to_str().unwrap().to_owned();
    let link = format!(
        "{}/whiteboard#session={}&token={}",
        env.base, env.session, env.token
    );
    let egress = loopback_egress(&env);
    // The relay serves at its root, not under the default relay path a
    // page link assumes: the 404 says which path was assumed, and the hint
    // names the flag.
    let mut args = vec!["join", "--yes", "--name", "frag"];
    args.extend(strs(&egress));
    let run = run_input(
        &args,
        None,
        &[
            ("HUMAN_PLUS_CONFIG_DIR", config_s.as_str()),
            ("HUMAN_PLUS_INVITATION", link.as_str()),
        ],
    );
    assert_eq!(run.code, 9, "{run:?}");
    assert!(run.stderr.contains("error[relay_failed]"), "{run:?}");
    assert!(
        run.stderr
            .contains("the relay path /agent-relay was assumed"),
        "{run:?}"
    );
    assert!(
        run.stderr
            .contains("hint: give the page's relay path with --relay-path"),
        "{run:?}"
    );
    assert!(!config.join("profiles/frag").exists());
    run.assert_no_secret(&env.token);

    let mut args = vec!["join", "--yes", "--relay-path", "", "--name", "frag"];
    args.extend(strs(&egress));
    let run = run_input(
        &args,
        None,
        &[
            ("HUMAN_PLUS_CONFIG_DIR", config_s.as_str()),
            ("HUMAN_PLUS_INVITATION", link.as_str()),
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains("Invitation (fragment link, from HUMAN_PLUS_INVITATION)"),
        "{run:?}"
    );
    assert!(run.stdout.contains("no pins"), "{run:?}");
    assert!(!config.join("profiles/frag/pins.json").exists());
    run.assert_no_secret(&env.token);

    let json = format!(
        r#"{{"relay":"{}","session":"{}","token":"{}","surfaceId":"sheet:web","application":"human-plus-web"}}"#,
        env.base, env.session, env.token
    );
    let file = config.join("invitation.json");
    std::fs::write(&file, &json).unwrap();
    let mut args = vec![
        "call",
        "sheet_get_cell",
        r#"{"address":"A1"}"#,
        "--every-tool",
        "--invitation-file",
        file.to_str().unwrap(),
    ];
    args.extend(strs(&egress));
    let run = run_input(&args, None, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains("source=\"human-plus:sheet:web\""),
        "{run:?}"
    );
    run.assert_no_secret(&env.token);
    // A link and a token file at once is ambiguous.
    let token_file = config.join("token");
    std::fs::write(&token_file, &env.token).unwrap();
    args.extend(["--token-file", token_file.to_str().unwrap()]);
    let run = run_input(&args, None, &[]);
    assert_eq!(run.code, 2, "{run:?}");
    std::fs::remove_dir_all(&config).unwrap();
}

/// Without a terminal join asks nothing: without --yes it saves nothing,
/// and egress not declared by flags is refused (exit 3) before any byte
/// leaves.
#[test]
fn without_yes_nothing_is_accepted() {
    let env = Env::default_surface();
    let config = scratch("join-no");
    let config_s = config.to_str().unwrap().to_owned();
    let cfg = [("HUMAN_PLUS_CONFIG_DIR", config_s.as_str())];
    let link = format!("{}/{}?token={}", env.base, env.session, env.token);
    // Egress declared by flags, but neither --yes nor --pin: discovery
    // runs, nothing is saved.
    let egress = loopback_egress(&env);
    let mut args = vec!["join", "--name", "nope"];
    args.extend(strs(&egress));
    let run = run_input(&args, Some(&link), &cfg);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--yes"), "{run:?}");
    assert!(!config.join("profiles/nope").exists());
    // --pin alone saves, pinned: the whole non-interactive set-up when the
    // flags declare the egress.
    let mut args = vec!["join", "--pin", "--name", "pinned"];
    args.extend(strs(&egress));
    let run = run_input(&args, Some(&link), &cfg);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(config.join("profiles/pinned/pins.json").exists());
    run.assert_no_secret(&env.token);
    // Egress not declared and not accepted: refused before discovery.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let link = format!(
        "http://127.0.0.1:{port}/{}?token={}",
        env.session, env.token
    );
    let run = run_input(
        &[
            "join",
            "--allow-insecure-loopback",
            "--allow-unverified-egress",
        ],
        Some(&link),
        &cfg,
    );
    assert_eq!(run.code, 3, "{run:?}");
    assert!(run.stderr.contains("--allow-host 127.0.0.1"), "{run:?}");
    assert!(listener.accept().is_err(), "a connection was made");
    run.assert_no_secret(&env.token);
    std::fs::remove_dir_all(&config).unwrap();
}

/// `--write-config` merges into a client's file that already has other
/// servers: they survive, a backup exists, the token is in no config file
/// and no output line.
#[test]
fn write_config_keeps_other_servers() {
    let env = Env::default_surface();
    let config = scratch("join-write");
    let config_s = config.to_str().unwrap().to_owned();
    let cfg = [("HUMAN_PLUS_CONFIG_DIR", config_s.as_str())];
    let link = format!("{}/{}?token={}", env.base, env.session, env.token);
    let egress = loopback_egress(&env);
    for (client, key, path) in [
        ("cursor", "mcpServers", config.join("cursor/mcp.json")),
        ("vscode", "servers", config.join("Code/User/mcp.json")),
        (
            "claude-desktop",
            "mcpServers",
            config.join("claude_desktop_config.json"),
        ),
    ] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let before = serde_json::json!({
            "theme": "dark",
            key: {
                "other": {"command": "other-server", "args": ["--x"]},
                "another": {"command": "npx", "args": ["-y", "mcp-relay-client"]}
            }
        });
        std::fs::write(&path, serde_json::to_string_pretty(&before).unwrap()).unwrap();
        #[cfg(unix)]
        chmod(&path, 0o640);
        let mut args = vec![
            "join",
            "--yes",
            "--pin",
            "--name",
            "fancy",
            "--write-config",
            client,
            "--config-path",
            path.to_str().unwrap(),
        ];
        args.extend(strs(&egress));
        let run = run_input(&args, Some(&link), &cfg);
        assert_eq!(run.code, 0, "{client}: {run:?}");
        run.assert_no_secret(&env.token);
        assert!(
            run.stdout.contains("the previous file is kept as"),
            "{run:?}"
        );
        let after: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(after["theme"], "dark", "{client}");
        assert_eq!(after[key]["other"]["command"], "other-server", "{client}");
        assert_eq!(
            after[key]["another"]["args"][1], "mcp-relay-client",
            "{client}"
        );
        let entry = &after[key]["fancy"];
        assert_eq!(
            entry["args"],
            serde_json::json!(["mcp", "--profile", "fancy"])
        );
        assert!(
            entry["command"].as_str().unwrap().ends_with("human-plus"),
            "{entry}"
        );
        assert_eq!(entry["env"]["HUMAN_PLUS_CONFIG_DIR"], config_s.as_str());
        assert_eq!(entry.get("type").is_some(), client == "vscode", "{client}");
        #[cfg(unix)]
        assert_eq!(mode(&path), 0o640, "the file keeps its permissions");
        // The backup is the file as it was.
        let backups: Vec<PathBuf> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_str().unwrap().ends_with(".bak"))
            .collect();
        assert_eq!(backups.len(), 1, "{backups:?}");
        let backup: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&backups[0]).unwrap()).unwrap();
        assert_eq!(backup, before);
        // No temporary file is left behind.
        for p in std::fs::read_dir(path.parent().unwrap()).unwrap() {
            let p = p.unwrap().path();
            assert!(!p.to_str().unwrap().ends_with(".tmp"), "{p:?}");
        }
    }
    // The token is in no file but the profile's token file.
    let token_file = config.join("profiles/fancy/token");
    for file in files_under(&config) {
        if file != token_file {
            assert!(
                !std::fs::read_to_string(&file).unwrap().contains(&env.token),
                "the token is in {file:?}"
            );
        }
    }
    // Claude Code's project file, ./.mcp.json, created where join runs.
    let project = config.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let mut args = vec![
        "join",
        "--yes",
        "--name",
        "fancy",
        "--write-config",
        "claude-code",
    ];
    args.extend(strs(&egress));
    let run = run_input_in(Some(&project), &args, Some(&link), &cfg);
    assert_eq!(run.code, 0, "{run:?}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(project.join(".mcp.json")).unwrap()).unwrap();
    assert_eq!(
        written["mcpServers"]["fancy"]["args"],
        serde_json::json!(["mcp", "--profile", "fancy"])
    );
    run.assert_no_secret(&env.token);
    #[cfg(unix)]
    assert_eq!(
        mode(&project.join(".mcp.json")),
        0o600,
        "a new file is the user's"
    );
    // A file that is not a JSON object is left alone.
    let bad = config.join("broken.json");
    std::fs::write(&bad, "// a comment\n{}").unwrap();
    let mut args = vec![
        "join",
        "--yes",
        "--name",
        "fancy2",
        "--write-config",
        "cursor",
        "--config-path",
        bad.to_str().unwrap(),
    ];
    args.extend(strs(&egress));
    let run = run_input(&args, Some(&link), &cfg);
    assert_eq!(run.code, 2, "{run:?}");
    assert_eq!(std::fs::read_to_string(&bad).unwrap(), "// a comment\n{}");
    assert!(
        !config.join("profiles/fancy2").exists(),
        "refused before anything was saved"
    );
    run.assert_no_secret(&env.token);
    for file in files_under(&config) {
        if file != token_file {
            assert!(
                !std::fs::read_to_string(&file).unwrap().contains(&env.token),
                "the token is in {file:?}"
            );
        }
    }
    std::fs::remove_dir_all(&config).unwrap();
}

/// A link is never a flag value or an argument: refused with exit 2, and
/// the refusal does not repeat it.
#[test]
fn a_link_on_the_command_line_is_refused() {
    let token = format!("tok{}", common::random_hex(16));
    let link = format!("https://app.example/page#session=abcd1234&token={token}");
    for args in [
        vec!["join", "--invitation", link.as_str()],
        vec!["join", "--link", link.as_str()],
        vec!["join", link.as_str()],
        vec!["tools", "--every-tool", "--invitation", link.as_str()],
        vec!["mcp", "--link", link.as_str()],
        vec!["call", "x", "--invitation", link.as_str()],
    ] {
        let run = run_input(&args, None, &[]);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains("process list"), "{args:?}: {run:?}");
        run.assert_no_secret(&token);
    }
}

/// The hostile links, each refused before any byte leaves: through `join`
/// (standard input) and through `tools --invitation-file`, on every
/// runtime. A listening socket on the port every link names sees no
/// connection.
#[test]
fn hostile_links_are_refused_before_any_byte_leaves() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let p = listener.local_addr().unwrap().port();
    let t = format!("tok{}", common::random_hex(16));
    let s = "sess_hostile";
    let long = "a".repeat(5000);
    let cases: Vec<(String, i32)> = vec![
        (format!("http://user:pw@127.0.0.1:{p}/{s}?token={t}"), 2),
        (format!("http://@127.0.0.1:{p}/{s}?token={t}"), 2),
        (
            format!("http://127.0.0.1:{p}\\@evil.example/{s}?token={t}"),
            2,
        ),
        (format!("http://127.0.0.1:{p}/{s}?token={t}&token={t}"), 2),
        (format!("http://127.0.0.1:{p}/{s}?token={t}&key={t}"), 2),
        (format!("http://127.0.0.1:{p}/{s}?token=%00{t}"), 2),
        (
            format!("http://127.0.0.1:{p}/{s}?token={t}%0d%0aX-Evil:%201"),
            2,
        ),
        (format!("http://127.0.0.1:{p}/{s}?token={t}\u{1}"), 2),
        (format!("http://127.0.0.1:{p}/{s}?token={t}&pad={long}"), 2),
        (format!("http://127.0.0.1:0{p}/{s}?token={t}"), 2),
        (format!("http://0x7f.1:{p}/{s}?token={t}"), 2),
        (format!("http://127.1:{p}/{s}?token={t}"), 2),
        (format!("http://2130706433:{p}/{s}?token={t}"), 2),
        (format!("http://localhost.:{p}/{s}?token={t}"), 2),
        (format!("http://[::ffff:127.0.0.1]:{p}/{s}?token={t}"), 2),
        (format!("http://127.0.0.1:{p}/?session={s}#token={t}"), 2),
        (
            format!("http://127.0.0.1:{p}/agent-relay/../{s}?token={t}"),
            2,
        ),
        (format!("http://127.0.0.1:{p}/{s}?token=short"), 2),
        (format!("HTTP://127.0.0.1:{p}/{s}?token={t}"), 2),
        (format!("javascript://127.0.0.1:{p}/{s}?token={t}"), 2),
        (
            format!(r#"{{"relay":"http://127.0.0.1:{p}?x=1","session":"{s}","token":"{t}"}}"#),
            2,
        ),
        (
            format!(
                r#"{{"relay":"http://127.0.0.1:{p}","session":"{s}","session":"x{s}","token":"{t}"}}"#
            ),
            2,
        ),
        // Well-formed, but the egress policy's to refuse: a private
        // address over https without --allow-address.
        (format!("https://127.0.0.1:{p}/{s}?token={t}"), 3),
    ];
    let dir = scratch("hostile");
    let egress = [
        "--allow-insecure-loopback",
        "--allow-unverified-egress",
        "--allow-host",
        "127.0.0.1",
        "--allow-port",
        &p.to_string(),
    ];
    let config_s = dir.to_str().unwrap().to_owned();
    let cfg = [("HUMAN_PLUS_CONFIG_DIR", config_s.as_str())];
    for runtime in ["tokio", "blocking", "async-std"] {
        for (i, (link, code)) in cases.iter().enumerate() {
            let mut join = vec!["join", "--yes", "--pin", "--runtime", runtime];
            join.extend(egress);
            let run = run_input(&join, Some(link), &cfg);
            assert_eq!(run.code, *code, "join {runtime} {link:?}: {run:?}");
            run.assert_no_secret(&t);

            let file = dir.join(format!("link-{i}"));
            std::fs::write(&file, link).unwrap();
            let mut tools = vec![
                "tools",
                "--every-tool",
                "--runtime",
                runtime,
                "--invitation-file",
                file.to_str().unwrap(),
            ];
            tools.extend(egress);
            let run = run_input(&tools, None, &cfg);
            assert_eq!(run.code, *code, "tools {runtime} {link:?}: {run:?}");
            run.assert_no_secret(&t);
            assert!(
                listener.accept().is_err(),
                "{runtime} {link:?}: a connection reached the listener"
            );
        }
    }
    assert!(!dir.join("profiles").exists(), "no profile was written");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A relay mounted under a prefix, as the Fancy Node relay runs behind
/// `--prefix /agent-relay`: a forwarder that answers 404 to any path
/// outside the prefix and strips it before the local relay. Every path it
/// saw is recorded.
async fn prefixed_relay(
    relay_base: String,
    prefix: &'static str,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) -> u16 {
    use http_body_util::{Either, Empty};
    use hyper::body::Incoming;
    use hyper::{Request, Response, StatusCode};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let client: Client<_, Incoming> = Client::builder(TokioExecutor::new()).build_http();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let client = client.clone();
            let seen = std::sync::Arc::clone(&seen);
            let relay_base = relay_base.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let client = client.clone();
                    let seen = std::sync::Arc::clone(&seen);
                    let relay_base = relay_base.clone();
                    async move {
                        let path = req.uri().path().to_owned();
                        seen.lock().unwrap().push(path.clone());
                        let query = req
                            .uri()
                            .query()
                            .map(|q| format!("?{q}"))
                            .unwrap_or_default();
                        let Some(rest) = path.strip_prefix(prefix).filter(|r| r.starts_with('/'))
                        else {
                            let mut not_found =
                                Response::new(Either::Right(Empty::<bytes::Bytes>::new()));
                            *not_found.status_mut() = StatusCode::NOT_FOUND;
                            return Ok::<_, std::convert::Infallible>(not_found);
                        };
                        let (mut parts, body) = req.into_parts();
                        parts.uri = format!("{relay_base}{rest}{query}").parse().unwrap();
                        parts.headers.remove(hyper::header::HOST);
                        let answer = client
                            .request(Request::from_parts(parts, body))
                            .await
                            .unwrap();
                        Ok(answer.map(Either::Left))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}

/// What a new user does against a Fancy relay under its usual mount: the
/// page's fragment link (no relay path in it), `join`, then the bridge
/// from the profile, driven by rmcp's client. Every request reached the
/// relay under `/agent-relay/<session>/`.
#[test]
fn a_share_link_reaches_the_relay_under_its_prefix_and_the_bridge_runs_from_the_profile() {
    use rmcp::ServiceExt as _;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::TokioChildProcess;

    let env = Env::default_surface();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let port = env.rt.block_on(prefixed_relay(
        env.base.clone(),
        "/agent-relay",
        std::sync::Arc::clone(&seen),
    ));
    let config = scratch("join-prefix");
    let config_s = config.to_str().unwrap().to_owned();
    let cfg = [("HUMAN_PLUS_CONFIG_DIR", config_s.as_str())];
    let link = format!(
        "http://127.0.0.1:{port}/whiteboard#session={}&token={}",
        env.session, env.token
    );
    let port_s = port.to_string();
    let run = run_input(
        &[
            "join",
            "--yes",
            "--pin",
            "--name",
            "board",
            "--allow-insecure-loopback",
            "--allow-unverified-egress",
            "--allow-host",
            "127.0.0.1",
            "--allow-port",
            &port_s,
        ],
        Some(&link),
        &cfg,
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains(&format!("relay:   http://127.0.0.1:{port}/agent-relay")),
        "{run:?}"
    );
    run.assert_no_secret(&env.token);
    {
        let seen = seen.lock().unwrap();
        let under = format!("/agent-relay/{}/", env.session);
        assert!(!seen.is_empty());
        for path in seen.iter() {
            assert!(path.starts_with(&under), "{path} is outside {under}");
        }
        assert!(seen.iter().any(|p| p.ends_with("/events")), "{seen:?}");
        assert!(seen.iter().any(|p| p.ends_with("/inbox")), "{seen:?}");
    }

    // The bridge from the profile alone, as `claude mcp add board --
    // human-plus mcp --profile board` starts it.
    env.rt.block_on(async {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["mcp", "--profile", "board"])
            .env_remove("HUMAN_PLUS_TOKEN")
            .env_remove("HUMAN_PLUS_INVITATION")
            .env("HUMAN_PLUS_CONFIG_DIR", &config_s);
        let (io, stderr) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let step = Duration::from_secs(60);
        let client = tokio::time::timeout(step, ().serve(io))
            .await
            .unwrap()
            .unwrap();
        let tools = tokio::time::timeout(step, client.list_tools(None))
            .await
            .unwrap()
            .unwrap();
        let names: Vec<&str> = tools.tools.iter().map(|t| t.name.as_ref()).collect();
        assert!(names.contains(&"sheet_get_cell"), "{names:?}");
        assert!(!names.contains(&"sheet_confirm_edit"), "{names:?}");
        let mut arguments = serde_json::Map::new();
        arguments.insert("address".into(), "A1".into());
        let result = tokio::time::timeout(
            step,
            client
                .call_tool(CallToolRequestParams::new("sheet_get_cell").with_arguments(arguments)),
        )
        .await
        .unwrap()
        .unwrap();
        assert_ne!(result.is_error, Some(true), "{result:?}");
        let text: String = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        assert!(text.contains("untrusted-tool-output"), "{text}");
        assert!(!text.contains(&env.token));
        client.cancel().await.unwrap();
        let mut log = String::new();
        let mut stderr = stderr.unwrap();
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut log),
        )
        .await;
        assert!(!log.contains(&env.token), "the token leaked: {log}");
    });
    std::fs::remove_dir_all(&config).unwrap();
}

/// `join` connects through the configured egress proxy with its
/// credentials (from a file), the profile records the proxy and the
/// file's path but never the credentials, and `tools --profile` goes
/// through the same proxy. With HUMAN_PLUS_LOG on, no line holds the
/// token or the password.
#[test]
fn join_through_an_egress_proxy_that_asks_for_credentials() {
    use human_plus_conformance::ConnectProxy;

    let env = Env::default_surface();
    let password = format!("pw:{}", common::random_hex(10));
    let proxy = ConnectProxy::requiring("agent", &password);
    let basic = proxy.expected_authorization().unwrap().to_owned();
    let config = scratch("join-proxy");
    let config_s = config.to_str().unwrap().to_owned();
    let auth_file = config.join("proxy-auth");
    std::fs::write(&auth_file, format!("agent:{password}\n")).unwrap();
    let link = format!("{}/{}?token={}", env.base, env.session, env.token);
    let proxy_url = proxy.url();
    let mut args = vec![
        "join",
        "--yes",
        "--name",
        "proxied",
        "--egress-proxy",
        &proxy_url,
        "--proxy-auth-file",
        auth_file.to_str().unwrap(),
    ];
    let egress = loopback_egress(&env);
    args.extend(strs(&egress));
    let env_vars = [
        ("HUMAN_PLUS_CONFIG_DIR", config_s.as_str()),
        ("HUMAN_PLUS_LOG", "trace"),
    ];
    let run = run_input(&args, Some(&link), &env_vars);
    assert_eq!(run.code, 0, "{run:?}");
    let no_secret = |run: &Run| {
        run.assert_no_secret(&env.token);
        run.assert_no_secret(&password);
        run.assert_no_secret(basic.trim_start_matches("Basic "));
    };
    no_secret(&run);
    assert!(run.stderr.contains("DEBUG"), "{run:?}");
    let heads = proxy.heads();
    assert!(!heads.is_empty(), "join went through the proxy");
    assert!(
        heads
            .iter()
            .all(|h| h.contains(&format!("Proxy-Authorization: {basic}\r\n")))
    );
    let profile = std::fs::read_to_string(config.join("profiles/proxied/profile.json")).unwrap();
    assert!(profile.contains(&proxy_url), "{profile}");
    assert!(profile.contains("proxy-auth"), "{profile}");
    assert!(!profile.contains(&password) && !profile.contains(&env.token));
    assert!(
        !config.join("profiles/proxied/pins.json").exists(),
        "no --pin, no pins"
    );

    let before = proxy.heads().len();
    let run = run_input(&["tools", "--profile", "proxied"], None, &env_vars);
    assert_eq!(run.code, 0, "{run:?}");
    no_secret(&run);
    assert!(proxy.heads().len() > before, "tools went through the proxy");
    std::fs::remove_dir_all(&config).unwrap();
}

/// A pseudo-terminal for `join`'s prompt, opened with rustix's safe
/// wrappers: the child gets the terminal side as its standard input,
/// output and error; the test types into the other side and reads all the
/// terminal shows (the kernel's echo included).
#[cfg(unix)]
mod terminal {
    use std::io::{Read as _, Write as _};
    use std::os::fd::OwnedFd;
    use std::process::{Child, Command, Stdio};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use rustix::fs::{Mode, OFlags, open};
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    use rustix::termios::{LocalModes, tcgetattr};

    use super::{BIN, COMMAND_TIMEOUT};

    pub struct Terminal {
        keyboard: std::fs::File,
        tty: Option<OwnedFd>,
        screen: Arc<Mutex<Vec<u8>>>,
        reader: Option<std::thread::JoinHandle<()>>,
    }

    impl Terminal {
        pub fn open() -> Terminal {
            let master =
                openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
            grantpt(&master).unwrap();
            unlockpt(&master).unwrap();
            let name = ptsname(&master, Vec::new()).unwrap();
            let tty = open(
                name.as_c_str(),
                OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
            let keyboard = std::fs::File::from(master);
            let mut display = keyboard.try_clone().unwrap();
            let screen = Arc::new(Mutex::new(Vec::new()));
            let shown = Arc::clone(&screen);
            // Reads until the terminal side is closed everywhere (EIO).
            let reader = std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = display.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    shown.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
            Terminal {
                keyboard,
                tty: Some(tty),
                screen,
                reader: Some(reader),
            }
        }

        /// Starts `human-plus args...` on this terminal, with `env` and no
        /// ambient token, link or configuration directory.
        pub fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
            let tty = self.tty.as_ref().unwrap();
            let io = || Stdio::from(tty.try_clone().unwrap());
            Command::new(BIN)
                .args(args)
                .stdin(io())
                .stdout(io())
                .stderr(io())
                .env_remove("HUMAN_PLUS_TOKEN")
                .env_remove("HUMAN_PLUS_PROXY_AUTH")
                .env_remove("HUMAN_PLUS_INVITATION")
                .env_remove("HUMAN_PLUS_LOG")
                .env_remove("HUMAN_PLUS_CONFIG_DIR")
                .env("NO_COLOR", "1")
                .envs(env.iter().copied())
                .spawn()
                .unwrap()
        }

        /// Everything the terminal has shown so far.
        pub fn screen(&self) -> String {
            String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
        }

        /// Waits until the terminal shows `text`.
        pub fn wait_for(&self, text: &str) {
            let deadline = Instant::now() + COMMAND_TIMEOUT;
            while !self.screen().contains(text) {
                assert!(
                    Instant::now() < deadline,
                    "the terminal never showed {text:?}:\n{}",
                    self.screen()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }

        /// Types `keys`.
        pub fn type_keys(&mut self, keys: &[u8]) {
            self.keyboard.write_all(keys).unwrap();
            self.keyboard.flush().unwrap();
        }

        /// The terminal's local modes now.
        pub fn modes(&self) -> LocalModes {
            tcgetattr(self.tty.as_ref().unwrap()).unwrap().local_modes
        }

        /// Whether the terminal echoes, edits lines and turns Ctrl-C into a
        /// signal: a terminal as a shell leaves it.
        pub fn is_cooked(&self) -> bool {
            self.modes()
                .contains(LocalModes::ECHO | LocalModes::ICANON | LocalModes::ISIG)
        }

        /// Closes the terminal and returns all it showed.
        pub fn close(mut self) -> String {
            drop(self.tty.take());
            if let Some(reader) = self.reader.take() {
                reader.join().unwrap();
            }
            self.screen()
        }
    }

    /// Waits for `child` to end; its exit code.
    pub fn wait(child: &mut Child) -> i32 {
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "human-plus did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A person pastes the link at join's prompt on a real (pseudo-)terminal:
/// the terminal's echo is off while it is read, so the token never reaches
/// the screen (nor the scrollback), the parsed parts are shown instead,
/// and the terminal is as it was afterwards.
#[cfg(unix)]
#[test]
fn a_link_pasted_at_the_prompt_is_never_echoed() {
    let env = Env::default_surface();
    let config = scratch("join-pty");
    let config_s = config.to_str().unwrap().to_owned();
    let mut term = terminal::Terminal::open();
    assert!(term.is_cooked(), "a new terminal echoes");
    let egress = loopback_egress(&env);
    let mut args = vec!["join", "--yes", "--pin", "--name", "pasted"];
    args.extend(strs(&egress));
    let mut child = term.spawn(&args, &[("HUMAN_PLUS_CONFIG_DIR", config_s.as_str())]);
    term.wait_for("Paste the link");
    assert!(
        !term.modes().contains(rustix::termios::LocalModes::ECHO),
        "the echo is off while the link is read"
    );
    // A typo corrected with Backspace, then Enter, as a person does.
    let link = format!("{}/{}?token={}", env.base, env.session, env.token);
    term.type_keys(format!("{link}x\x7f\r").as_bytes());
    let code = terminal::wait(&mut child);
    assert!(term.is_cooked(), "the terminal is restored");
    let screen = term.close();
    assert_eq!(code, 0, "{screen}");
    assert!(
        !screen.contains(&env.token),
        "the token was shown:\n{screen}"
    );
    assert!(!screen.contains("?token="), "the link was shown:\n{screen}");
    assert!(
        screen.contains(&format!("session: {}", env.session)),
        "{screen}"
    );
    assert!(screen.contains("Saved profile pasted"), "{screen}");
    assert_eq!(
        std::fs::read_to_string(config.join("profiles/pasted/token"))
            .unwrap()
            .trim(),
        env.token
    );
    std::fs::remove_dir_all(&config).unwrap();
}

/// A link naming a Reverb channel, pasted at the prompt: never echoed, its
/// channel and both hosts shown instead, the profile saved with the
/// channel.
#[cfg(unix)]
#[test]
fn a_reverb_link_pasted_at_the_prompt_is_never_echoed() {
    let env = common::ChannelEnv::private();
    let config = scratch("join-pty-reverb");
    let config_s = config.to_str().unwrap().to_owned();
    let mut term = terminal::Terminal::open();
    let egress = env.egress_args();
    let mut args = vec!["join", "--yes", "--pin", "--name", "pasted"];
    args.extend(strs(&egress));
    let mut child = term.spawn(&args, &[("HUMAN_PLUS_CONFIG_DIR", config_s.as_str())]);
    term.wait_for("Paste the link");
    term.type_keys(format!("{}\r", env.link()).as_bytes());
    let code = terminal::wait(&mut child);
    assert!(term.is_cooked(), "the terminal is restored");
    let screen = term.close();
    assert_eq!(code, 0, "{screen}");
    assert!(
        !screen.contains(&env.token),
        "the token was shown:\n{screen}"
    );
    assert!(!screen.contains("reverb="), "the link was shown:\n{screen}");
    for line in [
        "transport: Reverb channel (Pusher protocol)".to_owned(),
        format!("channel: {}", env.channel),
        format!("server:  ws://127.0.0.1 port {}", env.ws_port),
        format!("auth:    http://127.0.0.1 port {}", env.auth_port),
        "Saved profile pasted".to_owned(),
    ] {
        assert!(screen.contains(&line), "missing {line:?}:\n{screen}");
    }
    let profile: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(config.join("profiles/pasted/profile.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(profile["reverb"]["channel"], env.channel.as_str());
    assert_eq!(
        std::fs::read_to_string(config.join("profiles/pasted/token"))
            .unwrap()
            .trim(),
        env.token
    );
    std::fs::remove_dir_all(&config).unwrap();
}

/// Ctrl-C at join's prompt, halfway through the token: the terminal gets
/// its echo back, join ends with 130 and no panic, and what was typed is
/// not on the screen.
#[cfg(unix)]
#[test]
fn ctrl_c_at_the_prompt_gives_the_terminal_back() {
    let config = scratch("join-pty-c");
    let config_s = config.to_str().unwrap().to_owned();
    let mut term = terminal::Terminal::open();
    let secret = format!("tok{}", common::random_hex(16));
    let mut child = term.spawn(
        &["join", "--name", "interrupted"],
        &[("HUMAN_PLUS_CONFIG_DIR", config_s.as_str())],
    );
    term.wait_for("Paste the link");
    term.type_keys(format!("https://relay.example/agent-relay/sess_1?token={secret}").as_bytes());
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !term.modes().contains(rustix::termios::LocalModes::ECHO),
        "the echo is off while the link is read"
    );
    term.type_keys(b"\x03");
    let code = terminal::wait(&mut child);
    assert!(term.is_cooked(), "the terminal is restored after Ctrl-C");
    let screen = term.close();
    assert_eq!(code, 130, "{screen}");
    assert!(screen.contains("interrupted"), "{screen}");
    assert!(!screen.contains("panicked"), "{screen}");
    assert!(
        !screen.contains(&secret),
        "what was typed was shown:\n{screen}"
    );
    assert!(!config.join("profiles/interrupted").exists());
    std::fs::remove_dir_all(&config).unwrap();
}

/// Every file a profile is read from, and its directory, is refused when
/// the group or others can write it (the token: read or write), naming the
/// file and the `chmod` that makes it safe; at the modes join writes
/// (0700, 0600) it is used. A file of another user is refused too (checked
/// when the test may change an owner).
#[cfg(unix)]
#[test]
fn a_profile_others_can_change_is_refused() {
    let env = Env::default_surface();
    let config = scratch("join-modes");
    let config_s = config.to_str().unwrap().to_owned();
    let cfg = [("HUMAN_PLUS_CONFIG_DIR", config_s.as_str())];
    let link = format!("{}/{}?token={}\n", env.base, env.session, env.token);
    let mut args = vec!["join", "--yes", "--pin", "--name", "guarded"];
    let egress = loopback_egress(&env);
    args.extend(strs(&egress));
    let run = run_input(&args, Some(&link), &cfg);
    assert_eq!(run.code, 0, "{run:?}");
    let dir = config.join("profiles").join("guarded");
    assert_eq!(mode(&dir), 0o700);
    // join keeps the definitions the person reviewed beside the pins.
    assert!(dir.join("reviewed.json").is_file());
    for name in ["profile.json", "pins.json", "token", "reviewed.json"] {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
    let tools = |what: &str| {
        let run = run_input(&["tools", "--profile", "guarded"], None, &cfg);
        run.assert_no_secret(&env.token);
        assert!(!run.stdout.contains(&env.token), "{what}");
        run
    };
    let cases = [
        (dir.clone(), 0o777, 0o700, "chmod 700"),
        (dir.clone(), 0o770, 0o700, "chmod 700"),
        (dir.join("profile.json"), 0o666, 0o600, "chmod 600"),
        (dir.join("profile.json"), 0o620, 0o600, "chmod 600"),
        (dir.join("pins.json"), 0o666, 0o600, "chmod 600"),
        (dir.join("reviewed.json"), 0o666, 0o600, "chmod 600"),
        (dir.join("token"), 0o666, 0o600, "chmod 600"),
    ];
    for (path, bad, good, chmod_hint) in &cases {
        let what = format!("{} at {bad:o}", path.display());
        chmod(path, *bad);
        let run = tools(&what);
        chmod(path, *good);
        assert_eq!(run.code, 2, "{what}: {run:?}");
        assert!(
            run.stderr
                .contains(&format!("{chmod_hint} {}", path.display())),
            "{what}: the hint names the file: {run:?}"
        );
        assert!(run.stderr.contains("by others"), "{what}: {run:?}");
        let run = tools(&what);
        assert_eq!(run.code, 0, "{} at {good:o}: {run:?}", path.display());
    }
    // Readable by others is fine for everything but the token.
    chmod(&dir.join("profile.json"), 0o644);
    chmod(&dir.join("pins.json"), 0o644);
    chmod(&dir, 0o755);
    assert_eq!(tools("0644 files").code, 0);
    chmod(&dir, 0o700);
    // The bridge refuses the same profile.
    chmod(&dir.join("pins.json"), 0o666);
    let run = run_input(&["mcp", "--profile", "guarded"], None, &cfg);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("chmod 600 {}", dir.join("pins.json").display())),
        "{run:?}"
    );
    chmod(&dir.join("pins.json"), 0o600);
    // join does not write into a profile directory others can change,
    // and says so before any byte leaves.
    chmod(&dir, 0o777);
    let run = run_input(&args, Some(&link), &cfg);
    chmod(&dir, 0o700);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains(&format!("chmod 700 {}", dir.display())),
        "{run:?}"
    );
    assert!(
        !run.stdout.contains("Tools, through local trust"),
        "{run:?}"
    );
    // Another user's file, whatever its mode (only a superuser can give a
    // file away).
    if rustix::process::getuid().is_root() {
        let file = dir.join("profile.json");
        std::os::unix::fs::chown(&file, Some(65_534), None).unwrap();
        let run = tools("another user's profile.json");
        std::os::unix::fs::chown(&file, Some(0), None).unwrap();
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.contains("belongs to another user"), "{run:?}");
        assert_eq!(tools("root's again").code, 0);
    } else {
        eprintln!("(not root: the owner check is covered by the core's unit tests only)");
    }
    std::fs::remove_dir_all(&config).unwrap();
}
