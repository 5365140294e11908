// A client's own data as a job (PROTOCOL §5, Mlp and Encoder): a model already hosted on a
// content store (`keeper model publish` prints its `ModelInfo`), the client's rows or texts as
// a part, the manifest over both and the job spec on it — what `keeper task post --model`
// builds, so that providers accept it. And the verified result read back: classes, embeddings.

import { getBase16Encoder } from '@solana/kit';
import {
  InputMode,
  JobKind,
  MAX_ENCODER_TOKENS,
  MAX_GENERATE_NEW,
  MAX_GENERATE_PROMPTS,
  MAX_ROWS_PER_TILE,
  decodeJobSpec,
  decoderWorkPerToken,
  encodeJobSpec,
  encoderWorkPerToken,
  tileLen,
  type JobSpec,
} from './job';
import { blake3 } from './commitment';
import { encodeManifest, formatOf, manifestHash, partOf, Role, type Part } from './manifest';
import { promptIds, tokenIds, type ChatTokenizer } from './tokenize';
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
    }
    | {
      kind: 'decoder';
      sha256: string;
      bytes: number;
      layers: number;
      width: number;
      ffn: number;
      heads: number;
      kv_heads: number;
      head_dim: number;
      vocab: number;
      positions: number;
      /** Its tokenizer and chat template (a safetensors file of the model's `tokenizer`,
       * `chat.pre`, `chat.post` and `eos`) on the content store beside it, for
       * {@link chatTokenizer}. */
      tokenizer?: { sha256: string; bytes: number };
      /** The model's slice string (PROTOCOL §8.13): with it the job names the prompts' token
       * ids' slices too (a version-2 manifest) and the program referees its completions. */
      slices?: { len: number | bigint; root: string };
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

/** The dtypes a client writes, in the order of the `safetensors` crate's `Dtype`. */
const DTYPES = ['U8', 'I8', 'I16', 'I32', 'U32', 'I64'] as const;
/** A tensor to write. */
export interface TensorOut {
  name: string;
  dtype: (typeof DTYPES)[number];
  shape: number[];
  data: Uint8Array;
}

/** A safetensors file of `tensors` as the `safetensors` crate writes it (so the same bytes,
 * and the same content address): an 8-byte header length, the JSON header padded to 8 with
 * spaces, the tensors ordered by descending dtype, then by name. Names are printable ASCII,
 * not all digits, and distinct (where JSON objects and UTF-16 ordering would differ from the
 * crate's): others are refused. */
export function safetensorsFile(tensors: TensorOut[]): Uint8Array {
  const names = new Set<string>();
  for (const t of tensors) {
    if (!/^[\x21-\x7e]+$/.test(t.name) || /^\d+$/.test(t.name) || t.name === '__proto__' || names.has(t.name)) {
      throw new Error(`a tensor name must be printable ASCII, not all digits, and distinct: ${JSON.stringify(t.name)}`);
    }
    names.add(t.name);
  }
  const order = [...tensors].sort((a, b) => DTYPES.indexOf(b.dtype) - DTYPES.indexOf(a.dtype) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const header: Record<string, unknown> = {};
  let at = 0;
  for (const t of order) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + t.data.length] };
    at += t.data.length;
  }
  let json = JSON.stringify(header);
  const h0 = new TextEncoder().encode(json);
  const h = new TextEncoder().encode(json + ' '.repeat((8 - (h0.length % 8)) % 8));
  const out = new Uint8Array(8 + h.length + at);
  new DataView(out.buffer).setBigUint64(0, BigInt(h.length), true);
  out.set(h, 8);
  let p = 8 + h.length;
  for (const t of order) {
    out.set(t.data, p);
    p += t.data.length;
  }
  return out;
}

/** A safetensors file of one tensor. */
export function safetensorsOf(name: string, dtype: 'I8' | 'I16' | 'U32', shape: number[], data: Uint8Array): Uint8Array {
  return safetensorsFile([{ name, dtype, shape, data }]);
}

