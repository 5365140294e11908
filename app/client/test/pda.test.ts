// Every PDA helper against the addresses compute_market::pda derives (rust-written.json).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { address } from '@solana/kit';
import { expect, it } from 'vitest';
import { configAddress, escrowAddress, marketAddress, nodeAddress, taskAddress, vaultAddress, voteAddress } from '../src';

const p = JSON.parse(readFileSync(join(__dirname, 'fixtures', 'rust-written.json'), 'utf8')).pdas;

it('derives the same PDAs as the program crate', async () => {
  const node = await nodeAddress(address(p.authority));
  const task = await taskAddress(address(p.client), BigInt(p.taskId));
  expect({
    config: await configAddress(),
    market: await marketAddress(1),
    market65535: await marketAddress(65_535),
    node,
    vault: await vaultAddress(node),
    task,
    escrow: await escrowAddress(task),
    vote0: await voteAddress(task, node, 0),
    vote1: await voteAddress(task, node, 1),
  }).toEqual({
    config: p.config,
    market: p.market,
    market65535: p.market65535,
    node: p.node,
    vault: p.vault,
    task: p.task,
    escrow: p.escrow,
    vote0: p.vote0,
    vote1: p.vote1,
  });
});
