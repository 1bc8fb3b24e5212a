//! The service's settings, each from a flag or the environment, and its
//! log lines.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use human_plus_tokio::{
    DEFAULT_KEPT_LEG_IDLE, DEFAULT_KEPT_LEGS, DEFAULT_RELAY_PATH, EgressPolicy, Keyring,
    LinkOptions, ManagerConfig, NO_PINS, TrustPolicy,
};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Every setting: its environment variable (the flag is `--` and the name
/// in lower case with `-`), and what it is.
const SETTINGS: &[(&str, &str)] = &[
    (
        "LISTEN",
        "address to listen on (default 127.0.0.1:8080; port 0 picks one)",
    ),
    (
        "REDIS_URL",
        "the attachment store (default redis://127.0.0.1:6379/)",
    ),
    (
        "OWNER",
        "the tenant every attachment belongs to (default agent-service)",
    ),
    (
        "RELAY_HOSTS",
        "relay hosts to reach, comma-separated (required)",
    ),
    ("RELAY_PORTS", "their ports, comma-separated (default 443)"),
    (
        "EGRESS_PROXY",
        "an HTTP CONNECT egress proxy, http://host:port",
    ),
    (
        "ALLOW_UNVERIFIED_EGRESS",
        "1: connect without an egress proxy (local development)",
    ),
    (
        "RELAY_PATH",
        "the relay path of a page link (default agent-relay; empty: the page's origin)",
    ),
    (
        "ALLOW_INSECURE_LOOPBACK",
        "1: links to a relay on this machine over plain http",
    ),
    (
        "ALLOWED_TOOLS",
        "the page tools the agent may call, comma-separated (required)",
    ),
    (
        "KEPT_LEGS",
        "at most this many pages' legs kept open between calls (default 512)",
    ),
    (
        "KEPT_LEG_IDLE_MS",
        "a page's leg unused this long is closed (default 90000)",
    ),
    (
        "SHUTDOWN_GRACE_MS",
        "how long requests in flight may finish after SIGTERM (default 10000)",
    ),
];

/// What the service runs with.
pub struct Settings {
    /// Where it listens.
    pub listen: SocketAddr,
    /// The Redis the attachments live in.
    pub redis_url: String,
    /// The records' encryption key (`HUMAN_PLUS_KEY`, `HUMAN_PLUS_KEY_ID`).
    pub keyring: Keyring,
    /// The owner of every attachment.
    pub owner: String,
    /// Egress and trust.
    pub manager: ManagerConfig,
    /// How share links are read.
    pub links: LinkOptions,
    /// At most how many receive legs the manager keeps between calls.
    pub kept_legs: usize,
    /// How long a kept leg may go unused.
    pub kept_leg_idle: Duration,
    /// How long requests in flight may finish after SIGTERM.
    pub grace: Duration,
}

impl Settings {
    /// Reads the settings; prints the help (exit 0) or what is wrong (exit
    /// 2) instead.
    pub fn read() -> Result<Settings, ExitCode> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.iter().any(|a| a == "--help" || a == "-h") {
            println!("agent-service: an agent backend on Human+. Settings (flag or environment):");
            for (name, what) in SETTINGS {
                println!("  --{:<24} {name}: {what}", flag(name));
            }
            println!("  HUMAN_PLUS_KEY (environment only): the records' key, 64 hex digits");
            println!(
                "  HUMAN_PLUS_KEY_ID: the key's id (default k1); RUST_LOG: e.g. info,human_plus=debug"
            );
            return Err(ExitCode::SUCCESS);
        }
        Settings::from(&args).map_err(|e| {
            eprintln!("agent-service: {e} (--help lists the settings)");
            ExitCode::from(2)
        })
    }

    fn from(args: &[String]) -> Result<Settings, String> {
        let get = |name: &str| setting(args, name);
        for pair in args.chunks(2) {
            let known = SETTINGS
                .iter()
                .any(|(n, _)| pair[0] == format!("--{}", flag(n)));
            if !known || pair.len() < 2 {
                return Err(format!("unknown flag or missing value: {}", pair[0]));
            }
        }
        let list = |name: &str| -> Vec<String> {
            let text = get(name).unwrap_or_default();
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let on = |name: &str| get(name).is_some_and(|v| v == "1" || v == "true");
        let (hosts, tools) = (list("RELAY_HOSTS"), list("ALLOWED_TOOLS"));
        if hosts.is_empty() || tools.is_empty() {
            return Err("RELAY_HOSTS and ALLOWED_TOOLS are required".into());
        }
        let ports = match list("RELAY_PORTS") {
            ports if ports.is_empty() => vec![443],
            ports => ports
                .iter()
                .map(|p| parse(p, "RELAY_PORTS"))
                .collect::<Result<_, _>>()?,
        };
        let mut egress = EgressPolicy::new(hosts)
            .allow_ports(ports)
            .allow_unverified_egress(on("ALLOW_UNVERIFIED_EGRESS"));
        if let Some(proxy) = get("EGRESS_PROXY") {
            egress = egress.egress_proxy(proxy);
        }
        // Set but empty is a setting of its own here: a relay at the
        // page's origin, as the relay_failed answer offers.
        let relay_path =
            setting_or_empty(args, "RELAY_PATH").unwrap_or_else(|| DEFAULT_RELAY_PATH.to_owned());
        let links = LinkOptions::default()
            .relay_path(&relay_path)
            .map_err(|e| e.to_string())?
            .allow_insecure_loopback(on("ALLOW_INSECURE_LOOPBACK"));
        let key = std::env::var("HUMAN_PLUS_KEY").map_err(|_| "HUMAN_PLUS_KEY is required")?;
        let key = Keyring::key_from_hex(&key).map_err(|e| e.to_string())?;
        let key_id = std::env::var("HUMAN_PLUS_KEY_ID").unwrap_or_else(|_| "k1".into());
        let grace =
            get("SHUTDOWN_GRACE_MS").map_or(Ok(10_000), |ms| parse(&ms, "SHUTDOWN_GRACE_MS"))?;
        Ok(Settings {
            listen: parse(
                &get("LISTEN").unwrap_or_else(|| "127.0.0.1:8080".into()),
                "LISTEN",
            )?,
            redis_url: get("REDIS_URL").unwrap_or_else(|| "redis://127.0.0.1:6379/".into()),
            keyring: Keyring::new(key_id, key).map_err(|e| e.to_string())?,
            owner: get("OWNER").unwrap_or_else(|| "agent-service".into()),
            manager: ManagerConfig::new(egress, TrustPolicy::allowing(tools, NO_PINS)),
            links,
            kept_legs: get("KEPT_LEGS")
                .map_or(Ok(DEFAULT_KEPT_LEGS), |n| parse(&n, "KEPT_LEGS"))?,
            kept_leg_idle: get("KEPT_LEG_IDLE_MS").map_or(Ok(DEFAULT_KEPT_LEG_IDLE), |ms| {
                parse(&ms, "KEPT_LEG_IDLE_MS").map(Duration::from_millis)
            })?,
            grace: Duration::from_millis(grace),
        })
    }
}

/// `RELAY_HOSTS` → `relay-hosts`.
fn flag(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}

/// The flag's value, else the environment's; empty counts as unset.
fn setting(args: &[String], name: &str) -> Option<String> {
    setting_or_empty(args, name).filter(|v| !v.is_empty())
}

/// The flag's value, else the environment's, empty included (`RELAY_PATH=''`
/// is the page's origin, not the default path).
fn setting_or_empty(args: &[String], name: &str) -> Option<String> {
    let flag = format!("--{}", flag(name));
    let given = args.chunks(2).find(|pair| pair[0] == flag);
    let value = given.and_then(|pair| pair.get(1).cloned());
    value.or_else(|| std::env::var(name).ok())
}

fn parse<T: FromStr>(text: &str, name: &str) -> Result<T, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{name}: cannot read {text:?}"))
}

/// Log lines on standard error, filtered by `RUST_LOG` (`info` when unset
/// or unreadable): a level, or targets such as `info,human_plus=debug`.
pub fn init_tracing() {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| Targets::from_str(&f).ok());
    let filter = filter.unwrap_or_else(|| Targets::new().with_default(tracing::Level::INFO));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    tracing_subscriber::registry().with(fmt).with(filter).init();
}
