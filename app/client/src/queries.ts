// The program's accounts by what they belong to (`getProgramAccounts` with the type's size,
// its discriminator and a field's bytes as filters), each account checked (owner, size,
// discriminator) before it is decoded: a node is a stranger.

import { getBase58Decoder, type Address, type ReadonlyUint8Array, type Rpc, type SolanaRpcApi } from '@solana/kit';
import { checkedAccountData, type AccountValue } from './accounts';
import { getMarketDecoder, getMarketSize, MARKET_DISCRIMINATOR, type Market } from './generated/accounts/market';
import { getNodeDecoder, getNodeSize, NODE_DISCRIMINATOR, type Node } from './generated/accounts/node';
import { getTaskDecoder, getTaskSize, TASK_DISCRIMINATOR, type Task } from './generated/accounts/task';
import { getVoteDecoder, getVoteSize, VOTE_DISCRIMINATOR, type Vote } from './generated/accounts/vote';
import { COMPUTE_MARKET_PROGRAM_ADDRESS } from './generated/programs';
import type { TaskStatus } from './generated/types/taskStatus';

/** An account with its address. */
export interface Found<T> {
  address: Address;
  data: T;
}

/** The program's `name` accounts whose bytes at each filter's offset are the filter's
 * address, decoded after their checks. */
export async function programAccounts<T>(
  rpc: Rpc<SolanaRpcApi>,
  name: string,
  discriminator: ReadonlyUint8Array,
  size: number,
  filters: { offset: number; address: Address }[],
  decode: (b: Uint8Array) => T,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
): Promise<Found<T>[]> {
  const got = await rpc
    .getProgramAccounts(programAddress, {
      encoding: 'base64',
      commitment: 'confirmed',
      filters: [
        { dataSize: BigInt(size) },
        { memcmp: { offset: 0n, bytes: getBase58Decoder().decode(discriminator) as any, encoding: 'base58' } },
        ...filters.map((f) => ({ memcmp: { offset: BigInt(f.offset), bytes: f.address as any, encoding: 'base58' as const } })),
      ],
    })
    .send();
  return (got as unknown as { pubkey: Address; account: AccountValue }[]).map((a) => ({
    address: a.pubkey,
    data: decode(checkedAccountData(a.account, name, discriminator, size, programAddress)),
  }));
}

// Offsets: discriminator 8, version 1, then the fields in order.
/** Node: authority 32, then the market. */
const NODE_MARKET = 41;
/** Task: the client first, then its id (8), then the market. */
const TASK_CLIENT = 9;
const TASK_MARKET = 49;
/** Vote: the task first. */
const VOTE_TASK = 9;

/** The nodes of `market` (its address). */
export function nodesOf(rpc: Rpc<SolanaRpcApi>, market: Address, programAddress?: Address): Promise<Found<Node>[]> {
  return programAccounts(rpc, 'Node', NODE_DISCRIMINATOR, getNodeSize(), [{ offset: NODE_MARKET, address: market }], (b) => getNodeDecoder().decode(b), programAddress);
}

/** Which tasks to list: of a market, of a client, in some statuses (any of them). */
export interface TaskFilter {
  market?: Address;
  client?: Address;
  status?: TaskStatus | TaskStatus[];
}

/** The live task accounts matching `filter` (closed tasks are gone: their history tells them). */
export async function tasksWhere(rpc: Rpc<SolanaRpcApi>, filter: TaskFilter, programAddress?: Address): Promise<Found<Task>[]> {
  const by = [
    ...(filter.market ? [{ offset: TASK_MARKET, address: filter.market }] : []),
    ...(filter.client ? [{ offset: TASK_CLIENT, address: filter.client }] : []),
  ];
  if (by.length === 0) throw new Error('list tasks by market or client (every task of the program is too many to ask a node for)');
  const all = await programAccounts(rpc, 'Task', TASK_DISCRIMINATOR, getTaskSize(), by, (b) => getTaskDecoder().decode(b), programAddress);
  const statuses = filter.status === undefined ? undefined : ([] as TaskStatus[]).concat(filter.status);
  return statuses ? all.filter((t) => statuses.includes(t.data.status)) : all;
}

/** The live tasks of `market`. */
export function tasksOf(rpc: Rpc<SolanaRpcApi>, market: Address, programAddress?: Address): Promise<Found<Task>[]> {
  return tasksWhere(rpc, { market }, programAddress);
}

/** Every market of the program (few: an operator creates each), by id. */
export async function marketsOf(rpc: Rpc<SolanaRpcApi>, programAddress?: Address): Promise<Found<Market>[]> {
  const all = await programAccounts(rpc, 'Market', MARKET_DISCRIMINATOR, getMarketSize(), [], (b) => getMarketDecoder().decode(b), programAddress);
  return all.sort((a, b) => a.data.id - b.data.id);
}

/** The vote accounts of `task` (one a seated verifier and round). */
export function votesOf(rpc: Rpc<SolanaRpcApi>, task: Address, programAddress?: Address): Promise<Found<Vote>[]> {
  return programAccounts(rpc, 'Vote', VOTE_DISCRIMINATOR, getVoteSize(), [{ offset: VOTE_TASK, address: task }], (b) => getVoteDecoder().decode(b), programAddress);
}
