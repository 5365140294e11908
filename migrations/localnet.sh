#!/usr/bin/env bash
# A local network end to end, with separate keeper processes over RPC and websockets:
# starts solana-test-validator with the program, initializes config/mint/market (keeper init),
# funds and stakes a provider and three verifiers, posts a task, runs the keepers, and waits
# until the task is closed on chain. Everything is stopped by PID at the end, also on failure.
# Usage: migrations/localnet.sh [WORKDIR]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/env.sh"
W="${1:-$(mktemp -d)}"
mkdir -p "$W"
RPC_PORT="${RPC_PORT:-18899}"
URL="http://127.0.0.1:$RPC_PORT"
KEEPER="$CARGO_TARGET_DIR/debug/keeper"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
[ -f "$COMPUTE_MARKET_SO" ] || "$ROOT/scripts/build"
(cd "$ROOT" && cargo build -q -p compute-market-keeper --bin keeper)

# the admin is the program's upgrade authority: only it may initialize the config
solana-keygen new --no-bip39-passphrase -s -f -o "$W/admin.json" >/dev/null
solana-test-validator --reset --quiet --ledger "$W/ledger" --rpc-port "$RPC_PORT" --faucet-port $((RPC_PORT + 1001)) \
  --gossip-port $((RPC_PORT + 101)) --dynamic-port-range $((RPC_PORT + 200))-$((RPC_PORT + 300)) \
  --upgradeable-program C7dNHMTtuzBkddhdpqiXzaWZ2j3HZXPjstDXaY9PnwbJ "$COMPUTE_MARKET_SO" "$W/admin.json" >"$W/validator.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 60); do
  solana -u "$URL" slot >/dev/null 2>&1 && break
  sleep 0.5
done
k() { "$KEEPER" -u "$URL" "$@"; }
for who in admin client provider v1 v2 v3; do
  [ "$who" = admin ] || solana-keygen new --no-bip39-passphrase -s -f -o "$W/$who.json" >/dev/null
  solana -u "$URL" airdrop 100 "$W/$who.json" >/dev/null
done
k -k "$W/admin.json" init --windows 40,15,15,15 --market-name localnet --mint-keypair-out "$W/mint.json"
for who in client provider v1 v2 v3; do
  k -k "$W/admin.json" fund "$(solana-keygen pubkey "$W/$who.json")" 100000000 >/dev/null
done
k -k "$W/provider.json" node register --roles provider --gflops 60000 --memory-gb 80 >/dev/null
k -k "$W/provider.json" node stake 50000000 >/dev/null
for v in v1 v2 v3; do
  k -k "$W/$v.json" node register --roles verifier --gflops 1000 --memory-gb 16 >/dev/null
  k -k "$W/$v.json" node stake 50000000 >/dev/null
done
TASK=$(k -k "$W/client.json" --output json task post --id 1 --kind matmul --dims 128,128,128 --reward 1000000 | sed -n 's/.*"task": "\(.*\)".*/\1/p')
echo "task $TASK posted"
port=9300
k -k "$W/provider.json" run --provider --store "$W/provider.redb" --listen "127.0.0.1:$port" --poll-ms 200 >"$W/provider.log" 2>&1 &
PIDS+=($!)
for v in v1 v2 v3; do
  port=$((port + 1))
  k -k "$W/$v.json" run --verifier --allow-loopback-urls --store "$W/$v.redb" --listen "127.0.0.1:$port" --poll-ms 200 >"$W/$v.log" 2>&1 &
  PIDS+=($!)
done
k -k "$W/admin.json" run --crank --store "$W/crank.redb" --listen "127.0.0.1:$((port + 1))" --poll-ms 200 >"$W/crank.log" 2>&1 &
PIDS+=($!)
for i in $(seq 1 240); do
  if ! k task status "$TASK" >/dev/null 2>&1; then
    echo "task $TASK closed after ~$((i / 2)) s"
    k -k "$W/provider.json" node status
    exit 0
  fi
  sleep 0.5
done
echo "task $TASK did not finish; logs in $W" >&2
k task status "$TASK" >&2 || true
exit 1
