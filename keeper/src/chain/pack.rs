//! Packing instructions into as few transactions as fit: every transaction pays one signature
//! fee and waits for one confirmation, so what can travel together does (a task's settlements
//! and its close, a client's batch of posts, a verifier's join and commit).
//!
//! A transaction must stay within the packet size ([`PACKET_DATA_SIZE`], the legacy wire format
//! computed exactly by [`tx_size`]) and within the compute limit. Each packed transaction asks
//! for the compute units its instructions were measured to use (`scripts/cu-report`, the worst
//! case of each, with a margin: [`cu_of`]) rather than the default 200,000 per instruction.

use anchor_lang::{prelude::Pubkey, Discriminator};
use compute_market::instruction as ix;
use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_instruction::Instruction;

/// Largest serialized transaction, bytes (Solana's packet data size).
pub const PACKET_DATA_SIZE: usize = 1232;

/// Most compute units one transaction may ask for.
pub const MAX_TX_CU: u32 = 1_400_000;

/// Compute units asked for an instruction not in [`cu_of`]'s table (the runtime's default).
pub const DEFAULT_CU: u32 = 200_000;

/// Bytes of a compact-u16 length.
fn compact(n: usize) -> usize {
    match n {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        _ => 3,
    }
}

/// The serialized size of a legacy transaction paid by `payer` carrying `ixs`, signatures
/// included.
pub fn tx_size(ixs: &[Instruction], payer: &Pubkey) -> usize {
    let mut keys: Vec<Pubkey> = vec![*payer];
    let mut signers: Vec<Pubkey> = vec![*payer];
    for i in ixs {
        for a in &i.accounts {
            if !keys.contains(&a.pubkey) {
                keys.push(a.pubkey);
            }
            if a.is_signer && !signers.contains(&a.pubkey) {
                signers.push(a.pubkey);
            }
        }
        if !keys.contains(&i.program_id) {
            keys.push(i.program_id);
        }
    }
    let body: usize = ixs
        .iter()
        .map(|i| {
            1 + compact(i.accounts.len()) + i.accounts.len() + compact(i.data.len()) + i.data.len()
        })
        .sum();
    compact(signers.len())
        + 64 * signers.len()
        + 3
        + compact(keys.len())
        + 32 * keys.len()
        + 32
        + compact(ixs.len())
        + body
}

/// Compute units to ask for `i`: twice the worst case `scripts/cu-report` measured for its
/// instruction (account sizes, seat counts and the deployed build vary); [`DEFAULT_CU`] for
/// anything else.
pub fn cu_of(i: &Instruction) -> u32 {
    let measured: &[(&[u8], u32)] = &[
        (ix::PostTask::DISCRIMINATOR, 44_196),
        (ix::ClaimTask::DISCRIMINATOR, 22_320),
        (ix::SubmitResult::DISCRIMINATOR, 24_381),
        (ix::DrawSeed::DISCRIMINATOR, 18_451),
        // displacing the worst of 30 seats costs more than of 15
        (ix::JoinTask::DISCRIMINATOR, 70_000),
        (ix::CommitVote::DISCRIMINATOR, 22_443),
        (ix::RevealVote::DISCRIMINATOR, 22_977),
        (ix::FinalizeTask::DISCRIMINATOR, 40_000),
        (ix::SettleVote::DISCRIMINATOR, 36_501),
        (ix::CloseTask::DISCRIMINATOR, 25_825),
        (ix::ReclaimTask::DISCRIMINATOR, 32_342),
        (ix::ExpireTask::DISCRIMINATOR, 17_421),
        (ix::CancelTask::DISCRIMINATOR, 17_397),
    ];
    if i.program_id == compute_market::ID {
        if let Some((_, cu)) = measured.iter().find(|(d, _)| i.data.starts_with(d)) {
            return 2 * cu;
        }
    }
    DEFAULT_CU
}

