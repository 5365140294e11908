use anchor_lang::prelude::*;
use compute_market_protocol::{commit::verification_seed, seats::SeatScore};

use crate::{
    constants::*,
    errors::MarketError,
    math,
    state::{Params, Windows},
};

/// Where a task is in its life (PROTOCOL §3). An escalation is round 1 of `Verifying`.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, Debug, InitSpace)]
pub enum TaskStatus {
    /// Posted, reward in escrow, waiting for a provider.
    Open,
    /// A provider bonded stake and computes.
    Claimed,
    /// The result is committed; verifiers join, commit and reveal.
    Verifying,
    /// Majority valid: provider paid.
    Accepted,
    /// Majority invalid: provider slashed, client refunded.
    Rejected,
    /// No majority after the escalation: client refunded, bonds released.
    Undecided,
    /// Cancelled by the client before any claim.
    Cancelled,
    /// Nobody claimed it in time.
    Expired,
}

impl TaskStatus {
    /// Whether the task has reached an end state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Accepted
                | TaskStatus::Rejected
                | TaskStatus::Undecided
                | TaskStatus::Cancelled
                | TaskStatus::Expired
        )
    }

    /// Whether the outcome came from votes (votes may need settling).
    pub fn is_decided(self) -> bool {
        matches!(
            self,
            TaskStatus::Accepted | TaskStatus::Rejected | TaskStatus::Undecided
        )
    }
}

/// Votes of one verification round.
#[derive(
    AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, Debug, Default, InitSpace,
)]
pub struct RoundTally {
    /// Seats of this round: V, or 2V after an escalation.
    pub quorum: u8,
    /// Seats taken.
    pub seats: u8,
    /// Votes committed.
    pub committed: u8,
    /// Votes revealed.
    pub revealed: u8,
    /// Revealed "valid".
    pub valid: u8,
    /// Revealed "invalid". (Revealed "unavailable" is `revealed − valid − invalid`.)
    pub invalid: u8,
    /// The verdict (1 valid, 2 invalid, 3 withheld: a majority said invalid or unavailable;
    /// `compute_market_protocol::commit::verdict`), 0 when the round had no majority.
    pub majority: u8,
    /// Losing votes whose slash has not reached the escrow yet.
    pub losers_pending: u8,
}

/// One verifier seat of the current round: who holds it (`Pubkey::default()` while free), and
/// the score it won it with (`compute_market_protocol::seats`).
#[derive(
    AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, Debug, Default, InitSpace,
)]
pub struct Seat {
    /// The verifier's node.
    pub node: Pubkey,
    /// Exponent of its ticket (`ticket_exponent`).
    pub exponent: u64,
    /// Its stake in the round's snapshot (lowered at commit to what the node still has).
    pub weight: u64,
}

impl Seat {
    /// Whether a verifier holds it.
    pub fn taken(&self) -> bool {
        self.node != Pubkey::default()
    }

    /// As the protocol crate scores it.
    pub fn score(&self) -> SeatScore {
        SeatScore {
            exponent: self.exponent,
            weight: self.weight,
            node: self.node.to_bytes(),
        }
    }
}

