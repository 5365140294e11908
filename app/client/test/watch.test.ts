// watchTask against a fake RPC node: subscribe-then-read, one update per distinct state, the
// end when the account closes, an abort ends it, and a stranger's account is refused.
import { address, getBase64Decoder, type Address } from '@solana/kit';
import { describe, expect, it } from 'vitest';
import { getTaskDecoder, getTaskEncoder, getTaskSize, TaskStatus, watchTask, COMPUTE_MARKET_PROGRAM_ADDRESS } from '../src';

const TASK = address('GtHnMw8kqju8PsRQXJx7w9yGFETEPLxZZZuHJvvBQ1Yx');

/** A Task account's base64 with `status` and `round`. */
function account(status: TaskStatus, round = 0) {
  const zero = new Uint8Array(getTaskSize());
  zero.set([79, 34, 229, 55, 88, 90, 55, 84]);
  const t = getTaskDecoder().decode(zero);
  const bytes = getTaskEncoder().encode({ ...t, status, round });
  return getBase64Decoder().decode(bytes);
}

const value = (data: string, owner: Address = COMPUTE_MARKET_PROGRAM_ADDRESS, lamports = 1_000n) => ({ owner, lamports, data: [data, 'base64'] as const });

function fake(initial: unknown, pushed: unknown[], log: string[]) {
  return {
    rpcSubscriptions: {
      accountNotifications: () => ({
        subscribe: async ({ abortSignal }: { abortSignal: AbortSignal }) => {
          log.push('subscribed');
          return (async function* () {
            for (const [i, v] of pushed.entries()) {
              if (abortSignal.aborted) return;
              yield { context: { slot: 10n + BigInt(i) }, value: v };
            }
            // a live subscription waits for the next change; kit's ends when its signal aborts
            if (!abortSignal.aborted) await new Promise((resolve) => abortSignal.addEventListener('abort', resolve));
          })();
        },
      }),
    },
    rpc: {
      getAccountInfo: () => ({
        send: async () => {
          log.push('read');
          return { context: { slot: 9n }, value: initial };
        },
      }),
    },
  } as any;
}

