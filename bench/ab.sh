#!/usr/bin/env bash
# Before/after of a change, side by side in one command: the cheap-gradient
# table (examples/cheap_gradient.rs), the MLP step, attention and the first
# step (examples/staged_peers.rs) and the convolutions
# (examples/conv_peers.rs), built from BASE (a commit) and from the working
# tree, run alternately (base, head, base, head, ...) for ROUNDS rounds on
# the same core with THREADS threads, and the per-op overhead probe
# (examples/op_overhead.rs, copied into BASE when it has none). Prints, per
# workload, the median of each side and the median of the per-round ratios
# head/base.
#
#   bench/ab.sh e52e188            # ROUNDS=5 THREADS=1 by default
#   ROUNDS=7 THREADS=2 bench/ab.sh e52e188
#   EXAMPLES="conv_peers" bench/ab.sh e52e188   # some of the examples
#
# BASE `-` compares the working tree with itself under two environments,
# BASE_ENV and HEAD_ENV (`VAR=value ...`), built once: for instance the
# steady step on code that reads its sizes at run time against code with
# its sizes compiled in (issue 28):
#
#   HEAD_ENV=TENJIN_SHARED_CODE=always bench/ab.sh -
set -euo pipefail
BASE=${1:?usage: bench/ab.sh BASE_COMMIT}
ROUNDS=${ROUNDS:-5}
THREADS=${THREADS:-1}
read -r -a EXAMPLES <<<"${EXAMPLES:-cheap_gradient staged_peers conv_peers op_overhead}"
root=$(git rev-parse --show-toplevel)
cd "$root"

build() { # dir target-dir
  (cd "$1" && CARGO_TARGET_DIR="$2" cargo build --release -q $(printf -- '--example %s ' "${EXAMPLES[@]}"))
}
base_bin="$root/target/ab-base/release/examples"
if [ "$BASE" = - ]; then
  base_bin="$root/target/release/examples"
  echo "building the working tree ..." >&2
else
  base_dir="$root/target/ab-base-src"
  rm -rf "$base_dir"
  mkdir -p "$base_dir"
  git archive "$BASE" | tar -x -C "$base_dir"
  # A probe newer than BASE (it uses only the public API) is measured there too.
  for ex in "${EXAMPLES[@]}"; do
    [ -e "$base_dir/examples/$ex.rs" ] || cp "examples/$ex.rs" "$base_dir/examples/"
  done
  echo "building $BASE and the working tree ..." >&2
  build "$base_dir" "$root/target/ab-base"
fi
build "$root" "$root/target"
read -r -a base_env <<<"${BASE_ENV:-}"
read -r -a head_env <<<"${HEAD_ENV:-}"

cpus=0
if [ "$THREADS" -gt 1 ]; then cpus="0-$((THREADS - 1))"; fi
out=$(mktemp)
for r in $(seq 1 "$ROUNDS"); do
  for side in base head; do
    bin="$root/target/release/examples"
    side_env=("${head_env[@]}")
    if [ "$side" = base ]; then
      bin=$base_bin
      side_env=("${base_env[@]}")
    fi
    for ex in "${EXAMPLES[@]}"; do
      env "${side_env[@]}" TENJIN_NUM_THREADS="$THREADS" taskset -c "$cpus" "$bin/$ex" \
        | sed "s/^/$side $r $ex /" >>"$out"
    done
  done
  echo "round $r of $ROUNDS done" >&2
done

label=$BASE
[ "$BASE" = - ] && label="${BASE_ENV:-default}"
python3 - "$out" "$label" "$THREADS" "${HEAD_ENV:-working tree}" <<'EOF'
import json, statistics, sys
from collections import defaultdict
path, base, threads, head = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
times = defaultdict(lambda: defaultdict(dict))  # workload -> side -> round -> time
order, unit = [], {}
def put(w, side, r, t, u="ms"):
    if w not in order:
        order.append(w)
    times[w][side][r] = t
    unit[w] = u
for line in open(path):
    side, r, ex, rest = line.rstrip("\n").split(" ", 3)
    if rest.startswith("{"):
        d = json.loads(rest)
        for key, u in (("median_ms", "ms"), ("median_us", "µs")):
            if key in d:
                put(f"{d['workload']} ({d['size']})", side, r, d[key], u)
    elif rest.startswith("| ") and not rest.startswith("| function") and not rest.startswith("| ---"):
        cols = [c.strip() for c in rest.strip("|").split("|")]
        put(f"{cols[0]}: value", side, r, float(cols[1]))
        put(f"{cols[0]}: value + grad", side, r, float(cols[2]))
print(f"| workload | {base} | {head} | ratio per round | median ratio |")
print("| --- | --- | --- | --- | --- |")
for w in order:
    b, h = times[w]["base"], times[w]["head"]
    rounds = sorted(set(b) & set(h), key=int)
    ratios = [h[r] / b[r] for r in rounds]
    print(f"| {w} | {statistics.median(b.values()):.3f} {unit[w]} | {statistics.median(h.values()):.3f} {unit[w]} "
          f"| {' / '.join(f'{x:.2f}' for x in ratios)} | **{statistics.median(ratios):.2f}** |")
print(f"\n{len(rounds)} rounds, {threads} thread(s)")
EOF
rm -f "$out"
