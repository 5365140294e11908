//! `close_task`: anyone closes a finished task whose votes are all settled: the client gets
//! its refund, rounding dust goes to the treasury through the provider's node, and the escrow
//! and task accounts are closed with their rent returned to the client.
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
    #[account(mut, address = task.client_token @ MarketError::WrongTokenAccount)]
    pub client_token: Box<Account<'info, TokenAccount>>,
    /// The provider's node, when the task had one and dust remains.
    #[account(mut)]
    pub provider_node: Option<Box<Account<'info, Node>>>,
    /// The provider's vault, with `provider_node`.
    #[account(mut)]
    pub provider_vault: Option<Box<Account<'info, TokenAccount>>>,
    pub token_program: Program<'info, Token>,
}

impl CloseTask<'_> {
    /// Finished, every vote settled.
    pub fn validate(&self) -> Result<()> {
        require!(self.task.status.is_terminal(), MarketError::TaskNotFinished);
        require!(self.task.open_votes == 0, MarketError::VotesOutstanding);
        Ok(())
    }
}

pub fn handler(mut ctx: Context<CloseTask>) -> Result<()> {
    let a = &mut ctx.accounts;
    let mut refund = a.task.client_refund()?;
    // tokens beyond the refund: rounding dust of the verifiers' shares (or tokens sent to the
    // escrow from outside). They go to the treasury through the provider's node.
    let leftover = math::sub(a.escrow.amount, refund)?;
    let mut dust = 0;
    if leftover > 0 && a.task.provider != Pubkey::default() {
        let (Some(node), Some(vault)) = (a.provider_node.as_mut(), a.provider_vault.as_ref())
        else {
            return err!(MarketError::MissingProviderAccounts);
        };
        require_keys_eq!(node.key(), a.task.provider, MarketError::NotTaskProvider);
        let vault_key = Pubkey::create_program_address(
            &[SEED_VAULT, node.key().as_ref(), &[node.vault_bump]],
            &crate::ID,
        )
        .map_err(|_| MarketError::WrongTokenAccount)?;
        require_keys_eq!(vault.key(), vault_key, MarketError::WrongTokenAccount);
        let id = a.task.task_id.to_le_bytes();
        let bump = [a.task.bump];
        transfer::from_pda(
            &a.token_program,
            &a.escrow,
            vault,
            a.task.to_account_info(),
            &a.task.signer_seeds(&id, &bump),
            leftover,
        )?;
        node.fees_due = math::add(node.fees_due, leftover)?;
        dust = leftover;
    } else {
        refund = math::add(refund, leftover)?;
    }
    let id = a.task.task_id.to_le_bytes();
    let bump = [a.task.bump];
    let seeds = a.task.signer_seeds(&id, &bump);
    transfer::from_pda(
        &a.token_program,
        &a.escrow,
        &a.client_token,
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
        status: a.task.status as u8,
        refunded: refund,
        dust_to_treasury: dust
    });
    Ok(())
}
