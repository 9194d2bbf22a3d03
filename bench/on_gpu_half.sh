#!/usr/bin/env bash
# Half precision on a lent GPU (issue "Half precision"), in one short run:
# the half tests on the card, the MLP trained under bf16 and f16 autocast,
# 4096³ products in f32, bf16 and f16 and the GPT step's products over bf16
# (tenjin's with and without half copies of their operands, then
# PyTorch's) at full f32 precision, 4096³ products with TF32, and the GPT
# step in f32 and under bf16 autocast (PyTorch eager's under
# torch.autocast), then the autocast step's kernels on both sides (device
# times: TENJIN_GPU_PROFILE=1 and torch.profiler, in OUT/profile.log). The GPU machine has no Rust
# toolchain: the binaries are built here and carried in BIN.
#   bench/on_gpu_half.sh --build .gpuh    # here
#   bench/on_gpu_half.sh .gpuh OUT        # there; JSON lines in OUT/*.jsonl
#   bench/gpu.sh --table OUT/tenjin.jsonl OUT/torch.jsonl
# The exit status is the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --build ]; then
  bin=${2:?bench/on_gpu_half.sh --build DIR}
  set -e
  . bench/gpu_build.sh
  gpu_build cuda "$bin" "gpu_peers train_mlp" "gpu_half half_vs_torch gpu_sim"
  exit 0
fi
bin=${1:?bench/on_gpu_half.sh BIN OUT}
out=${2:?bench/on_gpu_half.sh BIN OUT}
mkdir -p "$out"
failed=0
step() { # step LOG SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "== $*" >>"$out/$name.log"
  timeout "$limit" "$@" >>"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name ($*): exit $rc after $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || { failed=$((failed + 1)); tail -n 15 "$out/$name.log"; }
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
. bench/gpu_libs.sh
export TENJIN_GPU_TESTS=cuda
step checks 30 "$bin/test_gpu_half" --test-threads=1
step checks 30 "$bin/test_half_vs_torch" --test-threads=1
step checks 60 "$bin/test_gpu_sim" --test-threads=1
for half in bf16 f16; do step train 45 "$bin/train_mlp" --device cuda --autocast $half; done
step train 45 "$bin/train_mlp" --device cuda
step tenjin 60 "$bin/gpu_peers" --device cuda --only matmul,half_products
step never 60 "$bin/gpu_peers" --device cuda --only matmul,half_products half-copies=never
step torch 90 python3 bench/gpu_peers.py --only matmul,half_products --skip jax
step tenjin 60 "$bin/gpu_peers" --device cuda --only matmul tf32
step torch 90 python3 bench/gpu_peers.py tf32 --only matmul --skip jax
step tenjin 150 "$bin/gpu_peers" --device cuda --only gpt_step,gpt_step_autocast
step torch 90 python3 bench/gpu_peers.py --only gpt_step_autocast --skip jax
step profile 90 env TENJIN_GPU_PROFILE=1 "$bin/gpu_peers" --device cuda --only gpt_step_autocast
step profile 90 env PROFILE_AUTOCAST=1 python3 bench/gpu_torch_profile.py
grep -h '^{' "$out/tenjin.log" >"$out/tenjin.jsonl"
grep -h '^{' "$out/never.log" >"$out/never.jsonl"
grep -h '^{' "$out/torch.log" >"$out/torch.jsonl"
grep -h "accuracy\|loss" "$out/train.log" | tail -n 12
exit $failed
