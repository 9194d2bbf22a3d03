#!/usr/bin/env bash
# Process peak RSS of the MLP training step (784-512-512-10, batch 256,
# f32, SGD, softmax cross-entropy): tenjin in runtime-efficient mode,
# tenjin in memory-efficient mode, PyTorch eager, torch.compile and JAX
# jit, each in its own process
# under /usr/bin/time -v, in one run.
#
# Usage: bench/memory_rss.sh [STEPS] [THREADS]   (from the repository root;
# defaults 50 steps, 1 thread: torch's OpenMP threads stall on a busy machine)
set -euo pipefail
steps=${1:-50}
threads=${2:-1}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build -q --release --example memory_modes 2>/dev/null || cargo build --release --example memory_modes
bin="$CARGO_TARGET_DIR/release/examples/memory_modes"
PY=${PY:-$(../shared/bench/setup.sh)}
run() {
  local name=$1
  shift
  local log
  log=$(mktemp)
  /usr/bin/time -v "$@" >"$log.out" 2>"$log"
  grep -E "Efficient |torch|JAX|VmHWM|before training" "$log.out" | sed "s/^/  [$name] /"
  printf '%-28s max RSS %8s kB, elapsed %s\n' "$name" \
    "$(grep 'Maximum resident set size' "$log" | awk '{print $NF}')" \
    "$(grep 'Elapsed (wall clock)' "$log" | awk '{print $NF}')"
  rm -f "$log" "$log.out"
}
run "tenjin runtime-efficient" env TENJIN_NUM_THREADS="$threads" "$bin" runtime "$steps"
run "tenjin memory-efficient" env TENJIN_NUM_THREADS="$threads" "$bin" memory "$steps"
for sys in eager compile jax; do
  run "peer: $sys" env OMP_NUM_THREADS="$threads" taskset -c "$(seq -s, 0 $((threads - 1)))" \
    "$PY" bench/mlp_step_torch.py "$steps" "$threads" "$sys"
done
