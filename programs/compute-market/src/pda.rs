//! Program-derived addresses, for clients (the program itself stores canonical bumps and
//! never searches for them).
use anchor_lang::prelude::*;

use crate::{constants::*, ID};

/// The config PDA.
pub fn config() -> Pubkey {
    Pubkey::find_program_address(&[SEED_CONFIG], &ID).0
}

/// Market `id`.
pub fn market(id: u16) -> Pubkey {
    Pubkey::find_program_address(&[SEED_MARKET, &id.to_le_bytes()], &ID).0
}

/// The node of `authority`.
pub fn node(authority: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(&[SEED_NODE, authority.as_ref()], &ID).0
}

/// The stake vault of `node`.
pub fn vault(node: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(&[SEED_VAULT, node.as_ref()], &ID).0
}

/// Task `task_id` of `client`.
pub fn task(client: &Pubkey, task_id: u64) -> Pubkey {
    Pubkey::find_program_address(&[SEED_TASK, client.as_ref(), &task_id.to_le_bytes()], &ID).0
}

/// The escrow of `task`.
pub fn escrow(task: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(&[SEED_ESCROW, task.as_ref()], &ID).0
}

/// The vote of verifier `node` on `task` in `round`.
pub fn vote(task: &Pubkey, node: &Pubkey, round: u8) -> Pubkey {
    Pubkey::find_program_address(&[SEED_VOTE, task.as_ref(), node.as_ref(), &[round]], &ID).0
}

/// The dispute of `challenger` on `task`.
pub fn dispute(task: &Pubkey, challenger: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(&[SEED_DISPUTE, task.as_ref(), challenger.as_ref()], &ID).0
}

/// Availability account number `nonce` of `task` as posted at `posted_slot` (PROTOCOL §8.11:
/// a task id posted again is another task, whose accounts never collide with the old one's).
pub fn availability(task: &Pubkey, posted_slot: u64, nonce: u16) -> Pubkey {
    Pubkey::find_program_address(
        &[
            SEED_AVAILABILITY,
            task.as_ref(),
            &posted_slot.to_le_bytes(),
            &nonce.to_le_bytes(),
        ],
        &ID,
    )
    .0
}

/// A defender's game against a dispute's claim: `[SEED_GAME, dispute, defender, nonce]`, the
/// dispute's number among its task's (`Dispute.nonce`, LE `u32`): a dispute re-created at the
/// same address has new games.
pub fn game(dispute: &Pubkey, defender: &Pubkey, nonce: u32) -> Pubkey {
    Pubkey::find_program_address(
        &[
            SEED_GAME,
            dispute.as_ref(),
            defender.as_ref(),
            &nonce.to_le_bytes(),
        ],
        &ID,
    )
    .0
}

/// The program-data account of this (upgradeable) program: names its upgrade authority.
pub fn program_data() -> Pubkey {
    Pubkey::find_program_address(
        &[ID.as_ref()],
        &anchor_lang::solana_program::bpf_loader_upgradeable::ID,
    )
    .0
}
