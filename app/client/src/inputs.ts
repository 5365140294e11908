// A client's own data as a job (PROTOCOL §5, Mlp and Encoder): a model already hosted on a
// content store (`keeper model publish` prints its `ModelInfo`), the client's rows or texts as
// a part, the manifest over both and the job spec on it — what `keeper task post --model`
// builds, so that providers accept it. And the verified result read back: classes, embeddings.

import { getBase16Encoder } from '@solana/kit';
import { InputMode, JobKind, MAX_ENCODER_TOKENS, encoderWorkPerToken, tileLen, type JobSpec } from './job';
import { blake3 } from './commitment';
import { encodeManifest, formatOf, manifestHash, partOf, Role, type Part } from './manifest';
import { tokenIds } from './tokenize';
import type { Tokenizer } from '@huggingface/tokenizers';

/** What `keeper model publish` prints for a model: its content address and the figures a
 * job on it carries. */
export type ModelInfo =
  | {
      kind: 'mlp';
      sha256: string;
      bytes: number;
      features: number;
      classes: number;
      work_per_row: number | bigint;
      /** The model's slice string (PROTOCOL §8.7): with it the job names its inputs' slices
       * (a version-2 manifest) and the program can referee it; without, version 1. */
      slices?: { len: number | bigint; root: string };
    }
  | {
      kind: 'encoder';
      sha256: string;
      bytes: number;
      blocks: number;
      hidden: number;
      ffn: number;
      heads: number;
      positions: number;
      /** The model's slice string (PROTOCOL §8.7): with it and the texts' token ids the job
       * names its inputs' slices (a version-2 manifest) and the program can referee it. */
      slices?: { len: number | bigint; root: string };
      /** Its tokenizer (the WordPiece vocabulary, one token a line) on the content store
       * beside it: `<store>/c/<sha256>`, for {@link encoderTokenizer}. */
      tokenizer?: { sha256: string; bytes: number };
    };

/** A job on the client's data, ready to upload (`parts`, then `manifest`) and post (`job`). */
export interface PreparedJob {
  job: JobSpec;
  /** The client's own parts (the model is already on the store). */
  parts: Uint8Array[];
  manifest: Uint8Array;
}

const hexBytes = (h: string): Uint8Array => {
  if (!/^[0-9a-f]{64}$/.test(h)) throw new Error(`a model's sha256 is 64 lowercase hex digits, not ${JSON.stringify(h)}`);
  return new Uint8Array(getBase16Encoder().encode(h));
};

function modelPart(model: ModelInfo): Part {
  return { role: Role.Model, format: formatOf(Role.Model), hash: hexBytes(model.sha256), len: BigInt(model.bytes) };
}

/** A safetensors file of one tensor (8-byte header length, the JSON header padded to 8). */
export function safetensorsOf(name: string, dtype: 'I8' | 'I16' | 'U32', shape: number[], data: Uint8Array): Uint8Array {
  let header = JSON.stringify({ [name]: { dtype, shape, data_offsets: [0, data.length] } });
  header += ' '.repeat((8 - (header.length % 8)) % 8);
  const h = new TextEncoder().encode(header);
  const out = new Uint8Array(8 + h.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(h.length), true);
  out.set(h, 8);
  out.set(data, 8 + h.length);
  return out;
}

async function prepared(
  job: Omit<JobSpec, 'input'>,
  model: ModelInfo,
  role: Role,
  bytes: Uint8Array,
  slices?: Uint8Array,
): Promise<PreparedJob> {
  const parts = [modelPart(model), await partOf(role, bytes)];
  if (model.slices && slices) {
    // both parts' slices named: a version-2 manifest, and the spec declares the model's
    parts[0].slices = { len: BigInt(model.slices.len), root: hexBytes(model.slices.root) };
    parts[1].slices = { len: BigInt(slices.length), root: blake3(slices) };
    job = { ...job, slicesLen: BigInt(model.slices.len) };
  }
  return { job: { ...job, input: await manifestHash(parts) }, parts: [bytes], manifest: encodeManifest(parts) };
}

