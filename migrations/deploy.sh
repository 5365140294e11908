#!/usr/bin/env bash
# Deploys or upgrades the program, then initializes config / mint / market, idempotently,
# against any cluster URL (localnet, devnet, ...). Run it again and it changes nothing.
#
# usage: migrations/deploy.sh -u URL -k AUTHORITY.json [--so PATH] [--program-keypair PATH]
#                             [-- KEEPER-INIT-ARGS...]
#   -u URL                 cluster (solana CLI monikers work: localhost, devnet)
#   -k AUTHORITY.json      pays, is the upgrade authority and the config admin
#   --so PATH              program to deploy [default: scripts/build's SBPF v3 build; clusters
#                          without SIMD-0500 also take the v0 build, $COMPUTE_MARKET_SO]
#   --program-keypair PATH program id keypair [default: keys/compute_market-keypair.json]
#   after --                passed to `keeper init` (e.g. --windows 40,15,15,15 --market-name gpus)
#
# The program is deployed when absent, upgraded when its on-chain bytes differ from --so, and
# left alone when they are equal. Needs the `solana` CLI and the keeper binary (KEEPER or
# $CARGO_TARGET_DIR/debug/keeper, built when missing).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/env.sh"
URL="" AUTH="" SO="$COMPUTE_MARKET_SO_V3" PROGRAM_KP="$ROOT/keys/compute_market-keypair.json"
while [ $# -gt 0 ]; do
  case "$1" in
    -u|--url) URL="$2"; shift 2 ;;
    -k|--keypair) AUTH="$2"; shift 2 ;;
    --so) SO="$2"; shift 2 ;;
    --program-keypair) PROGRAM_KP="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "deploy.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$URL" ] || { echo "deploy.sh: -u URL is required" >&2; exit 2; }
[ -n "$AUTH" ] || { echo "deploy.sh: -k AUTHORITY.json is required" >&2; exit 2; }
[ -f "$AUTH" ] || { echo "deploy.sh: no keypair file at $AUTH" >&2; exit 2; }
[ -f "$SO" ] || { echo "deploy.sh: no program at $SO (build it with scripts/build)" >&2; exit 2; }
KEEPER="${KEEPER:-$CARGO_TARGET_DIR/debug/keeper}"
[ -x "$KEEPER" ] || (cd "$ROOT" && cargo build -q -p compute-market-keeper --bin keeper)
PROGRAM_ID="$(solana-keygen pubkey "$PROGRAM_KP")"
sol() { solana -u "$URL" -k "$AUTH" "$@"; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if sol program dump "$PROGRAM_ID" "$tmp/onchain.so" >/dev/null 2>&1; then
  size=$(stat -c %s "$SO")
  # program data may be longer than the file (room for upgrades): compare the file's length
  # and require the rest to be zero
  if cmp -s -n "$size" "$SO" "$tmp/onchain.so" && ! tail -c +"$((size + 1))" "$tmp/onchain.so" | tr -d '\0' | grep -q .; then
    echo "deploy: program $PROGRAM_ID is up to date"
  else
    echo "deploy: upgrading program $PROGRAM_ID"
    sol program deploy --use-rpc --program-id "$PROGRAM_KP" "$SO"
  fi
else
  echo "deploy: deploying program $PROGRAM_ID"
  sol program deploy --use-rpc --program-id "$PROGRAM_KP" "$SO"
fi
"$KEEPER" -u "$URL" -k "$AUTH" --output json init "$@"
