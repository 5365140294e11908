// A node's own actions and the settlements anyone may run, as instructions with every account
// filled in: register, update, stake, request an unstake, withdraw, claim earnings, close and
// sync a node; sweep a node's fees; expire, reclaim and close a task. Seeds as the program
// declares them (programs/compute-market/src/instructions/*.rs); the accounts a builder cannot
// derive (the task's refund account, the treasury, the provider of a task) are arguments, and
// `…ArgsOf` reads them from the chain, each account checked before it is decoded.
//
// The builders use the generated synchronous instruction functions with each PDA passed in:
// the generated `…Async` ones derive their PDAs under the default program address whatever
// `programAddress` they are given.

import { getBase64Encoder, type Address, type Instruction, type ReadonlyUint8Array, type Rpc, type SolanaRpcApi, type TransactionSigner } from '@solana/kit';
import { AccountState, getCreateAssociatedTokenIdempotentInstruction, getTokenDecoder, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import { checkedAccountData, type AccountValue } from './accounts';
import { CONFIG_DISCRIMINATOR, getConfigDecoder, getConfigSize, type Config } from './generated/accounts/config';
import { getNodeDecoder, getNodeSize, NODE_DISCRIMINATOR, type Node } from './generated/accounts/node';
import { getTaskDecoder, getTaskSize, TASK_DISCRIMINATOR, type Task } from './generated/accounts/task';
import { getClaimEarningsInstruction } from './generated/instructions/claimEarnings';
import { getCloseNodeInstruction } from './generated/instructions/closeNode';
import { getCloseTaskInstruction } from './generated/instructions/closeTask';
import { getExpireTaskInstruction } from './generated/instructions/expireTask';
import { getReclaimTaskInstruction } from './generated/instructions/reclaimTask';
import { getRegisterNodeInstruction } from './generated/instructions/registerNode';
import { getRequestUnstakeInstruction } from './generated/instructions/requestUnstake';
import { getStakeInstruction } from './generated/instructions/stake';
import { getSweepFeesInstruction } from './generated/instructions/sweepFees';
import { getSyncStakeInstruction } from './generated/instructions/syncStake';
import { getUpdateNodeInstruction } from './generated/instructions/updateNode';
import { getWithdrawInstruction } from './generated/instructions/withdraw';
import { COMPUTE_MARKET_PROGRAM_ADDRESS } from './generated/programs';
import type { HardwareArgs } from './generated/types/hardware';
import { TaskStatus } from './generated/types/taskStatus';
import { configAddress, escrowAddress, marketAddress, nodeAddress, vaultAddress } from './pda';
import { tokenAccountOf } from './tx';

/** A market: its id (`["market", id u16 LE]` is derived) or its address (a node's `market`). */
export type MarketRef = number | Address;

/** The address of market `m`. */
export async function marketOf(m: MarketRef, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Address> {
  return typeof m === 'number' ? marketAddress(m, programAddress) : m;
}

/** The role bits of `register_node`. */
export const ROLE_PROVIDER = 1;
export const ROLE_VERIFIER = 2;

/** Most bytes of a node's endpoint (`MAX_ENDPOINT_LEN`). */
export const MAX_ENDPOINT_LEN = 56;

/** A node registering in a market. */
export interface RegisterNodeArgs {
  /** The node's authority: signs, pays the node and vault accounts' rent. */
  authority: TransactionSigner;
  market: MarketRef;
  /** `ROLE_PROVIDER`, `ROLE_VERIFIER`, or both (3). */
  roles: number;
  /** Declared hardware (a provider meets the market's minimum). */
  hardware: HardwareArgs;
}

/** The node's new hardware and endpoint. */
export interface UpdateNodeArgs {
  authority: TransactionSigner;
  /** The market the node is in. */
  market: MarketRef;
  hardware: HardwareArgs;
  /** The keeper's public base URL (`http(s)://host…`, at most 56 bytes), or `""` for none. */
  endpoint: string;
}

/** Tokens into (or, requested, out of) a node's stake. */
export interface StakeArgs {
  authority: TransactionSigner;
  /** The market the node is in. */
  market: MarketRef;
  /** Base units. */
  amount: bigint;
  /** Where the tokens come from (a token account of the stake mint the authority owns);
   * default: the authority's associated token account. */
  source?: Address;
}

/** A node's pending unstake request. */
export interface RequestUnstakeArgs {
  authority: TransactionSigner;
  market: MarketRef;
  amount: bigint;
}

/** Tokens out of a node's vault (withdraw, claim earnings, close). */
export interface PayoutArgs {
  authority: TransactionSigner;
  /** A token account of the stake mint; default: the authority's associated token account,
   * created first (idempotently) so a new wallet can receive. */
  destination?: Address;
  /** Pays the associated account's rent when it is created (default: the authority). */
  payer?: TransactionSigner;
}

/** Closing a node (its stake all withdrawn). */
export interface CloseNodeArgs extends PayoutArgs {
  /** The market the node is in. */
  market: MarketRef;
}

/** A node's slashed stake settled into its market (anyone). */
export interface SyncStakeArgs {
  node: Address;
  market: MarketRef;
}

/** A node's accrued fees to the treasury (anyone). */
export interface SweepFeesArgs {
  node: Address;
  /** The config's treasury (`Config.treasury`). */
  treasury: Address;
}

/** A task whose provider missed its submit deadline (anyone). */
export interface ReclaimTaskArgs {
  task: Address;
  /** The task's provider node (`Task.provider`). */
  providerNode: Address;
}

/** A finished task to close (anyone): the client refunded, the rent to the client. */
export interface CloseTaskArgs {
  task: Address;
  /** The task's client (`Task.client`): receives the rent. */
  client: Address;
  /** The task's refund account (`Task.clientToken`). */
  clientToken: Address;
  /** Only when `clientToken` is no longer a live token account of the stake mint: refund to
   * the client's associated token account instead. */
  refundToAssociated?: boolean;
  /** With `refundToAssociated`: creates the client's associated token account first
   * (idempotently), paying its rent (anyone may). */
  payer?: TransactionSigner;
  /** Only when the escrow holds more than the refund: the config's treasury
   * (`Config.treasury`); writable, so left out otherwise. */
  treasury?: Address;
}

function ataInstruction(payer: TransactionSigner, ata: Address, owner: Address, mint: Address): Instruction {
  return getCreateAssociatedTokenIdempotentInstruction({ payer, ata, owner, mint });
}

/** `register_node`: the node and its stake vault created for the authority. */
export async function registerNodeInstructions(
  args: RegisterNodeArgs,
  stakeMint: Address,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
): Promise<Instruction[]> {
  if (!Number.isInteger(args.roles) || args.roles < 1 || args.roles > 3) throw new Error(`roles are 1 (provider), 2 (verifier) or 3 (both), not ${args.roles}`);
  const node = await nodeAddress(args.authority.address, programAddress);
  return [
    getRegisterNodeInstruction(
      {
        config: await configAddress(programAddress),
        market: await marketOf(args.market, programAddress),
        node,
        vault: await vaultAddress(node, programAddress),
        stakeMint,
        authority: args.authority,
        roles: args.roles,
        hardware: args.hardware,
      },
      { programAddress },
    ),
  ];
}

/** Whether `endpoint` is one the program takes: empty, or `http(s)://` and a host, at most 56
 * bytes of printable ASCII without `@ ? # \`. */
export function endpointOk(endpoint: string): boolean {
  if (endpoint === '') return true;
  const bytes = new TextEncoder().encode(endpoint);
  const rest = endpoint.startsWith('http://') ? endpoint.slice(7) : endpoint.startsWith('https://') ? endpoint.slice(8) : undefined;
  return (
    bytes.length <= MAX_ENDPOINT_LEN &&
    rest !== undefined &&
    rest.length > 0 &&
    rest[0] !== '/' &&
    [...bytes].every((b) => b > 0x20 && b < 0x7f && !'@?#\\'.includes(String.fromCharCode(b)))
  );
}

/** `update_node`: the node's hardware and endpoint. */
export async function updateNodeInstructions(args: UpdateNodeArgs, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Instruction[]> {
  if (!endpointOk(args.endpoint)) throw new Error(`an endpoint is empty or an http(s) base URL of at most ${MAX_ENDPOINT_LEN} printable bytes without @ ? # \\: ${JSON.stringify(args.endpoint)}`);
  return [
    getUpdateNodeInstruction(
      {
        market: await marketOf(args.market, programAddress),
        node: await nodeAddress(args.authority.address, programAddress),
        authority: args.authority,
        hardware: args.hardware,
        endpoint: args.endpoint,
      },
      { programAddress },
    ),
  ];
}

/** `stake`: `amount` from the authority's token account into the node's vault. */
export async function stakeInstructions(args: StakeArgs, stakeMint: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Instruction[]> {
  if (args.amount <= 0n) throw new Error(`a stake is more than 0 base units, not ${args.amount}`);
  const node = await nodeAddress(args.authority.address, programAddress);
  return [
    getStakeInstruction(
      {
        market: await marketOf(args.market, programAddress),
        node,
        vault: await vaultAddress(node, programAddress),
        source: args.source ?? (await tokenAccountOf(args.authority.address, stakeMint)),
        authority: args.authority,
        amount: args.amount,
      },
      { programAddress },
    ),
  ];
}

/** `request_unstake`: `amount` of free stake pending, withdrawable after the cooldown. */
export async function requestUnstakeInstructions(args: RequestUnstakeArgs, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Instruction[]> {
  if (args.amount <= 0n) throw new Error(`an unstake is more than 0 base units, not ${args.amount}`);
  return [
    getRequestUnstakeInstruction(
      {
        config: await configAddress(programAddress),
        market: await marketOf(args.market, programAddress),
        node: await nodeAddress(args.authority.address, programAddress),
        authority: args.authority,
        amount: args.amount,
      },
      { programAddress },
    ),
  ];
}

/** The node, vault and destination of a payout, and the instruction creating the destination
 * when it is the default. */
async function payoutAccounts(args: PayoutArgs, stakeMint: Address, programAddress: Address) {
  const owner = args.authority.address;
  const node = await nodeAddress(owner, programAddress);
  const vault = await vaultAddress(node, programAddress);
  if (args.destination) return { node, vault, destination: args.destination, first: [] as Instruction[] };
  const destination = await tokenAccountOf(owner, stakeMint);
  return { node, vault, destination, first: [ataInstruction(args.payer ?? args.authority, destination, owner, stakeMint)] };
}

/** `withdraw`: the pending unstake, after its cooldown, to the destination. */
export async function withdrawInstructions(args: PayoutArgs, stakeMint: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Instruction[]> {
  const { node, vault, destination, first } = await payoutAccounts(args, stakeMint, programAddress);
  return [...first, getWithdrawInstruction({ node, vault, destination, authority: args.authority }, { programAddress })];
}

/** `claim_earnings`: the node's rewards to the destination. */
export async function claimEarningsInstructions(args: PayoutArgs, stakeMint: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Instruction[]> {
  const { node, vault, destination, first } = await payoutAccounts(args, stakeMint, programAddress);
  return [...first, getClaimEarningsInstruction({ node, vault, destination, authority: args.authority }, { programAddress })];
}

/** `close_node`: the node and its vault closed, their rent to the authority (tokens sent to
 * the vault outside the protocol to the destination). */
export async function closeNodeInstructions(args: CloseNodeArgs, stakeMint: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Instruction[]> {
  const { node, vault, destination, first } = await payoutAccounts(args, stakeMint, programAddress);
  return [
    ...first,
    getCloseNodeInstruction({ market: await marketOf(args.market, programAddress), node, vault, destination, authority: args.authority }, { programAddress }),
  ];
}

/** `sync_stake`: a node's slashed stake off its market's totals (no signer). */
export async function syncStakeInstructions(args: SyncStakeArgs, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Instruction[]> {
  return [getSyncStakeInstruction({ market: await marketOf(args.market, programAddress), node: args.node }, { programAddress })];
}

/** `sweep_fees`: a node's accrued protocol fees to the treasury (no signer). */
export async function sweepFeesInstructions(args: SweepFeesArgs, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Instruction[]> {
  return [
    getSweepFeesInstruction(
      { config: await configAddress(programAddress), node: args.node, vault: await vaultAddress(args.node, programAddress), treasury: args.treasury },
      { programAddress },
    ),
  ];
}

/** `expire_task`: an Open task past its deadline ends (no signer). */
export function expireTaskInstructions(task: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Instruction[] {
  return [getExpireTaskInstruction({ task }, { programAddress })];
}

/** `reclaim_task`: a Claimed task past its submit deadline reopens, part of the provider's bond
 * to the client (no signer). */
export async function reclaimTaskInstructions(args: ReclaimTaskArgs, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Instruction[]> {
  return [
    getReclaimTaskInstruction(
      {
        task: args.task,
        escrow: await escrowAddress(args.task, programAddress),
        providerNode: args.providerNode,
        providerVault: await vaultAddress(args.providerNode, programAddress),
      },
      { programAddress },
    ),
  ];
}

/** `close_task`: a finished task closed, the client refunded (no signer; `payer` only creates
 * the client's associated token account when the refund goes there). */
export async function closeTaskInstructions(args: CloseTaskArgs, stakeMint: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Instruction[]> {
  const clientAta = args.refundToAssociated ? await tokenAccountOf(args.client, stakeMint) : undefined;
  const first = clientAta && args.payer ? [ataInstruction(args.payer, clientAta, args.client, stakeMint)] : [];
  return [
    ...first,
    getCloseTaskInstruction(
      {
        task: args.task,
        escrow: await escrowAddress(args.task, programAddress),
        client: args.client,
        clientToken: args.clientToken,
        clientAta,
        config: await configAddress(programAddress),
        treasury: args.treasury,
      },
      { programAddress },
    ),
  ];
}

// ---- the accounts a builder cannot derive, read from the chain ----

async function accountValue(rpc: Rpc<SolanaRpcApi>, address: Address): Promise<AccountValue | null> {
  const { value } = await rpc.getAccountInfo(address, { encoding: 'base64', commitment: 'confirmed' }).send();
  return (value as AccountValue | null) ?? null;
}

async function programAccount<T>(
  rpc: Rpc<SolanaRpcApi>,
  address: Address,
  name: string,
  discriminator: ReadonlyUint8Array,
  size: number,
  decode: (b: Uint8Array) => T,
  programAddress: Address,
): Promise<T> {
  const value = await accountValue(rpc, address);
  if (!value) throw new Error(`no ${name.toLowerCase()} account at ${address}`);
  return decode(checkedAccountData(value, name, discriminator, size, programAddress));
}

/** The config account, checked. */
export const readConfig = (rpc: Rpc<SolanaRpcApi>, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Config> =>
  configAddress(programAddress).then((a) => programAccount(rpc, a, 'Config', CONFIG_DISCRIMINATOR, getConfigSize(), (b) => getConfigDecoder().decode(b), programAddress));

/** A node account, checked. */
export const readNode = (rpc: Rpc<SolanaRpcApi>, node: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Node> =>
  programAccount(rpc, node, 'Node', NODE_DISCRIMINATOR, getNodeSize(), (b) => getNodeDecoder().decode(b), programAddress);

/** A task account, checked. */
export const readTask = (rpc: Rpc<SolanaRpcApi>, task: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Task> =>
  programAccount(rpc, task, 'Task', TASK_DISCRIMINATOR, getTaskSize(), (b) => getTaskDecoder().decode(b), programAddress);

/** A token account as the program reads one: owned by SPL Token, initialized, of `mint`, not
 * frozen; its balance, or `undefined` when it is not such an account (closed, another mint). */
export async function liveTokenBalance(rpc: Rpc<SolanaRpcApi>, account: Address, mint: Address): Promise<bigint | undefined> {
  const value = await accountValue(rpc, account);
  if (!value || value.owner !== TOKEN_PROGRAM_ADDRESS || BigInt(value.lamports) === 0n) return undefined;
  const bytes = getBase64Encoder().encode(String(value.data[0]));
  if (bytes.length < 165) return undefined;
  const t = getTokenDecoder().decode(bytes);
  return t.mint === mint && t.state === AccountState.Initialized ? t.amount : undefined;
}

/** The market the node of `authority` is in. */
export async function nodeMarketOf(rpc: Rpc<SolanaRpcApi>, authority: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Address> {
  return (await readNode(rpc, await nodeAddress(authority, programAddress), programAddress)).market;
}

/** `sweep_fees`'s accounts for `node`: the treasury from the config. */
export async function sweepFeesArgsOf(rpc: Rpc<SolanaRpcApi>, node: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<SweepFeesArgs> {
  return { node, treasury: (await readConfig(rpc, programAddress)).treasury };
}

/** `sync_stake`'s accounts for `node`: its market. */
export async function syncStakeArgsOf(rpc: Rpc<SolanaRpcApi>, node: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<SyncStakeArgs> {
  return { node, market: (await readNode(rpc, node, programAddress)).market };
}

/** `reclaim_task`'s accounts for `task`: its provider. */
export async function reclaimTaskArgsOf(rpc: Rpc<SolanaRpcApi>, task: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<ReclaimTaskArgs> {
  const t = await readTask(rpc, task, programAddress);
  if (t.status !== TaskStatus.Claimed) throw new Error(`task ${task} is ${TaskStatus[t.status]}, only a Claimed task is reclaimed`);
  return { task, providerNode: t.provider };
}

/** `close_task`'s accounts for `task` as the chain stands: its client and refund account; the
 * client's associated account when the refund account is gone; the treasury only when the
 * escrow holds more than the refund (tokens a stranger sent in). */
export async function closeTaskArgsOf(
  rpc: Rpc<SolanaRpcApi>,
  task: Address,
  stakeMint: Address,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
): Promise<CloseTaskArgs> {
  const t = await readTask(rpc, task, programAddress);
  const escrow = await liveTokenBalance(rpc, await escrowAddress(task, programAddress), stakeMint);
  if (escrow === undefined) throw new Error(`the escrow of task ${task} is not a token account of the stake mint ${stakeMint}`);
  const refund = t.status === TaskStatus.Accepted ? t.clientExtra : t.reward + t.clientExtra;
  const refundToAssociated = (await liveTokenBalance(rpc, t.clientToken, stakeMint)) === undefined;
  const args: CloseTaskArgs = { task, client: t.client, clientToken: t.clientToken, refundToAssociated };
  if (escrow > refund) args.treasury = (await readConfig(rpc, programAddress)).treasury;
  return args;
}
