// The client object a dApp starts from, as `@nosana/kit` and Squads' SDK have it: a network by
// name (or any RPC), the program's address once, and services — tokens (the stake mint's
// decimals read from chain, amounts in and out), tasks (every action in three layers:
// instructions with their PDAs filled in, an unsigned transaction for a wallet, send and
// confirm), queries, and a watch.

import { createSolanaRpc, createSolanaRpcSubscriptions, type Address, type Instruction, type TransactionSigner } from '@solana/kit';
import { buildTransaction, type FeeOptions } from './budget';
import { formatAmount, parseUiAmount, toUiAmount } from './amounts';
import { getCancelTaskInstruction } from './generated/instructions/cancelTask';
import { COMPUTE_MARKET_PROGRAM_ADDRESS } from './generated/programs';
import { endpointsOf, type Endpoints, type NetworkName } from './network';
import { marketAddress } from './pda';
import { nodesOf, tasksWhere, votesOf, type TaskFilter } from './queries';
import { postTask, postTaskInstructions, sendInstructions, stakeTokenOf, tokenAccountOf, tokenBalance, type PostTaskArgs } from './tx';
import { watchTask } from './watch';

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
    tasks: {
      /** The task's address and the instructions that post it. */
      postInstructions: async (args: PostTaskArgs) => postTaskInstructions(args, (await stakeToken()).mint, programAddress),
      /** The instruction that cancels an Open task (its client signs; the escrow is refunded
       * when it is closed). */
      cancelInstructions,
      /** Posts a task (the reward checked against the client's balance first). */
      post: (args: PostTaskArgs, fees?: FeeOptions) => postTask(kit, args, programAddress, fees),
      /** Cancels an Open task. */
      cancel: (task: Address, client: TransactionSigner, fees?: FeeOptions) => sendInstructions(kit, client, cancelInstructions(task, client), fees),
      /** Live tasks by market, client and status. */
      where: (filter: TaskFilter) => tasksWhere(rpc, filter, programAddress),
      /** The task's states as the chain changes it, until it is closed or aborted. */
      watch: (task: Address, abortSignal?: AbortSignal) => watchTask(kit, task, { abortSignal, programAddress }),
      /** The vote accounts of a task. */
      votes: (task: Address) => votesOf(rpc, task, programAddress),
    },
    /** The nodes of a market, by its id. */
    nodes: async (market: number) => nodesOf(rpc, await marketAddress(market, programAddress), programAddress),
    /** An unsigned transaction of `instructions` for a wallet to sign (fee payer an address)
     * or for signers here, with its compute-unit limit and priority fee. */
    transaction: (feePayer: Address | TransactionSigner, instructions: Instruction[], fees?: FeeOptions) => buildTransaction(rpc, feePayer, instructions, fees),
    /** Signs with `payer` (and the instructions' signers), sends and confirms. */
    send: (payer: TransactionSigner, instructions: Instruction[], fees?: FeeOptions) => sendInstructions(kit, payer, instructions, fees),
  };
}

/** A client made by [`createComputeMarket`]. */
export type ComputeMarket = ReturnType<typeof createComputeMarket>;
