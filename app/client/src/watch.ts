// watchTask(): a task's life as an async iterator, driven by its account (events are only a
// hint — a busy transaction's log can be cut short). It subscribes first and reads second, so
// no change between the two is missed; yields each distinct state once; checks the account's
// owner, discriminator and size before decoding (the RPC node is a stranger); and ends when the
// account is closed (the task settled and its rent went back) or when the caller aborts.

import type {
  AccountNotificationsApi,
  Address,
  Commitment,
  GetAccountInfoApi,
  Rpc,
  RpcSubscriptions,
} from '@solana/kit';
import { checkedAccountData, type AccountValue } from './accounts';
import { getTaskDecoder, getTaskSize, TASK_DISCRIMINATOR, type Task } from './generated/accounts/task';
import { COMPUTE_MARKET_PROGRAM_ADDRESS } from './generated/programs';

/** One step of a task's life. */
export type TaskUpdate =
  | { kind: 'state'; slot: bigint; task: Task }
  | { kind: 'closed'; slot: bigint };

/** What `watchTask` needs of a kit client. */
export interface WatchClient {
  rpc: Rpc<GetAccountInfoApi>;
  rpcSubscriptions: RpcSubscriptions<AccountNotificationsApi>;
}

const SYSTEM_PROGRAM = '11111111111111111111111111111111';

/** The task in an account as the RPC node returned it, checked; `null` when closed. */
export function taskOf(value: AccountValue | null, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Task | null {
  if (!value || value.lamports === 0n) return null;
  // an account emptied by the close (or lamports sent to the closed task's address, which
  // make a System account there): no task
  if (String(value.data[0]) === '' && (value.owner === SYSTEM_PROGRAM || value.owner === programAddress)) return null;
  return getTaskDecoder().decode(checkedAccountData(value, 'Task', TASK_DISCRIMINATOR, getTaskSize(), programAddress));
}

/** How a watch is connected, for a dApp to show. */
export type WatchConnection = 'live' | 'polling';

/** Options of [`watchTask`]. */
export interface WatchOptions {
  abortSignal?: AbortSignal;
  commitment?: Commitment;
  programAddress?: Address;
  /** How often the account is read while the websocket is down (ms; default 2 000). */
  pollMs?: number;
  /** How often it is read while the websocket is up, in case a notification is lost or the
   * socket died without closing (ms; default 15 000). */
  safetyPollMs?: number;
  /** A new subscriptions client for each attempt after the first: kit pools its websockets,
   * and a socket that died while opening can stay in the pool, so a retry on the same client
   * may wait on it (the page passes `() => createSolanaRpcSubscriptions(ws)`). */
  freshSubscriptions?: () => RpcSubscriptions<AccountNotificationsApi>;
  /** How long one attempt to subscribe may take (ms; default 5 000). */
  subscribeTimeoutMs?: number;
  /** The longest wait between attempts to subscribe again (ms; default 30 000). */
  maxBackoffMs?: number;
  /** For a task just posted: how long an absent account means "not created yet" (an RPC node
 * behind the one the post landed on) rather than "closed" (ms; default 0). */
  awaitCreationMs?: number;
  /** Told when the subscription is made or lost. */
  onConnection?: (state: WatchConnection, error?: unknown) => void;
}

/** Waits `ms`, or until `signal` aborts (at once if it has); leaves no listener behind. */
const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });

/** The task at `address`, step by step, until it is closed or `abortSignal` fires.
 *
 * It survives its connection: a subscription that fails or drops is made again (backing off
 * to `maxBackoffMs`), the account is read every `pollMs` meanwhile, and every `safetyPollMs`
 * while it is up. Reads that fail are tried again at the next turn. A state older (by slot)
 * than one already yielded is dropped, so a late read cannot step the task back. */
