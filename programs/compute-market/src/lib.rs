//! # Compute Market — the on-chain program
//!
//! Clients post paid compute tasks; staked providers claim them with a bond and commit a
//! Merkle root of their output; verifiers seated by a seed nobody knew at commit time check a
//! few samples and vote with commit-reveal; the majority decides who is paid and who is
//! slashed. Every deadline is enforced here and every settlement is permissionless; the admin
//! can create markets and propose bounded, delayed parameter changes, nothing else.
//!
//! `lib.rs` only dispatches: each instruction lives in `instructions/<name>.rs` with its
//! accounts, a `validate()` run through `#[access_control]`, and a `handler`.
//!
//! "PROTOCOL §n" in this crate's comments is section n of `docs/PROTOCOL.md` in this
//! repository.
#![allow(clippy::result_large_err)]

use anchor_lang::prelude::*;

#[cfg(not(target_os = "solana"))]
pub mod client;
pub mod constants;
pub mod errors;
pub mod events;
pub mod instructions;
pub mod math;
#[cfg(not(target_os = "solana"))]
pub mod pda;
pub mod state;
pub mod transfer;
pub mod verdict;

use instructions::*;
use state::{MarketArgs, Params};

declare_id!("C7dNHMTtuzBkddhdpqiXzaWZ2j3HZXPjstDXaY9PnwbJ");

#[cfg(not(feature = "no-entrypoint"))]
solana_security_txt::security_txt! {
    name: "Compute Market",
    project_url: "https://github.com/compute-market/compute-market",
    contacts: "link:https://github.com/compute-market/compute-market/security/advisories/new",
    policy: "https://github.com/compute-market/compute-market/blob/main/SECURITY.md",
    preferred_languages: "en",
    source_code: "https://github.com/compute-market/compute-market"
}

#[program]
pub mod compute_market {
    use super::*;

    /// The program's upgrade authority creates the singleton config: admin, stake mint (no
    /// freeze authority), treasury, parameters, update delay.
    #[access_control(ctx.accounts.validate(&args))]
    pub fn initialize_config(
        ctx: Context<InitializeConfig>,
        args: InitializeConfigArgs,
    ) -> Result<()> {
        initialize_config::handler(ctx, args)
    }

    /// Admin: proposes new parameters (bounded), applicable after the update delay.
    #[access_control(ctx.accounts.validate(&params))]
    pub fn propose_params(ctx: Context<ProposeParams>, params: Params) -> Result<()> {
        propose_params::handler(ctx, params)
    }

    /// Anyone: applies a proposal whose delay has passed.
    #[access_control(ctx.accounts.validate())]
    pub fn apply_params(ctx: Context<ApplyParams>) -> Result<()> {
        apply_params::handler(ctx)
    }

    /// Admin: creates a market (GPU class, quorum, samples, windows).
    #[access_control(ctx.accounts.validate(&args))]
    pub fn create_market(ctx: Context<CreateMarket>, args: MarketArgs) -> Result<()> {
        create_market::handler(ctx, args)
    }

    /// Registers the signer's node in a market with its roles and declared hardware.
    #[access_control(ctx.accounts.validate(&args))]
    pub fn register_node(ctx: Context<RegisterNode>, args: RegisterNodeArgs) -> Result<()> {
        register_node::handler(ctx, args)
    }

    /// Re-declares the signer's node's hardware and announces its keeper's endpoint.
    #[access_control(ctx.accounts.validate(&args))]
    pub fn update_node(ctx: Context<UpdateNode>, args: UpdateNodeArgs) -> Result<()> {
        update_node::handler(ctx, args)
    }

    /// Moves tokens into the node's vault as free stake.
    #[access_control(ctx.accounts.validate(amount))]
    pub fn stake(ctx: Context<Stake>, amount: u64) -> Result<()> {
        stake::handler(ctx, amount)
    }

    /// Moves free stake to pending unstake; the cooldown starts.
    #[access_control(ctx.accounts.validate(amount))]
    pub fn request_unstake(ctx: Context<RequestUnstake>, amount: u64) -> Result<()> {
        request_unstake::handler(ctx, amount)
    }

    /// Pays out pending unstake after the cooldown.
    #[access_control(ctx.accounts.validate_withdraw())]
    pub fn withdraw(ctx: Context<Payout>) -> Result<()> {
        withdraw::handler(ctx)
    }

