#!/usr/bin/env bash
# Convolutions and pools (issue "Convolutions at GEMM speed"), side by side in one
# command: tenjin (examples/conv_peers.rs) and PyTorch eager
# (bench/conv_peers.py) on the same cores, alternating for ROUNDS rounds;
# then a table of each round's ratios and their median.
#   bench/conv.sh 1      # one thread (taskset -c 0)
#   bench/conv.sh 2      # two threads
#   ROUNDS=5 bench/conv.sh 1
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
rounds=${ROUNDS:-3}
cores=$(seq -s, 0 $((threads - 1)))
PY=$(../shared/bench/setup.sh)
cargo build --release --example conv_peers >&2
out=$(mktemp)
for r in $(seq 1 "$rounds"); do
  TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/conv_peers | sed "s/^{/{\"round\": $r, /" >>"$out"
  env -u OPENBLAS_CORETYPE taskset -c "$cores" "$PY" bench/conv_peers.py "$threads" | sed "s/^{/{\"round\": $r, /" >>"$out"
done
"$PY" - "$out" "$threads" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
threads = sys.argv[2]
def get(system, workload):
    v = [(r["size"], r["median_ms"]) for r in rows if r["system"] == system and r["workload"] == workload]
    return [m for _, m in v], (v[0][0] if v else "")
def line(name, a, b, size):
    ra = [x / y for x, y in zip(a, b)]
    cells = " / ".join(f"{x:.2f}" for x in ra)
    print(f"| {name} | {size} | {threads} | {statistics.median(a):.2f} | {statistics.median(b):.2f} | {cells} | **{statistics.median(ra):.2f}** |")
print("| comparison | size | threads | tenjin ms | reference ms | ratio per round | median ratio |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for w in ("conv1d", "conv2d_s1", "conv2d_s2", "conv2d_depthwise", "max_pool2d", "avg_pool2d"):
    (a, size), (b, _) = get("tenjin", w), get("torch", w)
    line(f"{w} / PyTorch eager", a, b, size)
(a, size), (b, _) = get("tenjin", "conv2d_line"), get("tenjin", "conv2d_s1")
line("conv2d written as one line / conv2d op", a, b, size)
(a, size), (b, _) = get("tenjin", "conv2d_s1_winograd"), get("torch", "conv2d_s1")
line("conv2d, Winograd on (opt in) / PyTorch eager", a, b, size)
(a, size), (b, _) = get("tenjin", "conv2d_s1_winograd"), get("tenjin", "conv2d_s1")
line("conv2d, Winograd on / off", a, b, size)
PYEOF
