// What a wallet changed in a transaction before signing it. Wallets add compute-budget
// instructions of their own (Phantom documents that it sets a priority fee on transactions
// that have none, or replaces one): those are accepted. Anything else — an account, an
// instruction's data, the fee payer, the blockhash, an address-lookup table — is a change the
// person did not review, and the dApp must refuse to send it.

import {
  decompileTransactionMessage,
  getCompiledTransactionMessageDecoder,
  type Address,
  type Instruction,
} from '@solana/kit';
import { COMPUTE_BUDGET_PROGRAM_ADDRESS } from '@solana-program/compute-budget';

/** The Compute Budget program's instructions a wallet may add or replace: set compute-unit
 * limit (2: a u32) and set compute-unit price (3: a u64), each once. A heap frame (1) or a loaded-accounts data limit
 * (4) from a wallet could only make the transaction fail, its fee paid. Kind → data length. */
const BUDGET_KINDS = new Map([
  [2, 5],
  [3, 9],
]);

/** The most a wallet's own priority fee may cost, lamports, unless the page's was higher
 * (0.001 SOL: far above what wallets set on a busy cluster, far below what a wallet gone wrong
 * could take). */
export const MAX_WALLET_PRIORITY_LAMPORTS = 1_000_000n;

/** A message's compute-unit limit and price, from its Compute Budget instructions (the
 * runtime's defaults where it has none: 200 000 units an instruction, no price). */
export function budgetOf(message: { instructions: readonly Instruction[] }): { units: bigint; microLamports: bigint } {
  let units: bigint | null = null;
  let microLamports = 0n;
  for (const ix of message.instructions) {
    if (ix.programAddress !== (COMPUTE_BUDGET_PROGRAM_ADDRESS as Address) || !ix.data) continue;
    const v = new DataView(ix.data.buffer, ix.data.byteOffset, ix.data.byteLength);
    if (ix.data[0] === 2 && ix.data.length === 5) units = BigInt(v.getUint32(1, true));
    if (ix.data[0] === 3 && ix.data.length === 9) microLamports = v.getBigUint64(1, true);
  }
  const others = message.instructions.filter((ix) => ix.programAddress !== (COMPUTE_BUDGET_PROGRAM_ADDRESS as Address)).length;
  return { units: units ?? 200_000n * BigInt(others), microLamports };
}

/** Lamports a priority fee of `microLamports` a unit costs over `units`. */
const priorityLamports = (b: { units: bigint; microLamports: bigint }) => (b.units * b.microLamports + 999_999n) / 1_000_000n;

/** Why `signed` is not `sent` save for compute-budget instructions, or `null` when it is not
 * (both are the wire bytes of a transaction *message*). A wallet's budget is held too: its
 * compute-unit limit no lower than the one sent (a transaction that runs out still pays), its
 * priority fee at most `maxPriorityLamports` or the one sent, whichever is more. */
