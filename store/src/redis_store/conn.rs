//! Connections: one server or a cluster, plain or TLS, blocking here (the
//! async ones are in `aio`).

use std::time::Duration;

use human_plus_core::Error;
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection, Connect};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsCertificates};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::config::{Target, TlsMaterial};
use super::errors::config_error;

/// The redis-rs client of one server or of a cluster.
pub(crate) enum Backend {
    Single(Box<redis::Client>),
    Cluster(Box<ClusterClient>),
}

/// A blocking connection.
pub(crate) enum Conn {
    Single(redis::Connection),
    Cluster(Box<ClusterConnection<TimedConnection>>),
}

/// A cluster node's blocking connection whose setup is bounded in time.
///
/// redis-rs's blocking cluster client connects a node and then sends it a
/// `PING` with no read timeout at all (it clears the connect timeout
/// first), so a node that accepts connections but answers nothing (a
/// stopped process, a partition) blocks every new cluster connection
/// forever. This wrapper keeps the connect timeout on the socket until the
/// cluster client sets its own (the response timeout) right after that
/// `PING`.
pub(crate) struct TimedConnection(redis::Connection);

impl Connect for TimedConnection {
    fn connect<T>(info: T, timeout: Option<Duration>) -> redis::RedisResult<Self>
    where
        T: IntoConnectionInfo,
    {
        let conn = <redis::Connection as Connect>::connect(info, timeout)?;
        conn.set_read_timeout(timeout)?;
        conn.set_write_timeout(timeout)?;
        Ok(TimedConnection(conn))
    }

    fn send_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<()> {
        self.0.send_packed_command(cmd)
    }

    fn set_write_timeout(&self, dur: Option<Duration>) -> redis::RedisResult<()> {
        self.0.set_write_timeout(dur)
    }

    fn set_read_timeout(&self, dur: Option<Duration>) -> redis::RedisResult<()> {
        self.0.set_read_timeout(dur)
    }

    fn recv_response(&mut self) -> redis::RedisResult<redis::Value> {
        self.0.recv_response()
    }
}

impl redis::ConnectionLike for TimedConnection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        self.0.req_packed_commands(cmd, offset, count)
    }

    fn req_command(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        self.0.req_command(cmd)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }

    fn supports_pipelining(&self) -> bool {
        self.0.supports_pipelining()
    }

    fn check_connection(&mut self) -> bool {
        self.0.check_connection()
    }

    fn is_open(&self) -> bool {
        self.0.is_open()
    }
}

impl Conn {
    pub(crate) fn like(&mut self) -> &mut dyn redis::ConnectionLike {
        match self {
            Conn::Single(c) => c,
            Conn::Cluster(c) => &mut **c,
        }
    }

    /// `WAIT n timeout_ms` on the connection that wrote `key` (for a
    /// cluster, the primary of its slot): how many replicas acknowledged.
    pub(crate) fn wait_replicas(
        &mut self,
        key: &str,
        n: i64,
        timeout_ms: u64,
    ) -> redis::RedisResult<i64> {
        let wait = wait_command(n, timeout_ms);
        match self {
            Conn::Single(c) => wait.query(c),
            Conn::Cluster(c) => {
                let value = c.route_command(&wait, primary_of(key))?;
                Ok(redis::FromRedisValue::from_redis_value(value)?)
            }
        }
    }
}

/// `WAIT n timeout_ms`: until `n` replicas acknowledged this connection's
/// writes, or the timeout.
pub(crate) fn wait_command(n: i64, timeout_ms: u64) -> redis::Cmd {
    let mut wait = redis::cmd("WAIT");
    wait.arg(n).arg(timeout_ms);
    wait
}

/// The routing to the primary that holds `key`'s slot.
pub(crate) fn primary_of(key: &str) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
        key,
        SlotAddr::Master,
    )))
}

