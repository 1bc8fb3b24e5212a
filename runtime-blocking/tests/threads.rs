//! Request threads do not outlive their usefulness: a cancelled SSE reader
//! (after a reply, or after a silent page's timeout) stops long before the
//! request's own deadline, and its pooled thread ends after its 5 s idle
//! wait. One test in its own binary, so no other test's threads are
//! counted.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use human_plus_blocking::{Error, ReceiveLeg};
use human_plus_relay::Faults;
use serde_json::json;

/// The request threads alive in this process (Linux: thread names are in
/// `/proc/self/task/*/comm`, cut to 15 bytes).
fn request_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|name| name.starts_with("human-plus-"))
        .count()
}

/// How long until no request thread is left, polling up to `limit`.
fn linger(limit: Duration) -> Duration {
    let start = Instant::now();
    while request_threads() > 0 && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(5));
    }
    start.elapsed()
}

#[test]
fn cancelled_sse_readers_exit_long_before_their_deadline() {
    if std::fs::read_dir("/proc/self/task").is_err() {
        return; // not Linux: nothing to observe
    }
    let world = World::http("threads");
    // A minute-long exchange timeout: a reader waiting for its deadline
    // would linger that long.
    // One leg per operation: a kept leg's reader stays by design (closed
    // idle, at the bound or at shutdown).
    let mut config = world.config(&ReceiveLeg::Sse, Duration::from_secs(60));
    config.transport.warm = false;
    let hp = world.manager_with(config);
    let a = hp.attach(OWNER, world.invitation(), participant()).unwrap();
    hp.call(OWNER, a.id(), "sheet_get_cell", json!({"address": "A1"}))
        .unwrap();
    let after_reply = linger(Duration::from_secs(30));
    println!("SSE reader threads gone {after_reply:?} after the reply");
    assert_eq!(request_threads(), 0);
    assert!(after_reply < Duration::from_secs(20), "{after_reply:?}");

    // A silent page: the exchange times out and its stream is cancelled.
    world.set_faults(Faults::new().drop_replies());
    let mut config = world.config(&ReceiveLeg::Sse, Duration::from_secs(2));
    config.transport.warm = false;
    let quick = world.manager_with(config);
    let b = quick
        .attach(OWNER, world.invitation(), participant())
        .unwrap();
    assert_eq!(quick.tools(OWNER, b.id()).unwrap_err(), Error::Timeout);
    let after_timeout = linger(Duration::from_secs(30));
    println!("SSE reader threads gone {after_timeout:?} after the exchange timed out");
    assert_eq!(request_threads(), 0);
    assert!(after_timeout < Duration::from_secs(20), "{after_timeout:?}");
}
