//! Throughput of the attachment stores: get, put (compare-and-set) and
//! lock + release, for the Redis store's blocking and async (tokio)
//! flavours against a local Redis (`HUMAN_PLUS_REDIS_URL`, default
//! `redis://127.0.0.1:6379/`), beside the in-memory store.
//!
//! ```text
//! cargo bench -p human-plus-store --features redis,redis-tokio --bench redis
//! ```
//!
//! Each measurement is one operation on one attachment from one caller
//! (latency-bound: ops/s = 1 / latency); no assertion is made on timings.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use human_plus_core::{
    OwnerKey, Participant, SeededEntropy, SurfaceAttachment, SurfaceInvitation, SurfaceRevision,
};
use human_plus_store::{
    AsyncAttachmentStore, AsyncRedisAttachmentStore, AttachmentStore, InMemoryAttachmentStore,
    Keyring, RedisAttachmentStore, RedisConfig,
};

fn redis_url() -> String {
    std::env::var("HUMAN_PLUS_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned())
}

fn record(seed: u64) -> SurfaceAttachment {
    let inv = SurfaceInvitation::new(
        "https://relay.example",
        "demo_001",
        "bench-token-0123456789abcdef",
        "sheet:one",
        "Demo",
    )
    .unwrap();
    let mut r = SurfaceAttachment::mint(
        OwnerKey::of("owner:bench").unwrap(),
        inv,
        Participant::new("agent:bench", "Bench", "#000"),
        &mut SeededEntropy::new(seed),
    );
    r.record_revision(SurfaceRevision::observed("r1", "sheet_get_cell").unwrap());
    r
}

/// The next version of `r` (one revision later), and the generation the
/// store holds now.
fn bump(r: &mut SurfaceAttachment, n: &mut u64) -> u64 {
    let loaded = r.generation();
    *n += 1;
    r.record_revision(SurfaceRevision::observed(format!("r{n}"), "sheet_set_cell").unwrap());
    loaded
}

fn config(prefix: &str) -> RedisConfig {
    RedisConfig::new(redis_url(), Keyring::new("bench", [7u8; 32]).unwrap()).prefix(prefix)
}

fn stores(c: &mut Criterion) {
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed).unwrap();
    let prefix = format!("human-plus-bench:{}:", human_plus_core::hex(&seed));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let blocking = RedisAttachmentStore::open(config(&prefix))
        .expect("a Redis at HUMAN_PLUS_REDIS_URL (run .ci/redis)");
    let aio = rt
        .block_on(AsyncRedisAttachmentStore::connect(config(&prefix)))
        .unwrap();
    let memory = InMemoryAttachmentStore::new();

    let mut group = c.benchmark_group("get");
    group.throughput(Throughput::Elements(1));
    let r = record(1);
    blocking.put(&r, None).unwrap();
    AttachmentStore::put(&memory, &r, None).unwrap();
    group.bench_function("redis_blocking", |b| {
        b.iter(|| black_box(blocking.get(r.id()).unwrap()))
    });
    group.bench_function("redis_async_tokio", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(aio.get(r.id()).await.unwrap()) })
    });
    group.bench_function("in_memory", |b| {
        b.iter(|| black_box(AttachmentStore::get(&memory, r.id()).unwrap()))
    });
    group.finish();

    let mut group = c.benchmark_group("put_cas");
    group.throughput(Throughput::Elements(1));
    for (name, seed) in [
        ("redis_blocking", 2),
        ("redis_async_tokio", 3),
        ("in_memory", 4),
    ] {
        let mut r = record(seed);
        let mut n = 1;
        match name {
            "redis_blocking" => {
                blocking.put(&r, None).unwrap();
                group.bench_function(name, |b| {
                    b.iter(|| {
                        let loaded = bump(&mut r, &mut n);
                        blocking.put(&r, Some(loaded)).unwrap();
                    })
                });
            }
            "redis_async_tokio" => {
                rt.block_on(aio.put(&r, None)).unwrap();
                group.bench_function(name, |b| {
                    b.iter(|| {
                        let loaded = bump(&mut r, &mut n);
                        rt.block_on(aio.put(&r, Some(loaded))).unwrap();
                    })
                });
            }
            _ => {
                AttachmentStore::put(&memory, &r, None).unwrap();
                group.bench_function(name, |b| {
                    b.iter(|| {
                        let loaded = bump(&mut r, &mut n);
                        AttachmentStore::put(&memory, &r, Some(loaded)).unwrap();
                    })
                });
            }
        }
    }
    group.finish();

    let lease = Duration::from_secs(30);
    let mut group = c.benchmark_group("lock_release");
    group.throughput(Throughput::Elements(1));
    group.bench_function("redis_blocking", |b| {
        b.iter(|| {
            drop(
                blocking
                    .lock("bench-lock", lease, Duration::from_secs(5))
                    .unwrap(),
            )
        })
    });
    group.bench_function("redis_async_tokio", |b| {
        b.to_async(&rt).iter(|| async {
            AsyncAttachmentStore::lock(&aio, "bench-lock-async", lease)
                .await
                .unwrap()
                .release();
        })
    });
    group.bench_function("in_memory", |b| {
        b.iter(|| {
            drop(
                AttachmentStore::lock(&memory, "bench-lock", lease, Duration::from_secs(5))
                    .unwrap(),
            )
        })
    });
    group.finish();

    // Leave nothing behind.
    let mut raw = redis::Client::open(redis_url())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut raw)
        .unwrap();
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL").arg(keys).query(&mut raw).unwrap();
    }
}

fn short() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = short();
    targets = stores
}
criterion_main!(benches);
