// Program-derived addresses whose seeds Codama cannot generate (they read instruction
// arguments or account fields): market, task, vote, and the generated ones re-exported under
// one set of names. Seeds as in `compute_market::pda` (programs/compute-market/src/pda.rs).

import { getAddressEncoder, getProgramDerivedAddress, getU16Encoder, getU64Encoder, type Address } from '@solana/kit';
import { COMPUTE_MARKET_PROGRAM_ADDRESS } from './generated/programs';
import { findConfigPda, findDisputePda, findEscrowPda, findNodePda, findVaultPda } from './generated/pdas';

const text = (s: string) => new TextEncoder().encode(s);
const addr = (a: Address) => getAddressEncoder().encode(a);

/** The config PDA. */
export async function configAddress(programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Address> {
  return (await findConfigPda({ programAddress }))[0];
}

/** Market `id`: `["market", id u16 LE]`. */
export async function marketAddress(id: number, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Address> {
  return (await getProgramDerivedAddress({ programAddress, seeds: [text('market'), getU16Encoder().encode(id)] }))[0];
}

/** The node of `authority`. */
export async function nodeAddress(authority: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Address> {
  return (await findNodePda({ authority }, { programAddress }))[0];
}

/** The stake vault of `node`. */
export async function vaultAddress(node: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Address> {
  return (await findVaultPda({ node }, { programAddress }))[0];
}

/** Task `taskId` of `client`: `["task", client, id u64 LE]`. */
export async function taskAddress(
  client: Address,
  taskId: bigint,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
): Promise<Address> {
  return (
    await getProgramDerivedAddress({ programAddress, seeds: [text('task'), addr(client), getU64Encoder().encode(taskId)] })
  )[0];
}

/** The escrow of `task`. */
export async function escrowAddress(task: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Address> {
  return (await findEscrowPda({ task }, { programAddress }))[0];
}

/** The vote of verifier `node` on `task` in `round`: `["vote", task, node, round]`. */
export async function voteAddress(
  task: Address,
  node: Address,
  round: number,
  programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS,
): Promise<Address> {
  return (
    await getProgramDerivedAddress({ programAddress, seeds: [text('vote'), addr(task), addr(node), new Uint8Array([round])] })
  )[0];
}

/** The dispute of `challenger` on `task`: `["dispute", task, challenger]`. */
export async function disputeAddress(task: Address, challenger: Address, programAddress: Address = COMPUTE_MARKET_PROGRAM_ADDRESS): Promise<Address> {
  return (await findDisputePda({ task, challenger }, { programAddress }))[0];
}
