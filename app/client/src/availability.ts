// Availability (PROTOCOL §8.11): a client that cannot fetch a held Accepted result challenges
// its provider to publish tiles of it on chain, each chunk proven by the program against the
// result root. How many tiles one challenge may name (`availability::max_tiles`, byte-for-byte
// with crates/protocol/src/availability.rs, and the dispute method it rests on), the opening
// transaction's instructions (the open and its `availability_grow`s, as
// `client::opened_and_grown`), and the reader of a task's availability accounts and the tiles
// published in the answered ones.

import {
  getBase16Decoder,
  getBase58Decoder,
  getBase64Encoder,
  getProgramDerivedAddress,
  getAddressEncoder,
  getU16Encoder, getU64Encoder,
  type Address,
  type Instruction,
  type Rpc,
  type SolanaRpcApi,
  type TransactionSigner,
} from '@solana/kit';
import { CHUNK_LEN, rootOfTiles, slotLen } from './commitment';
import { AVAILABILITY_DISCRIMINATOR, getAvailabilityDecoder, getAvailabilitySize, type Availability } from './generated/accounts/availability';
import { fetchAllMaybeNode } from './generated/accounts/node';
import { fetchMaybeTask, fetchTask, type Task } from './generated/accounts/task';
import { getAvailabilityGrowInstruction } from './generated/instructions/availabilityGrow';
import { getChallengeAvailabilityInstructionAsync } from './generated/instructions/challengeAvailability';
import { COMPUTE_MARKET_PROGRAM_ADDRESS } from './generated/programs';
import { TaskStatus } from './generated/types/taskStatus';
import { decodeJobSpec, InputMode, JobKind, tileCount, tileLen, type JobSpec } from './job';
import type { AccountValue } from './accounts';
import { fetchResult, fetchTiles, TransferError, type FetchOptions } from './results';
import { assertHoldsTokens, sendInstructions, stakeMintOf, tokenAccountOf, type KitClient, type SendOptions } from './tx';

// ---------------------------------------------------------------- verdicts

/** Majority 1: the result is right (Accepted). */
export const VERDICT_VALID = 1;
/** Majority 2: the result is wrong (Rejected). */
export const VERDICT_INVALID = 2;
/** Majority 3: a majority could not get the result, or found it wrong (Rejected, withheld). */
export const VERDICT_WITHHELD = 3;
/** Majority 4: a dispute proved the Accepted result wrong (Rejected). */
export const VERDICT_PROVEN_WRONG = 4;
/** Majority 5: a dispute refuted the INVALID votes' claims (Accepted). */
export const VERDICT_CLAIMS_REFUTED = 5;
/** Majority 6: a withheld verdict contested by publication, answered (Accepted, served). */
export const VERDICT_SERVED = 6;
/** Majority 7: an availability challenge was not answered (Rejected, unserved). */
export const VERDICT_UNSERVED = 7;

/** A verdict's (majority's) name in words (PROTOCOL §3.5, §8): `undefined` for none (0). */
export function verdictName(majority: number): string | undefined {
  switch (majority) {
    case VERDICT_VALID:
      return 'valid';
    case VERDICT_INVALID:
      return 'invalid';
    case VERDICT_WITHHELD:
      return 'withheld: a majority could not get the result or found it wrong';
    case VERDICT_PROVEN_WRONG:
      return 'proven wrong by a dispute';
    case VERDICT_CLAIMS_REFUTED:
      return "the INVALID votes' claims refuted by a dispute";
    case VERDICT_SERVED:
      return 'served: the provider published the tiles a contest drew, on chain';
    case VERDICT_UNSERVED:
      return 'unserved: the provider did not publish the tiles an availability challenge named';
    default:
      return majority === 0 ? undefined : `verdict ${majority}`;
  }
}

/** Whether a task's verdict may be challenged for availability (the program's
 * `NotChallengeable` otherwise): held, Accepted, by majority 1 or 6 (5, claims refuted,
 * concludes at once and leaves no window). */
export function availabilityChallengeable(t: Pick<Task, 'held' | 'status' | 'rounds' | 'round'>): boolean {
  return t.held && t.status === TaskStatus.Accepted && [VERDICT_VALID, VERDICT_SERVED].includes(t.rounds[t.round].majority);
}

