//! A replica of a service on a shared Redis store, for the tests of what
//! happens when one dies, stalls or is stopped (`tests/replicas.rs`): one
//! runtime's manager over its own Redis store, as each replica of a
//! service has. The same type runs inside the test process and in the
//! `replica` worker binary (`src/bin/replica.rs`), which the tests start
//! as separate processes and kill (SIGKILL), stop (SIGSTOP) and terminate
//! (SIGTERM).
//!
//! Redis is named by its URLs (comma-separated for a cluster's nodes);
//! plain `redis://` only.

use std::time::Duration;

use human_plus_any::RuntimeKind;
use human_plus_core::{
    CallResult, EgressPolicy, Error, ManagerConfig, Participant, SurfaceAttachment,
    SurfaceInvitation, TransportConfig, TrustPolicy,
};
use human_plus_store::{AsyncRedisAttachmentStore, Keyring, RedisAttachmentStore, RedisConfig};
use serde_json::Value;

/// The owner every replica acts for.
pub const OWNER: &str = "session:replicas";

/// The value prefix whose `sheet_set_cell` reply the test surface loses
/// (see [`lose_held_replies`]): the call is applied, and its caller waits
/// for an answer that never comes, holding the attachment's lock.
pub const HELD: &str = "held:";

/// A surface rewrite that gives the reply to a `tools/call` whose
/// `arguments.value` starts with [`HELD`] an id nobody waits for: the page
/// applied the write, and the relay delivers its answer to nobody. Every
/// other reply is left alone.
#[must_use]
pub fn lose_held_replies() -> human_plus_relay::Rewrite {
    human_plus_relay::Rewrite::new(|method, params, mut reply| {
        let held = method == "tools/call"
            && params["arguments"]["value"]
                .as_str()
                .is_some_and(|v| v.starts_with(HELD));
        if held {
            reply["id"] = Value::String("lost-by-the-test-surface".to_owned());
        }
        reply
    })
}

/// How long a test replica's shutdown lets its calls in flight finish.
pub const REPLICA_GRACE: Duration = Duration::from_secs(1);

/// How a replica is set up.
#[derive(Debug, Clone)]
pub struct ReplicaSetup {
    /// Its runtime.
    pub kind: RuntimeKind,
    /// The local relay's port.
    pub port: u16,
    /// Redis: one URL, or a cluster's nodes comma-separated.
    pub redis: String,
    /// The store's key prefix.
    pub prefix: String,
    /// The record key, hex.
    pub key_hex: String,
    /// The lock lease.
    pub lease: Duration,
    /// The lock wait.
    pub lock_wait: Duration,
}

impl ReplicaSetup {
    /// The Redis store's configuration.
    ///
    /// # Panics
    /// When the key is not 32 bytes of hex.
    #[must_use]
    pub fn store_config(&self) -> RedisConfig {
        let keyring = Keyring::new("test", Keyring::key_from_hex(&self.key_hex).unwrap()).unwrap();
        let urls: Vec<String> = self.redis.split(',').map(str::to_owned).collect();
        let config = if urls.len() > 1 {
            RedisConfig::cluster(urls, keyring)
        } else {
            RedisConfig::new(urls[0].clone(), keyring)
        };
        config.prefix(self.prefix.as_str())
    }

    /// As JSON, for a replica process.
    #[must_use]
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "kind": self.kind.as_str(),
            "port": self.port,
            "redis": self.redis,
            "prefix": self.prefix,
            "key": self.key_hex,
            "lease_ms": u64::try_from(self.lease.as_millis()).unwrap(),
            "lock_wait_ms": u64::try_from(self.lock_wait.as_millis()).unwrap(),
        })
    }

    /// From [`ReplicaSetup::to_json`].
    ///
    /// # Panics
    /// When `v` is not such JSON.
    #[must_use]
    pub fn from_json(v: &Value) -> ReplicaSetup {
        let kind = match v["kind"].as_str().unwrap() {
            "tokio" => RuntimeKind::Tokio,
            "blocking" => RuntimeKind::Blocking,
            "async-std" => RuntimeKind::AsyncStd,
            other => panic!("unknown runtime {other}"),
        };
        ReplicaSetup {
            kind,
            port: u16::try_from(v["port"].as_u64().unwrap()).unwrap(),
            redis: v["redis"].as_str().unwrap().to_owned(),
            prefix: v["prefix"].as_str().unwrap().to_owned(),
            key_hex: v["key"].as_str().unwrap().to_owned(),
            lease: Duration::from_millis(v["lease_ms"].as_u64().unwrap()),
            lock_wait: Duration::from_millis(v["lock_wait_ms"].as_u64().unwrap()),
        }
    }
}

