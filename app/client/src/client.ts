// The client object a dApp starts from, as `@nosana/kit` and Squads' SDK have it: a network by
// name (or any RPC), the program's address once, and services — tokens (the stake mint's
// decimals read from chain, amounts in and out), tasks, staking (a node's own actions) and fees,
// every action in three layers: instructions with their PDAs filled in, an unsigned transaction
// for a wallet (its fee payer anyone's: a relayer may pay, the actor signs as itself, each
// party signing in turn), send and confirm; queries, and a watch.

import {
  assertIsSendableTransaction,
  assertIsTransactionWithBlockhashLifetime,
  createSolanaRpc,
  createSolanaRpcSubscriptions,
  getBase64EncodedWireTransaction,
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getSignatureFromTransaction,
  getTransactionDecoder,
  getTransactionLifetimeConstraintFromCompiledTransactionMessage,
  compileTransaction,
  partiallySignTransactionMessageWithSigners,
  partiallySignTransactionWithSigners,
  signTransactionWithSigners,
  type Address,
  type Base64EncodedWireTransaction,
  type Instruction,
  type SendableTransaction,
  type Transaction,
  type TransactionMessage,
  type TransactionMessageWithFeePayer,
  type TransactionMessageWithLifetime,
  type TransactionMessageWithSigners,
  type TransactionModifyingSigner,
  type TransactionPartialSigner,
  type TransactionSigner,
  type TransactionWithLifetime,
} from '@solana/kit';
import { availabilityOf, challengeAvailability, challengeAvailabilityInstructions, fetchResultOrPublished, type ChallengeAvailabilityArgs } from './availability';
import { buildTransaction, type FeeOptions } from './budget';
import { fetchTask } from './generated/accounts/task';
import { committedOf } from './history';
import type { FetchOptions } from './results';
import { formatAmount, parseUiAmount, toUiAmount, U64_MAX } from './amounts';
import { getCancelTaskInstruction } from './generated/instructions/cancelTask';
import { COMPUTE_MARKET_PROGRAM_ADDRESS } from './generated/programs';
import { endpointsOf, type Endpoints, type NetworkName } from './network';
import { marketAddress, nodeAddress } from './pda';
import { nodesOf, tasksWhere, votesOf, type TaskFilter } from './queries';
import {
  claimEarningsInstructions,
  closeNodeInstructions,
  closeTaskArgsOf,
  closeTaskInstructions,
  expireTaskInstructions,
  nodeMarketOf,
  readNode,
  reclaimTaskArgsOf,
  reclaimTaskInstructions,
  registerNodeInstructions,
  requestUnstakeInstructions,
  stakeInstructions,
  sweepFeesArgsOf,
  sweepFeesInstructions,
  syncStakeArgsOf,
  syncStakeInstructions,
  updateNodeInstructions,
  withdrawInstructions,
  type CloseNodeArgs,
  type MarketRef,
  type PayoutArgs,
  type RegisterNodeArgs,
  type RequestUnstakeArgs,
  type StakeArgs,
  type UpdateNodeArgs,
} from './staking';
import { assertHoldsTokens, postTask, postTaskInstructions, refusalOf, sendAndConfirm, sendInstructions, stakeTokenOf, tokenAccountOf, tokenBalance, type PostTaskArgs } from './tx';
import { watchTask, type WatchOptions } from './watch';

/** A message [`partiallySign`] takes: `transaction(...)`'s, or any with a fee payer, a lifetime
 * and its signers in its instructions. */
export type SignableMessage = TransactionMessage & TransactionMessageWithFeePayer & TransactionMessageWithLifetime & TransactionMessageWithSigners;

/** A transaction some of whose signers have signed: its wire form ([`toWire`]) travels to
 * the others, who [`complete`] it. */
export type PartlySignedTransaction = Transaction & TransactionWithLifetime;

/** Signs `message` with `signers` (default: every signer the message carries — its fee payer
 * when that is a signer, and its instructions' signers), leaving the other signatures empty:
 * kit's `partiallySignTransactionMessageWithSigners` / `partiallySignTransactionWithSigners`.
 * A signer that is not one of the message's is refused. */
