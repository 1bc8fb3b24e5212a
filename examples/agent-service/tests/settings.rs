//! The service's binary as an operator meets it: `--help`, and what it
//! says about settings it cannot use (before it touches Redis or the
//! network). Building this test is also what builds the binary for the
//! end-to-end run (`.ci/examples`).

use std::process::{Command, Output};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-service"));
    command.args(args).env_clear();
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

#[test]
fn help_lists_every_setting() {
    let out = run(&["--help"], &[]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--listen",
        "--redis-url",
        "--relay-path",
        "--allow-insecure-loopback",
        "--shutdown-grace-ms",
        "--kept-legs",
        "--kept-leg-idle-ms",
    ] {
        assert!(text.contains(flag), "{flag} missing from:\n{text}");
    }
    assert!(text.contains("HUMAN_PLUS_KEY (environment only)"));
}

#[test]
fn settings_it_cannot_use_exit_2_and_say_which() {
    let out = run(&["--listen"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing value: --listen"));

    let out = run(&[], &[("ALLOWED_TOOLS", "sheet_get_cell")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("RELAY_HOSTS and ALLOWED_TOOLS are required")
    );

    let relay = [
        ("RELAY_HOSTS", "relay.example"),
        ("ALLOWED_TOOLS", "sheet_get_cell"),
    ];
    let out = run(&[], &relay);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HUMAN_PLUS_KEY is required"));

    let out = run(&["--relay-path", "a b"], &relay);
    assert_eq!(out.status.code(), Some(2));
}
