//! Token amounts as people type and read them (as `spl-token` does): whole tokens with a
//! decimal point (`1`, `0.5`), converted to and from base units exactly with the stake mint's
//! decimals (no floating point); scripts that count in base units say `--base-units`.

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::chain::{decode, Chain, ChainExt};

/// A UI amount (`1000`, `0.5`: whole tokens, a decimal point, at most `decimals` digits after
/// it) in base units, exactly. Zero is allowed (callers that need more say so); a sign, an
/// exponent or a second point is refused in words.
pub fn parse_ui(s: &str, decimals: u8) -> Result<u64> {
    let (whole, frac) = ui_parts(s)?;
    if frac.len() > usize::from(decimals) {
        bail!(
            "the amount {s:?} has {} digits after the point; the stake token has {decimals} \
             decimals (its smallest unit is {})",
            frac.len(),
            format_ui(1, decimals)
        );
    }
    let scale = 10u64
        .checked_pow(u32::from(decimals))
        .context("the mint's decimals")?;
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole
            .parse()
            .ok()
            .with_context(|| format!("the amount {s:?} is more tokens than a u64 holds"))?
    };
    let frac: u64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<width$}", width = usize::from(decimals)).parse()?
    };
    whole
        .checked_mul(scale)
        .and_then(|w| w.checked_add(frac))
        .with_context(|| format!("the amount {s:?} is more base units than a u64 holds"))
}

/// A UI amount's whole and fractional digits, its shape checked (no mint needed): a sign, an
/// exponent, a second point or a letter is refused in words.
pub fn ui_parts(s: &str) -> Result<(&str, &str)> {
    let t = s.trim();
    if t.starts_with('-') {
        bail!("the amount {s:?} is negative: give a number of tokens, 0 or more (e.g. 1 or 0.5)");
    }
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && frac.is_empty()) || !digits(whole) || !digits(frac) {
        bail!("the amount {s:?} is not a number of tokens (digits, at most one '.', e.g. 1000 or 0.5)");
    }
    Ok((whole, frac))
}

/// An amount in base units as typed by a script (`--base-units`): digits only.
pub fn parse_base(s: &str) -> Result<u64> {
    let t = s.trim();
    if t.starts_with('-') {
        bail!("the amount {s:?} is negative: give a number of base units, 0 or more");
    }
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        bail!(
            "the amount {s:?} is not a whole number of base units (--base-units takes digits \
             only; without it, amounts are tokens such as 0.5)"
        );
    }
    t.parse()
        .ok()
        .with_context(|| format!("the amount {s:?} is more base units than a u64 holds"))
}

/// An amount as typed: tokens with the mint's `decimals`, or base units when `decimals` is
/// `None` (`--base-units`).
pub fn parse_typed(s: &str, decimals: Option<u8>) -> Result<u64> {
    match decimals {
        Some(d) => parse_ui(s, d),
        None => parse_base(s),
    }
}

/// `base` units as a UI amount: whole tokens, a point and the digits it needs (`1000`, `0.5`).
pub fn format_ui(base: u64, decimals: u8) -> String {
    let scale = 10u128.pow(u32::from(decimals));
    let (whole, frac) = (u128::from(base) / scale, u128::from(base) % scale);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:0width$}", width = usize::from(decimals));
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// An amount in JSON as `spl-token` gives one: base units and tokens, both as strings (exact).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Tokens {
    /// Base units.
    pub amount: String,
    /// Tokens (with the mint's decimals).
    pub ui_amount: String,
}

impl Tokens {
    /// `base` units of a mint with `decimals`.
    pub fn new(base: u64, decimals: u8) -> Self {
        Tokens {
            amount: base.to_string(),
            ui_amount: format_ui(base, decimals),
        }
    }
}

/// The stake token: the program config's mint and its decimals, read from chain.
pub fn stake_token(chain: &dyn Chain) -> Result<(Pubkey, u8)> {
    let mint = chain
        .decoded::<compute_market::state::Config>(&compute_market::pda::config())?
        .context("the program has no config on this cluster: run keeper init first")?
        .stake_mint;
    let data = chain
        .account(&mint)?
        .with_context(|| format!("the stake mint {mint} does not exist on this cluster"))?;
    let state: anchor_spl::token::Mint =
        decode(&data).with_context(|| format!("the stake mint {mint} is not an SPL token mint"))?;
    Ok((mint, state.decimals))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_convert_exactly_both_ways_and_bad_input_is_named() {
        assert_eq!(parse_ui("1", 6).unwrap(), 1_000_000);
        assert_eq!(parse_ui("0.5", 6).unwrap(), 500_000);
        assert_eq!(parse_ui(".000001", 6).unwrap(), 1);
        assert_eq!(parse_ui("1000", 0).unwrap(), 1000);
        assert_eq!(format_ui(1_500_000, 6), "1.5");
        assert_eq!(format_ui(1, 6), "0.000001");
        assert_eq!(format_ui(1000, 0), "1000");
        for (bad, says) in [
            ("-5", "is negative"),
            ("1e3", "is not a number of tokens"),
            ("1.2.3", "is not a number of tokens"),
            (
                "0.0000001",
                "the stake token has 6 decimals (its smallest unit is 0.000001)",
            ),
            ("99999999999999999999", "more tokens than a u64 holds"),
            ("18446744073709.551616", "more base units than a u64 holds"),
        ] {
            let e = parse_ui(bad, 6).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(parse_base("1").unwrap(), 1);
        assert!(parse_base("0.5")
            .unwrap_err()
            .to_string()
            .contains("--base-units takes digits only"));
        assert!(parse_base("-1")
            .unwrap_err()
            .to_string()
            .contains("negative"));
        assert_eq!(
            Tokens::new(2_500_000, 6),
            Tokens {
                amount: "2500000".into(),
                ui_amount: "2.5".into()
            }
        );
    }
}
