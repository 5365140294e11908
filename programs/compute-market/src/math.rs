//! Checked token arithmetic: every amount goes through these, never through bare operators.
use anchor_lang::prelude::*;

use crate::{constants::BPS, errors::MarketError};

/// `amount × bps / 10 000`, rounded down, computed in `u128`.
pub fn bps_of(amount: u64, bps: u64) -> Result<u64> {
    let v = (amount as u128)
        .checked_mul(bps as u128)
        .ok_or(MarketError::MathOverflow)?
        / BPS as u128;
    u64::try_from(v).map_err(|_| error!(MarketError::MathOverflow))
}

/// A penalty of `bps` on `bond`: `bps_of(bond, bps)`, but at least one unit whenever a bond is
/// at stake and never more than the bond (PROTOCOL §4.4: every penalty bites, even on a bond
/// of one unit).
pub fn penalty(bond: u64, bps: u64) -> Result<u64> {
    Ok(bps_of(bond, bps)?.max(1).min(bond))
}

/// `a + b`, or [`MarketError::MathOverflow`].
pub fn add(a: u64, b: u64) -> Result<u64> {
    a.checked_add(b)
        .ok_or_else(|| error!(MarketError::MathOverflow))
}

/// `a − b`, or [`MarketError::MathOverflow`] on underflow.
pub fn sub(a: u64, b: u64) -> Result<u64> {
    a.checked_sub(b)
        .ok_or_else(|| error!(MarketError::MathOverflow))
}

/// `a × b`, or [`MarketError::MathOverflow`].
pub fn mul(a: u64, b: u64) -> Result<u64> {
    a.checked_mul(b)
        .ok_or_else(|| error!(MarketError::MathOverflow))
}

/// Splits `total` equally among `n` (≥ 1): (share, dust) with `share × n + dust = total`.
pub fn split(total: u64, n: u64) -> Result<(u64, u64)> {
    require!(n > 0, MarketError::MathOverflow);
    let share = total / n;
    Ok((share, sub(total, mul(share, n)?)?))
}
