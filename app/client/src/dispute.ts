// Disputes from a dApp (PROTOCOL §8): `disputeTask` recomputes tiles of an Accepted result held
// for its dispute window on the user's machine, refuses to bond when they are right, and
// otherwise argues the first wrong element to the program's verdict: open (one seat's bond from
// the wallet's stake-token account, paid back there), the 1 KiB chunk holding the element and its
// siblings written in 512-byte parts, proved against the result root, recomputed on chain.
// The element rules mirror `compute_market_protocol::dispute` (fixtures hold them to it).

import type { Address, Instruction, TransactionSigner } from '@solana/kit';
import { chunkLeaf, chunkProof, CHUNK_LEN, slotLen, verifyProof } from './commitment';
import { fetchMaybeDispute } from './generated/accounts/dispute';
import { fetchTask } from './generated/accounts/task';
import { getDisputeProveInstructionAsync } from './generated/instructions/disputeProve';
import { getDisputeStepInstructionAsync } from './generated/instructions/disputeStep';
import { getDisputeWriteInstructionAsync } from './generated/instructions/disputeWrite';
import { getOpenDisputeInstructionAsync } from './generated/instructions/openDispute';
import { COMPUTE_MARKET_PROGRAM_ADDRESS } from './generated/programs';
import { decodeJobSpec, InputMode, JobKind, MATMUL_TILE, tileCount, tileGrid, tileLen, type JobSpec } from './job';
import { sha256 } from './manifest';
import { disputeAddress } from './pda';
import { fetchProvenTiles, type FetchOptions, type ProvenTile } from './results';
import { sendInstructions, stakeMintOf, tokenAccountOf, tokenBalance, type KitClient } from './tx';

/** Kind 1: "element e of tile t is not what the job gives" (against an Accepted verdict). */
export const DISPUTE_RESULT_WRONG = 1;
/** Terms of a `MatMulModP` sum one `dispute_step` takes at most (the bound on k). */
export const MAX_STEP_TERMS = 8192;
/** The prime of `MatMulModP`. */
const P = (1n << 31n) - 1n;
const MASK64 = (1n << 64n) - 1n;

/** Whether this client argues disputes of `job`: those the program recomputes from the job
 * alone, `HashBatch` and `MatMulModP` on generated inputs. The program also referees `Mlp`
 * and `MatMulModP` on the client's data from proven slices of the inputs (PROTOCOL §8.7), and
 * `Mlp` models too large to read by a game (§8.10): `keeper task dispute` and `keeper run
 * --watch` argue those. */
export function disputeSupported(job: JobSpec): boolean {
  return job.kind === JobKind.HashBatch || (job.kind === JobKind.MatMulModP && job.inputMode === InputMode.Generated);
}

/** Elements in one tile: entries of a 64 × 64 block, nonces of a `HashBatch` tile, the 4-byte
 * words of an `Mlp` tile (R · (C + 1): each row's logits and class), the 4-byte words of an
 * `Encoder` tile of an even width H (R · H / 2: two channels of a text's embedding each), else
 * its texts; the 4-byte words of a `Generate` tile (R · (G + 1): each completion's count and
 * tokens). */
export function elementsPerTile(job: JobSpec): number {
  switch (job.kind) {
    case JobKind.MatMulModP:
      return MATMUL_TILE * MATMUL_TILE;
    case JobKind.HashBatch:
      return job.dims[1];
    case JobKind.Mlp:
      return job.rowsPerTile * (job.dims[2] + 1);
    case JobKind.Encoder:
      return job.dims[2] % 2 === 0 ? job.rowsPerTile * (job.dims[2] / 2) : job.rowsPerTile;
    case JobKind.Generate:
      return job.rowsPerTile * (job.dims[2] + 1);
    default:
      return job.rowsPerTile;
  }
}

/** Bytes of one element. */
export function elementWidth(job: JobSpec): number {
  return Math.floor(tileLen(job) / Math.max(elementsPerTile(job), 1));
}

/** Byte offset of (tile, element) in the committed string. */
export function elementOffset(job: JobSpec, tile: number, element: number): number {
  return tile * slotLen(tileLen(job)) + element * elementWidth(job);
}

function splitmix64(z: bigint): bigint {
  z = (z + 0x9e3779b97f4a7c15n) & MASK64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return z ^ (z >> 31n);
}

function u64le(b: Uint8Array): bigint {
  let x = 0n;
  for (let i = 7; i >= 0; i--) x = (x << 8n) | BigInt(b[i]);
  return x;
}

/** The 64-bit key matrix `which` (`A` or `B`) of a generated `MatMulModP` is drawn from. */
export async function matrixKey(job: JobSpec, which: 'A' | 'B'): Promise<bigint> {
  const tag = new TextEncoder().encode('cm:input:v1');
  const bytes = new Uint8Array(tag.length + 33);
  bytes.set(tag);
  bytes.set(job.input, tag.length);
  bytes[tag.length + 32] = which.charCodeAt(0);
  return u64le(await sha256(bytes));
}

