// A task's history from its transactions against a fake RPC node: oldest first, failed
// transactions count for nothing, another task's events are left out, a refresh reads only the
// new transactions, and committedOf reads a closed task's outcome from it.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { address } from '@solana/kit';
import { committedOf, HISTORY_BATCH, taskHistory, type HistoryCache } from '../src';

const rust = JSON.parse(readFileSync(join(__dirname, 'fixtures', 'rust-written.json'), 'utf8'));
const [posted, closed] = rust.events;
const ours = 'C7dNHMTtuzBkddhdpqiXzaWZ2j3HZXPjstDXaY9PnwbJ';
const TASK = address(posted.data.task);

function fakeRpc(txs: { sig: string; slot: number; err?: boolean; unserved?: boolean; logs: string[] }[], account: unknown = null) {
  const reads: string[] = [];
  const rpc: any = {
    getSignaturesForAddress: (_a: string, o: { limit: number; before?: string }) => ({
      send: async () => {
        const newest = [...txs].reverse();
        const from = o.before ? newest.findIndex((t) => t.sig === o.before) + 1 : 0;
        return newest.slice(from, from + o.limit).map((t) => ({ signature: t.sig, slot: BigInt(t.slot), blockTime: null, err: t.err ? { InstructionError: [0, 'X'] } : null }));
      },
    }),
    getTransaction: (sig: string) => ({
      send: async () => {
        reads.push(sig);
        const t = txs.find((x) => x.sig === sig)!;
        if (t.unserved) return null;
        return { meta: { err: t.err ? {} : null, logMessages: t.logs } };
      },
    }),
    getAccountInfo: () => ({ send: async () => ({ value: account }) }),
  };
  return { rpc, reads };
}
const inOurs = (line: string) => [`Program ${ours} invoke [1]`, line, `Program ${ours} success`];

it('reads the history oldest first, leaves failed transactions and other programs out, and reads each transaction once', async () => {
  const txs = [
    { sig: 'a', slot: 5, logs: inOurs(posted.log) },
    { sig: 'b', slot: 6, err: true, logs: inOurs(closed.log) }, // failed: it closed nothing
    { sig: 'c', slot: 7, logs: [closed.log] }, // logged outside the program: forged
  ];
  const { rpc, reads } = fakeRpc(txs);
  const cache: HistoryCache = new Map();
  const h = await taskHistory(rpc, TASK, cache);
  expect(h.map((e) => [e.signature, e.failed, e.events.map((x) => x.name)])).toEqual([
    ['a', false, ['TaskPosted']],
    ['b', true, []],
    ['c', false, []],
  ]);
  expect(reads).toEqual(['a', 'c']);
  txs.push({ sig: 'd', slot: 9, logs: inOurs(closed.log) });
  const again = await taskHistory(rpc, TASK, cache);
  expect(again.at(-1)!.events.map((e) => e.name)).toEqual(['TaskClosed']);
  expect(reads).toEqual(['a', 'c', 'd']);
});

it("reads a closed task's outcome from its history, and refuses one a forger claims was Accepted", async () => {
  // closed Accepted by the program, but no ResultSubmitted: refused by name
  const { rpc } = fakeRpc([{ sig: 'a', slot: 5, logs: inOurs(posted.log) }, { sig: 'b', slot: 8, logs: inOurs(closed.log) }]);
  await expect(committedOf(rpc, TASK)).rejects.toThrow('no ResultSubmitted event for an Accepted task');
  // only a forged close: never finalized
  const forged = fakeRpc([{ sig: 'a', slot: 5, logs: inOurs(posted.log) }, { sig: 'b', slot: 8, logs: [closed.log] }]);
  await expect(committedOf(forged.rpc, TASK)).rejects.toThrow('closed and was never finalized');
  // lamports sent to the closed address make an empty System account: still read from the history
  const system = fakeRpc([{ sig: 'a', slot: 5, logs: inOurs(posted.log) }], { owner: '11111111111111111111111111111111', lamports: 890_880n, data: ['', 'base64'] });
  await expect(committedOf(system.rpc, TASK)).rejects.toThrow('never finalized');
});

