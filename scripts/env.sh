# Sourced by the scripts: where builds go and where the program lands.
# CI and developers may point COMPUTE_MARKET_TARGET at a cache outside the clone.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${COMPUTE_MARKET_TARGET:-${CARGO_TARGET_DIR:-$ROOT/target}}"
export COMPUTE_MARKET_SO="$CARGO_TARGET_DIR/deploy/compute_market.so"
# the SBPF v3 build (scripts/build), what migrations/deploy.sh deploys
export COMPUTE_MARKET_SO_V3="$CARGO_TARGET_DIR/deploy-v3/compute_market.so"
SHARED="${COMPUTE_MARKET_SHARED:-$ROOT/../shared}"
# never let a stray RUSTC_BOOTSTRAP/RUSTFLAGS invalidate the host build cache
unset RUSTC_BOOTSTRAP RUSTFLAGS
# NVRTC from the PyPI wheel (scripts/setup installs it): compiles the CUDA kernels, no GPU needed
NVRTC_DIR="${COMPUTE_MARKET_NVRTC_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/compute-market/nvrtc}"
if [ -z "${COMPUTE_MARKET_NVRTC:-}" ] && [ -f "$NVRTC_DIR/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
  export COMPUTE_MARKET_NVRTC="$NVRTC_DIR/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
fi