const keys = new Map<string, [bigint, bigint]>();

/** The keys of A and B of a generated `MatMulModP` (kept per seed: a tile asks 4 096 times). */
async function matrixKeys(job: JobSpec): Promise<[bigint, bigint]> {
  const id = Array.from(job.input, (b) => b.toString(16).padStart(2, '0')).join('');
  let k = keys.get(id);
  if (!k) {
    k = [await matrixKey(job, 'A'), await matrixKey(job, 'B')];
    if (keys.size > 64) keys.clear();
    keys.set(id, k);
  }
  return k;
}

/** Generated matrix element `idx` under `key`, in [0, p). */
export function matrixElement(key: bigint, idx: bigint): bigint {
  return splitmix64(key ^ ((idx * 0xd1b54a32d192ed03n) & MASK64)) % P;
}

/** The output of nonce `nonce` of a `HashBatch` job: SHA-256 of the seed and the nonce, iterated. */
export async function hashNonce(job: JobSpec, nonce: bigint): Promise<Uint8Array> {
  const first = new Uint8Array(40);
  first.set(job.input);
  new DataView(first.buffer).setBigUint64(32, nonce, true);
  let h = await sha256(first);
  for (let i = 1; i < job.dims[2]; i++) h = await sha256(h);
  return h;
}

/** The bytes element (tile, element) must hold (its width), from the job alone; `undefined` for
 * kinds the program does not referee. */
export async function expectedElement(job: JobSpec, tile: number, element: number): Promise<Uint8Array | undefined> {
  if (job.kind === JobKind.HashBatch) return hashNonce(job, BigInt(tile) * BigInt(job.dims[1]) + BigInt(element));
  if (job.kind !== JobKind.MatMulModP || job.inputMode !== InputMode.Generated) return undefined;
  const out = new Uint8Array(4);
  const [, cols] = tileGrid(job);
  const i = Math.floor(tile / cols) * MATMUL_TILE + Math.floor(element / MATMUL_TILE);
  const j = (tile % cols) * MATMUL_TILE + (element % MATMUL_TILE);
  if (i >= job.dims[0] || j >= job.dims[2]) return out;
  const [ka, kb] = await matrixKeys(job);
  const [k, n] = [BigInt(job.dims[1]), BigInt(job.dims[2])];
  let acc = 0n;
  for (let l = 0n; l < k; l++) acc = (acc + matrixElement(ka, BigInt(i) * k + l) * matrixElement(kb, l * n + BigInt(j))) % P;
  new DataView(out.buffer).setUint32(0, Number(acc), true);
  return out;
}

/** The first element of a proven tile that is not what the job gives, or `undefined`. */
export async function firstWrongElement(job: JobSpec, tile: ProvenTile): Promise<number | undefined> {
  const w = elementWidth(job);
  for (let e = 0; e < elementsPerTile(job); e++) {
    const want = await expectedElement(job, tile.index, e);
    if (!want) return undefined;
    const got = tile.tile.subarray(e * w, (e + 1) * w);
    if (got.some((b, k) => b !== want[k])) return e;
  }
  return undefined;
}

/** The chunk holding (tile, element) of `proven` and its siblings, checked against `root`. */
export function elementProof(job: JobSpec, root: Uint8Array, proven: ProvenTile, element: number): { chunk: Uint8Array; path: Uint8Array[] } {
  const slot = slotLen(tileLen(job));
  const byte = elementOffset(job, proven.index, element) % slot;
  const p = chunkProof(proven.index, tileCount(job), proven.tile, proven.proof, byte);
  const total = tileCount(job) * (slot / CHUNK_LEN);
  const c = Math.floor(elementOffset(job, proven.index, element) / CHUNK_LEN);
  if (!verifyProof(root, c, total, chunkLeaf(c, total, p.chunk), p.path)) {
    throw new Error(`the chunk proof of tile ${proven.index} element ${element} does not lead to the root`);
  }
  return p;
}

/** What to dispute. */
export interface DisputeTaskArgs {
  /** Who bonds and argues (its stake-token account pays the bond and is paid back). */
  challenger: TransactionSigner;
  /** The task. */
  task: Address;
  /** Only these tiles are recomputed [default: every tile]. */
  tiles?: number[];
  /** How results are fetched (loopback allowed on a local cluster). */
  fetch?: FetchOptions;
  /** Told of each transaction as it lands. */
  onStep?: (what: string, signature: string) => void;
}

/** Where the dispute ended: the element argued, and the task's verdict (4: proven wrong). */
export interface DisputeOutcome {
  tile: number;
  element: number;
  majority: number;
  signatures: string[];
}

