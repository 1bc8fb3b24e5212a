//! `human-plus digest` agrees with the core on the parity digests, in every
//! input shape, offline.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use human_plus_core::ToolDefinition;
use serde_json::{Value, json};

const WRITE: &str = "sha256:5ab496568589a2e1901b1b49c27b22bc";
const PING: &str = "sha256:ac221a90693dc4f393b6c732d1699db1";

fn defs() -> Value {
    json!([
        {"name": "surface_write", "description": "Write to the surface.", "inputSchema": {"type": "object"}},
        {"name": "surface_ping", "description": "Ping.", "inputSchema": {}}
    ])
}

fn digest_stdin(input: &str, args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(common::BIN)
        .arg("digest")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn parity_digests_in_every_shape() {
    // The core's own answer, for the record.
    for entry in defs().as_array().unwrap() {
        let d = ToolDefinition::from_listing(entry).unwrap().digest();
        assert!(d == WRITE || d == PING);
    }
    let expected = format!("surface_write {WRITE}\nsurface_ping {PING}\n");
    let shapes = [
        defs(),
        json!({"tools": defs()}),
        json!({"jsonrpc": "2.0", "id": "x-1", "result": {"tools": defs(), "nextCursor": null}}),
    ];
    for shape in &shapes {
        let (code, out, err) = digest_stdin(&shape.to_string(), &[]);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (0, expected.as_str(), "")
        );
        let (code, out, _) = digest_stdin(&shape.to_string(), &["-"]);
        assert_eq!((code, out.as_str()), (0, expected.as_str()));
    }
    // One definition, from a file.
    let dir = std::env::temp_dir().join(format!("hp-digest-{}", common::random_hex(4)));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("one.json");
    std::fs::write(&file, defs()[0].to_string()).unwrap();
    let run = common::run(&["digest", file.to_str().unwrap()], None);
    assert_eq!(run.stdout, format!("surface_write {WRITE}\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn json_output_is_a_pins_file() {
    let (code, out, _) = digest_stdin(&json!({"tools": defs()}).to_string(), &["--json"]);
    assert_eq!(code, 0);
    let pins: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(pins, json!({"surface_write": WRITE, "surface_ping": PING}));
    assert_eq!(
        human_plus_cli::connect::pins_from_json(&pins).unwrap()["surface_ping"],
        PING
    );
}

#[test]
fn bad_input_is_a_usage_error() {
    let (code, out, err) = digest_stdin("{not json", &[]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("error[usage]"), "{err}");
    let (code, _, err) = digest_stdin(r#"[{"name": "ok"}, {"description": "no name"}]"#, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("entry 2"), "{err}");
    let run = common::run(&["digest", "/nonexistent/tools.json"], None);
    assert_eq!(run.code, 2);
}