// ---------------------------------------------------------------- bounds

/** A client's challenge (bonded, against an Accepted verdict). */
export const KIND_CHALLENGE = 1;
/** A provider's contest of a withheld verdict. */
export const KIND_CONTEST = 2;
/** Most tiles one availability account names. */
export const MAX_AVAILABILITY_TILES = 8;
/** Most chunks (1 KiB each) one availability account holds. */
export const MAX_AVAILABILITY_CHUNKS = 64;
/** Slots one published chunk costs: three transactions (two writes and a prove), two slots each. */
export const SLOTS_PER_CHUNK = 6;
/** Availability challenges open on one task at once. */
export const MAX_OPEN_CHALLENGES = 8;

/** Open: the provider may still publish. */
export const AVAILABILITY_OPEN = 0;
/** Every chunk of every named tile proven: the data area holds them. */
export const AVAILABILITY_ANSWERED = 1;
/** Its deadline passed unanswered: the provider failed. */
export const AVAILABILITY_FAILED = 2;
/** Ended without effect. */
export const AVAILABILITY_MOOT = 3;

/** Bytes before the data area, discriminator included (`Availability::HEADER`). */
export const AVAILABILITY_HEADER = getAvailabilitySize();
/** Byte offset of `task` (`Availability::TASK_OFFSET`). */
export const AVAILABILITY_TASK_OFFSET = 16;
/** Byte offset of `opener` (`Availability::OPENER_OFFSET`). */
export const AVAILABILITY_OPENER_OFFSET = 48;
/** Most bytes an account is created with; each `availability_grow` adds as many. */
export const AVAILABILITY_MAX_INITIAL = 10_240;

// dispute::SLOTS_PER_TRANSACTION and trace's clock (PROTOCOL §8.7, §8.10)
const SLOTS_PER_TRANSACTION = 2n;
const MIN_TURN = 150n;
const DEFENCE_TURNS = 2n;
const CLAIM_TRANSACTIONS = 12n;
const SEGMENTS = 16n;
const LEAF_LEN = 1024n;
const MAX_MEMORY = LEAF_LEN << 16n;
const MAX_MLP_LAYERS = 8n;
const MAX_MLP_WIDTH = 4096n;
const MAX_ENCODER_BLOCKS = 24n;
const MAX_ENCODER_FFN = 4096n;
const RECORD_HEAD = 12n;
const EXP_LEN = 1024n;
const RES_HEAD = 20n;
const GROUP = 256n;
const U64_MAX = (1n << 64n) - 1n;
const K = BigInt(CHUNK_LEN);
const hex = (b: Uint8Array) => getBase16Decoder().decode(b);

const divCeil = (a: bigint, b: bigint) => (a + b - 1n) / b;
const max = (...xs: bigint[]) => xs.reduce((a, b) => (b > a ? b : a));
const min = (...xs: bigint[]) => xs.reduce((a, b) => (b < a ? b : a));
const nextPow2 = (x: bigint) => {
  let p = 1n;
  while (p < x) p <<= 1n;
  return p;
};

/** Transactions one element takes to argue (`dispute::element_transactions`); `undefined`
 * when the program cannot referee it element by element. */
function elementTransactions(job: JobSpec): bigint | undefined {
  const ELEMENT = 5n;
  const oneStep = job.kind === JobKind.HashBatch || (job.kind === JobKind.MatMulModP && job.inputMode === InputMode.Generated);
  if (oneStep) return ELEMENT;
  const slices = job.slicesLen ?? 0n;
  if (slices === 0n) return undefined;
  let chunks: bigint;
  if (job.kind === JobKind.MatMulModP) chunks = 2n * divCeil(BigInt(job.dims[1]), 256n);
  else if (job.kind === JobKind.Mlp) chunks = divCeil(slices, K) + divCeil(BigInt(job.dims[1]), K) + 1n;
  else return undefined;
  return ELEMENT + 2n + 3n * chunks;
}

