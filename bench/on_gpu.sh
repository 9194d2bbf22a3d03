#!/usr/bin/env bash
# Everything a lent GPU machine checks and measures, in one run (issue
# "GPU speed"): the GPU machine has no Rust toolchain, so the binaries are
# built here with the `nccl` feature (which implies `cuda`) and carried in BIN:
#   bench/on_gpu.sh --build .gpubin     # here: build and copy the binaries
#   bench/on_gpu.sh .gpubin OUT         # there: run; logs and JSON lines in OUT
#   bench/on_gpu.sh .gpubin OUT tf32    # there: the speed runs only, TF32 GEMMs on both sides
#   bench/gpu.sh --table OUT/tenjin.jsonl OUT/torch.jsonl   # the table
# QUICK=1 (both when building and when running) fits a short lease: the
# simulated device's tests, the NCCL check and every workload but the GPT
# step on both sides (PyTorch eager, torch.compile, JAX); no profiles.
# DEADLINE=S gives PyTorch's step whatever is left of S seconds from the
# start, so that a lease's time limit cuts no step short.
# Each step has its own time limit and a failing step does not stop the
# ones after it; the exit status is the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --build ]; then
  bin=${2:?bench/on_gpu.sh --build DIR}
  set -e
  tests="gpu_sim sim_suite ptx fusion"
  [ -z "${QUICK:-}" ] || tests=gpu_sim
  . bench/gpu_build.sh
  gpu_build nccl "$bin" "gpu_peers train_mlp char_lm train_ddp" "$tests"
  exit 0
fi
bin=${1:?bench/on_gpu.sh BIN OUT}
out=${2:?bench/on_gpu.sh BIN OUT}
math=${3:-}   # "tf32": TF32 GEMMs on both sides, speed only
quick=${QUICK:-}
mkdir -p "$out"
failed=0
step() { # step LOG SECONDS COMMAND...: appends to OUT/LOG.log
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "== $*" >>"$out/$name.log"
  timeout "$limit" "$@" >"$out/$name.now" 2>&1
  local rc=$?
  cat "$out/$name.now" >>"$out/$name.log"
  echo "== $name ($*): exit $rc after $((SECONDS - t0)) s"
  tail -n 4 "$out/$name.now"
  rm -f "$out/$name.now"
  [ $rc -eq 0 ] || failed=$((failed + 1))
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
. bench/gpu_libs.sh
# Correctness first: the simulated device's tests and the suites run with
# every tensor on the device (op gradchecks, tape, higher order, nn/optim,
# memory, indexing, checkpoint), on the card.
[ -n "$math" ] || step checks 60 env TENJIN_GPU_TESTS=cuda "$bin/test_gpu_sim" --test-threads=1
[ -n "$math$quick" ] || step checks 30 env TENJIN_GPU_TESTS=cuda "$bin/test_fusion" --test-threads=1
[ -n "$math$quick" ] || step checks 300 env TENJIN_GPU_TESTS=cuda "$bin/test_sim_suite" --test-threads=1
[ -n "$math$quick" ] || step checks 20 "$bin/test_ptx" kernels_run_on_a_gpu
[ -n "$math$quick" ] || step checks 45 "$bin/train_mlp" --device cuda
# A world of one NCCL rank against the run alone, bit for bit (issue 31).
[ -n "$math" ] || step checks 90 "$bin/train_ddp" --nccl
# Speed: tenjin's workloads one process each, then PyTorch's.
: >"$out/tenjin.jsonl"
for w in mlp_step attention elementwise_forward elementwise_exp elementwise_value_grad softmax layer_norm conv2d; do
  step tenjin 45 "$bin/gpu_peers" --device cuda --only "$w" $math
done
[ -n "$quick" ] || step tenjin 120 "$bin/gpu_peers" --device cuda --only gpt_step $math
grep '^{' "$out/tenjin.log" >"$out/tenjin.jsonl"
# Where tenjin's time goes (per-kernel device times, between events).
[ -n "$math$quick" ] || step profile 150 env TENJIN_GPU_PROFILE=1 "$bin/gpu_peers" --device cuda \
  --only "${PROFILE:-elementwise_value_grad,softmax,layer_norm,conv2d,gpt_step}"
# PyTorch eager, torch.compile (every workload compiled: minutes) and JAX
# where it has a CUDA backend.
torch_limit=480
[ -z "${DEADLINE:-}" ] || torch_limit=$((DEADLINE - SECONDS))
[ "$torch_limit" -gt 0 ] || torch_limit=1 # `timeout 0` would wait for ever
step torch "$torch_limit" env PYTHONUNBUFFERED=1 python3 bench/gpu_peers.py $math ${quick:+--skip gpt_step,gpt_step_autocast}
grep '^{' "$out/torch.log" >"$out/torch.jsonl"
# Where PyTorch's time goes in the same GPT step.
[ -n "$math$quick" ] || step profile 60 python3 bench/gpu_torch_profile.py
exit $failed
