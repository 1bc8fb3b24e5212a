#!/usr/bin/env bash
# Round trips across a simulated link (BENCHMARKS.md, "Round trips across a
# link"): builds the release `human-plus` command and the `compare` binary,
# then runs
#   compare link [--rtt-ms 40] [--calls 30] [--turns 5]
#                [--path plain|production|both] [--runtime LIST]
#                [--transport LIST] [--cli-arg ARG]...
# About 3 minutes at the defaults once built (RTT-bound, not CPU-bound).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cargo build --release -p human-plus-cli -p human-plus-bench --bin human-plus --bin compare >&2
exec "${CARGO_TARGET_DIR:-$root/target}/release/compare" link "$@"