    /// Pays out the node's earnings.
    #[access_control(ctx.accounts.validate_claim())]
    pub fn claim_earnings(ctx: Context<Payout>) -> Result<()> {
        claim_earnings::handler(ctx)
    }

    /// Anyone: moves a node's accrued protocol fees to the treasury.
    #[access_control(ctx.accounts.validate())]
    pub fn sweep_fees(ctx: Context<SweepFees>) -> Result<()> {
        sweep_fees::handler(ctx)
    }

    /// Anyone: subtracts a node's slashed stake from its market's sortition total.
    #[access_control(ctx.accounts.validate())]
    pub fn sync_stake(ctx: Context<SyncStake>) -> Result<()> {
        sync_stake::handler(ctx)
    }

    /// Closes an empty node and its vault.
    #[access_control(ctx.accounts.validate())]
    pub fn close_node(ctx: Context<CloseNode>) -> Result<()> {
        close_node::handler(ctx)
    }

    /// Posts a task; the reward moves into its escrow.
    #[access_control(ctx.accounts.validate(&args))]
    pub fn post_task(ctx: Context<PostTask>, args: PostTaskArgs) -> Result<()> {
        post_task::handler(ctx, args)
    }

    /// Client: cancels an open task.
    #[access_control(ctx.accounts.validate())]
    pub fn cancel_task(ctx: Context<CancelTask>) -> Result<()> {
        cancel_task::handler(ctx)
    }

    /// Anyone: expires an open task past its deadline.
    #[access_control(ctx.accounts.validate())]
    pub fn expire_task(ctx: Context<ExpireTask>) -> Result<()> {
        expire_task::handler(ctx)
    }

    /// Provider: claims an open task, bonding stake.
    #[access_control(ctx.accounts.validate())]
    pub fn claim_task(ctx: Context<ClaimTask>) -> Result<()> {
        claim_task::handler(ctx)
    }

    /// Provider: commits the result's Merkle root and location.
    #[access_control(ctx.accounts.validate(&args))]
    pub fn submit_result(ctx: Context<SubmitResult>, args: SubmitResultArgs) -> Result<()> {
        submit_result::handler(ctx, args)
    }

    /// Anyone: reopens a task whose provider missed its submit deadline (late slash).
    #[access_control(ctx.accounts.validate())]
    pub fn reclaim_task(ctx: Context<ReclaimTask>) -> Result<()> {
        reclaim_task::handler(ctx)
    }

    /// Anyone: draws the round's seed from SlotHashes.
    #[access_control(ctx.accounts.validate())]
    pub fn draw_seed(ctx: Context<DrawSeed>) -> Result<()> {
        draw_seed::handler(ctx)
    }

    /// Verifier: takes seat `seat` of the round (or displaces a worse ticket from it) if its
    /// snapshot stake and its ticket for that seat admit it, bonding stake for the seat.
    #[access_control(ctx.accounts.validate())]
    pub fn join_task(ctx: Context<JoinTask>, seat: u8) -> Result<()> {
        join_task::handler(ctx, seat)
    }

    /// Verifier: commits to its vote.
    #[access_control(ctx.accounts.validate_commit(&commitment))]
    pub fn commit_vote(ctx: Context<SeatedVote>, commitment: [u8; 32]) -> Result<()> {
        commit_vote::handler(ctx, commitment)
    }

    /// Verifier: reveals its vote, evidence and salt.
    #[access_control(ctx.accounts.validate_reveal(&args))]
    pub fn reveal_vote(ctx: Context<SeatedVote>, args: RevealVoteArgs) -> Result<()> {
        reveal_vote::handler(ctx, args)
    }

    /// Anyone: settles the round (accept, reject, escalate, or undecided).
    #[access_control(ctx.accounts.validate())]
    pub fn finalize_task(ctx: Context<FinalizeTask>) -> Result<()> {
        finalize_task::handler(ctx)
    }

    /// Anyone: settles one vote and closes it.
    #[access_control(ctx.accounts.validate())]
    pub fn settle_vote(ctx: Context<SettleVote>) -> Result<()> {
        settle_vote::handler(ctx)
    }