/// A compute task: `[SEED_TASK, client, task_id]`. Its reward sits in its own escrow
/// (`[SEED_ESCROW, task]`); `escrow_balance` mirrors what that escrow must hold.
#[account]
#[derive(InitSpace)]
pub struct Task {
    /// Layout version ([`crate::constants::ACCOUNT_VERSION`]).
    pub version: u8,
    /// Who posted and pays.
    pub client: Pubkey,
    /// Client-chosen id (PDA seed).
    pub task_id: u64,
    /// The market.
    pub market: Pubkey,
    /// Where refunds go (a token account of the stake mint chosen by the client).
    pub client_token: Pubkey,
    /// Canonical job-spec encoding (`compute_market_protocol::job`).
    pub job: [u8; 64],
    /// Output tiles T.
    pub tile_count: u32,
    /// Input location for content-hash jobs, zero-padded.
    pub input_uri: [u8; MAX_URI_LEN],
    /// Bytes of `input_uri` in use.
    pub input_uri_len: u8,
    /// Preferred region (`compute_market_protocol::region`; 0 = any).
    pub region: u16,
    /// Reward in escrow.
    pub reward: u64,
    /// Provider bond.
    pub provider_bond: u64,
    /// Bond of each verifier seat.
    pub verifier_bond: u64,
    /// Parameters in force when posted.
    pub terms: Params,
    /// Quorum V.
    pub quorum: u8,
    /// Samples k per verifier.
    pub samples: u16,
    /// Windows in force when posted.
    pub windows: Windows,
    /// Status.
    pub status: TaskStatus,
    /// Slot posted.
    pub posted_slot: u64,
    /// Last slot it can be claimed.
    pub open_deadline: u64,
    /// The provider's node (default while open).
    pub provider: Pubkey,
    /// Last slot the result can be submitted.
    pub submit_deadline: u64,
    /// Merkle root of the output tiles.
    pub result_root: [u8; 32],
    /// Where tiles and proofs are served, zero-padded.
    pub result_uri: [u8; MAX_URI_LEN],
    /// Bytes of `result_uri` in use.
    pub result_uri_len: u8,
    /// Slot of the submission.
    pub submit_slot: u64,
    /// Current round: 0, or 1 after an escalation.
    pub round: u8,
    /// The seed comes from the first slot after this one.
    pub reference_slot: u64,
    /// Whether `seed` is drawn.
    pub seed_drawn: bool,
    /// The round's seed.
    pub seed: [u8; 32],
    /// Slot whose hash made the seed.
    pub hashed_slot: u64,
    /// Last slot to join.
    pub join_deadline: u64,
    /// Last slot to commit.
    pub commit_deadline: u64,
    /// Last slot to reveal.
    pub reveal_deadline: u64,
    /// The round's stake snapshot: only stake in place before this slot (the submission, or
    /// the escalation) counts for its seats.
    pub snapshot_slot: u64,
    /// The round's sortition denominator: the market's verifier stake at `snapshot_slot`.
    pub snapshot_stake: u64,
    /// Seats of the current round: seat j (j < `tally().quorum`) is its own race, free while
    /// its node is the default key (cleared on escalation).
    pub seats: [Seat; MAX_SEATS],
    /// Tallies of round 0 and round 1.
    pub rounds: [RoundTally; 2],
    /// Vote accounts not settled yet (both rounds).
    pub open_votes: u16,
    /// Paid to each majority verifier of the deciding round (pool or slash share).
    pub majority_share: u64,
    /// Taken from each losing verifier of the deciding round.
    pub loser_slash: u64,
    /// Paid to each majority verifier out of the losers' slashes.
    pub loser_bonus: u64,
    /// Rounding remainder of the losers' slashes (collected − bonus × winners), booked by the
    /// losers' settlements to the treasury through their own nodes, never into the escrow.
    pub loser_dust: u64,
    /// Tokens the escrow holds by the program's accounting.
    pub escrow_balance: u64,
    /// Extra owed to the client (late slashes, its share of a rejected provider's bond).
    pub client_extra: u64,
    /// Canonical bump of the task PDA.
    pub bump: u8,
    /// Canonical bump of the escrow PDA.
    pub escrow_bump: u8,
    /// Slots a decided round stays open to disputes (the market's, copied at post; PROTOCOL
    /// §8.1). 0: none.
    pub dispute_window: u32,
    /// Last slot a dispute may be opened.
    pub dispute_deadline: u64,
    /// Whether the verdict's money is held for the dispute window (set by finalize, cleared by
    /// `conclude_task`). All-zero, as in tasks of earlier releases, means nothing is held.
    pub held: bool,
    /// Disputes opened and not yet closed.
    pub disputes_open: u32,
    /// INVALID seats of the deciding round whose pointers a kind-2 dispute refuted.
    pub refuted_seats: u8,
    /// The tile of the dispute that proved the result wrong (which VALID votes vouched for it).
    pub disputed_tile: u32,
    /// Bonds of lost disputes, paid at conclusion to the side that defended.
    pub dispute_forfeit: u64,
    /// What the winning challenger is owed beyond its bond (PROTOCOL §8.5), as it accrues.
    pub dispute_award: u64,
    /// Whether a won dispute's challenger is still to be paid (`close_dispute`).
    pub award_pending: bool,
    /// Games of its disputes not yet closed (PROTOCOL §8.10): their defenders' bonds are in
    /// the escrow, so the task closes only once every game has.
    pub games_open: u32,
    /// Disputes ever opened on it: each dispute keeps its number, and a game only acts on the
    /// dispute it was opened against (a dispute account re-created at the same address is
    /// another dispute).
    pub dispute_nonce: u32,
    /// Availability challenges and contests open (PROTOCOL §8.11): the verdict concludes only
    /// once none is.
    pub challenges_open: u8,
    /// Availability accounts ever opened on it (the next one's PDA seed).
    pub availability_nonce: u16,
    /// The provider's contest of a withheld verdict: 0 none, 1 open, 2 answered, 3 failed.
    pub contest: u8,
    /// Availability challenges of its client open: the client has its own
    /// `availability::MAX_OPEN`, which nobody else's challenges can take.
    pub client_challenges: u8,
    /// The latest answer deadline of its availability accounts: a new one's deadline is D after
    /// it (or after now), so each gets a whole window of the provider's time.
    pub availability_deadline: u64,
    /// Zeroed space for fields of later versions.
    pub reserved: [u8; 4],
}

