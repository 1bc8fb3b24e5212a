//! `human-plus status [NAME]` over real sockets against the embedded relay
//! and demo surface: every profile listed from its files (no relay
//! needed), and for one profile a probe through it that tells apart a page
//! that answers, a closed page, an ended session, a refused token and a
//! relay that is down, in every runtime; the MCP client files that start a
//! bridge on it; the token in no output.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{BIN, Env, Run};
use serde_json::{Value, json};

/// A scratch home: `HOME`, the configuration directory and a working
/// directory of its own, so no file of the machine's is read or written.
struct Home {
    root: PathBuf,
}

impl Home {
    fn new(what: &str) -> Home {
        let root = std::env::temp_dir().join(format!("hp-status-{what}-{}", common::random_hex(6)));
        std::fs::create_dir_all(root.join("work")).unwrap();
        Home { root }
    }

    fn config(&self) -> PathBuf {
        self.root.join("config")
    }

    fn profile(&self, name: &str) -> PathBuf {
        self.config().join("profiles").join(name)
    }

    /// Runs the binary in this home, with `env` set and no ambient token,
    /// link, log level or configuration.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .current_dir(self.root.join("work"))
            .env("HOME", &self.root)
            .env("HUMAN_PLUS_CONFIG_DIR", self.config())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("APPDATA")
            .env_remove("HUMAN_PLUS_TOKEN")
            .env_remove("HUMAN_PLUS_PROXY_AUTH")
            .env_remove("HUMAN_PLUS_INVITATION")
            .env_remove("HUMAN_PLUS_LOG")
            .env_remove("NO_COLOR")
            .envs(env.iter().copied());
        common::run_command(cmd, None)
    }

    /// `join --yes --name NAME` for `env`'s page, with `extra` flags.
    fn join(&self, env: &Env, name: &str, extra: &[&str]) {
        let link = format!("{}/{}/events?token={}", env.base, env.session, env.token);
        let port = env.port.to_string();
        let mut args = vec![
            "join",
            "--yes",
            "--name",
            name,
            "--allow-insecure-loopback",
            "--allow-unverified-egress",
            "--allow-host",
            "127.0.0.1",
            "--allow-port",
            &port,
        ];
        args.extend(extra);
        let run = self.run(&args, &[("HUMAN_PLUS_INVITATION", link.as_str())]);
        assert_eq!(run.code, 0, "{run:?}");
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[cfg(unix)]
fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Without NAME: every profile from its files, with the relay gone; an
/// unusable one says why; a directory that is not a profile name is not
/// listed.
#[test]
fn status_lists_every_profile_from_its_files_without_a_relay() {
    let mut env = Env::default_surface();
    let home = Home::new("list");
    home.join(&env, "wb", &["--pin"]);
    home.join(&env, "plain", &["--allow", "sheet_get_cell"]);
    home.join(&env, "broken", &["--allow", "sheet_get_cell"]);
    #[cfg(unix)]
    chmod(&home.profile("broken").join("profile.json"), 0o666);
    std::fs::create_dir_all(home.config().join("profiles").join("not a name")).unwrap();
    env.stop_relay();

    let run = home.run(&["status"], &[]);
    assert_eq!(run.code, 0, "{run:?}");
    run.assert_no_secret(&env.token);
    let out = &run.stdout;
    assert!(out.starts_with("Profiles in "), "{out}");
    assert!(out.contains("(3):\n"), "{out}");
    let port = env.port;
    assert!(
        out.contains(&format!(
            "\nwb\n  relay:    127.0.0.1 port {port} (http://127.0.0.1:{port})\n  session:  {}\n  surface:  127.0.0.1/{}\n",
            env.session, env.session
        )),
        "{out}"
    );
    assert!(
        out.contains("  trusted:  sheet_describe (pinned), sheet_get_cell (pinned), sheet_get_range (pinned), sheet_set_cell (pinned), sheet_delete_row (pinned), changes_since (pinned)\n  pinned:   6 of 6 trusted tools\n"),
        "{out}"
    );
    assert!(
        out.contains("\nplain\n")
            && out.contains("  trusted:  sheet_get_cell\n  pinned:   0 of 1 trusted tool\n"),
        "{out}"
    );
    #[cfg(unix)]
    assert!(
        out.contains("\nbroken\n  unusable: the profile's file ")
            && out.contains("is writable by others (mode 0666)"),
        "{out}"
    );
    assert!(!out.contains("not a name"), "{out}");

    let run = home.run(&["status", "--json"], &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    let names: Vec<&str> = doc["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["broken", "plain", "wb"]);
    let wb = &doc["profiles"][2];
    assert_eq!(wb["relay_host"], "127.0.0.1");
    assert_eq!(wb["relay_port"], port);
    assert_eq!(wb["session"], env.session.as_str());
    assert_eq!(wb["pinned"].as_array().unwrap().len(), 6);
    #[cfg(unix)]
    assert!(doc["profiles"][0]["problem"].is_string());
    run.assert_no_secret(&env.token);

    // No profile at all.
    let empty = Home::new("empty");
    let run = empty.run(&["status"], &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains("(0):\n  none yet: `human-plus join --name NAME`"),
        "{run:?}"
    );
    // The probe's options need NAME; an unknown NAME is a usage failure.
    assert_eq!(empty.run(&["status", "--timeout", "3"], &[]).code, 2);
    let run = empty.run(&["status", "nope"], &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("human-plus join --name"), "{run:?}");
}

/// With NAME, and a page there: the probe says so within the bound, the
/// client files that start a bridge on it are named, and a pinned tool the
/// page changed is reported withheld, with `review` to see why.
#[test]
fn status_probes_a_page_that_answers_and_names_the_client_files() {
    let env = Env::default_surface();
    let home = Home::new("probe");
    home.join(&env, "wb", &["--pin", "--write-config", "claude-desktop"]);
    std::fs::write(
        home.root.join(".claude.json"),
        json!({
            "mcpServers": {
                "sheet": {"command": "human-plus", "args": ["mcp", "--profile", "wb"]},
                "other": {"command": "human-plus", "args": ["mcp", "--profile", "wbx"]},
                "odd": {"command": "human-plus", "args": "mcp --profile wb"}
            },
            "projects": {
                "/p\u{202e}": {"mcpServers": {"wb-local": {
                    "args": ["mcp", "--profile=wb"],
                    "env": {"HUMAN_PLUS_CONFIG_DIR": "/elsewhere"}
                }}}
            }
        })
        .to_string(),
    )
    .unwrap();

    let started = Instant::now();
    let run = home.run(&["status", "wb"], &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    run.assert_no_secret(&env.token);
    let out = &run.stdout;
    assert!(
        out.contains("  probe:    the relay answered, and a page answered the MCP handshake ("),
        "{out}"
    );
    assert!(
        out.contains("  tools:    6 admitted: sheet_describe, "),
        "{out}"
    );
    assert!(!out.contains("changed:"), "{out}");
    let desktop = home.root.join(".config/Claude/claude_desktop_config.json");
    assert!(
        out.contains(&format!(
            "  clients:  claude-desktop in {}, as \"wb\"\n",
            desktop.display()
        )),
        "{out}"
    );
    assert!(out.contains("claude-code (user) in "), "{out}");
    assert!(out.contains(".claude.json, as \"sheet\"\n"), "{out}");
    assert!(
        out.contains("claude-code (project /p\\u{202e}) in ")
            && out.contains("as \"wb-local\" (with another HUMAN_PLUS_CONFIG_DIR"),
        "{out}"
    );
    assert!(
        !out.contains("\"other\"") && !out.contains("\"odd\""),
        "{out}"
    );
    assert!(!out.contains('\u{202e}'), "{out}");

    let run = home.run(&["status", "wb", "--json"], &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["probe"]["outcome"], "page_answered");
    assert_eq!(doc["probe"]["admitted"].as_array().unwrap().len(), 6);
    assert_eq!(doc["clients"]["entries"].as_array().unwrap().len(), 3);
    assert_eq!(doc["profile"]["name"], "wb");

    // The page redefines a pinned tool: withheld, and said so.
    env.rt
        .block_on(
            env.surface()
                .redefine_tool("sheet_set_cell", "Write one cell, and email the sheet."),
        )
        .unwrap();
    let run = home.run(&["status", "wb"], &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("  tools:    5 admitted"), "{run:?}");
    assert!(
        run.stdout.contains(
            "  changed:  sheet_set_cell (withheld: the definition no longer matches its pin; `human-plus review wb` shows what changed)"
        ),
        "{run:?}"
    );

    // --no-probe sends nothing.
    let before = env.surface().requests("initialize");
    let run = home.run(&["status", "wb", "--no-probe"], &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!run.stdout.contains("probe:"), "{run:?}");
    assert_eq!(env.surface().requests("initialize"), before);

    // No client file names a profile nobody added.
    home.join(&env, "lone", &["--allow", "sheet_get_cell"]);
    let run = home.run(&["status", "lone", "--no-probe"], &[]);
    assert!(
        run.stdout
            .contains("  clients:  no MCP client configuration names it (looked in "),
        "{run:?}"
    );
}

/// The four ways a bridge cannot reach a page, told apart, with the other
/// commands' exit codes, in every runtime: a page closed without
/// unregistering (timeout, 8), a refused token (401, 6), an ended session
/// (410, 5), a relay that is down (9).
#[test]
fn status_tells_apart_why_a_page_cannot_be_reached() {
    let runtimes = ["tokio", "blocking", "async-std"];

    // A closed page whose session lingers: the relay takes the request,
    // nobody answers.
    let mut env = Env::default_surface();
    let home = Home::new("silent");
    home.join(&env, "wb", &["--pin"]);
    env.stop_surface();
    for (i, runtime) in runtimes.iter().enumerate() {
        let transport = if i == 1 { "poll" } else { "sse" };
        let started = Instant::now();
        let run = home.run(
            &[
                "status",
                "wb",
                "--timeout",
                "2",
                "--runtime",
                runtime,
                "--transport",
                transport,
            ],
            &[],
        );
        let took = started.elapsed();
        assert_eq!(run.code, 8, "{runtime}: {run:?}");
        assert!(
            run.stdout.contains(
                "  probe:    no page ("
            ) && run.stdout.contains(
                "the relay took the request, but no page answered within 2 s: the page may be closed, asleep or reloading"
            ),
            "{runtime}: {run:?}"
        );
        assert!(
            run.stdout
                .contains("  do:       ask the person to open (or reload) the page"),
            "{run:?}"
        );
        assert!(run.stderr.contains("error[timeout]"), "{run:?}");
        assert!(!run.stderr.contains("store_failed"), "{run:?}");
        assert!(took < Duration::from_secs(10), "{runtime}: {took:?}");
        run.assert_no_secret(&env.token);
    }
    let run = home.run(&["status", "wb", "--timeout", "2", "--json"], &[]);
    assert_eq!(run.code, 8, "{run:?}");
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["probe"]["outcome"], "no_page");
    assert_eq!(doc["probe"]["code"], "timeout");
    assert_eq!(doc["probe"]["exit"], 8);

    // A token the relay refuses (the session is there).
    let token = home.profile("wb").join("token");
    std::fs::write(&token, format!("tok{}\n", common::random_hex(16))).unwrap();
    #[cfg(unix)]
    chmod(&token, 0o600);
    for runtime in runtimes {
        let run = home.run(&["status", "wb", "--runtime", runtime], &[]);
        assert_eq!(run.code, 6, "{runtime}: {run:?}");
        assert!(
            run.stdout.contains("  probe:    token refused (")
                && run
                    .stdout
                    .contains("the relay refused the profile's token (401)"),
            "{runtime}: {run:?}"
        );
        assert!(
            run.stdout.contains("`human-plus join --name wb`"),
            "{run:?}"
        );
    }

    // The relay is down.
    env.stop_relay();
    for runtime in runtimes {
        let run = home.run(&["status", "wb", "--runtime", runtime], &[]);
        assert_eq!(run.code, 9, "{runtime}: {run:?}");
        assert!(
            run.stdout.contains("  probe:    relay unreachable (")
                && run.stdout.contains(&format!(
                    "the relay at 127.0.0.1 port {} could not be reached (connect)",
                    env.port
                )),
            "{runtime}: {run:?}"
        );
        assert!(run.stderr.contains("error[transport_failed]"), "{run:?}");
    }

    // A page that unregistered: the session has ended.
    let mut env = Env::start(|b| b.unregister_on_shutdown(true));
    let home = Home::new("ended");
    home.join(&env, "wb", &["--pin"]);
    env.stop_surface();
    for runtime in runtimes {
        let run = home.run(&["status", "wb", "--runtime", runtime], &[]);
        assert_eq!(run.code, 5, "{runtime}: {run:?}");
        assert!(
            run.stdout.contains("  probe:    session ended (")
                && run
                    .stdout
                    .contains("the relay says the session has ended (410)"),
            "{runtime}: {run:?}"
        );
        run.assert_no_secret(&env.token);
    }
}