export async function* watchTask(client: WatchClient, address: Address, options: WatchOptions = {}): AsyncGenerator<TaskUpdate> {
  const { commitment = 'confirmed', programAddress = COMPUTE_MARKET_PROGRAM_ADDRESS, pollMs = 2_000, safetyPollMs = 15_000, maxBackoffMs = 30_000, subscribeTimeoutMs = 5_000 } = options;
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  options.abortSignal?.addEventListener('abort', onAbort);
  if (options.abortSignal?.aborted) stop.abort();
  // what the subscriber and the poller found, in order; the generator yields from here
  const found: { slot: bigint; value: AccountValue | null }[] = [];
  let wake: (() => void) | null = null;
  const push = (slot: bigint, value: AccountValue | null) => {
    found.push({ slot, value });
    wake?.();
  };
  let live = false;
  /** Wakes the poller when the connection changes. */
  let kick = () => {};
  let firstRead: () => void = () => {};
  const firstReadDone = new Promise<void>((r) => (firstRead = r));
  const read = async () => {
    try {
      const r = await client.rpc.getAccountInfo(address, { commitment, encoding: 'base64' }).send({ abortSignal: stop.signal });
      push(r.context.slot, r.value as AccountValue | null);
      return true;
    } catch {
      return false; // tried again at the next turn
    }
  };
  const subscriber = (async () => {
    let backoff = pollMs;
    let first = true;
    let tries = 0;
    /** The first state, read until a read succeeds; then the poller starts. */
    const readFirst = async () => {
      first = false;
      while (!(await read()) && !stop.signal.aborted) await sleep(pollMs, stop.signal);
      firstRead();
    };
    while (!stop.signal.aborted) {
      const attempt = new AbortController();
      const started = Date.now();
      const stopAttempt = () => attempt.abort();
      stop.signal.addEventListener('abort', stopAttempt);
      try {
        // a socket refused or dropped while opening can leave the subscribe pending: give up
        // on it after `subscribeTimeoutMs` and try again
        let timer: ReturnType<typeof setTimeout> | undefined;
        const notifications = await Promise.race([
          (tries++ > 0 && options.freshSubscriptions ? options.freshSubscriptions() : client.rpcSubscriptions)
            .accountNotifications(address, { commitment, encoding: 'base64' })
            .subscribe({ abortSignal: attempt.signal }),
          new Promise<never>((_, reject) => {
            timer = setTimeout(() => reject(new Error(`no subscription after ${subscribeTimeoutMs} ms`)), subscribeTimeoutMs);
          }),
        ]).finally(() => clearTimeout(timer));
        // subscribed first, read second: no change between the two is missed
        if (first) await readFirst();
        else await read();
        live = true;
        kick();
        backoff = pollMs;
        options.onConnection?.('live');
        for await (const n of notifications) push(n.context.slot, n.value as AccountValue | null);
        if (!stop.signal.aborted) throw new Error('the subscription ended');
      } catch (e) {
        if (stop.signal.aborted) break;
        live = false;
        kick();
        options.onConnection?.('polling', e);
        // no subscription yet: the first state comes from a read
        if (first) await readFirst();
        // the wait counts from the attempt's start: an attempt that timed out has waited already
        await sleep(Math.max(0, backoff - (Date.now() - started)), stop.signal);
        backoff = Math.min(backoff * 2, maxBackoffMs);
      } finally {
        stop.signal.removeEventListener('abort', stopAttempt);
        attempt.abort();
      }
    }
  })();
  const poller = (async () => {
    await firstReadDone;
    while (!stop.signal.aborted) {
      // a change of connection cuts the wait short: the pace follows it at once
      const wait = new AbortController();
      const cut = () => wait.abort();
      stop.signal.addEventListener('abort', cut, { once: true });
      kick = cut;
      const wasLive: boolean = live;
      await sleep(wasLive ? safetyPollMs : pollMs, wait.signal);
      stop.signal.removeEventListener('abort', cut);
      kick = () => {};
      if (!stop.signal.aborted && live === wasLive) await read();
    }
  })();
  let last: string | null = null;
  let lastSlot = -1n;
  const awaitUntil = Date.now() + (options.awaitCreationMs ?? 0);
  try {
    while (!stop.signal.aborted) {
      const next = found.shift();
      if (!next) {
        await new Promise<void>((r) => {
          const done = () => {
            stop.signal.removeEventListener('abort', done);
            r();
          };
          wake = done;
          stop.signal.addEventListener('abort', done, { once: true });
        });
        wake = null;
        continue;
      }
      if (next.slot < lastSlot) continue;
      const task = taskOf(next.value, programAddress);
      // a node behind the one the post landed on has no account yet: not closed, not yet
      if (!task && last === null && Date.now() < awaitUntil) continue;
      lastSlot = next.slot;
      if (!task) {
        yield { kind: 'closed', slot: next.slot };
        return;
      }
      const key = String(next.value!.data[0]);
      if (key === last) continue;
      last = key;
      yield { kind: 'state', slot: next.slot, task };
    }
  } finally {
    options.abortSignal?.removeEventListener('abort', onAbort);
    stop.abort();
    firstRead!();
    await Promise.allSettled([subscriber, poller]);
  }
}
