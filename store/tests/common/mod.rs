//! The Redis the store tests run against:
//!
//! * `HUMAN_PLUS_REDIS_URL`: the server the generic tests use: a
//!   `redis://` or `rediss://` URL, or a cluster's nodes, comma-separated;
//! * `HUMAN_PLUS_REDIS_CA`, `HUMAN_PLUS_REDIS_CLIENT_CERT`,
//!   `HUMAN_PLUS_REDIS_CLIENT_KEY`: the test CA and a client certificate,
//!   used for every `rediss://` URL;
//! * `HUMAN_PLUS_REDIS_TLS_URL`, `HUMAN_PLUS_REDIS_CLUSTER_URL`: the TLS
//!   server and the cluster, for the tests of TLS and of the cluster
//!   themselves.
//!
//! `.ci/redis` starts all three kinds and prints these variables. A kind
//! whose variable is not set is started by the test process itself, on
//! free loopback ports (`servers`): nothing else on the machine (a Redis a
//! developer keeps on 6379, say) is ever touched. Without `redis-server`
//! a test is skipped with a message, and fails instead under
//! `HUMAN_PLUS_REQUIRE_REDIS=1` or `CI=true`: none passes silently.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod servers;

use std::time::Duration;

use human_plus_store::{Keyring, RedisConfig};
pub use servers::Kind;

/// Where a test's Redis is.
#[derive(Debug, Clone)]
pub enum Target {
    /// One server.
    Single(String),
    /// A cluster's nodes.
    Cluster(Vec<String>),
}

/// The variable naming `kind`'s Redis.
fn variable(kind: Kind) -> &'static str {
    match kind {
        Kind::Plain => "HUMAN_PLUS_REDIS_URL",
        Kind::Tls => "HUMAN_PLUS_REDIS_TLS_URL",
        Kind::Cluster => "HUMAN_PLUS_REDIS_CLUSTER_URL",
    }
}

