# Shared by deploy/device/{build,build-macos,package,test,test-arm,install,install-model}: where things live and what
# is pinned. Sourced, not run.

DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
export DUET_HOME
device_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
device_cache="$DUET_HOME/device"

# ONNX Runtime for the package: the shared library out of the PyPI `onnxruntime` wheel, the same
# version deploy/models/requirements.txt pins for the host. Each wheel is pinned by sha256.
ort_version="1.32.0"
declare -A ort_wheel=(
  [x86_64]="onnxruntime-1.32.0-cp311-cp311-manylinux_2_28_x86_64.whl"
  [aarch64]="onnxruntime-1.32.0-cp311-cp311-manylinux_2_28_aarch64.whl"
)
declare -A ort_wheel_sha256=(
  [x86_64]="5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d"
  [aarch64]="2303372a85299b6757b0e11e1cbf13e410ddf7e10c37f4b37e99d1c90e7daf7c"
)
declare -A deb_arch=([x86_64]=amd64 [aarch64]=arm64)
declare -A rust_target=([x86_64]=x86_64-unknown-linux-gnu [aarch64]=aarch64-unknown-linux-gnu)
# What `file` says of an ELF built for each architecture.
declare -A elf_machine=([x86_64]="x86-64" [aarch64]="ARM aarch64")

# aarch64 is cross-built with Debian's Rust (bookworm-security's rustc-web, >= 1.92 as ort needs),
# its own target directory apart from the rustup toolchain's target/.
cross_target_dir="$device_cache/target"
cross_sysroot="$device_cache/rust-sysroot"
# A Neoverse-N1 (Armv8.2, NEON, no SVE): under qemu's default `max` CPU ONNX Runtime picks SVE
# kernels, which emulate ~5x slower (the 0.5B's greedy tokens were the same on both).
qemu_aarch64=(qemu-aarch64-static -cpu neoverse-n1 -L /usr/aarch64-linux-gnu)

log() { echo "[device] $*" >&2; }
die() { echo "[device] error: $*" >&2; exit 1; }

# check_arch ARCH: refuse anything but the two architectures built.
check_arch() {
  case "${1:-}" in
    x86_64|aarch64) ;;
    amd64) die "say x86_64 (the Debian name amd64 is the package's)" ;;
    arm64) die "say aarch64 (the Debian name arm64 is the package's)" ;;
    *) die "--arch must be x86_64 or aarch64 (got '${1:-}')" ;;
  esac
}

# parse_arch "$@": the value of --arch (default: this machine's), into $arch.
parse_arch() {
  arch="$(uname -m)"
  while [ $# -gt 0 ]; do
    case "$1" in
      --arch) arch="${2:-}"; shift 2 || die "--arch needs a value" ;;
      --arch=*) arch="${1#--arch=}"; shift ;;
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown argument '$1'" ;;
    esac
  done
  check_arch "$arch"
}

# apt_install PKG...: install the Debian packages not yet installed (as deploy/host-deps does).
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=(); [ "$(id -u)" = 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
}

# workspace_version: the version every crate of the workspace carries.
workspace_version() {
  sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' "$device_root/Cargo.toml"
}

# binary_path ARCH: where deploy/device/build leaves edge-node for ARCH.
binary_path() {
  if [ "$1" = x86_64 ]; then echo "$device_root/target/release/edge-node";
  else echo "$cross_target_dir/${rust_target[$1]}/release/edge-node"; fi
}

# ort_path ARCH: where deploy/device/build leaves libonnxruntime.so for ARCH.
ort_path() { echo "$device_cache/onnxruntime-$ort_version/$1/libonnxruntime.so.$ort_version"; }

# run_on ARCH CMD...: run a binary built for ARCH here (aarch64 through qemu user emulation).
# ONNX Runtime reads /proc/cpuinfo to learn the cores (its cpuinfo library): Debian 12's qemu
# (7.2) passes the host's x86 /proc/cpuinfo through, on which that parser finds no aarch64 core
# and dereferences NULL (qemu >= 8.1 writes one of its own). As root, an aarch64 /proc/cpuinfo
# (Neoverse-N1 cores, as many as here) is bind-mounted in a mount namespace of the process's own.
run_on() {
  local a="$1"; shift
  if [ "$a" != aarch64 ] || [ "$(uname -m)" = aarch64 ]; then "$@"; return; fi
  if [ "$(id -u)" != 0 ]; then "${qemu_aarch64[@]}" "$@"; return; fi
  local fake="$device_cache/cpuinfo-aarch64" i
  if [ ! -s "$fake" ] || [ "$(grep -c '^processor' "$fake")" != "$(nproc)" ]; then
    mkdir -p "$device_cache"
    for i in $(seq 0 $(($(nproc) - 1))); do
      printf 'processor\t: %d\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n' "$i"
    done > "$fake"
  fi
  unshare --mount -- sh -c 'mount --bind "$0" /proc/cpuinfo && exec "$@"' "$fake" "${qemu_aarch64[@]}" "$@"
}

# debian_cargo_env: the environment in which Debian's cargo cross-builds for aarch64 (printed by
# `deploy/device/build --arch aarch64 --print-env` for running other cargo commands in it).
debian_cargo_env() {
  cat <<EOF
export CARGO_TARGET_DIR=$cross_target_dir
export RUSTC=/usr/bin/rustc
export RUSTDOC=/usr/bin/rustdoc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="--sysroot $cross_sysroot"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="${qemu_aarch64[*]}"
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
export CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++
unset RUSTUP_TOOLCHAIN RUSTFLAGS
EOF
}
