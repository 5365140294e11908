// Networks a client connects to by name (as `solana config` names them), or any RPC.

/** A network's RPC and websocket URLs. */
export interface Endpoints {
  rpc: string;
  ws: string;
}

/** The clusters by name. */
export type NetworkName = 'localnet' | 'devnet' | 'mainnet-beta';

/** The public endpoints of each cluster (rate-limited: a dApp in production brings its own). */
export const NETWORKS: Readonly<Record<NetworkName, Endpoints>> = {
  localnet: { rpc: 'http://127.0.0.1:8899', ws: 'ws://127.0.0.1:8900' },
  devnet: { rpc: 'https://api.devnet.solana.com', ws: 'wss://api.devnet.solana.com' },
  'mainnet-beta': { rpc: 'https://api.mainnet-beta.solana.com', ws: 'wss://api.mainnet-beta.solana.com' },
};

/** A network by name, or a custom RPC (its websocket by default the RPC's port + 1 over ws(s),
 * as `solana-test-validator` and most nodes serve it). Throws naming a URL that is not one. */
export function endpointsOf(network: NetworkName | { rpc: string; ws?: string }): Endpoints {
  if (typeof network === 'string') {
    const e = NETWORKS[network];
    if (!e) throw new Error(`unknown network ${JSON.stringify(network)}: localnet, devnet, mainnet-beta, or { rpc, ws }`);
    return e;
  }
  let u: URL;
  try {
    u = new URL(network.rpc);
  } catch {
    throw new Error(`the RPC URL ${JSON.stringify(network.rpc)} is not a URL`);
  }
  if (!['http:', 'https:'].includes(u.protocol)) throw new Error(`the RPC URL ${network.rpc} is not http(s)`);
  if (network.ws !== undefined) {
    if (!/^wss?:\/\//.test(network.ws)) throw new Error(`the websocket URL ${JSON.stringify(network.ws)} is not ws(s)`);
    return { rpc: network.rpc, ws: network.ws };
  }
  const ws = new URL(u.toString());
  ws.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  if (u.port) ws.port = String(Number(u.port) + 1);
  return { rpc: network.rpc, ws: ws.toString().replace(/\/$/, '') };
}