/// The compute-limit instruction for `ixs`.
pub fn cu_limit(ixs: &[Instruction]) -> Instruction {
    let cu: u32 = ixs.iter().map(cu_of).sum::<u32>() + 1_000;
    ComputeBudgetInstruction::set_compute_unit_limit(cu.min(MAX_TX_CU))
}

/// Bytes a compute-budget price instruction adds, when a priority fee is set (the sender adds
/// it; packing leaves room for it).
const PRICE_ROOM: usize = 1 + 1 + 1 + 9 + 32;

/// `ixs` in order, cut into transactions that each fit the packet size and the compute limit,
/// each of several instructions led by its compute-limit instruction. An instruction too large
/// to travel with any other travels alone.
pub fn pack(ixs: Vec<Instruction>, payer: &Pubkey) -> Vec<Vec<Instruction>> {
    let fits = |group: &[Instruction]| {
        let mut with = vec![cu_limit(group)];
        with.extend_from_slice(group);
        tx_size(&with, payer) + PRICE_ROOM <= PACKET_DATA_SIZE
            && group.iter().map(cu_of).sum::<u32>() < MAX_TX_CU
    };
    let mut out: Vec<Vec<Instruction>> = vec![];
    let mut group: Vec<Instruction> = vec![];
    for i in ixs {
        group.push(i);
        if group.len() > 1 && !fits(&group) {
            let last = group.pop().expect("non-empty");
            out.push(std::mem::take(&mut group));
            group.push(last);
        }
    }
    if !group.is_empty() {
        out.push(group);
    }
    // one instruction alone keeps the runtime's default (200,000 units, more than any of
    // ours): a limit would only narrow the margin of what is often a deadline-bound commit or
    // reveal, for no saving without a priority fee
    out.into_iter()
        .map(|g| {
            if g.len() == 1 {
                return g;
            }
            let mut with = vec![cu_limit(&g)];
            with.extend(g);
            with
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use compute_market::client;

    #[test]
    fn the_size_is_the_serialized_size() {
        let payer = Pubkey::new_unique();
        let task = Pubkey::new_unique();
        let ixs = vec![
            cu_limit(&[]),
            client::settle_vote(task, Pubkey::new_unique(), 0),
            client::settle_vote(task, Pubkey::new_unique(), 0),
            client::close_task(task, Pubkey::new_unique(), Pubkey::new_unique(), None),
        ];
        let tx = solana_transaction::Transaction::new_with_payer(&ixs, Some(&payer));
        assert_eq!(
            tx_size(&ixs, &payer),
            bincode::serialize(&tx).unwrap().len()
        );
    }

    #[test]
    fn thirty_settlements_and_a_close_are_split_to_fit() {
        let payer = Pubkey::new_unique();
        let task = Pubkey::new_unique();
        let mut ixs: Vec<Instruction> = (0..30)
            .map(|_| client::settle_vote(task, Pubkey::new_unique(), 1))
            .collect();
        ixs.extend((0..15).map(|_| client::settle_vote(task, Pubkey::new_unique(), 0)));
        ixs.push(client::close_task(
            task,
            Pubkey::new_unique(),
            Pubkey::new_unique(),
            None,
        ));
        let groups = pack(ixs.clone(), &payer);
        assert!(
            groups.len() > 1,
            "45 settlements do not fit one transaction"
        );
        let mut flat = vec![];
        for g in &groups {
            assert!(tx_size(g, &payer) + PRICE_ROOM <= PACKET_DATA_SIZE);
            let skip = usize::from(g.len() > 1);
            if skip == 1 {
                assert_eq!(g[0].program_id, solana_compute_budget_interface::ID);
            }
            flat.extend(g[skip..].iter().cloned());
        }
        assert_eq!(flat, ixs, "every instruction, once, in order");
        // three settlements of a V = 3 round and the close travel together
        let few: Vec<Instruction> = ixs[..3]
            .iter()
            .cloned()
            .chain(std::iter::once(ixs[45].clone()))
            .collect();
        assert_eq!(pack(few, &payer).len(), 1);
    }
}
