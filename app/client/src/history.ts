// A task's history from its transactions: what `watchTask` cannot show once the account is
// closed (the crank closes a settled task and returns its rent). Every transaction that named
// the task, oldest first, with its signature (for an explorer link), slot, time and the
// program's events; and `committedOf`, the verified result's root and location, read from the
// account while it lives and from the history after — as `keeper task result` does.

import type { Address, Rpc, Signature, SolanaRpcApi } from '@solana/kit';
import { TaskStatus } from './generated/types/taskStatus';
import { decodeEvents, type ProgramEvent } from './events';
import { decodeJobSpec, type JobSpec } from './job';
import { taskOf } from './watch';

/** Most transactions read for one task (a task's life is a few dozen; a flood of transactions
 * merely naming its address is read up to here, as the Rust client's `logs_of` does). */
export const MAX_HISTORY = 5_000;

/** How many transactions a history reads at once. */
export const HISTORY_BATCH = 8;

/** One transaction that named the task. */
export interface HistoryEntry {
  signature: Signature;
  slot: bigint;
  /** Unix seconds, when the node knows it. */
  blockTime: bigint | null;
  /** Whether the transaction failed (its events are left out: nothing it logged happened). */
  failed: boolean;
  /** This program's events in its logs that name the task. */
  events: ProgramEvent[];
}

/** Transactions already read, by signature: a refresh reads only the new ones. */
export type HistoryCache = Map<string, HistoryEntry>;

/** The transactions naming `task`, oldest first, with the events this program emitted in
 * them about it (events other programs log are not its; failed transactions count for none).
 * A transaction the node lists but does not serve yet is left out (and read next time). */
export async function taskHistory(rpc: Rpc<SolanaRpcApi>, task: Address, cache: HistoryCache = new Map()): Promise<HistoryEntry[]> {
  return (await readHistory(rpc, task, cache)).entries;
}

async function readHistory(
  rpc: Rpc<SolanaRpcApi>,
  task: Address,
  cache: HistoryCache,
): Promise<{ entries: HistoryEntry[]; unserved: number }> {
  let unserved = 0;
  const sigs: { signature: Signature; slot: bigint; blockTime: bigint | null; err: unknown }[] = [];
  let before: Signature | undefined;
  while (sigs.length < MAX_HISTORY) {
    const page = await rpc.getSignaturesForAddress(task, { limit: 1_000, before, commitment: 'confirmed' }).send();
    sigs.push(...page.map((s) => ({ signature: s.signature, slot: s.slot, blockTime: s.blockTime ?? null, err: s.err })));
    if (page.length < 1_000) break;
    before = page[page.length - 1].signature;
  }
  // the transactions not read before, fetched HISTORY_BATCH at a time (public RPCs limit
  // how fast one page may ask; one at a time is slow, all at once is refused)
  const listed = sigs.slice(0, MAX_HISTORY).reverse();
  const wanted = listed.filter((s) => !cache.has(s.signature) && s.err === null);
  const fetched = new Map<string, Awaited<ReturnType<typeof fetchTx>>>();
  const fetchTx = (signature: Signature) =>
    rpc.getTransaction(signature, { commitment: 'confirmed', maxSupportedTransactionVersion: 0, encoding: 'json' }).send();
  for (let i = 0; i < wanted.length; i += HISTORY_BATCH) {
    const batch = wanted.slice(i, i + HISTORY_BATCH);
    const txs = await Promise.all(batch.map((s) => fetchTx(s.signature)));
    batch.forEach((s, j) => fetched.set(s.signature, txs[j]));
  }
  const out: HistoryEntry[] = [];
  for (const s of listed) {
    const known = cache.get(s.signature);
    if (known) {
      out.push(known);
      continue;
    }
    const failed = s.err !== null;
    let events: ProgramEvent[] = [];
    if (!failed) {
      const tx = fetched.get(s.signature);
      // not served yet (or without its logs): read again next time
      if (!tx || !tx.meta) {
        unserved++;
        continue;
      }
      if (tx.meta.err) continue;
      events = decodeEvents(tx.meta?.logMessages ?? []).filter((e) => e.data['task'] === task);
    }
    const entry = { signature: s.signature, slot: s.slot, blockTime: s.blockTime, failed, events };
    cache.set(s.signature, entry);
    out.push(entry);
  }
  return { entries: out, unserved };
}

