//! `human-plus relay` (over TLS) and `human-plus surface` (the page, edited
//! on stdin) as separate processes, with an agent command between them:
//! the dogfooding set-up, end to end.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use human_plus_relay::TlsConfig;

const WAIT: Duration = Duration::from_secs(120);

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Proc {
    fn spawn(args: &[&str], token: Option<&str>) -> Proc {
        let mut cmd = Command::new(common::BIN);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_remove("HUMAN_PLUS_TOKEN");
        if let Some(t) = token {
            cmd.env("HUMAN_PLUS_TOKEN", t);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let (tx, rx) = channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Proc {
            child,
            stdin,
            lines: rx,
        }
    }

    /// Waits for a line containing `needle`; returns it.
    fn expect(&self, needle: &str, seen: &mut Vec<String>) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with {needle:?}; saw {seen:#?}"),
            }
        }
    }

    fn type_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    fn wait(&mut self) -> i32 {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "the process did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn relay_over_tls_and_a_page_on_stdin() {
    let dir = std::env::temp_dir().join(format!("hp-serve-{}", common::random_hex(4)));
    std::fs::create_dir_all(&dir).unwrap();
    let (_, cert) = TlsConfig::generate_for(&["127.0.0.1"]).unwrap();
    let (cert_file, key_file, ca_file) = (
        dir.join("cert.pem"),
        dir.join("key.pem"),
        dir.join("ca.pem"),
    );
    std::fs::write(&cert_file, cert.cert_pem()).unwrap();
    std::fs::write(&key_file, cert.key_pem()).unwrap();
    std::fs::write(&ca_file, cert.ca_pem()).unwrap();
    let token = format!("tok{}", common::random_hex(16));
    let session = format!("page_{}", common::random_hex(4));
    let mut seen = Vec::new();

    let relay = Proc::spawn(
        &[
            "relay",
            "--port",
            "0",
            "--tls-cert",
            cert_file.to_str().unwrap(),
            "--tls-key",
            key_file.to_str().unwrap(),
        ],
        None,
    );
    let line = relay.expect("Human+ relay listening at https://127.0.0.1:", &mut seen);
    let url = line.rsplit(' ').next().unwrap().to_owned();
    let port = url.rsplit(':').next().unwrap().to_owned();

    let mut page = Proc::spawn(
        &[
            "surface",
            "--relay",
            &url,
            "--session",
            &session,
            "--ca-cert",
            ca_file.to_str().unwrap(),
        ],
        Some(&token),
    );
    page.expect("The demo sheet is open", &mut seen);
    page.expect("4 Plums", &mut seen);

    let connect = [
        "--relay",
        &url,
        "--session",
        &session,
        "--surface",
        "sheet:one",
        "--allow-host",
        "127.0.0.1",
        "--allow-port",
        &port,
        "--allow-unverified-egress",
        "--allow-address",
        "127.0.0.1/32",
        "--ca-cert",
        ca_file.to_str().unwrap(),
        "--allow",
        "sheet_get_cell,sheet_set_cell",
        "--timeout",
        "60",
    ];
    let mut read = vec!["call", "sheet_get_cell", r#"{"address":"B4"}"#];
    read.extend(connect);
    let run = common::run(&read, Some(&token));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("revision r1"), "{}", run.stdout);
    page.expect("agent: sheet_get_cell", &mut seen);

    // Without the CA, the relay's certificate is refused (exit 9).
    let mut untrusted: Vec<&str> = read.clone();
    let at = untrusted.iter().position(|a| *a == "--ca-cert").unwrap();
    untrusted.drain(at..at + 2);
    let run = common::run(&untrusted, Some(&token));
    assert_eq!(run.code, 9, "{run:?}");
    assert!(
        run.stderr.contains("error[transport_failed]"),
        "{}",
        run.stderr
    );
    run.assert_no_secret(&token);

    // The person types an edit; the agent's stale write is refused.
    page.type_line("B4=12");
    page.expect("you set B4 = 12; the sheet is at r2", &mut seen);
    let mut write = vec![
        "call",
        "sheet_set_cell",
        r#"{"address":"B4","value":"8"}"#,
        "--revision",
        "r1",
    ];
    write.extend(connect);
    let run = common::run(&write, Some(&token));
    assert_eq!(run.code, 7, "{run:?}");
    page.expect("pinned r1 -> refused, the sheet is at r2", &mut seen);
    page.type_line("show");
    page.expect("4 Plums  12", &mut seen);

    page.type_line("quit");
    page.expect("page closed", &mut seen);
    assert_eq!(page.wait(), 0);
    for line in &seen {
        assert!(!line.contains(&token), "the token leaked: {line}");
    }
    drop(relay);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `relay --prefix`: every route under the path, as the Fancy Node relay's
/// `--prefix`; an agent command reaches a page through it; a prefix that
/// could only match nothing is a usage error.
#[test]
fn relay_with_a_prefix() {
    let mut seen = Vec::new();
    let relay = Proc::spawn(&["relay", "--port", "0", "--prefix", "agent-relay"], None);
    let line = relay.expect("Human+ relay listening at http://127.0.0.1:", &mut seen);
    let base = line.rsplit(' ').next().unwrap().to_owned();
    assert!(base.ends_with("/agent-relay"), "{line}");
    relay.expect(
        &format!("human-plus surface --web --relay {base}"),
        &mut seen,
    );
    let port = base
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/agent-relay");

    let token = format!("tok{}", common::random_hex(16));
    let session = format!("pref_{}", common::random_hex(4));
    let mut page = Proc::spawn(
        &["surface", "--relay", &base, "--session", &session],
        Some(&token),
    );
    page.expect("The demo sheet is open", &mut seen);
    // The page shows its share link with the token masked, and the `join`
    // line; `link` shows it whole, and an agent joins with it alone.
    page.expect("Share link for an agent (the token hidden", &mut seen);
    let masked = page.expect(&format!("{base}/{session}#token="), &mut seen);
    assert_eq!(
        masked.trim(),
        format!(
            "{base}/{session}#token=\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}&surface=sheet%3Aterminal"
        )
    );
    page.expect(
        "Paste it into:  (read -rs HUMAN_PLUS_INVITATION && export HUMAN_PLUS_INVITATION && human-plus join --name terminal-sheet --allow-insecure-loopback --allow-unverified-egress)",
        &mut seen,
    );
    page.expect("`link` to show the share link", &mut seen);
    for line in &seen {
        assert!(
            !line.contains(&token),
            "the token was shown unasked: {line}"
        );
    }
    page.type_line("link");
    page.expect("Share link (it holds the token", &mut seen);
    let whole = page.expect(&format!("{base}/{session}#token="), &mut seen);
    let whole = whole.trim().to_owned();
    assert_eq!(
        whole,
        format!("{base}/{session}#token={token}&surface=sheet%3Aterminal")
    );
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.args([
        "call",
        "sheet_get_cell",
        r#"{"address":"B4"}"#,
        "--allow",
        "sheet_get_cell",
        "--allow-host",
        "127.0.0.1",
        "--allow-port",
        port,
        "--allow-insecure-loopback",
        "--allow-unverified-egress",
    ])
    .env_remove("HUMAN_PLUS_TOKEN")
    .env("HUMAN_PLUS_INVITATION", &whole);
    let run = common::run_command(cmd, None);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains("source=\"human-plus:sheet:terminal\""),
        "{run:?}"
    );
    run.assert_no_secret(&token);

    // `show` says what it leaves out.
    page.type_line("M1=far");
    page.expect("you set M1 = far", &mut seen);
    page.type_line("A51=deep");
    page.expect("you set A51 = deep", &mut seen);
    page.type_line("show");
    page.expect(
        "(not shown: 2 cells beyond column L or row 50: M1, A51)",
        &mut seen,
    );
    // The token was shown once, by `link`, and nowhere else.
    assert_eq!(
        seen.iter().filter(|l| l.contains(&token)).count(),
        1,
        "{seen:#?}"
    );
    let run = common::run(
        &[
            "call",
            "sheet_get_cell",
            r#"{"address":"B4"}"#,
            "--relay",
            &base,
            "--session",
            &session,
            "--surface",
            "sheet:prefixed",
            "--allow",
            "sheet_get_cell",
            "--allow-host",
            "127.0.0.1",
            "--allow-port",
            port,
            "--allow-insecure-loopback",
            "--allow-unverified-egress",
        ],
        Some(&token),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains('7'), "{}", run.stdout);
    // The agent's `--auth bearer` (the token only in a header) is read too.
    let run = common::run(
        &[
            "call",
            "sheet_get_cell",
            r#"{"address":"B4"}"#,
            "--relay",
            &base,
            "--session",
            &session,
            "--surface",
            "sheet:prefixed",
            "--allow",
            "sheet_get_cell",
            "--allow-host",
            "127.0.0.1",
            "--allow-port",
            port,
            "--allow-insecure-loopback",
            "--allow-unverified-egress",
            "--auth",
            "bearer",
        ],
        Some(&token),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains('7'), "{}", run.stdout);
    // Without the prefix, the agent finds no relay there (the router's 404).
    let run = common::run(
        &[
            "call",
            "sheet_get_cell",
            r#"{"address":"B4"}"#,
            "--relay",
            &format!("http://127.0.0.1:{port}"),
            "--session",
            &session,
            "--surface",
            "sheet:prefixed",
            "--allow",
            "sheet_get_cell",
            "--allow-host",
            "127.0.0.1",
            "--allow-port",
            port,
            "--allow-insecure-loopback",
            "--allow-unverified-egress",
            "--timeout",
            "5",
        ],
        Some(&token),
    );
    assert_ne!(run.code, 0, "{run:?}");
    drop(page);
    drop(relay);

    for bad in ["a b", "../up", "x?y=1", "a//b"] {
        let run = common::run(&["relay", "--port", "0", "--prefix", bad], None);
        assert_eq!(run.code, 2, "{bad}: {run:?}");
        assert!(run.stderr.contains("--prefix"), "{}", run.stderr);
    }
}
