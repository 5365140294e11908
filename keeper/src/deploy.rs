//! `keeper init` and `keeper fund`: the deploy/initialize steps for any cluster (localnet,
//! devnet), idempotent — run them again and they reuse what exists.
//!
//! 1. the program must be deployed at its id, upgradeable, with the payer as its upgrade
//!    authority (`solana program deploy`, or the validator's `--upgradeable-program`): only the
//!    upgrade authority may initialize the config;
//! 2. the stake mint: the config's if it exists, else `--mint`, else a new mint whose authority
//!    is the payer (its keypair saved next to the config file), never with a freeze authority;
//! 3. the treasury: the payer's associated token account of the mint;
//! 4. the config (with the given cooldown) and the market, each created only if missing. An
//!    existing config must have the payer as admin, the expected mint and the expected
//!    treasury: anything else means someone else initialized this deployment, and init
//!    refuses, naming what differs.

use anchor_lang::prelude::Pubkey;
use anchor_lang::solana_program::system_instruction;
use anchor_spl::{associated_token, token};
use anyhow::{bail, Context, Result};
use compute_market::{
    client,
    instructions::InitializeConfigArgs,
    pda,
    state::{MarketArgs, Params},
};
use serde::Serialize;
use solana_keypair::Keypair;
use solana_signer::Signer;

use crate::{
    chain::{must, Chain},
    cli,
};

/// What `keeper init` sets up.
pub struct InitOptions {
    /// Use this existing mint (when no config exists yet).
    pub mint: Option<Pubkey>,
    /// Where a newly created mint's keypair is written.
    pub mint_keypair_out: std::path::PathBuf,
    /// Config parameters (when the config is created).
    pub params: Params,
    /// Parameter update delay, slots.
    pub update_delay: u64,
    /// The market to create if missing.
    pub market: MarketArgs,
}

/// What exists after `keeper init`, and what this run created.
#[derive(Clone, Debug, Serialize)]
pub struct InitReport {
    /// The program id.
    pub program: String,
    /// The stake mint.
    pub stake_mint: String,
    /// The treasury token account.
    pub treasury: String,
    /// The config PDA.
    pub config: String,
    /// The market PDA.
    pub market: String,
    /// What this run created (`mint`, `config`, `market`); empty when everything existed.
    pub created: Vec<String>,
}

/// What `keeper fund` minted.
#[derive(Clone, Debug, Serialize)]
pub struct Funded {
    /// The wallet funded.
    pub owner: String,
    /// Its associated token account.
    pub token_account: String,
    /// Tokens minted.
    pub minted: u64,
    /// The account's balance afterwards.
    pub balance: u64,
    /// The `mint_to` transaction's signature (base58; empty where the chain cannot say).
    pub signature: String,
}

/// Runs the idempotent initialization; returns what exists afterwards.
pub fn init(chain: &dyn Chain, admin: &Keypair, o: &InitOptions) -> Result<InitReport> {
    if chain.account(&compute_market::ID)?.is_none() {
        bail!(
            "the program {} is not deployed on this cluster: `solana program deploy --program-id keys/compute_market-keypair.json <compute_market.so>` (or start the validator with --upgradeable-program)",
            compute_market::ID
        );
    }
    let mut created: Vec<String> = vec![];
    let existing = cli::config(chain).ok();
    match &existing {
        Some(cfg) => check_existing_config(cfg, &admin.pubkey(), o.mint)?,
        None => check_upgrade_authority(chain, &admin.pubkey())?,
    }
    let mint = match existing.as_ref() {
        Some(cfg) => cfg.stake_mint,
        None => match o.mint {
            Some(m) => m,
            None => {
                let mint = Keypair::new();
                let rent = chain.rent_exempt(82)?;
                let ixs = [
                    system_instruction::create_account(
                        &admin.pubkey(),
                        &mint.pubkey(),
                        rent,
                        82,
                        &token::ID,
                    ),
                    token::spl_token::instruction::initialize_mint2(
                        &token::ID,
                        &mint.pubkey(),
                        &admin.pubkey(),
                        None,
                        6,
                    )?,
                ];
                must("create mint", chain.send(&ixs, admin, &[&mint])?)?;
                if let Some(dir) = o.mint_keypair_out.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::write(
                    &o.mint_keypair_out,
                    serde_json::to_string(&mint.to_bytes().to_vec())?,
                )
                .with_context(|| {
                    format!(
                        "saving the mint keypair to {}",
                        o.mint_keypair_out.display()
                    )
                })?;
                created.push("mint".into());
                mint.pubkey()
            }
        },
    };
    if let Some(cfg) = &existing {
        let expected = associated_token::get_associated_token_address(&admin.pubkey(), &mint);
        if cfg.treasury != expected {
            bail!(
                "the config on this cluster has treasury {} but this admin's treasury would be {expected}: refusing to use a config initialized by someone else",
                cfg.treasury
            );
        }
    }
    let treasury = ensure_ata(chain, admin, &admin.pubkey(), &mint)?;
    if existing.is_none() {
        let args = InitializeConfigArgs {
            params: o.params,
            update_delay: o.update_delay,
        };
        must(
            "initialize_config",
            chain.send(
                &[client::initialize_config(
                    admin.pubkey(),
                    mint,
                    treasury,
                    args,
                )],
                admin,
                &[],
            )?,
        )?;
        created.push("config".into());
    }
    let market = pda::market(o.market.id);
    if chain.account(&market)?.is_none() {
        must(
            "create_market",
            chain.send(
                &[client::create_market(admin.pubkey(), o.market.clone())],
                admin,
                &[],
            )?,
        )?;
        created.push("market".into());
    }
    Ok(InitReport {
        program: compute_market::ID.to_string(),
        stake_mint: mint.to_string(),
        treasury: treasury.to_string(),
        config: pda::config().to_string(),
        market: market.to_string(),
        created,
    })
}

