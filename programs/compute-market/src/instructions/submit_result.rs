//! `submit_result`: the provider commits the Merkle root of its output tiles and where they
//! are served; verification round 0 starts, with its stake snapshot taken now.
use anchor_lang::prelude::*;

use crate::{constants::*, errors::MarketError, events::ResultSubmitted, state::*};

/// Arguments of `submit_result`.
#[derive(AnchorSerialize, AnchorDeserialize, Clone)]
pub struct SubmitResultArgs {
    /// Merkle root over the output tiles (`compute_market_protocol::merkle`).
    pub result_root: [u8; 32],
    /// Where tiles and proofs are served (1..=128 bytes).
    pub result_uri: String,
}

#[derive(Accounts)]
pub struct SubmitResult<'info> {
    #[account(mut, seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    /// Read only: its verifier stake becomes the round's sortition denominator.
    #[account(
        seeds = [SEED_MARKET, &market.id.to_le_bytes()], bump = market.bump,
        constraint = market.key() == task.market @ MarketError::WrongMarket,
    )]
    pub market: Account<'info, Market>,
    #[account(
        seeds = [SEED_NODE, authority.key().as_ref()], bump = node.bump,
        has_one = authority @ MarketError::WrongAuthority,
    )]
    pub node: Account<'info, Node>,
    pub authority: Signer<'info>,
}

impl SubmitResult<'_> {
    /// Claimed by this node, before the deadline, non-empty root, bounded URI.
    pub fn validate(&self, args: &SubmitResultArgs) -> Result<()> {
        let task = &self.task;
        require!(
            task.status == TaskStatus::Claimed,
            MarketError::TaskNotClaimed
        );
        require_keys_eq!(task.provider, self.node.key(), MarketError::NotTaskProvider);
        require!(
            Clock::get()?.slot <= task.submit_deadline,
            MarketError::SubmitDeadlinePassed
        );
        require!(args.result_root != [0; 32], MarketError::EmptyResultRoot);
        require!(!args.result_uri.is_empty(), MarketError::UriEmpty);
        require!(
            args.result_uri.len() <= MAX_URI_LEN,
            MarketError::UriTooLong
        );
        Ok(())
    }
}

pub fn handler(ctx: Context<SubmitResult>, args: SubmitResultArgs) -> Result<()> {
    let now = Clock::get()?.slot;
    let task = &mut ctx.accounts.task;
    task.result_root = args.result_root;
    task.result_uri = [0; MAX_URI_LEN];
    task.result_uri[..args.result_uri.len()].copy_from_slice(args.result_uri.as_bytes());
    task.result_uri_len = args.result_uri.len() as u8;
    task.submit_slot = now;
    task.status = TaskStatus::Verifying;
    task.start_round(0, now, ctx.accounts.market.snapshot_stake(now))?;
    emit!(ResultSubmitted {
        task: task.key(),
        provider: task.provider,
        result_root: args.result_root,
        result_uri: args.result_uri,
        slot: now,
        join_deadline: task.join_deadline,
        commit_deadline: task.commit_deadline,
        reveal_deadline: task.reveal_deadline,
    });
    Ok(())
}