export function messageChange(sent: Uint8Array, signed: Uint8Array, { maxPriorityLamports = MAX_WALLET_PRIORITY_LAMPORTS } = {}): string | null {
  if (sent.length === signed.length && sent.every((b, i) => b === signed[i])) return null;
  const decode = (bytes: Uint8Array, what: string) => {
    const [compiled, end] = getCompiledTransactionMessageDecoder().read(bytes, 0);
    if (end !== bytes.length) throw new Error(`${what} has ${bytes.length - end} bytes after its message`);
    if ('addressTableLookups' in compiled && (compiled.addressTableLookups?.length ?? 0) > 0) {
      throw new Error(`${what} uses address-lookup tables`);
    }
    return { compiled, message: decompileTransactionMessage(compiled) };
  };
  let a, b;
  try {
    a = decode(sent, 'the transaction sent');
  } catch (e) {
    return `the transaction sent could not be read: ${(e as Error).message}`;
  }
  try {
    b = decode(signed, 'the signed transaction');
  } catch (e) {
    return (e as Error).message.startsWith('the signed') ? `${(e as Error).message} the page did not put there` : `the signed transaction could not be read: ${(e as Error).message}`;
  }
  if (a.compiled.version !== b.compiled.version) return `the transaction's version (${a.compiled.version} → ${b.compiled.version})`;
  if (a.message.feePayer.address !== b.message.feePayer.address) return `the fee payer (${a.message.feePayer.address} → ${b.message.feePayer.address})`;
  if (a.compiled.lifetimeToken !== b.compiled.lifetimeToken) return `the blockhash (${a.compiled.lifetimeToken} → ${b.compiled.lifetimeToken})`;
  // the accounts the transaction loads and who must sign: only the Compute Budget program may
  // join (an unused account can still be locked writable, an extra signer costs a fee)
  const ha = a.compiled.header;
  const hb = b.compiled.header;
  if (ha.numSignerAccounts !== hb.numSignerAccounts || ha.numReadonlySignerAccounts !== hb.numReadonlySignerAccounts) {
    return `the signers (${ha.numSignerAccounts} → ${hb.numSignerAccounts} required signatures)`;
  }
  const role = (c: typeof a.compiled, i: number) => {
    const h = c.header;
    const n = c.staticAccounts.length;
    const signer = i < h.numSignerAccounts;
    const writable = signer ? i < h.numSignerAccounts - h.numReadonlySignerAccounts : i < n - h.numReadonlyNonSignerAccounts;
    return `${signer ? 's' : ''}${writable ? 'w' : 'r'}`;
  };
  const roles = new Map(a.compiled.staticAccounts.map((k, i) => [k as string, role(a.compiled, i)]));
  for (const [i, k] of b.compiled.staticAccounts.entries()) {
    const was = roles.get(k);
    if (was === undefined && k !== COMPUTE_BUDGET_PROGRAM_ADDRESS) return `the accounts it loads (${k} added)`;
    if (was !== undefined && was !== role(b.compiled, i)) return `account ${k}'s signer or writable flag`;
  }
  const budget = (ix: Instruction) => ix.programAddress === (COMPUTE_BUDGET_PROGRAM_ADDRESS as Address);
  const kinds = new Set<number>();
  for (const ix of b.message.instructions.filter(budget)) {
    const kind = ix.data?.[0] ?? -1;
    if ((ix.accounts?.length ?? 0) > 0 || !BUDGET_KINDS.has(kind) || ix.data!.length !== BUDGET_KINDS.get(kind)) return 'a compute-budget instruction of a kind a wallet does not set';
    if (kinds.has(kind)) return 'a compute-budget instruction twice (the cluster refuses it)';
    kinds.add(kind);
  }
  const ba = budgetOf(a.message);
  const bb = budgetOf(b.message);
  if (bb.units < ba.units) return `the compute-unit limit (${ba.units} → ${bb.units}: too few to run it, the fee still paid)`;
  const most = priorityLamports(ba) > maxPriorityLamports ? priorityLamports(ba) : maxPriorityLamports;
  if (priorityLamports(bb) > most) return `the priority fee (to ${priorityLamports(bb)} lamports, more than the ${most} allowed)`;
  const x = a.message.instructions.filter((ix) => !budget(ix));
  const y = b.message.instructions.filter((ix) => !budget(ix));
  if (x.length !== y.length) return `the instructions (${x.length} → ${y.length})`;
  for (let i = 0; i < x.length; i++) {
    if (x[i].programAddress !== y[i].programAddress) return `instruction ${i + 1}'s program (${x[i].programAddress} → ${y[i].programAddress})`;
    const ax = x[i].accounts ?? [];
    const ay = y[i].accounts ?? [];
    if (ax.length !== ay.length) return `instruction ${i + 1}'s accounts (${ax.length} → ${ay.length})`;
    for (let j = 0; j < ax.length; j++) {
      if (!ax[j] || !ay[j]) return `instruction ${i + 1}'s account ${j + 1} (not in the message)`;
      if (ax[j].address !== ay[j].address) return `instruction ${i + 1}'s account ${j + 1} (${ax[j].address} → ${ay[j].address})`;
      if (ax[j].role !== ay[j].role) return `instruction ${i + 1}'s account ${j + 1} (${ax[j].address}): its signer or writable flag`;
    }
    const dx = x[i].data ?? new Uint8Array();
    const dy = y[i].data ?? new Uint8Array();
    if (dx.length !== dy.length || dx.some((v, k) => v !== dy[k])) return `instruction ${i + 1}'s data`;
  }
  return null;
}
