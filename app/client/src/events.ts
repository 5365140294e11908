// Anchor events from transaction logs: each is a `Program data: <base64>` line holding an
// 8-byte discriminator and the event's Borsh fields. Decoded from the IDL's own description of
// every event (src/generated/eventsIdl.ts), so a new event needs no code here. Events are a
// hint, not the truth: a busy transaction's log may be cut short, so state is read from
// accounts (`watchTask`) and events only say when to look, or what a closed task was.

import { getBase58Decoder, getBase64Encoder } from '@solana/kit';
import { EVENTS, TYPES } from './generated/eventsIdl';
import { COMPUTE_MARKET_PROGRAM_ADDRESS } from './generated/programs';

/** The name of every event the program emits. */
export type EventName = (typeof EVENTS)[number]['name'];

/** A decoded event: its name and fields (u64 as `bigint`, pubkeys as base58, byte arrays as `Uint8Array`). */
export interface ProgramEvent {
  name: EventName;
  data: Record<string, unknown>;
}

class Reader {
  at = 0;
  constructor(readonly b: Uint8Array) {}
  take(n: number): Uint8Array {
    if (this.at + n > this.b.length) throw new Error(`event data ends at byte ${this.b.length}, ${this.at + n} needed`);
    const out = this.b.subarray(this.at, this.at + n);
    this.at += n;
    return out;
  }
  uint(n: number): bigint {
    let v = 0n;
    this.take(n).forEach((x, i) => (v |= BigInt(x) << BigInt(8 * i)));
    return v;
  }
  int(n: number): bigint {
    const u = this.uint(n);
    const top = 1n << BigInt(8 * n - 1);
    return u >= top ? u - (top << 1n) : u;
  }
}

const base58 = getBase58Decoder();

function read(r: Reader, t: any): unknown {
  if (typeof t === 'string') {
    switch (t) {
      case 'u8':
      case 'u16':
      case 'u32':
        return Number(r.uint({ u8: 1, u16: 2, u32: 4 }[t]));
      case 'u64':
      case 'u128':
        return r.uint(t === 'u64' ? 8 : 16);
      case 'i8':
      case 'i16':
      case 'i32':
        return Number(r.int({ i8: 1, i16: 2, i32: 4 }[t]));
      case 'i64':
        return r.int(8);
      case 'bool':
        return r.uint(1) !== 0n;
      case 'pubkey':
        return base58.decode(r.take(32));
      case 'string':
        return new TextDecoder('utf-8', { fatal: true }).decode(r.take(Number(r.uint(4))));
      case 'bytes':
        return r.take(Number(r.uint(4))).slice();
      default:
        throw new Error(`the IDL names a type this decoder does not know: ${t}`);
    }
  }
  if (t.array) {
    const [inner, n] = t.array;
    if (inner === 'u8') return r.take(n).slice();
    return Array.from({ length: n }, () => read(r, inner));
  }
  if (t.vec) return Array.from({ length: Number(r.uint(4)) }, () => read(r, t.vec));
  if (t.option) return r.uint(1) === 0n ? null : read(r, t.option);
  if (t.defined) {
    const d = TYPES[t.defined.name];
    if (!d) throw new Error(`the IDL has no type ${t.defined.name}`);
    if (d.kind === 'enum') {
      const i = Number(r.uint(1));
      const v = d.variants[i];
      if (!v) throw new Error(`${t.defined.name} has no variant ${i}`);
      if (v.fields) throw new Error(`${t.defined.name}::${v.name} carries fields this decoder does not read`);
      return v.name;
    }
    return Object.fromEntries(d.fields.map((f: any) => [f.name, read(r, f.type)]));
  }
  throw new Error(`the IDL names a type this decoder does not know: ${JSON.stringify(t)}`);
}

/** The event in one `Program data:` payload, or `null` when its discriminator is not one of
 * this program's events. Throws when a known event's bytes are malformed. */
export function decodeEvent(bytes: Uint8Array): ProgramEvent | null {
  if (bytes.length < 8) return null;
  const e = EVENTS.find((e) => e.discriminator.every((x, i) => bytes[i] === x));
  if (!e) return null;
  const r = new Reader(bytes.subarray(8));
  const data = read(r, { defined: { name: e.name } }) as Record<string, unknown>;
  if (r.at !== r.b.length) throw new Error(`${e.name}: ${r.b.length - r.at} bytes left after its fields`);
  return { name: e.name, data };
}

/** Every event of this program in a transaction's log lines: the runtime's `Program <id>
 * invoke` / `success` / `failed` lines are followed as a stack, and a data line counts only
 * while this program is the one running (any other program can log bytes that look like its
 * events), as the Rust `decode_events` does. A data line that is not base64, not one of this
 * program's events, or malformed is skipped: one bad line cannot hide the others. */
export function decodeEvents(logs: readonly string[], programAddress: string = COMPUTE_MARKET_PROGRAM_ADDRESS): ProgramEvent[] {
  const out: ProgramEvent[] = [];
  const stack: string[] = [];
  for (const line of logs) {
    const p = /^Program (\S+) (invoke|success|failed)/.exec(line);
    if (p) {
      if (p[2] === 'invoke') stack.push(p[1]);
      else if (stack.at(-1) === p[1]) stack.pop();
      continue;
    }
    const m = /^Program data: ([A-Za-z0-9+/=]+)$/.exec(line);
    if (!m || stack.at(-1) !== programAddress) continue;
    try {
      const e = decodeEvent(new Uint8Array(getBase64Encoder().encode(m[1])));
      if (e) out.push(e);
    } catch {
      // malformed: skipped (the program never writes one)
    }
  }
  return out;
}