/** Disputes an Accepted result held for its dispute window (PROTOCOL §8, kind 1). Recomputes the
 * tiles first and throws, bonding nothing, when they are right. */
export async function disputeTask(client: KitClient, args: DisputeTaskArgs, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<DisputeOutcome> {
  const t = (await fetchTask(client.rpc, args.task)).data;
  const job = decodeJobSpec(new Uint8Array(t.job));
  if (!disputeSupported(job)) {
    throw new Error(
      job.kind === JobKind.Encoder
        ? 'Encoder jobs are argued by a game over a claimed trace of one text (PROTOCOL §8.10), when the job names the slices of its inputs and its width is even: use keeper task dispute, or keeper run --watch'
        : `${JobKind[job.kind]} jobs on the client's data are argued from proven slices of the inputs (PROTOCOL §8.7), or by a game over a claimed trace when the model is too large to read (§8.10): use keeper task dispute, or keeper run --watch`,
    );
  }
  if (!t.held || t.rounds[t.round].majority !== 1) throw new Error('the task has no Accepted verdict held for disputes');
  const uri = new TextDecoder().decode(new Uint8Array(t.resultUri).subarray(0, t.resultUriLen));
  const root = new Uint8Array(t.resultRoot);
  const indices = args.tiles ?? Array.from({ length: tileCount(job) }, (_, i) => i);
  const served = await fetchProvenTiles(uri, job, root, indices, args.fetch);
  let found: { tile: ProvenTile; element: number } | undefined;
  for (const s of served) {
    const e = await firstWrongElement(job, s);
    if (e !== undefined) {
      found = { tile: s, element: e };
      break;
    }
  }
  if (!found) throw new Error(`every tile checked (${indices.length}) recomputes equal: not disputing (a dispute of a right result loses its bond)`);
  const { chunk, path } = elementProof(job, root, found.tile, found.element);
  const mint = await stakeMintOf(client.rpc, programAddress);
  const wallet = await tokenAccountOf(args.challenger.address, mint);
  const bond = t.verifierBond > 0n ? t.verifierBond : 1n;
  const balance = await tokenBalance(client.rpc, wallet);
  if (balance < bond) throw new Error(`a dispute bonds ${bond} base units from ${wallet}, which holds ${balance}: fund it first`);
  const signatures: string[] = [];
  const send = async (what: string, ixs: Instruction[]) => {
    const sig = await sendInstructions(client, args.challenger, ixs);
    signatures.push(sig);
    args.onStep?.(what, sig);
  };
  const common = { task: args.task, challenger: args.challenger };
  const config = { programAddress };
  const existing = await fetchMaybeDispute(client.rpc, await disputeAddress(args.task, args.challenger.address, programAddress));
  if (!existing.exists) {
    const open = await getOpenDisputeInstructionAsync(
      { ...common, challengerToken: wallet, payout: wallet, kind: DISPUTE_RESULT_WRONG, tile: found.tile.index, element: found.element },
      config,
    );
    await send('open_dispute', [open]);
  }
  if (!existing.exists || existing.data.proven === 0) {
    const bytes = new Uint8Array(CHUNK_LEN + 32 * path.length);
    bytes.set(chunk);
    path.forEach((p, i) => bytes.set(p, CHUNK_LEN + 32 * i));
    for (let at = 0; at < bytes.length; at += CHUNK_LEN / 2) {
      const data = bytes.slice(at, at + CHUNK_LEN / 2);
      await send('dispute_write', [await getDisputeWriteInstructionAsync({ ...common, offset: at, data }, config)]);
    }
    await send('dispute_prove', [await getDisputeProveInstructionAsync({ ...common, siblings: path.length }, config)]);
  }
  for (let i = 0; i < Math.ceil(Math.max(job.dims[1], 1) / MAX_STEP_TERMS) + 1; i++) {
    const d = await fetchMaybeDispute(client.rpc, await disputeAddress(args.task, args.challenger.address, programAddress));
    if (!d.exists || d.data.state !== 0) break;
    await send('dispute_step', [computeUnitLimit(1_400_000), await getDisputeStepInstructionAsync({ ...common, count: MAX_STEP_TERMS }, config)]);
  }
  const after = (await fetchTask(client.rpc, args.task)).data;
  return { tile: found.tile.index, element: found.element, majority: after.rounds[after.round].majority, signatures };
}

/** The compute budget's SetComputeUnitLimit: a dispute step may need up to 1 400 000 units. */
export function computeUnitLimit(units: number): Instruction {
  const data = new Uint8Array(5);
  data[0] = 2;
  new DataView(data.buffer).setUint32(1, units, true);
  return { programAddress: 'ComputeBudget111111111111111111111111111111' as Address, accounts: [], data };
}