/// One replica: a runtime's manager over its own Redis store.
pub enum Replica {
    /// The blocking runtime.
    Blocking(human_plus_blocking::HumanPlus<RedisAttachmentStore>),
    /// tokio, on a runtime of its own.
    Tokio(
        tokio::runtime::Runtime,
        human_plus_tokio::HumanPlus<AsyncRedisAttachmentStore>,
    ),
    /// async-std's driver under async-io.
    AsyncStd(human_plus_async_std::HumanPlus<AsyncRedisAttachmentStore>),
}

/// The manager configuration of every replica: the local relay, the
/// sheet's read and write tools.
#[must_use]
pub fn manager_config(port: u16) -> ManagerConfig {
    ManagerConfig::new(
        EgressPolicy::new(["127.0.0.1"])
            .allow_ports([port])
            .allow_unverified_egress(true),
        TrustPolicy::allowing(
            ["sheet_get_cell", "sheet_set_cell"],
            human_plus_core::NO_PINS,
        ),
    )
    .transport(TransportConfig::default().receive_leg(human_plus_core::ReceiveLeg::Sse))
}

impl Replica {
    /// Builds the replica `setup` describes (connecting its store).
    ///
    /// # Panics
    /// When the store cannot connect or the manager cannot be built.
    #[must_use]
    pub fn new(setup: &ReplicaSetup) -> Replica {
        let config = manager_config(setup.port);
        match setup.kind {
            RuntimeKind::Blocking => {
                let store = RedisAttachmentStore::open(setup.store_config()).unwrap();
                Replica::Blocking(
                    human_plus_blocking::HumanPlus::builder(config)
                        .store(store)
                        .lock_lease(setup.lease)
                        .lock_wait(setup.lock_wait)
                        .shutdown_grace(REPLICA_GRACE)
                        .build()
                        .unwrap(),
                )
            }
            RuntimeKind::Tokio => {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap();
                let store = rt
                    .block_on(AsyncRedisAttachmentStore::connect(setup.store_config()))
                    .unwrap();
                let hp = human_plus_tokio::HumanPlus::builder(config)
                    .store(store)
                    .lock_lease(setup.lease)
                    .lock_wait(setup.lock_wait)
                    .shutdown_grace(REPLICA_GRACE)
                    .build()
                    .unwrap();
                Replica::Tokio(rt, hp)
            }
            RuntimeKind::AsyncStd => {
                let store =
                    async_io::block_on(AsyncRedisAttachmentStore::connect(setup.store_config()))
                        .unwrap();
                Replica::AsyncStd(
                    human_plus_async_std::HumanPlus::builder(config)
                        .store(store)
                        .lock_lease(setup.lease)
                        .lock_wait(setup.lock_wait)
                        .shutdown_grace(REPLICA_GRACE)
                        .build()
                        .unwrap(),
                )
            }
        }
    }

    /// Attaches to `invitation`.
    ///
    /// # Errors
    /// The manager's.
    pub fn attach(&self, invitation: SurfaceInvitation) -> Result<SurfaceAttachment, Error> {
        let p = Participant::new("agent:replica", "Replica", "#7c3aed");
        match self {
            Replica::Blocking(hp) => hp.attach(OWNER, invitation, p),
            Replica::Tokio(rt, hp) => rt.block_on(hp.attach(OWNER, invitation, p)),
            Replica::AsyncStd(hp) => async_io::block_on(hp.attach(OWNER, invitation, p)),
        }
    }

    /// Calls `tool`.
    ///
    /// # Errors
    /// The manager's.
    pub fn call(&self, id: &str, tool: &str, args: Value) -> Result<CallResult, Error> {
        match self {
            Replica::Blocking(hp) => hp.call(OWNER, id, tool, args),
            Replica::Tokio(rt, hp) => rt.block_on(hp.call(OWNER, id, tool, args)),
            Replica::AsyncStd(hp) => async_io::block_on(hp.call(OWNER, id, tool, args)),
        }
    }

    /// Calls `tool`, its exchange bounded by `timeout`.
    ///
    /// # Errors
    /// The manager's.
    pub fn call_with_timeout(
        &self,
        id: &str,
        tool: &str,
        args: Value,
        timeout: Duration,
    ) -> Result<CallResult, Error> {
        match self {
            Replica::Blocking(hp) => hp.call_with_timeout(OWNER, id, tool, args, timeout),
            Replica::Tokio(rt, hp) => {
                rt.block_on(hp.call_with_timeout(OWNER, id, tool, args, timeout))
            }
            Replica::AsyncStd(hp) => {
                async_io::block_on(hp.call_with_timeout(OWNER, id, tool, args, timeout))
            }
        }
    }

    /// Shuts the manager down.
    pub fn shutdown(&self) {
        match self {
            Replica::Blocking(hp) => hp.shutdown(),
            Replica::Tokio(rt, hp) => rt.block_on(hp.shutdown()),
            Replica::AsyncStd(hp) => async_io::block_on(hp.shutdown()),
        }
    }
}
