// Job specs (PROTOCOL §5, Job spec): the 64 bytes a task account stores, encoded and decoded
// exactly as `compute_market_protocol::job` does — every byte checked, so a spec that decodes
// re-encodes to the same bytes. u64 values are `bigint`, never floats.

/** Bytes of an encoded job spec. */
export const JOB_SPEC_LEN = 64;
/** The encoding version (it names the result commitment: 2 = BLAKE3 of the output). */
export const JOB_VERSION = 2;
/** Side of a square `MatMulModP` output tile. */
export const MATMUL_TILE = 64;
export const MAX_MATRIX_DIM = 8192;
export const MAX_HASH_TILES = 65_536;
export const MAX_NONCES_PER_TILE = 4_096;
export const MAX_HASH_ITERATIONS = 1_024;
export const MAX_MLP_ROWS = 65_536;
export const MAX_MLP_WIDTH = 4_096;
export const MAX_MLP_LAYERS = 8n;
export const MAX_ENCODER_ROWS = 65_536;
export const MAX_ENCODER_TOKENS = 512;
export const MAX_ENCODER_HIDDEN = 512;
export const MAX_ENCODER_BLOCKS = 24n;
export const MAX_ENCODER_FFN = 4_096n;
/** Largest `Encoder` vocabulary. */
export const MAX_ENCODER_VOCAB = 262_144n;
export const MAX_ROWS_PER_TILE = 64;
/** Most prompts of a `Generate` job. */
export const MAX_GENERATE_PROMPTS = 65_536;
/** Most positions of a `Generate` sequence, prompt and completion together. */
export const MAX_GENERATE_CONTEXT = 8_192;
/** Most new tokens of one `Generate` completion (PROTOCOL §5, Generate: a tile row each). */
export const MAX_GENERATE_NEW = 1_024;
/** Most work units per token of a `Generate` job's decoder. */
export const MAX_GENERATE_WORK_PER_TOKEN = 1n << 40n;
/** The fewest tokens each of a `Generate` job's sequential decode steps is charged as. */
export const DECODE_FLOOR = 8n;
const U64_MAX = (1n << 64n) - 1n;

/** What a job computes. */
export enum JobKind {
  MatMulModP = 1,
  HashBatch = 2,
  Mlp = 3,
  Encoder = 4,
  Generate = 5,
}

/** Where a job's inputs come from. */
export enum InputMode {
  Generated = 0,
  ContentHash = 1,
}

/** A decoded, valid job spec. */
export interface JobSpec {
  kind: JobKind;
  inputMode: InputMode;
  /** Three dimensions whose meaning depends on the kind. */
  dims: [number, number, number];
  /** The input seed, or the SHA-256 of the input manifest (32 bytes). */
  input: Uint8Array;
  /** `Mlp`, `Encoder`, `Generate`: rows per tile (1..=64); 0 otherwise. */
  rowsPerTile: number;
  /** `Mlp`: multiply-adds per row; `Encoder`, `Generate`: work units per token; 0 otherwise. */
  workPerRow: bigint;
  /** `MatMulModP` and `Mlp` on the client's data: the length of the slice string of A or of
   * the model that the version-2 manifest names (PROTOCOL §8.7), which lets the program
   * referee the job; 0 or absent when the manifest names none. */
  slicesLen?: bigint;
}

/** Why an encoded spec is refused: the Rust `JobError` variant's name. */
export type JobErrorKind =
  | 'UnsupportedVersion'
  | 'UnknownKind'
  | 'UnknownInputMode'
  | 'ReservedNotZero'
  | 'DimensionOutOfRange'
  | 'InputModeNotAllowed';

const MESSAGES: Record<JobErrorKind, string> = {
  UnsupportedVersion: 'unsupported job-spec version',
  UnknownKind: 'unknown job kind',
  UnknownInputMode: 'unknown input mode',
  ReservedNotZero: 'reserved job-spec bytes must be zero',
  DimensionOutOfRange: 'job dimension is zero or above its bound',
  InputModeNotAllowed: 'this job kind does not take that input mode',
};

/** A refused job spec; `kind` names the rule it broke, as the program's `InvalidJobSpec` does. */
export class JobError extends Error {
  constructor(readonly kind: JobErrorKind) {
    super(MESSAGES[kind]);
    this.name = 'JobError';
  }
}

/** Whether the kind runs a model over rows of the client's data. */
export function isInference(kind: JobKind): boolean {
  return kind === JobKind.Mlp || kind === JobKind.Encoder || kind === JobKind.Generate;
}

/**
 * A `Generate` job's work units per token (`job::decoder_work_per_token`) for a decoder of
 * `layers` layers of width `h`, feed-forward `f`, `heads` query and `kvHeads` key/value heads of
 * width `d`, a vocabulary of `vocab`, at a context of `ctx` positions: per layer the dense
 * multiply-adds `2·h·heads·d + 2·h·kvHeads·d + 3·h·f`, the attention `2·ctx·heads·d` and the
 * element-wise steps `16·(4h + f)`; then the logits `vocab·h`.
 */
