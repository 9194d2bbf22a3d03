#!/usr/bin/env bash
# Element-wise f32 kernels at each vector width this host has (f32x4, the
# portable Cranelift code; avx2; avx512), one after the other on the same
# cores, then one table of ns per element and the speed-up over f32x4.
#   bench/vector_width.sh 1    # one thread
#   bench/vector_width.sh 2    # two threads
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
cores=$(seq -s, 0 $((threads - 1)))
cargo build --release --example vector_width >&2
out=$(mktemp)
for w in f32x4 avx2 avx512; do
  TENJIN_SIMD=$w TENJIN_NUM_THREADS=$threads taskset -c "$cores" \
    target/release/examples/vector_width >>"$out"
done
python3 - "$out" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
widths = []
for r in rows:
    if r["simd"] not in widths:
        widths.append(r["simd"])
t = {}
for r in rows:
    t.setdefault((r["kernel"], r["n"]), {})[r["simd"]] = r
order = []
for r in rows:
    if (r["kernel"], r["n"]) not in order:
        order.append((r["kernel"], r["n"]))
print("| kernel | n | threads | " + " | ".join(f"{w} ns/el" for w in widths)
      + " | " + " | ".join(f"f32x4 / {w}" for w in widths[1:]) + " | on the executor |")
print("|" + " --- |" * (4 + 2 * len(widths) - 1))
for key in order:
    c = t[key]
    base = c["f32x4"]["ns_per_element"]
    cells = " | ".join(f'{c[w]["ns_per_element"]:.3f}' if w in c else "—" for w in widths)
    ratios = " | ".join(f'{base / c[w]["ns_per_element"]:.2f}×' if w in c else "—" for w in widths[1:])
    wide = c[widths[-1]]["wide_loops"] > 0
    print(f"| {key[0]} | {key[1]} | {c['f32x4']['threads']} | {cells} | {ratios} | {'yes' if wide else 'no (f32x4)'} |")
PYEOF
