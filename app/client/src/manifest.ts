// Input manifests (PROTOCOL §5, Inputs): the canonical bytes whose SHA-256 is a job's input when
// it runs on the client's own data, encoded and decoded exactly as
// `compute_market_protocol::manifest` does. Hashing is WebCrypto's SHA-256 (browsers and Node).

import { JobKind, type JobSpec } from './job';

export const MAGIC = new TextEncoder().encode('CMIN');
export const MANIFEST_VERSION = 1;
/** The version that names every part's slice string too (PROTOCOL §8.7). */
export const MANIFEST_VERSION_SLICES = 2;
export const MAX_PARTS = 8;
export const HEADER_LEN = 8;
export const ENTRY_LEN = 44;
export const ENTRY_LEN_SLICES = ENTRY_LEN + 40;
export const MAX_LEN = HEADER_LEN + MAX_PARTS * ENTRY_LEN_SLICES;

/** What a part is to its job. */
export enum Role {
  A = 1,
  B = 2,
  Model = 3,
  Batch = 4,
  Texts = 5,
  /** A `Generate` job's prompts: texts, their token ids in the chat template, the sampling rule. */
  Prompts = 6,
}

/** How a part is encoded. */
export enum Format {
  Safetensors = 1,
  Text = 2,
}

/** The format a part of `role` must have: text for texts, safetensors for the rest. */
export function formatOf(role: Role): Format {
  return role === Role.Texts ? Format.Text : Format.Safetensors;
}

/** The roles a job kind takes, in order (none for generated-only kinds). */
export function rolesOf(kind: JobKind): Role[] | undefined {
  switch (kind) {
    case JobKind.MatMulModP:
      return [Role.A, Role.B];
    case JobKind.Mlp:
      return [Role.Model, Role.Batch];
    case JobKind.Encoder:
      return [Role.Model, Role.Texts];
    case JobKind.Generate:
      return [Role.Model, Role.Prompts];
    default:
      return undefined;
  }
}

/** One input part. */
export interface Part {
  role: Role;
  format: Format;
  /** Exact length in bytes (u64). */
  len: bigint;
  /** SHA-256 of its bytes. */
  hash: Uint8Array;
  /** Its slice string's length and BLAKE3 (a version-2 manifest names them for every part). */
  slices?: Slices;
}

/** A part's slice string (PROTOCOL §8.7): what the program proves the slices a dispute
 * recomputes from against. */
export interface Slices {
  len: bigint;
  root: Uint8Array;
}

/** SHA-256 with WebCrypto. */
export async function sha256(bytes: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>));
}

/** The entry of `bytes` in `role`, in the format the role takes. */
export async function partOf(role: Role, bytes: Uint8Array): Promise<Part> {
  return { role, format: formatOf(role), len: BigInt(bytes.length), hash: await sha256(bytes) };
}

/** A refused manifest (malformed, or not fitting its job). */
export class ManifestError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ManifestError';
  }
}

/** The canonical bytes of a manifest of `parts` (sorted by role here). */
export function encodeManifest(parts: Part[]): Uint8Array {
  const sorted = [...parts].sort((x, y) => x.role - y.role);
  // version 2 when every part names its slices, else 1 (slices are named for all or none)
  const v2 = sorted.length > 0 && sorted.every((p) => p.slices);
  const entry = v2 ? ENTRY_LEN_SLICES : ENTRY_LEN;
  const b = new Uint8Array(HEADER_LEN + entry * sorted.length);
  const v = new DataView(b.buffer);
  b.set(MAGIC, 0);
  b[4] = v2 ? MANIFEST_VERSION_SLICES : MANIFEST_VERSION;
  b[5] = sorted.length;
  sorted.forEach((p, i) => {
    const at = HEADER_LEN + i * entry;
    b[at] = p.role;
    b[at + 1] = p.format;
    v.setBigUint64(at + 4, p.len, true);
    b.set(p.hash, at + 12);
    if (v2 && p.slices) {
      v.setBigUint64(at + 44, p.slices.len, true);
      b.set(p.slices.root, at + 52);
    }
  });
  return b;
}

/** Decodes canonical bytes, checking every byte (the Rust decoder's rules, the same refusals). */
export function decodeManifest(b: Uint8Array): Part[] {
  const bad = (m: string): never => {
    throw new ManifestError(`malformed input manifest: ${m}`);
  };
  if (b.length < HEADER_LEN || b.length > MAX_LEN) bad(`${b.length} bytes (at most ${MAX_LEN})`);
  if (!MAGIC.every((x, i) => b[i] === x)) bad('no CMIN magic');
  if (b[4] !== MANIFEST_VERSION && b[4] !== MANIFEST_VERSION_SLICES) {
    bad(`version ${b[4]} (this client reads ${MANIFEST_VERSION} and ${MANIFEST_VERSION_SLICES})`);
  }
  const entry = b[4] === MANIFEST_VERSION_SLICES ? ENTRY_LEN_SLICES : ENTRY_LEN;
  const n = b[5];
  if (n === 0 || n > MAX_PARTS || b[6] !== 0 || b[7] !== 0) bad(`${n} parts or non-zero reserved bytes`);
  if (b.length !== HEADER_LEN + n * entry) bad(`${b.length} bytes for ${n} parts`);
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const parts: Part[] = [];
  for (let i = 0; i < n; i++) {
    const at = HEADER_LEN + i * entry;
    const role = b[at];
    if (role < 1 || role > 6) bad(`part ${i} has unknown role ${role}`);
    const format = b[at + 1];
    if (format !== 1 && format !== 2) bad(`part ${i} has unknown format ${format}`);
    if (format !== formatOf(role)) bad(`part ${i} is ${Format[format]}, it must be ${Format[formatOf(role)]}`);
    if (b[at + 2] !== 0 || b[at + 3] !== 0) bad(`part ${i} has non-zero reserved bytes`);
    const len = v.getBigUint64(at + 4, true);
    if (len === 0n) bad(`part ${i} is empty`);
    if (parts.length && parts[parts.length - 1].role >= role) bad('parts are not in strictly increasing role order');
    const part: Part = { role, format, len, hash: b.slice(at + 12, at + 44) };
    if (entry === ENTRY_LEN_SLICES) {
      const sl = v.getBigUint64(at + 44, true);
      if (sl === 0n) bad(`part ${i} has an empty slice string`);
      part.slices = { len: sl, root: b.slice(at + 52, at + 84) };
    }
    parts.push(part);
  }
  return parts;
}

/** SHA-256 of a manifest's canonical bytes: the job's `input`. */
export async function manifestHash(parts: Part[]): Promise<Uint8Array> {
  return sha256(encodeManifest(parts));
}

/** Checks that `parts` are exactly what `job` computes on (roles in order). */
export function checkForJob(parts: Part[], job: JobSpec): void {
  const want = rolesOf(job.kind);
  if (!want) throw new ManifestError(`input manifest does not fit the job: ${JobKind[job.kind]} takes no input parts`);
  const have = parts.map((p) => p.role);
  if (have.length !== want.length || have.some((r, i) => r !== want[i])) {
    throw new ManifestError(
      `input manifest does not fit the job: parts [${have.map((r) => Role[r]).join(', ')}], the job takes [${want.map((r) => Role[r]).join(', ')}]`,
    );
  }
}
