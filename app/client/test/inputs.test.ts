// Jobs on a client's own data built by the client (mlpJob, encoderJob) against what
// `keeper task post --model` prepares for the same data (keeper/tests/ts_fixtures.rs): the
// job spec, the client's part and the manifest, byte for byte; and the result decoders.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  embeddings,
  cosine,
  decodeJobSpec,
  decodeManifest,
  encodeJobSpec,
  encoderJob,
  InputMode,
  JobKind,
  mlpClasses,
  mlpJob,
  programErrorOf,
  tokenBound,
  tileLen,
  type ModelInfo,
  encoderTokenizer,
  tensorBytes,
  tokenIds,
  chatTokenizer,
  completions,
  generateJob,
  GREEDY,
} from '../src';
import { cachedModel } from './models';

const rust = JSON.parse(readFileSync(join(__dirname, 'fixtures', 'rust-written.json'), 'utf8')).prepared;
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const unhex = (s: string) => new Uint8Array(Buffer.from(s, 'hex'));

describe('jobs on the client data', () => {
  it('an Mlp job over rows is the one the Rust CLI prepares', async () => {
    const m = rust.mlp;
    const rows = m.rows.map((r: string) => new Int8Array(unhex(r).buffer));
    const p = await mlpJob(m.model as ModelInfo, rows, m.rowsPerTile);
    expect(hex(encodeJobSpec(p.job))).toBe(m.job);
    expect(hex(p.parts[0])).toBe(m.batch);
    expect(hex(p.manifest)).toBe(m.manifest);
  });

  it('an Encoder job over texts is the one the Rust CLI prepares, less its slices, and the token bound covers each text', async () => {
    const e = rust.encoder;
    const p = await encoderJob(e.model as ModelInfo, e.texts, e.rowsPerTile, e.maxTokens);
    expect(hex(encodeJobSpec(p.job))).toBe(e.job);
    // the CLI also names the texts' token ids (PROTOCOL §8.7), which this client cannot compute
    expect(decodeJobSpec(unhex(e.slicedJob)).slicesLen).toBeGreaterThan(0n);
    expect(p.job.slicesLen ?? 0n).toBe(0n);
    expect(hex(p.parts[0])).toBe(e.part);
    expect(hex(p.manifest)).toBe(e.manifest);
    // without a limit, the longest text's bound: never below the tokens it has (at most 24 here)
    const q = await encoderJob(e.model as ModelInfo, e.texts, e.rowsPerTile);
    expect(q.job.dims[1]).toBe(Math.max(...e.texts.map(tokenBound)));
    expect(q.job.dims[1]).toBeGreaterThanOrEqual(12);
  });

  it("given the model's tokenizer, an Encoder job is the one the Rust CLI prepares, its texts' ids' slices named", async () => {
    const e = rust.encoder;
    const file = cachedModel('minilm-int8.safetensors');
    // the tokenizer published beside the model is the vocabulary its file carries
    const vocab = tensorBytes(file, 'vocab');
    expect(createHash('sha256').update(vocab).digest('hex')).toBe(e.model.tokenizer.sha256);
    const tok = encoderTokenizer(new TextDecoder().decode(vocab));
    const p = await encoderJob(e.model as ModelInfo, e.texts, e.rowsPerTile, e.maxTokens, tok);
    expect(hex(encodeJobSpec(p.job))).toBe(e.slicedJob);
    expect(hex(p.parts[0])).toBe(e.part);
    expect(hex(p.manifest)).toBe(e.slicedManifest);
    expect(p.manifest[4]).toBe(2);
    // without a limit, the longest text's tokens exactly (not the bound's overestimate)
    const q = await encoderJob(e.model as ModelInfo, e.texts, e.rowsPerTile, undefined, tok);
    const longest = Math.max(...e.texts.map((t: string) => tokenIds(tok, t, true).length));
    expect(q.job.dims[1]).toBe(longest);
    expect(longest).toBeLessThan(Math.max(...e.texts.map(tokenBound)));
    // a text over the limit is refused by number, with its tokens
    await expect(encoderJob(e.model as ModelInfo, e.texts, 2, 5, tok)).rejects.toThrow(/text 1 is \d+ tokens, over the limit of 5/);
    await expect(encoderJob(e.model as ModelInfo, e.texts, 2, 0, tok)).rejects.toThrow(/the model takes 1 to/);
    // the tokenizer given where rowsPerTile goes: named
    await expect(encoderJob(e.model as ModelInfo, e.texts, tok as any)).rejects.toThrow(/rowsPerTile .*: a tile holds 1 to 64 texts \(the tokenizer is the fifth argument\)/);
  });

  it('a Generate job over prompts is the one the Rust CLI prepares: prompts in the chat template, tokenized, sampled', async () => {
    const g = rust.generate;
    const chat = chatTokenizer(cachedModel('smollm2-int.safetensors'));
    const sampling = { ...g.sampling, seed: BigInt(g.sampling.seed) };
    const p = await generateJob(g.model as ModelInfo, g.prompts, chat, { maxNew: g.maxNew, sampling });
    expect(hex(encodeJobSpec(p.job))).toBe(g.job);
    expect(hex(p.parts[0])).toBe(g.part);
    expect(hex(p.manifest)).toBe(g.manifest);
    const job = decodeJobSpec(unhex(g.job));
    expect(job.kind).toBe(JobKind.Generate);
    expect(tileLen(job)).toBe(4 * (g.maxNew + 1));
    // bad input refused by name before anything is uploaded
    const m = g.model as ModelInfo;
    await expect(generateJob(m, [], chat)).rejects.toThrow(/no prompt/);
    await expect(generateJob(m, ['ok', '  '], chat)).rejects.toThrow(/prompt 2 is empty/);
    await expect(generateJob(m, g.prompts, chat, { maxNew: 0 })).rejects.toThrow(/maxNew 0: a completion takes a whole number of 1 to 1024 new tokens/);
    await expect(generateJob(m, g.prompts, chat, { maxNew: '32' as any })).rejects.toThrow(/maxNew "32": a completion takes a whole number/);
    await expect(generateJob(m, g.prompts, chat, { maxNew: 1025 })).rejects.toThrow(/maxNew 1025: a completion takes a whole number of 1 to 1024/);
    await expect(generateJob(m, g.prompts, chat, { maxTokens: 3 })).rejects.toThrow(/prompt 1 is \d+ tokens in the chat template, more than the limit of 3/);
    await expect(generateJob(m, ['x'.repeat(9000)], chat, { maxNew: 1000 })).rejects.toThrow(/at most 1048 fit beside 1000 new tokens/);
    await expect(generateJob(m, g.prompts, chat, { sampling: { ...GREEDY, topP: 0 } })).rejects.toThrow(/top-p 0/);
    await expect(generateJob(m, g.prompts, chat, { sampling: { ...GREEDY, topP: 0.9 } })).rejects.toThrow(/top-p 0.9: a whole number in Q16, 1 to 65 536 \(1.0\); 0.9 is 58982/);
    await expect(generateJob(m, g.prompts, chat, { sampling: { ...GREEDY, seed: 1 as any } })).rejects.toThrow(/seed 1: a bigint/);
    await expect(generateJob(rust.encoder.model as ModelInfo, g.prompts, chat)).rejects.toThrow(/needs a decoder model, not an encoder one: use the entry `keeper model publish/);
    await expect(generateJob(m, 'hi' as any, chat)).rejects.toThrow(/the prompts are an array of strings/);
    // the sampling rule's fields not given are greedy's: a temperature alone samples
    const warm = await generateJob(m, g.prompts, chat, { maxNew: g.maxNew, sampling: { temperature: 180 } as any });
    expect(warm.parts[0].length).toBe(unhex(g.part).length);
  });

  it('completions are read from Generate tiles: each its count, then its ids', () => {
    const job = decodeJobSpec(unhex(rust.generate.job));
    const tile = new Uint8Array(tileLen(job));
    const v = new DataView(tile.buffer);
    v.setUint32(0, 3, true);
    [17, 4, 2].forEach((id, i) => v.setUint32(4 + 4 * i, id, true));
    expect(completions(job, [tile, new Uint8Array(tileLen(job))])).toEqual([[17, 4, 2], []]);
    // a count past G, or a token past the count, is refused
    v.setUint32(0, job.dims[2] + 1, true);
    expect(() => completions(job, [tile])).toThrow(/completion 1 says 49 tokens, more than the job's 48/);
    v.setUint32(0, 2, true);
    expect(() => completions(job, [tile])).toThrow(/completion 1 has a token past its count of 2/);
  });

  it('an Mlp job names its slices (a version-2 manifest) and its spec declares them, checked as Rust checks them', async () => {
    const m = rust.mlp;
    const rows = m.rows.map((r: string) => new Int8Array(unhex(r).buffer));
    const p = await mlpJob(m.model as ModelInfo, rows, 8);
    expect(p.job.slicesLen).toBe(BigInt(m.model.slices.len));
    expect(decodeJobSpec(encodeJobSpec(p.job)).slicesLen).toBe(p.job.slicesLen);
    expect(p.manifest[4]).toBe(2);
    const parts = decodeManifest(p.manifest);
    expect(parts.map((x) => x.slices?.len)).toEqual([BigInt(m.model.slices.len), BigInt(3 * 64)]);
    // a generated job declares none
    const generated = encodeJobSpec({
      kind: JobKind.MatMulModP,
      inputMode: InputMode.Generated,
      dims: [2, 8, 2],
      input: new Uint8Array(32),
      rowsPerTile: 0,
      workPerRow: 0n,
      slicesLen: 1n,
    });
    expect(() => decodeJobSpec(generated)).toThrow('reserved job-spec bytes must be zero');
    // a model published without its slices: version 1, nothing declared (not refereed)
    const { slices: _, ...old } = m.model;
    const q = await mlpJob(old as ModelInfo, rows, 8);
    expect(q.manifest[4]).toBe(1);
    expect(q.job.slicesLen ?? 0n).toBe(0n);
  });

  it('bad data is refused by name', async () => {
    const { mlp, encoder } = rust;
    await expect(mlpJob(mlp.model, [new Int8Array(63)])).rejects.toThrow('row 1 has 63 values, the model takes 64');
    await expect(mlpJob(encoder.model, [new Int8Array(64)])).rejects.toThrow('needs an MLP model');
    await expect(encoderJob(encoder.model, ['fine', ''])).rejects.toThrow('text 2 is empty');
    await expect(encoderJob(encoder.model, ['x'.repeat(600)])).rejects.toThrow("longer than the model's 512 tokens");
    await expect(encoderJob(encoder.model, ['x'.repeat(33)], 2, 2)).rejects.toThrow('text 1 is over 16 bytes a token of the 2-token limit');
    await expect(mlpJob({ ...mlp.model, sha256: 'nothex' }, [new Int8Array(64)])).rejects.toThrow('64 lowercase hex digits');
  });

  it('decodes classes and embeddings from tiles, rows past the batch dropped', async () => {
    const p = await mlpJob(rust.mlp.model, rust.mlp.rows.map((r: string) => new Int8Array(unhex(r).buffer)), 8);
    const tile = new Uint8Array(tileLen(p.job));
    const v = new DataView(tile.buffer);
    for (let r = 0; r < 3; r++) {
      v.setInt32(r * 44 + 4 * r, -5 - r, true);
      v.setUint32(r * 44 + 40, 7 - r, true);
    }
    const c = mlpClasses(p.job, [tile]);
    expect(c.map((x) => x.class)).toEqual([7, 6, 5]);
    expect(c[2].logits[2]).toBe(-7);
    const q = await encoderJob(rust.encoder.model, ['a', 'b', 'c'], 2, 8);
    const tiles = [new Uint8Array(tileLen(q.job)), new Uint8Array(tileLen(q.job))];
    new DataView(tiles[0].buffer).setInt16(0, 300, true);
    new DataView(tiles[0].buffer).setInt16(768, 300, true);
    new DataView(tiles[1].buffer).setInt16(2, -4, true);
    const e = embeddings(q.job, tiles);
    expect(e.length).toBe(3);
    expect(cosine(e[0], e[1])).toBeCloseTo(1);
    expect(cosine(e[0], e[2])).toBe(0);
  });

  it("names the program's error in a refused transaction's error chain", () => {
    const e = { message: 'simulation failed', cause: { context: { code: 6012, index: 1 } } };
    const named = programErrorOf(e);
    expect(named?.code).toBe(6012);
    expect(typeof named?.name).toBe('string');
    expect(programErrorOf(new Error('no code'))).toBeUndefined();
  });
});