impl Task {
    /// Byte offset of `market` in the account data (after the discriminator, the version, the
    /// client and the task id): clients read one market's tasks with a `memcmp` here.
    pub const MARKET_OFFSET: usize = 8 + 1 + 32 + 8;

    /// Signer seeds of the task PDA (authority of its escrow).
    pub fn signer_seeds<'a>(&'a self, id: &'a [u8; 8], bump: &'a [u8; 1]) -> [&'a [u8]; 4] {
        [SEED_TASK, self.client.as_ref(), id, bump]
    }

    /// The tally of the current round.
    pub fn tally(&self) -> &RoundTally {
        &self.rounds[self.round as usize]
    }

    /// The tally of the current round, mutable.
    pub fn tally_mut(&mut self) -> &mut RoundTally {
        &mut self.rounds[self.round as usize]
    }

    /// Starts verification round `round` at slot `now`: V seats (2V when escalated), fresh
    /// seed after `now`, deadlines from `now`, and the stake snapshot: `verifier_stake` (the
    /// market's, read now) is the denominator and only stake in place before `now` counts.
    pub fn start_round(&mut self, round: u8, now: u64, verifier_stake: u64) -> Result<()> {
        self.round = round;
        self.reference_slot = now;
        self.snapshot_slot = now;
        self.snapshot_stake = verifier_stake;
        self.seats = [Seat::default(); MAX_SEATS];
        self.seed_drawn = false;
        self.seed = [0; 32];
        self.hashed_slot = 0;
        self.join_deadline = math::add(now, self.windows.join as u64)?;
        self.commit_deadline = math::add(self.join_deadline, self.windows.commit as u64)?;
        self.reveal_deadline = math::add(self.commit_deadline, self.windows.reveal as u64)?;
        let quorum = if round == 0 {
            self.quorum
        } else {
            self.quorum
                .checked_mul(2)
                .ok_or(MarketError::MathOverflow)?
        };
        self.rounds[round as usize] = RoundTally {
            quorum,
            ..RoundTally::default()
        };
        Ok(())
    }

    /// Draws the round's seed from the raw SlotHashes sysvar: the hash of the first slot
    /// strictly after `reference_slot`. The join window is shorter than the sysvar's horizon
    /// ([`MAX_JOIN_WINDOW`]), so within it that slot is always listed; should it ever be the
    /// oldest entry of a full sysvar (it may have aged out), the draw is refused rather than
    /// taken from a later slot: the seed is one value, never re-rolled by waiting.
    pub fn draw_seed(&mut self, task: &Pubkey, slot_hashes: &[u8]) -> Result<()> {
        require!(!self.seed_drawn, MarketError::SeedAlreadyDrawn);
        require!(slot_hashes.len() >= 8, MarketError::BadSlotHashes);
        let n = u64::from_le_bytes(
            slot_hashes[..8]
                .try_into()
                .map_err(|_| MarketError::BadSlotHashes)?,
        );
        let needed = n
            .checked_mul(40)
            .and_then(|b| b.checked_add(8))
            .ok_or(MarketError::BadSlotHashes)?;
        require!(
            n <= SLOT_HASHES_MAX_ENTRIES && needed <= slot_hashes.len() as u64,
            MarketError::BadSlotHashes
        );
        // entries are (slot u64, hash [u8; 32]) from newest to oldest
        let mut found: Option<(usize, u64)> = None;
        for i in 0..n as usize {
            let o = 8 + 40 * i;
            let slot = u64::from_le_bytes(
                slot_hashes[o..o + 8]
                    .try_into()
                    .map_err(|_| MarketError::BadSlotHashes)?,
            );
            if slot <= self.reference_slot {
                break;
            }
            found = Some((i, slot));
        }
        let Some((i, slot)) = found else {
            return err!(MarketError::SeedNotReady);
        };
        require!(
            !(i as u64 + 1 == n && n == SLOT_HASHES_MAX_ENTRIES),
            MarketError::SeedSlotAgedOut
        );
        let o = 8 + 40 * i + 8;
        let hash: [u8; 32] = slot_hashes[o..o + 32]
            .try_into()
            .map_err(|_| MarketError::BadSlotHashes)?;
        self.seed = verification_seed(&hash, &task.to_bytes(), &self.result_root, self.round);
        self.seed_drawn = true;
        self.hashed_slot = slot;
        Ok(())
    }

    /// The seats of the current round, free ones included (index = seat).
    pub fn round_seats(&self) -> &[Seat] {
        let n = (self.tally().quorum as usize).min(MAX_SEATS);
        &self.seats[..n]
    }

    /// Seats of the current round that `node` holds.
    pub fn seats_held_by(&self, node: &Pubkey) -> u8 {
        self.round_seats()
            .iter()
            .filter(|s| s.node == *node)
            .count() as u8
    }

    /// Whether the seats are final: the join window has closed (until then a better ticket
    /// may displace a seated verifier).
    pub fn seats_final(&self, now: u64) -> bool {
        now > self.join_deadline
    }

    /// Reveals may start once commits are closed: after the commit deadline, or as soon as the
    /// seats are final and every one of them is taken and committed (nobody is left to copy a
    /// revealed vote).
    pub fn reveal_open(&self, now: u64) -> bool {
        let t = self.tally();
        now > self.commit_deadline
            || (self.seats_final(now) && t.seats == t.quorum && t.committed == t.seats)
    }

    /// Finalization may run after the reveal deadline, or once the seats are final and every
    /// one has revealed.
    pub fn finalize_ready(&self, now: u64) -> bool {
        let t = self.tally();
        now > self.reveal_deadline
            || (self.seats_final(now) && t.seats == t.quorum && t.revealed == t.quorum)
    }

    /// What the client gets back when the task is closed.
    pub fn client_refund(&self) -> Result<u64> {
        match self.status {
            TaskStatus::Accepted => Ok(self.client_extra),
            _ => math::add(self.reward, self.client_extra),
        }
    }
}