/// A URL checked and parsed, never echoed in an error (it may hold the
/// password).
fn parse(url: &str) -> Result<ConnectionInfo, Error> {
    if url.contains('#') {
        return Err(config_error(
            "a Redis URL must have no fragment ('#insecure' would turn certificate checks off, which this store never does)",
        ));
    }
    let info = url
        .into_connection_info()
        .map_err(|_| config_error("the Redis URL is not valid"))?;
    Ok(info.set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true)))
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// The TLS material as redis-rs takes it, each PEM checked first so an
/// unusable file is a configuration error now, not a handshake failure
/// later.
fn certificates(tls: &TlsMaterial) -> Result<TlsCertificates, Error> {
    let certs = |pem: &[u8], what: &str| -> Result<(), Error> {
        let parsed: Result<Vec<CertificateDer<'_>>, _> =
            CertificateDer::pem_slice_iter(pem).collect();
        match parsed {
            Ok(certs) if !certs.is_empty() => Ok(()),
            Ok(_) => Err(config_error(format!("the {what} PEM holds no certificate"))),
            Err(_) => Err(config_error(format!("the {what} PEM cannot be read"))),
        }
    };
    if let Some(ca) = &tls.ca_pem {
        certs(ca, "TLS CA")?;
    }
    if let Some((chain, key)) = &tls.client {
        certs(chain, "TLS client certificate")?;
        PrivateKeyDer::from_pem_slice(key)
            .map_err(|_| config_error("the TLS client key PEM holds no usable private key"))?;
    }
    Ok(TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(chain, key)| redis::ClientTlsConfig {
                client_cert: chain.clone(),
                client_key: key.to_vec(),
            }),
        root_cert: tls.ca_pem.clone(),
    })
}

/// redis-rs builds its rustls configuration from the process's default
/// crypto provider: make it `ring`, the runtimes' provider, unless the
/// application installed one already.
fn install_ring_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

impl Backend {
    pub(crate) fn new(
        target: &Target,
        tls: &TlsMaterial,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Backend, Error> {
        let urls: Vec<&str> = match target {
            Target::Single(url) => vec![url.as_str()],
            Target::Cluster(seeds) => seeds.iter().map(|s| s.as_str()).collect(),
        };
        if urls.is_empty() {
            return Err(config_error("a Redis Cluster needs at least one seed node"));
        }
        let infos = urls.into_iter().map(parse).collect::<Result<Vec<_>, _>>()?;
        let tls_urls = infos.iter().filter(|i| is_tls(i)).count();
        if tls_urls != 0 && tls_urls != infos.len() {
            return Err(config_error(
                "the cluster's seed nodes mix redis:// and rediss://",
            ));
        }
        let over_tls = tls_urls != 0;
        if tls.is_set() && !over_tls {
            return Err(config_error(
                "TLS settings (a CA or a client certificate) were given for a plain redis:// URL: use rediss://, the store never falls back to plain TCP",
            ));
        }
        let certs = if over_tls {
            install_ring_provider();
            Some(certificates(tls)?)
        } else {
            None
        };
        let built = |e: redis::RedisError| {
            config_error(format!(
                "the Redis client cannot be built: {}",
                e.detail().unwrap_or("invalid configuration")
            ))
        };
        Ok(match target {
            Target::Single(_) => {
                let info = infos
                    .into_iter()
                    .next()
                    .ok_or_else(|| config_error("the Redis URL is not valid"))?;
                let client = match certs {
                    Some(certs) => redis::Client::build_with_tls(info, certs),
                    None => redis::Client::open(info),
                }
                .map_err(built)?;
                Backend::Single(Box::new(client))
            }
            Target::Cluster(_) => {
                // Few retries inside redis-rs: the store's own loop retries
                // on a fresh connection, which re-reads the slot map (a
                // primary that stopped answering is never left by redis-rs's
                // retries on the same connection).
                let mut builder = ClusterClientBuilder::new(infos)
                    .connection_timeout(connect_timeout)
                    .response_timeout(response_timeout)
                    .retries(2)
                    .min_retry_wait(10)
                    .max_retry_wait(200);
                if let Some(certs) = certs {
                    builder = builder.certs(certs);
                }
                Backend::Cluster(Box::new(builder.build().map_err(built)?))
            }
        })
    }

    pub(crate) fn connect_blocking(
        &self,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> redis::RedisResult<Conn> {
        match self {
            Backend::Single(client) => {
                let conn = client.get_connection_with_timeout(connect_timeout)?;
                let timeout = Some(response_timeout.max(Duration::from_millis(1)));
                conn.set_read_timeout(timeout)?;
                conn.set_write_timeout(timeout)?;
                Ok(Conn::Single(conn))
            }
            Backend::Cluster(client) => Ok(Conn::Cluster(Box::new(
                client.get_generic_connection::<TimedConnection>()?,
            ))),
        }
    }
}