it('reads an outcome from a complete history of the last life at the address only', async () => {
  // the close is listed but not served yet: no outcome, say so
  const late = fakeRpc([{ sig: 'a', slot: 5, logs: inOurs(posted.log) }, { sig: 'b', slot: 8, unserved: true, logs: inOurs(closed.log) }]);
  await expect(committedOf(late.rpc, TASK)).rejects.toThrow('1 of its transactions are not served by the node yet');
  expect((await taskHistory(late.rpc, TASK)).map((e) => e.signature)).toEqual(['a']);
  // closed Accepted, then posted again at the same address: the new life has no outcome yet
  const again = fakeRpc([
    { sig: 'a', slot: 5, logs: inOurs(posted.log) },
    { sig: 'b', slot: 8, logs: inOurs(closed.log) },
    { sig: 'c', slot: 20, logs: inOurs(posted.log) },
  ]);
  await expect(committedOf(again.rpc, TASK)).rejects.toThrow('closed and was never finalized');
});

it('reads a long history in batches of HISTORY_BATCH at once, in order', async () => {
  const txs = Array.from({ length: 20 }, (_, i) => ({ sig: `s${i}`, slot: i, logs: i === 0 ? inOurs(posted.log) : [] }));
  const { rpc } = fakeRpc(txs);
  let inFlight = 0;
  let most = 0;
  const inner = rpc.getTransaction;
  rpc.getTransaction = (sig: string) => ({
    send: async () => {
      inFlight++;
      most = Math.max(most, inFlight);
      await new Promise((r) => setTimeout(r, 5));
      inFlight--;
      return inner(sig).send();
    },
  });
  const h = await taskHistory(rpc, TASK);
  expect(h.map((e) => e.signature)).toEqual(txs.map((t) => t.sig));
  expect(most).toBe(HISTORY_BATCH);
});

it("reads a Verifying task's commitment only when asked for one not yet decided", async () => {
  const { getTaskDecoder, getTaskEncoder, getTaskSize, TaskStatus, COMPUTE_MARKET_PROGRAM_ADDRESS } = await import('../src');
  const { getBase64Decoder } = await import('@solana/kit');
  const { TASK_DISCRIMINATOR } = await import('../src/generated/accounts/task');
  const blank = new Uint8Array(getTaskSize());
  blank.set(TASK_DISCRIMINATOR);
  const zero = getTaskDecoder().decode(blank);
  const job = new Uint8Array(Buffer.from(rust.jobs.find((j: any) => j.kind === 5).hex, 'hex'));
  const uri = new TextEncoder().encode('http://provider/r');
  const resultUri = new Uint8Array(zero.resultUri.length);
  resultUri.set(uri);
  const account = (status: number) => ({
    owner: COMPUTE_MARKET_PROGRAM_ADDRESS,
    lamports: 1n,
    data: [getBase64Decoder().decode(getTaskEncoder().encode({ ...zero, status, job, resultRoot: new Uint8Array(32).fill(7), resultUri, resultUriLen: uri.length })), 'base64'],
  });
  const verifying = fakeRpc([], account(TaskStatus.Verifying)).rpc;
  await expect(committedOf(verifying, TASK)).rejects.toThrow('is Verifying: only an Accepted task has a verified result');
  const c = await committedOf(verifying, TASK, undefined, { pending: true });
  expect([c.status, c.resultUri, c.job.kind, c.root[0]]).toEqual(['Verifying', 'http://provider/r', 5, 7]);
  const claimed = fakeRpc([], account(TaskStatus.Claimed)).rpc;
  await expect(committedOf(claimed, TASK, undefined, { pending: true })).rejects.toThrow('is Claimed');
});
