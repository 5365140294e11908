// Disputes in TypeScript against compute_market_protocol::dispute (rust-written.json): the
// element every rule names (expectedElement for HashBatch nonces and generated MatMulModP
// entries, padding included), and the chunk proof of an element (elementProof) the program
// checks, byte for byte; a changed tile is refused.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { decodeJobSpec, elementProof, elementsPerTile, elementWidth, expectedElement, firstWrongElement, tileCount } from '../src';

const cases = JSON.parse(readFileSync(join(__dirname, 'fixtures', 'rust-written.json'), 'utf8')).disputes;
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const unhex = (s: string) => new Uint8Array(Buffer.from(s, 'hex'));

async function tileOf(job: ReturnType<typeof decodeJobSpec>, t: number): Promise<Uint8Array> {
  const w = elementWidth(job);
  const out = new Uint8Array(elementsPerTile(job) * w);
  for (let e = 0; e < elementsPerTile(job); e++) out.set((await expectedElement(job, t, e))!.subarray(0, w), e * w);
  return out;
}

it("names the Rust crate's elements and proves them as the program will", async () => {
  expect(cases.length).toBe(2);
  for (const c of cases) {
    const job = decodeJobSpec(unhex(c.job));
    for (const p of c.points) {
      expect(hex((await expectedElement(job, p.tile, p.element))!.subarray(0, elementWidth(job)))).toBe(p.expected);
      const tile = await tileOf(job, p.tile);
      const proven = { index: p.tile, tile, proof: p.tileProof.map(unhex) };
      const { chunk, path } = elementProof(job, unhex(c.root), proven, p.element);
      expect(hex(chunk)).toBe(p.chunk);
      expect(path.map(hex)).toEqual(p.path);
      expect(await firstWrongElement(job, proven)).toBeUndefined();
      // a changed element is found, and its old proof no longer leads to the root
      const bad = tile.slice();
      bad[p.element * elementWidth(job)] ^= 1;
      const wrong = { ...proven, tile: bad };
      expect(await firstWrongElement(job, wrong)).toBe(p.element);
      expect(() => elementProof(job, unhex(c.root), wrong, p.element)).toThrow(/does not lead to the root/);
    }
    expect(tileCount(job)).toBeGreaterThan(1);
  }
});
