#!/usr/bin/env bash
# GEMM against the core's FMA peak (issue "GEMM near the machine's peak"):
# the FMA-throughput loop of ../shared/bench/csrc/peak.c (AVX-512 and AVX2;
# f64's peak is half of f32's), then tenjin's GEMM on the shapes tenjin runs
# (examples/gemm_peak.rs: the square 1024³, MLP layers, weight gradients,
# a convolution's GEMM and its deep-K weight gradient, the Hessian's
# 1000×1000×2000, and the same Hessian written as the symmetric
# Σ_i x[i;a]·d[i]·x[i;b]) beside the `gemm` crate it replaced, at the
# widths this host has (TENJIN_SIMD: avx512, avx2, f32x4 = the portable
# kernel), on the same cores; then one table of GFLOP/s and % of peak.
#   bench/gemm_peak.sh 1          # one thread
#   bench/gemm_peak.sh 2          # two threads
#   WIDTHS=avx512 bench/gemm_peak.sh 1
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
cores=$(seq -s, 0 $((threads - 1)))
widths=${WIDTHS:-avx512 avx2 f32x4}
peak=$(mktemp -d)
gcc -O3 -march=native -fopenmp ../shared/bench/csrc/peak.c -o "$peak/peak"
cargo build --release --example gemm_peak >&2
out=$(mktemp)
for kind in fma512 fma256; do
  OMP_NUM_THREADS=$threads taskset -c "$cores" "$peak/peak" "$kind" "$threads" >>"$out" || true
done
for w in $widths; do
  TENJIN_SIMD=$w TENJIN_NUM_THREADS=$threads taskset -c "$cores" \
    target/release/examples/gemm_peak >>"$out"
done
grep -m1 "model name" /proc/cpuinfo | sed 's/.*: /cpu: /'
python3 - "$out" "$threads" <<'PYEOF'
import json, re, sys
peaks, rows = {}, []
for line in open(sys.argv[1]):
    m = re.match(r"(fma\d+) threads=\d+ median=([\d.]+)", line)
    if m:
        peaks[m.group(1)] = float(m.group(2))
    elif line.startswith("{"):
        rows.append(json.loads(line))
peak32 = max(peaks.values()) if peaks else float("nan")
print(f"FMA peak, {sys.argv[2]} thread(s): " + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in peaks.items())
      + f" (f32 peak {peak32:.1f}, f64 {peak32 / 2:.1f})")
print()
print("| shape | dtype | system | kernel | ms | GFLOP/s | % of peak |")
print("| --- | --- | --- | --- | --- | --- | --- |")
seen = set()
for r in rows:
    key = (r["shape"], r["dtype"], r["system"], r["kernel"])
    if key in seen:
        continue  # the gemm crate's line repeats at every width
    seen.add(key)
    p = peak32 if r["dtype"] == "f32" else peak32 / 2
    print(f"| {r['shape']} | {r['dtype']} | {r['system']} | {r['kernel']} | {r['median_ms']:.2f} | {r['gflops']:.1f} | {100 * r['gflops'] / p:.0f} % |")
PYEOF
