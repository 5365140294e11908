// Sending the program's instructions from a dApp: the stake-token helpers (the client's
// associated token account, its balance), `postTask` on the generated instruction with every
// PDA filled in, and `sendInstructions`, which turns a refusal into the program's own error
// name and message (`ProgramRefusal`) rather than a custom-error number.

import {
  getBase58Decoder,
  getBase64EncodedWireTransaction,
  getSignatureFromTransaction,
  isTransactionSendingSigner,
  signAndSendTransactionMessageWithSigners,
  signTransactionMessageWithSigners,
  type Signature,
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
 * the cluster, is a `ProgramRefusal` naming the program's error.
 *
 * A wallet that sends for itself (a `TransactionSendingSigner`: Wallet Standard's
 * `solana:signAndSendTransaction`) signs and sends; otherwise the transaction is signed here
 * (a `TransactionModifyingSigner` first, as kit orders them) and sent to the RPC. Either way
 * the confirmation is polled over HTTP, not awaited on the websocket, so a dropped
 * subscription cannot leave a sent transaction unconfirmed. */
export async function sendInstructions(client: KitClient, payer: TransactionSigner, instructions: Instruction[], fees: SendOptions = {}): Promise<string> {
  let built;
  try {
    built = await buildTransaction(client.rpc, payer, instructions, fees);
  } catch (e) {
    throw refusalOf(e);
  }
  const { message, lastValidBlockHeight } = built;
  return sendAndConfirm(client.rpc, lastValidBlockHeight, fees.onSent, async () => {
    if (isTransactionSendingSigner(payer)) return getBase58Decoder().decode(await signAndSendTransactionMessageWithSigners(message)) as Signature;
    const tx = await signTransactionMessageWithSigners(message);
    await client.rpc.sendTransaction(getBase64EncodedWireTransaction(tx), { encoding: 'base64', preflightCommitment: 'confirmed' }).send();
    return getSignatureFromTransaction(tx);
  });
}

/** The person said no in their wallet: nothing was signed or sent. Wallets say it in their
 * own words (Phantom and Solflare "User rejected the request." with EIP-1193's code 4001,
 * Backpack "Approval Denied"); a signer that hears one throws this, so a page can name it. */
export class SignRejected extends Error {
  override name = 'SignRejected';
  constructor(readonly wallet: string) {
    super(`you rejected the request in ${wallet}: nothing was signed or sent`);
  }
}

/** Whether `e`, thrown by a wallet asked to sign, is the person's refusal. */
export function isRejection(e: unknown): boolean {
  const x = e as { code?: unknown; message?: unknown; name?: unknown } | undefined;
  if (x instanceof SignRejected) return true;
  return x?.code === 4001 || /user rejected|rejected the request|approval denied|request (was )?(rejected|denied|cancel)|user (denied|cancel)/i.test(String(x?.message ?? ''));
}

/** A transaction signed and not yet sent. */
export interface SignedTransaction {
  signature: Signature;
  wire: ReturnType<typeof getBase64EncodedWireTransaction>;
  lastValidBlockHeight: bigint;
}

/** Signs `instructions` as [`sendInstructions`] would, without sending them, so that a dApp
 * can act between the signature and the send (upload the data the transaction names only once
 * the person has signed). `null` for a wallet that only signs and sends in one step: use
 * [`sendInstructions`] for it. A refusal in simulation is a `ProgramRefusal`; the person's
 * "no" in the wallet a `SignRejected`. */
export async function signInstructions(client: KitClient, payer: TransactionSigner, instructions: Instruction[], fees: FeeOptions = {}): Promise<SignedTransaction | null> {
  if (isTransactionSendingSigner(payer) && !('modifyAndSignTransactions' in payer) && !('signTransactions' in payer)) return null;
  let built;
  try {
    built = await buildTransaction(client.rpc, payer, instructions, fees);
  } catch (e) {
    throw refusalOf(e);
  }
  const tx = await signTransactionMessageWithSigners(built.message);
  return { signature: getSignatureFromTransaction(tx), wire: getBase64EncodedWireTransaction(tx), lastValidBlockHeight: built.lastValidBlockHeight };
}

/** Sends a transaction [`signInstructions`] signed and polls until it is confirmed, as
 * [`sendInstructions`] does. */
export async function sendSigned(client: KitClient, signed: SignedTransaction, onSent?: (signature: Signature) => void): Promise<string> {
  return sendAndConfirm(client.rpc, signed.lastValidBlockHeight, onSent, async () => {
    await client.rpc.sendTransaction(signed.wire, { encoding: 'base64', preflightCommitment: 'confirmed' }).send();
    return signed.signature;
  });
}

/** Runs `send` (it signs and sends a transaction valid to `lastValidBlockHeight`, returning
 * its signature), tells `onSent`, and polls until it is confirmed. A refusal before or on
 * chain is a `ProgramRefusal`, an expiry an `ExpiredTransaction`, and an RPC failure once it
 * was sent an `UnconfirmedTransaction` (it may have landed). */
export async function sendAndConfirm(
  rpc: Rpc<SolanaRpcApi>,
  lastValidBlockHeight: bigint,
  onSent: ((signature: Signature) => void) | undefined,
  send: () => Promise<Signature>,
): Promise<string> {
  let sent: string | undefined;
  try {
    const signature = await send();
    onSent?.(signature);
    sent = signature;
    await confirmSignature(rpc, signature, lastValidBlockHeight);
    return signature;
  } catch (e) {
    if (e instanceof ProgramRefusal || e instanceof ExpiredTransaction || e instanceof SignRejected) throw e;
    // after sending, an RPC failure says nothing of the transaction's fate
    if (sent) throw new UnconfirmedTransaction(sent, e);
    throw refusalOf(e);
  }
}

/** How a transaction is paid for, and who hears it was sent. */
export interface SendOptions extends FeeOptions {
  /** Called once the transaction is signed and sent, before it is confirmed (a dApp shows
   * its explorer link while it waits). */
  onSent?: (signature: Signature) => void;
}

/** A transaction that can no longer land: its blockhash has passed. */
export class ExpiredTransaction extends Error {
  override name = 'ExpiredTransaction';
}

/** A transaction sent whose outcome could not be read (the RPC failed while confirming): it may
 * have landed, so look it up before sending it again. */
export class UnconfirmedTransaction extends Error {
  override name = 'UnconfirmedTransaction';
  constructor(
    readonly signature: string,
    cause: unknown,
  ) {
    super(`the transaction ${signature} was sent, but its confirmation could not be read (${(cause as Error)?.message ?? cause}): it may have landed, look it up before sending it again`);
  }
}

/** How often [`confirmSignature`] asks. */
const CONFIRM_POLL_MS = 400;

/** Waits until `signature` is confirmed, polling `getSignatureStatuses`; throws the program's
 * refusal if it failed on chain, or says it expired once the cluster passes
 * `lastValidBlockHeight` without it (it can then never land: post again). */
export async function confirmSignature(rpc: Rpc<SolanaRpcApi>, signature: Signature, lastValidBlockHeight: bigint, abortSignal?: AbortSignal): Promise<void> {
  for (;;) {
    abortSignal?.throwIfAborted();
    // the height first, the status second: a status read after the height passed is final
    const passed = (await rpc.getBlockHeight({ commitment: 'confirmed' }).send()) > lastValidBlockHeight;
    const [status] = (await rpc.getSignatureStatuses([signature], { searchTransactionHistory: passed }).send()).value;
    if (status) {
      if (status.err) throw refusalOf(transactionErrorOf(status.err, signature));
      if (status.confirmationStatus === 'confirmed' || status.confirmationStatus === 'finalized') return;
    } else if (passed) {
      throw new ExpiredTransaction(`the transaction ${signature} expired before it landed (its blockhash passed block height ${lastValidBlockHeight}): nothing was done, send it again`);
    }
    await new Promise((r) => setTimeout(r, CONFIRM_POLL_MS));
  }
}

/** A failed transaction's status error (`{ InstructionError: [i, { Custom: n }] }`) in the
 * shape [`programErrorOf`] reads. */
function transactionErrorOf(err: unknown, signature: string): Error {
  const custom = (err as any)?.InstructionError?.[1]?.Custom;
  const e = new Error(`the transaction ${signature} failed on chain: ${JSON.stringify(err, (_, v) => (typeof v === 'bigint' ? Number(v) : v))}`);
  if (typeof custom === 'number' || typeof custom === 'bigint') (e as any).context = { code: Number(custom) };
  return e;
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

/** Throws a named `InsufficientTokens` refusal unless `owner`'s stake-token account (or
 * `account`, another of its token accounts) holds `amount` base units: said before anything is
 * signed, not found in a failed simulation. `what` names the amount ("the reward"). */
export async function assertHoldsTokens(
  client: Pick<KitClient, 'rpc'>,
  owner: Address,
  amount: bigint,
  what: string,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
  account?: Address,
): Promise<void> {
  const { mint, decimals } = await stakeTokenOf(client.rpc, programAddress);
  const source = account ?? (await tokenAccountOf(owner, mint));
  const balance = await tokenBalance(client.rpc, source);
  if (balance < amount) {
    const ui = (x: bigint) => toUiAmount(x, decimals);
    throw new ProgramRefusal(
      'InsufficientTokens',
      undefined,
      `the ${account ? '' : "wallet's "}stake-token account ${source} holds ${ui(balance)} tokens, ${what} is ${ui(amount)}: fund it first`,
    );
  }
}

/** Posts a task: checks the client holds the reward first (a named error, not a failed
 * simulation), then sends. Returns the task's address and the signature. */
export async function postTask(
  client: KitClient,
  args: PostTaskArgs,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
  fees: SendOptions = {},
): Promise<{ task: Address; signature: string }> {
  await assertHoldsTokens(client, args.client.address, args.reward, 'the reward', programAddress);
  const { mint } = await stakeTokenOf(client.rpc, programAddress);
  const { task, instructions } = await postTaskInstructions(args, mint, programAddress);
  return { task, signature: await sendInstructions(client, args.client, instructions, fees) };
}