fn set(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the test running now can have a Redis of `kind` (its variable
/// is set, or this process started one); when not, the test is skipped
/// with a message (a failure when a Redis is required), and the caller
/// returns.
#[must_use]
pub fn available(kind: Kind) -> bool {
    if set(variable(kind)).is_some() {
        return true;
    }
    match servers::started(kind) {
        Ok(_) => true,
        Err(why) => {
            let thread = std::thread::current();
            servers::skip(thread.name().unwrap_or("this test"), kind, &why);
            false
        }
    }
}

/// `kind`'s Redis: its variable, else the servers this process started.
fn named(kind: Kind) -> String {
    set(variable(kind)).unwrap_or_else(|| match servers::started(kind) {
        Ok(started) => started.urls.join(","),
        Err(why) => panic!(
            "{} is not set and no Redis could be started: {why}",
            variable(kind)
        ),
    })
}

/// The TLS material: the variables', else the TLS server's this process
/// started.
fn tls_file(var: &str, pick: fn(&servers::TlsFiles) -> &std::path::Path) -> Vec<u8> {
    let path = set(var).map_or_else(
        || match servers::started(Kind::Tls) {
            Ok(servers::Started {
                tls: Some(files), ..
            }) => pick(files).to_path_buf(),
            Ok(_) => unreachable!("a TLS server has its files"),
            Err(why) => panic!("{var} is not set and no TLS Redis could be started: {why}"),
        },
        std::path::PathBuf::from,
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What a child process of a test must be told to use the same generic
/// Redis (a server this process started is in no environment; the TLS
/// variables, when set, are inherited).
#[must_use]
pub fn child_env() -> Vec<(&'static str, String)> {
    vec![("HUMAN_PLUS_REDIS_URL", named(Kind::Plain))]
}

impl Target {
    /// What `text` names: comma-separated URLs are a cluster.
    pub fn parse(text: &str) -> Target {
        if text.contains(',') {
            Target::Cluster(text.split(',').map(str::to_owned).collect())
        } else {
            Target::Single(text.to_owned())
        }
    }

    /// The generic tests' Redis: `HUMAN_PLUS_REDIS_URL`, else a plain
    /// server this process started.
    pub fn generic() -> Target {
        Target::parse(&named(Kind::Plain))
    }

    /// The TLS server.
    pub fn tls() -> Target {
        Target::parse(&named(Kind::Tls))
    }

    /// The cluster.
    pub fn cluster() -> Target {
        let t = Target::parse(&named(Kind::Cluster));
        assert!(
            matches!(t, Target::Cluster(_)),
            "HUMAN_PLUS_REDIS_CLUSTER_URL names one server"
        );
        t
    }

    pub fn urls(&self) -> Vec<String> {
        match self {
            Target::Single(u) => vec![u.clone()],
            Target::Cluster(u) => u.clone(),
        }
    }

    pub fn is_tls(&self) -> bool {
        self.urls().iter().any(|u| u.starts_with("rediss://"))
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }

    /// The test CA, PEM.
    pub fn ca() -> Vec<u8> {
        tls_file("HUMAN_PLUS_REDIS_CA", |f| &f.ca)
    }

    /// The client certificate and key, PEM.
    pub fn client_cert() -> (Vec<u8>, Vec<u8>) {
        (
            tls_file("HUMAN_PLUS_REDIS_CLIENT_CERT", |f| &f.client_cert),
            tls_file("HUMAN_PLUS_REDIS_CLIENT_KEY", |f| &f.client_key),
        )
    }

    /// A store configuration for this target, with the test CA and client
    /// certificate over TLS.
    pub fn config(&self, keyring: Keyring) -> RedisConfig {
        let config = match self {
            Target::Single(u) => RedisConfig::new(u.clone(), keyring),
            Target::Cluster(u) => RedisConfig::cluster(u.clone(), keyring),
        };
        if self.is_tls() {
            let (cert, key) = Target::client_cert();
            config
                .tls_ca_pem(Target::ca())
                .tls_client_cert_pem(cert, key)
        } else {
            config
        }
    }

    /// A raw connection, for looking at what the store wrote.
    pub fn raw(&self) -> Raw {
        let fail = |e: redis::RedisError| -> ! { panic!("Redis does not answer at {self:?}: {e}") };
        match self {
            Target::Single(u) => {
                let client = if self.is_tls() {
                    let (cert, key) = Target::client_cert();
                    redis::Client::build_with_tls(
                        u.as_str(),
                        redis::TlsCertificates {
                            client_tls: Some(redis::ClientTlsConfig {
                                client_cert: cert,
                                client_key: key,
                            }),
                            root_cert: Some(Target::ca()),
                        },
                    )
                } else {
                    redis::Client::open(u.as_str())
                }
                .unwrap_or_else(|e| fail(e));
                Raw::Single(
                    client
                        .get_connection_with_timeout(Duration::from_secs(5))
                        .unwrap_or_else(|e| fail(e)),
                )
            }
            Target::Cluster(u) => Raw::Cluster(Box::new(
                redis::cluster::ClusterClientBuilder::new(u.clone())
                    .connection_timeout(Duration::from_secs(5))
                    .response_timeout(Duration::from_secs(5))
                    .build()
                    .unwrap_or_else(|e| fail(e))
                    .get_connection()
                    .unwrap_or_else(|e| fail(e)),
            )),
        }
    }
}

/// A raw connection to one server or a cluster.
pub enum Raw {
    Single(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Raw {
    pub fn like(&mut self) -> &mut dyn redis::ConnectionLike {
        match self {
            Raw::Single(c) => c,
            Raw::Cluster(c) => &mut **c,
        }
    }

    /// Every key matching `pattern` (on a cluster, from every node).
    pub fn keys(&mut self, pattern: &str) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(self.like()).unwrap();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Deletes `keys` (one by one: on a cluster they span slots).
    pub fn del(&mut self, keys: &[String]) {
        for key in keys {
            let _: Result<i64, _> = redis::cmd("DEL").arg(key).query(self.like());
        }
    }
}

// ---------------------------------------------------------------------
// The cluster's nodes.
// ---------------------------------------------------------------------

/// A node of the cluster, as `CLUSTER NODES` describes it.
#[derive(Debug, Clone)]
pub struct Node {
    pub id: String,
    pub host: String,
    pub port: u16,
    pub primary: bool,
    pub slots: Vec<(u16, u16)>,
}

pub fn node_conn(host: &str, port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://{host}:{port}/"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap()
}

pub fn nodes() -> Vec<Node> {
    // From the first seed that answers (one may be stopped).
    let text = Target::cluster()
        .urls()
        .into_iter()
        .find_map(|url| {
            let mut conn = redis::Client::open(url)
                .ok()?
                .get_connection_with_timeout(Duration::from_secs(1))
                .ok()?;
            conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
            redis::cmd("CLUSTER")
                .arg("NODES")
                .query::<String>(&mut conn)
                .ok()
        })
        .expect("no node of the cluster answers CLUSTER NODES");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let addr = f[1].split('@').next().unwrap();
            let (host, port) = addr.rsplit_once(':').unwrap();
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .map(|s| match s.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => (s.parse().unwrap(), s.parse().unwrap()),
                })
                .collect();
            Node {
                id: f[0].to_owned(),
                host: host.to_owned(),
                port: port.parse().unwrap(),
                primary: f[2].contains("master") && !f[2].contains("fail"),
                slots,
            }
        })
        .collect()
}

pub fn owner_of(slot: u16) -> Node {
    nodes()
        .into_iter()
        .find(|n| n.primary && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
        .unwrap_or_else(|| panic!("no primary serves slot {slot}"))
}

pub fn keyslot(raw: &mut Raw, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(raw.like())
        .unwrap()
}
