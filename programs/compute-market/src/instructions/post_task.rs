//! `post_task`: a client posts a job; the reward moves into the task's own escrow.
use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};
use compute_market_protocol::job::{InputMode, JobSpec, JOB_SPEC_LEN};

use crate::{constants::*, errors::MarketError, events::TaskPosted, math, state::*, transfer};

/// Arguments of `post_task`.
#[derive(AnchorSerialize, AnchorDeserialize, Clone)]
pub struct PostTaskArgs {
    /// Client-chosen id, unique per client (PDA seed).
    pub task_id: u64,
    /// Canonical job-spec encoding.
    pub job: [u8; JOB_SPEC_LEN],
    /// Reward, moved into escrow.
    pub reward: u64,
    /// Quorum V (0 = the market's default).
    pub quorum: u8,
    /// Samples k per verifier (0 = the market's default).
    pub samples: u16,
    /// Input location, required for content-hash jobs (≤ 128 bytes).
    pub input_uri: String,
    /// Region the client wants the work done in (`compute_market_protocol::region`; 0 = any).
    /// Advisory: providers rank tasks by it, the program does not enforce it.
    pub region: u16,
}

impl PostTaskArgs {
    /// Task `task_id` running `job` for `reward`, with the market's quorum and samples, no
    /// input location and no preferred region.
    pub fn new(task_id: u64, job: &JobSpec, reward: u64) -> Self {
        PostTaskArgs {
            task_id,
            job: job.encode(),
            reward,
            quorum: 0,
            samples: 0,
            input_uri: String::new(),
            region: 0,
        }
    }
}

#[derive(Accounts)]
#[instruction(args: PostTaskArgs)]
pub struct PostTask<'info> {
    #[account(seeds = [SEED_CONFIG], bump = config.bump, has_one = stake_mint @ MarketError::WrongMint)]
    pub config: Account<'info, Config>,
    #[account(seeds = [SEED_MARKET, &market.id.to_le_bytes()], bump = market.bump)]
    pub market: Account<'info, Market>,
    #[account(
        init, payer = client, space = 8 + Task::INIT_SPACE,
        seeds = [SEED_TASK, client.key().as_ref(), &args.task_id.to_le_bytes()], bump,
    )]
    pub task: Box<Account<'info, Task>>,
    #[account(
        init, payer = client, seeds = [SEED_ESCROW, task.key().as_ref()], bump,
        token::mint = stake_mint, token::authority = task,
    )]
    pub escrow: Box<Account<'info, TokenAccount>>,
    pub stake_mint: Box<Account<'info, Mint>>,
    /// Pays the reward and receives refunds.
    #[account(
        mut,
        constraint = client_token.mint == stake_mint.key() @ MarketError::WrongMint,
        constraint = client_token.owner == client.key() @ MarketError::WrongAuthority,
    )]
    pub client_token: Box<Account<'info, TokenAccount>>,
    #[account(mut)]
    pub client: Signer<'info>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl PostTask<'_> {
    /// Reward, job spec, quorum, samples and URI.
    pub fn validate(&self, args: &PostTaskArgs) -> Result<()> {
        require!(args.reward > 0, MarketError::ZeroReward);
        let job = JobSpec::decode(&args.job).map_err(|_| MarketError::InvalidJobSpec)?;
        require!(args.input_uri.len() <= MAX_URI_LEN, MarketError::UriTooLong);
        if job.input_mode == InputMode::ContentHash {
            require!(!args.input_uri.is_empty(), MarketError::MissingInputUri);
        }
        if args.quorum != 0 {
            validate_quorum(args.quorum)?;
            // no override below the market's minimum: one seat must never decide (§7)
            require!(
                args.quorum >= self.market.min_quorum(),
                MarketError::QuorumBelowMarketMinimum
            );
        }
        if args.samples != 0 {
            validate_samples(args.samples)?;
        }
        Ok(())
    }
}

pub fn handler(ctx: Context<PostTask>, args: PostTaskArgs) -> Result<()> {
    let now = Clock::get()?.slot;
    let terms = ctx.accounts.config.params;
    let market = &ctx.accounts.market;
    let job = JobSpec::decode(&args.job).map_err(|_| MarketError::InvalidJobSpec)?;
    let provider_bond = math::bps_of(args.reward, terms.provider_bond_bps as u64)?;
    let verifier_bond = math::bps_of(args.reward, terms.verifier_bond_bps as u64)?.max(1);
    let mut input_uri = [0u8; MAX_URI_LEN];
    input_uri[..args.input_uri.len()].copy_from_slice(args.input_uri.as_bytes());
    let task = &mut ctx.accounts.task;
    task.set_inner(Task {
        version: ACCOUNT_VERSION,
        client: ctx.accounts.client.key(),
        task_id: args.task_id,
        market: market.key(),
        client_token: ctx.accounts.client_token.key(),
        job: args.job,
        tile_count: job.tile_count(),
        input_uri,
        input_uri_len: args.input_uri.len() as u8,
        region: args.region,
        reward: args.reward,
        provider_bond,
        verifier_bond,
        terms,
        quorum: if args.quorum == 0 {
            market.quorum
        } else {
            args.quorum
        },
        samples: if args.samples == 0 {
            market.samples
        } else {
            args.samples
        },
        windows: market.windows,
        status: TaskStatus::Open,
        posted_slot: now,
        open_deadline: math::add(now, market.task_ttl as u64)?,
        provider: Pubkey::default(),
        submit_deadline: 0,
        result_root: [0; 32],
        result_uri: [0; MAX_URI_LEN],
        result_uri_len: 0,
        submit_slot: 0,
        round: 0,
        reference_slot: 0,
        seed_drawn: false,
        seed: [0; 32],
        hashed_slot: 0,
        join_deadline: 0,
        commit_deadline: 0,
        reveal_deadline: 0,
        snapshot_slot: 0,
        snapshot_stake: 0,
        seats: [Seat::default(); MAX_SEATS],
        rounds: [RoundTally::default(); 2],
        open_votes: 0,
        majority_share: 0,
        loser_slash: 0,
        loser_bonus: 0,
        loser_dust: 0,
        escrow_balance: args.reward,
        client_extra: 0,
        bump: ctx.bumps.task,
        escrow_bump: ctx.bumps.escrow,
        dispute_window: market.dispute_window,
        dispute_deadline: 0,
        held: false,
        disputes_open: 0,
        refuted_seats: 0,
        disputed_tile: 0,
        dispute_forfeit: 0,
        dispute_award: 0,
        award_pending: false,
        games_open: 0,
        dispute_nonce: 0,
        challenges_open: 0,
        availability_nonce: 0,
        contest: 0,
        client_challenges: 0,
        availability_deadline: 0,
        reserved: [0; 4],
    });
    let a = &ctx.accounts;
    transfer::from_wallet(
        &a.token_program,
        &a.client_token,
        &a.escrow,
        &a.client,
        args.reward,
    )?;
    emit!(TaskPosted {
        task: a.task.key(),
        client: a.task.client,
        market: a.task.market,
        task_id: args.task_id,
        job: args.job,
        reward: args.reward,
        quorum: a.task.quorum,
        samples: a.task.samples,
        open_deadline: a.task.open_deadline,
        region: args.region,
    });
    Ok(())
}
