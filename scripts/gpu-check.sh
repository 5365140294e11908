#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and nothing installed but the driver:
# builds the keeper (unless a prebuilt one is given), runs every kernel against the CPU
# reference bit for bit, and `keeper bench` on CPU and GPU side by side; writes a short report
# (GPU name, kernel G ops/s and % of the int32 multiply-add peak, GPU/CPU ratio, bit-identical
# yes/no, verification/compute ratio) to REPORT_DIR ($OUT, or ./gpu-check-report).
#
# usage: scripts/gpu-check.sh [REPORT_DIR]
#   KEEPER=path/to/keeper   use this prebuilt release binary (no Rust needed on the machine)
#   SIZES=1024,4096         MatMulModP sizes benchmarked
# NVRTC: taken from the CUDA toolkit when installed; otherwise from the PyPI wheel
# nvidia-cuda-nvrtc-cu12 (pip install it, or set COMPUTE_MARKET_NVRTC=/path/to/libnvrtc.so.12).
# Budget: under 8 minutes on an H200 (build excluded when KEEPER is given).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${1:-${OUT:-$ROOT/gpu-check-report}}"
mkdir -p "$DIR"
start=$(date +%s)
log() { echo "gpu-check: $*" | tee -a "$DIR/gpu-check.log"; }

log "host $(uname -n), $(nproc) cores"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee -a "$DIR/gpu-check.log"
else
  log "nvidia-smi not found: is the NVIDIA driver installed?"
fi

KEEPER="${KEEPER:-}"
if [ -z "$KEEPER" ]; then
  if ! command -v cargo >/dev/null; then
    log "no cargo: installing Rust with rustup (needs the network), or pass KEEPER=prebuilt"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain 1.95.0
    source "$HOME/.cargo/env"
  fi
  log "building the keeper (release)"
  (cd "$ROOT" && cargo build --release -q -p compute-market-keeper --bin keeper)
  KEEPER="${CARGO_TARGET_DIR:-$ROOT/target}/release/keeper"
fi
[ -x "$KEEPER" ] || { log "no keeper binary at $KEEPER"; exit 1; }

# NVRTC from a pip wheel when the toolkit's is missing
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so' && [ -z "${COMPUTE_MARKET_NVRTC:-}" ]; then
  for py in python3 python; do
    command -v $py >/dev/null || continue
    lib=$($py -c 'import nvidia.cuda_nvrtc, os; print(os.path.join(nvidia.cuda_nvrtc.__path__[0], "lib", "libnvrtc.so.12"))' 2>/dev/null || true)
    if [ -n "$lib" ] && [ -f "$lib" ]; then export COMPUTE_MARKET_NVRTC="$lib"; log "NVRTC from the wheel: $lib"; break; fi
  done
fi

export COMPUTE_MARKET_KERNEL_CACHE="${COMPUTE_MARKET_KERNEL_CACHE:-$DIR/kernel-cache}"
log "running keeper gpu-check (identity suite, cold/warm start, bench ${SIZES:-1024,4096})"
set +e
RUST_LOG="${RUST_LOG:-info}" timeout 420 "$KEEPER" gpu-check --sizes "${SIZES:-1024,4096}" --out "$DIR" 2>>"$DIR/gpu-check.log"
rc=$?
set -e
rm -rf "$COMPUTE_MARKET_KERNEL_CACHE"
log "done in $(( $(date +%s) - start )) s, exit $rc$([ -f "$DIR/report.md" ] && echo "; report: $DIR/report.md")"
exit $rc
