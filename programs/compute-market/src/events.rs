//! One Anchor event per state change; keepers and indexers follow the program through them.
use anchor_lang::prelude::*;

use crate::state::{MarketArgs, Params, TaskStatus};

/// The config was created.
#[event]
pub struct ConfigInitialized {
    pub admin: Pubkey,
    pub stake_mint: Pubkey,
    pub treasury: Pubkey,
    pub params: Params,
    pub update_delay: u64,
}

/// The admin proposed new parameters, applicable from `effective_slot`.
#[event]
pub struct ParamsProposed {
    pub params: Params,
    pub effective_slot: u64,
}

/// Proposed parameters took effect (applied by anyone).
#[event]
pub struct ParamsApplied {
    pub params: Params,
    pub slot: u64,
}

/// A market was created.
#[event]
pub struct MarketCreated {
    pub market: Pubkey,
    pub id: u16,
    pub args: MarketArgs,
}

/// A node registered in a market.
#[event]
pub struct NodeRegistered {
    pub node: Pubkey,
    pub authority: Pubkey,
    pub market: Pubkey,
    pub roles: u8,
    pub gflops: u32,
    pub memory_gb: u32,
    pub bandwidth_gbps: u32,
    pub region: u16,
}

/// A node re-declared its hardware and announced its endpoint (empty: none).
#[event]
pub struct NodeUpdated {
    pub node: Pubkey,
    pub gflops: u32,
    pub memory_gb: u32,
    pub bandwidth_gbps: u32,
    pub region: u16,
    pub endpoint: String,
}

/// Tokens moved from the authority into the node's stake.
#[event]
pub struct Staked {
    pub node: Pubkey,
    pub amount: u64,
    pub free: u64,
}

/// Free stake moved to pending unstake.
#[event]
pub struct UnstakeRequested {
    pub node: Pubkey,
    pub amount: u64,
    pub pending: u64,
    pub unlock_slot: u64,
}

/// Pending unstake paid out after the cooldown.
#[event]
pub struct Withdrawn {
    pub node: Pubkey,
    pub amount: u64,
    pub destination: Pubkey,
}

/// Earnings paid out.
#[event]
pub struct EarningsClaimed {
    pub node: Pubkey,
    pub amount: u64,
    pub destination: Pubkey,
}

/// A node's accrued protocol fees moved to the treasury.
#[event]
pub struct FeesSwept {
    pub node: Pubkey,
    pub amount: u64,
    pub treasury: Pubkey,
}

/// An empty node and its vault were closed.
#[event]
pub struct NodeClosed {
    pub node: Pubkey,
    pub authority: Pubkey,
}

/// A client posted a task; its reward is in escrow.
#[event]
pub struct TaskPosted {
    pub task: Pubkey,
    pub client: Pubkey,
    pub market: Pubkey,
    pub task_id: u64,
    pub job: [u8; 64],
    pub reward: u64,
    pub quorum: u8,
    pub samples: u16,
    pub open_deadline: u64,
    pub region: u16,
}

/// The client cancelled an open task.
#[event]
pub struct TaskCancelled {
    pub task: Pubkey,
}

/// An open task passed its deadline unclaimed.
#[event]
pub struct TaskExpired {
    pub task: Pubkey,
    pub slot: u64,
}

/// A provider claimed a task and bonded stake.
#[event]
pub struct TaskClaimed {
    pub task: Pubkey,
    pub provider: Pubkey,
    pub bond: u64,
    pub submit_deadline: u64,
}

/// The provider committed its result.
#[event]
pub struct ResultSubmitted {
    pub task: Pubkey,
    pub provider: Pubkey,
    pub result_root: [u8; 32],
    pub result_uri: String,
    pub slot: u64,
    pub join_deadline: u64,
    pub commit_deadline: u64,
    pub reveal_deadline: u64,
}

/// The provider missed its submit deadline: slashed, task open again.
#[event]
pub struct TaskReopened {
    pub task: Pubkey,
    pub provider: Pubkey,
    pub slashed: u64,
}

/// The round's seed was drawn from SlotHashes.
#[event]
pub struct SeedDrawn {
    pub task: Pubkey,
    pub round: u8,
    pub seed: [u8; 32],
    pub hashed_slot: u64,
}

/// A verifier took a seat and bonded stake.
#[event]
pub struct VerifierJoined {
    pub task: Pubkey,
    pub verifier: Pubkey,
    pub round: u8,
    /// Bond of this seat.
    pub bond: u64,
    /// Seats of the round taken now.
    pub seats: u8,
    /// The verifier's snapshot stake and its ticket exponent for this seat (its score is
    /// exponent / weight).
    pub weight: u64,
    pub exponent: u64,
    /// The seat taken (index within the round).
    pub seat: u8,
    /// Seats of the round this verifier holds now.
    pub held: u8,
}

