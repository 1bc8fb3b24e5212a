#!/usr/bin/env bash
# Runs the Python side of the benchmarks: creates bench/.venv (git-ignored)
# on first use, installs the pinned Python port into it, and times the same
# workloads on the same inputs as the Rust side (bench/data, made by
# `cargo run -p human-plus-bench --release --bin compare -- --gen-only`).
#
# Usage: bench/python/run.sh [--json]   (extra arguments go to bench.py)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench="$(dirname "$here")"
venv="$bench/.venv"
version="0.2.0"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('prism-ai-human-plus') != '$version')" 2>/dev/null; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "prism-ai-human-plus==$version" >&2
fi
exec "$venv/bin/python" "$here/bench.py" --data "$bench/data" "$@"