describe('watchTask', () => {
  it('subscribes before it reads, yields each distinct state once and ends when the account closes', async () => {
    const log: string[] = [];
    const pushed = [
      value(account(TaskStatus.Open)), // the same as the read: not yielded again
      value(account(TaskStatus.Claimed)),
      value(account(TaskStatus.Verifying)),
      value(account(TaskStatus.Verifying, 1)),
      value(account(TaskStatus.Accepted)),
      { owner: address('11111111111111111111111111111111'), lamports: 0n, data: ['', 'base64'] },
    ];
    const got: string[] = [];
    for await (const u of watchTask(fake(value(account(TaskStatus.Open)), pushed, log), TASK)) {
      got.push(u.kind === 'state' ? `${TaskStatus[u.task.status]}/${u.task.round}@${u.slot}` : `closed@${u.slot}`);
    }
    expect(log).toEqual(['subscribed', 'read']);
    expect(got).toEqual(['Open/0@9', 'Claimed/0@11', 'Verifying/0@12', 'Verifying/1@13', 'Accepted/0@14', 'closed@15']);
  });

  it('ends at once for a task already closed, and when the caller aborts', async () => {
    const closed: string[] = [];
    for await (const u of watchTask(fake(null, [], []), TASK)) closed.push(u.kind);
    expect(closed).toEqual(['closed']);
    const abort = new AbortController();
    const seen: string[] = [];
    for await (const u of watchTask(fake(value(account(TaskStatus.Open)), [value(account(TaskStatus.Claimed))], []), TASK, {
      abortSignal: abort.signal,
    })) {
      seen.push(u.kind);
      abort.abort();
    }
    expect(seen, 'nothing after the abort').toEqual(['state']);
    // an abort while waiting for a change ends it too
    const later = new AbortController();
    const waiting = (async () => {
      const kinds: string[] = [];
      for await (const u of watchTask(fake(value(account(TaskStatus.Open)), [], []), TASK, { abortSignal: later.signal })) kinds.push(u.kind);
      return kinds;
    })();
    setTimeout(() => later.abort(), 20);
    expect(await waiting).toEqual(['state']);
  });

  it("refuses an account the program does not own, or that is not a Task", async () => {
    const foreign = value(account(TaskStatus.Open), address('11111111111111111111111111111111'));
    await expect(watchTask(fake(foreign, [], []), TASK).next()).rejects.toThrow('is owned by 11111111111111111111111111111111, not the program');
    const short = value(getBase64Decoder().decode(new Uint8Array(100)));
    await expect(watchTask(fake(short, [], []), TASK).next()).rejects.toThrow('holds 100 bytes, a Task is');
  });

  it('survives a dropped websocket: polls meanwhile, subscribes again, and never steps back', async () => {
    const log: string[] = [];
    // the account as reads find it, in turn: the drop happens while Claimed, a poll fails
    // (tried again), the polls find Verifying; a later read of an older slot is ignored
    const reads = [
      { slot: 9n, v: value(account(TaskStatus.Open)) },
      { slot: 12n, v: value(account(TaskStatus.Verifying)) },
      { slot: 11n, v: value(account(TaskStatus.Claimed)) },
    ];
    let subscriptions = 0;
    const states: string[] = [];
    const client = {
      rpcSubscriptions: {
        accountNotifications: () => ({
          subscribe: async ({ abortSignal }: { abortSignal: AbortSignal }) => {
            const n = ++subscriptions;
            log.push(`subscribe ${n}`);
            if (n === 2) throw new Error('websocket refused'); // the first try again fails
            return (async function* () {
              if (n === 1) {
                yield { context: { slot: 10n }, value: value(account(TaskStatus.Claimed)) };
                throw new Error('websocket closed');
              }
              // the third, once the polls have shown Verifying: Accepted, then the close
              while (!states.includes('Verifying') && !abortSignal.aborted) await new Promise((r) => setTimeout(r, 5));
              yield { context: { slot: 13n }, value: value(account(TaskStatus.Accepted)) };
              yield { context: { slot: 20n }, value: { owner: address('11111111111111111111111111111111'), lamports: 0n, data: ['', 'base64'] } };
            })();
          },
        }),
      },
      rpc: {
        getAccountInfo: () => ({
          send: async () => {
            if (reads[0].slot === 12n && !log.includes('read failed')) {
              log.push('read failed');
              throw new Error('HTTP 429');
            }
            const r = reads.length > 1 ? reads.shift()! : reads[0];
            log.push(`read ${r.slot}`);
            return { context: { slot: r.slot }, value: r.v };
          },
        }),
      },
    } as any;
    const connection: string[] = [];
    const got: string[] = [];
    for await (const u of watchTask(client, TASK, { pollMs: 10, safetyPollMs: 10_000, onConnection: (s) => connection.push(s) })) {
      if (u.kind === 'state') states.push(TaskStatus[u.task.status]);
      got.push(u.kind === 'state' ? `${TaskStatus[u.task.status]}@${u.slot}` : `closed@${u.slot}`);
    }
    expect(got).toEqual(['Open@9', 'Claimed@10', 'Verifying@12', 'Accepted@13', 'closed@20']);
    expect(subscriptions).toBe(3);
    expect(connection.slice(0, 2)).toEqual(['live', 'polling']);
    expect(connection.indexOf('live', 2), 'live again after the drop').toBeGreaterThan(1);
    expect(log).toContain('read failed');
  });

  it('waits for a task just posted when the node has not seen it yet (awaitCreationMs)', async () => {
    let reads = 0;
    const client = {
      rpcSubscriptions: { accountNotifications: () => ({ subscribe: async () => { throw new Error('no websocket'); } }) },
      rpc: {
        getAccountInfo: () => ({
          send: async () => {
            reads++;
            // behind for two reads, then the task, then closed
            const value = reads <= 2 ? null : reads === 3 ? value_(TaskStatus.Open) : null;
            return { context: { slot: BigInt(reads) }, value };
          },
        }),
      },
    } as any;
    const value_ = (st: TaskStatus) => value(account(st));
    const got: string[] = [];
    for await (const u of watchTask(client, TASK, { pollMs: 5, awaitCreationMs: 5_000 })) got.push(u.kind === 'state' ? TaskStatus[u.task.status] : 'closed');
    expect(got).toEqual(['Open', 'closed']);
    // without it, an absent account is closed at once
    reads = 0;
    const plain: string[] = [];
    for await (const u of watchTask(client, TASK, { pollMs: 5 })) plain.push(u.kind);
    expect(plain).toEqual(['closed']);
  });

  it('gives up on a subscribe that never answers and tries again', async () => {
    let attempts = 0;
    const client = {
      rpcSubscriptions: {
        accountNotifications: () => ({
          subscribe: ({ abortSignal }: { abortSignal: AbortSignal }) => {
            attempts++;
            // the first never settles (a socket refused while opening); the second works
            if (attempts === 1) return new Promise(() => {});
            return Promise.resolve(
              (async function* () {
                yield { context: { slot: 20n }, value: value(account(TaskStatus.Claimed)) };
                yield { context: { slot: 21n }, value: { owner: address('11111111111111111111111111111111'), lamports: 0n, data: ['', 'base64'] } };
                if (!abortSignal.aborted) await new Promise((r) => abortSignal.addEventListener('abort', r));
              })(),
            );
          },
        }),
      },
      rpc: { getAccountInfo: () => ({ send: async () => ({ context: { slot: 9n }, value: value(account(TaskStatus.Open)) }) }) },
    } as any;
    const got: string[] = [];
    for await (const u of watchTask(client, TASK, { pollMs: 5, subscribeTimeoutMs: 30 })) got.push(u.kind === 'state' ? TaskStatus[u.task.status] : 'closed');
    expect(got).toEqual(['Open', 'Claimed', 'closed']);
    expect(attempts).toBe(2);
    // a pooled client that stays stuck: each attempt after the first on a fresh one
    attempts = 0;
    const stuck = { ...client, rpcSubscriptions: { accountNotifications: () => ({ subscribe: () => new Promise(() => {}) }) } };
    let fresh = 0;
    const again: string[] = [];
    const freshSubscriptions = () => {
      fresh++;
      attempts = 1; // the working client's second behaviour
      return client.rpcSubscriptions;
    };
    for await (const u of watchTask(stuck, TASK, { pollMs: 5, subscribeTimeoutMs: 30, freshSubscriptions })) again.push(u.kind);
    expect(again).toEqual(['state', 'state', 'closed']);
    expect(fresh).toBe(1);
  });
});
