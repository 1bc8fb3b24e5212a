//! The worker's binary as an operator meets it: `--help`, and what it
//! says about settings it cannot use (before it touches Redis or the
//! network). Building this test is also what builds the binary for the
//! end-to-end run (`.ci/examples`).

use std::process::{Command, Output};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_queue-worker"));
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
        "--redis-url",
        "--queue",
        "--threads",
        "--lock-wait-ms",
        "--think-ms",
        "--kept-legs",
        "--kept-leg-idle-ms",
        "queue-worker attach CONVERSATION",
    ] {
        assert!(text.contains(flag), "{flag} missing from:\n{text}");
    }
}

#[test]
fn settings_it_cannot_use_exit_2_and_say_which() {
    let tools = [
        ("RELAY_HOSTS", "relay.example"),
        ("ALLOWED_TOOLS", "sheet_get_cell"),
    ];
    let out = run(&[], &tools);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HUMAN_PLUS_KEY is required"));

    let key = ("HUMAN_PLUS_KEY", "00");
    let out = run(&[], &[tools[0], tools[1], key]);
    assert_eq!(out.status.code(), Some(2), "a key that is not 32 bytes");

    let out = run(&["--threads", "many"], &tools);
    assert_eq!(out.status.code(), Some(2));

    // `attach` needs the conversation (the link comes on standard input,
    // never as an argument).
    let out = run(&["attach"], &tools);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("attach needs the conversation"));
    let out = run(&["attach", "c-1"], &tools);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HUMAN_PLUS_KEY is required"));
}
