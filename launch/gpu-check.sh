#!/usr/bin/env bash
# The GPU check (issue 12), for a machine with an NVIDIA GPU such as the device tool's H200: every
# GPU test (the CUDA backend against the CPU backend; --device cuda end to end where mpirun is
# there) and `bench layer --device cuda` at Mixtral sizes (the layer against a cuBLAS dense matmul
# of equal FLOPs), in under 8 minutes. Results: gpu-check.txt and layer-cuda.json in $OUT (or
# build/gpu-check).
#
# usage:
#   launch/gpu-check.sh                  build here (the Debian packages of launch/deps.sh), then check
#   launch/gpu-check.sh --bundle DIR     on the CPU machine, after a build: pack the binaries and the
#                                        libraries they load, except CUDA's, into DIR/gpu-bundle.tar.xz
#   launch/gpu-check.sh --from DIR       check from such a bundle (a GPU machine without the packages)
#
# With the device tool: launch/gpu-check.sh --bundle .gpu-bundle here (.gpu-bundle is git-ignored),
# then run `launch/gpu-check.sh --from .gpu-bundle` there with carry [".gpu-bundle"].
# Environment: MOERUN_GPU_CHECK_STEPS=reference runs the transformers 5.x reference alone;
# MOERUN_REFERENCE_ARGS="FAMILY,... SEED" passes a subset and another seed to it.
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
BINARIES=(launch/moerun launch/libmoerun_cuda.so tests/test_cuda_backend tests/test_nccl)
# Open MPI's runtime as Debian ships it (mpirun, its plugins and help files), for a GPU machine
# without it: unpacked into a private root there and relocated with OPAL_PREFIX.
MPI_PACKAGES=(openmpi-bin libopenmpi3 openmpi-common libpmix2 libucx0 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7
              libfabric1 libpsm2-2 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200)

if [ "${1:-}" = --bundle ]; then
  dir=${2:?--bundle DIR}
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/bin" "$stage/lib" "$dir"
  for b in "${BINARIES[@]}"; do
    [ -e "$BUILD/$b" ] || { echo "gpu-check: $BUILD/$b missing: build with CUDA first (launch/test.sh or cmake --build)" >&2; exit 1; }
    cp "$BUILD/$b" "$stage/bin/"
    # Libraries from the distribution, not the C runtime (the GPU machine has its own) nor CUDA's
    # (the driver there decides which CUDA libraries work).
    ldd "$BUILD/$b" | awk '/=> \//{print $3}' |
      { grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|cuda|cublas|nccl|libnvidia' || true; } |
      while read -r lib; do cp -L -n "$lib" "$stage/lib/"; done
  done
  mkdir -p "$stage/mpi-debs"
  (cd "$stage/mpi-debs" && apt-get download "${MPI_PACKAGES[@]}" > /dev/null 2>&1) ||
    { echo "gpu-check: apt-get download of Open MPI's packages failed" >&2; exit 1; }
  tar -C "$stage" -cJf "$dir/gpu-bundle.tar.xz" bin lib mpi-debs
  echo "gpu-check: $(du -h "$dir/gpu-bundle.tar.xz" | cut -f1) bundle in $dir/gpu-bundle.tar.xz"
  exit 0
fi

OUTDIR=${OUT:-$BUILD/gpu-check}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/gpu-check.txt
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }
status=0

