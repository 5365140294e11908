// A task's history from its transactions: what `watchTask` cannot show once the account is
// closed (the crank closes a settled task and returns its rent). Every transaction that named
// the task, oldest first, with its signature (for an explorer link), slot, time and the
// program's events; and `committedOf`, the verified result's root and location, read from the
// account while it lives and from the history after — as `keeper task result` does.

import type { Address, Rpc, Signature, SolanaRpcApi } from '@solana/kit';
import { fetchMaybeTask } from './generated/accounts/task';
import { TaskStatus } from './generated/types/taskStatus';
import { decodeEvents, type ProgramEvent } from './events';
import { decodeJobSpec, type JobSpec } from './job';

/** Most transactions read for one task (a task's life is a few dozen). */
export const MAX_HISTORY = 1_000;

/** One transaction that named the task. */
export interface HistoryEntry {
  signature: Signature;
  slot: bigint;
  /** Unix seconds, when the node knows it. */
  blockTime: bigint | null;
  /** Whether the transaction failed. */
  failed: boolean;
  /** This program's events in its logs. */
  events: ProgramEvent[];
}

/** The transactions naming `task`, oldest first, with their events. */
export async function taskHistory(rpc: Rpc<SolanaRpcApi>, task: Address, limit = MAX_HISTORY): Promise<HistoryEntry[]> {
  const sigs = await rpc.getSignaturesForAddress(task, { limit: Math.min(limit, MAX_HISTORY), commitment: 'confirmed' }).send();
  const out: HistoryEntry[] = [];
  for (const s of [...sigs].reverse()) {
    const tx = await rpc
      .getTransaction(s.signature, { commitment: 'confirmed', maxSupportedTransactionVersion: 0, encoding: 'json' })
      .send();
    const logs = tx?.meta?.logMessages ?? [];
    out.push({
      signature: s.signature,
      slot: s.slot,
      blockTime: s.blockTime ?? null,
      failed: s.err !== null,
      events: decodeEvents(logs).filter((e) => e.data['task'] === task),
    });
  }
  return out;
}

/** An Accepted task's verified result: the job, the root its tiles hash to, where they are served. */
export interface Committed {
  job: JobSpec;
  root: Uint8Array;
  resultUri: string;
  status: string;
}

/** The result of `task`, from its account or (closed) from its history; throws unless Accepted. */
export async function committedOf(rpc: Rpc<SolanaRpcApi>, task: Address): Promise<Committed> {
  const a = await fetchMaybeTask(rpc, task, { commitment: 'confirmed' });
  if (a.exists) {
    const t = a.data;
    const status = TaskStatus[t.status];
    if (t.status !== TaskStatus.Accepted) throw new Error(`task ${task} is ${status}: only an Accepted task has a verified result`);
    return {
      job: decodeJobSpec(new Uint8Array(t.job)),
      root: new Uint8Array(t.resultRoot),
      resultUri: new TextDecoder().decode(t.resultUri.slice(0, t.resultUriLen)),
      status,
    };
  }
  const events = (await taskHistory(rpc, task)).flatMap((h) => h.events);
  const last = (name: string) => events.filter((e) => e.name === name).at(-1)?.data;
  const posted = last('TaskPosted');
  if (!posted) throw new Error(`no task at ${task}, and no record of one in its transactions`);
  const status = (last('TaskClosed') ?? last('TaskFinalized'))?.['status'] as string | undefined;
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
