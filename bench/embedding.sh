#!/usr/bin/env bash
# Embedding forward + backward (issue 12), side by side in one command:
# tenjin (examples/embedding_peers.rs) and PyTorch eager
# (bench/embedding_peers.py) on the same cores, alternating for ROUNDS
# rounds; then each round's ratio and their median.
#   bench/embedding.sh 1      # one thread (taskset -c 0)
#   bench/embedding.sh 2      # two threads
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
rounds=${ROUNDS:-5}
cores=$(seq -s, 0 $((threads - 1)))
PY=$(../shared/bench/setup.sh)
cargo build --release --example embedding_peers >&2
out=$(mktemp)
for r in $(seq 1 "$rounds"); do
  TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/embedding_peers | sed "s/^{/{\"round\": $r, /" >>"$out"
  taskset -c "$cores" "$PY" bench/embedding_peers.py "$threads" | sed "s/^{/{\"round\": $r, /" >>"$out"
done
"$PY" - "$out" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["round"], {})[r["system"]] = r["median_ms"]
print("| round | threads | tenjin ms | torch ms | tenjin / torch |")
print("| --- | --- | --- | --- | --- |")
ratios = []
for k, v in sorted(by.items()):
    ratios.append(v["tenjin"] / v["torch"])
    print(f"| {k} | {rows[0]['threads']} | {v['tenjin']:.3f} | {v['torch']:.3f} | {ratios[-1]:.2f} |")
print(f"| median | | | | {statistics.median(ratios):.2f} |")
PYEOF
