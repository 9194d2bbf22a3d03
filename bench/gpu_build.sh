# Sourced by the device scripts' `--build` (bench/on_gpu.sh,
# bench/on_gpu_half.sh): the GPU machine has no Rust toolchain, so
# `gpu_build FEATURES BIN "EXAMPLES" "TESTS"` builds the examples and the
# test binaries here with FEATURES, copies them into BIN (tests as
# test_NAME), strips them and says how large BIN is.
gpu_build() {
  local features=$1 bin=$2 examples=$3 tests=$4 e t exe
  mkdir -p "$bin"
  cargo build --release --features "$features" $(for e in $examples; do printf -- '--example %s ' "$e"; done)
  for e in $examples; do cp "target/release/examples/$e" "$bin/"; done
  for t in $tests; do
    exe=$(cargo test --release --features "$features" --test "$t" --no-run --message-format=json 2>/dev/null \
      | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])')
    cp "$exe" "$bin/test_$t"
  done
  strip "$bin"/* 2>/dev/null || true
  du -sh "$bin"
}
