#!/usr/bin/env bash
# Side-by-side, in one run: tenjin (examples/peers.rs) against PyTorch eager
# and numpy (bench/peers.py) on the same cores, then a table of ratios.
#   bench/compare.sh 1    # one thread (taskset -c 0)
#   bench/compare.sh 2    # two threads
#   PEERS=1 bench/compare.sh 1   # peers.py's `peers` workloads instead, under
#                                # PyTorch eager, torch.compile and JAX
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
cores=$(seq -s, 0 $((threads - 1)))
PY=$(../shared/bench/setup.sh)
cargo build --release --example peers >&2
out=$(mktemp)
TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/peers >>"$out"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE taskset -c "$cores" "$PY" bench/peers.py "$threads" ${PEERS:+peers} >>"$out"
"$PY" - "$out" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["workload"], r["size"]), {})[r["system"]] = r["median_ms"]
t = rows[0]["threads"]
peers = ("torch", "torch_compile", "jax", "numpy")
print("| workload | size | threads | tenjin ms | torch ms | torch.compile ms | jax ms | numpy ms | tenjin / torch | tenjin / fastest peer |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
f = lambda x: "" if x is None else f"{x:.3f}"
for (w, s), v in by.items():
    tj = v.get("tenjin")
    got = [v[p] for p in peers if p in v]
    if tj is None or not got:
        continue
    to = v.get("torch")
    best = min(got)
    cells = " | ".join(f(v.get(p)) for p in peers)
    print(f"| {w} | {s} | {t} | {f(tj)} | {cells} | {'' if to is None else f'{tj / to:.2f}'} | {tj / best:.2f} |")
PYEOF
