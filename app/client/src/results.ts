// A client's data to a content store and its verified result back (PROTOCOL §5, Inputs and
// Serving), in the browser or Node: `PUT <store>/c/<sha256>` uploads, `GET <result>/all` and
// `GET <result>/tiles?i=…` downloads. Nothing served is trusted: the whole result must hash to
// the root on chain, each partially fetched tile must prove its place under it, and every
// length is bounded by the job before anything is read into memory.

import { getBase16Decoder } from '@solana/kit';
import { type JobSpec, tileCount, tileLen } from './job';
import { leafHash, rootOfTiles, verifyProof } from './commitment';
import { sha256 } from './manifest';

/** Most digests in a served proof (results::wire::MAX_PROOF). */
export const MAX_PROOF = 32;

const hex = (b: Uint8Array) => getBase16Decoder().decode(b);

/** Why a transfer failed, in words a person can act on. */
export class TransferError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TransferError';
  }
}

/** Where a result may be fetched from. */
export interface FetchOptions {
  /** Allow loopback and private addresses (a local cluster's keepers); off by default. */
  allowPrivate?: boolean;
}

const PRIVATE_V4 = [/^127\./, /^10\./, /^192\.168\./, /^172\.(1[6-9]|2\d|3[01])\./, /^169\.254\./, /^0\./, /^100\.(6[4-9]|[7-9]\d|1[01]\d|12[0-7])\./];

/** Refuses a result URI read from chain (a provider's, so a stranger's) that is not plain
 * http(s), carries credentials, or names a loopback, private or link-local host unless
 * `allowPrivate`: a page must not be made to send requests into its user's network. */