/** The events of the task's last life: the address is the client's and the id's, so a task
 * posted again there starts anew at its TaskPosted. */
function lastLife(entries: HistoryEntry[]): ProgramEvent[] {
  const all = entries.flatMap((h) => h.events);
  const from = all.map((e) => e.name).lastIndexOf('TaskPosted');
  return from < 0 ? [] : all.slice(from);
}

/** The events that set a task's status once it has a verdict: its finalize, an availability
 * account's end (a contest answered makes a withheld verdict served, Accepted; a challenge
 * failed makes an Accepted one unserved, Rejected: PROTOCOL §8.11), its conclusion, its close. */
const VERDICT_EVENTS = ['TaskFinalized', 'AvailabilityEnded', 'TaskConcluded', 'TaskClosed'];

/** How the task's last life ended (`Accepted`, `Rejected`, …), as its close, its conclusion,
 * an availability account's end or its finalize says, the latest of them; `undefined` while it
 * runs. */
export function outcomeOf(entries: HistoryEntry[]): string | undefined {
  const events = lastLife(entries);
  const closed = events.filter((e) => e.name === 'TaskClosed').at(-1);
  return (closed ?? events.filter((e) => VERDICT_EVENTS.includes(e.name)).at(-1))?.data['status'] as string | undefined;
}

/** An Accepted task's verified result: the job, the root its tiles hash to, where they are served. */
export interface Committed {
  job: JobSpec;
  root: Uint8Array;
  resultUri: string;
  status: string;
}

/** The result of `task`, from its account or (closed) from its history; throws unless Accepted,
 * or, with `pending`, unless Accepted or Verifying (its provider's commitment, not yet decided:
 * `status` says which). */
export async function committedOf(rpc: Rpc<SolanaRpcApi>, task: Address, cache?: HistoryCache, options: { pending?: boolean } = {}): Promise<Committed> {
  const { value } = await rpc.getAccountInfo(task, { commitment: 'confirmed', encoding: 'base64' }).send();
  // owner, discriminator and size checked; an empty System account is no task
  const t = taskOf(value as any);
  if (t) {
    const status = TaskStatus[t.status];
    const pending = options.pending && t.status === TaskStatus.Verifying;
    if (t.status !== TaskStatus.Accepted && !pending) throw new Error(`task ${task} is ${status}: only an Accepted task has a verified result`);
    return {
      job: decodeJobSpec(new Uint8Array(t.job)),
      root: new Uint8Array(t.resultRoot),
      resultUri: new TextDecoder().decode(t.resultUri.slice(0, t.resultUriLen)),
      status,
    };
  }
  const { entries, unserved } = await readHistory(rpc, task, cache ?? new Map());
  // an outcome is read from a complete history only: a missing close could leave an older one
  if (unserved > 0) throw new Error(`task ${task} is closed and ${unserved} of its transactions are not served by the node yet: try again in a few seconds`);
  const events = lastLife(entries);
  const last = (name: string) => events.filter((e) => e.name === name).at(-1)?.data;
  const posted = last('TaskPosted');
  if (!posted) throw new Error(`no task at ${task}, and no record of one in its transactions`);
  const status = outcomeOf(entries);
  if (status !== 'Accepted') throw new Error(`task ${task} is closed and was ${status ?? 'never finalized'}: only an Accepted task has a verified result`);
  const submitted = last('ResultSubmitted');
  if (!submitted) throw new Error('no ResultSubmitted event for an Accepted task');
  return {
    job: decodeJobSpec(posted['job'] as Uint8Array),
    root: submitted['result_root'] as Uint8Array,
    resultUri: submitted['result_uri'] as string,
    status,
  };
}
