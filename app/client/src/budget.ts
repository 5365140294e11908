// Transactions as a busy cluster takes them: a compute-unit limit from simulation (with a
// margin) and a priority fee from the cluster's recent fees over the accounts the transaction
// writes, as instructions of the Compute Budget program in front of the program's own. The
// message is built unsigned for a wallet (fee payer an address) or for signers here.

import {
  appendTransactionMessageInstructions,
  createTransactionMessage,
  isWritableRole,
  pipe,
  prependTransactionMessageInstructions,
  setTransactionMessageFeePayer,
  setTransactionMessageFeePayerSigner,
  setTransactionMessageLifetimeUsingBlockhash,
  type Address,
  type Instruction,
  type Rpc,
  type SolanaRpcApi,
  type TransactionSigner,
} from '@solana/kit';
import {
  estimateComputeUnitLimitFactory,
  getSetComputeUnitLimitInstruction,
  getSetComputeUnitPriceInstruction,
} from '@solana-program/compute-budget';

/** How a transaction pays for its compute. */
export interface FeeOptions {
  /** Its compute-unit limit: a number, or `'simulate'` (the default): the units a simulation
   * used, times `margin`. */
  computeUnits?: number | 'simulate';
  /** Over the simulated units (default 1.2, and at least 1 000 units more). */
  margin?: number;
  /** Priority fee in micro-lamports a compute unit: a number (0 for none), or `'auto'` (the
   * default): [`recentPriorityFee`] over the accounts it writes. */
  priorityFee?: bigint | 'auto';
  /** The percentile of recent fees `'auto'` takes (default 75). */
  percentile?: number;
}

/** Most compute units a transaction may ask for. */
export const MAX_COMPUTE_UNITS = 1_400_000;

/** The `percentile`th of the fees recent blocks' transactions writing `accounts` paid
 * (`getRecentPrioritizationFees`), micro-lamports a compute unit; 0 when the node has none. */
export async function recentPriorityFee(rpc: Rpc<SolanaRpcApi>, accounts: Address[], percentile = 75): Promise<bigint> {
  if (!(percentile >= 0 && percentile <= 100)) throw new Error(`a percentile is 0‥100, not ${percentile}`);
  const recent = await rpc.getRecentPrioritizationFees(accounts.slice(0, 128)).send();
  const fees = recent.map((f) => BigInt(f.prioritizationFee)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  if (fees.length === 0) return 0n;
  return fees[Math.min(fees.length - 1, Math.floor((fees.length * percentile) / 100))];
}

/** The accounts `instructions` write, each once. */
export function writableAccounts(instructions: readonly Instruction[]): Address[] {
  const out = new Set<Address>();
  for (const ix of instructions) for (const a of ix.accounts ?? []) if (isWritableRole(a.role)) out.add(a.address);
  return [...out];
}

/** A version-0 transaction message of `instructions`, paid by `feePayer` (a signer, or the
 * address of a wallet that will sign it), with a recent blockhash, and the compute-unit limit
 * and priority fee of `fees` in front. Returns the message and the figures chosen. */
export async function buildTransaction(
  rpc: Rpc<SolanaRpcApi>,
  feePayer: Address | TransactionSigner,
  instructions: Instruction[],
  fees: FeeOptions = {},
) {
  const { value: blockhash } = await rpc.getLatestBlockhash({ commitment: 'confirmed' }).send();
  const base = pipe(
    createTransactionMessage({ version: 0 }),
    (m) =>
      typeof feePayer === 'string' ? setTransactionMessageFeePayer(feePayer, m) : setTransactionMessageFeePayerSigner(feePayer, m),
    (m) => setTransactionMessageLifetimeUsingBlockhash(blockhash, m),
    (m) => appendTransactionMessageInstructions(instructions, m),
  );
  const priorityFee =
    fees.priorityFee === undefined || fees.priorityFee === 'auto'
      ? await recentPriorityFee(rpc, writableAccounts(instructions), fees.percentile)
      : fees.priorityFee;
  if (priorityFee < 0n) throw new Error(`a priority fee is not negative: ${priorityFee}`);
  const budget: Instruction[] = priorityFee > 0n ? [getSetComputeUnitPriceInstruction({ microLamports: priorityFee })] : [];
  let units: number;
  if (fees.computeUnits === undefined || fees.computeUnits === 'simulate') {
    const used = await estimateComputeUnitLimitFactory({ rpc })(prependTransactionMessageInstructions(budget, base));
    const margin = fees.margin ?? 1.2;
    if (!(margin >= 1)) throw new Error(`a compute-unit margin is at least 1, not ${margin}`);
    units = Math.min(MAX_COMPUTE_UNITS, Math.max(Math.ceil(used * margin), used + 1_000));
  } else {
    units = fees.computeUnits;
    if (!Number.isInteger(units) || units < 1 || units > MAX_COMPUTE_UNITS) throw new Error(`a compute-unit limit is 1‥${MAX_COMPUTE_UNITS}, not ${units}`);
  }
  const message = prependTransactionMessageInstructions([getSetComputeUnitLimitInstruction({ units }), ...budget], base);
  return { message, computeUnits: units, priorityFee, lastValidBlockHeight: blockhash.lastValidBlockHeight };
}
