//! `launchers`: the bridge's start-up (spawn to its first `tools/list`
//! answer) and peak memory through each way people start it, side by
//! side in one run with mcp-relay-client, on one local relay.
//!
//! ```text
//! bash .ci/package     # the wheel and npm packages, into target/distrib
//! cargo run -p human-plus-bench --release --bin launchers -- \
//!     [--mcp-relay-client mcp-relay-client-VERSION.tgz] [--rounds 20] \
//!     [--distrib target/distrib] [--bin target/x86_64-unknown-linux-gnu/dist/human-plus] \
//!     [--uv target/package-tools/bin/uv] [--scratch target/launchers-bench]
//! ```
//!
//! One relay and three pages (`human-plus relay`, `human-plus surface`,
//! the release binary): one page for the `human-plus` bridges, one for
//! mcp-relay-client (it labels nothing, so its replies must not share a
//! session with labelled clients), and one that is joined, then killed
//! without unregistering (the relay keeps its session; nobody answers it).
//! The rows, run one after the other in a rotating order, each process
//! ending before the next starts:
//!
//! * `human-plus mcp`, the native binary, from flags;
//! * `human-plus mcp --profile NAME`, the native binary, from a profile
//!   that `human-plus join --yes --pin` wrote in the run's setup (what
//!   `join` writes into a client's configuration): with the definitions
//!   the person reviewed (`reviewed.json`), which answer `initialize` and
//!   the first `tools/list` before the surface is asked, and the same
//!   profile with its `reviewed.json` removed (one written before issue
//!   27), which waits for the surface's listing as the flags do;
//! * the killed page: `--profile` with its reviewed definitions, and the
//!   flags, both with `--timeout 2`; from the flags, `tools/list` waits the
//!   exchange timeout and answers an error;
//! * `uvx human-plus@V mcp` (what `join` writes from uvx), the package in
//!   uv's cache, the index a simple index on loopback;
//! * `npx --prefer-offline -y human-plus@V mcp` (what `join` writes from
//!   npx), the package in npx's cache, the registry a stand-in on loopback
//!   (`.ci/npm-registry.mjs`);
//! * mcp-relay-client through `node` (its `dist/index.js`, installed with
//!   npm from the given tarball) and through `npx --prefer-offline -y
//!   mcp-relay-client@V` (in npx's cache), and `npx -y mcp-relay-client`,
//!   the line its users write, which asks the registry at every start
//!   (here on loopback, so a floor for that request).
//!
//! Every child gets only `HOME` (its launcher's), `PATH=/usr/bin:/bin` and
//! `HUMAN_PLUS_TOKEN` (a profile's bridge: `HUMAN_PLUS_CONFIG_DIR`, its
//! token is the profile's), what a client started from the desktop passes
//! on (with the person's shell `PATH`, uv may query a Python interpreter
//! through a version manager's shim at every start).
//!
//! The client is a minimal MCP client on the child's stdio: `initialize`
//! (2025-06-18), then `notifications/initialized` and `tools/list`;
//! start-up is spawn to the `tools/list` answer. Peak memory is the sum of
//! `VmHWM` over the child's process tree (the launcher's processes
//! included) read at that answer. A start that gets no answer within a
//! minute is left out of its row's figures and listed under the table
//! with the child's standard error. mcp-relay-client is not published on
//! the registry this machine reaches: pass a tarball built from its source
//! (the rows are skipped without one).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_precision_loss,
    missing_docs
)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};

/// How long one start-up may take.
const STEP: Duration = Duration::from_secs(60);

struct Opts {
    distrib: PathBuf,
    bin: PathBuf,
    uv: PathBuf,
    mrc: Option<PathBuf>,
    rounds: usize,
    scratch: PathBuf,
}

