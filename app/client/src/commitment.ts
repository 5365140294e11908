// The result commitment (PROTOCOL §5, `compute_market_protocol::merkle`): the output as one
// BLAKE3 hash, each tile a complete subtree of BLAKE3's own chunk tree, so a tile is checked
// alone against the root on chain by its sibling chaining values. BLAKE3's compression is
// written out here (the npm BLAKE3 libraries hash whole inputs but do not expose chaining
// values at an input offset, which a tile's leaf is); the tests hold every leaf, root and proof
// to the Rust crate's.

const IV = new Uint32Array([
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
]);
const PERMUTATION = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];
const CHUNK_START = 1;
const CHUNK_END = 2;
const PARENT = 4;
const ROOT = 8;
/** BLAKE3's chunk: slots are power-of-two multiples of it. */
export const CHUNK_LEN = 1024;
const BLOCK_LEN = 64;

function g(v: Uint32Array, a: number, b: number, c: number, d: number, x: number, y: number) {
  v[a] = (v[a] + v[b] + x) | 0;
  v[d] = ((v[d] ^ v[a]) >>> 16) | ((v[d] ^ v[a]) << 16);
  v[c] = (v[c] + v[d]) | 0;
  v[b] = ((v[b] ^ v[c]) >>> 12) | ((v[b] ^ v[c]) << 20);
  v[a] = (v[a] + v[b] + y) | 0;
  v[d] = ((v[d] ^ v[a]) >>> 8) | ((v[d] ^ v[a]) << 24);
  v[c] = (v[c] + v[d]) | 0;
  v[b] = ((v[b] ^ v[c]) >>> 7) | ((v[b] ^ v[c]) << 25);
}

/** BLAKE3's compression: the first 8 output words (a chaining value, or a root's 32 bytes). */
function compress(cv: Uint32Array, block: Uint32Array, counter: number, blockLen: number, flags: number): Uint32Array {
  const v = new Uint32Array(16);
  v.set(cv, 0);
  v.set(IV.subarray(0, 4), 8);
  v[12] = counter >>> 0;
  v[13] = Math.floor(counter / 2 ** 32) >>> 0;
  v[14] = blockLen;
  v[15] = flags;
  let m = block.slice();
  for (let round = 0; round < 7; round++) {
    g(v, 0, 4, 8, 12, m[0], m[1]);
    g(v, 1, 5, 9, 13, m[2], m[3]);
    g(v, 2, 6, 10, 14, m[4], m[5]);
    g(v, 3, 7, 11, 15, m[6], m[7]);
    g(v, 0, 5, 10, 15, m[8], m[9]);
    g(v, 1, 6, 11, 12, m[10], m[11]);
    g(v, 2, 7, 8, 13, m[12], m[13]);
    g(v, 3, 4, 9, 14, m[14], m[15]);
    if (round < 6) m = Uint32Array.from(PERMUTATION, (p) => m[p]);
  }
  const out = new Uint32Array(8);
  for (let i = 0; i < 8; i++) out[i] = v[i] ^ v[i + 8];
  return out;
}

function words(bytes: Uint8Array): Uint32Array {
  const padded = new Uint8Array(BLOCK_LEN);
  padded.set(bytes);
  const dv = new DataView(padded.buffer);
  return Uint32Array.from({ length: 16 }, (_, i) => dv.getUint32(4 * i, true));
}

function bytesOf(cv: Uint32Array): Uint8Array {
  const b = new Uint8Array(32);
  const dv = new DataView(b.buffer);
  cv.forEach((w, i) => dv.setUint32(4 * i, w, true));
  return b;
}

function cvOf(b: Uint8Array): Uint32Array {
  const dv = new DataView(b.buffer, b.byteOffset, 32);
  return Uint32Array.from({ length: 8 }, (_, i) => dv.getUint32(4 * i, true));
}

/** The chaining value of one chunk (`chunk` ≤ 1 KiB) with chunk counter `counter`. */
function chunkCv(chunk: Uint8Array, counter: number, root: boolean): Uint32Array {
  let cv: Uint32Array = IV.slice();
  const blocks = Math.max(1, Math.ceil(chunk.length / BLOCK_LEN));
  for (let i = 0; i < blocks; i++) {
    const block = chunk.subarray(i * BLOCK_LEN, (i + 1) * BLOCK_LEN);
    let flags = i === 0 ? CHUNK_START : 0;
    if (i === blocks - 1) flags |= CHUNK_END | (root ? ROOT : 0);
    cv = compress(cv, words(block), counter, block.length, flags);
  }
  return cv;
}

function parentCv(left: Uint32Array, right: Uint32Array, root: boolean): Uint32Array {
  const block = new Uint32Array(16);
  block.set(left, 0);
  block.set(right, 8);
  return compress(IV, block, 0, BLOCK_LEN, PARENT | (root ? ROOT : 0));
}

/** Bytes each tile occupies in the committed string: the smallest power-of-two multiple of 1 KiB holding it. */
export function slotLen(tileLen: number): number {
  let s = CHUNK_LEN;
  while (s < tileLen) s *= 2;
  return s;
}

/** Leaf `index` of an output of `count` tiles: the chaining value of the tile's zero-padded
 * slot at its offset in the output, or the root when `count` is 1. */
