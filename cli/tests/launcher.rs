//! The MCP client entries `join` prints and writes when this `human-plus`
//! runs from a launcher's cache (`uvx`, `npx`): the entry runs the
//! launcher, by its absolute path, never the cached binary.
//!
//! The built binary is linked (or copied) into a directory laid out as uv's
//! or npm's cache, and run from there with the environment the launcher
//! leaves (`UV`, `npm_node_execpath`). The real launchers, from the built
//! wheel and npm packages, are exercised by `.ci/package`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{BIN, Env, Run};

const TAG: &str =
    "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag.\n";

fn scratch(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hp-{what}-{}", common::random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::canonicalize(dir).unwrap()
}

/// Puts the built binary at `to` (a hard link when the file system allows
/// it, else a copy).
fn place_binary(to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    if std::fs::hard_link(BIN, to).is_err() {
        std::fs::copy(BIN, to).unwrap();
    }
}

fn touch(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `join --yes --pin --name board --write-config cursor` by the binary at
/// `bin`, the link on standard input, with `env` (and nothing ambient of
/// Human+'s).
fn join(bin: &Path, env: &Env, config: &Path, vars: &[(&str, String)]) -> (Run, serde_json::Value) {
    let cursor = config.join("cursor.json");
    let link = format!("{}/{}?token={}", env.base, env.session, env.token);
    let port = env.port.to_string();
    let mut child = Command::new(bin)
        .args([
            "join",
            "--yes",
            "--pin",
            "--name",
            "board",
            "--write-config",
            "cursor",
            "--config-path",
            cursor.to_str().unwrap(),
            "--allow-insecure-loopback",
            "--allow-unverified-egress",
            "--allow-host",
            "127.0.0.1",
            "--allow-port",
            &port,
            "--timeout",
            "60",
        ])
        .env_remove("HUMAN_PLUS_TOKEN")
        .env_remove("HUMAN_PLUS_INVITATION")
        .env_remove("HUMAN_PLUS_LOG")
        .env_remove("UV")
        .env_remove("npm_node_execpath")
        .env("HUMAN_PLUS_CONFIG_DIR", config.join("hp"))
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(link.as_bytes())
        .unwrap();
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    let run = Run {
        code: status.code().unwrap_or(-1),
        stdout,
        stderr,
    };
    assert_eq!(run.code, 0, "{run:?}");
    run.assert_no_secret(&env.token);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cursor).unwrap()).unwrap();
    assert!(
        !written.to_string().contains(&env.token),
        "the token in {written}"
    );
    (run, written["mcpServers"]["board"].clone())
}

#[test]
fn from_uvs_cache_the_entries_run_uvx() {
    let env = Env::default_surface();
    let root = scratch("uvx");
    touch(&root.join("cache/uv/CACHEDIR.TAG"), TAG);
    touch(&root.join("cache/uv/archive-v0/x1/pyvenv.cfg"), "");
    let bin = root.join("cache/uv/archive-v0/x1/bin/human-plus");
    place_binary(&bin);
    touch(&root.join("tools/bin/uv"), "");
    touch(&root.join("tools/bin/uvx"), "");
    let uvx = root.join("tools/bin/uvx").display().to_string();
    let (run, entry) = join(
        &bin,
        &env,
        &root,
        &[("UV", root.join("tools/bin/uv").display().to_string())],
    );
    assert_eq!(entry["command"], uvx.as_str(), "{entry}");
    // This version, as the Python package spells it.
    let spec = format!("human-plus@{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        entry["args"],
        serde_json::json!([spec, "mcp", "--profile", "board"])
    );
    // Printed as written.
    assert!(
        run.stdout
            .contains(&format!("-- {uvx} {spec} mcp --profile board")),
        "{run:?}"
    );
    assert!(
        run.stdout.contains(&format!("\"command\":\"{uvx}\"")),
        "{run:?}"
    );
    assert!(run.stdout.contains("uv cache clean"), "{run:?}");
    assert!(
        !run.stdout.contains(&bin.display().to_string()),
        "the cached binary is named: {run:?}"
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[cfg(unix)]
#[test]
fn from_npxs_cache_the_entries_run_npx_with_node_on_path() {
    let env = Env::default_surface();
    let root = scratch("npx");
    let bin = root.join("npm-cache/_npx/5f2b/node_modules/@human-plus/linux-x64/bin/human-plus");
    place_binary(&bin);
    touch(&root.join("node/bin/node"), "");
    touch(&root.join("node/bin/npx"), "");
    let npx = root.join("node/bin/npx").display().to_string();
    let (run, entry) = join(
        &bin,
        &env,
        &root,
        &[(
            "npm_node_execpath",
            root.join("node/bin/node").display().to_string(),
        )],
    );
    assert_eq!(entry["command"], npx.as_str(), "{entry}");
    let spec = format!("human-plus@{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        entry["args"],
        serde_json::json!(["--prefer-offline", "-y", spec, "mcp", "--profile", "board"])
    );
    let path = format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        root.join("node/bin").display()
    );
    assert_eq!(entry["env"]["PATH"], path.as_str(), "{entry}");
    assert_eq!(
        entry["env"]["HUMAN_PLUS_CONFIG_DIR"],
        root.join("hp").display().to_string().as_str()
    );
    assert!(
        run.stdout.contains(&format!(
            "claude mcp add board -e PATH={path} -e HUMAN_PLUS_CONFIG_DIR="
        )),
        "{run:?}"
    );
    assert!(
        run.stdout.contains(&format!(
            "-- {npx} --prefer-offline -y {spec} mcp --profile board"
        )),
        "{run:?}"
    );
    std::fs::remove_dir_all(root).unwrap();
}
