# Sourced by migrations/localnet.sh and scripts/app: a local network with the market set up.
# Expects ROOT, W (the work folder), RPC_PORT, URL, KEEPER and the PIDS array; defines k() (the
# keeper against URL). `localnet_up WINDOWS` starts solana-test-validator with the program (the
# admin its upgrade authority), runs `keeper init` with those phase windows, funds a client, a
# provider and three verifiers, and registers and stakes the provider and the verifiers.
# Ports, all from RPC_PORT so that moving it moves them together: RPC, gossip +101, keepers
# and stores +400…+499 (the callers'), faucet +1001, the validator's dynamic ports
# +2000…+2100 (never among the keepers').
k() { "$KEEPER" -u "$URL" "$@"; }

localnet_up() {
  local windows="$1"
  solana-keygen new --no-bip39-passphrase -s -f -o "$W/admin.json" >/dev/null
  solana-test-validator --reset --quiet --ledger "$W/ledger" --rpc-port "$RPC_PORT" --faucet-port $((RPC_PORT + 1001)) \
    --gossip-port $((RPC_PORT + 101)) --dynamic-port-range $((RPC_PORT + 2000))-$((RPC_PORT + 2100)) \
    --upgradeable-program C7dNHMTtuzBkddhdpqiXzaWZ2j3HZXPjstDXaY9PnwbJ "$COMPUTE_MARKET_SO" "$W/admin.json" >"$W/validator.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 60); do
    solana -u "$URL" slot >/dev/null 2>&1 && break
    sleep 0.5
  done
  local who v
  for who in admin client provider v1 v2 v3; do
    [ "$who" = admin ] || solana-keygen new --no-bip39-passphrase -s -f -o "$W/$who.json" >/dev/null
    solana -u "$URL" airdrop 100 "$W/$who.json" >/dev/null
  done
  # the admin is the program's upgrade authority: only it may initialize the config
  k -k "$W/admin.json" init --windows "$windows" --market-name localnet --mint-keypair-out "$W/mint.json"
  for who in client provider v1 v2 v3; do
    k -k "$W/admin.json" fund "$(solana-keygen pubkey "$W/$who.json")" 100 >/dev/null
  done
  k -k "$W/provider.json" node register --roles provider --gflops 60000 --memory-gb 80 >/dev/null
  k -k "$W/provider.json" node stake 50 >/dev/null
  for v in v1 v2 v3; do
    k -k "$W/$v.json" node register --roles verifier --gflops 1000 --memory-gb 16 >/dev/null
    k -k "$W/$v.json" node stake 50 >/dev/null
  done
}
