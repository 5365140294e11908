//! `open_dispute`: anyone bonds a challenger stake and disputes a held verdict (PROTOCOL §8.3):
//! kind 1, "element e of tile t is not what the job gives", against an Accepted result; kind 2,
//! "the INVALID claims are false", against a result Rejected by INVALID seats.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};
use compute_market_protocol::{
    commit::{overturned, VERDICT_SERVED, VOTE_INVALID, VOTE_VALID},
    dispute::{self, DISPUTE_CLAIMS_FALSE, DISPUTE_RESULT_WRONG},
    job::JobSpec,
};

use crate::{constants::*, errors::MarketError, events::DisputeOpened, math, state::*, transfer};

/// What a dispute claims.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, PartialEq, Eq, Debug)]
pub struct OpenDisputeArgs {
    /// 1: the result is wrong at (tile, element); 2: the INVALID claims are false.
    pub kind: u8,
    /// Kind 1: the tile (0 for kind 2).
    pub tile: u32,
    /// Kind 1: the element within the tile (0 for kind 2).
    pub element: u32,
}

#[derive(Accounts)]
pub struct OpenDispute<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(
        init, payer = challenger, space = Dispute::SPACE,
        seeds = [SEED_DISPUTE, task.key().as_ref(), challenger.key().as_ref()], bump,
    )]
    pub dispute: AccountLoader<'info, Dispute>,
    #[account(mut)]
    pub challenger: Signer<'info>,
    /// The challenger's account the bond comes from.
    #[account(
        mut,
        constraint = challenger_token.mint == escrow.mint @ MarketError::WrongMint,
        constraint = challenger_token.owner == challenger.key() @ MarketError::WrongAuthority,
    )]
    pub challenger_token: Box<Account<'info, TokenAccount>>,
    /// Where the bond (and any award) is paid back: a token account of the stake mint.
    #[account(
        constraint = payout.mint == escrow.mint @ MarketError::WrongMint,
        constraint = payout.key() != escrow.key() @ MarketError::WrongTokenAccount,
    )]
    pub payout: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl OpenDispute<'_> {
    /// A held verdict of the kind's side, in the window, of a job the program can referee.
    pub fn validate(&self, args: &OpenDisputeArgs) -> Result<()> {
        let task = &self.task;
        let majority = task.tally().majority;
        require!(
            matches!(args.kind, DISPUTE_RESULT_WRONG | DISPUTE_CLAIMS_FALSE),
            MarketError::InvalidDisputeKind
        );
        require!(task.held, MarketError::NotDisputable);
        require!(!overturned(majority), MarketError::VerdictOverturned);
        // kind 1 against an Accepted verdict, or a served one (PROTOCOL §8.11: decided on its
        // content once published); kind 2 against a Rejected one by INVALID seats
        let against = if args.kind == DISPUTE_RESULT_WRONG {
            matches!(majority, VOTE_VALID | VERDICT_SERVED)
        } else {
            majority == VOTE_INVALID
        };
        require!(against, MarketError::NotDisputable);
        require!(
            Clock::get()?.slot <= task.dispute_deadline,
            MarketError::DisputeWindowClosed
        );
        let job = JobSpec::decode(&task.job).map_err(|_| error!(MarketError::InvalidJobSpec))?;
        require!(
            dispute::refereed(&job, task.dispute_window),
            MarketError::DisputeNotSupported
        );
        if args.kind == DISPUTE_RESULT_WRONG {
            require!(
                dispute::in_range(&job, args.tile, args.element),
                MarketError::ElementOutOfRange
            );
        }
        Ok(())
    }
}

pub fn handler(mut ctx: Context<OpenDispute>, args: OpenDisputeArgs) -> Result<()> {
    let now = Clock::get()?.slot;
    let a = &mut ctx.accounts;
    let bond = a.task.verifier_bond.max(1);
    transfer::from_wallet(
        &a.token_program,
        &a.challenger_token,
        &a.escrow,
        &a.challenger,
        bond,
    )?;
    let answer_deadline = math::add(now, a.task.dispute_window as u64)?;
    let task_key = a.task.key();
    a.task.dispute_nonce = a
        .task
        .dispute_nonce
        .checked_add(1)
        .ok_or(MarketError::MathOverflow)?;
    let nonce = a.task.dispute_nonce;
    {
        let mut d = a.dispute.load_init()?;
        d.version = ACCOUNT_VERSION;
        d.kind = args.kind;
        d.state = DISPUTE_OPEN;
        d.bump = ctx.bumps.dispute;
        d.task = task_key;
        d.challenger = a.challenger.key();
        d.payout = a.payout.key();
        d.bond = bond;
        d.opened_slot = now;
        d.answer_deadline = answer_deadline;
        d.nonce = nonce;
        if args.kind == DISPUTE_RESULT_WRONG {
            d.tile = args.tile;
            d.element = args.element;
        }
    }
    let task = &mut a.task;
    task.escrow_balance = math::add(task.escrow_balance, bond)?;
    task.disputes_open = task
        .disputes_open
        .checked_add(1)
        .ok_or(MarketError::MathOverflow)?;
    emit!(DisputeOpened {
        task: task_key,
        challenger: a.challenger.key(),
        kind: args.kind,
        tile: args.tile,
        element: args.element,
        bond,
        answer_deadline,
    });
    Ok(())
}
