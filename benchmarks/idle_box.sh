#!/usr/bin/env bash
# The latency benchmarks on an idle machine (issue 29 asks for idle-machine figures; the
# 2-core CI and dev boxes are loaded). Each benchmark runs its own baseline in the same run.
# Writes one log per benchmark under $OUT.
#
#   bash benchmarks/idle_box.sh            # hived importable, or a wheel folder .whl/ (make gpu-wheels)
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$(mktemp -d /tmp/hived-bench-out.XXXXXX)}
PY=${HIVED_BENCH_PYTHON:-python3}
mkdir -p "$OUT"
if ! "$PY" -c 'import hived.service.scheduler' 2>/dev/null; then
    SITE=$(mktemp -d /tmp/hived-bench-site.XXXXXX)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$REPO"/.whl/*.whl \
        || { echo "idle_box: hived is not importable and installing .whl/ failed" >&2; exit 2; }
    export PYTHONPATH="$SITE"
fi
export PYTHONUNBUFFERED=1
cd "$REPO"
{ nproc; uptime; "$PY" -V; } > "$OUT/machine.txt"
run() {   # name, seconds, command...
    local name=$1 limit=$2; shift 2
    echo "== $name ($(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg))"
    timeout "$limit" "$PY" "$@" > "$OUT/$name.log" 2>&1
    echo "   rc=$? $(tail -n 12 "$OUT/$name.log" | tr '\n' '|' | cut -c1-1500)"
}
run submit_start 90 benchmarks/bench_submit_start.py --n 60
run rest_20 75 benchmarks/bench_rest.py --launcher local --rate 20 --requests 200 --clients 20 --paced-only
run rest_100 90 benchmarks/bench_rest.py --launcher local --rate 100 --requests 1000 --paced-only
run flood 120 benchmarks/bench_flood.py --n 80
run refusal_cost 90 benchmarks/bench_flood.py --refusal-cost 2000
run store_update 60 benchmarks/bench_store_update.py
run sim 90 benchmarks/bench_sim.py --quick