if [ "${1:-}" = --from ]; then
  unpack=$(mktemp -d)
  tar -C "$unpack" -xJf "${2:?--from DIR}/gpu-bundle.tar.xz"
  # CUDA's libraries come from that machine: its toolkit, or the nvidia-* Python wheels of its image.
  cuda_libs=$(python3 -c 'import glob, os, site; print(":".join(d for sp in site.getsitepackages() for d in glob.glob(os.path.join(sp, "nvidia", "*", "lib"))))' 2>/dev/null || true)
  # bin/ too: the test binary loads libmoerun_cuda.so, which its build-tree RUNPATH cannot find there.
  export LD_LIBRARY_PATH="$unpack/bin:$unpack/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  MOERUN=$unpack/bin/moerun
  TEST_BACKEND=$unpack/bin/test_cuda_backend
  export MOERUN_CUDA_BACKEND=$unpack/bin/libmoerun_cuda.so
  if [ -d "$unpack/mpi-debs" ] && ! command -v mpirun > /dev/null; then
    mpi=$unpack/mpi-root
    for deb in "$unpack"/mpi-debs/*.deb; do dpkg -x "$deb" "$mpi"; done
    ln -sf orterun "$mpi/usr/bin/mpirun"
    lib=$mpi/usr/lib/x86_64-linux-gnu
    export OPAL_PREFIX=$mpi/usr OPAL_DATADIR=$mpi/usr/share/openmpi PATH=$mpi/usr/bin:$PATH UCX_MODULE_DIR=$lib/ucx
    export OMPI_MCA_mca_base_component_path=$lib/openmpi/lib/openmpi3 PMIX_MCA_mca_base_component_path=$lib/pmix2/lib/pmix
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$lib:$lib/openmpi/lib:$lib/libfabric
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
else
  source "$ROOT/launch/deps.sh"
  moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}"
  moerun_build "$ROOT" "$BUILD" all
  MOERUN=$BUILD/launch/moerun
  TEST_BACKEND=$BUILD/tests/test_cuda_backend
fi

say "# gpu-check $(date -u +%FT%TZ) on $(hostname)"
only_reference=$([ "${MOERUN_GPU_CHECK_STEPS:-all}" = reference ] && echo 1 || echo 0)
if [ $only_reference = 0 ]; then
nvidia-smi -L 2>&1 | tee -a "$LOG" || { say "gpu-check: no GPU here (nvidia-smi failed)"; exit 1; }

# 1. The CUDA backend against the CPU backend. A skip here is a failure: this machine has a GPU.
say "## test_cuda_backend"
if timeout 300 "$TEST_BACKEND" 2>&1 | tee -a "$LOG" | grep -E '^\[  (PASSED|FAILED|SKIPPED) '; then :; fi
if ! grep -q '^\[  PASSED  \]' "$LOG" || grep -q -E '^\[  (FAILED|SKIPPED) ' "$LOG"; then
  say "gpu-check: test_cuda_backend did not pass every test"; status=1
fi

# 2. --device cuda end to end (needs mpirun and a Python): gpu_infer.sh and the NCCL test.
if [ "${1:-}" != --from ] && command -v mpirun > /dev/null; then
  say "## ctest -L gpu"
  (cd "$BUILD" && timeout 300 ctest -L gpu --output-on-failure 2>&1) | tee -a "$LOG" | tail -5 || status=1
elif command -v mpirun > /dev/null; then
  say "## gpu_infer.sh"
  if ! MOERUN_BIN=$MOERUN MOERUN_PYTHON=python3 timeout 300 bash "$ROOT/tests/integration/gpu_infer.sh" 2>&1 | tee -a "$LOG"; then
    say "gpu-check: gpu_infer.sh failed"; status=1
  fi
  say "## test_nccl (2 ranks on one GPU)"
  timeout 120 mpirun --oversubscribe --bind-to none -np 2 "$unpack/bin/test_nccl" 2>&1 | tail -15 | tee -a "$LOG" || say "gpu-check: test_nccl failed"
fi

# 3. The layer against cuBLAS at Mixtral sizes (hidden 4096, 8 experts of 14336, top-2).
say "## bench layer --device cuda"
if ! timeout 240 "$MOERUN" bench layer --device cuda --hidden 4096 --intermediate 14336 --experts 8 --top-k 2 \
    --tokens 512,4096 --dtype bf16,fp32 --iters 10 --warmup 3 --json "$OUTDIR/layer-cuda.json" 2>&1 | tee -a "$LOG"; then
  say "gpu-check: bench layer --device cuda failed"; status=1
fi
fi
# 4. Where this machine's Python has transformers 5.x (the device tool's image does), the 2025
#    reference (launch/reference-2025.sh's comparison) with this moerun too.
if python3 -c 'import sys, transformers; sys.exit(int(transformers.__version__.split(".")[0]) < 5)' 2> /dev/null; then
  say "## hf_2025_reference.py (transformers 5.x)"
  # shellcheck disable=SC2086  # MOERUN_REFERENCE_ARGS is two words on purpose
  if ! (cd "$ROOT/tests/reference" && PYTHONUNBUFFERED=1 timeout 300 python3 hf_2025_reference.py "$MOERUN" "$(mktemp -d)" \
        ${MOERUN_REFERENCE_ARGS:-} 2>&1) |
      tee "$OUTDIR/hf_2025_reference.txt" | tail -3 | tee -a "$LOG"; then
    say "gpu-check: hf_2025_reference.py failed"; status=1
  fi
fi
say "# gpu-check: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
