//! SPL-token transfers: from a signing wallet, or out of a PDA-owned vault or escrow.
use anchor_lang::prelude::*;
use anchor_spl::token::{self, CloseAccount, Token, TokenAccount, Transfer};

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
