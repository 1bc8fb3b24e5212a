//! How a Redis store connects, names its keys and seals its records.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use human_plus_core::Entropy;
use zeroize::Zeroizing;

use super::crypto::{Keyring, Nonces};
use super::keys::{self, KeyLayout};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "human-plus:";

/// The default sliding TTL of a record: 24 hours, re-set by every write.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The default timeout of a connection attempt.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default timeout of one command's response (the scripts included).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How many idle connections the blocking flavour keeps by default.
pub const DEFAULT_MAX_IDLE: usize = 16;

/// How long an operation keeps retrying a server that does not answer, by
/// default: 10 s.
pub const DEFAULT_FAILOVER_WAIT: Duration = Duration::from_secs(10);

/// How long an operation keeps retrying a cluster that is failing over, by
/// default: 30 s (Redis's default `cluster-node-timeout` is 15 s, and the
/// election follows it).
pub const DEFAULT_CLUSTER_FAILOVER_WAIT: Duration = Duration::from_secs(30);

/// How long a `WAIT` for replicas waits by default: 1 s.
pub const DEFAULT_REPLICA_ACK_TIMEOUT: Duration = Duration::from_secs(1);

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Where the store connects.
pub(super) enum Target {
    Single(Zeroizing<String>),
    Cluster(Vec<Zeroizing<String>>),
}

/// TLS material: the CAs to trust instead of the web PKI roots, and a
/// client certificate chain with its key.
#[derive(Default)]
pub(super) struct TlsMaterial {
    pub(super) ca_pem: Option<Vec<u8>>,
    pub(super) client: Option<(Vec<u8>, Zeroizing<Vec<u8>>)>,
}

impl TlsMaterial {
    pub(super) fn is_set(&self) -> bool {
        self.ca_pem.is_some() || self.client.is_some()
    }
}

/// How a Redis store connects, names its keys and seals its records.
///
/// ```
/// use std::time::Duration;
/// use human_plus_store::{Keyring, RedisConfig};
///
/// let config = RedisConfig::new("redis://:secret@redis.internal:6379/2", Keyring::generate("k1")?)
///     .prefix("tenant-a:human-plus:")
///     .ttl(Duration::from_secs(6 * 3600))
///     .response_timeout(Duration::from_secs(2));
/// assert_eq!(config.record_key("surface_1"), "tenant-a:human-plus:surface_1");
/// assert_eq!(config.lock_key("surface_1"), "tenant-a:human-plus:lock:surface_1");
/// assert!(!format!("{config:?}").contains("secret"));
///
/// // A cluster, over TLS with a private CA and a client certificate.
/// # let (ca, cert, key) = (Vec::new(), Vec::new(), Vec::new());
/// let cluster = RedisConfig::cluster(
///     ["rediss://:secret@redis-0.internal:6380", "rediss://:secret@redis-1.internal:6380"],
///     Keyring::generate("k1")?,
/// )
/// .tls_ca_pem(ca)
/// .tls_client_cert_pem(cert, key);
/// assert_eq!(cluster.record_key("surface_1"), "human-plus:{surface_1}");
/// assert_eq!(cluster.lock_key("surface_1"), "human-plus:lock:{surface_1}");
/// # Ok::<(), human_plus_core::Error>(())
/// ```
pub struct RedisConfig {
    pub(super) target: Target,
    pub(super) tls: TlsMaterial,
    pub(super) layout: Option<KeyLayout>,
    pub(super) replica_acks: Option<(u32, Duration)>,
    pub(super) failover_wait: Option<Duration>,
    pub(super) keyring: Keyring,
    pub(super) nonces: Nonces,
    pub(super) prefix: String,
    pub(super) ttl: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    pub(super) retry_min: Duration,
    pub(super) retry_max: Duration,
    pub(super) max_idle: usize,
}

impl RedisConfig {
    pub(super) fn with_target(target: Target, keyring: Keyring) -> Self {
        RedisConfig {
            target,
            tls: TlsMaterial::default(),
            layout: None,
            replica_acks: None,
            failover_wait: None,
            keyring,
            nonces: Nonces::Os,
            prefix: DEFAULT_PREFIX.to_owned(),
            ttl: DEFAULT_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            retry_min: Duration::from_millis(1),
            retry_max: Duration::from_millis(100),
            max_idle: DEFAULT_MAX_IDLE,
        }
    }

    /// A configuration for the single Redis at `url`
    /// (`redis://[[user]:password@]host:port/db`, or `rediss://` for TLS)
    /// sealing records with `keyring`, and the defaults for the rest: the
    /// [`KeyLayout::Plain`] layout, no `WAIT` for replicas.
    #[must_use]
    pub fn new(url: impl Into<String>, keyring: Keyring) -> Self {
        RedisConfig::with_target(Target::Single(Zeroizing::new(url.into())), keyring)
    }

