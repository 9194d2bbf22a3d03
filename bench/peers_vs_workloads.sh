#!/usr/bin/env bash
# tenjin (examples/peers.rs) against PyTorch eager, torch.compile and JAX
# jit (the shared reference script ../shared/bench/workloads.py) in one
# command on the same cores, then one table: the workloads both sides
# run at the same sizes (the MLP training step, the element-wise chain's
# value and gradient, the paper's function, conv1d, conv2d (stride 1,
# stride 2, depthwise), single-head attention, the embedding lookup, and
# with WORKLOADS=logreg,mf the full Hessians of the logistic regression and
# the matrix factorisation).
#   bench/peers_vs_workloads.sh 1    # one thread
#   bench/peers_vs_workloads.sh 2    # two threads
#   WORKLOADS=conv2d,attention bench/peers_vs_workloads.sh 1   # some of the
#                                    # reference script's workloads
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
cores=$(seq -s, 0 $((threads - 1)))
PY=$(../shared/bench/setup.sh)
workloads=${WORKLOADS:-mlp,urban,elementwise,conv,conv2d,attention,embedding}
cargo build --release --example peers --example conv_peers --example hessian_peers >&2
tj=$(mktemp)
out=$(mktemp)
TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/peers >"$tj"
if [[ ",$workloads," == *,conv2d,* ]]; then
  TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/conv_peers \
    conv2d_s1 conv2d_s2 conv2d_depthwise >>"$tj"
fi
if [[ ",$workloads," == *,logreg,* || ",$workloads," == *,mf,* ]]; then
  TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/hessian_peers >>"$tj"
fi
"$PY" ../shared/bench/workloads.py --threads "$threads" --systems torch,torch_compile,jax \
  --workloads "$workloads" --out "$out" --budget 3 --quiet-wait 5 >&2
"$PY" - "$tj" "$out" "$threads" <<'PYEOF'
import json, sys
tenjin = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peers = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
threads = sys.argv[3]
# tenjin's workload names where the reference script's differ.
alias = {"mlp_step": "mlp_train_step", "conv2d_s1": "conv2d_value_grad",
         "conv2d_s2": "conv2d_value_grad", "conv2d_depthwise": "conv2d_value_grad"}
ours = {(alias.get(r["workload"], r["workload"]), r["size"]): r["median_ms"] for r in tenjin}
theirs, firsts = {}, {}
for r in peers:
    if r.get("median_s") is not None:
        theirs.setdefault((r["workload"], r["size"]), {})[r["sys"]] = r["median_s"] * 1e3
    if r.get("first_s") is not None:
        firsts.setdefault((r["workload"], r["size"]), {})[r["sys"]] = r["first_s"] * 1e3
# tenjin's first step (a fresh process: plans, derivations, compilation)
# against each system's first call (tracing and compiling included).
first_alias = {"mlp_first_step": "mlp_train_step"}
our_firsts = {(first_alias[r["workload"]], r["size"]): r["median_ms"]
              for r in tenjin if r["workload"] in first_alias}
systems = ["torch", "torch_compile", "jax"]
print(f"| workload | size | threads | tenjin ms | " + " | ".join(f"{s} ms" for s in systems)
      + " | " + " | ".join(f"tenjin / {s}" for s in systems) + " |")
print("|" + " --- |" * (4 + 2 * len(systems)))
for key in sorted(ours.keys() & theirs.keys()):
    t, p = ours[key], theirs[key]
    times = " | ".join(f"{p[s]:.3f}" if s in p else "—" for s in systems)
    ratios = " | ".join(f"{t / p[s]:.2f}" if s in p else "—" for s in systems)
    print(f"| {key[0]} | {key[1]} | {threads} | {t:.3f} | {times} | {ratios} |")
print()
print("First call (ms):")
print()
print("| workload | size | threads | tenjin | " + " | ".join(systems) + " |")
print("|" + " --- |" * (4 + len(systems)))
for key in sorted(our_firsts.keys() & firsts.keys()):
    p = firsts[key]
    cells = " | ".join(f"{p[s]:.1f}" if s in p else "—" for s in systems)
    print(f"| {key[0]} | {key[1]} | {threads} | {our_firsts[key]:.1f} | {cells} |")
PYEOF