/** An `Mlp` job classifying `rows` (each `features` int8 values) with `model`. */
export async function mlpJob(model: ModelInfo, rows: Int8Array[], rowsPerTile = 8): Promise<PreparedJob> {
  if (model.kind !== 'mlp') throw new Error('an Mlp job needs an MLP model');
  if (rows.length === 0) throw new Error('no rows to classify');
  const bad = rows.findIndex((r) => r.length !== model.features);
  if (bad >= 0) throw new Error(`row ${bad + 1} has ${rows[bad].length} values, the model takes ${model.features}`);
  const x = new Uint8Array(rows.length * model.features);
  rows.forEach((r, i) => x.set(new Uint8Array(r.buffer, r.byteOffset, r.length), i * model.features));
  const batch = safetensorsOf('x', 'I8', [rows.length, model.features], x);
  const job = {
    kind: JobKind.Mlp,
    inputMode: InputMode.ContentHash,
    dims: [rows.length, model.features, model.classes] as [number, number, number],
    rowsPerTile,
    workPerRow: BigInt(model.work_per_row),
  };
  // the batch's slice string is its int8 values (PROTOCOL §8.7)
  return prepared(job, model, Role.Batch, batch, x);
}

/** At least the BERT tokens of `text` ([CLS] and [SEP] included): every WordPiece token
 * covers one character or more of the normalized text, so characters + 2 bounds them. The
 * page prices at this bound; providers tokenize exactly and refuse a text over the limit. */
export function tokenBound(text: string): number {
  return [...text.toLowerCase().normalize('NFD')].length + 2;
}

/** Bytes a text may take per token of the job's limit (PROTOCOL §5, Encoder). */
export const ENCODER_TEXT_BYTES_PER_TOKEN = 16;
/** Most bytes of a texts part. */
export const MAX_TEXTS_BYTES = 64 << 20;

/** An `Encoder` job embedding `texts` (one per line in the part) with `model`.
 *
 * Given the model's `tokenizer` ({@link encoderTokenizer} over the vocabulary published beside
 * it), the texts are tokenized as providers will: the limit is the longest text's tokens (or
 * `maxTokens`, refusing a text over it by number), and when the model names its slices the job
 * names the texts' ids' too (a version-2 manifest, as `keeper task post` builds it), so that
 * the program referees it. Without a tokenizer the limit is the longest text's bound
 * ({@link tokenBound}) and the job is not refereed; a `maxTokens` below the bound is then the
 * caller's promise that the texts fit: providers tokenize exactly and refuse a job with a
 * longer text, which expires unclaimed and its reward goes back to the client. */