    /// Anyone: moves a held verdict's money once its dispute window closed (or a dispute
    /// overturned it) and no dispute is open (PROTOCOL §8.1).
    #[access_control(ctx.accounts.validate())]
    pub fn conclude_task(ctx: Context<ConcludeTask>) -> Result<()> {
        conclude_task::handler(ctx)
    }

    /// Anyone: bonds and disputes a held verdict (PROTOCOL §8.3).
    #[access_control(ctx.accounts.validate(&args))]
    pub fn open_dispute(ctx: Context<OpenDispute>, args: OpenDisputeArgs) -> Result<()> {
        open_dispute::handler(ctx, args)
    }

    /// Challenger, kind 2: takes the next INVALID vote to refute (PROTOCOL §8.4).
    #[access_control(ctx.accounts.validate())]
    pub fn dispute_target(ctx: Context<DisputeTurn>) -> Result<()> {
        dispute_turn::target(ctx)
    }

    /// Challenger: writes part of the element's chunk proof into the dispute.
    #[access_control(ctx.accounts.validate())]
    pub fn dispute_write(ctx: Context<DisputeTurn>, offset: u16, data: Vec<u8>) -> Result<()> {
        dispute_turn::write(ctx, offset, data)
    }

    /// Challenger: proves the element's committed value against the result root.
    #[access_control(ctx.accounts.validate())]
    pub fn dispute_prove(ctx: Context<DisputeTurn>, siblings: u8) -> Result<()> {
        dispute_turn::prove(ctx, siblings)
    }

    /// Challenger: the program recomputes the element (in steps for long sums) and decides.
    #[access_control(ctx.accounts.validate())]
    pub fn dispute_step(ctx: Context<DisputeTurn>, count: u32) -> Result<()> {
        dispute_turn::step(ctx, count)
    }

    /// Challenger, a job on the client's data: proves the job's manifest, keeping the roots of
    /// the slices its element is recomputed from (PROTOCOL §8.7).
    #[access_control(ctx.accounts.validate())]
    pub fn dispute_inputs(ctx: Context<DisputeInputs>, len: u16) -> Result<()> {
        dispute_inputs::inputs(ctx, len)
    }

    /// Challenger, a job on the client's data: one proven input chunk into the recomputation,
    /// which decides once the element is complete (PROTOCOL §8.7).
    #[access_control(ctx.accounts.validate())]
    pub fn dispute_feed(
        ctx: Context<DisputeTurn>,
        input: u8,
        chunk: u64,
        siblings: u8,
    ) -> Result<()> {
        dispute_inputs::feed(ctx, input, chunk, siblings)
    }

    /// Challenger, a game (PROTOCOL §8.10): proves the model's header, which fixes the trace.
    #[access_control(ctx.accounts.validate())]
    pub fn dispute_layout(ctx: Context<DisputeTurn>, siblings: u8) -> Result<()> {
        dispute_game::layout(ctx, siblings)
    }

    /// Challenger, a game: claims the root of the element's trace and proves its value in it.
    #[access_control(ctx.accounts.validate())]
    pub fn dispute_claim(ctx: Context<DisputeTurn>, root: [u8; 32], siblings: u8) -> Result<()> {
        dispute_game::claim(ctx, root, siblings)
    }

    /// Challenger, a game: after the defence closed and every game was won, the claim stands.
    #[access_control(ctx.accounts.validate())]
    pub fn dispute_resolve(ctx: Context<DisputeTurn>) -> Result<()> {
        dispute_game::resolve(ctx)
    }

    /// Anyone but the challenger: bonds and opens a game against a dispute's claimed trace.
    #[access_control(ctx.accounts.validate())]
    pub fn defend(ctx: Context<Defend>, nonce: u32) -> Result<()> {
        dispute_game::defend(ctx, nonce)
    }

    /// Challenger: the roots inside the game's disputed range of steps.
    #[access_control(ctx.accounts.validate())]
    pub fn game_split(ctx: Context<GameMove>, nonce: u32, roots: Vec<[u8; 32]>) -> Result<()> {
        dispute_game::split(ctx, nonce, roots)
    }

    /// Defender: the segment whose end it disputes.
    #[access_control(ctx.accounts.validate())]
    pub fn game_pick(ctx: Context<GameMove>, nonce: u32, segment: u8) -> Result<()> {
        dispute_game::pick(ctx, nonce, segment)
    }

