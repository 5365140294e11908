//! `withdraw`: pending unstake out of the vault after the cooldown. Its accounts, [`Payout`],
//! serve `claim_earnings` too.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::{constants::*, errors::MarketError, events::Withdrawn, state::*, transfer};

/// A node paying tokens out of its vault to a destination of its authority's choice.
#[derive(Accounts)]
pub struct Payout<'info> {
    #[account(
        mut, seeds = [SEED_NODE, authority.key().as_ref()], bump = node.bump,
        has_one = authority @ MarketError::WrongAuthority,
    )]
    pub node: Account<'info, Node>,
    #[account(mut, seeds = [SEED_VAULT, node.key().as_ref()], bump = node.vault_bump)]
    pub vault: Account<'info, TokenAccount>,
    #[account(mut, constraint = destination.mint == vault.mint @ MarketError::WrongMint)]
    pub destination: Account<'info, TokenAccount>,
    pub authority: Signer<'info>,
    pub token_program: Program<'info, Token>,
}

impl Payout<'_> {
    /// Moves `amount` from the vault to the destination, signed by the node PDA.
    pub fn pay(&self, amount: u64) -> Result<()> {
        let bump = [self.node.bump];
        transfer::from_pda(
            &self.token_program,
            &self.vault,
            &self.destination,
            self.node.to_account_info(),
            &self.node.signer_seeds(&bump),
            amount,
        )
    }

    /// Withdraw: something is pending and its cooldown has passed.
    pub fn validate_withdraw(&self) -> Result<()> {
        require!(
            self.node.pending_unstake > 0,
            MarketError::NothingToWithdraw
        );
        require!(
            Clock::get()?.slot >= self.node.unlock_slot,
            MarketError::CooldownNotElapsed
        );
        Ok(())
    }
}

pub fn handler(ctx: Context<Payout>) -> Result<()> {
    let amount = ctx.accounts.node.pending_unstake;
    ctx.accounts.node.pending_unstake = 0;
    let a = &ctx.accounts;
    a.pay(amount)?;
    emit!(Withdrawn {
        node: a.node.key(),
        amount,
        destination: a.destination.key()
    });
    Ok(())
}
