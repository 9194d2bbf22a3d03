#!/usr/bin/env bash
# Side-by-side, in one run: tenjin (examples/peers.rs) against PyTorch eager
# and numpy (bench/peers.py) on the same cores, then a table of ratios.
#   bench/compare.sh 1    # one thread (taskset -c 0)
#   bench/compare.sh 2    # two threads
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
cores=$(seq -s, 0 $((threads - 1)))
PY=$(../shared/bench/setup.sh)
cargo build --release --example peers >&2
out=$(mktemp)
TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/peers >>"$out"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE taskset -c "$cores" "$PY" bench/peers.py "$threads" >>"$out"
"$PY" - "$out" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["workload"], r["size"]), {})[r["system"]] = r["median_ms"]
t = rows[0]["threads"]
print(f"| workload | size | threads | tenjin ms | torch ms | numpy ms | tenjin / torch | tenjin / numpy |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for (w, s), v in by.items():
    tj, to, npy = v.get("tenjin"), v.get("torch"), v.get("numpy")
    f = lambda x: "" if x is None else f"{x:.3f}"
    ratio = lambda a, b: "" if a is None or b is None else f"{a / b:.2f}"
    print(f"| {w} | {s} | {t} | {f(tj)} | {f(to)} | {f(npy)} | {ratio(tj, to)} | {ratio(tj, npy)} |")
PYEOF
