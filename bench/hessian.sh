#!/usr/bin/env bash
# Hessians (issue "Higher-order derivatives"), side by side in one command:
# tenjin (examples/hessian_peers.rs) against jax.jit(jax.hessian) and
# torch.autograd.functional.hessian (bench/hessian_peers.py) on the same
# cores, alternating for ROUNDS rounds; then a table of each round's ratios
# and their median.
#   bench/hessian.sh 1      # one thread (taskset -c 0)
#   ROUNDS=5 bench/hessian.sh 1
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
rounds=${ROUNDS:-3}
cores=$(seq -s, 0 $((threads - 1)))
PY=$(../shared/bench/setup.sh)
cargo build --release --example hessian_peers >&2
out=$(mktemp)
for r in $(seq 1 "$rounds"); do
  TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/hessian_peers | sed "s/^{/{\"round\": $r, /" >>"$out"
  (cd bench && taskset -c "$cores" "$PY" hessian_peers.py "$threads") | sed "s/^{/{\"round\": $r, /" >>"$out"
done
"$PY" - "$out" "$threads" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
threads = sys.argv[2]
def get(system, workload):
    v = [(r["size"], r["median_ms"]) for r in rows if r["system"] == system and r["workload"] == workload]
    return [m for _, m in v], (v[0][0] if v else "")
print("| comparison | size | threads | tenjin ms | peer ms | ratio per round | median ratio |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for w in ("logreg_hessian", "mf_hessian", "logreg_jvp"):
    jvp = w.endswith("jvp")
    for peer, label in (("jax", "jax.jit(jax.jvp)" if jvp else "jax.jit(jax.hessian)"),
                        ("torch", "torch.func.jvp" if jvp else "torch.autograd.functional.hessian"),
                        ("torch_compile", "torch.compile(torch.func.jvp)" if jvp else "torch.compile(torch.func.hessian)")):
        if not get(peer, w)[0]:
            continue
        (a, size), (b, _) = get("tenjin", w), get(peer, w)
        ra = [x / y for x, y in zip(a, b)]
        cells = " / ".join(f"{x:.3f}" for x in ra)
        print(f"| {w} / {label} | {size} | {threads} | {statistics.median(a):.2f} | {statistics.median(b):.2f} | {cells} | **{statistics.median(ra):.3f}** |")
PYEOF
