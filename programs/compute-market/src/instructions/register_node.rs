//! `register_node`: a wallet joins a market as provider and/or verifier, with its own vault.
use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::{constants::*, errors::MarketError, events::NodeRegistered, state::*};

/// Arguments of `register_node`.
#[derive(AnchorSerialize, AnchorDeserialize, Clone)]
pub struct RegisterNodeArgs {
    /// Role bits: 1 provider, 2 verifier, 3 both.
    pub roles: u8,
    /// Declared hardware.
    pub hardware: Hardware,
}

#[derive(Accounts)]
pub struct RegisterNode<'info> {
    #[account(seeds = [SEED_CONFIG], bump = config.bump, has_one = stake_mint @ MarketError::WrongMint)]
    pub config: Account<'info, Config>,
    #[account(mut, seeds = [SEED_MARKET, &market.id.to_le_bytes()], bump = market.bump)]
    pub market: Account<'info, Market>,
    #[account(
        init, payer = authority, space = 8 + Node::INIT_SPACE,
        seeds = [SEED_NODE, authority.key().as_ref()], bump,
    )]
    pub node: Account<'info, Node>,
    #[account(
        init, payer = authority, seeds = [SEED_VAULT, node.key().as_ref()], bump,
        token::mint = stake_mint, token::authority = node,
    )]
    pub vault: Account<'info, TokenAccount>,
    pub stake_mint: Account<'info, Mint>,
    #[account(mut)]
    pub authority: Signer<'info>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl RegisterNode<'_> {
    /// Roles are a non-empty subset; a provider meets the market's hardware minimum.
    pub fn validate(&self, args: &RegisterNodeArgs) -> Result<()> {
        require!(
            args.roles != 0 && args.roles & !(ROLE_PROVIDER | ROLE_VERIFIER) == 0,
            MarketError::InvalidRoles
        );
        if args.roles & ROLE_PROVIDER != 0 {
            require!(
                args.hardware.gflops >= self.market.min_gflops
                    && args.hardware.memory_gb >= self.market.min_memory_gb,
                MarketError::HardwareBelowMarketMinimum
            );
        }
        Ok(())
    }
}

pub fn handler(ctx: Context<RegisterNode>, args: RegisterNodeArgs) -> Result<()> {
    let market_key = ctx.accounts.market.key();
    let node = &mut ctx.accounts.node;
    let now = Clock::get()?.slot;
    node.set_inner(Node {
        version: ACCOUNT_VERSION,
        authority: ctx.accounts.authority.key(),
        market: market_key,
        roles: args.roles,
        free: 0,
        bonded: 0,
        pending_unstake: 0,
        unlock_slot: 0,
        earned: 0,
        fees_due: 0,
        activating: 0,
        activating_slot: now,
        settled_slot: now,
        stake_debt: 0,
        hardware: args.hardware,
        tasks_completed: 0,
        verifications: 0,
        times_slashed: 0,
        registered_slot: now,
        bump: ctx.bumps.node,
        vault_bump: ctx.bumps.vault,
        endpoint: [0; MAX_ENDPOINT_LEN],
        endpoint_len: 0,
        reserved: [0; 7],
    });
    let market = &mut ctx.accounts.market;
    if args.roles & ROLE_PROVIDER != 0 {
        market.providers = market
            .providers
            .checked_add(1)
            .ok_or(MarketError::MathOverflow)?;
    }
    if args.roles & ROLE_VERIFIER != 0 {
        market.verifiers = market
            .verifiers
            .checked_add(1)
            .ok_or(MarketError::MathOverflow)?;
    }
    emit!(NodeRegistered {
        node: node.key(),
        authority: node.authority,
        market: market_key,
        roles: args.roles,
        gflops: args.hardware.gflops,
        memory_gb: args.hardware.memory_gb,
        bandwidth_gbps: args.hardware.bandwidth_gbps,
        region: args.hardware.region,
    });
    Ok(())
}
