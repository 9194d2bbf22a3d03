#!/usr/bin/env bash
# GPU speed (issue "GPU speed"), side by side on one card in one command:
# tenjin (examples/gpu_peers.rs) and PyTorch CUDA eager / torch.compile
# (bench/gpu_peers.py), the same workloads at the same precision; then a
# table of medians and ratios, with the card and the driver.
#   bench/gpu.sh                 # full f32 (PyTorch's allow_tf32 flags set to False)
#   bench/gpu.sh tf32            # TF32 GEMMs on both sides
#   bench/gpu.sh --device sim    # smoke run: tenjin at tiny sizes on the simulated GPU (CI)
#   bench/gpu.sh --table FILE... # the table of JSON lines saved on the GPU machine
# On the GPU machine the Rust binary is built here and carried:
#   cargo build --release --features cuda --example gpu_peers  (then PY=python3 bench/gpu.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
device=cuda
extra=()
tables=()
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --table) shift; tables=("$@"); break ;;
    tf32) extra+=(tf32); shift ;;
    *) echo "bench/gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin=target/release/examples/gpu_peers
# Built here where cargo is (the GPU machine gets the binary carried).
build() { if command -v cargo >/dev/null; then cargo build --release "$@" --example gpu_peers >&2; fi; }
if [ "$device" = sim ]; then
  build
  exec "$bin" --device sim "${extra[@]}"
fi
PY=${PY:-python3}
if [ ${#tables[@]} -eq 0 ]; then
  build --features cuda
  out=$(mktemp)
  "$bin" --device cuda "${extra[@]}" >>"$out"
  "$PY" bench/gpu_peers.py "${extra[@]}" >>"$out"
  tables=("$out")
fi
"$PY" - "${tables[@]}" <<'PYEOF'
import json, sys
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.strip().startswith("{")]
card = next((r for r in rows if r["system"] == "card"), {})
print(f"card: {card.get('name')}, driver {card.get('driver')}, CUDA {card.get('cuda')}, torch {card.get('torch')}; "
      f"matmul.allow_tf32={card.get('matmul.allow_tf32')}, cudnn.allow_tf32={card.get('cudnn.allow_tf32')}")
copy = next((r for r in rows if r.get("workload") == "copy"), None)
if copy:
    print(f"device-to-device copy of 256 MB: {copy['gb_per_s']} GB/s")
print()
print("| workload | size | tenjin ms | peer | peer ms | tenjin / peer | tenjin GB/s (% of copy) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for t in (r for r in rows if r["system"] == "tenjin"):
    peers = [r for r in rows if r["system"] not in ("tenjin", "card") and r.get("workload") == t["workload"]
             and r["size"] == t["size"]]
    bw = ""
    if "bytes" in t and copy:
        gbs = t["bytes"] / t["median_ms"] / 1e6
        bw = f"{gbs:.0f} ({100 * gbs / copy['gb_per_s']:.0f}%)"
        # Faster than a copy of the same bytes: the kernel did not run
        # (a deferred result never read, say), or moved fewer bytes.
        if gbs > 1.05 * copy["gb_per_s"]:
            bw += " above the copy: not measured?"
    for p in peers or [{"system": "-", "median_ms": float("nan")}]:
        print(f"| {t['workload']} | {t['size']} | {t['median_ms']:.3f} | {p['system']} | {p['median_ms']:.3f} | "
              f"**{t['median_ms'] / p['median_ms']:.2f}** | {bw} |")
PYEOF
