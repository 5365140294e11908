// Results in and out over HTTP: what `keeper serve` sends (results::wire, written by Rust in
// rust-written.json) decoded and checked against the root; a local server stands in for the
// keeper, serving those bytes, then tampered ones; uploads land at /c/<sha256>.
import { createServer, type Server } from 'node:http';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkServedUri, decodeJobSpec, decodeProven, fetchContent, fetchResult, fetchTiles, sha256, TransferError, uploadContent } from '../src';

const local = { allowPrivate: true };

const s = JSON.parse(readFileSync(join(__dirname, 'fixtures', 'rust-written.json'), 'utf8')).served;
const unhex = (x: string) => new Uint8Array(Buffer.from(x, 'hex'));
const job = decodeJobSpec(unhex(s.job));
const root = unhex(s.root);
const all = unhex(s.all);
const tiles = unhex(s.tiles);

let server: Server;
let base = '';
let serveAll = all;
let serveTiles = tiles;
let serveContent = new TextEncoder().encode('[PAD]\n[UNK]\n');
const uploads: { url: string; body: Buffer }[] = [];
let busyAnswers = 0;

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'PUT') {
        if (req.url!.includes('busy') && busyAnswers > 0) {
          busyAnswers -= 1;
          res.writeHead(503, { 'retry-after': '1' }).end('too many transfers in flight; retry');
          return;
        }
        uploads.push({ url: req.url!, body: Buffer.concat(chunks) });
        res.writeHead(req.url!.includes('full') ? 507 : 201).end(req.url!.includes('full') ? 'the content store is over its budget' : '');
      } else if (req.url!.startsWith('/c/')) res.end(Buffer.from(serveContent));
      else if (req.url!.endsWith('/all')) res.end(Buffer.from(serveAll));
      else if (req.url!.includes('/tiles?i=')) res.end(Buffer.from(serveTiles));
      else res.writeHead(404).end('no such result');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const a = server.address() as { port: number };
  base = `http://127.0.0.1:${a.port}`;
});
afterAll(() => server.close());

describe('content', () => {
  it('is fetched by its address, no further than its length, and refused unless it hashes to it', async () => {
    const good = serveContent;
    const h = Buffer.from(await sha256(good)).toString('hex');
    expect(await fetchContent(base, h, good.length)).toEqual(good);
    await expect(fetchContent(base, h, good.length - 1)).rejects.toThrow('12 bytes served, at most 11 expected');
    await expect(fetchContent(base, h, good.length + 1)).rejects.toThrow('12 bytes served, 13 expected');
    serveContent = new TextEncoder().encode('[PAD]\n[UNK]\r');
    await expect(fetchContent(base, h, good.length)).rejects.toThrow('does not hash to its address');
    serveContent = good;
    await expect(fetchContent(base, 'ABC', 1)).rejects.toThrow('64 lowercase hex digits');
  });
});

describe('results', () => {
  it("decodes the keeper's proven tiles and bounds every length", () => {
    const got = decodeProven(job, 3, tiles);
    expect(got.map((t) => t.index)).toEqual(s.indices);
    expect(() => decodeProven(job, 2, tiles)).toThrow('served more than the 2 tiles asked for');
    expect(() => decodeProven(job, 3, tiles.subarray(0, tiles.length - 1))).toThrow('the served tiles end at byte');
  });

  it('fetches the whole result and some tiles, each checked against the root on chain', async () => {
    const r = `${base}/r/${s.root}`;
    const whole = await fetchResult(r, job, root, local);
    expect(Buffer.concat(whole)).toEqual(Buffer.from(all));
    const some = await fetchTiles(r, job, root, [4, 0, 2], local);
    expect(some.map((t) => Buffer.from(t))).toEqual([4, 0, 2].map((i) => Buffer.from(whole[i])));
    await expect(fetchTiles(r, job, root, [5], local)).rejects.toThrow('tile 5 is out of range: the result has 5 tiles');
  });

  it('refuses a result or a tile that does not match the root, and says when a host is down', async () => {
    const r = `${base}/r/${s.root}`;
    serveAll = all.slice();
    serveAll[7] ^= 1;
    await expect(fetchResult(r, job, root, local)).rejects.toThrow('the result served does not hash to the root on chain');
    serveAll = all.subarray(0, all.length - 1);
    await expect(fetchResult(r, job, root, local)).rejects.toThrow(TransferError);
    serveTiles = tiles.slice();
    serveTiles[20] ^= 1; // a byte of the first tile (index 4)
    await expect(fetchTiles(r, job, root, [4, 0, 2], local)).rejects.toThrow('tile 4 has no valid proof to the root on chain');
    serveAll = all;
    serveTiles = tiles;
    await expect(fetchResult('http://127.0.0.1:9/r/x', job, root, local)).rejects.toThrow('http://127.0.0.1:9 is unreachable');
  });

  it('uploads to /c/<sha256> and names a full store', async () => {
    const bytes = new TextEncoder().encode('a text\n');
    const h = await uploadContent(base, bytes);
    expect(h).toBe(Buffer.from(await sha256(bytes)).toString('hex'));
    expect(uploads.at(-1)).toEqual({ url: `/c/${h}`, body: Buffer.from(bytes) });
    await expect(uploadContent(`${base}/full`, bytes)).rejects.toThrow('answered 507: the content store is over its budget');
  });

  it('waits out a busy store as its Retry-After asks, within its patience', async () => {
    const bytes = new TextEncoder().encode('later\n');
    busyAnswers = 2;
    const t0 = Date.now();
    const h = await uploadContent(`${base}/busy`, bytes);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1900);
    expect(uploads.at(-1)).toEqual({ url: `/busy/c/${h}`, body: Buffer.from(bytes) });
    busyAnswers = 5;
    await expect(uploadContent(`${base}/busy`, bytes, 1_500)).rejects.toThrow('stayed busy for 1 s (503: too many transfers in flight; retry)');
    busyAnswers = 0;
  }, 15_000);

  it('fetches only from plain http(s) public hosts unless told the cluster is local', async () => {
    for (const [uri, why] of [
      ['javascript:alert(1)', 'only http(s) is fetched'],
      ['file:///etc/passwd', 'only http(s) is fetched'],
      ['http://user:pw@example.com/r/x', 'carries credentials'],
      ['http://192.168.1.1/reboot.cgi?x=', 'a local or private address'],
      ['http://10.0.0.8:9300/r/x', 'a local or private address'],
      ['http://127.0.0.1:9300/r/x', 'a local or private address'],
      ['http://[::1]:9300/r/x', 'a local or private address'],
      ['http://router.local/r/x', 'a local or private address'],
      ['http://localhost./r/x', 'a local or private address'],
      ['http://2130706433/r/x', 'a local or private address'],
      ['http://[::ffff:127.0.0.1]/r/x', 'a local or private address'],
      ['not a url', 'is not a URL'],
    ]) {
      expect(() => checkServedUri(uri), uri).toThrow(why);
    }
    expect(checkServedUri('https://provider.example:9300/r/ab').host).toBe('provider.example:9300');
    expect(checkServedUri('http://127.0.0.1:9300/r/ab', local).port).toBe('9300');
    await expect(fetchResult('http://10.1.2.3/r/x', job, root)).rejects.toThrow('refused off localnet');
  });
});