export async function partiallySign(
  message: SignableMessage,
  signers?: readonly (TransactionPartialSigner | TransactionModifyingSigner)[],
): Promise<PartlySignedTransaction> {
  if (!signers) return partiallySignTransactionMessageWithSigners(message);
  return partiallySignTransactionWithSigners(signers, compileTransaction(message));
}

/** The addresses whose signatures `tx` still lacks. */
export function missingSignatures(tx: Transaction): Address[] {
  return Object.entries(tx.signatures)
    .filter(([, s]) => s == null)
    .map(([a]) => a as Address);
}

/** `tx` in wire form, base64 (what `sendTransaction` and wallets take). */
export function toWire(tx: Transaction): Base64EncodedWireTransaction {
  return getBase64EncodedWireTransaction(tx);
}

/** A transaction from its wire form, with its lifetime read from its message (a blockhash's
 * last valid block height is not in the message: it is left unknown, u64 max). */
export async function fromWire(wire: string): Promise<PartlySignedTransaction> {
  const tx = getTransactionDecoder().decode(getBase64Encoder().encode(wire));
  const lifetimeConstraint = await getTransactionLifetimeConstraintFromCompiledTransactionMessage(getCompiledTransactionMessageDecoder().decode(tx.messageBytes));
  return Object.freeze({ ...tx, lifetimeConstraint });
}

/** Adds `signers`' signatures to `tx` (or its wire form) and asserts that none is missing
 * (kit's `signTransactionWithSigners`; a missing one throws naming its address). Check what a
 * transaction from someone else does before signing it as its fee payer. */
export async function complete(
  tx: PartlySignedTransaction | string,
  signers: readonly (TransactionPartialSigner | TransactionModifyingSigner)[],
): Promise<SendableTransaction & PartlySignedTransaction> {
  return signTransactionWithSigners(signers, typeof tx === 'string' ? await fromWire(tx) : tx);
}

/** What a client connects to. */
export interface ComputeMarketOptions {
  /** `localnet`, `devnet`, `mainnet-beta`, or an RPC (and its websocket). */
  network: NetworkName | { rpc: string; ws?: string };
  /** The program (default: the address it is built with). */
  programAddress?: Address;
  /** The stake token's symbol, as the market's operators name it (`""` to show none). */
  symbol?: string;
}

/** The stake mint and its decimals. */
export interface StakeToken {
  mint: Address;
  decimals: number;
  symbol: string;
}

