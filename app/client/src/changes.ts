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

/** The Compute Budget program's instructions a wallet may add or replace: request heap frame
 * (1), set compute-unit limit (2), set compute-unit price (3), set loaded-accounts data size
 * limit (4). */
const BUDGET_KINDS = new Set([1, 2, 3, 4]);

/** Why `signed` is not `sent` save for compute-budget instructions, or `null` when it is not
 * (both are the wire bytes of a transaction *message*). */
export function messageChange(sent: Uint8Array, signed: Uint8Array): string | null {
  if (sent.length === signed.length && sent.every((b, i) => b === signed[i])) return null;
  const decode = (bytes: Uint8Array, what: string) => {
    const compiled = getCompiledTransactionMessageDecoder().decode(bytes);
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
  const budget = (ix: Instruction) => ix.programAddress === (COMPUTE_BUDGET_PROGRAM_ADDRESS as Address);
  for (const ix of b.message.instructions.filter(budget)) {
    if ((ix.accounts?.length ?? 0) > 0 || !ix.data || !BUDGET_KINDS.has(ix.data[0])) return 'a compute-budget instruction of a kind a wallet does not set';
  }
  const x = a.message.instructions.filter((ix) => !budget(ix));
  const y = b.message.instructions.filter((ix) => !budget(ix));
  if (x.length !== y.length) return `the instructions (${x.length} → ${y.length})`;
  for (let i = 0; i < x.length; i++) {
    if (x[i].programAddress !== y[i].programAddress) return `instruction ${i + 1}'s program (${x[i].programAddress} → ${y[i].programAddress})`;
    const ax = x[i].accounts ?? [];
    const ay = y[i].accounts ?? [];
    if (ax.length !== ay.length) return `instruction ${i + 1}'s accounts (${ax.length} → ${ay.length})`;
    for (let j = 0; j < ax.length; j++) {
      if (ax[j].address !== ay[j].address) return `instruction ${i + 1}'s account ${j + 1} (${ax[j].address} → ${ay[j].address})`;
      if (ax[j].role !== ay[j].role) return `instruction ${i + 1}'s account ${j + 1} (${ax[j].address}): its signer or writable flag`;
    }
    const dx = x[i].data ?? new Uint8Array();
    const dy = y[i].data ?? new Uint8Array();
    if (dx.length !== dy.length || dx.some((v, k) => v !== dy[k])) return `instruction ${i + 1}'s data`;
  }
  return null;
}
