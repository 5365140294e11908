// The client package's own layer: token amounts, network presets, transactions with their
// compute budget, and the queries' filters — against a scripted RPC node.

import { describe, expect, it } from 'vitest';
import { address, generateKeyPairSigner, getBase64Decoder, type Instruction } from '@solana/kit';
import { COMPUTE_BUDGET_PROGRAM_ADDRESS } from '@solana-program/compute-budget';
import {
  buildTransaction,
  COMPUTE_MARKET_PROGRAM_ADDRESS,
  endpointsOf,
  formatAmount,
  getTaskDecoder,
  getTaskEncoder,
  getTaskSize,
  parseUiAmount,
  recentPriorityFee,
  tasksWhere,
  toUiAmount,
  TaskStatus,
  TASK_DISCRIMINATOR,
  U64_MAX,
  writableAccounts,
} from '../src';
import { BLOCKHASH, scripted } from './scripted';


describe('token amounts', () => {
  it('shows base units with the decimals and parses typed text back exactly', () => {
    expect(toUiAmount(1_500_000n, 6)).toBe('1.5');
    expect(toUiAmount(880_000n, 6)).toBe('0.88');
    expect(toUiAmount(100_000_000n, 6)).toBe('100');
    expect(toUiAmount(7n, 0)).toBe('7');
    expect(toUiAmount(U64_MAX, 9)).toBe('18446744073.709551615');
    expect(formatAmount(99_999_999n, 6, 'CMT')).toBe('99.999999 CMT');
    for (const [text, base] of [['1.5', 1_500_000n], ['0.000001', 1n], ['.5', 500_000n], ['12', 12_000_000n], ['1_000', 1_000_000_000n], ['3.10', 3_100_000n]] as const) {
      expect(parseUiAmount(text, 6)).toBe(base);
      expect(parseUiAmount(toUiAmount(base, 6), 6)).toBe(base);
    }
  });

  it('refuses what is not an amount, by name', () => {
    expect(() => parseUiAmount('-1', 6)).toThrow(/negative/);
    expect(() => parseUiAmount('1.0000001', 6)).toThrow(/more than 6 decimal places/);
    expect(() => parseUiAmount('1e6', 6)).toThrow(/not a number/);
    expect(() => parseUiAmount('', 6)).toThrow(/not a number/);
    expect(() => parseUiAmount('.', 6)).toThrow(/not a number/);
    expect(() => parseUiAmount('18446744073709.551616', 6)).toThrow(/more than a token account can hold/);
    expect(() => toUiAmount(1n, 19)).toThrow(/decimals are 0‥18/);
  });
});

describe('networks', () => {
  it('has presets and derives a custom RPC websocket', () => {
    expect(endpointsOf('devnet')).toEqual({ rpc: 'https://api.devnet.solana.com', ws: 'wss://api.devnet.solana.com' });
    expect(endpointsOf('localnet').ws).toBe('ws://127.0.0.1:8900');
    expect(endpointsOf({ rpc: 'http://10.0.0.2:18899' }).ws).toBe('ws://10.0.0.2:18900');
    expect(endpointsOf({ rpc: 'https://rpc.example.com' }).ws).toBe('wss://rpc.example.com');
    expect(endpointsOf({ rpc: 'https://a.example', ws: 'wss://b.example' }).ws).toBe('wss://b.example');
    expect(() => endpointsOf('testnet' as any)).toThrow(/unknown network "testnet"/);
    expect(() => endpointsOf({ rpc: 'ftp://x' })).toThrow(/not http/);
    expect(() => endpointsOf({ rpc: 'http://x', ws: 'http://y' })).toThrow(/not ws/);
  });
});

