//! `close_task`: anyone closes a finished task whose votes are all settled: the client gets
//! its refund, the escrow and task accounts are closed and their rent returned to the client.
//!
//! It cannot be blocked by anything a participant does afterwards (PROTOCOL §3, Close): it
//! needs no provider or verifier account. Rounding dust never reaches the escrow's end (it is
//! booked at finalize and at the losers' settlements), so the only tokens beyond the refund are
//! ones a stranger sent in: they go to the treasury, whose account is then required (and
//! writable only then); if the treasury's owner has closed that account, they go to the client.
//! Should the client have closed its own refund account, the refund goes to the client's
//! associated token account of the stake mint instead (anyone can create it).
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::{constants::*, errors::MarketError, events::TaskClosed, math, state::*, transfer};

#[derive(Accounts)]
pub struct CloseTask<'info> {
    #[account(
        mut, close = client,
        seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump,
    )]
    pub task: Box<Account<'info, Task>>,
    #[account(mut, seeds = [SEED_ESCROW, task.key().as_ref()], bump = task.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    /// CHECK: receives the rent; must be the task's client.
    #[account(mut, address = task.client @ MarketError::WrongAuthority)]
    pub client: UncheckedAccount<'info>,
    /// CHECK: the task's refund account; read as a token account in the handler (its owner
    /// may have closed it).
    #[account(mut, address = task.client_token @ MarketError::WrongTokenAccount)]
    pub client_token: UncheckedAccount<'info>,
    /// CHECK: only when `client_token` is closed: the client's associated token account of the
    /// stake mint (address derived and checked in the handler).
    #[account(mut)]
    pub client_ata: Option<UncheckedAccount<'info>>,
    /// Read only: names the treasury.
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    /// CHECK: the config's treasury, only when the escrow holds more than the refund; read as
    /// a token account in the handler (it may have been closed by its owner).
    #[account(mut, address = config.treasury @ MarketError::WrongTreasury)]
    pub treasury: Option<UncheckedAccount<'info>>,
    pub token_program: Program<'info, Token>,
}

impl CloseTask<'_> {
    /// Finished, every vote settled.
    pub fn validate(&self) -> Result<()> {
        require!(self.task.status.is_terminal(), MarketError::TaskNotFinished);
        require!(!self.task.held, MarketError::TaskNotConcluded);
        require!(self.task.open_votes == 0, MarketError::VotesOutstanding);
        require!(
            self.task.disputes_open == 0 && self.task.games_open == 0 && !self.task.award_pending,
            MarketError::DisputeOpen
        );
        Ok(())
    }
}

pub fn handler(mut ctx: Context<CloseTask>) -> Result<()> {
    let a = &mut ctx.accounts;
    let mint = a.escrow.mint;
    // where the refund goes: the task's refund account, or the client's associated account
    let refund_to = transfer::destination(
        a.client_token.to_account_info(),
        a.client_ata.as_ref().map(|x| x.to_account_info()),
        &a.task.client,
        &mint,
    )?;
    let mut refund = a.task.client_refund()?;
    let leftover = math::sub(a.escrow.amount, refund)?;
    let mut to_treasury = 0;
    if leftover > 0 {
        let Some(treasury) = a.treasury.as_ref() else {
            return err!(MarketError::TreasuryRequired);
        };
        let info = treasury.to_account_info();
        if transfer::live_token_account(&info, &a.escrow.mint) {
            let id = a.task.task_id.to_le_bytes();
            let bump = [a.task.bump];
            transfer::from_pda_to_info(
                &a.token_program,
                &a.escrow,
                info,
                a.task.to_account_info(),
                &a.task.signer_seeds(&id, &bump),
                leftover,
            )?;
            to_treasury = leftover;
        } else {
            refund = math::add(refund, leftover)?;
        }
    }
    let id = a.task.task_id.to_le_bytes();
    let bump = [a.task.bump];
    let seeds = a.task.signer_seeds(&id, &bump);
    transfer::from_pda_to_info(
        &a.token_program,
        &a.escrow,
        refund_to,
        a.task.to_account_info(),
        &seeds,
        refund,
    )?;
    transfer::close_pda_account(
        &a.token_program,
        &a.escrow,
        a.client.to_account_info(),
        a.task.to_account_info(),
        &seeds,
    )?;
    a.task.escrow_balance = 0;
    emit!(TaskClosed {
        task: a.task.key(),
        status: a.task.status,
        refunded: refund,
        leftover_to_treasury: to_treasury,
    });
    Ok(())
}
