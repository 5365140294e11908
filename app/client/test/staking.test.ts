// The node actions and settlements as instructions: every account where the program's seeds put
// it (derived here from the seeds in programs/compute-market/src/instructions/*.rs, not by the
// package's helpers), signer and writable flags as the program declares them, the data decoding
// to the arguments; the accounts read from a scripted chain; and the fee payer and partial
// signing path (a relayer pays, the actor signs, each in turn, over the wire form).

import { createHash } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  AccountRole,
  address,
  createNoopSigner,
  generateKeyPairSigner,
  getAddressEncoder,
  getBase64Decoder,
  getCompiledTransactionMessageDecoder,
  getProgramDerivedAddress,
  getPublicKeyFromAddress,
  getSignatureFromTransaction,
  getU16Encoder,
  getU64Encoder,
  isFullySignedTransaction,
  verifySignature,
  type Address,
  type Instruction,
  type KeyPairSigner,
  type ReadonlyUint8Array,
  type SignatureBytes,
} from '@solana/kit';
import { AccountState, getMintEncoder, getTokenEncoder, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import {
  buildTransaction,
  claimEarningsInstructions,
  closeNodeInstructions,
  closeTaskArgsOf,
  closeTaskInstructions,
  complete,
  COMPUTE_MARKET_PROGRAM_ADDRESS,
  createComputeMarket,
  endpointOk,
  expireTaskInstructions,
  fromWire,
  getClaimEarningsInstructionDataDecoder,
  getCloseNodeInstructionDataDecoder,
  getCloseTaskInstructionDataDecoder,
  getConfigDecoder,
  getConfigEncoder,
  getConfigSize,
  getExpireTaskInstructionDataDecoder,
  getNodeDecoder,
  getNodeEncoder,
  getNodeSize,
  getReclaimTaskInstructionDataDecoder,
  getRegisterNodeInstructionDataDecoder,
  getRequestUnstakeInstructionDataDecoder,
  getStakeInstructionDataDecoder,
  getSweepFeesInstructionDataDecoder,
  getSyncStakeInstructionDataDecoder,
  getTaskDecoder,
  getTaskEncoder,
  getTaskSize,
  getUpdateNodeInstructionDataDecoder,
  getWithdrawInstructionDataDecoder,
  missingSignatures,
  partiallySign,
  ProgramRefusal,
  reclaimTaskArgsOf,
  reclaimTaskInstructions,
  registerNodeInstructions,
  requestUnstakeInstructions,
  stakeInstructions,
  sweepFeesInstructions,
  syncStakeInstructions,
  TaskStatus,
  toWire,
  updateNodeInstructions,
  withdrawInstructions,
  CONFIG_DISCRIMINATOR,
  NODE_DISCRIMINATOR,
  TASK_DISCRIMINATOR,
} from '../src';

// ---- the program's seeds, written out here ----

const PROGRAM = address('Stake11111111111111111111111111111111111111'); // not the default: every PDA must follow it
const ATA_PROGRAM = address('ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL');
const SYSTEM_PROGRAM = address('11111111111111111111111111111111');
const text = (s: string) => new TextEncoder().encode(s);
const key = (a: Address) => getAddressEncoder().encode(a);
const pda = async (seeds: ReadonlyUint8Array[], programAddress: Address = PROGRAM) => (await getProgramDerivedAddress({ programAddress, seeds }))[0];
const seeds = {
  config: (p?: Address) => pda([text('config')], p),
  market: (id: number, p?: Address) => pda([text('market'), new Uint8Array(getU16Encoder().encode(id))], p),
  node: (authority: Address, p?: Address) => pda([text('node'), key(authority)], p),
  vault: (node: Address, p?: Address) => pda([text('vault'), key(node)], p),
  task: (client: Address, id: bigint, p?: Address) => pda([text('task'), key(client), new Uint8Array(getU64Encoder().encode(id))], p),
  escrow: (task: Address, p?: Address) => pda([text('escrow'), key(task)], p),
  ata: (owner: Address, mint: Address) => pda([key(owner), key(TOKEN_PROGRAM_ADDRESS), key(mint)], ATA_PROGRAM),
};
/** Anchor's instruction discriminator: sha256("global:<name>")[..8]. */
const disc = (name: string) => [...createHash('sha256').update(`global:${name}`).digest().subarray(0, 8)];

const { READONLY: R, WRITABLE: W, READONLY_SIGNER: RS, WRITABLE_SIGNER: WS } = AccountRole;
/** The instruction's accounts as [address, role]. */
const metas = (ix: Instruction) => (ix.accounts ?? []).map((a) => [a.address, a.role]);
const signerOf = (ix: Instruction, i: number) => (ix.accounts![i] as any).signer;

async function fixture() {
  const authority = await generateKeyPairSigner();
  const mint = (await generateKeyPairSigner()).address;
  const node = await seeds.node(authority.address);
  return { authority, mint, node, vault: await seeds.vault(node), market: await seeds.market(7), config: await seeds.config(), ata: await seeds.ata(authority.address, mint) };
}

/** The ATA program's create-idempotent instruction for `owner`'s account of `mint`, paid by `payer`. */
function expectCreateAta(ix: Instruction, payer: Address, ata: Address, owner: Address, mint: Address) {
  expect(ix.programAddress).toBe(ATA_PROGRAM);
  expect(metas(ix).slice(0, 4)).toEqual([[payer, WS], [ata, W], [owner, R], [mint, R]]);
  expect([...ix.data!]).toEqual([1]);
}

describe('the test derives what the program derives', () => {
  it('tells seeds and programs apart (a wrong seed or program would be caught)', async () => {
    const f = await fixture();
    expect(await seeds.vault(f.node)).not.toBe(await pda([text('node'), key(f.node)]));
    expect(await seeds.node(f.authority.address)).not.toBe(await seeds.node(f.authority.address, COMPUTE_MARKET_PROGRAM_ADDRESS));
    expect(await seeds.market(7)).not.toBe(await seeds.market(7 << 8));
  });
});

describe('node instructions', () => {
  it('register_node: config, market, node and vault PDAs, the mint, the authority paying', async () => {
    const f = await fixture();
    const hardware = { gflops: 1000, memoryGb: 24, bandwidthGbps: 10, region: 3 };
    const [ix, ...rest] = await registerNodeInstructions({ authority: f.authority, market: 7, roles: 3, hardware }, f.mint, PROGRAM);
    expect(rest).toEqual([]);
    expect(ix.programAddress).toBe(PROGRAM);
    expect(metas(ix)).toEqual([[f.config, R], [f.market, W], [f.node, W], [f.vault, W], [f.mint, R], [f.authority.address, WS], [TOKEN_PROGRAM_ADDRESS, R], [SYSTEM_PROGRAM, R]]);
    expect(signerOf(ix, 5)).toBe(f.authority);
    const data = getRegisterNodeInstructionDataDecoder().decode(ix.data!);
    expect([...data.discriminator]).toEqual(disc('register_node'));
    expect({ roles: data.roles, hardware: data.hardware }).toEqual({ roles: 3, hardware });
    await expect(registerNodeInstructions({ authority: f.authority, market: 7, roles: 4, hardware }, f.mint, PROGRAM)).rejects.toThrow(/roles are 1/);
  });

  it('update_node: the market (by id or address), the node, the endpoint checked', async () => {
    const f = await fixture();
    const hardware = { gflops: 5, memoryGb: 6, bandwidthGbps: 7, region: 0 };
    const [ix] = await updateNodeInstructions({ authority: f.authority, market: f.market, hardware, endpoint: 'https://keeper.example:8080' }, PROGRAM);
    expect(metas(ix)).toEqual([[f.market, R], [f.node, W], [f.authority.address, RS]]);
    const data = getUpdateNodeInstructionDataDecoder().decode(ix.data!);
    expect([...data.discriminator]).toEqual(disc('update_node'));
    expect({ hardware: data.hardware, endpoint: data.endpoint }).toEqual({ hardware, endpoint: 'https://keeper.example:8080' });
    for (const bad of ['ftp://x', 'http://', 'http:///x', 'https://a b', 'https://u@host', `https://${'a'.repeat(49)}`])
      await expect(updateNodeInstructions({ authority: f.authority, market: 7, hardware, endpoint: bad }, PROGRAM)).rejects.toThrow(/an endpoint is empty or/);
    expect(endpointOk('')).toBe(true);
    expect(endpointOk(`https://${'a'.repeat(48)}`)).toBe(true); // 56 bytes
  });

  it('stake: market, node, vault, the authority\'s associated account (or the source given)', async () => {
    const f = await fixture();
    const [ix] = await stakeInstructions({ authority: f.authority, market: 7, amount: 1_500_000n }, f.mint, PROGRAM);
    expect(metas(ix)).toEqual([[f.market, W], [f.node, W], [f.vault, W], [f.ata, W], [f.authority.address, RS], [TOKEN_PROGRAM_ADDRESS, R]]);
    expect(signerOf(ix, 4)).toBe(f.authority);
    const data = getStakeInstructionDataDecoder().decode(ix.data!);
    expect([...data.discriminator]).toEqual(disc('stake'));
    expect(data.amount).toBe(1_500_000n);
    const source = (await generateKeyPairSigner()).address;
    expect(metas((await stakeInstructions({ authority: f.authority, market: 7, amount: 1n, source }, f.mint, PROGRAM))[0])[3]).toEqual([source, W]);
    await expect(stakeInstructions({ authority: f.authority, market: 7, amount: 0n }, f.mint, PROGRAM)).rejects.toThrow(/more than 0/);
  });

  it('request_unstake: config, market, node', async () => {
    const f = await fixture();
    const [ix] = await requestUnstakeInstructions({ authority: f.authority, market: 7, amount: 42n }, PROGRAM);
    expect(metas(ix)).toEqual([[f.config, R], [f.market, W], [f.node, W], [f.authority.address, RS]]);
    const data = getRequestUnstakeInstructionDataDecoder().decode(ix.data!);
    expect([...data.discriminator]).toEqual(disc('request_unstake'));
    expect(data.amount).toBe(42n);
  });

  it('withdraw and claim_earnings: the associated account created first (the payer paying), or the destination given', async () => {
    const f = await fixture();
    for (const [build, decoder, name] of [
      [withdrawInstructions, getWithdrawInstructionDataDecoder, 'withdraw'],
      [claimEarningsInstructions, getClaimEarningsInstructionDataDecoder, 'claim_earnings'],
    ] as const) {
      const [create, ix] = await build({ authority: f.authority }, f.mint, PROGRAM);
      expectCreateAta(create, f.authority.address, f.ata, f.authority.address, f.mint);
      expect(metas(ix)).toEqual([[f.node, W], [f.vault, W], [f.ata, W], [f.authority.address, RS], [TOKEN_PROGRAM_ADDRESS, R]]);
      expect(ix.programAddress).toBe(PROGRAM);
      expect([...decoder().decode(ix.data!).discriminator]).toEqual(disc(name));
      const relayer = await generateKeyPairSigner();
      const [paid] = await build({ authority: f.authority, payer: relayer }, f.mint, PROGRAM);
      expectCreateAta(paid, relayer.address, f.ata, f.authority.address, f.mint);
      const destination = (await generateKeyPairSigner()).address;
      const only = await build({ authority: f.authority, destination }, f.mint, PROGRAM);
      expect(only.length).toBe(1);
      expect(metas(only[0])[2]).toEqual([destination, W]);
    }
  });

  it('close_node: market, node, vault, destination, the authority writable (it gets the rent)', async () => {
    const f = await fixture();
    const [create, ix] = await closeNodeInstructions({ authority: f.authority, market: 7 }, f.mint, PROGRAM);
    expectCreateAta(create, f.authority.address, f.ata, f.authority.address, f.mint);
    expect(metas(ix)).toEqual([[f.market, W], [f.node, W], [f.vault, W], [f.ata, W], [f.authority.address, WS], [TOKEN_PROGRAM_ADDRESS, R]]);
    expect([...getCloseNodeInstructionDataDecoder().decode(ix.data!).discriminator]).toEqual(disc('close_node'));
  });

  it('sync_stake and sweep_fees: no signer; the vault of the node given', async () => {
    const f = await fixture();
    const [sync] = await syncStakeInstructions({ node: f.node, market: 7 }, PROGRAM);
    expect(metas(sync)).toEqual([[f.market, W], [f.node, W]]);
    expect([...getSyncStakeInstructionDataDecoder().decode(sync.data!).discriminator]).toEqual(disc('sync_stake'));
    const treasury = (await generateKeyPairSigner()).address;
    const [sweep] = await sweepFeesInstructions({ node: f.node, treasury }, PROGRAM);
    expect(metas(sweep)).toEqual([[f.config, R], [f.node, W], [f.vault, W], [treasury, W], [TOKEN_PROGRAM_ADDRESS, R]]);
    expect([...getSweepFeesInstructionDataDecoder().decode(sweep.data!).discriminator]).toEqual(disc('sweep_fees'));
  });
});

describe('task settlements', () => {
  it('expire_task and reclaim_task: the task, its escrow, the provider and its vault', async () => {
    const client = (await generateKeyPairSigner()).address;
    const task = await seeds.task(client, 9n);
    const [expire] = expireTaskInstructions(task, PROGRAM);
    expect(metas(expire)).toEqual([[task, W]]);
    expect([...getExpireTaskInstructionDataDecoder().decode(expire.data!).discriminator]).toEqual(disc('expire_task'));
    const providerNode = await seeds.node((await generateKeyPairSigner()).address);
    const [reclaim] = await reclaimTaskInstructions({ task, providerNode }, PROGRAM);
    expect(metas(reclaim)).toEqual([[task, W], [await seeds.escrow(task), W], [providerNode, W], [await seeds.vault(providerNode), W], [TOKEN_PROGRAM_ADDRESS, R]]);
    expect([...getReclaimTaskInstructionDataDecoder().decode(reclaim.data!).discriminator]).toEqual(disc('reclaim_task'));
  });

  it('close_task: absent optional accounts are the program (read-only), present ones writable', async () => {
    const client = (await generateKeyPairSigner()).address;
    const mint = (await generateKeyPairSigner()).address;
    const clientToken = (await generateKeyPairSigner()).address;
    const treasury = (await generateKeyPairSigner()).address;
    const task = await seeds.task(client, 1n);
    const escrow = await seeds.escrow(task);
    const config = await seeds.config();
    const [plain, ...none] = await closeTaskInstructions({ task, client, clientToken }, mint, PROGRAM);
    expect(none).toEqual([]);
    expect(metas(plain)).toEqual([[task, W], [escrow, W], [client, W], [clientToken, W], [PROGRAM, R], [config, R], [PROGRAM, R], [TOKEN_PROGRAM_ADDRESS, R]]);
    expect([...getCloseTaskInstructionDataDecoder().decode(plain.data!).discriminator]).toEqual(disc('close_task'));
    const payer = await generateKeyPairSigner();
    const ata = await seeds.ata(client, mint);
    const [create, full] = await closeTaskInstructions({ task, client, clientToken, refundToAssociated: true, payer, treasury }, mint, PROGRAM);
    expectCreateAta(create, payer.address, ata, client, mint);
    expect(metas(full)).toEqual([[task, W], [escrow, W], [client, W], [clientToken, W], [ata, W], [config, R], [treasury, W], [TOKEN_PROGRAM_ADDRESS, R]]);
  });
});

// ---- accounts on a scripted chain ----

const b64 = (bytes: Uint8Array) => getBase64Decoder().decode(bytes);
function blank(size: number, discriminator: ReadonlyUint8Array) {
  const b = new Uint8Array(size);
  b.set(discriminator as Uint8Array);
  return b;
}
const zeroTask = () => getTaskDecoder().decode(blank(getTaskSize(), TASK_DISCRIMINATOR));
const zeroConfig = () => getConfigDecoder().decode(blank(getConfigSize(), CONFIG_DISCRIMINATOR));
const zeroNode = () => getNodeDecoder().decode(blank(getNodeSize(), NODE_DISCRIMINATOR));
const tokenAccount = (mint: Address, owner: Address, amount: bigint, state = AccountState.Initialized) =>
  new Uint8Array(getTokenEncoder().encode({ mint, owner, amount, delegate: null, state, isNative: null, delegatedAmount: 0n, closeAuthority: null }));

type Accounts = Map<Address, { owner: Address; bytes: Uint8Array }>;

/** An RPC answering `getAccountInfo` from `accounts`. */
function chain(accounts: Accounts) {
  const rpc = new Proxy(
    {},
    {
      get: (_, method: string) => (...args: any[]) => {
        if (method !== 'getAccountInfo') throw new Error(`unexpected RPC call ${method}`);
        const a = accounts.get(args[0]);
        return { send: async () => ({ context: { slot: 1n }, value: a ? { owner: a.owner, lamports: 1_000_000n, data: [b64(a.bytes), 'base64'] } : null }) };
      },
    },
  ) as any;
  return rpc;
}

async function settledTask(status: TaskStatus, escrowAmount: bigint, clientTokenLive: boolean) {
  const client = (await generateKeyPairSigner()).address;
  const mint = (await generateKeyPairSigner()).address;
  const clientToken = (await generateKeyPairSigner()).address;
  const treasury = (await generateKeyPairSigner()).address;
  const provider = (await generateKeyPairSigner()).address;
  const task = await seeds.task(client, 3n);
  const accounts: Accounts = new Map();
  accounts.set(task, { owner: PROGRAM, bytes: new Uint8Array(getTaskEncoder().encode({ ...zeroTask(), client, clientToken, status, reward: 100n, clientExtra: 7n, provider })) });
  accounts.set(await seeds.escrow(task), { owner: TOKEN_PROGRAM_ADDRESS, bytes: tokenAccount(mint, task, escrowAmount) });
  if (clientTokenLive) accounts.set(clientToken, { owner: TOKEN_PROGRAM_ADDRESS, bytes: tokenAccount(mint, client, 0n) });
  accounts.set(await seeds.config(), { owner: PROGRAM, bytes: new Uint8Array(getConfigEncoder().encode({ ...zeroConfig(), stakeMint: mint, treasury })) });
  return { client, mint, clientToken, treasury, provider, task, accounts, rpc: chain(accounts) };
}

describe('accounts read from the chain', () => {
  it('close_task: the treasury only when the escrow holds more than the refund', async () => {
    const exact = await settledTask(TaskStatus.Rejected, 107n, true); // reward + extra
    expect(await closeTaskArgsOf(exact.rpc, exact.task, exact.mint, PROGRAM)).toEqual({ task: exact.task, client: exact.client, clientToken: exact.clientToken, refundToAssociated: false });
    const over = await settledTask(TaskStatus.Accepted, 8n, true); // Accepted: the refund is the extra (7)
    expect((await closeTaskArgsOf(over.rpc, over.task, over.mint, PROGRAM)).treasury).toBe(over.treasury);
    const accepted = await settledTask(TaskStatus.Accepted, 7n, true);
    expect((await closeTaskArgsOf(accepted.rpc, accepted.task, accepted.mint, PROGRAM)).treasury).toBeUndefined();
  });

  it('close_task: the client\'s associated account when the refund account is gone, frozen or of another mint', async () => {
    const gone = await settledTask(TaskStatus.Cancelled, 107n, false);
    expect((await closeTaskArgsOf(gone.rpc, gone.task, gone.mint, PROGRAM)).refundToAssociated).toBe(true);
    const frozen = await settledTask(TaskStatus.Cancelled, 107n, true);
    frozen.accounts.set(frozen.clientToken, { owner: TOKEN_PROGRAM_ADDRESS, bytes: tokenAccount(frozen.mint, frozen.client, 0n, AccountState.Frozen) });
    expect((await closeTaskArgsOf(frozen.rpc, frozen.task, frozen.mint, PROGRAM)).refundToAssociated).toBe(true);
    const other = await settledTask(TaskStatus.Cancelled, 107n, true);
    other.accounts.set(other.clientToken, { owner: TOKEN_PROGRAM_ADDRESS, bytes: tokenAccount(other.provider, other.client, 0n) });
    expect((await closeTaskArgsOf(other.rpc, other.task, other.mint, PROGRAM)).refundToAssociated).toBe(true);
  });

  it('refuses a task that is not the program\'s, and reclaims only a Claimed task', async () => {
    const t = await settledTask(TaskStatus.Claimed, 100n, true);
    expect(await reclaimTaskArgsOf(t.rpc, t.task, PROGRAM)).toEqual({ task: t.task, providerNode: t.provider });
    await expect(reclaimTaskArgsOf(t.rpc, t.task, COMPUTE_MARKET_PROGRAM_ADDRESS)).rejects.toThrow(/owned by/);
    const open = await settledTask(TaskStatus.Open, 100n, true);
    await expect(reclaimTaskArgsOf(open.rpc, open.task, PROGRAM)).rejects.toThrow(/is Open, only a Claimed task/);
    await expect(closeTaskArgsOf(t.rpc, address('Vote111111111111111111111111111111111111111'), t.mint, PROGRAM)).rejects.toThrow(/no task account/);
  });
});

describe('the client object on a scripted node', () => {
  afterEach(() => vi.unstubAllGlobals());

  /** `fetch` answering JSON-RPC from `answers` (by method), else `getAccountInfo` from `accounts`. */
  function stubNode(accounts: Accounts, answers: Record<string, (params: any[]) => unknown> = {}) {
    const methods: string[] = [];
    vi.stubGlobal('fetch', async (_url: string, init: { body: string }) => {
      const req = JSON.parse(init.body);
      methods.push(req.method);
      let result: unknown;
      if (answers[req.method]) result = answers[req.method](req.params);
      else if (req.method === 'getAccountInfo') {
        const a = accounts.get(req.params[0]);
        result = { context: { slot: 1 }, value: a ? { owner: a.owner, lamports: 1_000_000, data: [b64(a.bytes), 'base64'], executable: false, rentEpoch: 0, space: a.bytes.length } : null };
      } else throw new Error(`unexpected RPC call ${req.method}`);
      return new Response(JSON.stringify({ jsonrpc: '2.0', id: req.id, result }), { headers: { 'content-type': 'application/json' } });
    });
    return methods;
  }

  async function world() {
    const t = await settledTask(TaskStatus.Rejected, 200n, false);
    const authority = await generateKeyPairSigner();
    const node = await seeds.node(authority.address);
    const market = await seeds.market(7);
    t.accounts.set(t.mint, { owner: TOKEN_PROGRAM_ADDRESS, bytes: new Uint8Array(getMintEncoder().encode({ mintAuthority: null, supply: 0n, decimals: 6, isInitialized: true, freezeAuthority: null })) });
    t.accounts.set(node, { owner: PROGRAM, bytes: new Uint8Array(getNodeEncoder().encode({ ...zeroNode(), authority: authority.address, market })) });
    return { ...t, authority, node, market, cm: createComputeMarket({ network: { rpc: 'http://rpc.invalid' }, programAddress: PROGRAM }) };
  }

  it('fills in the stake mint, the node\'s market and the treasury from the chain', async () => {
    const w = await world();
    stubNode(w.accounts);
    const [stake] = await w.cm.staking.stakeInstructions({ authority: w.authority, amount: 5n });
    expect(metas(stake)).toEqual([[w.market, W], [w.node, W], [await seeds.vault(w.node), W], [await seeds.ata(w.authority.address, w.mint), W], [w.authority.address, RS], [TOKEN_PROGRAM_ADDRESS, R]]);
    const [sweep] = await w.cm.fees.sweepInstructions(w.node);
    expect(metas(sweep)[3]).toEqual([w.treasury, W]);
    const [sync] = await w.cm.staking.syncInstructions(w.node);
    expect(metas(sync)).toEqual([[w.market, W], [w.node, W]]);
    const payer = await generateKeyPairSigner();
    const [create, close] = await w.cm.tasks.closeInstructions(w.task, payer);
    const ata = await seeds.ata(w.client, w.mint);
    expectCreateAta(create, payer.address, ata, w.client, w.mint);
    expect(metas(close)).toEqual([[w.task, W], [await seeds.escrow(w.task), W], [w.client, W], [w.clientToken, W], [ata, W], [await seeds.config(), R], [w.treasury, W], [TOKEN_PROGRAM_ADDRESS, R]]);
  });

  it('checks the stake against the balance before sending anything', async () => {
    const w = await world();
    const methods = stubNode(w.accounts, { getTokenAccountBalance: () => ({ context: { slot: 1 }, value: { amount: '4', decimals: 6, uiAmount: 0.000004, uiAmountString: '0.000004' } }) });
    const refusal = await w.cm.staking.stake({ authority: w.authority, amount: 5n }).catch((e) => e);
    expect(refusal).toBeInstanceOf(ProgramRefusal);
    expect(refusal.errorName).toBe('InsufficientTokens');
    expect(refusal.message).toMatch(/holds 0\.000004 tokens, the stake is 0\.000005/);
    expect(methods).not.toContain('sendTransaction');
    expect(methods).not.toContain('simulateTransaction');
  });

  it('sends a transaction completed elsewhere, from its wire form', async () => {
    const w = await world();
    const relayer = await generateKeyPairSigner();
    const { message } = await buildTransaction(scripted(), relayer.address, expireTaskInstructions(w.task, PROGRAM), { computeUnits: 10_000, priorityFee: 0n });
    const done = await complete(toWire(await partiallySign(message)), [relayer]);
    let sent = '';
    const methods = stubNode(w.accounts, {
      getBlockHeight: () => 50,
      sendTransaction: (params) => ((sent = params[0]), 'x'),
      getSignatureStatuses: () => ({ context: { slot: 1 }, value: [{ slot: 1, confirmations: 1, err: null, confirmationStatus: 'confirmed' }] }),
    });
    const signature = await w.cm.sendSigned(done);
    expect(sent).toBe(toWire(done));
    expect(methods).toContain('getBlockHeight'); // the last valid height, unknown from the wire, bounded
    expect(signature).toBe(getSignatureFromTransaction(done));
  });
});

// ---- fee payer and partial signing ----

const BLOCKHASH = { value: { blockhash: 'EkSnNWid2cvwEVnVx9aBqawnmiCNiDgp3gUdkDPTKN1N', lastValidBlockHeight: 1_000n } };
function scripted() {
  return new Proxy({}, { get: (_, method: string) => () => ({ send: async () => { if (method !== 'getLatestBlockhash') throw new Error(`unexpected RPC call ${method}`); return BLOCKHASH; } }) }) as any;
}

async function verifyAll(tx: { messageBytes: Uint8Array | any; signatures: Record<string, SignatureBytes | null> }) {
  const out: Record<string, boolean> = {};
  for (const [a, s] of Object.entries(tx.signatures)) out[a] = !!s && (await verifySignature(await getPublicKeyFromAddress(a as Address), s, tx.messageBytes));
  return out;
}

describe('a relayer pays, the actor signs', () => {
  async function setup() {
    const relayer = await generateKeyPairSigner();
    const user = await generateKeyPairSigner();
    const mint = (await generateKeyPairSigner()).address;
    return { relayer, user, mint };
  }

  it('the actor signs first; the wire form travels; the fee payer completes; every signature verifies', async () => {
    const { relayer, user, mint } = await setup();
    const instructions = await stakeInstructions({ authority: user, market: 1, amount: 10n }, mint, PROGRAM);
    const { message } = await buildTransaction(scripted(), relayer.address, instructions, { computeUnits: 50_000, priorityFee: 0n });
    expect(message.feePayer.address).toBe(relayer.address);
    const partly = await partiallySign(message);
    expect(missingSignatures(partly)).toEqual([relayer.address]);
    expect(isFullySignedTransaction(partly)).toBe(false);
    expect(await verifyAll(partly)).toEqual({ [relayer.address]: false, [user.address]: true });

    const wire = toWire(partly);
    expect(typeof wire).toBe('string');
    const received = await fromWire(wire);
    expect([...received.messageBytes]).toEqual([...partly.messageBytes]);
    expect(missingSignatures(received)).toEqual([relayer.address]);
    expect((received.lifetimeConstraint as any).blockhash).toBe(BLOCKHASH.value.blockhash);
    // the fee payer is the message's first account
    expect(getCompiledTransactionMessageDecoder().decode(received.messageBytes).staticAccounts[0]).toBe(relayer.address);

    await expect(complete(wire, [user])).rejects.toThrow(); // still no fee payer's signature
    const done = await complete(wire, [relayer]);
    expect(isFullySignedTransaction(done)).toBe(true);
    expect(missingSignatures(done)).toEqual([]);
    expect(await verifyAll(done)).toEqual({ [relayer.address]: true, [user.address]: true });
    expect(done.signatures[user.address]).toEqual(partly.signatures[user.address]);

    // a message changed after signing no longer verifies
    const tampered = new Uint8Array(done.messageBytes);
    tampered[tampered.length - 1] ^= 1;
    expect(await verifyAll({ ...done, messageBytes: tampered })).toEqual({ [relayer.address]: false, [user.address]: false });
  });

  it('the fee payer signs first for a wallet that holds the actor\'s key (a no-op signer here)', async () => {
    const { relayer, user, mint } = await setup();
    const instructions = await withdrawInstructions({ authority: createNoopSigner(user.address), payer: relayer }, mint, PROGRAM);
    const { message } = await buildTransaction(scripted(), relayer, instructions, { computeUnits: 50_000, priorityFee: 0n });
    const partly = await partiallySign(message);
    expect(missingSignatures(partly)).toEqual([user.address]);
    const done = await complete(partly, [user as KeyPairSigner]);
    expect(await verifyAll(done)).toEqual({ [relayer.address]: true, [user.address]: true });
  });

  it('signs with the signers named only, and refuses one that is not the message\'s', async () => {
    const { relayer, user } = await setup();
    const instructions = await requestUnstakeInstructions({ authority: user, market: 1, amount: 1n }, PROGRAM);
    const { message } = await buildTransaction(scripted(), relayer, instructions, { computeUnits: 50_000, priorityFee: 0n });
    const byRelayer = await partiallySign(message, [relayer]);
    expect(missingSignatures(byRelayer)).toEqual([user.address]);
    const stranger = await generateKeyPairSigner();
    await expect(partiallySign(message, [stranger])).rejects.toThrow();
  });
});
