//! Criterion benches of the core's hot paths, on the inputs of
//! `bench/data` (generated on first use). The `compare` binary times the
//! same workloads beside the Python port; these give criterion's detail.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use human_plus_bench::{data, workloads as w};
use human_plus_core::SeededEntropy;

fn benches(c: &mut Criterion) {
    let inputs = data::load(&data::default_dir()).unwrap();

    let mut g = c.benchmark_group("sse");
    g.throughput(Throughput::Bytes(inputs.sse.len() as u64));
    for chunk in [8192usize, 65_536] {
        g.bench_function(format!("decode/{}k", chunk / 1024), |b| {
            b.iter(|| w::sse_decode(black_box(&inputs.sse), chunk));
        });
        g.bench_function(format!("receive/{}k", chunk / 1024), |b| {
            b.iter(|| w::sse_receive(black_box(&inputs.sse), chunk));
        });
    }
    g.finish();

    let mut g = c.benchmark_group("tools");
    g.bench_function("admit_200", |b| {
        b.iter(|| w::admit(black_box(&inputs.tools), &inputs.policy))
    });
    g.bench_function("admit_200_bytes", |b| {
        b.iter(|| w::admit_bytes(black_box(&inputs.tools_bytes), &inputs.policy));
    });
    g.bench_function("digest_200", |b| {
        b.iter(|| w::digest_all(black_box(&inputs.tools)))
    });
    g.finish();

    let mut g = c.benchmark_group("changes");
    g.bench_function("read_from_1000", |b| {
        b.iter(|| w::read_changes(black_box(&inputs.changes)))
    });
    g.bench_function("read_from_1000_bytes", |b| {
        b.iter(|| w::read_changes_bytes(black_box(&inputs.changes_bytes)));
    });
    g.bench_function("read_from_1000_bytes_value", |b| {
        b.iter(|| w::read_changes_bytes_value(black_box(&inputs.changes_bytes)));
    });
    g.finish();

    let mut g = c.benchmark_group("frame");
    g.throughput(Throughput::Bytes(inputs.result.len() as u64));
    let mut entropy = SeededEntropy::new(7);
    g.bench_function("frame_64k", |b| {
        b.iter(|| w::frame(black_box(&inputs.result), &mut entropy))
    });
    g.bench_function("copy_string_64k", |b| {
        b.iter(|| w::copy_string(black_box(&inputs.result)))
    });
    g.bench_function("copy_vec_64k", |b| {
        b.iter(|| w::copy_bytes(black_box(&inputs.result)))
    });
    g.finish();

    let mut g = c.benchmark_group("jsonrpc");
    g.bench_function("encode_call", |b| {
        b.iter(|| w::encode(black_box(&inputs.request_id), &inputs.call_params));
    });
    g.bench_function("correlate_noisy_64", |b| {
        b.iter(|| w::correlate_noisy(black_box(&inputs.noisy)))
    });
    g.finish();
}

criterion_group!(core, benches);
criterion_main!(core);
