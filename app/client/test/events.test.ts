// Events in transaction logs, decoded from the IDL, against events the program crate encoded
// (rust-written.json): every field, u64 as bigint, the enum by name; foreign lines skipped.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { decodeEvent, decodeEvents } from '../src';

const events = JSON.parse(readFileSync(join(__dirname, 'fixtures', 'rust-written.json'), 'utf8')).events;
const plain = (v: unknown): unknown =>
  typeof v === 'bigint'
    ? v.toString()
    : v instanceof Uint8Array
      ? Buffer.from(v).toString('hex')
      : v && typeof v === 'object'
        ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]))
        : v;

it('decodes the events the program emits, field by field', () => {
  const logs = ['Program C7dNHMTtuzBkddhdpqiXzaWZ2j3HZXPjstDXaY9PnwbJ invoke [1]', 'Program data: AAAAAAAAAAA=', ...events.map((e: any) => e.log), 'Program log: done'];
  const got = decodeEvents(logs);
  expect(got.map((e) => e.name)).toEqual(events.map((e: any) => e.name));
  got.forEach((e, i) => expect(plain(e.data)).toEqual(events[i].data));
  expect(typeof got[0].data.reward).toBe('bigint');
});

it('refuses a known event whose bytes are cut short or run long', () => {
  const bytes = new Uint8Array(Buffer.from(events[1].log.slice('Program data: '.length), 'base64'));
  expect(() => decodeEvent(bytes.subarray(0, bytes.length - 1))).toThrow('event data ends at byte');
  const long = new Uint8Array(bytes.length + 1);
  long.set(bytes);
  expect(() => decodeEvent(long)).toThrow('1 bytes left after its fields');
  expect(decodeEvent(new Uint8Array(8))).toBeNull();
});

it("counts only lines this program logs: another program's look-alike events and malformed lines are skipped", () => {
  const ours = 'C7dNHMTtuzBkddhdpqiXzaWZ2j3HZXPjstDXaY9PnwbJ';
  const evil = 'Evi1111111111111111111111111111111111111111';
  const [posted, closed] = events.map((e: any) => e.log);
  const cut = `Program data: ${Buffer.from(Buffer.from(closed.slice(14), 'base64').subarray(0, 20)).toString('base64')}`;
  const logs = [
    `Program ${evil} invoke [1]`,
    closed, // a forged TaskClosed: not ours
    `Program ${ours} invoke [2]`,
    posted, // ours, through a CPI
    cut, // ours but malformed: skipped, the rest still read
    `Program ${ours} success`,
    closed, // back in the other program: not ours
    `Program ${evil} success`,
  ];
  expect(decodeEvents(logs).map((e) => e.name)).toEqual(['TaskPosted']);
  expect(decodeEvents([closed])).toEqual([]);
});
