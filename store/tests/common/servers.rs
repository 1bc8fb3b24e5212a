//! The Redis servers a test process starts for itself when no variable
//! names one: a plain server, a TLS-only server (a test CA made here, a
//! client certificate required), and a cluster of 3 primaries and 3
//! replicas, each on free loopback ports, with nothing kept on disk.
//!
//! Each kind is started once per test process, the first time a test asks
//! for it, and stops when the process ends however it ends: every server
//! runs under a small `sh` watcher whose standard input is a pipe this
//! process holds open; the pipe closes with the process, and the watcher
//! then kills its server and removes its files.
//!
//! Without `redis-server` (and `redis-cli`, for the cluster) on `PATH` the
//! kind is unavailable: a test that needs it is skipped with a message,
//! and fails instead when `HUMAN_PLUS_REQUIRE_REDIS=1` or `CI=true`.

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A kind of Redis a test needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One plain server (`HUMAN_PLUS_REDIS_URL`'s default).
    Plain,
    /// A TLS-only server requiring a client certificate.
    Tls,
    /// A cluster of 3 primaries and 3 replicas.
    Cluster,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Plain => "a plain redis-server",
            Kind::Tls => "a TLS redis-server",
            Kind::Cluster => "a Redis cluster",
        }
    }
}

/// The test CA, and a client certificate it signed, as PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// Servers this process started.
#[derive(Debug)]
pub struct Started {
    /// One URL per server (a cluster's nodes).
    pub urls: Vec<String>,
    /// The TLS material, for the TLS server.
    pub tls: Option<TlsFiles>,
    /// The write ends of the watchers' pipes: never closed while the
    /// process lives.
    _lifelines: Vec<ChildStdin>,
}

