// The result commitment in TypeScript against compute_market_protocol::merkle: every leaf
// (tiles of one, many and several chunks, at their offsets), every root and every proof, and
// a tampered tile, proof or index refused.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { leafHash, rootOf, rootOfTiles, verifyProof } from '../src';

const cases = JSON.parse(readFileSync(join(__dirname, 'fixtures', 'rust-written.json'), 'utf8')).commitments;
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const unhex = (s: string) => new Uint8Array(Buffer.from(s, 'hex'));
const tile = (i: number, len: number) => Uint8Array.from({ length: len }, (_, j) => (i * 31 + j * 7) & 0xff);

it("computes the Rust crate's leaves, roots and proofs", () => {
  expect(cases.length).toBeGreaterThanOrEqual(6);
  for (const c of cases) {
    const tiles = Array.from({ length: c.count }, (_, i) => tile(i, c.tileLen));
    const leaves = tiles.map((t, i) => leafHash(i, c.count, t));
    expect(leaves.map(hex)).toEqual(c.leaves);
    expect(hex(rootOfTiles(tiles))).toBe(c.root);
    expect(hex(rootOf(leaves))).toBe(c.root);
    c.proofs.forEach((p: string[], i: number) => {
      expect(verifyProof(unhex(c.root), i, c.count, leaves[i], p.map(unhex)), `tile ${i} of ${c.count}`).toBe(true);
    });
  }
});

it('refuses a changed tile, a changed proof, another index or a proof of the wrong length', () => {
  const c = cases.find((c: any) => c.count === 7);
  const root = unhex(c.root);
  const proof = c.proofs[3].map(unhex);
  const bad = tile(3, c.tileLen);
  bad[100] ^= 1;
  expect(verifyProof(root, 3, 7, leafHash(3, 7, bad), proof)).toBe(false);
  const leaf = leafHash(3, 7, tile(3, c.tileLen));
  const flipped = proof.map((p: Uint8Array) => p.slice());
  flipped[0][0] ^= 1;
  expect(verifyProof(root, 3, 7, leaf, flipped)).toBe(false);
  expect(verifyProof(root, 2, 7, leaf, proof)).toBe(false);
  expect(verifyProof(root, 3, 7, leaf, proof.slice(1))).toBe(false);
  expect(verifyProof(root, 3, 7, leaf, [...proof, proof[0]])).toBe(false);
  expect(verifyProof(root, 7, 7, leaf, proof)).toBe(false);
});
