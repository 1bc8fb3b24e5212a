//! The Redis the store tests run against, read from the environment
//! (`.ci/redis` starts all three kinds and prints these variables):
//!
//! * `HUMAN_PLUS_REDIS_URL`: the server the generic tests use (default
//!   `redis://127.0.0.1:6379/`): a `redis://` or `rediss://` URL, or a
//!   cluster's nodes, comma-separated;
//! * `HUMAN_PLUS_REDIS_CA`, `HUMAN_PLUS_REDIS_CLIENT_CERT`,
//!   `HUMAN_PLUS_REDIS_CLIENT_KEY`: the test CA and a client certificate,
//!   used for every `rediss://` URL;
//! * `HUMAN_PLUS_REDIS_TLS_URL`, `HUMAN_PLUS_REDIS_CLUSTER_URL`: the TLS
//!   server and the cluster, for the tests of TLS and of the cluster
//!   themselves.
//!
//! A test that cannot reach its Redis FAILS: none passes by skipping.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use human_plus_store::{Keyring, RedisConfig};

/// Where a test's Redis is.
#[derive(Debug, Clone)]
pub enum Target {
    /// One server.
    Single(String),
    /// A cluster's nodes.
    Cluster(Vec<String>),
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run .ci/redis and export what it prints (eval \"$(.ci/redis)\")")
    })
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

    /// The generic tests' Redis: `HUMAN_PLUS_REDIS_URL`.
    pub fn generic() -> Target {
        Target::parse(
            &std::env::var("HUMAN_PLUS_REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned()),
        )
    }

    /// The TLS server.
    pub fn tls() -> Target {
        Target::parse(&var("HUMAN_PLUS_REDIS_TLS_URL"))
    }

    /// The cluster.
    pub fn cluster() -> Target {
        let t = Target::parse(&var("HUMAN_PLUS_REDIS_CLUSTER_URL"));
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
        std::fs::read(var("HUMAN_PLUS_REDIS_CA")).unwrap()
    }

    /// The client certificate and key, PEM.
    pub fn client_cert() -> (Vec<u8>, Vec<u8>) {
        (
            std::fs::read(var("HUMAN_PLUS_REDIS_CLIENT_CERT")).unwrap(),
            std::fs::read(var("HUMAN_PLUS_REDIS_CLIENT_KEY")).unwrap(),
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
        let fail = |e: redis::RedisError| -> ! {
            panic!("Redis is required at {self:?} (run .ci/redis): {e}")
        };
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
