#!/usr/bin/env bash
# Runs the benchmarks of BENCHMARKS.md in one go and prints the tables:
#   1-2. the core's costs in Rust and through the Python port (same inputs),
#   3.   end to end per runtime x receive leg beside the floor and the
#        keep-alive floor (and warm),
#   4.   1,000 attachments calling concurrently,
#   5.   10,000 warm attachments idle, then one more call each.
# Usage: bench/run.sh [compare options, e.g. --calls 400 --secs 20]
# The criterion benches (more detail on section 1) are separate:
#   cargo bench -p human-plus-bench --bench core
# and so are the round trips across a simulated link (about 3.5 minutes):
#   bench/link.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cargo build --release -p human-plus-bench --bin compare >&2
exec cargo run --quiet --release -p human-plus-bench --bin compare -- all --warm "$@"
