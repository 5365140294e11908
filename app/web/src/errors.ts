// Errors as a person can act on them: no wallet, too few tokens, the program's named refusal,
// an unreachable cluster or content store.

import { ProgramRefusal, ResultNotServed, TransferError } from '@compute-market/client';
import type { Settings } from './settings';

/** One line (or a few) saying what went wrong and what to do. */
export function describeError(e: unknown, s: Settings | undefined): string {
  if (e instanceof ProgramRefusal) {
    if (e.errorName === 'InsufficientTokens') return `Insufficient tokens: ${e.message}`;
    const log = e.logs.filter((l) => l.includes('Error')).slice(-2);
    return `${e.message}${log.length ? `\n${log.join('\n')}` : ''}`;
  }
  if (e instanceof ResultNotServed) return `${e.message[0].toUpperCase()}${e.message.slice(1)}.`;
  if (e instanceof TransferError) return `The result could not be verified: ${e.message}`;
  const msg = e instanceof Error ? e.message : String(e);
  if (e instanceof TypeError && /fetch/i.test(msg)) {
    return `Unreachable: a request from this page failed (${msg}). Is the cluster at ${s?.rpc ?? 'the settings’ address'} up, and does the content store at ${s?.store ?? 'the settings’ address'} run with --cors-origin ${location.origin}?`;
  }
  if (/HTTP error \(\d+\)|ECONNREFUSED|Failed to fetch|NetworkError/i.test(msg)) return `The cluster at ${s?.rpc ?? 'the settings’ address'} is unreachable: ${msg}`;
  // never a parser's words or an "undefined" in front of a person
  if (e instanceof SyntaxError) return `Something the page read was not what it expected (${msg.split('\n')[0]}): reload, and if it persists, check the settings.`;
  // a sentence starts with a capital
  return msg ? `${msg[0].toUpperCase()}${msg.slice(1)}` : 'Something went wrong, with no word on what: reload and try again.';
}
