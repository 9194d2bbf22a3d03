#!/usr/bin/env bash
# A change against a base revision on a lent GPU (issue "GPU speed"), in one
# short call: the simulated device's tests on the card, then the workloads
# of both builds alternated, then the new build's per-kernel profile.
#   bench/on_gpu_ab.sh --build BASE_REV DIR   # here: both gpu_peers, the tests
#   bench/on_gpu_ab.sh DIR OUT [WORKLOADS]     # there (default: gpt_step)
# The GPU machine has no Rust toolchain: the base revision is built here
# from `git archive` (target/gpu-ab-src), with the `nccl` feature as
# on_gpu.sh.
# DIR is carried compressed when large: `tar cf - -C DIR . | xz > DIR.txz`
# and the run unpacks DIR.txz when DIR is absent.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --build ]; then
  base=${2:?bench/on_gpu_ab.sh --build BASE_REV DIR}
  bin=${3:?bench/on_gpu_ab.sh --build BASE_REV DIR}
  set -e
  . bench/gpu_build.sh
  gpu_build nccl "$bin" gpu_peers gpu_sim
  # The base's source from git (as bench/ab.sh), built into bench/ab.sh's
  # target directory (its dependencies are shared).
  src=target/gpu-ab-src
  rm -rf "$src" && mkdir -p "$src"
  git archive "$base" | tar -x -C "$src"
  (cd "$src" && CARGO_TARGET_DIR=../ab-base cargo build --release --features nccl --example gpu_peers)
  cp target/ab-base/release/examples/gpu_peers "$bin/gpu_peers_base"
  strip "$bin/gpu_peers_base"
  du -sh "$bin"
  exit 0
fi
bin=${1:?bench/on_gpu_ab.sh DIR OUT}
out=${2:?bench/on_gpu_ab.sh DIR OUT}
workloads=${3:-gpt_step}
if [ ! -d "$bin" ] && [ -f "$bin.txz" ]; then
  mkdir -p "$bin" && tar xJf "$bin.txz" -C "$bin"
fi
mkdir -p "$out" /tmp/ab-tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. bench/gpu_libs.sh
# The simulated device's tests on the card, a process per test (the file's
# tests read process-wide counters), 14 at a time.
t0=$SECONDS
"$bin/test_gpu_sim" --list --format=terse 2>/dev/null | sed -n 's/: test$//p' >/tmp/ab-tests/all
TENJIN_GPU_TESTS=cuda xargs -P 14 -L 1 sh -c 'timeout 120 '"$bin"'/test_gpu_sim --exact "$0" --test-threads=1 >"/tmp/ab-tests/$0.log" 2>&1 || { echo "FAILED $0"; tail -n 25 "/tmp/ab-tests/$0.log"; }' \
  </tmp/ab-tests/all | tee "$out/failed.txt"
echo "gpu_sim on the card: $(wc -l </tmp/ab-tests/all) tests, $(grep -c '^FAILED' "$out/failed.txt") failed, $((SECONDS - t0)) s"
# Both builds, alternated twice.
for round in 1 2; do
  for b in gpu_peers_base gpu_peers; do
    timeout 120 "$bin/$b" --device cuda --only "$workloads" 2>&1 | grep '^{' | sed "s/^{/{\"build\": \"$b\", \"round\": $round, /"
  done
done | tee "$out/ab.jsonl"
TENJIN_GPU_PROFILE=1 timeout 120 "$bin/gpu_peers" --device cuda --only "$workloads" >"$out/profile.log" 2>&1
echo "all took $SECONDS s"
