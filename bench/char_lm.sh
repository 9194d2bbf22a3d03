#!/usr/bin/env bash
# A training step of examples/char_lm.rs's model (two causal attention
# blocks, Adam), side by side in one command: tenjin (`char_lm
# --step-time`) and PyTorch eager, torch.compile and JAX
# (bench/char_lm_peers.py) on the same cores, one fixed batch each.
#   bench/char_lm.sh 1    # one thread (taskset -c 0)
#   bench/char_lm.sh 2    # two threads
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
cores=$(seq -s, 0 $((threads - 1)))
PY=$(../shared/bench/setup.sh)
cargo build --release --example char_lm >&2
out=$(mktemp)
TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/char_lm --step-time >>"$out"
vocab=$("$PY" -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["size"].split("vocab=")[1])' "$out")
(cd bench && taskset -c "$cores" "$PY" char_lm_peers.py "$threads" "$vocab") >>"$out"
"$PY" - "$out" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
t = next(r for r in rows if r["system"] == "tenjin")
print(f"{t['size']}, {t['threads']} thread(s)")
print("| system | step ms | tenjin / system |")
print("| --- | --- | --- |")
for r in rows:
    print(f"| {r['system']} | {r['median_ms']:.3f} | {t['median_ms'] / r['median_ms']:.2f} |")
PYEOF