async function prepared(
  job: Omit<JobSpec, 'input'>,
  model: ModelInfo,
  role: Role,
  bytes: Uint8Array,
  slices?: Uint8Array,
): Promise<PreparedJob> {
  const parts = [modelPart(model), await partOf(role, bytes)];
  const named = 'slices' in model ? model.slices : undefined;
  if (named && slices) {
    // both parts' slices named: a version-2 manifest, and the spec declares the model's
    parts[0].slices = { len: BigInt(named.len), root: hexBytes(named.root) };
    parts[1].slices = { len: BigInt(slices.length), root: blake3(slices) };
    job = { ...job, slicesLen: BigInt(named.len) };
  }
  const spec = { ...job, input: await manifestHash(parts) };
  // every bound of the spec checked as the program checks it, before anything is uploaded
  // (a model's figures come from settings a link may carry)
  decodeJobSpec(encodeJobSpec(spec));
  return { job: spec, parts: [bytes], manifest: encodeManifest(parts) };
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
  if (model?.kind !== 'encoder') throw new Error(`an Encoder job needs an encoder model, not ${model?.kind === undefined ? 'this' : `an ${model.kind}`} one`);
  if (!(Number.isInteger(rowsPerTile) && rowsPerTile >= 1 && rowsPerTile <= MAX_ROWS_PER_TILE)) {
    throw new Error(`rowsPerTile ${JSON.stringify(rowsPerTile)}: a tile holds 1 to ${MAX_ROWS_PER_TILE} texts (the tokenizer is the fifth argument)`);
  }
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

/** How a `Generate` job picks each token (PROTOCOL §5, Generate): `temperature` in Q8 (256 is
 * 1.0; 0 decodes greedily), `topK` (0: all), `topP` in Q16 (65 536 keeps every token), and the
 * client's `seed` of the draws. */
export interface Sampling {
  temperature: number;
  topK: number;
  topP: number;
  seed: bigint;
}

/** Greedy decoding. */
export const GREEDY: Sampling = { temperature: 0, topK: 0, topP: 65_536, seed: 0n };

/** What a `Generate` job asks beside its prompts. */
export interface GenerateOptions {
  /** Most new tokens of a completion (default 128). */
  maxNew?: number;
  /** Most tokens of a prompt in the chat template (default: the longest prompt's). */
  maxTokens?: number;
  /** Completions per tile (default 1: a verifier's sampled tile is one completion). */
  rowsPerTile?: number;
  /** Default greedy. */
  sampling?: Sampling;
}

/** A `Generate` job on `model` for `prompts`, each put in the model's chat template and
 * tokenized by `chat` (its tokenizer: {@link chatTokenizer}) as `keeper task post --generate`
 * does: the prompts part (their texts, ids and the sampling rule) and the job byte for byte
 * what the CLI builds, every bound checked and named first. */
export async function generateJob(model: ModelInfo, prompts: string[], chat: ChatTokenizer, options: GenerateOptions = {}): Promise<PreparedJob> {
  if (model?.kind !== 'decoder') {
    throw new Error(`a Generate job needs a decoder model, not ${model?.kind === undefined ? 'this' : `an ${model.kind}`} one: use the entry \`keeper model publish DECODER.safetensors --store STORE --output json\` prints for the decoder`);
  }
  if (!Array.isArray(prompts) || prompts.some((p) => typeof p !== 'string')) throw new Error('the prompts are an array of strings');
  if (!chat?.tokenizer) throw new Error("the third argument is the decoder's tokenizer: chatTokenizer(the model file's or its published tokenizer file's bytes)");
  // the sampling rule's fields not given are greedy's
  const { maxNew = 128, rowsPerTile = 1 } = options;
  const sampling = { ...GREEDY, ...options.sampling };
  if (prompts.length === 0) throw new Error('no prompt: give one or more');
  if (prompts.length > MAX_GENERATE_PROMPTS) throw new Error(`${prompts.length} prompts: a job takes at most ${MAX_GENERATE_PROMPTS}; post them as several tasks`);
  const empty = prompts.findIndex((p) => p.trim() === '');
  if (empty >= 0) throw new Error(`prompt ${empty + 1} is empty: every prompt needs text`);
  if (!(Number.isInteger(rowsPerTile) && rowsPerTile >= 1 && rowsPerTile <= MAX_ROWS_PER_TILE)) {
    throw new Error(`${rowsPerTile} completions a tile: a tile holds 1 to ${MAX_ROWS_PER_TILE}`);
  }
  const positions = model.positions;
  const mostNew = Math.min(MAX_GENERATE_NEW, positions - 1);
  if (!(Number.isInteger(maxNew) && maxNew >= 1 && maxNew <= mostNew)) throw new Error(`maxNew ${JSON.stringify(maxNew)}: a completion takes a whole number of 1 to ${mostNew} new tokens`);
  const { temperature, topK, topP, seed } = sampling;
  if (!(Number.isInteger(temperature) && temperature >= 0 && temperature <= 65_536)) {
    throw new Error(`temperature ${JSON.stringify(temperature)}: a whole number in Q8, 0 (greedy) to 65 536 (256.0); 0.7 is ${Math.round(0.7 * 256)}`);
  }
  if (!(Number.isInteger(topK) && topK >= 0 && topK <= model.vocab)) throw new Error(`top-k ${JSON.stringify(topK)}: a whole number, 0 (every token) to the vocabulary's ${model.vocab}`);
  if (!(Number.isInteger(topP) && topP >= 1 && topP <= 65_536)) {
    throw new Error(`top-p ${JSON.stringify(topP)}: a whole number in Q16, 1 to 65 536 (1.0); 0.9 is ${Math.round(0.9 * 65_536)}`);
  }
  if (typeof seed !== 'bigint' || seed < 0n || seed >= 1n << 64n) throw new Error(`seed ${String(seed)}: a bigint from 0n to 2n ** 64n − 1n`);
  const ids = prompts.map((p) => promptIds(chat, p));
  const room = positions - maxNew;
  const longest = Math.max(...ids.map((t) => t.length));
  const limit = options.maxTokens ?? longest;
  if (!(Number.isInteger(limit) && limit >= 1 && limit <= room)) {
    throw new Error(options.maxTokens === undefined
      ? `prompt ${ids.findIndex((t) => t.length === longest) + 1} is ${longest} tokens in the chat template: at most ${room} fit beside ${maxNew} new tokens in the model's ${positions} positions; shorten it or ask for fewer new tokens`
      : `a limit of ${limit} tokens: with ${maxNew} new tokens the model's ${positions} positions leave 1 to ${room} for a prompt`);
  }
  const long = ids.findIndex((t) => t.length > limit);
  if (long >= 0) throw new Error(`prompt ${long + 1} is ${ids[long].length} tokens in the chat template, more than the limit of ${limit}: shorten it or raise the limit`);
  const enc = new TextEncoder();
  const texts = prompts.map((p) => enc.encode(p));
  const heavy = texts.findIndex((t) => t.length > ENCODER_TEXT_BYTES_PER_TOKEN * limit);
  if (heavy >= 0) throw new Error(`prompt ${heavy + 1} is ${texts[heavy].length} bytes, more than 16 a token of the ${limit}-token limit: raise the limit`);
  const u32s = (v: number[]) => {
    const b = new Uint8Array(4 * v.length);
    const d = new DataView(b.buffer);
    v.forEach((x, i) => d.setUint32(4 * i, x, true));
    return b;
  };
  const text = new Uint8Array(texts.reduce((n, t) => n + t.length, 0));
  texts.reduce((at, t) => (text.set(t, at), at + t.length), 0);
  const rule = new Uint8Array(32);
  const rv = new DataView(rule.buffer);
  [BigInt(temperature), BigInt(topK), BigInt(topP), BigInt.asIntN(64, seed)].forEach((x, i) => rv.setBigInt64(8 * i, x, true));
  const part = safetensorsFile([
    { name: 'text', dtype: 'U8', shape: [text.length], data: text },
    { name: 'text.len', dtype: 'I32', shape: [texts.length], data: u32s(texts.map((t) => t.length)) },
    { name: 'ids', dtype: 'I32', shape: [ids.reduce((n, t) => n + t.length, 0)], data: u32s(ids.flat()) },
    { name: 'ids.len', dtype: 'I32', shape: [ids.length], data: u32s(ids.map((t) => t.length)) },
    { name: 'sampling', dtype: 'I64', shape: [4], data: rule },
  ]);
  const job = {
    kind: JobKind.Generate,
    inputMode: InputMode.ContentHash,
    dims: [prompts.length, limit, maxNew] as [number, number, number],
    rowsPerTile,
    workPerRow: decoderWorkPerToken(
      BigInt(model.layers), BigInt(model.width), BigInt(model.ffn), BigInt(model.heads),
      BigInt(model.kv_heads), BigInt(model.head_dim), BigInt(model.vocab), BigInt(limit + maxNew),
    ),
  };
  return prepared(job, model, Role.Prompts, part, promptsSlices(ids, limit, sampling));
}

/** A `Generate` job's prompts' slice string (PROTOCOL §8.13): each prompt `4 (L + 1)` bytes,
 * its token count then its ids, little-endian, zeros after them; then the sampling rule:
 * temperature, top-k, top-p, 0 (`u32` each) and the seed (`u64`). */
export function promptsSlices(ids: number[][], limit: number, sampling: Sampling): Uint8Array {
  const rows = idsSlices(ids, limit);
  const out = new Uint8Array(rows.length + 24);
  out.set(rows);
  const v = new DataView(out.buffer, rows.length);
  [sampling.temperature, sampling.topK, sampling.topP, 0].forEach((x, i) => v.setUint32(4 * i, x, true));
  v.setBigUint64(16, sampling.seed, true);
  return out;
}

/** Each completion of a `Generate` job's verified tiles: its token ids (at most G; the
 * end-of-turn token last when it finished). */
export function completions(job: JobSpec, tiles: Uint8Array[]): number[][] {
  if (job.kind !== JobKind.Generate) throw new Error('not a Generate job');
  const g = job.dims[2];
  return rowsOf(job, tiles, 4 * (g + 1)).map((row, r) => {
    const v = new DataView(row.buffer, row.byteOffset, row.length);
    const n = v.getUint32(0, true);
    // rows past the prompts are zero; a completion has 1 to G tokens, zeros after them
    if (n > g) throw new Error(`completion ${r + 1} says ${n} tokens, more than the job's ${g}`);
    for (let i = n; i < g; i++) if (v.getUint32(4 + 4 * i, true) !== 0) throw new Error(`completion ${r + 1} has a token past its count of ${n}`);
    return Array.from({ length: n }, (_, i) => v.getUint32(4 + 4 * i, true));
  });
}
