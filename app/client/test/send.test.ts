// Sending against a scripted RPC node: signed here and sent to the RPC, or signed and sent by
// a wallet that sends for itself; confirmation polled over HTTP; a failure on chain named as
// the program's error; a transaction whose blockhash passed named as expired.

import { describe, expect, it } from 'vitest';
import { address, generateKeyPairSigner, getBase58Encoder, type Instruction, type TransactionSendingSigner } from '@solana/kit';
import { confirmSignature, ProgramRefusal, sendInstructions, UnconfirmedTransaction } from '../src';
import { BLOCKHASH, scripted } from './scripted';

const program = address('Stake11111111111111111111111111111111111111');
const ix: Instruction = { programAddress: program, accounts: [], data: new Uint8Array([1]) };
const fixed = { computeUnits: 10_000, priorityFee: 0n } as const;
const confirmedAfter = (n: number) => {
  let polls = 0;
  return () => ({ value: [++polls < n ? null : { confirmationStatus: 'confirmed', err: null }] });
};

describe('sendInstructions', () => {
  it('signs here, sends to the RPC, tells onSent, and polls until confirmed', async () => {
    const payer = await generateKeyPairSigner();
    let wire: string | undefined;
    const { rpc, calls } = scripted({
      getLatestBlockhash: () => BLOCKHASH,
      sendTransaction: (w: string) => ((wire = w), 'sig'),
      getSignatureStatuses: confirmedAfter(3),
      getBlockHeight: () => 50n,
    });
    let sent: string | undefined;
    const sig = await sendInstructions({ rpc, rpcSubscriptions: {} as any }, payer, [ix], { ...fixed, onSent: (s) => (sent = s) });
    expect(sent).toBe(sig);
    expect(wire).toBeTypeOf('string');
    expect(calls.filter((c) => c.method === 'getSignatureStatuses')).toHaveLength(3);
    expect(calls.map((c) => c.method)).not.toContain('signatureNotifications');
  });

  it('lets a wallet that sends for itself sign and send, and confirms its signature', async () => {
    const key = await generateKeyPairSigner();
    const sigBytes = new Uint8Array(64).fill(9);
    const given: unknown[] = [];
    const wallet: TransactionSendingSigner = {
      address: key.address,
      signAndSendTransactions: async (txs) => (given.push(...txs), [sigBytes as any]),
    };
    const { rpc, calls } = scripted({ getLatestBlockhash: () => BLOCKHASH, getBlockHeight: () => 50n, getSignatureStatuses: confirmedAfter(1) });
    const sig = await sendInstructions({ rpc, rpcSubscriptions: {} as any }, wallet, [ix], fixed);
    expect(given).toHaveLength(1);
    expect(calls.map((c) => c.method)).not.toContain('sendTransaction');
    expect(Uint8Array.from(getBase58Encoder().encode(sig))).toEqual(sigBytes);
  });

  it("names the program's error when the transaction failed on chain", async () => {
    const payer = await generateKeyPairSigner();
    const { rpc } = scripted({
      getLatestBlockhash: () => BLOCKHASH,
      sendTransaction: () => 'sig',
      getBlockHeight: () => 50n,
      getSignatureStatuses: () => ({ value: [{ confirmationStatus: 'confirmed', err: { InstructionError: [1, { Custom: 6000 }] } }] }),
    });
    const e = await sendInstructions({ rpc, rpcSubscriptions: {} as any }, payer, [ix], fixed).catch((x) => x);
    expect(e).toBeInstanceOf(ProgramRefusal);
    expect(e.errorName).toBeTypeOf('string');
    expect(e.code).toBe(6000);
  });
});

describe('after sending', () => {
  it('says the outcome is unknown, not refused, when the RPC fails while confirming', async () => {
    const payer = await generateKeyPairSigner();
    const { rpc } = scripted({
      getLatestBlockhash: () => BLOCKHASH,
      sendTransaction: () => 'sig',
      getBlockHeight: () => {
        throw new Error('HTTP 503');
      },
    });
    const e = await sendInstructions({ rpc, rpcSubscriptions: {} as any }, payer, [ix], fixed).catch((x) => x);
    expect(e).toBeInstanceOf(UnconfirmedTransaction);
    expect(e.message).toMatch(/was sent, but its confirmation could not be read \(HTTP 503\)/);
  });
});

describe('confirmSignature', () => {
  it('says a transaction expired once the cluster passes its last valid block height', async () => {
    const { rpc } = scripted({ getSignatureStatuses: () => ({ value: [null] }), getBlockHeight: () => 101n });
    await expect(confirmSignature(rpc, 'x' as any, 100n)).rejects.toThrow(/expired before it landed/);
  });
});