/** An `Encoder` trace's memory bound (`trace::encoder::memory_bound`). */
function encoderMemoryBound(job: JobSpec): bigint {
  const [l, h] = [BigInt(job.dims[1]), max(BigInt(job.dims[2]), 1n)];
  const [rs, ps] = [nextPow2(2n * h), nextPow2(2n * l)];
  const at = (num: bigint, den: bigint) => min(divCeil(job.workPerRow * num, max(den, 1n)), U64_MAX);
  const blocks = max(at(12n * l * h + 2n * l * rs + 10n * LEAF_LEN, 4n * h * h + 8n * l * h + 96n * h), at(ps, 64n), at(2n * l, 2n * h + 16n));
  const groups = divCeil(h, GROUP);
  return 4n * l * h + LEAF_LEN + (l * rs + LEAF_LEN) + min(blocks + l * groups * LEAF_LEN + 2n * h + LEAF_LEN, U64_MAX);
}

/** The clock of a game over this job's traces fits `window` (`trace::clock(job, window).is_some()`). */
function gameFits(job: JobSpec, window: number): boolean {
  const slices = job.slicesLen ?? 0n;
  let steps: bigint;
  let pieces: bigint;
  const span = (n: bigint) => divCeil(n, K) + 1n;
  if (job.kind === JobKind.Encoder && slices > 0n && job.dims[2] % 2 === 0 && encoderMemoryBound(job) <= MAX_MEMORY) {
    const [l, h] = [BigInt(job.dims[1]), max(BigInt(job.dims[2]), 1n)];
    const blocks = min(job.workPerRow / (4n * h * h), MAX_ENCODER_BLOCKS);
    const bf = min(job.workPerRow / (2n * h), MAX_ENCODER_BLOCKS * MAX_ENCODER_FFN);
    steps = min(l * (h + 1n + blocks * (7n * h + 3n) + bf + 2n) + 2n, MAX_MEMORY);
    const hh = BigInt(job.dims[2]);
    const attn = span(hh) + span(l * hh) + span(8n) + span(4n * EXP_LEN);
    const res = span(RES_HEAD + MAX_ENCODER_FFN) + span(2n * MAX_ENCODER_FFN) + 1n;
    const norm = span(4n * hh) + span(4n + 8n * hh);
    pieces = max(attn, res, norm) + 1n;
  } else if (job.kind === JobKind.Mlp && slices > 0n) {
    steps = (MAX_MLP_LAYERS - 1n) * MAX_MLP_WIDTH + BigInt(job.dims[2]) + 1n;
    const [f, c] = [BigInt(job.dims[1]), BigInt(job.dims[2])];
    const dense = max(divCeil(f, K) + 1n, divCeil(MAX_MLP_WIDTH, K) + 1n) + divCeil(RECORD_HEAD + MAX_MLP_WIDTH, K) + 1n;
    pieces = max(dense, divCeil(4n * c, K) + 1n) + 1n;
  } else return false;
  let levels = 0n;
  for (let s = 1n; s < steps; s *= SEGMENTS) levels++;
  const step = 3n * pieces * SLOTS_PER_TRANSACTION;
  const claim = max((job.kind === JobKind.Encoder ? CLAIM_TRANSACTIONS + 3n : CLAIM_TRANSACTIONS) * SLOTS_PER_TRANSACTION, MIN_TURN);
  const turns = DEFENCE_TURNS + 2n * levels + 2n;
  const w = BigInt(window);
  if (w < claim + step) return false;
  return (w - (claim + step)) / turns >= MIN_TURN;
}

/** Whether the program referees this job's verdicts in a market of dispute window `window`
 * (`dispute::refereed`): one element argued in half the window, or a game's clock fits it. */
export function refereed(job: JobSpec, window: number): boolean {
  const supported = job.kind === JobKind.Encoder ? job.dims[2] % 2 === 0 : [JobKind.HashBatch, JobKind.MatMulModP, JobKind.Mlp].includes(job.kind);
  if (!supported) return false;
  const n = elementTransactions(job);
  if (n !== undefined && n * SLOTS_PER_TRANSACTION <= BigInt(window) / 2n) return true;
  return gameFits(job, window);
}