/// Only the program's upgrade authority may initialize the config: say so before trying.
fn check_upgrade_authority(chain: &dyn Chain, admin: &Pubkey) -> Result<()> {
    let data = chain.account(&pda::program_data())?.unwrap_or_default();
    // bincode UpgradeableLoaderState::ProgramData: tag 3 (u32), slot (u64), Option<Pubkey>
    if data.len() < 45 || data[..4] != 3u32.to_le_bytes() {
        bail!(
            "the program {} is not upgradeable (no program-data account): deploy it with `solana program deploy` or the validator's --upgradeable-program, so that its upgrade authority can initialize it",
            compute_market::ID
        );
    }
    let authority = (data[12] == 1).then(|| Pubkey::try_from(&data[13..45]).expect("32 bytes"));
    if authority != Some(*admin) {
        bail!(
            "only the program's upgrade authority may initialize the config: it is {}, this keypair is {admin}",
            authority.map_or("none (the program is immutable)".into(), |a| a.to_string())
        );
    }
    Ok(())
}

/// Refuses an existing config that this admin did not create: another admin, or another mint
/// than the one asked for.
fn check_existing_config(
    cfg: &compute_market::state::Config,
    admin: &Pubkey,
    mint: Option<Pubkey>,
) -> Result<()> {
    if cfg.admin != *admin {
        bail!(
            "the config on this cluster was initialized by admin {}, not by this keypair ({admin}): refusing to reuse it (someone else initialized this deployment)",
            cfg.admin
        );
    }
    if let Some(m) = mint {
        if cfg.stake_mint != m {
            bail!(
                "the config on this cluster has stake mint {}, not the --mint {m} asked for",
                cfg.stake_mint
            );
        }
    }
    Ok(())
}

/// The associated token account of `owner` for `mint`, created if missing (paid by `payer`).
pub fn ensure_ata(
    chain: &dyn Chain,
    payer: &Keypair,
    owner: &Pubkey,
    mint: &Pubkey,
) -> Result<Pubkey> {
    let ata = associated_token::get_associated_token_address(owner, mint);
    if chain.account(&ata)?.is_none() {
        let ix = associated_token::spl_associated_token_account::instruction::create_associated_token_account_idempotent(
            &payer.pubkey(),
            owner,
            mint,
            &token::ID,
        );
        must("create token account", chain.send(&[ix], payer, &[])?)?;
    }
    Ok(ata)
}

/// Mints `amount` stake tokens to `owner`'s associated token account (the payer must be the
/// mint authority: localnet and devnet set-ups).
pub fn fund(chain: &dyn Chain, authority: &Keypair, owner: &Pubkey, amount: u64) -> Result<Funded> {
    let mint = cli::config(chain)?.stake_mint;
    let ata = ensure_ata(chain, authority, owner, &mint)?;
    let ix = token::spl_token::instruction::mint_to(
        &token::ID,
        &mint,
        &ata,
        &authority.pubkey(),
        &[],
        amount,
    )?;
    let sent = must("mint_to", chain.send(&[ix], authority, &[])?)?;
    Ok(Funded {
        owner: owner.to_string(),
        token_account: ata.to_string(),
        minted: amount,
        balance: chain.token_balance(&ata)?,
        signature: sent.signature.unwrap_or_default(),
    })
}