export function decoderWorkPerToken(layers: bigint, h: bigint, f: bigint, heads: bigint, kvHeads: bigint, d: bigint, vocab: bigint, ctx: bigint): bigint {
  return layers * (2n * h * heads * d + 2n * h * kvHeads * d + 3n * h * f + 2n * ctx * heads * d + 16n * (4n * h + f)) + vocab * h;
}

/**
 * An `Encoder` job's work units per token (`job::encoder_work_per_token`): per block the GEMMs
 * `4h² + 2hf`, the attention at the limit `8·limit·h`, its exp lookups and divisions
 * `64·heads·limit`, the element-wise steps `16·(6h + f)`.
 */
export function encoderWorkPerToken(blocks: bigint, h: bigint, f: bigint, heads: bigint, limit: bigint): bigint {
  return blocks * (4n * h * h + 2n * h * f + 8n * limit * h + 64n * heads * limit + 16n * (6n * h + f));
}

/** The canonical 64 bytes of `job`. */
export function encodeJobSpec(job: JobSpec): Uint8Array {
  if (job.input.length !== 32) throw new Error(`a job's input is 32 bytes, not ${job.input.length}`);
  const b = new Uint8Array(JOB_SPEC_LEN);
  const v = new DataView(b.buffer);
  b[0] = JOB_VERSION;
  b[1] = job.kind;
  b[2] = job.inputMode;
  b[3] = job.rowsPerTile;
  job.dims.forEach((d, i) => v.setUint32(4 + 4 * i, d, true));
  b.set(job.input, 16);
  v.setBigUint64(48, job.workPerRow, true);
  v.setBigUint64(56, job.slicesLen ?? 0n, true);
  return b;
}

/** Decodes and checks 64 bytes as the program does; throws a {@link JobError} naming the rule. */
export function decodeJobSpec(b: Uint8Array): JobSpec {
  if (b.length !== JOB_SPEC_LEN) throw new Error(`a job spec is ${JOB_SPEC_LEN} bytes, not ${b.length}`);
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  if (b[0] !== JOB_VERSION) throw new JobError('UnsupportedVersion');
  if (b[1] < 1 || b[1] > 5) throw new JobError('UnknownKind');
  const kind = b[1] as JobKind;
  if (b[2] > 1) throw new JobError('UnknownInputMode');
  const inputMode = b[2] as InputMode;
  const workPerRow = v.getBigUint64(48, true);
  const rowsPerTile = b[3];
  const rows = isInference(kind);
  const slicesLen = v.getBigUint64(56, true);
  const sliced = inputMode === InputMode.ContentHash && kind !== JobKind.HashBatch;
  if ((slicesLen !== 0n && !sliced) || (!rows && (rowsPerTile !== 0 || workPerRow !== 0n))) {
    throw new JobError('ReservedNotZero');
  }
  const dims: [number, number, number] = [v.getUint32(4, true), v.getUint32(8, true), v.getUint32(12, true)];
  const max = {
    [JobKind.MatMulModP]: [MAX_MATRIX_DIM, MAX_MATRIX_DIM, MAX_MATRIX_DIM],
    [JobKind.HashBatch]: [MAX_HASH_TILES, MAX_NONCES_PER_TILE, MAX_HASH_ITERATIONS],
    [JobKind.Mlp]: [MAX_MLP_ROWS, MAX_MLP_WIDTH, MAX_MLP_WIDTH],
    [JobKind.Encoder]: [MAX_ENCODER_ROWS, MAX_ENCODER_TOKENS, MAX_ENCODER_HIDDEN],
    [JobKind.Generate]: [MAX_GENERATE_PROMPTS, MAX_GENERATE_CONTEXT - 1, MAX_GENERATE_NEW],
  }[kind];
  if (dims.some((d, i) => d === 0 || d > max[i])) throw new JobError('DimensionOutOfRange');
  if (kind === JobKind.Generate && dims[1] + dims[2] > MAX_GENERATE_CONTEXT) throw new JobError('DimensionOutOfRange');
  if (rows) {
    let least: bigint;
    let most: bigint;
    if (kind === JobKind.Generate) {
      // the decoder is checked against it exactly when fetched
      least = 1n;
      most = MAX_GENERATE_WORK_PER_TOKEN;
    } else if (kind === JobKind.Mlp) {
      const [f, c] = [BigInt(dims[1]), BigInt(dims[2])];
      least = f < c ? f : c;
      most = MAX_MLP_LAYERS * BigInt(MAX_MLP_WIDTH) * BigInt(MAX_MLP_WIDTH);
    } else {
      const [l, h] = [BigInt(dims[1]), BigInt(dims[2])];
      least = encoderWorkPerToken(1n, h, 1n, 1n, l);
      most = encoderWorkPerToken(MAX_ENCODER_BLOCKS, h, MAX_ENCODER_FFN, h, l);
    }
    if (rowsPerTile < 1 || rowsPerTile > MAX_ROWS_PER_TILE || workPerRow < least || workPerRow > most) {
      throw new JobError('DimensionOutOfRange');
    }
    if (inputMode !== InputMode.ContentHash) throw new JobError('InputModeNotAllowed');
  }
  if (slicesLen !== 0n) {
    // A's slice string has the one length its shape gives; a model's at most what its work
    // and widths allow
    const stride = ((BigInt(dims[1]) + 255n) / 256n) * 1024n;
    const fits =
      kind === JobKind.MatMulModP
        ? slicesLen === BigInt(dims[0]) * stride
        : kind === JobKind.Encoder
          ? slicesLen <= encoderSlicesMaxLen(BigInt(dims[2]), workPerRow)
          : kind === JobKind.Generate
            ? slicesLen <= decoderSlicesMaxLen(workPerRow)
            : slicesLen <= 4n + 4n * (MAX_MLP_LAYERS + 1n) + 12n * MAX_MLP_LAYERS * BigInt(MAX_MLP_WIDTH) + workPerRow;
    if (!fits) throw new JobError('DimensionOutOfRange');
  }
  return { kind, inputMode, dims, input: b.slice(16, 48), rowsPerTile, workPerRow, slicesLen };
}