/** Chunks in one tile's slot (`availability::chunks_per_tile`). */
export function chunksPerTile(job: JobSpec): number {
  return slotLen(tileLen(job)) / CHUNK_LEN;
}

/** Most tiles one availability challenge of this job may name in a market of dispute window
 * `window` (`availability::max_tiles`): their chunks within 64, their answer (6 slots a chunk)
 * within half the window, at most 8 and at most the result's tiles; 0 when the job cannot be
 * challenged (not refereed, or one slot does not fit). */
export function maxTiles(job: JobSpec, window: number): number {
  if (!refereed(job, window)) return 0;
  const per = Math.max(chunksPerTile(job), 1);
  const byWindow = Math.floor(Math.floor(window / 2) / (SLOTS_PER_CHUNK * per));
  const bySize = Math.floor(MAX_AVAILABILITY_CHUNKS / per);
  return Math.min(byWindow, bySize, MAX_AVAILABILITY_TILES, tileCount(job));
}

/** Whether one challenge may name `tiles` (`availability::tiles_valid`): 1 ..= `maxTiles` of
 * them, strictly increasing, each below T. */
export function tilesValid(job: JobSpec, window: number, tiles: readonly number[]): boolean {
  return (
    tiles.length > 0 &&
    tiles.length <= maxTiles(job, window) &&
    tiles.every((t, i) => Number.isInteger(t) && t >= 0 && (i === 0 || tiles[i - 1] < t)) &&
    tiles.every((t) => t < tileCount(job))
  );
}

/** An account's size fully grown (`Availability::space`). */
export function availabilitySpace(tiles: number, slot: number): number {
  return AVAILABILITY_HEADER + tiles * slot;
}

/** `availability_grow` instructions from its created size to its full one (`Availability::grows`). */
export function availabilityGrows(tiles: number, slot: number): number {
  return Math.ceil(Math.max(0, availabilitySpace(tiles, slot) - AVAILABILITY_MAX_INITIAL) / AVAILABILITY_MAX_INITIAL);
}

/** Availability account `nonce` of `task` as posted at `postedSlot` (`Task.postedSlot`):
 * `["availability", task, posted slot u64 LE, nonce u16 LE]` (a task id posted again never meets
 * the old task's accounts). */
