#!/usr/bin/env bash
# Staged execution (issue 9), side by side in one command: tenjin
# (examples/staged_peers.rs) and PyTorch eager (bench/staged_peers.py) on the
# same cores, alternating for ROUNDS rounds; then a table of each round's
# ratios and their median.
#   bench/staged.sh 1      # one thread (taskset -c 0)
#   bench/staged.sh 2      # two threads
#   ROUNDS=5 bench/staged.sh 1
#   PEERS=1 bench/staged.sh 1   # torch.compile and JAX too
# The attention line is measured apart, in 2·ROUNDS+1 alternating pairs of
# short runs.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
rounds=${ROUNDS:-3}
cores=$(seq -s, 0 $((threads - 1)))
PY=$(../shared/bench/setup.sh)
cargo build --release --example staged_peers >&2
out=$(mktemp)
for r in $(seq 1 "$rounds"); do
  TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/staged_peers | sed "s/^{/{\"round\": $r, /" >>"$out"
  env -u OPENBLAS_CORETYPE taskset -c "$cores" "$PY" bench/staged_peers.py "$threads" ${PEERS:+peers} | sed "s/^{/{\"round\": $r, /" >>"$out"
done
# The attention line again, alone, alternating short runs of both systems
# (a few seconds each), so each pair sees the same machine.
grep -v -e '"attention_line", ' -e '"attention", ' "$out" >"$out.rest" && mv "$out.rest" "$out"
for r in $(seq 1 $((rounds * 2 + 1))); do
  TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/staged_peers attention >>"$out"
  env -u OPENBLAS_CORETYPE taskset -c "$cores" "$PY" bench/staged_peers.py "$threads" attention ${PEERS:+peers} >>"$out"
done
"$PY" - "$out" "$threads" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
threads = sys.argv[2]
def get(system, workload, size, key="median_ms"):
    v = [r[key] for r in rows if r["system"] == system and r["workload"] == workload and r["size"] == size and key in r]
    return v
def line(name, size, a, b, note=""):
    ra = [x / y for x, y in zip(a, b)]
    cells = " / ".join(f"{x:.2f}" for x in ra)
    print(f"| {name} | {size} | {threads} | {statistics.median(a):.3f} | {statistics.median(b):.3f} | {cells} | **{statistics.median(ra):.2f}** |{note}")
print("| comparison | size | threads | tenjin ms | reference ms | ratio per round | median ratio |")
print("| --- | --- | --- | --- | --- | --- | --- |")
peers = (("torch", "PyTorch eager"), ("torch_compile", "torch.compile"), ("jax", "JAX jit"))
for b in ("batch=64", "batch=256"):
    hand, lin = get("tenjin", "mlp_hand_step", b), get("tenjin", "mlp_linear_step", b)
    line("MLP step, hand-written / nn::Linear", b, hand, lin)
    for peer, label in peers:
        if get(peer, "mlp_step", b):
            line(f"MLP step, hand-written / {label}", b, hand, get(peer, "mlp_step", b))
first = get("tenjin", "mlp_hand_first_step", "batch=64")
print(f"\nhand-written MLP, first step (derive, plan, compile everything): {' / '.join(f'{x:.1f}' for x in first)} ms")
print()
for peer, label in peers:
    if get(peer, "attention", "N=512,E=64"):
        line(f"attention line / {label} (matmul, softmax)", "N=512,E=64", get("tenjin", "attention_line", "N=512,E=64"), get(peer, "attention", "N=512,E=64"))
print("\n| memory mode | workload | step ms (median over rounds) | peak in use | peak reserved | held after forward |")
print("| --- | --- | --- | --- | --- | --- |")
for w, size in (("mlp_hand", "batch=256"), ("attention_line", "N=512,E=64")):
    for mode in ("runtime", "memory"):
        name = f"{w}_{mode}_mode"
        ms = statistics.median(get("tenjin", name, size))
        use = statistics.median(get("tenjin", name, size, "peak_in_use_bytes"))
        res = statistics.median(get("tenjin", name, size, "peak_reserved_bytes"))
        held = statistics.median(get("tenjin", name, size, "held_after_forward_bytes"))
        print(f"| {mode}-efficient | {w} {size} | {ms:.3f} | {use / 2**20:.2f} MiB | {res / 2**20:.2f} MiB | {held / 2**20:.2f} MiB |")
PYEOF