    /// Defender: part of a replay's piece into the game's buffer.
    #[access_control(ctx.accounts.validate())]
    pub fn game_write(
        ctx: Context<GameMove>,
        nonce: u32,
        offset: u16,
        data: Vec<u8>,
    ) -> Result<()> {
        dispute_game::write(ctx, nonce, offset, data)
    }

    /// Defender: one proven piece of the replay of the one step left.
    #[access_control(ctx.accounts.validate())]
    pub fn game_feed(
        ctx: Context<GameMove>,
        nonce: u32,
        source: u8,
        index: u64,
        siblings: u8,
    ) -> Result<()> {
        dispute_game::feed(ctx, nonce, source, index, siblings)
    }

    /// Defender: the step's own leaf, which decides the game.
    pub fn game_settle(ctx: Context<GameEnd>, nonce: u32, index: u64, siblings: u8) -> Result<()> {
        dispute_game::settle(ctx, nonce, index, siblings)
    }

    /// Anyone: the party that missed its turn in a game loses.
    pub fn game_timeout(ctx: Context<GameEnd>, nonce: u32) -> Result<()> {
        dispute_game::timeout(ctx, nonce)
    }

    /// Anyone: a game whose dispute ended or is moot returns the defender's bond.
    pub fn close_game(ctx: Context<CloseGame>, nonce: u32) -> Result<()> {
        dispute_game::close_game(ctx, nonce)
    }

    /// Anyone: ends a dispute whose challenger missed its answer deadline (lost).
    #[access_control(ctx.accounts.validate())]
    pub fn dispute_timeout(ctx: Context<DisputeTimeout>) -> Result<()> {
        dispute_timeout::handler(ctx)
    }

    /// Anyone: pays and closes a won dispute (after every vote settled) or a moot one.
    #[access_control(ctx.accounts.validate())]
    pub fn close_dispute(ctx: Context<CloseDispute>) -> Result<()> {
        close_dispute::handler(ctx)
    }

    /// Anyone (for a client that could not fetch): bonds and names tiles of a held Accepted
    /// result its provider must publish on chain (PROTOCOL §8.11).
    #[access_control(ctx.accounts.validate(&args))]
    pub fn challenge_availability(
        ctx: Context<ChallengeAvailability>,
        args: ChallengeArgs,
    ) -> Result<()> {
        availability::challenge(ctx, args)
    }

    /// Provider: contests a held withheld verdict by publishing tiles drawn from the round's
    /// seed (PROTOCOL §8.11).
    #[access_control(ctx.accounts.validate())]
    pub fn contest_withheld(ctx: Context<ContestWithheld>) -> Result<()> {
        availability::contest(ctx)
    }

    /// Provider: bytes of named tiles into an availability account's data area.
    #[access_control(ctx.accounts.validate())]
    pub fn publish_write(ctx: Context<PublishWrite>, offset: u32, data: Vec<u8>) -> Result<()> {
        availability::write(ctx, offset, data)
    }

    /// Provider: proves one written chunk of a named tile against the result root; the last
    /// one answers the challenge or contest.
    #[access_control(ctx.accounts.validate())]
    pub fn publish_prove(
        ctx: Context<PublishProve>,
        tile: u8,
        chunk: u8,
        siblings: Vec<[u8; 32]>,
    ) -> Result<()> {
        availability::prove(ctx, tile, chunk, siblings)
    }

    /// Its opener: grows an availability account by up to 10 KiB towards its full size.
    pub fn availability_grow(ctx: Context<AvailabilityGrow>) -> Result<()> {
        availability::grow(ctx)
    }

    /// Anyone: ends an availability account past its deadline (the provider failed) or moot,
    /// returning its bond.
    #[access_control(ctx.accounts.validate())]
    pub fn availability_timeout(ctx: Context<AvailabilityTimeout>) -> Result<()> {
        availability::timeout(ctx)
    }

    /// Its opener: closes an ended availability account (rent back).
    #[access_control(ctx.accounts.validate())]
    pub fn close_availability(ctx: Context<CloseAvailability>) -> Result<()> {
        availability::close(ctx)
    }

    /// Anyone: refunds the client and closes a finished task and its escrow.
    #[access_control(ctx.accounts.validate())]
    pub fn close_task(ctx: Context<CloseTask>) -> Result<()> {
        close_task::handler(ctx)
    }
}