export async function availabilityAddress(task: Address, postedSlot: bigint, nonce: number, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Address> {
  const seeds = [new TextEncoder().encode('availability'), getAddressEncoder().encode(task), getU64Encoder().encode(postedSlot), getU16Encoder().encode(nonce)];
  return (await getProgramDerivedAddress({ programAddress, seeds }))[0];
}

// ---------------------------------------------------------------- the challenge

/** What to challenge. */
export interface ChallengeAvailabilityArgs {
  /** Who bonds (its stake-token account, default the associated one, pays the bond). */
  challenger: TransactionSigner;
  /** The task (held Accepted, in its dispute window). */
  task: Address;
  /** The tiles to have published: distinct, increasing, below T, at most `maxTiles`. */
  tiles: number[];
  /** The token account the bond comes from (default the challenger's associated one). */
  source?: Address;
  /** Where the bond is returned when the challenge fails or is moot (default `source`). */
  payout?: Address;
}

/** The bond a challenge of `task` puts up: its verifier bond, at least one base unit. */
export function availabilityBond(task: Pick<Task, 'verifierBond'>): bigint {
  return task.verifierBond > 0n ? task.verifierBond : 1n;
}

/** The opening transaction's instructions, as `client::opened_and_grown`: `challenge_availability`
 * for account `availability` (the task's next nonce) and its `availability_grow`s. Throws,
 * naming why, unless the tiles are valid for the job in the task's window. */
export async function challengeAvailabilityInstructions(
  args: ChallengeAvailabilityArgs & { source: Address },
  task: Pick<Task, 'job' | 'disputeWindow' | 'availabilityNonce' | 'postedSlot'>,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
): Promise<{ availability: Address; instructions: Instruction[] }> {
  const job = decodeJobSpec(new Uint8Array(task.job));
  const most = maxTiles(job, task.disputeWindow);
  if (most === 0) throw new Error(`this job cannot be challenged for availability in a dispute window of ${task.disputeWindow} slots (a tile's slot does not fit half of it, or the program does not referee the job)`);
  if (!tilesValid(job, task.disputeWindow, args.tiles)) {
    throw new Error(`tiles [${args.tiles.join(', ')}] cannot be named by one challenge: 1 to ${most} distinct tiles, increasing, each below the result's ${tileCount(job)}`);
  }
  const availability = await availabilityAddress(args.task, task.postedSlot, task.availabilityNonce, programAddress);
  const config = { programAddress };
  const open = await getChallengeAvailabilityInstructionAsync(
    { task: args.task, availability, challenger: args.challenger, challengerToken: args.source, payout: args.payout ?? args.source, tiles: args.tiles },
    config,
  );
  const grows = availabilityGrows(args.tiles.length, slotLen(tileLen(job)));
  const instructions: Instruction[] = [open, ...Array.from({ length: grows }, () => getAvailabilityGrowInstruction({ availability, opener: args.challenger }, config))];
  return { availability, instructions };
}

/** Challenges the availability of a held Accepted result (PROTOCOL §8.11): the task read, its
 * verdict and window checked, the bond checked against the source's balance (a named
 * `InsufficientTokens`, not a failed simulation), then the open and its grows sent in one
 * transaction. Returns the availability account and the signature. */
export async function challengeAvailability(
  client: KitClient,
  args: ChallengeAvailabilityArgs,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
  fees: SendOptions = {},
): Promise<{ availability: Address; bond: bigint; signature: string }> {
  const t = (await fetchTask(client.rpc, args.task, { commitment: 'confirmed' })).data;
  if (!availabilityChallengeable(t)) throw new Error(`task ${args.task} has no Accepted verdict held for its dispute window: there is nothing to challenge`);
  const slot = await client.rpc.getSlot({ commitment: 'confirmed' }).send();
  if (slot > t.disputeDeadline) throw new Error(`task ${args.task}'s dispute window ended at slot ${t.disputeDeadline} (now ${slot}): it can no longer be challenged`);
  // the client has MAX_OPEN of its own; everyone else shares MAX_OPEN (PROTOCOL §8.11)
  const mine = args.challenger.address === t.client ? t.clientChallenges : t.challengesOpen - t.clientChallenges;
  if (mine >= MAX_OPEN_CHALLENGES) throw new Error(`task ${args.task} has ${mine} availability challenges of ${args.challenger.address === t.client ? 'its client' : 'others than its client'} open, the most at once: wait for one to end`);
  const source = args.source ?? (await tokenAccountOf(args.challenger.address, await stakeMintOf(client.rpc, programAddress)));
  const bond = availabilityBond(t);
  await assertHoldsTokens(client, args.challenger.address, bond, 'the availability bond', programAddress, args.source);
  const { availability, instructions } = await challengeAvailabilityInstructions({ ...args, source }, t, programAddress);
  return { availability, bond, signature: await sendInstructions(client, args.challenger, instructions, fees) };
}

// ---------------------------------------------------------------- the reader

/** Result URLs of the keepers of `task`'s seated verifiers (their nodes' announced endpoints,
 * `<endpoint>/r/<root>`): what they checked they keep and serve again (PROTOCOL §8.12). */
export async function verifierSources(rpc: Rpc<SolanaRpcApi>, task: Address, root: Uint8Array): Promise<string[]> {
  const t = await fetchMaybeTask(rpc, task, { commitment: 'confirmed' });
  if (!t.exists) return [];
  const none = '11111111111111111111111111111111';
  const nodes = [...new Set(t.data.seats.map((s) => s.node as string).filter((n) => n !== none))] as Address[];
  if (nodes.length === 0) return [];
  const rootHex = Array.from(root, (b) => b.toString(16).padStart(2, '0')).join('');
  return (await fetchAllMaybeNode(rpc, nodes))
    .filter((n) => n.exists && n.data.endpointLen > 0)
    .map((n) => (n.exists ? new TextDecoder().decode(n.data.endpoint.slice(0, n.data.endpointLen)) : ''))
    .filter((e) => e.startsWith('http://') || e.startsWith('https://'))
    .map((e) => `${e.replace(/\/+$/, '')}/r/${rootHex}`);
}

/** An availability account: its fields and its data area (the named tiles' slots). */
export interface AvailabilityAccount {
  address: Address;
  fields: Availability;
  /** `tileCount · slotLen` bytes: named tile i's slot at `i · slotLen`. */
  area: Uint8Array;
}

/** Decodes an availability account's bytes: the discriminator checked, the fields read, the
 * data area sliced (it must be whole: an account not fully grown has nothing published). */
export function decodeAvailabilityAccount(address: Address, bytes: Uint8Array): AvailabilityAccount {
  if (bytes.length < AVAILABILITY_HEADER) throw new Error(`the availability account ${address} holds ${bytes.length} bytes, fewer than its ${AVAILABILITY_HEADER} of fields`);
  if (!AVAILABILITY_DISCRIMINATOR.every((x, i) => bytes[i] === x)) throw new Error(`the account ${address} is not an Availability (its discriminator differs)`);
  const fields = getAvailabilityDecoder().decode(bytes);
  if (fields.tileCount > MAX_AVAILABILITY_TILES) throw new Error(`the availability account ${address} names ${fields.tileCount} tiles, at most ${MAX_AVAILABILITY_TILES}`);
  const area = bytes.slice(AVAILABILITY_HEADER, AVAILABILITY_HEADER + fields.tileCount * fields.slotLen);
  return { address, fields, area };
}

/** The availability accounts of `task` (challenges and contests, open or ended until closed):
 * `getProgramAccounts` by the discriminator and the task at `TASK_OFFSET`, each checked to be
 * the program's and to name the task. */
export async function availabilityOf(rpc: Rpc<SolanaRpcApi>, task: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<AvailabilityAccount[]> {
  const got = await rpc
    .getProgramAccounts(programAddress, {
      encoding: 'base64',
      commitment: 'confirmed',
      filters: [
        { memcmp: { offset: 0n, bytes: getBase58Decoder().decode(AVAILABILITY_DISCRIMINATOR) as any, encoding: 'base58' } },
        { memcmp: { offset: BigInt(AVAILABILITY_TASK_OFFSET), bytes: task as any, encoding: 'base58' } },
      ],
    })
    .send();
  return (got as unknown as { pubkey: Address; account: AccountValue }[])
    .filter((a) => a.account.owner === programAddress)
    .map((a) => decodeAvailabilityAccount(a.pubkey, new Uint8Array(getBase64Encoder().encode(String(a.account.data[0])))))
    .filter((a) => a.fields.task === task)
    .sort((a, b) => a.fields.nonce - b.fields.nonce);
}

/** The tiles published in the answered accounts among `accounts` (index → the tile's bytes,
 * its slot's padding cut off): each proven chunk by chunk against the result root by the
 * program. An account of another slot length than the job's is skipped. */
export function publishedTiles(job: JobSpec, accounts: readonly AvailabilityAccount[]): Map<number, Uint8Array> {
  const len = tileLen(job);
  const slot = slotLen(len);
  const out = new Map<number, Uint8Array>();
  for (const a of accounts) {
    if (a.fields.state !== AVAILABILITY_ANSWERED || a.fields.slotLen !== slot) continue;
    a.fields.tiles.slice(0, a.fields.tileCount).forEach((t, i) => {
      if (!out.has(t) && a.area.length >= (i + 1) * slot) out.set(t, a.area.slice(i * slot, i * slot + len));
    });
  }
  return out;
}

// ---------------------------------------------------------------- the result, from every source

/** The provider does not serve the result, and the tiles published on chain do not make it
 * whole: what is missing, and until when a challenge may make the provider publish it. */
export class ResultNotServed extends TransferError {
  constructor(
    message: string,
    /** Tiles neither served nor published. */
    readonly missing: number[],
    /** The last slot a challenge may be opened (the held verdict's dispute deadline), when it may. */
    readonly challengeBy?: bigint,
  ) {
    super(message);
    this.name = 'ResultNotServed';
  }
}

/** Where a result's tiles came from. */
export interface FetchedResult {
  tiles: Uint8Array[];
  /** The tiles taken from answered availability accounts (proven on chain by the program). */
  published: number[];
}

/** Tiles asked of a source in one request (PROTOCOL §8.12). */
const TILES_PER_REQUEST = 256;

/** Every tile of the result of `task`, checked against `root`: from the provider's `resultUri`
 * (the whole, else the tiles it serves with their proofs), then, as the last source, from the
 * tiles published in the task's answered availability accounts. When they do not make it
 * whole, a [`ResultNotServed`] says so in words, and what to do: challenge the provider's
 * availability while the verdict is held, naming the deadline. */
export async function fetchResultOrPublished(
  rpc: Rpc<SolanaRpcApi>,
  task: Address,
  c: { job: JobSpec; root: Uint8Array; resultUri: string },
  options: FetchOptions = {},
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
): Promise<FetchedResult> {
  let why: string;
  try {
    return { tiles: await fetchResult(c.resultUri, c.job, c.root, options), published: [] };
  } catch (e) {
    why = (e as Error).message;
  }
  const count = tileCount(c.job);
  const held = new Map<number, Uint8Array>();
  const published = publishedTiles(c.job, await availabilityOf(rpc, task, programAddress));
  const wanted = () => Array.from({ length: count }, (_, i) => i).filter((i) => !published.has(i) && !held.has(i));
  // the provider may serve tiles with their proofs when it serves no whole; then every seated
  // verifier's keeper, which keeps what it checked (PROTOCOL §8.12), whole or tile by tile
  const sources = [c.resultUri, ...(await verifierSources(rpc, task, c.root))];
  for (const [n, source] of sources.entries()) {
    if (wanted().length === 0) break;
    if (n > 0 && held.size === 0) {
      try {
        (await fetchResult(source, c.job, c.root, options)).forEach((tile, i) => held.set(i, tile));
        continue;
      } catch (e) {
        why = `${why}; ${source}: ${(e as Error).message}`;
      }
    }
    try {
      const missing = wanted();
      for (let at = 0; at < missing.length; at += TILES_PER_REQUEST) {
        const ask = missing.slice(at, at + TILES_PER_REQUEST);
        const got = await fetchTiles(source, c.job, c.root, ask, options);
        ask.forEach((i, k) => held.set(i, got[k]));
      }
    } catch (e) {
      why = `${why}; ${source}: ${(e as Error).message}`;
    }
  }
  let missing: number[];
  const taken: number[] = [];
  for (const [i, tile] of published) {
    if (!held.has(i)) {
      held.set(i, tile);
      taken.push(i);
    }
  }
  missing = Array.from({ length: count }, (_, i) => i).filter((i) => !held.has(i));
  if (missing.length === 0) {
    const tiles = Array.from({ length: count }, (_, i) => held.get(i)!);
    if (hex(rootOfTiles(tiles)) !== hex(c.root)) throw new TransferError('the tiles served and published do not hash to the root on chain');
    return { tiles, published: taken.sort((a, b) => a - b) };
  }
  const t = await fetchMaybeTask(rpc, task, { commitment: 'confirmed' });
  const list = missing.length > 12 ? `${missing.slice(0, 12).join(', ')}, … (${missing.length} tiles)` : missing.join(', ');
  const onChain = published.size ? `; ${published.size} of its ${count} tiles are published on chain` : '';
  if (t.exists && availabilityChallengeable(t.data)) {
    const most = maxTiles(c.job, t.data.disputeWindow);
    const what =
      most === 0
        ? 'this job cannot be challenged for availability in its market (a tile does not fit half the dispute window): the verdict stands'
        : `challenge its availability while the verdict is held, until slot ${t.data.disputeDeadline}: name up to ${most} of the missing tiles a challenge (bond ${availabilityBond(t.data)} base units, returned if the provider fails to publish them on chain; then the provider is slashed and your reward refunded in full)`;
    throw new ResultNotServed(`the provider is not serving the result (${why})${onChain}; tiles missing: ${list}. What to do: ${what}`, missing, most === 0 ? undefined : t.data.disputeDeadline);
  }
  throw new ResultNotServed(
    `the provider is not serving the result (${why})${onChain}; tiles missing: ${list}. Its verdict is no longer held for disputes, so it can no longer be challenged for availability`,
    missing,
  );
}
