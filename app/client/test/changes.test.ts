// A wallet's changes to a transaction before signing: its compute-budget instructions are
// accepted, any other change is named.
import { describe, expect, it } from 'vitest';
import {
  AccountRole,
  address,
  appendTransactionMessageInstructions,
  compileTransaction,
  createTransactionMessage,
  pipe,
  prependTransactionMessageInstructions,
  setTransactionMessageFeePayer,
  setTransactionMessageLifetimeUsingBlockhash,
  type Address,
  type Blockhash,
  type Instruction,
} from '@solana/kit';
import { getSetComputeUnitLimitInstruction, getSetComputeUnitPriceInstruction } from '@solana-program/compute-budget';
import { messageChange } from '../src/changes';

const payer = address('9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin');
const other = address('SysvarRent111111111111111111111111111111111');
const program = address('Stake11111111111111111111111111111111111111');
const hash = (h: string) => ({ blockhash: h as Blockhash, lastValidBlockHeight: 100n });
const H1 = 'EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG';
const H2 = '4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY';

function ix(acct: Address = other, data = [1, 2, 3], role = AccountRole.WRITABLE): Instruction {
  return { programAddress: program, accounts: [{ address: payer, role: AccountRole.WRITABLE_SIGNER }, { address: acct, role }], data: Uint8Array.from(data) };
}
function bytes(instructions: Instruction[], budget: Instruction[] = [], fee: Address = payer, h = H1) {
  const m = pipe(
    createTransactionMessage({ version: 0 }),
    (m) => setTransactionMessageFeePayer(fee, m),
    (m) => setTransactionMessageLifetimeUsingBlockhash(hash(h), m),
    (m) => appendTransactionMessageInstructions(instructions, m),
    (m) => prependTransactionMessageInstructions(budget, m),
  );
  return new Uint8Array(compileTransaction(m).messageBytes);
}
const limit = getSetComputeUnitLimitInstruction({ units: 50_000 });
const price = (p: number) => getSetComputeUnitPriceInstruction({ microLamports: p });

describe('messageChange', () => {
  const sent = bytes([ix()], [limit]);
  it('accepts the same message', () => expect(messageChange(sent, sent)).toBeNull());
  it("accepts a wallet's added priority fee", () => expect(messageChange(sent, bytes([ix()], [limit, price(5000)]))).toBeNull());
  it("accepts a wallet's replaced compute-budget instructions", () => {
    const withPrice = bytes([ix()], [limit, price(10)]);
    expect(messageChange(withPrice, bytes([ix()], [getSetComputeUnitLimitInstruction({ units: 80_000 }), price(9999)]))).toBeNull();
  });
  it('names a changed account', () => expect(messageChange(sent, bytes([ix(address('SysvarC1ock11111111111111111111111111111111'))], [limit]))).toMatch(/accounts it loads \(SysvarC1ock1+ added\)/));
  it("names a changed account's flags", () => expect(messageChange(sent, bytes([ix(other, [1, 2, 3], AccountRole.READONLY)], [limit]))).toMatch(/signer or writable/));
  it('names changed data', () => expect(messageChange(sent, bytes([ix(other, [1, 2, 4])], [limit]))).toMatch(/instruction 1's data/));
  it('names an added instruction', () => expect(messageChange(sent, bytes([ix(), ix()], [limit]))).toMatch(/instructions \(1 → 2\)/));
  it('names a changed fee payer', () => expect(messageChange(bytes([ix()], [limit]), bytes([ix()], [limit], other))).toMatch(/fee payer/));
  it('names a changed blockhash', () => expect(messageChange(sent, bytes([ix()], [limit], payer, H2))).toMatch(/blockhash/));
  it('names garbage', () => expect(messageChange(sent, Uint8Array.from([0x80, 1, 2]))).toMatch(/could not be read/));
  it('names an extra signer and trailing bytes', () => {
    const extraSigner: Instruction = { programAddress: program, accounts: [{ address: other, role: AccountRole.READONLY_SIGNER }], data: new Uint8Array() };
    expect(messageChange(sent, bytes([ix(), extraSigner], [limit]))).toMatch(/signers \(1 → 2/);
    expect(messageChange(sent, Uint8Array.from([...sent, 0]))).toMatch(/1 bytes after its message/);
  });
  it("holds a wallet's budget: a lower limit, a priority fee above the cap, a heap frame", () => {
    expect(messageChange(sent, bytes([ix()], [getSetComputeUnitLimitInstruction({ units: 10_000 })]))).toMatch(/compute-unit limit \(50000 → 10000/);
    // 50 000 units at 10^9 micro-lamports: 50 000 000 lamports, over the 1 000 000 allowed
    expect(messageChange(sent, bytes([ix()], [limit, price(1_000_000_000)]))).toMatch(/priority fee \(to 50000000 lamports, more than the 1000000 allowed\)/);
    expect(messageChange(sent, bytes([ix()], [limit, price(1_000_000_000)]), { maxPriorityLamports: 60_000_000n })).toBeNull();
    const heap: Instruction = { programAddress: limit.programAddress, data: Uint8Array.from([1, 0, 0, 1, 0]) };
    expect(messageChange(sent, bytes([ix()], [limit, heap]))).toMatch(/kind a wallet does not set/);
    expect(messageChange(sent, bytes([ix()], [limit, limit]))).toMatch(/twice/);
  });
});