/// A better ticket took a seat: the holder's bond for it was released, and its vote account
/// closed with the rent returned when it held no other seat.
#[event]
pub struct VerifierDisplaced {
    pub task: Pubkey,
    pub round: u8,
    pub displaced: Pubkey,
    pub by: Pubkey,
    pub released_bond: u64,
    /// The seat.
    pub seat: u8,
    /// Seats of the round the displaced verifier still holds.
    pub held: u8,
}

/// A node's slashed stake was subtracted from its market's sortition total.
#[event]
pub struct StakeSynced {
    pub node: Pubkey,
    pub market: Pubkey,
    pub subtracted: u64,
    pub verifier_stake: u64,
}

/// A verifier committed its vote.
#[event]
pub struct VoteCommitted {
    pub task: Pubkey,
    pub verifier: Pubkey,
    pub round: u8,
    pub commitment: [u8; 32],
}

/// A verifier revealed its vote.
#[event]
pub struct VoteRevealed {
    pub task: Pubkey,
    pub verifier: Pubkey,
    pub round: u8,
    pub vote: u8,
    pub evidence: [u8; 32],
    /// Seats the vote counts for.
    pub seats: u8,
}

/// The round was undecided: a second round with 2V seats and a fresh seed.
#[event]
pub struct TaskEscalated {
    pub task: Pubkey,
    pub round: u8,
    pub quorum: u8,
    pub valid: u8,
    pub invalid: u8,
    /// Seats of the round that revealed "unavailable".
    pub unavailable: u8,
}

/// The task reached its outcome and the provider was settled.
#[event]
pub struct TaskFinalized {
    pub task: Pubkey,
    pub status: TaskStatus,
    pub valid: u8,
    pub invalid: u8,
    /// Seats that revealed "unavailable" (never losers, PROTOCOL §3.4).
    pub unavailable: u8,
    /// The verdict: 1 valid, 2 invalid, 3 withheld (rejected by a majority of invalid and
    /// unavailable seats), 0 undecided.
    pub majority: u8,
    pub provider_paid: u64,
    pub provider_slashed: u64,
    pub fee: u64,
    pub majority_share: u64,
    /// Last slot of the dispute window when the verdict's money is held until it closes
    /// (nothing paid or slashed yet, PROTOCOL §8.1); 0 when it settled now.
    pub held_until: u64,
}

/// The dispute window closed (or a dispute overturned the verdict) and the verdict's money
/// moved (PROTOCOL §8.5).
#[event]
pub struct TaskConcluded {
    pub task: Pubkey,
    pub status: TaskStatus,
    /// The verdict in force: 1, 2, or 4 (proven wrong) / 5 (claims refuted) after a dispute.
    pub majority: u8,
    pub provider_paid: u64,
    pub provider_slashed: u64,
    pub fee: u64,
    pub majority_share: u64,
    /// Owed so far to the winning challenger beyond its bond.
    pub award: u64,
}

/// A challenger bonded and opened a dispute (PROTOCOL §8.3).
#[event]
pub struct DisputeOpened {
    pub task: Pubkey,
    pub challenger: Pubkey,
    pub kind: u8,
    pub tile: u32,
    pub element: u32,
    pub bond: u64,
    pub answer_deadline: u64,
}

/// A kind-2 dispute took the INVALID vote it refutes next, at its pointer.
#[event]
pub struct DisputeTargeted {
    pub task: Pubkey,
    pub challenger: Pubkey,
    pub vote: Pubkey,
    pub tile: u32,
    pub element: u32,
}

/// Bytes of a dispute's proof were written.
#[event]
pub struct DisputeWritten {
    pub task: Pubkey,
    pub challenger: Pubkey,
    pub offset: u16,
    pub len: u16,
}

/// The element's committed value was proven against the result root.
#[event]
pub struct DisputeProven {
    pub task: Pubkey,
    pub challenger: Pubkey,
    pub chunk: u64,
    pub committed: [u8; 32],
}

/// A dispute proved the job's manifest: the roots of the slices it recomputes from.
#[event]
pub struct DisputeInputsProven {
    pub task: Pubkey,
    pub challenger: Pubkey,
    pub slice_roots: [[u8; 32]; 2],
    pub slice_lens: [u64; 2],
}

/// A proven chunk of an input was taken by the recomputation.
#[event]
pub struct DisputeFed {
    pub task: Pubkey,
    pub challenger: Pubkey,
    /// 0: A or the model; 1: B or the batch.
    pub input: u8,
    pub chunk: u64,
}