export async function encoderJob(
  model: ModelInfo,
  texts: string[],
  rowsPerTile = 2,
  maxTokens?: number,
  tokenizer?: Tokenizer,
): Promise<PreparedJob> {
  if (model.kind !== 'encoder') throw new Error('an Encoder job needs an encoder model');
  if (texts.length === 0) throw new Error('no texts to embed');
  const empty = texts.findIndex((t) => t.trim() === '' || t.includes('\n'));
  if (empty >= 0) throw new Error(`text ${empty + 1} is empty or spans lines: one text a line`);
  const positions = Math.min(model.positions, MAX_ENCODER_TOKENS);
  if (maxTokens !== undefined && !(Number.isInteger(maxTokens) && maxTokens >= 1 && maxTokens <= positions)) {
    throw new Error(`a limit of ${maxTokens} tokens: the model takes 1 to ${positions} tokens a text`);
  }
  const ids = tokenizer ? texts.map((t) => tokenIds(tokenizer, t, true)) : undefined;
  let limit: number;
  if (ids) {
    limit = maxTokens ?? Math.max(...ids.map((t) => t.length));
    const long = ids.findIndex((t) => t.length > Math.min(limit, positions));
    if (long >= 0) throw new Error(`text ${long + 1} is ${ids[long].length} tokens, over the limit of ${Math.min(limit, positions)}: shorten it`);
  } else {
    limit = maxTokens ?? Math.min(positions, Math.max(...texts.map(tokenBound)));
    const long = texts.findIndex((t) => tokenBound(t) > limit && tokenBound(t) > positions);
    if (long >= 0) throw new Error(`text ${long + 1} may be longer than the model's ${positions} tokens: shorten it`);
  }
  // providers refuse a text over 16 bytes a token of the limit, and a texts part over
  // min(16·N·L, 64 MiB): refused here first, by the text's number
  const enc = new TextEncoder();
  const heavy = texts.findIndex((t) => enc.encode(t).length > ENCODER_TEXT_BYTES_PER_TOKEN * limit);
  if (heavy >= 0) throw new Error(`text ${heavy + 1} is over ${ENCODER_TEXT_BYTES_PER_TOKEN} bytes a token of the ${limit}-token limit`);
  const bytes = enc.encode(texts.join('\n') + '\n');
  const most = Math.min(ENCODER_TEXT_BYTES_PER_TOKEN * texts.length * limit, MAX_TEXTS_BYTES);
  if (bytes.length > most) throw new Error(`the texts are ${bytes.length} bytes, more than the ${most} a texts part of this job may hold`);
  const job = {
    kind: JobKind.Encoder,
    inputMode: InputMode.ContentHash,
    dims: [texts.length, limit, model.hidden] as [number, number, number],
    rowsPerTile,
    workPerRow: encoderWorkPerToken(BigInt(model.blocks), BigInt(model.hidden), BigInt(model.ffn), BigInt(model.heads), BigInt(limit)),
  };
  return prepared(job, model, Role.Texts, bytes, ids && idsSlices(ids, limit));
}

/** An `Encoder` job's texts' slice string (PROTOCOL §8.7): each text `4 (L + 1)` bytes, its
 * token count then its ids, little-endian, zeros after them. */
export function idsSlices(ids: number[][], limit: number): Uint8Array {
  const stride = 4 * (limit + 1);
  const out = new Uint8Array(ids.length * stride);
  const v = new DataView(out.buffer);
  ids.forEach((t, r) => {
    if (t.length > limit) throw new Error(`text ${r + 1} has ${t.length} tokens, over the limit of ${limit}`);
    v.setUint32(r * stride, t.length, true);
    t.forEach((id, i) => v.setUint32(r * stride + 4 + 4 * i, id, true));
  });
  return out;
}

function rowsOf(job: JobSpec, tiles: Uint8Array[], rowLen: number): Uint8Array[] {
  if (tiles.some((t) => t.length !== tileLen(job))) throw new Error('a tile of the wrong length');
  const all = new Uint8Array(tiles.length * tileLen(job));
  tiles.forEach((t, i) => all.set(t, i * tileLen(job)));
  return Array.from({ length: job.dims[0] }, (_, r) => all.subarray(r * rowLen, (r + 1) * rowLen));
}

/** Each row's class and logits from an `Mlp` job's verified tiles. */
export function mlpClasses(job: JobSpec, tiles: Uint8Array[]): { class: number; logits: number[] }[] {
  if (job.kind !== JobKind.Mlp) throw new Error('not an Mlp job');
  const classes = job.dims[2];
  return rowsOf(job, tiles, 4 * classes + 4).map((row) => {
    const v = new DataView(row.buffer, row.byteOffset, row.length);
    return { class: v.getUint32(4 * classes, true), logits: Array.from({ length: classes }, (_, o) => v.getInt32(4 * o, true)) };
  });
}

/** Each text's int16 embedding from an `Encoder` job's verified tiles. */
export function embeddings(job: JobSpec, tiles: Uint8Array[]): Int16Array[] {
  if (job.kind !== JobKind.Encoder) throw new Error('not an Encoder job');
  const h = job.dims[2];
  return rowsOf(job, tiles, 2 * h).map((row) => {
    const v = new DataView(row.buffer, row.byteOffset, row.length);
    return Int16Array.from({ length: h }, (_, i) => v.getInt16(2 * i, true));
  });
}

/** Cosine similarity of two embeddings. */
export function cosine(a: Int16Array, b: Int16Array): number {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return aa === 0 || bb === 0 ? 0 : ab / Math.sqrt(aa * bb);
}
