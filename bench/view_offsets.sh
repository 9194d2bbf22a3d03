#!/usr/bin/env bash
# Views at a new position every step (issue 28), side by side in one
# command: tenjin (examples/view_offsets.rs) and PyTorch eager
# (bench/view_offsets_peers.py) on the same cores, alternating for ROUNDS
# rounds; then a table of each round's ratios and their median, and what
# tenjin's later steps compiled.
#   bench/view_offsets.sh 1      # one thread (taskset -c 0)
#   ROUNDS=5 bench/view_offsets.sh 2
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
rounds=${ROUNDS:-3}
cores=$(seq -s, 0 $((threads - 1)))
PY=$(../shared/bench/setup.sh)
cargo build --release --example view_offsets >&2
out=$(mktemp)
for r in $(seq 1 "$rounds"); do
  TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/view_offsets | sed "s/^{/{\"round\": $r, /" >>"$out"
  taskset -c "$cores" "$PY" bench/view_offsets_peers.py "$threads" | sed "s/^{/{\"round\": $r, /" >>"$out"
done
"$PY" - "$out" "$threads" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
threads = sys.argv[2]
def get(system, workload):
    return [r for r in rows if r["system"] == system and r["workload"] == workload]
print("| workload | threads | tenjin ms | PyTorch eager ms | ratio per round | median ratio | tenjin's later steps: kernels compiled / derivations / plans built |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for w in ("walk", "walk_grad", "time_steps", "time_steps_grad", "chunk_attention", "narrow_cat", "embedding"):
    a, b = get("tenjin", w), get("torch", w)
    ra = [x["median_ms"] / y["median_ms"] for x, y in zip(a, b)]
    cells = " / ".join(f"{x:.2f}" for x in ra)
    last = a[-1]
    counts = f'{last["kernels_compiled"]} / {last["derivations"]} / {last["op_plans_built"]} over {last["later_steps"]} steps'
    print(f'| {w} | {threads} | {statistics.median(x["median_ms"] for x in a):.3f} | {statistics.median(y["median_ms"] for y in b):.3f} | {cells} | **{statistics.median(ra):.2f}** | {counts} |')
PYEOF
