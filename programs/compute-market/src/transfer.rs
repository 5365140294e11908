//! SPL-token transfers: from a signing wallet, or out of a PDA-owned vault or escrow.
use anchor_lang::prelude::*;
use anchor_spl::token::{self, CloseAccount, Token, TokenAccount, Transfer};

use crate::errors::MarketError;

/// `amount` from a wallet's token account, signed by the wallet.
pub fn from_wallet<'info>(
    token_program: &Program<'info, Token>,
    from: &Account<'info, TokenAccount>,
    to: &Account<'info, TokenAccount>,
    authority: &Signer<'info>,
    amount: u64,
) -> Result<()> {
    token::transfer(
        CpiContext::new(
            token_program.key(),
            Transfer {
                from: from.to_account_info(),
                to: to.to_account_info(),
                authority: authority.to_account_info(),
            },
        ),
        amount,
    )
}

/// `amount` out of a PDA-owned token account, signed by the PDA. No-op for 0.
pub fn from_pda<'info>(
    token_program: &Program<'info, Token>,
    from: &Account<'info, TokenAccount>,
    to: &Account<'info, TokenAccount>,
    pda: AccountInfo<'info>,
    seeds: &[&[u8]],
    amount: u64,
) -> Result<()> {
    from_pda_to_info(
        token_program,
        from,
        to.to_account_info(),
        pda,
        seeds,
        amount,
    )
}

/// [`from_pda`] into an account checked by the caller (the token program checks it again).
pub fn from_pda_to_info<'info>(
    token_program: &Program<'info, Token>,
    from: &Account<'info, TokenAccount>,
    to: AccountInfo<'info>,
    pda: AccountInfo<'info>,
    seeds: &[&[u8]],
    amount: u64,
) -> Result<()> {
    if amount == 0 {
        return Ok(());
    }
    token::transfer(
        CpiContext::new_with_signer(
            token_program.key(),
            Transfer {
                from: from.to_account_info(),
                to,
                authority: pda,
            },
            &[seeds],
        ),
        amount,
    )
}

/// Whether `info` is a live token account of `mint` (so a transfer into it cannot fail).
pub fn live_token_account(info: &AccountInfo, mint: &Pubkey) -> bool {
    if info.owner != &anchor_spl::token::ID || info.lamports() == 0 {
        return false;
    }
    let Ok(data) = info.try_borrow_data() else {
        return false;
    };
    match TokenAccount::try_deserialize(&mut &data[..]) {
        Ok(t) => t.mint == *mint && !t.is_frozen(),
        Err(_) => false,
    }
}

/// Where a payment to `owner` goes (PROTOCOL §3.7): the account it named, `primary`, while that
/// is a live token account of `mint`; else `owner`'s associated token account of the mint,
/// passed as `ata` (address checked; anyone can create it). So closing the account it named
/// never loses a payment, nor blocks the settlement that makes it.
pub fn destination<'info>(
    primary: AccountInfo<'info>,
    ata: Option<AccountInfo<'info>>,
    owner: &Pubkey,
    mint: &Pubkey,
) -> Result<AccountInfo<'info>> {
    if live_token_account(&primary, mint) {
        return Ok(primary);
    }
    let ata = ata.ok_or(MarketError::ClientRefundAccountClosed)?;
    require_keys_eq!(
        ata.key(),
        anchor_spl::associated_token::get_associated_token_address(owner, mint),
        MarketError::WrongTokenAccount
    );
    require!(
        live_token_account(&ata, mint),
        MarketError::ClientRefundAccountClosed
    );
    Ok(ata)
}

/// Pays `amount` out of `task`'s escrow to `owner` (at the account it named, `primary`, or its
/// associated token account `ata` if that one is gone: [`destination`]), signed by the task,
/// and takes it off the task's `escrow_balance`.
pub fn from_escrow<'info>(
    token_program: &Program<'info, Token>,
    escrow: &Account<'info, TokenAccount>,
    task: &mut Account<'info, crate::state::Task>,
    primary: AccountInfo<'info>,
    ata: Option<AccountInfo<'info>>,
    owner: &Pubkey,
    amount: u64,
) -> Result<()> {
    let to = destination(primary, ata, owner, &escrow.mint)?;
    let id = task.task_id.to_le_bytes();
    let bump = [task.bump];
    from_pda_to_info(
        token_program,
        escrow,
        to,
        task.to_account_info(),
        &task.signer_seeds(&id, &bump),
        amount,
    )?;
    task.escrow_balance = crate::math::sub(task.escrow_balance, amount)?;
    Ok(())
}

/// Closes an empty PDA-owned token account, rent to `destination`.
pub fn close_pda_account<'info>(
    token_program: &Program<'info, Token>,
    account: &Account<'info, TokenAccount>,
    destination: AccountInfo<'info>,
    pda: AccountInfo<'info>,
    seeds: &[&[u8]],
) -> Result<()> {
    token::close_account(CpiContext::new_with_signer(
        token_program.key(),
        CloseAccount {
            account: account.to_account_info(),
            destination,
            authority: pda,
        },
        &[seeds],
    ))
}
