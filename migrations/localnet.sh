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
cleanup() {
  [ "${#PIDS[@]}" -gt 0 ] || return 0
  kill "${PIDS[@]}" 2>/dev/null || true
  for _ in $(seq 1 20); do
    kill -0 "${PIDS[@]}" 2>/dev/null || break
    sleep 0.25
  done
  kill -9 "${PIDS[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
[ -f "$COMPUTE_MARKET_SO" ] || "$ROOT/scripts/build"
(cd "$ROOT" && cargo build -q -p compute-market-keeper --bin keeper)

source "$ROOT/scripts/localnet-up.sh"
localnet_up 40,15,15,15
TASK=$(k -k "$W/client.json" --output json task post --id 1 --kind matmul --dims 128,128,128 --reward 1 | sed -n 's/.*"task": "\(.*\)".*/\1/p')
echo "task $TASK posted"
port=$((RPC_PORT + 400))
# the keeper itself in the background (not the `k` function: its subshell's PID would be
# recorded, and killing that leaves the keeper running)
"$KEEPER" -u "$URL" -k "$W/provider.json" run --provider --store "$W/provider.redb" --listen "127.0.0.1:$port" --poll-ms 200 >"$W/provider.log" 2>&1 &
PIDS+=($!)
for v in v1 v2 v3; do
  port=$((port + 1))
  "$KEEPER" -u "$URL" -k "$W/$v.json" run --verifier --allow-loopback-urls --store "$W/$v.redb" --listen "127.0.0.1:$port" --poll-ms 200 >"$W/$v.log" 2>&1 &
  PIDS+=($!)
done
"$KEEPER" -u "$URL" -k "$W/admin.json" run --crank --store "$W/crank.redb" --listen "127.0.0.1:$((port + 1))" --poll-ms 200 >"$W/crank.log" 2>&1 &
PIDS+=($!)
# `task status` answers for a closed task too (from its history): closed is its "account"
for i in $(seq 1 240); do
  STATUS=$(k --output json task status "$TASK" 2>/dev/null || true)
  if printf '%s' "$STATUS" | grep -q '"account": "closed"'; then
    echo "task $TASK closed $(printf '%s' "$STATUS" | sed -n 's/.*"status": "\([A-Za-z]*\)".*/\1/p' | head -1) after ~$((i / 2)) s"
    k -k "$W/provider.json" node status
    exit 0
  fi
  sleep 0.5
done
echo "task $TASK did not finish; logs in $W" >&2
k task status "$TASK" >&2 || true
exit 1
