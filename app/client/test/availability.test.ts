// Availability (PROTOCOL §8.11): max_tiles and tiles_valid against the Rust tests'
// values (crates/protocol/src/availability.rs), the opening transaction's instructions (the
// open's accounts and data, its grows), the account's layout decoded from bytes built by hand,
// and a result fetched from the tiles published on chain when its provider serves nothing.
import { address, getAddressEncoder, getBase64Decoder, getProgramDerivedAddress, type Address } from '@solana/kit';
import { describe, expect, it } from 'vitest';
import {
  AVAILABILITY_DISCRIMINATOR,
  AVAILABILITY_HEADER,
  AVAILABILITY_OPENER_OFFSET,
  AVAILABILITY_TASK_OFFSET,
  availabilityAddress,
  availabilityBond,
  challengeAvailability,
  configAddress,
  CONFIG_DISCRIMINATOR,
  getConfigDecoder,
  getConfigEncoder,
  getConfigSize,
  ProgramRefusal,
  tokenAccountOf,
  availabilityGrows,
  CHALLENGE_AVAILABILITY_DISCRIMINATOR,
  challengeAvailabilityInstructions,
  chunksPerTile,
  COMPUTE_MARKET_PROGRAM_ADDRESS,
  decodeAvailabilityAccount,
  encodeJobSpec,
  encoderWorkPerToken,
  fetchResultOrPublished,
  findEscrowPda,
  getAvailabilitySize,
  getTaskDecoder,
  getTaskEncoder,
  getTaskSize,
  InputMode,
  JobKind,
  maxTiles,
  outcomeOf,
  publishedTiles,
  refereed,
  ResultNotServed,
  rootOfTiles,
  TaskStatus,
  tilesValid,
  verdictName,
  verifierSources,
  getNodeDecoder,
  getNodeEncoder,
  NODE_DISCRIMINATOR,
  getNodeSize,
  type JobSpec,
  type Task,
} from '../src';
import { getMintEncoder, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import { scripted } from './scripted';

const seed = (b: number) => new Uint8Array(32).fill(b);
const matmul = (m: number, k: number, n: number): JobSpec => ({ kind: JobKind.MatMulModP, inputMode: InputMode.Generated, dims: [m, k, n], input: seed(1), rowsPerTile: 0, workPerRow: 0n });
const hashBatch = (tiles: number, nonces: number, iterations: number): JobSpec => ({ kind: JobKind.HashBatch, inputMode: InputMode.Generated, dims: [tiles, nonces, iterations], input: seed(2), rowsPerTile: 0, workPerRow: 0n });

const TASK = address('Vote111111111111111111111111111111111111111');
const OPENER = address('9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin');
const PAYOUT = address('So11111111111111111111111111111111111111112');

describe('bounds (availability::max_tiles, tiles_valid)', () => {
  it('follow the window and the slot, as the Rust tests', () => {
    // 512 × 512 generated product: 64 tiles of a 16 KiB slot
    const job = matmul(512, 64, 512);
    expect(chunksPerTile(job)).toBe(16);
    expect(maxTiles(job, 0)).toBe(0);
    expect(maxTiles(job, 20)).toBe(0);
    expect(maxTiles(job, 192)).toBe(1);
    expect(maxTiles(job, 10_000)).toBe(4);
    // a HashBatch of 4 nonces a tile: 1 KiB slots
    expect(maxTiles(hashBatch(5, 4, 10), 200)).toBe(5);
    expect(maxTiles(hashBatch(5, 4, 10), 60)).toBe(5);
    expect(maxTiles(hashBatch(5, 4, 10), 24)).toBe(2);
    const hb = hashBatch(100, 4, 10);
    expect(maxTiles(hb, 10_000)).toBe(8);
    expect(tilesValid(hb, 200, [0, 3, 99])).toBe(true);
    expect(tilesValid(hb, 200, [3, 0])).toBe(false);
    expect(tilesValid(hb, 200, [3, 3])).toBe(false);
    expect(tilesValid(hb, 200, [100])).toBe(false);
    expect(tilesValid(hb, 200, [])).toBe(false);
    expect(tilesValid(hb, 200, [0, 1, 2, 3, 4, 5, 6, 7, 8])).toBe(false);
  });

  it('are 0 for a job the program does not referee (dispute::refereed, as the Rust tests)', () => {
    const mlp = (rows: number, features: number, classes: number, work: bigint, rowsPerTile: number, slicesLen = 0n): JobSpec => ({
      kind: JobKind.Mlp,
      inputMode: InputMode.ContentHash,
      dims: [rows, features, classes],
      input: seed(1),
      rowsPerTile,
      workPerRow: work,
      slicesLen,
    });
    const encoder = (texts: number, tokens: number, hidden: number, work: bigint, rowsPerTile: number, slicesLen = 0n): JobSpec => ({
      kind: JobKind.Encoder,
      inputMode: InputMode.ContentHash,
      dims: [texts, tokens, hidden],
      input: seed(0),
      rowsPerTile,
      workPerRow: work,
      slicesLen,
    });
    // an Mlp naming no slices is not refereed: no dispute, no challenge
    const digits = mlp(450, 64, 10, 9_472n, 8);
    expect(refereed(digits, 10_000)).toBe(false);
    expect(maxTiles(digits, 10_000)).toBe(0);
    const sliced = { ...digits, slicesLen: 11_144n };
    expect(refereed(sliced, 184) && !refereed(sliced, 183)).toBe(true);
    const wide = { ...sliced, slicesLen: 200_000n };
    expect(refereed(wide, 2_400)).toBe(true); // by a game
    expect(refereed(wide, 1_000)).toBe(false);
    // trace::clock's bounds (a_game_fits_its_window_or_is_not_played), the model too large to feed
    const game = mlp(100, 64, 10, BigInt(64 * 256 + 256 * 128 + 1280), 8, 600_000n);
    expect(refereed({ ...game, slicesLen: 0n }, 2_400)).toBe(false);
    expect(refereed(game, 2_021)).toBe(false);
    expect(refereed(game, 2_022)).toBe(true);
    const product = { ...matmul(2, 8_192, 2), inputMode: InputMode.ContentHash };
    expect(refereed(product, 10_000)).toBe(false);
    expect(refereed({ ...product, slicesLen: 2n * 32_768n }, 800) && !refereed({ ...product, slicesLen: 2n * 32_768n }, 795)).toBe(true);
    expect(refereed(hashBatch(4, 8, 1), 20)).toBe(true);
    expect(refereed(encoder(4, 8, 32, 100_000n, 2), 10_000)).toBe(false);
    expect(refereed(encoder(4, 8, 33, 100_000n, 2, 1n), 10_000)).toBe(false); // odd width
    // MiniLM's game windows (PROTOCOL §8.10's figures): the least window a game fits
    const miniLm = (limit: number) => encoder(100, limit, 384, encoderWorkPerToken(6n, 384n, 1536n, 12n, BigInt(limit)), 2, 1n);
    const least = (limit: number) => {
      for (let d = 1_000; d < 10_000; d++) if (refereed(miniLm(limit), d)) return d;
    };
    expect([least(12), least(128)]).toEqual([2_352, 2_904]);
    expect(refereed(miniLm(129), 10_000)).toBe(false); // past 64 MiB of trace
    // twelve blocks at 512 tokens: no game
    expect(refereed(encoder(100, 512, 384, encoderWorkPerToken(12n, 384n, 1536n, 12n, 512n), 4, 1n), 10_000)).toBe(false);
  });

  it('grow an account past 10 KiB by 10 KiB an instruction (Availability::grows)', () => {
    expect(AVAILABILITY_HEADER).toBe(272);
    expect(AVAILABILITY_HEADER).toBe(getAvailabilitySize());
    expect(availabilityGrows(1, 1024)).toBe(0);
    expect(availabilityGrows(8, 1024)).toBe(0);
    expect(availabilityGrows(10, 1024)).toBe(1); // 272 + 10 240 > 10 240
    expect(availabilityGrows(4, 16_384)).toBe(6); // the 64 KiB bound: six
    expect(availabilityGrows(1, 16_384)).toBe(1);
  });

  it('names the verdicts, served and unserved included', () => {
    expect(verdictName(6)).toMatch(/^served/);
    expect(verdictName(7)).toMatch(/^unserved/);
    expect(verdictName(0)).toBeUndefined();
  });
});

/** A Task with the fields a challenge reads. */
function task(job: JobSpec, over: Record<string, unknown> = {}): Task {
  const zero = new Uint8Array(getTaskSize());
  zero.set([79, 34, 229, 55, 88, 90, 55, 84]);
  const t = getTaskDecoder().decode(zero);
  return { ...t, job: encodeJobSpec(job), disputeWindow: 10_000, availabilityNonce: 3, postedSlot: 263n, verifierBond: 0n, ...over } as Task;
}

describe('challengeAvailabilityInstructions', () => {
  const signer = { address: OPENER, signTransactions: async () => [] } as any;

  it('opens at the task nonce, with the accounts and data of challenge_availability, then grows it', async () => {
    const job = matmul(512, 64, 512);
    const { availability, instructions } = await challengeAvailabilityInstructions({ challenger: signer, task: TASK, tiles: [1, 5, 9, 63], source: PAYOUT }, task(job));
    const [pda] = await getProgramDerivedAddress({
      programAddress: COMPUTE_MARKET_PROGRAM_ADDRESS,
      seeds: [new TextEncoder().encode('availability'), getAddressEncoder().encode(TASK), new Uint8Array([7, 1, 0, 0, 0, 0, 0, 0]), new Uint8Array([3, 0])],
    });
    expect(availability).toBe(pda);
    expect(await availabilityAddress(TASK, 263n, 3)).toBe(pda);
    expect(instructions).toHaveLength(1 + 6);
    const [open, ...grows] = instructions;
    const [escrow] = await findEscrowPda({ task: TASK });
    expect(open.accounts!.map((a) => a.address)).toEqual([TASK, escrow, pda, OPENER, PAYOUT, PAYOUT, 'TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA', '11111111111111111111111111111111']);
    const data = new Uint8Array(open.data!);
    expect([...data.slice(0, 8)]).toEqual([...CHALLENGE_AVAILABILITY_DISCRIMINATOR]);
    const v = new DataView(data.buffer, data.byteOffset);
    expect(v.getUint32(8, true)).toBe(4);
    expect([12, 16, 20, 24].map((o) => v.getUint32(o, true))).toEqual([1, 5, 9, 63]);
    expect(data.length).toBe(28);
    for (const g of grows) {
      expect(g.accounts!.map((a) => a.address)).toEqual([pda, OPENER, '11111111111111111111111111111111']);
      expect(g.accounts![1].role).toBe(3); // writable signer: it pays the rent
    }
  });

  it('adds no grow to an account that fits 10 KiB, and refuses tiles past max_tiles', async () => {
    const job = hashBatch(100, 4, 10);
    const { instructions } = await challengeAvailabilityInstructions({ challenger: signer, task: TASK, tiles: [0, 3, 99], source: PAYOUT }, task(job));
    expect(instructions).toHaveLength(1);
    await expect(challengeAvailabilityInstructions({ challenger: signer, task: TASK, tiles: [3, 0], source: PAYOUT }, task(job))).rejects.toThrow(/increasing/);
    await expect(challengeAvailabilityInstructions({ challenger: signer, task: TASK, tiles: [0], source: PAYOUT }, task(job, { disputeWindow: 0 }))).rejects.toThrow(/cannot be challenged/);
  });
});

/** An availability account's bytes, by hand: the fields at their offsets, then the data area. */
function accountBytes(state: number, tiles: number[], slot: number, area: Uint8Array): Uint8Array {
  const b = new Uint8Array(272 + tiles.length * slot);
  const v = new DataView(b.buffer);
  b.set(AVAILABILITY_DISCRIMINATOR, 0);
  b.set([1, 1, state, tiles.length, 254, 0], 8); // version, kind, state, tile count, bump, forfeit
  v.setUint16(14, 3, true); // nonce
  b.set(getAddressEncoder().encode(TASK), 16);
  b.set(getAddressEncoder().encode(OPENER), 48);
  b.set(getAddressEncoder().encode(PAYOUT), 80);
  v.setBigUint64(112, 7n, true); // bond
  v.setBigUint64(120, 100n, true); // opened
  v.setBigUint64(128, 300n, true); // answer deadline
  v.setUint32(136, slot, true);
  v.setUint32(140, 0, true); // chunks left
  tiles.forEach((t, i) => v.setUint32(144 + 4 * i, t, true));
  tiles.forEach((_, i) => v.setBigUint64(176 + 8 * i, 1n, true));
  b.set(area, 272);
  return b;
}

describe('the availability account', () => {
  it('decodes its fields and slices its data area', () => {
    expect(AVAILABILITY_TASK_OFFSET).toBe(16);
    expect(AVAILABILITY_OPENER_OFFSET).toBe(48);
    const area = new Uint8Array(2 * 1024).map((_, i) => i % 251);
    const a = decodeAvailabilityAccount(PAYOUT, accountBytes(1, [2, 7], 1024, area));
    expect(a.fields).toMatchObject({ version: 1, kind: 1, state: 1, tileCount: 2, bump: 254, nonce: 3, task: TASK, opener: OPENER, payout: PAYOUT, bond: 7n, openedSlot: 100n, answerDeadline: 300n, slotLen: 1024 });
    expect(a.fields.tiles.slice(0, 2)).toEqual([2, 7]);
    expect(a.area).toEqual(area);
    const job = hashBatch(10, 4, 10); // 128-byte tiles in 1 KiB slots
    const got = publishedTiles(job, [a]);
    expect([...got.keys()]).toEqual([2, 7]);
    expect(got.get(7)).toEqual(area.slice(1024, 1024 + 128));
    // an open account publishes nothing yet; another discriminator is refused
    expect(publishedTiles(job, [decodeAvailabilityAccount(PAYOUT, accountBytes(0, [2, 7], 1024, area))]).size).toBe(0);
    const bad = accountBytes(1, [2], 1024, area.slice(0, 1024));
    bad[0] ^= 1;
    expect(() => decodeAvailabilityAccount(PAYOUT, bad)).toThrow(/not an Availability/);
  });
});

describe('fetchResultOrPublished', () => {
  // three tiles of 128 bytes; a provider that serves nothing (a closed port)
  const job = hashBatch(3, 4, 10);
  const tiles = [0, 1, 2].map((t) => new Uint8Array(128).fill(t + 1));
  const root = rootOfTiles(tiles);
  const c = { job, root, resultUri: 'http://127.0.0.1:9/r/x' };
  const slotOf = (t: Uint8Array) => {
    const s = new Uint8Array(1024);
    s.set(t);
    return s;
  };
  const rpcWith = (published: number[], held: boolean) => {
    const area = new Uint8Array(published.length * 1024);
    published.forEach((t, i) => area.set(slotOf(tiles[t]), i * 1024));
    const acc = { pubkey: PAYOUT, account: { owner: COMPUTE_MARKET_PROGRAM_ADDRESS, lamports: 1n, data: [getBase64Decoder().decode(accountBytes(1, published, 1024, area)), 'base64'] } };
    const t = task(job, { held, disputeDeadline: 4242n, rounds: task(job).rounds.map((r, i) => (i === 0 ? { ...r, majority: 1 } : r)), round: 0, status: TaskStatus.Accepted });
    const taskData = getBase64Decoder().decode(getTaskEncoder().encode(t as any));
    return scripted({
      getProgramAccounts: () => [acc],
      getAccountInfo: () => ({ context: { slot: 1n }, value: { owner: COMPUTE_MARKET_PROGRAM_ADDRESS, lamports: 1n, data: [taskData, 'base64'], executable: false, rentEpoch: 0n, space: BigInt(getTaskSize()) } }),
    });
  };

  it('takes the tiles published on chain when the provider serves none', async () => {
    const { rpc, calls } = rpcWith([0, 1, 2], true);
    const got = await fetchResultOrPublished(rpc, TASK, c, { allowPrivate: true });
    expect(got.tiles).toEqual(tiles);
    expect(got.published).toEqual([0, 1, 2]);
    const gpa = calls.find((x) => x.method === 'getProgramAccounts')!;
    expect(gpa.args[1].filters[1].memcmp).toMatchObject({ offset: 16n, bytes: TASK });
  });

  it('says the provider is not serving the result, and until when to challenge it', async () => {
    const { rpc } = rpcWith([1], true);
    const e = await fetchResultOrPublished(rpc, TASK, c, { allowPrivate: true }).catch((x) => x);
    expect(e).toBeInstanceOf(ResultNotServed);
    expect(e.message).toMatch(/the provider is not serving the result/);
    expect(e.message).toMatch(/challenge its availability while the verdict is held, until slot 4242/);
    expect(e.missing).toEqual([0, 2]);
    expect(e.challengeBy).toBe(4242n);
    const late = await fetchResultOrPublished(rpcWith([1], false).rpc, TASK, c, { allowPrivate: true }).catch((x) => x);
    expect(late.message).toMatch(/can no longer be challenged/);
    expect(late.challengeBy).toBeUndefined();
  });
});

describe('outcomeOf', () => {
  const entry = (name: string, data: Record<string, unknown>) => ({ signature: name, slot: 1n, blockTime: null, failed: false, events: [{ name, data }] }) as any;
  it('follows the verdict an availability account leaves in force', () => {
    const posted = entry('TaskPosted', {});
    const accepted = entry('TaskFinalized', { status: 'Accepted', majority: 1 });
    expect(outcomeOf([posted, accepted])).toBe('Accepted');
    // a challenge failed: unserved, Rejected
    expect(outcomeOf([posted, accepted, entry('AvailabilityEnded', { status: 'Rejected', majority: 7 })])).toBe('Rejected');
    // a contest answered: served, Accepted
    const withheld = entry('TaskFinalized', { status: 'Rejected', majority: 3 });
    expect(outcomeOf([posted, withheld, entry('AvailabilityEnded', { status: 'Accepted', majority: 6 })])).toBe('Accepted');
    expect(outcomeOf([posted, withheld, entry('TaskClosed', { status: 'Rejected' }), entry('AvailabilityEnded', { status: 'Accepted' })])).toBe('Rejected');
  });
});

describe('challengeAvailability', () => {
  const MINT = address('4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU');
  /** A node answering with the config (its stake mint), the mint, the task, the slot and a balance. */
  async function node(balance: bigint, over: Record<string, unknown> = {}) {
    const job = hashBatch(100, 4, 10);
    const t = task(job, { held: true, status: TaskStatus.Accepted, disputeDeadline: 500n, verifierBond: 9n, rounds: task(job).rounds.map((r, i) => (i === 0 ? { ...r, majority: 1 } : r)), round: 0, ...over });
    const zeroConfig = new Uint8Array(getConfigSize());
    zeroConfig.set(CONFIG_DISCRIMINATOR);
    const accounts = new Map<string, Uint8Array>([
      [await configAddress(), new Uint8Array(getConfigEncoder().encode({ ...getConfigDecoder().decode(zeroConfig), stakeMint: MINT }))],
      [MINT, new Uint8Array(getMintEncoder().encode({ mintAuthority: null, supply: 0n, decimals: 6, isInitialized: true, freezeAuthority: null }))],
      [TASK, new Uint8Array(getTaskEncoder().encode(t as any))],
    ]);
    return scripted({
      getAccountInfo: (a: string) => {
        const b = accounts.get(a);
        const owner = a === MINT ? TOKEN_PROGRAM_ADDRESS : COMPUTE_MARKET_PROGRAM_ADDRESS;
        return { context: { slot: 1n }, value: b ? { owner, lamports: 1n, data: [getBase64Decoder().decode(b), 'base64'], executable: false, rentEpoch: 0n, space: BigInt(b.length) } : null };
      },
      getSlot: () => 400n,
      getTokenAccountBalance: () => ({ context: { slot: 1n }, value: { amount: String(balance), decimals: 6, uiAmount: null, uiAmountString: '' } }),
    });
  }
  const challenger = { address: OPENER, signTransactions: async () => [] } as any;

  it('checks the bond (the verifier bond) against the wallet before signing anything', async () => {
    const { rpc, calls } = await node(8n);
    const e = await challengeAvailability({ rpc, rpcSubscriptions: {} as any }, { challenger, task: TASK, tiles: [0, 3] }).catch((x) => x);
    expect(e).toBeInstanceOf(ProgramRefusal);
    expect(e.errorName).toBe('InsufficientTokens');
    expect(e.message).toMatch(/the availability bond is 0\.000009/);
    const ata = await tokenAccountOf(OPENER, MINT);
    expect(calls.find((c) => c.method === 'getTokenAccountBalance')!.args[0]).toBe(ata);
    expect(calls.map((c) => c.method)).not.toContain('sendTransaction');
  });

  it('refuses a verdict not held Accepted, or a window that ended, before anything else', async () => {
    const late = await node(100n, { disputeDeadline: 399n });
    await expect(challengeAvailability({ rpc: late.rpc, rpcSubscriptions: {} as any }, { challenger, task: TASK, tiles: [0] })).rejects.toThrow(/dispute window ended at slot 399/);
    const withheld = await node(100n, { status: TaskStatus.Rejected });
    await expect(challengeAvailability({ rpc: withheld.rpc, rpcSubscriptions: {} as any }, { challenger, task: TASK, tiles: [0] })).rejects.toThrow(/no Accepted verdict held/);
    expect(availabilityBond({ verifierBond: 0n })).toBe(1n);
  });
});

describe('verifierSources', () => {
  it("names each seated verifier's keeper that announced an endpoint, once, under the root", async () => {
    const job = hashBatch(3, 4, 10);
    const none = address('11111111111111111111111111111111');
    const [a, b] = [OPENER, PAYOUT];
    const seat = (node: Address) => ({ node, exponent: 0n, weight: 1n });
    const seats = task(job).seats.map((s, i) => (i === 0 || i === 2 ? seat(a) : i === 1 ? seat(b) : { ...s, node: none }));
    const taskData = getBase64Decoder().decode(getTaskEncoder().encode(task(job, { seats }) as any));
    const zero = new Uint8Array(getNodeSize());
    zero.set(NODE_DISCRIMINATOR);
    const blank = getNodeDecoder().decode(zero);
    const node = (endpoint: string) => {
      const e = new TextEncoder().encode(endpoint);
      const bytes = new Uint8Array(56);
      bytes.set(e);
      return getBase64Decoder().decode(getNodeEncoder().encode({ ...blank, endpoint: bytes, endpointLen: e.length } as any));
    };
    const accountOf = (data: string) => ({ owner: COMPUTE_MARKET_PROGRAM_ADDRESS, lamports: 1n, data: [data, 'base64'], executable: false, rentEpoch: 0n, space: BigInt(getNodeSize()) });
    const { rpc, calls } = scripted({
      getAccountInfo: () => ({ context: { slot: 1n }, value: { owner: COMPUTE_MARKET_PROGRAM_ADDRESS, lamports: 1n, data: [taskData, 'base64'], executable: false, rentEpoch: 0n, space: BigInt(getTaskSize()) } }),
      getMultipleAccounts: () => ({ context: { slot: 1n }, value: [accountOf(node('http://v0.example:9100/')), accountOf(node(''))] }),
    });
    const root = new Uint8Array(32).fill(0xab);
    expect(await verifierSources(rpc, TASK, root)).toEqual([`http://v0.example:9100/r/${'ab'.repeat(32)}`]);
    const asked = calls.find((c) => c.method === 'getMultipleAccounts')!.args[0];
    expect(asked).toEqual([a, b]);
  });
});
