# Sourced by demo.sh and test.sh: installs the Debian packages moerun needs when any is missing
# (apt-get update once, then apt-get install -y), so both commands work on a fresh machine.
MOERUN_DEBIAN_PACKAGES=(
  build-essential cmake ccache pkg-config git
  libopenmpi-dev openmpi-bin libucx-dev libhdf5-dev libboost-program-options-dev libgtest-dev
  libdnnl-dev nlohmann-json3-dev libcurl4-openssl-dev libxxhash-dev iproute2
  # libdnnl-dev's CMake config calls find_package(OpenCL); the package is only a Recommends,
  # which --no-install-recommends skips, so configure fails on a fresh machine without it.
  ocl-icd-opencl-dev
  libsentencepiece-dev  # tokenizer.model (SentencePiece) for text prompts
)
MOERUN_TEST_PACKAGES=(python3 ca-certificates python3-venv python3-torch python3-h5py python3-numpy python3-matplotlib
  python3-sentencepiece python3-xxhash slurm-wlm munge valgrind
  swift-proxy swift-object swift-container swift-account memcached curl)

moerun_install_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "moerun: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# Open MPI refuses to run as root without these; we run as root in containers and CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

moerun_build() {  # moerun_build ROOT BUILD_DIR TARGET [extra cmake args...]   (TARGET: all, moerun, ...)
  local root=$1 build=$2 target=$3; shift 3
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOERUN_BUILD_TESTS=ON "$@" > "$build/configure.log" 2>&1 || {
    cat "$build/configure.log" >&2; return 1; }
  cmake --build "$build" --target "$target" -j "${MOERUN_BUILD_JOBS:-2}"
}