describe('transactions with a compute budget', () => {
  const program = address('Stake11111111111111111111111111111111111111');
  const written = address('SysvarC1ock11111111111111111111111111111111');

  async function instructions(): Promise<Instruction[]> {
    return [{ programAddress: program, accounts: [{ address: written, role: 1 }], data: new Uint8Array([9]) }];
  }

  it('simulates the units, adds a margin, and takes the 75th percentile of recent fees', async () => {
    const payer = await generateKeyPairSigner();
    const { rpc, calls } = scripted({
      getLatestBlockhash: () => BLOCKHASH,
      getRecentPrioritizationFees: () => [10, 0, 50, 20, 30, 40, 60, 70].map((f, i) => ({ slot: BigInt(i), prioritizationFee: BigInt(f) })),
      simulateTransaction: () => ({ value: { err: null, unitsConsumed: 12_345n, logs: [] } }),
    });
    const { message, computeUnits, priorityFee } = await buildTransaction(rpc, payer, await instructions());
    expect(priorityFee).toBe(60n);
    expect(computeUnits).toBe(Math.ceil(12_345 * 1.2));
    expect(calls.find((c) => c.method === 'getRecentPrioritizationFees')!.args[0]).toEqual([written]);
    const [limit, price, own] = message.instructions;
    expect(limit.programAddress).toBe(COMPUTE_BUDGET_PROGRAM_ADDRESS);
    expect([...limit.data!]).toEqual([2, ...new Uint8Array(new Uint32Array([14_814]).buffer)]);
    expect(price.programAddress).toBe(COMPUTE_BUDGET_PROGRAM_ADDRESS);
    expect(price.data![0]).toBe(3);
    expect(new DataView(price.data!.buffer, price.data!.byteOffset + 1).getBigUint64(0, true)).toBe(60n);
    expect(own.programAddress).toBe(program);
    expect(message.feePayer.address).toBe(payer.address);
  });

  it('takes fixed figures, builds for a wallet by its address, and refuses bad ones', async () => {
    const { rpc, calls } = scripted({ getLatestBlockhash: () => BLOCKHASH });
    const wallet = address('9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM');
    const { message, computeUnits, priorityFee } = await buildTransaction(rpc, wallet, await instructions(), { computeUnits: 50_000, priorityFee: 0n });
    expect([computeUnits, priorityFee]).toEqual([50_000, 0n]);
    expect(message.instructions.length).toBe(2); // no price instruction for a zero fee
    expect(message.feePayer.address).toBe(wallet);
    expect(calls.map((c) => c.method)).toEqual(['getLatestBlockhash']);
    await expect(buildTransaction(rpc, wallet, await instructions(), { computeUnits: 2_000_000, priorityFee: 0n })).rejects.toThrow(/1‥1400000/);
    await expect(buildTransaction(rpc, wallet, await instructions(), { margin: 0.5, priorityFee: 0n })).rejects.toThrow();
  });

  it('reads no fee from a node that has none, and lists written accounts once', async () => {
    const { rpc } = scripted({ getRecentPrioritizationFees: () => [] });
    expect(await recentPriorityFee(rpc, [])).toBe(0n);
    const ixs = await instructions();
    expect(writableAccounts([...ixs, ...ixs])).toEqual([written]);
  });
});

describe('task queries', () => {
  it('filter by market and client on the node, by status here, and check every account', async () => {
    const market = address('Vote111111111111111111111111111111111111111');
    const client = address('9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM');
    // a task of zeros (its discriminator in place), then the fields the filters read
    const blank = new Uint8Array(getTaskSize());
    blank.set(TASK_DISCRIMINATOR);
    const zero = getTaskDecoder().decode(blank);
    const encode = (status: TaskStatus) => getBase64Decoder().decode(getTaskEncoder().encode({ ...zero, client, market, status }));
    const accounts = [TaskStatus.Open, TaskStatus.Claimed].map((s, i) => ({
      pubkey: address(['Config1111111111111111111111111111111111111', 'Stake11111111111111111111111111111111111111'][i]),
      account: { owner: COMPUTE_MARKET_PROGRAM_ADDRESS, lamports: 1n, data: [encode(s), 'base64'] },
    }));
    const { rpc, calls } = scripted({ getProgramAccounts: () => accounts });
    const open = await tasksWhere(rpc, { market, client, status: TaskStatus.Open });
    expect(open.map((t) => t.data.status)).toEqual([TaskStatus.Open]);
    const filters = calls[0].args[1].filters;
    expect(filters.map((f: any) => f.memcmp?.offset)).toEqual([undefined, 0n, 49n, 9n]);
    expect(filters[2].memcmp.bytes).toBe(market);
    expect(filters[3].memcmp.bytes).toBe(client);
    await expect(tasksWhere(rpc, {})).rejects.toThrow(/by market or client/);
    // an account of another owner is refused, by name
    (accounts[0].account as any).owner = address('11111111111111111111111111111111');
    await expect(tasksWhere(rpc, { market })).rejects.toThrow(/owned by 11111111111111111111111111111111/);
  });
});