/// One way of starting a bridge.
struct Row {
    client: &'static str,
    launcher: String,
    /// What the launcher line does not say (printed after it).
    note: &'static str,
    /// The first `tools/list` is answered with an error (the silent page
    /// through the flags: the exchange timeout), not with tools.
    answers_error: bool,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    startups: Vec<Duration>,
    peaks_kib: Vec<u64>,
    processes: usize,
    /// The starts that got no answer, and why.
    unanswered: Vec<String>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn opts() -> Opts {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(PathBuf::from)
    };
    let target = root().join("target");
    Opts {
        distrib: value("--distrib").unwrap_or_else(|| target.join("distrib")),
        bin: value("--bin")
            .unwrap_or_else(|| target.join("x86_64-unknown-linux-gnu/dist/human-plus")),
        uv: value("--uv").unwrap_or_else(|| target.join("package-tools/bin/uv")),
        mrc: value("--mcp-relay-client").map(|p| std::fs::canonicalize(p).unwrap()),
        rounds: value("--rounds")
            .and_then(|p| p.to_str().and_then(|s| s.parse().ok()))
            .unwrap_or(20),
        scratch: value("--scratch").unwrap_or_else(|| target.join("launchers-bench")),
    }
}

/// Runs a setup command to completion; panics with its output on failure.
fn setup(program: impl AsRef<std::ffi::OsStr>, args: &[&str], env: &[(&str, &Path)], cwd: &Path) {
    let program = program.as_ref();
    let out = std::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .env("npm_config_update_notifier", "false")
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("{program:?}: {e}"));
    assert!(
        out.status.success(),
        "{program:?} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `human-plus join --yes --pin --name NAME` with `link` on standard
/// input, as a person runs it, into the configuration directory `config`.
fn join(bin: &Path, config: &Path, name: &str, link: &str, egress: &[&str]) {
    use std::io::Write as _;
    let mut child = std::process::Command::new(bin)
        .args(["join", "--yes", "--pin", "--name", name])
        .args(egress)
        .env("HUMAN_PLUS_CONFIG_DIR", config)
        .env_remove("HUMAN_PLUS_TOKEN")
        .env_remove("HUMAN_PLUS_INVITATION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{link}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "join {name}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let reviewed = config.join("profiles").join(name).join("reviewed.json");
    assert!(reviewed.exists(), "join {name} wrote no {reviewed:?}");
}

/// Starts a background process (kept in `children`, ended with them) and
/// returns the text of its output from `pattern` to the next space.
fn background(
    children: &mut Children,
    cmd: &mut std::process::Command,
    log: &Path,
    pattern: &str,
) -> String {
    let file = std::fs::File::create(log).unwrap();
    children.0.push(
        cmd.stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(at) = text.find(pattern) {
            let rest = &text[at..];
            let end = rest.find(|c: char| c.is_whitespace()).unwrap_or(rest.len());
            return rest[..end].to_owned();
        }
        assert!(Instant::now() < deadline, "{log:?}: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The background processes of a run, ended when it ends (panics
/// included).
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// pid → parent pid, for every process.
fn parents() -> HashMap<u32, u32> {
    let mut map = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The command name may hold spaces: the fields follow its `)`.
        if let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        {
            map.insert(pid, ppid);
        }
    }
    map
}

/// The sum of `VmHWM` (KiB) over `pid` and its descendants, and those
/// processes.
fn tree_peak(pid: u32) -> (u64, Vec<u32>) {
    let parents = parents();
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    let mut sum = 0;
    for p in &tree {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{p}/status")) {
            sum += status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    (sum, tree)
}

/// Reads JSON-RPC lines until the answer to `id`; `None` when the output
/// ends first.
async fn answer(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    id: u64,
) -> Option<Value> {
    loop {
        let line = lines.next_line().await.ok().flatten()?;
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v.get("id") == Some(&json!(id)) {
            return Some(v);
        }
    }
}

/// What one start measured: the time to the `tools/list` answer, the
/// tree's peak memory then (KiB) and its processes.
struct Started {
    took: Duration,
    peak_kib: u64,
    processes: usize,
}

/// One start: spawn, `initialize`, `tools/list`; the time to that answer
/// and the tree's peak memory then. `Err` says which answer never came
/// (within [`STEP`], or the output ended) and what the child wrote to its
/// standard error.
async fn start(row: &Row, log: &Path) -> Result<Started, String> {
    let mut cmd = Command::new(&row.program);
    cmd.args(&row.args)
        .env_clear()
        .envs(row.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&row.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child: Child = cmd.spawn().unwrap();
    let pid = child.id().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "launchers-bench", "version": "0"}}});
    let mut waiting = "initialize";
    let result = tokio::time::timeout(STEP, async {
        stdin
            .write_all(format!("{init}\n").as_bytes())
            .await
            .unwrap();
        let first = answer(&mut lines, 1).await?;
        assert!(first.get("result").is_some(), "{first}");
        waiting = "tools/list";
        let rest = concat!(
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            "\n"
        );
        stdin.write_all(rest.as_bytes()).await.unwrap();
        answer(&mut lines, 2).await
    })
    .await;
    let took = started.elapsed();
    let (peak_kib, tree) = tree_peak(pid);
    let outcome = match result {
        Ok(Some(result)) => {
            if row.answers_error {
                assert!(result.get("error").is_some(), "{result}");
            } else {
                let tools = result["result"]["tools"].as_array().map_or(0, Vec::len);
                assert!(tools > 0, "{result}");
            }
            Ok(Started {
                took,
                peak_kib,
                processes: tree.len(),
            })
        }
        Ok(None) => Err(format!("its output ended before the {waiting} answer")),
        Err(_) => Err(format!("no {waiting} answer within {} s", STEP.as_secs())),
    };
    drop(stdin);
    if tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
    // Whatever the launcher left behind (a process of the tree that
    // outlived it) must not share the next row's machine.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let alive = parents();
    for p in tree.iter().filter(|p| alive.contains_key(p)) {
        let _ = std::process::Command::new("kill")
            .arg(p.to_string())
            .status();
    }
    outcome.map_err(|why| {
        let stderr = std::fs::read_to_string(log).unwrap_or_default();
        format!("{why}; its standard error: {:?}", stderr.trim())
    })
}

fn median<T: Copy + Ord>(v: &[T]) -> T {
    let mut s = v.to_vec();
    s.sort_unstable();
    s[s.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let o = opts();
    let _ = std::fs::remove_dir_all(&o.scratch);
    std::fs::create_dir_all(o.scratch.join("logs")).unwrap();
    let scratch = std::fs::canonicalize(&o.scratch).unwrap();
    let bin = std::fs::canonicalize(&o.bin).unwrap();
    let version = {
        let out = std::process::Command::new(&bin)
            .arg("--version")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_owned()
    };
    let distrib = std::fs::canonicalize(&o.distrib).unwrap();
    let wheel = std::fs::read_dir(&distrib)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("no wheel in the distrib directory: run .ci/package first");
    let uv = std::fs::canonicalize(&o.uv).unwrap();
    let uvx = uv.with_file_name("uvx");
    // The PATH a client started from the desktop gives its servers (every
    // program here is named by its absolute path, or lives in /usr/bin).
    let path = "/usr/bin:/bin".to_owned();
    let mut children = Children(Vec::new());

    // The relay and the two pages.
    let url = background(
        &mut children,
        std::process::Command::new(&bin).args(["relay", "--port", "0"]),
        &scratch.join("logs/relay.txt"),
        "http://127.0.0.1:",
    );
    let port = url.rsplit(':').next().unwrap().to_owned();
    let token = "0123456789abcdef0123456789abcdef".to_owned();
    for session in ["bench_hp", "bench_mrc", "bench_silent"] {
        background(
            &mut children,
            std::process::Command::new(&bin)
                .args(["surface", "--relay", &url, "--session", session])
                .env("HUMAN_PLUS_TOKEN", &token),
            &scratch.join(format!("logs/{session}.txt")),
            "is open in session",
        );
    }

    // The profiles, as `join` writes them: `bench` (with the reviewed
    // definitions), `bench-old` (the same, its reviewed.json removed: a
    // profile written before issue 27) and `silent`, the third page's,
    // which is then killed without unregistering.
    let config = scratch.join("config");
    let egress = [
        "--allow-insecure-loopback",
        "--allow-unverified-egress",
        "--allow-host",
        "127.0.0.1",
        "--allow-port",
        &port,
    ];
    for (name, session) in [
        ("bench", "bench_hp"),
        ("bench-old", "bench_hp"),
        ("silent", "bench_silent"),
    ] {
        join(
            &bin,
            &config,
            name,
            &format!("{url}/{session}?token={token}"),
            &egress,
        );
    }
    std::fs::remove_file(config.join("profiles/bench-old/reviewed.json")).unwrap();
    let mut silent_page = children.0.pop().unwrap();
    silent_page.kill().unwrap();
    silent_page.wait().unwrap();

    // uv's index: a simple index of the wheel, served on loopback.
    let index = scratch.join("index");
    std::fs::create_dir_all(index.join("simple/human-plus")).unwrap();
    let wheel_name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::copy(&wheel, index.join(&wheel_name)).unwrap();
    std::fs::write(
        index.join("simple/human-plus/index.html"),
        format!("<!DOCTYPE html><html><body><a href=\"../../{wheel_name}\">{wheel_name}</a></body></html>\n"),
    )
    .unwrap();
    let index_url = background(
        &mut children,
        std::process::Command::new("python3")
            .args([
                "-m",
                "http.server",
                "0",
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(&index)
            .env("PYTHONUNBUFFERED", "1"),
        &scratch.join("logs/index.txt"),
        "(http://127.0.0.1:",
    );
    let index_url = index_url.trim_start_matches('(').trim_end_matches(')');
    let home_uv = scratch.join("home-uv");
    std::fs::create_dir_all(home_uv.join(".config/uv")).unwrap();
    std::fs::write(
        home_uv.join(".config/uv/uv.toml"),
        format!("[[index]]\nurl = \"{index_url}simple\"\ndefault = true\n"),
    )
    .unwrap();

    // npm's registry: the stand-in, serving our packages and
    // mcp-relay-client's.
    let packages = scratch.join("registry");
    std::fs::create_dir_all(&packages).unwrap();
    for e in std::fs::read_dir(distrib.join("npm")).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "tgz") {
            std::fs::copy(e.path(), packages.join(e.file_name())).unwrap();
        }
    }
    let mrc_version = o.mrc.as_ref().map(|tgz| {
        std::fs::copy(tgz, packages.join(tgz.file_name().unwrap())).unwrap();
        let name = tgz.file_name().unwrap().to_string_lossy().into_owned();
        name.trim_start_matches("mcp-relay-client-")
            .trim_end_matches(".tgz")
            .to_owned()
    });
    let registry_url = background(
        &mut children,
        std::process::Command::new("node")
            .arg(root().join(".ci/npm-registry.mjs"))
            .arg(&packages),
        &scratch.join("logs/registry.txt"),
        "http://127.0.0.1:",
    );
    let home_npm = scratch.join("home-npm");
    std::fs::create_dir_all(&home_npm).unwrap();
    std::fs::write(
        home_npm.join(".npmrc"),
        format!("registry={registry_url}\nupdate-notifier=false\nfund=false\naudit=false\n"),
    )
    .unwrap();
    let project = scratch.join("npm-project");
    std::fs::create_dir_all(&project).unwrap();

    let flags = |prefix: &[&str], session: &str, suffix: &[&str]| -> Vec<String> {
        prefix
            .iter()
            .chain(&[
                "mcp",
                "--relay",
                &url,
                "--session",
                session,
                "--surface",
                "sheet:one",
                "--every-tool",
                "--allow-host",
                "127.0.0.1",
                "--allow-port",
                &port,
                "--allow-unverified-egress",
                "--allow-insecure-loopback",
            ])
            .chain(suffix)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let hp_args = |prefix: &[&str]| flags(prefix, "bench_hp", &[]);
    let profile_args = |name: &str, suffix: &[&str]| -> Vec<String> {
        ["mcp", "--profile", name]
            .iter()
            .chain(suffix)
            .map(|s| (*s).to_owned())
            .collect()
    };
    // A client's entry written by `join` for a profile: the configuration
    // directory, no token (it is the profile's).
    let profile_env = vec![
        ("HOME".to_owned(), scratch.display().to_string()),
        ("PATH".to_owned(), path.clone()),
        (
            "HUMAN_PLUS_CONFIG_DIR".to_owned(),
            config.display().to_string(),
        ),
    ];
    let env_for = |home: &Path| -> Vec<(String, String)> {
        vec![
            ("HOME".into(), home.display().to_string()),
            ("PATH".into(), path.clone()),
            ("HUMAN_PLUS_TOKEN".into(), token.clone()),
        ]
    };
    let row = |client, launcher: String, program: PathBuf, args, env, cwd: &Path| Row {
        client,
        launcher,
        program,
        args,
        env,
        cwd: cwd.to_path_buf(),
        note: "",
        answers_error: false,
        startups: Vec::new(),
        peaks_kib: Vec::new(),
        processes: 0,
        unanswered: Vec::new(),
    };
    let hp_spec = format!("human-plus@{version}");
    let mut rows = vec![
        row(
            "human-plus",
            "native binary".into(),
            bin.clone(),
            hp_args(&[]),
            env_for(&scratch),
            &scratch,
        ),
        Row {
            note: " (reviewed definitions: answers before the surface)",
            ..row(
                "human-plus",
                "human-plus mcp --profile bench".into(),
                bin.clone(),
                profile_args("bench", &[]),
                profile_env.clone(),
                &scratch,
            )
        },
        Row {
            note: " (no reviewed.json, an older profile: waits for the surface)",
            ..row(
                "human-plus",
                "human-plus mcp --profile bench-old".into(),
                bin.clone(),
                profile_args("bench-old", &[]),
                profile_env.clone(),
                &scratch,
            )
        },
        Row {
            note: " (the page killed: answers from the reviewed definitions)",
            ..row(
                "human-plus",
                "human-plus mcp --profile silent --timeout 2".into(),
                bin.clone(),
                profile_args("silent", &["--timeout", "2"]),
                profile_env.clone(),
                &scratch,
            )
        },
        Row {
            note: " (the page killed, from flags: waits the timeout, answers an error)",
            answers_error: true,
            ..row(
                "human-plus",
                "native binary, --timeout 2".into(),
                bin.clone(),
                flags(&[], "bench_silent", &["--timeout", "2"]),
                env_for(&scratch),
                &scratch,
            )
        },
        row(
            "human-plus",
            format!("uvx {hp_spec}"),
            uvx.clone(),
            hp_args(&[&hp_spec]),
            env_for(&home_uv),
            &scratch,
        ),
        row(
            "human-plus",
            format!("npx --prefer-offline -y {hp_spec}"),
            PathBuf::from("npx"),
            hp_args(&["--prefer-offline", "-y", &hp_spec]),
            env_for(&home_npm),
            &scratch,
        ),
    ];
    // Warm each launcher's cache.
    setup(
        &uvx,
        &[&hp_spec, "--version"],
        &[("HOME", &home_uv)],
        &scratch,
    );
    setup(
        "npx",
        &["--prefer-offline", "-y", &hp_spec, "--version"],
        &[("HOME", &home_npm)],
        &scratch,
    );
    if let (Some(tgz), Some(v)) = (&o.mrc, &mrc_version) {
        let link = format!("{url}/bench_mrc?token={token}");
        let spec = format!("mcp-relay-client@{v}");
        setup(
            "npm",
            &["install", "--no-audit", "--no-fund", tgz.to_str().unwrap()],
            &[("HOME", &home_npm)],
            &project,
        );
        setup(
            "npx",
            &["--prefer-offline", "-y", &spec, "--version"],
            &[("HOME", &home_npm)],
            &scratch,
        );
        let js = project.join("node_modules/mcp-relay-client/dist/index.js");
        rows.push(row(
            "mcp-relay-client",
            "node dist/index.js".into(),
            PathBuf::from("node"),
            vec![js.display().to_string(), link.clone()],
            env_for(&home_npm),
            &scratch,
        ));
        rows.push(row(
            "mcp-relay-client",
            format!("npx --prefer-offline -y {spec}"),
            PathBuf::from("npx"),
            vec![
                "--prefer-offline".into(),
                "-y".into(),
                spec.clone(),
                link.clone(),
            ],
            env_for(&home_npm),
            &scratch,
        ));
        rows.push(row(
            "mcp-relay-client",
            "npx -y mcp-relay-client (asks the registry)".into(),
            PathBuf::from("npx"),
            vec!["-y".into(), "mcp-relay-client".into(), link],
            env_for(&home_npm),
            &scratch,
        ));
    } else {
        eprintln!("no --mcp-relay-client tarball: its rows are skipped");
    }

    // One warm-up round, then the measured rounds, the order rotating.
    let started = Instant::now();
    let log = scratch.join("logs/start.txt");
    for r in &rows {
        if let Err(e) = start(r, &log).await {
            eprintln!("warm-up, {} `{}`: {e}", r.client, r.launcher);
        }
    }
    for round in 0..o.rounds {
        for k in 0..rows.len() {
            let i = (round + k) % rows.len();
            match start(&rows[i], &log).await {
                Ok(s) => {
                    rows[i].startups.push(s.took);
                    rows[i].peaks_kib.push(s.peak_kib);
                    rows[i].processes = s.processes;
                }
                Err(e) => {
                    eprintln!(
                        "round {round}, {} `{}`: {e}",
                        rows[i].client, rows[i].launcher
                    );
                    rows[i].unanswered.push(e);
                }
            }
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    drop(children);

    let native_ms = ms(median(&rows[0].startups));
    let native_kib = median(&rows[0].peaks_kib) as f64;
    let node = rows
        .iter()
        .find(|r| r.launcher == "node dist/index.js" && !r.startups.is_empty())
        .map(|r| (ms(median(&r.startups)), median(&r.peaks_kib) as f64));
    println!(
        "human-plus {version} (release binary {}), {} rounds in {:.0} s, load average at the end {}",
        bin.display(),
        o.rounds,
        started.elapsed().as_secs_f64(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!();
    println!(
        "| bridge | started by | start-up to the first `tools/list` answer, median [min–max] | ÷ native | ÷ mcp-relay-client (node) | peak RSS, all its processes (median) | ÷ native | ÷ mcp-relay-client (node) | processes |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        if r.startups.is_empty() {
            println!(
                "| {} | `{}`{} | no answer | — | — | — | — | — | — |",
                r.client, r.launcher, r.note
            );
            continue;
        }
        let m = ms(median(&r.startups));
        let min = ms(*r.startups.iter().min().unwrap());
        let max = ms(*r.startups.iter().max().unwrap());
        let kib = median(&r.peaks_kib) as f64;
        let (vs_node_t, vs_node_m) = node.map_or_else(
            || ("—".to_owned(), "—".to_owned()),
            |(t, k)| (format!("{:.2}x", m / t), format!("{:.2}x", kib / k)),
        );
        let answered = if r.unanswered.is_empty() {
            String::new()
        } else {
            format!(
                " ({} of {} starts answered)",
                r.startups.len(),
                r.startups.len() + r.unanswered.len()
            )
        };
        println!(
            "| {} | `{}`{} | {m:.1} ms [{min:.1}–{max:.1}]{answered} | {:.1}x | {vs_node_t} | {:.1} MiB | {:.1}x | {vs_node_m} | {} |",
            r.client,
            r.launcher,
            r.note,
            m / native_ms,
            kib / 1024.0,
            kib / native_kib,
            r.processes
        );
    }
    for r in rows.iter().filter(|r| !r.unanswered.is_empty()) {
        println!();
        println!(
            "{} `{}`: {} of {} starts got no answer (not in its figures):",
            r.client,
            r.launcher,
            r.unanswered.len(),
            r.startups.len() + r.unanswered.len()
        );
        for why in &r.unanswered {
            println!("- {why}");
        }
    }
}
