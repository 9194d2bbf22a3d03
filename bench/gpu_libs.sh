# Sourced by the device scripts (bench/on_gpu.sh, bench/on_gpu_half.sh):
# puts cuBLAS, cuBLASLt and NCCL on LD_LIBRARY_PATH under the names cudarc
# opens, and says which files they are.
# cudarc opens cuBLAS by the names of CUDA <= 12 (libcublas.so, .so.12, ...):
# a CUDA 13 machine's libcublas.so.13 is linked under the plain name.
libs=$(mktemp -d)
for name in cublas cublasLt nccl; do
  f=$(ldconfig -p | grep -o "/[^ ]*/lib$name\.so[.0-9]*$" | sort -V | tail -n 1)
  [ -n "$f" ] || f=$(find /usr /opt -name "lib$name.so*" 2>/dev/null | sort -V | tail -n 1)
  # NCCL often comes only inside PyTorch's wheels (nvidia/nccl/lib).
  [ -n "$f" ] || f=$(python3 -c "import nvidia.nccl, os; d = os.path.join(list(nvidia.nccl.__path__)[0], 'lib'); print(os.path.join(d, sorted(os.listdir(d))[-1]))" 2>/dev/null)
  echo "lib$name: ${f:-not found}"
  [ -z "$f" ] || ln -sf "$f" "$libs/lib$name.so"
done
export LD_LIBRARY_PATH=$libs:${LD_LIBRARY_PATH:-}