export function leafHash(index: number, count: number, tile: Uint8Array): Uint8Array {
  const s = slotLen(tile.length);
  const chunks = s / CHUNK_LEN;
  const slot = new Uint8Array(s);
  slot.set(tile);
  const root = count <= 1;
  const first = root ? 0 : index * chunks;
  let level = Array.from({ length: chunks }, (_, c) =>
    chunkCv(slot.subarray(c * CHUNK_LEN, (c + 1) * CHUNK_LEN), first + c, root && chunks === 1),
  );
  while (level.length > 1) {
    const top = level.length === 2;
    const next: Uint32Array[] = [];
    for (let i = 0; i < level.length; i += 2) next.push(parentCv(level[i], level[i + 1], root && top));
    level = next;
  }
  return bytesOf(level[0]);
}

/** BLAKE3's parent of two subtrees; `root` for the topmost. */
export function nodeHash(left: Uint8Array, right: Uint8Array, root: boolean): Uint8Array {
  return bytesOf(parentCv(cvOf(left), cvOf(right), root));
}

/** The root over `leaves` (pairs, an odd last node promoted, the root flag on the top pair). */
export function rootOf(leaves: Uint8Array[]): Uint8Array {
  if (leaves.length === 0) throw new Error('a commitment needs at least one tile');
  let level = leaves;
  while (level.length > 1) {
    const top = level.length === 2;
    const next: Uint8Array[] = [];
    for (let i = 0; i < level.length; i += 2) next.push(i + 1 < level.length ? nodeHash(level[i], level[i + 1], top) : level[i]);
    level = next;
  }
  return level[0];
}

/** BLAKE3 of `bytes` (any length): its chunks' leaves folded by BLAKE3's own tree. */
export function blake3(bytes: Uint8Array): Uint8Array {
  const n = Math.max(1, Math.ceil(bytes.length / CHUNK_LEN));
  if (n === 1) return chunkLeaf(0, 1, bytes);
  return rootOf(Array.from({ length: n }, (_, i) => chunkLeaf(i, n, bytes.subarray(i * CHUNK_LEN, (i + 1) * CHUNK_LEN))));
}

/** The root of a whole output from its tiles in index order (all of one length). */
export function rootOfTiles(tiles: Uint8Array[]): Uint8Array {
  if (tiles.some((t) => t.length !== tiles[0].length)) throw new Error("a job's tiles all have its tile length");
  return rootOf(tiles.map((t, i) => leafHash(i, tiles.length, t)));
}

/** Whether `leaf` is leaf `index` of `count` under `root`, by its sibling path bottom-up. */
export function verifyProof(root: Uint8Array, index: number, count: number, leaf: Uint8Array, proof: Uint8Array[]): boolean {
  if (index >= count) return false;
  let [i, width, acc, k] = [index, count, leaf, 0];
  while (width > 1) {
    const sib = i ^ 1;
    if (sib < width) {
      const s = proof[k++];
      if (!s) return false;
      const top = width === 2;
      acc = i % 2 === 0 ? nodeHash(acc, s, top) : nodeHash(s, acc, top);
    }
    i = Math.floor(i / 2);
    width = Math.ceil(width / 2);
  }
  return k === proof.length && acc.every((x, j) => x === root[j]);
}

/** Leaf `chunk` of the committed string's `total` chunks: the chunk's chaining value at its
 * offset, or the root when the string is one chunk (`merkle::chunk_leaf`). */
export function chunkLeaf(chunk: number, total: number, bytes: Uint8Array): Uint8Array {
  return bytesOf(chunkCv(bytes, chunk, total <= 1));
}

/** The 1 KiB chunk holding byte `byte` of tile `index` (of `count`) and its siblings up to the
 * root: those inside the tile's slot, then the tile's proof (`merkle::chunk_proof`, PROTOCOL §8.4).
 * The chunk is leaf `index · slot/1024 + byte/1024` of the committed string. */
export function chunkProof(index: number, count: number, tile: Uint8Array, tileProof: Uint8Array[], byte: number): { chunk: Uint8Array; path: Uint8Array[] } {
  const slot = slotLen(tile.length);
  if (byte < 0 || byte >= slot) throw new Error(`byte ${byte} is outside the tile's ${slot}-byte slot`);
  const padded = new Uint8Array(slot);
  padded.set(tile);
  const perSlot = slot / CHUNK_LEN;
  const total = count * perSlot;
  const first = index * perSlot;
  const local = Math.floor(byte / CHUNK_LEN);
  const chunk = padded.slice(local * CHUNK_LEN, (local + 1) * CHUNK_LEN);
  const path: Uint8Array[] = [];
  let level = Array.from({ length: perSlot }, (_, c) => chunkLeaf(first + c, total, padded.subarray(c * CHUNK_LEN, (c + 1) * CHUNK_LEN)));
  let i = local;
  while (level.length > 1) {
    path.push(level[i ^ 1]);
    const top = level.length === 2;
    const next: Uint8Array[] = [];
    for (let k = 0; k < level.length; k += 2) next.push(nodeHash(level[k], level[k + 1], top && count === 1));
    level = next;
    i = Math.floor(i / 2);
  }
  return { chunk, path: [...path, ...tileProof] };
}
