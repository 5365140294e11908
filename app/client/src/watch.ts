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

/** The task at `address`, step by step, until it is closed or `abortSignal` fires. */
export async function* watchTask(
  client: WatchClient,
  address: Address,
  options: { abortSignal?: AbortSignal; commitment?: Commitment; programAddress?: Address } = {},
): AsyncGenerator<TaskUpdate> {
  const { commitment = 'confirmed', programAddress = COMPUTE_MARKET_PROGRAM_ADDRESS } = options;
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  options.abortSignal?.addEventListener('abort', onAbort);
  try {
    const notifications = await client.rpcSubscriptions
      .accountNotifications(address, { commitment, encoding: 'base64' })
      .subscribe({ abortSignal: stop.signal });
    let last: string | null = null;
    const step = (slot: bigint, value: AccountValue | null): TaskUpdate | null => {
      const task = taskOf(value, programAddress);
      if (!task) return { kind: 'closed', slot };
      const key = String(value!.data[0]);
      if (key === last) return null;
      last = key;
      return { kind: 'state', slot, task };
    };
    const first = await client.rpc.getAccountInfo(address, { commitment, encoding: 'base64' }).send({ abortSignal: stop.signal });
    const u = step(first.context.slot, first.value as AccountValue | null);
    if (u) yield u;
    // an abort ends the iteration quietly, whether it came before or during a wait
    if (u?.kind === 'closed' || stop.signal.aborted) return;
    for await (const n of notifications) {
      const u = step(n.context.slot, n.value as AccountValue | null);
      if (!u) continue;
      yield u;
      if (u.kind === 'closed' || stop.signal.aborted) return;
    }
  } finally {
    options.abortSignal?.removeEventListener('abort', onAbort);
    stop.abort();
  }
}