/** A client: `createComputeMarket({ network: 'devnet' })`. */
export function createComputeMarket(options: ComputeMarketOptions) {
  const endpoints: Endpoints = endpointsOf(options.network);
  const rpc = createSolanaRpc(endpoints.rpc);
  const rpcSubscriptions = createSolanaRpcSubscriptions(endpoints.ws);
  const kit = { rpc, rpcSubscriptions };
  const programAddress = options.programAddress ?? COMPUTE_MARKET_PROGRAM_ADDRESS;
  const cancelInstructions = (task: Address, client: TransactionSigner): Instruction[] => [getCancelTaskInstruction({ task, client }, { programAddress })];
  let token: Promise<StakeToken> | undefined;
  const stakeToken = (): Promise<StakeToken> =>
    (token ??= (async () => {
      const { mint, decimals } = await stakeTokenOf(rpc, programAddress);
      return { mint, decimals, symbol: options.symbol ?? '' };
    })().catch((e) => {
      token = undefined; // a failed read is asked again next time
      throw e;
    }));
  const mint = async () => (await stakeToken()).mint;
  /** `args` with its market: given, or the one its authority's node is in. */
  const inMarket = async <T extends { authority: TransactionSigner; market?: MarketRef }>(args: T): Promise<T & { market: MarketRef }> => ({
    ...args,
    market: args.market ?? (await nodeMarketOf(rpc, args.authority.address, programAddress)),
  });
  const send = (payer: TransactionSigner, instructions: Instruction[], fees?: FeeOptions) => sendInstructions(kit, payer, instructions, fees);
  const staking = {
    /** The address of the node of `authority`. */
    nodeAddress: (authority: Address) => nodeAddress(authority, programAddress),
    /** The node account of `authority`, checked. */
    node: async (authority: Address) => readNode(rpc, await nodeAddress(authority, programAddress), programAddress),
    /** `register_node`: the node and its stake vault created (the authority pays their rent). */
    registerInstructions: async (args: RegisterNodeArgs) => registerNodeInstructions(args, await mint(), programAddress),
    /** `update_node`: hardware and endpoint (the market: the node's when left out). */
    updateInstructions: async (args: OnNode<UpdateNodeArgs>) => updateNodeInstructions(await inMarket(args), programAddress),
    /** `stake`: tokens from the authority's account (default its associated one) into the vault. */
    stakeInstructions: async (args: OnNode<StakeArgs>) => stakeInstructions(await inMarket(args), await mint(), programAddress),
    /** `request_unstake`: free stake pending, withdrawable after the cooldown. */
    requestUnstakeInstructions: async (args: OnNode<RequestUnstakeArgs>) => requestUnstakeInstructions(await inMarket(args), programAddress),
    /** `withdraw`: the pending unstake out (to the authority's associated account, created if need be). */
    withdrawInstructions: async (args: PayoutArgs) => withdrawInstructions(args, await mint(), programAddress),
    /** `claim_earnings`: the node's rewards out. */
    claimEarningsInstructions: async (args: PayoutArgs) => claimEarningsInstructions(args, await mint(), programAddress),
    /** `close_node`: the node and its vault closed, their rent back. */
    closeInstructions: async (args: OnNode<CloseNodeArgs>) => closeNodeInstructions(await inMarket(args), await mint(), programAddress),
    /** `sync_stake` (anyone): a node's slashed stake off its market's totals. */
    syncInstructions: async (node: Address) => syncStakeInstructions(await syncStakeArgsOf(rpc, node, programAddress), programAddress),
    /** Registers a node. */
    register: async (args: RegisterNodeArgs, fees?: FeeOptions) => send(args.authority, await staking.registerInstructions(args), fees),
    /** Updates a node's hardware and endpoint. */
    update: async (args: OnNode<UpdateNodeArgs>, fees?: FeeOptions) => send(args.authority, await staking.updateInstructions(args), fees),
    /** Stakes (the source's balance checked first: a named error, not a failed simulation). */
    stake: async (args: OnNode<StakeArgs>, fees?: FeeOptions) => {
      const source = args.source ?? (await tokenAccountOf(args.authority.address, await mint()));
      await assertHoldsTokens(kit, args.authority.address, args.amount, 'the stake', programAddress, source);
      return send(args.authority, await staking.stakeInstructions({ ...args, source }), fees);
    },
    /** Requests an unstake. */
    requestUnstake: async (args: OnNode<RequestUnstakeArgs>, fees?: FeeOptions) => send(args.authority, await staking.requestUnstakeInstructions(args), fees),
    /** Withdraws the pending unstake (`args.payer`, if given, pays the fees too). */
    withdraw: async (args: PayoutArgs, fees?: FeeOptions) => send(args.payer ?? args.authority, await staking.withdrawInstructions(args), fees),
    /** Claims the node's earnings (`args.payer`, if given, pays the fees too). */
    claimEarnings: async (args: PayoutArgs, fees?: FeeOptions) => send(args.payer ?? args.authority, await staking.claimEarningsInstructions(args), fees),
    /** Closes the node (`args.payer`, if given, pays the fees too). */
    close: async (args: OnNode<CloseNodeArgs>, fees?: FeeOptions) => send(args.payer ?? args.authority, await staking.closeInstructions(args), fees),
    /** Syncs a node's stake, `payer` paying the fees. */
    sync: async (node: Address, payer: TransactionSigner, fees?: FeeOptions) => send(payer, await staking.syncInstructions(node), fees),
  };
  /** Tasks: instructions, transactions, send; queries and a watch. */
  const tasks = {
    /** The task's address and the instructions that post it. */
    postInstructions: async (args: PostTaskArgs) => postTaskInstructions(args, (await stakeToken()).mint, programAddress),
    /** The instruction that cancels an Open task (its client signs; the escrow is refunded
     * when it is closed). */
    cancelInstructions,
    /** `expire_task` (anyone): an Open task past its deadline ends. */
    expireInstructions: (task: Address) => expireTaskInstructions(task, programAddress),
    /** `reclaim_task` (anyone): a Claimed task past its submit deadline reopens (its provider
     * read from the task). */
    reclaimInstructions: async (task: Address) => reclaimTaskInstructions(await reclaimTaskArgsOf(rpc, task, programAddress), programAddress),
    /** `close_task` (anyone): a finished task closed, the client refunded; the refund
     * account, the client's associated account and the treasury as the chain stands (with
     * `payer`, the client's associated account is created first when the refund goes there). */
    closeInstructions: async (task: Address, payer?: TransactionSigner) => {
      const m = await mint();
      return closeTaskInstructions({ ...(await closeTaskArgsOf(rpc, task, m, programAddress)), payer }, m, programAddress);
    },
    /** Posts a task (the reward checked against the client's balance first). */
    post: (args: PostTaskArgs, fees?: FeeOptions) => postTask(kit, args, programAddress, fees),
    /** Cancels an Open task. */
    cancel: (task: Address, client: TransactionSigner, fees?: FeeOptions) => send(client, cancelInstructions(task, client), fees),
    /** Expires a task, `payer` paying the fees. */
    expire: (task: Address, payer: TransactionSigner, fees?: FeeOptions) => send(payer, expireTaskInstructions(task, programAddress), fees),
    /** Reclaims a task, `payer` paying the fees. */
    reclaim: async (task: Address, payer: TransactionSigner, fees?: FeeOptions) => send(payer, await tasks.reclaimInstructions(task), fees),
    /** Closes a task, `payer` paying the fees (and the client's associated account, if needed). */
    close: async (task: Address, payer: TransactionSigner, fees?: FeeOptions) => send(payer, await tasks.closeInstructions(task, payer), fees),
    /** Live tasks by market, client and status. */
    where: (filter: TaskFilter) => tasksWhere(rpc, filter, programAddress),
    /** The task's states as the chain changes it, until it is closed or aborted; it
     * survives its websocket (re-made, on a fresh connection, while the account is polled). */
    watch: (task: Address, abortSignal?: AbortSignal, options: Omit<WatchOptions, 'abortSignal' | 'programAddress'> = {}) =>
      watchTask(kit, task, { freshSubscriptions: () => createSolanaRpcSubscriptions(endpoints.ws), ...options, abortSignal, programAddress }),
    /** The vote accounts of a task. */
    votes: (task: Address) => votesOf(rpc, task, programAddress),
    /** `challenge_availability` and its `availability_grow`s, for one transaction (PROTOCOL
     * §8.11): the account at the task's next nonce, the tiles checked against `maxTiles`, the
     * bond from `source` (default the challenger's associated stake-token account). */
    challengeAvailabilityInstructions: async (args: ChallengeAvailabilityArgs) => {
      const source = args.source ?? (await tokenAccountOf(args.challenger.address, await mint()));
      return challengeAvailabilityInstructions({ ...args, source }, (await fetchTask(rpc, args.task, { commitment: 'confirmed' })).data, programAddress);
    },
    /** Challenges a held Accepted result's availability (the verdict, the window and the bond
     * against the source's balance checked first). */
    challengeAvailability: (args: ChallengeAvailabilityArgs, fees?: FeeOptions) => challengeAvailability(kit, args, programAddress, fees),
    /** The availability accounts of a task (challenges and contests), with their data areas. */
    availability: (task: Address) => availabilityOf(rpc, task, programAddress),
    /** An Accepted task's result, every tile checked against its root: from its provider, then
     * from the tiles published on chain; a `ResultNotServed` says what to do when neither has it. */
    result: async (task: Address, options?: FetchOptions) => fetchResultOrPublished(rpc, task, await committedOf(rpc, task), options, programAddress),
  };
  /** Protocol fees a node accrued. */
  const protocolFees = {
    /** `sweep_fees` (anyone): the node's fees to the treasury (read from the config). */
    sweepInstructions: async (node: Address) => sweepFeesInstructions(await sweepFeesArgsOf(rpc, node, programAddress), programAddress),
    /** Sweeps the node's fees, `payer` paying the transaction's fees. */
    sweep: async (node: Address, payer: TransactionSigner, fees?: FeeOptions) => send(payer, await protocolFees.sweepInstructions(node), fees),
  };
  return {
    endpoints,
    rpc,
    rpcSubscriptions,
    programAddress,
    /** The stake token, and amounts in it. */
    tokens: {
      /** The mint (from the config account) and its decimals (from the mint), read once. */
      stakeToken,
      /** Base units as text: `"1.5 CMT"`. */
      format: async (base: bigint) => {
        const t = await stakeToken();
        return formatAmount(base, t.decimals, t.symbol);
      },
      /** Base units as a decimal string without the symbol. */
      toUi: async (base: bigint) => toUiAmount(base, (await stakeToken()).decimals),
      /** Typed text (`"1.5"`) as base units; throws naming what is wrong. */
      parse: async (text: string) => parseUiAmount(text, (await stakeToken()).decimals),
      /** Base units `owner` holds in its stake-token account (0 before it exists). */
      balanceOf: async (owner: Address) => tokenBalance(rpc, await tokenAccountOf(owner, (await stakeToken()).mint)),
    },
    /** Tasks: instructions, transactions, send; queries and a watch. */
    tasks,
    /** The nodes of a market, by its id. */
    nodes: async (market: number) => nodesOf(rpc, await marketAddress(market, programAddress), programAddress),
    /** A node's own actions (its authority signs), and `sync` (anyone). */
    staking,
    /** Protocol fees a node accrued. */
    fees: protocolFees,
    /** An unsigned transaction of `instructions` paid by `feePayer`, with its compute-unit limit
     * and priority fee: an address (a wallet, or a relayer, signs later) or a signer. The
     * instructions' signers (the actor) need not be the fee payer. */
    transaction: (feePayer: Address | TransactionSigner, instructions: Instruction[], fees?: FeeOptions) => buildTransaction(rpc, feePayer, instructions, fees),
    /** Signs a message with some of its signers; the rest sign it later ([`partiallySign`]). */
    partiallySign,
    /** Adds the remaining signatures ([`complete`]). */
    complete,
    /** Signs with `payer` (and the instructions' signers), sends and confirms. */
    send,
    /** Sends and confirms a fully signed transaction (one [`complete`]d, or from [`fromWire`]);
     * returns its signature, polling its status as `send` does. A blockhash lifetime whose
     * last valid height is unknown (from the wire) is given the current height + 150 (a
     * blockhash is valid 150 blocks at most). */
    sendSigned: async (tx: PartlySignedTransaction): Promise<string> => {
      let lastValid: bigint;
      try {
        assertIsSendableTransaction(tx);
        assertIsTransactionWithBlockhashLifetime(tx);
        lastValid = tx.lifetimeConstraint.lastValidBlockHeight;
        if (lastValid === U64_MAX) lastValid = (await rpc.getBlockHeight({ commitment: 'confirmed' }).send()) + 150n;
      } catch (e) {
        throw refusalOf(e);
      }
      return sendAndConfirm(rpc, lastValid, undefined, async () => {
        await rpc.sendTransaction(toWire(tx), { encoding: 'base64', preflightCommitment: 'confirmed' }).send();
        return getSignatureFromTransaction(tx);
      });
    },
  };
}

/** Node-action arguments for the client object: the market may be left out (the node's is read). */
export type OnNode<T extends { market: MarketRef }> = Omit<T, 'market'> & { market?: MarketRef };

/** A client made by [`createComputeMarket`]. */
export type ComputeMarket = ReturnType<typeof createComputeMarket>;
