#!/usr/bin/env bash
# The MLP training step of tenjin (examples/peers.rs) and of the shared
# reference script (../shared/bench/workloads.py: PyTorch eager and JAX jit)
# in one command, on the same cores.
#   bench/mlp_vs_workloads.sh 2    # two threads
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
cores=$(seq -s, 0 $((threads - 1)))
PY=$(../shared/bench/setup.sh)
cargo build --release --example peers >&2
TENJIN_NUM_THREADS=$threads taskset -c "$cores" target/release/examples/peers | grep mlp
out=$(mktemp)
"$PY" ../shared/bench/workloads.py --threads "$threads" --systems torch,jax --workloads mlp \
  --out "$out" --budget 4 --quiet-wait 5 | grep mlp_train_step
