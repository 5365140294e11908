// The market as the chain holds it: nodes (roles, stake, hardware, region, reputation) and live
// tasks, every account checked (owner, discriminator, size) before decoding; and the seed's
// performance model P = N·G·E/(1+L/C) filled from measured figures (docs/PROTOCOL.md).

import { decodeJobSpec, work, type Node } from '@compute-market/client';
// the market's nodes and live tasks, each account checked before it is decoded
export { nodesOf, tasksOf } from '@compute-market/client';

/** Seconds a slot takes (the protocol's figure for latency). */
export const SLOT_SECONDS = 0.4;

/** One finished task's measured times (slots), from its history. */
export interface Measured {
  work: bigint;
  /** Claim to submission. */
  computeSlots: bigint;
  /** Post to claim plus submission to finalize: the chain's share. */
  chainSlots: bigint;
  accepted: boolean;
}

/** The performance model from the nodes and the tasks measured. */
export interface Perf {
  n: number;
  g: number;
  e: number;
  l: number;
  c: number;
  p: number;
  /** What each figure came from. */
  basis: string;
}

/** P = N·G·E/(1+L/C): N providers with stake; G work per second of a provider while computing
 * (measured tasks); E the useful fraction (accepted of judged, the nodes' counters); L the
 * chain's latency per task and C the compute time per task, seconds. */
export function perfOf(nodes: Node[], measured: Measured[]): Perf | null {
  const providers = nodes.filter((n) => (n.roles & 1) !== 0 && n.free + n.bonded > 0n);
  const done = measured.filter((m) => m.computeSlots > 0n);
  if (providers.length === 0 || done.length === 0) return null;
  const completed = nodes.reduce((s, n) => s + n.tasksCompleted, 0);
  const slashed = providers.reduce((s, n) => s + n.timesSlashed, 0);
  const e = completed + slashed === 0 ? 1 : completed / (completed + slashed);
  const c = (done.reduce((s, m) => s + Number(m.computeSlots), 0) / done.length) * SLOT_SECONDS;
  const l = (done.reduce((s, m) => s + Number(m.chainSlots), 0) / done.length) * SLOT_SECONDS;
  const g = done.reduce((s, m) => s + Number(m.work), 0) / done.reduce((s, m) => s + Number(m.computeSlots) * SLOT_SECONDS, 0);
  const n = providers.length;
  return { n, g, e, l, c, p: (n * g * e) / (1 + l / c), basis: `${done.length} task(s) measured from their transactions, ${completed + slashed} judged by the nodes' counters` };
}

/** A finished task's figures from its events (TaskPosted, TaskClaimed, ResultSubmitted, TaskFinalized). */
export function measuredOf(entries: { slot: bigint; events: { name: string; data: Record<string, unknown> }[] }[]): Measured | null {
  const at = (name: string) => entries.find((h) => h.events.some((e) => e.name === name));
  const posted = at('TaskPosted');
  const claimed = at('TaskClaimed');
  const submitted = at('ResultSubmitted');
  const finalized = at('TaskFinalized');
  if (!posted || !claimed || !submitted || !finalized) return null;
  const job = decodeJobSpec(posted.events.find((e) => e.name === 'TaskPosted')!.data['job'] as Uint8Array);
  const status = finalized.events.find((e) => e.name === 'TaskFinalized')!.data['status'];
  return {
    work: work(job),
    computeSlots: submitted.slot - claimed.slot,
    chainSlots: claimed.slot - posted.slot + (finalized.slot - submitted.slot),
    accepted: status === 'Accepted',
  };
}