/** The most bytes a decoder's slice string may have for a job of `work` units per token
 * (`slices::decoder::max_len`): 16 MiB of header and tables, and three bytes a unit of work. */
export function decoderSlicesMaxLen(work: bigint): bigint {
  return (16n << 20n) + 3n * work;
}

const pad4 = (n: bigint): bigint => ((n + 3n) / 4n) * 4n;

/** The most bytes an `Encoder` model's slice string may have (PROTOCOL §8.7,
 * `slices::encoder::max_len`): the header and the embeddings' records, the largest tables, the
 * exp table, and per block its weights (within the work), the records' heads and padding. */
export function encoderSlicesMaxLen(hidden: bigint, work: bigint): bigint {
  const h = hidden > 0n ? hidden : 1n;
  const blocksByWork = work / (4n * h * h);
  const blocks = blocksByWork < MAX_ENCODER_BLOCKS ? blocksByWork : MAX_ENCODER_BLOCKS;
  const ffn = work / (2n * h);
  return (
    32n + 16n * h + 4n + 8n * h + pad4(MAX_ENCODER_VOCAB * h) + pad4(BigInt(MAX_ENCODER_TOKENS) * h) + 4096n + blocks * (2072n + 115n * h) + work + 15n * ffn
  );
}

/** Tiles along rows and columns of the output. */
export function tileGrid(job: JobSpec): [number, number] {
  switch (job.kind) {
    case JobKind.MatMulModP:
      return [Math.ceil(job.dims[0] / MATMUL_TILE), Math.ceil(job.dims[2] / MATMUL_TILE)];
    case JobKind.HashBatch:
      return [job.dims[0], 1];
    default:
      return [Math.ceil(job.dims[0] / Math.max(job.rowsPerTile, 1)), 1];
  }
}

/** Output tiles T: the leaves of the result commitment. */
export function tileCount(job: JobSpec): number {
  const [r, c] = tileGrid(job);
  return r * c;
}

/** Bytes of every tile. */
export function tileLen(job: JobSpec): number {
  switch (job.kind) {
    case JobKind.MatMulModP:
      return MATMUL_TILE * MATMUL_TILE * 4;
    case JobKind.HashBatch:
      return 32 * job.dims[1];
    case JobKind.Mlp:
      return job.rowsPerTile * (4 * job.dims[2] + 4);
    case JobKind.Encoder:
      return job.rowsPerTile * 2 * job.dims[2];
    case JobKind.Generate:
      // per completion its token count, then G token ids (u32, zero past the count)
      return job.rowsPerTile * 4 * (job.dims[2] + 1);
  }
}

/** Work units of the job (what it is priced by). */
export function work(job: JobSpec): bigint {
  const [a, b, c] = job.dims.map(BigInt);
  switch (job.kind) {
    case JobKind.Mlp:
      return a * job.workPerRow;
    case JobKind.Encoder:
      return a * b * job.workPerRow;
    case JobKind.Generate: {
      // the prompts at their bound, and the G sequential decode steps, each charged as
      // max(N, DECODE_FLOOR) tokens; saturating at 2^64 − 1 as the program's
      const steps = c * (a > DECODE_FLOOR ? a : DECODE_FLOOR);
      const w = (a * b + steps) * job.workPerRow;
      return w > U64_MAX ? U64_MAX : w;
    }
    default:
      return a * b * c;
  }
}