    /// A configuration for a Redis Cluster reached through these seed
    /// nodes (`redis://` or `rediss://` URLs, all of one scheme and one
    /// password; the rest of the cluster is discovered from them), with
    /// the [`KeyLayout::HashTagged`] layout and `WAIT` for one replica
    /// (see [`RedisConfig::replica_acks`]).
    #[must_use]
    pub fn cluster<I, S>(seeds: I, keyring: Keyring) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let seeds = seeds
            .into_iter()
            .map(|s| Zeroizing::new(s.into()))
            .collect();
        RedisConfig::with_target(Target::Cluster(seeds), keyring)
    }

    /// Trusts exactly the CA certificates in `pem` (one or more PEM
    /// `CERTIFICATE` blocks) for the server's certificate, instead of the
    /// bundled web PKI roots. Needs `rediss://`.
    #[must_use]
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.ca_pem = Some(pem.into());
        self
    }

    /// Presents this client certificate (a PEM chain, leaf first) with its
    /// private key (PEM: PKCS#8, PKCS#1 or SEC1) to a server that asks for
    /// one (`tls-auth-clients`). Needs `rediss://`. The key is wiped from
    /// memory when the configuration is dropped.
    #[must_use]
    pub fn tls_client_cert_pem(
        mut self,
        cert_chain_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((cert_chain_pem.into(), Zeroizing::new(key_pem.into())));
        self
    }

    /// The key layout (default: [`KeyLayout::Plain`] for one server,
    /// [`KeyLayout::HashTagged`] for a cluster, which refuses the plain
    /// layout).
    #[must_use]
    pub fn key_layout(mut self, layout: KeyLayout) -> Self {
        self.layout = Some(layout);
        self
    }

    /// After taking a lock and after writing a record, `WAIT` until
    /// `replicas` replicas have it (at most as many as the primary has
    /// connected), for up to `timeout`; `0` turns it off. Default: 1
    /// replica and [`DEFAULT_REPLICA_ACK_TIMEOUT`] for a cluster, off for
    /// one server (turn it on for a server with replicas that can be
    /// promoted). See the [module documentation](super#failover).
    #[must_use]
    pub fn replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_acks = Some((replicas, timeout));
        self
    }

    /// How long an operation keeps retrying a server that does not answer,
    /// a broken connection or a cluster that is failing over (default
    /// [`DEFAULT_FAILOVER_WAIT`] for one server,
    /// [`DEFAULT_CLUSTER_FAILOVER_WAIT`] for a cluster; `ZERO` tries once).
    /// Keep it above the time your deployment takes to fail over
    /// (`cluster-node-timeout` plus the election, or your provider's
    /// figure): an operation still failing when it runs out ends with a
    /// typed error.
    #[must_use]
    pub fn failover_wait(mut self, wait: Duration) -> Self {
        self.failover_wait = Some(wait);
        self
    }

    /// The key prefix (default [`DEFAULT_PREFIX`]).
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The sliding TTL of a record, re-set by every write (default
    /// [`DEFAULT_TTL`]; at least 1 ms).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The timeout of a connection attempt, the TLS handshake included
    /// (default [`DEFAULT_CONNECT_TIMEOUT`]; redis-rs's async default of
    /// 1 s is replaced).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The timeout of one command's response, the scripts included
    /// (default [`DEFAULT_RESPONSE_TIMEOUT`]; redis-rs's async default of
    /// 500 ms is replaced).
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The sleeps between attempts to take a lock another process holds:
    /// starting at `min` and doubling after each attempt up to `max`
    /// (default 1 ms to 100 ms), each random between half the step and
    /// the step, never past
    /// the end of the holder's lease. A release in this process wakes its
    /// waiters without a sleep.
    #[must_use]
    pub fn lock_retry(mut self, min: Duration, max: Duration) -> Self {
        self.retry_min = min.max(Duration::from_micros(100));
        self.retry_max = max.max(self.retry_min);
        self
    }

    /// How many idle connections the blocking flavour keeps for reuse
    /// (default [`DEFAULT_MAX_IDLE`]; more are opened when needed).
    #[must_use]
    pub fn max_idle_connections(mut self, n: usize) -> Self {
        self.max_idle = n;
        self
    }

    /// Draws envelope nonces from `source` instead of the operating system
    /// (for deterministic tests; never use a predictable source in
    /// production: XChaCha20's 24-byte nonces are safe to draw at random,
    /// not to repeat).
    #[must_use]
    pub fn nonce_source(mut self, source: impl Entropy + Send + 'static) -> Self {
        self.nonces = Nonces::Injected(Mutex::new(Box::new(source)));
        self
    }

    pub(super) fn effective_layout(&self) -> KeyLayout {
        self.layout.unwrap_or(match self.target {
            Target::Single(_) => KeyLayout::Plain,
            Target::Cluster(_) => KeyLayout::HashTagged,
        })
    }

    pub(super) fn effective_failover_wait(&self) -> Duration {
        self.failover_wait.unwrap_or(match self.target {
            Target::Single(_) => DEFAULT_FAILOVER_WAIT,
            Target::Cluster(_) => DEFAULT_CLUSTER_FAILOVER_WAIT,
        })
    }

    /// The key of attachment `id`'s record.
    #[must_use]
    pub fn record_key(&self, id: &str) -> String {
        keys::record(self.effective_layout(), &self.prefix, id)
    }

    /// The key of attachment `id`'s lock.
    #[must_use]
    pub fn lock_key(&self, id: &str) -> String {
        keys::lock(self.effective_layout(), &self.prefix, id)
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match &self.target {
            Target::Single(_) => "single server".to_owned(),
            Target::Cluster(seeds) => format!("cluster ({} seeds)", seeds.len()),
        };
        f.debug_struct("RedisConfig")
            .field("target", &target)
            .field("url", &"<redacted>")
            .field("tls_ca", &self.tls.ca_pem.is_some())
            .field("tls_client_cert", &self.tls.client.is_some())
            .field("layout", &self.effective_layout())
            .field("replica_acks", &self.replica_acks)
            .field("failover_wait", &self.effective_failover_wait())
            .field("keyring", &self.keyring)
            .field("nonces", &self.nonces)
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("lock_retry", &(self.retry_min, self.retry_max))
            .field("max_idle", &self.max_idle)
            .finish()
    }
}
