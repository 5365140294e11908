// Sending the program's instructions from a dApp: the stake-token helpers (the client's
// associated token account, its balance), `postTask` on the generated instruction with every
// PDA filled in, and `sendInstructions`, which turns a refusal into the program's own error
// name and message (`ProgramRefusal`) rather than a custom-error number.

import {
  getSignatureFromTransaction,
  sendAndConfirmTransactionFactory,
  signTransactionMessageWithSigners,
  assertIsTransactionWithBlockhashLifetime,
  type Address,
  type Instruction,
  type Rpc,
  type RpcSubscriptions,
  type SolanaRpcApi,
  type SolanaRpcSubscriptionsApi,
  type TransactionSigner,
} from '@solana/kit';
import { fetchMint, findAssociatedTokenPda, getCreateAssociatedTokenIdempotentInstruction, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import { toUiAmount } from './amounts';
import { buildTransaction, type FeeOptions } from './budget';
import { fetchConfig } from './generated/accounts/config';
import { ERRORS } from './generated/eventsIdl';
import { getPostTaskInstruction } from './generated/instructions/postTask';
import { COMPUTE_MARKET_PROGRAM_ADDRESS } from './generated/programs';
import { encodeJobSpec, type JobSpec } from './job';
import { configAddress, escrowAddress, marketAddress, taskAddress } from './pda';

/** A kit client: RPC and subscriptions. */
export interface KitClient {
  rpc: Rpc<SolanaRpcApi>;
  rpcSubscriptions: RpcSubscriptions<SolanaRpcSubscriptionsApi>;
}

/** The stake mint, from the config account. */
export async function stakeMintOf(rpc: Rpc<SolanaRpcApi>, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Address> {
  return (await fetchConfig(rpc, await configAddress(programAddress))).data.stakeMint;
}

/** The stake mint (from the config account) and its decimals (from the mint account). */
export async function stakeTokenOf(rpc: Rpc<SolanaRpcApi>, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<{ mint: Address; decimals: number }> {
  const mint = await stakeMintOf(rpc, programAddress);
  return { mint, decimals: (await fetchMint(rpc, mint)).data.decimals };
}

/** `owner`'s associated token account of `mint` (classic SPL Token, as the program requires). */
export async function tokenAccountOf(owner: Address, mint: Address): Promise<Address> {
  const [ata] = await findAssociatedTokenPda({ owner, mint, tokenProgram: TOKEN_PROGRAM_ADDRESS });
  return ata;
}

/** Base units in a token account; 0 when it does not exist yet. */
export async function tokenBalance(rpc: Rpc<SolanaRpcApi>, account: Address): Promise<bigint> {
  try {
    return BigInt((await rpc.getTokenAccountBalance(account, { commitment: 'confirmed' }).send()).value.amount);
  } catch (e) {
    if (String((e as Error).message).includes('could not find account')) return 0n;
    throw e;
  }
}

/** A transaction the program refused, with the program's error named. */
export class ProgramRefusal extends Error {
  constructor(
    /** The program's error name (`InsufficientFreeStake`, ...), or `undefined` for a non-program error. */
    readonly errorName: string | undefined,
    /** The custom code, when the program named one. */
    readonly code: number | undefined,
    message: string,
    /** The transaction's logs, when the node returned them. */
    readonly logs: readonly string[] = [],
  ) {
    super(message);
    this.name = 'ProgramRefusal';
  }
}

/** The program's error (name and message) in a refused transaction's error chain, if any. */
export function programErrorOf(e: unknown): { name: string; msg: string; code: number } | undefined {
  for (let x: any = e, depth = 0; x && depth < 8; x = x.cause, depth++) {
    const code = x?.context?.code;
    if (typeof code === 'number' && ERRORS[code]) return { ...ERRORS[code], code };
  }
  return undefined;
}

function logsOf(e: unknown): string[] {
  for (let x: any = e, depth = 0; x && depth < 8; x = x.cause, depth++) {
    if (Array.isArray(x?.context?.logs)) return x.context.logs as string[];
  }
  return [];
}

/** `e` as a `ProgramRefusal` naming the program's error where it has one. */
export function refusalOf(e: unknown): ProgramRefusal {
  if (e instanceof ProgramRefusal) return e;
  const p = programErrorOf(e);
  const logs = logsOf(e);
  if (p) return new ProgramRefusal(p.name, p.code, `the program refused the transaction: ${p.name} (${p.msg})`, logs);
  return new ProgramRefusal(undefined, undefined, `the transaction was refused: ${(e as Error).message}`, logs);
}

/** Signs `instructions` with `payer` (and any signers they carry), with the compute-unit limit
 * and priority fee of `fees` ([`buildTransaction`]: simulated and from recent fees by
 * default), sends and confirms them; returns the signature. A refusal, in simulation or on
 * the cluster, is a `ProgramRefusal` naming the program's error. */
export async function sendInstructions(client: KitClient, payer: TransactionSigner, instructions: Instruction[], fees: FeeOptions = {}): Promise<string> {
  let tx;
  try {
    const { message } = await buildTransaction(client.rpc, payer, instructions, fees);
    tx = await signTransactionMessageWithSigners(message);
    assertIsTransactionWithBlockhashLifetime(tx);
    await sendAndConfirmTransactionFactory(client)(tx, { commitment: 'confirmed' });
  } catch (e) {
    throw refusalOf(e);
  }
  return getSignatureFromTransaction(tx);
}

/** A task to post. */
export interface PostTaskArgs {
  /** Who posts and pays. */
  client: TransactionSigner;
  /** The market's id. */
  market: number;
  /** The client's id for the task (unique per client). */
  taskId: bigint;
  job: JobSpec;
  /** Reward in base units. */
  reward: bigint;
  /** Quorum V (0: the market's default). */
  quorum?: number;
  /** Samples k (0: the market's default). */
  samples?: number;
  /** The content store holding the inputs (content-hash jobs). */
  inputUri?: string;
  /** Preferred region (0: any). */
  region?: number;
}

/** The task's address and the instructions that post it (the client's token account created
 * first, idempotently, so a new wallet can post). */
export async function postTaskInstructions(
  args: PostTaskArgs,
  stakeMint: Address,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
): Promise<{ task: Address; instructions: Instruction[] }> {
  const owner = args.client.address;
  const clientToken = await tokenAccountOf(owner, stakeMint);
  const task = await taskAddress(owner, args.taskId, programAddress);
  const uri = args.inputUri ?? '';
  if (new TextEncoder().encode(uri).length > 128) throw new Error(`the input URI is longer than 128 bytes: ${uri}`);
  const instructions: Instruction[] = [
    getCreateAssociatedTokenIdempotentInstruction({ payer: args.client, ata: clientToken, owner, mint: stakeMint }),
    getPostTaskInstruction(
      {
        config: await configAddress(programAddress),
        market: await marketAddress(args.market, programAddress),
        task,
        escrow: await escrowAddress(task, programAddress),
        stakeMint,
        clientToken,
        client: args.client,
        taskId: args.taskId,
        job: encodeJobSpec(args.job),
        reward: args.reward,
        quorum: args.quorum ?? 0,
        samples: args.samples ?? 0,
        inputUri: uri,
        region: args.region ?? 0,
      },
      { programAddress },
    ),
  ];
  return { task, instructions };
}

/** Posts a task: checks the client holds the reward first (a named error, not a failed
 * simulation), then sends. Returns the task's address and the signature. */
export async function postTask(
  client: KitClient,
  args: PostTaskArgs,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
  fees: FeeOptions = {},
): Promise<{ task: Address; signature: string }> {
  const { mint, decimals } = await stakeTokenOf(client.rpc, programAddress);
  const account = await tokenAccountOf(args.client.address, mint);
  const balance = await tokenBalance(client.rpc, account);
  if (balance < args.reward) {
    const ui = (x: bigint) => toUiAmount(x, decimals);
    throw new ProgramRefusal(
      'InsufficientTokens',
      undefined,
      `the wallet's stake-token account ${account} holds ${ui(balance)} tokens, the reward is ${ui(args.reward)} (${balance} and ${args.reward} base units): fund it first`,
    );
  }
  const { task, instructions } = await postTaskInstructions(args, mint, programAddress);
  return { task, signature: await sendInstructions(client, args.client, instructions, fees) };
}