/// A step of a long recomputation (`MatMulModP`: terms summed so far).
#[event]
pub struct DisputeStepped {
    pub task: Pubkey,
    pub challenger: Pubkey,
    pub done: u32,
}

/// A dispute's outcome, or one refuted vote of a kind-2 dispute.
#[event]
pub struct DisputeResolved {
    pub task: Pubkey,
    pub challenger: Pubkey,
    /// 1 won (the verdict is overturned), 2 lost (the bond is forfeit), 3 one vote refuted.
    pub outcome: u8,
    /// The verdict in force afterwards.
    pub majority: u8,
    /// The refuted vote (outcome 3), else default.
    pub vote: Pubkey,
    pub committed: [u8; 32],
    pub recomputed: [u8; 32],
}

/// A dispute was closed: its challenger paid its bond back (and the award, if it won).
#[event]
pub struct DisputeClosed {
    pub task: Pubkey,
    pub challenger: Pubkey,
    pub paid: u64,
    pub won: bool,
}

/// One vote settled: bond released or slashed, reward paid, vote account closed.
#[event]
pub struct VoteSettled {
    pub task: Pubkey,
    pub verifier: Pubkey,
    pub round: u8,
    pub paid: u64,
    pub slashed: u64,
}

/// Task and escrow closed; the client got its refund and the rent.
#[event]
pub struct TaskClosed {
    pub task: Pubkey,
    pub status: TaskStatus,
    pub refunded: u64,
    /// Tokens beyond the refund (sent into the escrow from outside), sent to the treasury.
    pub leftover_to_treasury: u64,
}

/// A challenger claimed its element's trace (PROTOCOL §8.10): defenders may join until
/// `defend_deadline`.
#[event]
pub struct DisputeClaimed {
    pub task: Pubkey,
    pub challenger: Pubkey,
    pub root: [u8; 32],
    pub value: [u8; 4],
    pub steps: u64,
    pub defend_deadline: u64,
}

/// A defender opened a game against a dispute's claim.
#[event]
pub struct GameOpened {
    pub task: Pubkey,
    pub dispute: Pubkey,
    pub defender: Pubkey,
    pub steps: u64,
    pub deadline: u64,
}

/// A game moved: a split (`segments` roots posted), a pick (the range narrowed), or a piece
/// of the replay taken (`piece`: its source and index).
#[event]
pub struct GameMoved {
    pub task: Pubkey,
    pub dispute: Pubkey,
    pub defender: Pubkey,
    /// 1 split, 2 pick, 3 a replay's piece written, 4 a replay's piece taken.
    pub action: u8,
    pub lo: u64,
    pub hi: u64,
    pub segments: u8,
    pub piece: u64,
    pub deadline: u64,
}

/// A game ended: `challenger_won` (the step replayed to its root, or the defender missed its
/// turn) or not (the challenger missed its turn, or the replay contradicted its root: its
/// dispute is lost); or closed as moot.
#[event]
pub struct GameEnded {
    pub task: Pubkey,
    pub dispute: Pubkey,
    pub defender: Pubkey,
    /// 1 the challenger won, 2 the defender won, 3 moot (its dispute ended otherwise).
    pub outcome: u8,
    pub step: u64,
}

/// An availability challenge (kind 1, a client's) or contest (kind 2, the provider's answer to
/// a withheld verdict) was opened (PROTOCOL §8.11).
#[event]
pub struct AvailabilityOpened {
    pub task: Pubkey,
    pub availability: Pubkey,
    pub opener: Pubkey,
    pub kind: u8,
    pub tiles: Vec<u32>,
    pub bond: u64,
    pub answer_deadline: u64,
}

/// The provider proved one published chunk of a named tile.
#[event]
pub struct AvailabilityPublished {
    pub task: Pubkey,
    pub availability: Pubkey,
    pub tile: u32,
    pub chunk: u8,
    pub chunks_left: u32,
}

/// An availability account ended: 1 answered, 2 failed (its deadline passed), 3 moot. With
/// the verdict then in force (6 served, 7 unserved, or unchanged).
#[event]
pub struct AvailabilityEnded {
    pub task: Pubkey,
    pub availability: Pubkey,
    pub kind: u8,
    pub outcome: u8,
    pub majority: u8,
    pub status: TaskStatus,
    pub bond_forfeit: u64,
}

/// An ended availability account was closed, its rent returned to its opener.
#[event]
pub struct AvailabilityClosed {
    pub task: Pubkey,
    pub availability: Pubkey,
    pub opener: Pubkey,
}