export function checkServedUri(uri: string, options: FetchOptions = {}): URL {
  let u: URL;
  try {
    u = new URL(uri);
  } catch {
    throw new TransferError(`the result URI ${JSON.stringify(uri.slice(0, 140))} is not a URL`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new TransferError(`the result URI's scheme is ${u.protocol}, only http(s) is fetched`);
  if (u.username || u.password) throw new TransferError('the result URI carries credentials: refused');
  const h = u.hostname.toLowerCase().replace(/\.+$/, '');
  const local =
    h === 'localhost' || h.endsWith('.localhost') || h.endsWith('.local') || PRIVATE_V4.some((r) => r.test(h)) ||
    (h.startsWith('[') && (h === '[::1]' || h === '[::]' || /^\[f[cd]/.test(h) || /^\[fe[89ab]/.test(h) || h.startsWith('[::ffff:')));
  if (local && !options.allowPrivate) throw new TransferError(`the result is served from ${u.host}, a local or private address: refused off localnet`);
  return u;
}

/** One request: no cookies or credentials to a stranger, no redirect away from the address named. */
async function attempt(url: string, init: RequestInit, what: string): Promise<Response> {
  try {
    return await fetch(url, { ...init, credentials: 'omit', redirect: 'error' });
  } catch (e) {
    throw new TransferError(`${what}: ${new URL(url).origin} is unreachable (${(e as Error).message})`);
  }
}

/** The start of a refused answer's body, for its error. */
async function said(r: Response): Promise<string> {
  const body = (await r.text().catch(() => '')).slice(0, 300);
  return `${r.status}${body ? `: ${body}` : ''}`;
}

async function send(url: string, init: RequestInit, what: string): Promise<Response> {
  const r = await attempt(url, init, what);
  if (!r.ok) throw new TransferError(`${what}: ${new URL(url).origin} answered ${await said(r)}`);
  return r;
}

/** Reads at most `limit` bytes of a response body, refusing a longer one. */
async function body(r: Response, limit: number, what: string): Promise<Uint8Array> {
  const declared = Number(r.headers.get('content-length') ?? NaN);
  if (declared > limit) throw new TransferError(`${what}: ${declared} bytes served, at most ${limit} expected`);
  const reader = r.body?.getReader();
  if (!reader) return new Uint8Array(await r.arrayBuffer()).slice(0, limit + 1);
  const parts: Uint8Array[] = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.length;
    if (n > limit) {
      await reader.cancel();
      throw new TransferError(`${what}: more than the ${limit} bytes expected were served`);
    }
    parts.push(value);
  }
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The object `sha256` (lowercase hex) of `bytes` bytes from the content store at `store`
 * (`GET /c/<sha256>`): read no further than its length, within `timeoutMs`, and refused unless
 * it is exactly that length (at most that length when `exact` is false) and hashes to that
 * address. */
export async function fetchContent(store: string, sha: string, bytes: number, timeoutMs = 60_000, exact = true): Promise<Uint8Array> {
  if (!/^[0-9a-f]{64}$/.test(sha)) throw new Error(`a content address is 64 lowercase hex digits, not ${JSON.stringify(sha)}`);
  if (!(Number.isSafeInteger(bytes) && bytes >= 0)) throw new Error(`an object's length is a whole number of bytes, not ${bytes}`);
  const what = `fetching ${sha.slice(0, 12)}… from the content store`;
  const r = await send(`${store.replace(/\/$/, '')}/c/${sha}`, { signal: AbortSignal.timeout(timeoutMs) }, what);
  const got = await body(r, bytes, what);
  if (exact && got.length !== bytes) throw new TransferError(`${what}: ${got.length} bytes served, ${bytes} expected`);
  if (hex(await sha256(got)) !== sha) throw new TransferError(`${what}: what was served does not hash to its address`);
  return got;
}

/** Uploads `bytes` to the content store at `store` as `PUT /c/<sha256>`; returns the hash.
 * A busy store (503 or 429) is waited out as its `Retry-After` asks (each wait at most 5 s,
 * with jitter) for up to `patienceMs`, as the Rust client does. */
export async function uploadContent(store: string, bytes: Uint8Array, patienceMs = 60_000): Promise<string> {
  const h = hex(await sha256(bytes));
  const url = `${store.replace(/\/$/, '')}/c/${h}`;
  const what = 'uploading to the content store';
  const started = Date.now();
  for (;;) {
    // each try bounded in time, its answer's body included
    const r = await attempt(url, { method: 'PUT', body: bytes as Uint8Array<ArrayBuffer>, signal: AbortSignal.timeout(120_000) }, what);
    if (r.status !== 503 && r.status !== 429) {
      if (!r.ok) throw new TransferError(`${what}: ${new URL(url).origin} answered ${await said(r)}`);
      return h;
    }
    const asked = Number(r.headers.get('retry-after'));
    // at least half a second: each try sends the whole body again
    const wait = Math.min(5_000, Math.max(500, Number.isFinite(asked) ? asked * 1000 : 500));
    const why = await said(r);
    if (Date.now() - started + wait > patienceMs) {
      throw new TransferError(`${what}: ${new URL(url).origin} stayed busy for ${Math.round((Date.now() - started) / 1000)} s (${why}); retry later or use a less loaded store`);
    }
    await new Promise((res) => setTimeout(res, wait * (1 + Math.random() / 2)));
  }
}

/** One tile with its sibling path, as served. */
export interface ProvenTile {
  index: number;
  tile: Uint8Array;
  proof: Uint8Array[];
}

/** Decodes a `/tiles` body for a request of `asked` tiles (results::wire), bounding every length. */
export function decodeProven(job: JobSpec, asked: number, b: Uint8Array): ProvenTile[] {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let at = 0;
  const need = (n: number) => {
    if (at + n > b.length) throw new TransferError(`the served tiles end at byte ${b.length}, ${at + n} needed`);
  };
  const u32 = () => {
    need(4);
    at += 4;
    return v.getUint32(at - 4, true);
  };
  const out: ProvenTile[] = [];
  while (at < b.length) {
    if (out.length === asked) throw new TransferError(`served more than the ${asked} tiles asked for`);
    const index = u32();
    const len = u32();
    if (len !== tileLen(job)) throw new TransferError(`served tile ${index} is ${len} bytes, the job's tiles are ${tileLen(job)}`);
    need(len);
    const tile = b.slice(at, at + len);
    at += len;
    const p = u32();
    if (p > MAX_PROOF) throw new TransferError(`served tile ${index} has a proof of ${p} digests`);
    need(32 * p);
    const proof = Array.from({ length: p }, (_, k) => b.slice(at + 32 * k, at + 32 * (k + 1)));
    at += 32 * p;
    out.push({ index, tile, proof });
  }
  return out;
}

/** Checks served tiles against `root`: exactly the `indices` asked for, each proving its place. */
export function checkProven(job: JobSpec, root: Uint8Array, indices: number[], served: ProvenTile[]): Uint8Array[] {
  const count = tileCount(job);
  const byIndex = new Map(served.map((s) => [s.index, s]));
  return indices.map((i) => {
    const s = byIndex.get(i);
    if (!s) throw new TransferError(`tile ${i} was not served`);
    if (!verifyProof(root, i, count, leafHash(i, count, s.tile), s.proof)) {
      throw new TransferError(`tile ${i} has no valid proof to the root on chain`);
    }
    return s.tile;
  });
}

/** Every tile of a result from `resultUrl` (`<host>/r/<root>`), checked against `root`. */
export async function fetchResult(resultUrl: string, job: JobSpec, root: Uint8Array, options: FetchOptions = {}): Promise<Uint8Array[]> {
  checkServedUri(resultUrl, options);
  const len = tileLen(job);
  const all = await body(await send(`${resultUrl}/all`, {}, 'fetching the result'), tileCount(job) * len, 'the result');
  if (all.length !== tileCount(job) * len) {
    throw new TransferError(`the result is ${all.length} bytes, the job's ${tileCount(job)} tiles are ${tileCount(job) * len}`);
  }
  const tiles = Array.from({ length: tileCount(job) }, (_, i) => all.slice(i * len, (i + 1) * len));
  if (hex(rootOfTiles(tiles)) !== hex(root)) throw new TransferError('the result served does not hash to the root on chain');
  return tiles;
}

/** Tiles `indices` (distinct) of a result with their proofs, each checked against `root`. */
export async function fetchProvenTiles(resultUrl: string, job: JobSpec, root: Uint8Array, indices: number[], options: FetchOptions = {}): Promise<ProvenTile[]> {
  checkServedUri(resultUrl, options);
  const count = tileCount(job);
  const distinct = [...new Set(indices)];
  const bad = distinct.find((i) => !Number.isInteger(i) || i < 0 || i >= count);
  if (bad !== undefined) throw new TransferError(`tile ${bad} is out of range: the result has ${count} tiles`);
  const limit = distinct.length * (12 + tileLen(job) + 32 * MAX_PROOF);
  const r = await send(`${resultUrl}/tiles?i=${distinct.join(',')}`, {}, 'fetching tiles of the result');
  const served = decodeProven(job, distinct.length, await body(r, limit, 'the tiles'));
  checkProven(job, root, distinct, served);
  const byIndex = new Map(served.map((s) => [s.index, s]));
  return distinct.map((i) => byIndex.get(i)!);
}

/** Tiles `indices` of a result, each checked against `root` by its proof. */
export async function fetchTiles(resultUrl: string, job: JobSpec, root: Uint8Array, indices: number[], options: FetchOptions = {}): Promise<Uint8Array[]> {
  const proven = await fetchProvenTiles(resultUrl, job, root, indices, options);
  const byIndex = new Map(proven.map((s) => [s.index, s.tile]));
  return indices.map((i) => byIndex.get(i)!);
}
