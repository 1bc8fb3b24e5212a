//! Benchmarks of Human+ against the floor and the Python port.
//!
//! * [`data`]: the inputs, generated once into `bench/data/` and read by the
//!   Rust and the Python benchmarks alike;
//! * [`workloads`]: the core workloads (criterion benches in
//!   `benches/core.rs`, and the `compare` binary's side-by-side table);
//! * [`net`]: the relay and demo surfaces in a child process, the three
//!   runtimes' managers, and the floor (a bare hyper client);
//! * [`scale`]: 1,000 attachments calling concurrently (the blocking run
//!   also over a Redis store: the queue worker);
//! * [`queue`]: the queue worker as worker processes on one Redis, with a
//!   worker killed mid-run, and what lease renewal adds to a long call;
//! * [`redis_server`]: a throwaway `redis-server` on a free loopback port;
//! * [`service`]: the example service's shape (two replicas, one Redis,
//!   pages called concurrently), kept legs beside cold ones and the
//!   keep-alive floor (issue 43);
//! * [`heap`]: a global allocator that counts the heap each part of a
//!   benchmark holds (the replicas of `compare service`, apart from the
//!   relay and the pages in the same process);
//! * [`idle`]: 10,000 warm attachments idle in one process, then calling
//!   once each;
//! * [`timing`]: the harness the `compare` binary and `bench.py` share;
//! * [`link`]: a simulated network link (one round trip per new
//!   connection, half a round trip per chunk per direction);
//! * [`proxy`]: a small HTTP CONNECT egress proxy;
//! * [`kept`]: the keep-alive floor (one open leg, kept connections);
//! * [`across`]: the `human-plus` command across the link, in round trips.
//!
//! Run everything with `bench/run.sh`; see `BENCHMARKS.md`.
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

pub mod across;
pub mod channel;
pub mod data;
pub mod decisions;
pub mod heap;
pub mod idle;
pub mod kept;
pub mod link;
pub mod net;
pub mod proxy;
pub mod queue;
pub mod redis_server;
pub mod scale;
pub mod service;
pub mod timing;
pub mod workloads;