/// Whether a missing Redis is a failure here rather than a skip.
pub fn required() -> bool {
    std::env::var("HUMAN_PLUS_REQUIRE_REDIS").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The servers of `kind` this process started (starting them the first
/// time), or why there are none.
pub fn started(kind: Kind) -> Result<&'static Started, String> {
    static PLAIN: OnceLock<Result<Started, String>> = OnceLock::new();
    static TLS: OnceLock<Result<Started, String>> = OnceLock::new();
    static CLUSTER: OnceLock<Result<Started, String>> = OnceLock::new();
    let cell = match kind {
        Kind::Plain => &PLAIN,
        Kind::Tls => &TLS,
        Kind::Cluster => &CLUSTER,
    };
    cell.get_or_init(|| start(kind))
        .as_ref()
        .map_err(Clone::clone)
}

/// Says that `test` is skipped because `kind` cannot be had, past the test
/// harness's capture; panics instead when a Redis is required.
pub fn skip(test: &str, kind: Kind, why: &str) {
    assert!(
        !required(),
        "{test} needs {} and cannot have one: {why}",
        kind.name()
    );
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {test} needs {}: {why}; set HUMAN_PLUS_REQUIRE_REDIS=1 to make this a failure",
        kind.name()
    );
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

fn start(kind: Kind) -> Result<Started, String> {
    if !on_path("redis-server") {
        return Err("no redis-server on PATH (Debian's package redis-server)".to_owned());
    }
    if kind == Kind::Cluster && !on_path("redis-cli") {
        return Err("no redis-cli on PATH (Debian's package redis-tools)".to_owned());
    }
    let mut last = String::new();
    // A port found free may be taken by another process before the server
    // binds it: a few tries.
    for _ in 0..5 {
        let attempt = match kind {
            Kind::Plain => start_plain(),
            Kind::Tls => start_tls(),
            Kind::Cluster => start_cluster(),
        };
        match attempt {
            Ok(started) => return Ok(started),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A directory of this process's own under the system's temporary
/// directory.
fn scratch(label: &str) -> Result<PathBuf, String> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "human-plus-redis-{label}-{}-{n}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// A free loopback port whose cluster bus port (+10000) is free too.
fn free_port() -> Result<u16, String> {
    for _ in 0..100 {
        let port = TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        if port <= 55_535 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err("no free loopback port pair found".to_owned())
}

/// One server under its watcher: `redis-server ARGS` in `dir`, killed
/// (and `dir` removed) when this process's end of the watcher's standard
/// input closes.
struct Server {
    watcher: Child,
    lifeline: ChildStdin,
}

fn spawn(dir: &Path, args: &[String]) -> Result<Server, String> {
    // The watcher ends when the server ends (so a server that could not
    // start is seen at once), and kills the server when its input closes.
    // (A background list's standard input is /dev/null unless redirected
    // explicitly: the pipe is kept as descriptor 3 for it.)
    let script = r#"dir="$1"; shift
exec 3<&0
redis-server "$@" </dev/null >/dev/null 2>&1 &
pid=$!
( cat <&3 >/dev/null; kill -9 "$pid" 2>/dev/null; rm -rf "$dir" ) &
exec 3<&-
wait "$pid""#;
    let mut watcher = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("human-plus-redis")
        .arg(dir)
        .args([
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            "",
            "--dir",
        ])
        .arg(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("sh: {e}"))?;
    let lifeline = watcher.stdin.take().ok_or("no pipe to the watcher")?;
    Ok(Server { watcher, lifeline })
}

/// Waits until `port` accepts connections and `check` holds (10 s at
/// most), or the server exits.
fn wait_ready(
    server: &mut Server,
    port: u16,
    mut check: impl FnMut() -> bool,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = server.watcher.try_wait() {
            return Err(format!("redis-server on port {port} exited: {status}"));
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() && check() {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(10) {
            return Err(format!(
                "redis-server on port {port}: not ready within 10 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ping(url: &str) -> bool {
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok()
}

fn start_plain() -> Result<Started, String> {
    let dir = scratch("plain")?;
    let port = free_port()?;
    let mut server = spawn(&dir, &["--port".into(), port.to_string()])?;
    let url = format!("redis://127.0.0.1:{port}/");
    wait_ready(&mut server, port, || ping(&url))?;
    Ok(Started {
        urls: vec![url],
        tls: None,
        _lifelines: vec![server.lifeline],
    })
}

fn start_tls() -> Result<Started, String> {
    let dir = scratch("tls")?;
    let files = write_certificates(&dir)?;
    let port = free_port()?;
    let path = |name: &str| dir.join(name).display().to_string();
    let mut server = spawn(
        &dir,
        &[
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            path("server.crt"),
            "--tls-key-file".into(),
            path("server.key"),
            "--tls-ca-cert-file".into(),
            path("ca.crt"),
            "--tls-auth-clients".into(),
            "yes".into(),
        ],
    )?;
    wait_ready(&mut server, port, || true)?;
    Ok(Started {
        urls: vec![format!("rediss://127.0.0.1:{port}/")],
        tls: Some(files),
        _lifelines: vec![server.lifeline],
    })
}

/// A test CA, a server certificate it signs for `127.0.0.1` only (so
/// `localhost` is a name mismatch a test can provoke) and a client
/// certificate, as `.ci/redis` makes them.
fn write_certificates(dir: &Path) -> Result<TlsFiles, String> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let fail = |e: rcgen::Error| format!("making the test certificates: {e}");
    let ca_key = KeyPair::generate().map_err(fail)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Human Plus Redis test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).map_err(fail)?;
    let issuer = Issuer::new(ca, ca_key);
    let leaf = |names: Vec<String>, who: &str, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().map_err(fail)?;
        let mut params = CertificateParams::new(names).map_err(fail)?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("human-plus-{who}"));
        params.is_ca = IsCa::NoCa;
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &issuer).map_err(fail)?;
        Ok::<_, String>((cert.pem(), key.serialize_pem()))
    };
    let (server_cert, server_key) = leaf(
        vec!["127.0.0.1".to_owned()],
        "server",
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let (client_cert, client_key) =
        leaf(Vec::new(), "client", ExtendedKeyUsagePurpose::ClientAuth)?;
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok::<_, String>(path)
    };
    let ca = write("ca.crt", &ca_cert.pem())?;
    write("server.crt", &server_cert)?;
    write("server.key", &server_key)?;
    Ok(TlsFiles {
        ca,
        client_cert: write("client.crt", &client_cert)?,
        client_key: write("client.key", &client_key)?,
    })
}

fn info(url: &str, section: &str) -> String {
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
        .and_then(|mut c| {
            redis::cmd(if section == "cluster" {
                "CLUSTER"
            } else {
                "INFO"
            })
            .arg(if section == "cluster" {
                "INFO"
            } else {
                section
            })
            .query::<String>(&mut c)
        })
        .unwrap_or_default()
}

fn start_cluster() -> Result<Started, String> {
    let mut servers = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..6 {
        let port = free_port()?;
        let dir = scratch(&format!("cluster-{port}"))?;
        let server = spawn(
            &dir,
            &[
                "--port".into(),
                port.to_string(),
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-config-file".into(),
                dir.join("nodes.conf").display().to_string(),
                "--cluster-node-timeout".into(),
                "1000".into(),
            ],
        )?;
        servers.push(server);
        ports.push(port);
    }
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    for (server, (port, url)) in servers.iter_mut().zip(ports.iter().zip(&urls)) {
        wait_ready(server, *port, || ping(url))?;
    }
    let created = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(ports.iter().map(|p| format!("127.0.0.1:{p}")))
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("redis-cli: {e}"))?;
    if !created.status.success() {
        return Err(format!(
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stderr).trim()
        ));
    }
    // Every node sees the cluster whole, and every replica has finished its
    // first sync.
    let start = Instant::now();
    loop {
        let ok = urls
            .iter()
            .all(|u| info(u, "cluster").contains("cluster_state:ok"));
        let synced = urls
            .iter()
            .filter(|u| info(u, "replication").contains("master_link_status:up"))
            .count();
        if ok && synced == 3 {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err("the cluster was not whole and synced within 30 s".to_owned());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(Started {
        urls,
        tls: None,
        _lifelines: servers.into_iter().map(|s| s.lifeline).collect(),
    })
}
