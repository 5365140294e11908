//! `keeper node`: register, stake, unstake, withdraw, status.

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, Result};
use clap::Subcommand;
use compute_market::state::Hardware;
use compute_market_keeper::cli;
use serde_json::to_value;
use solana_signer::Signer;

use crate::context::{parse_address, select, Backend, Ctx};

/// Provider and verifier nodes.
#[derive(Subcommand, Debug)]
pub enum NodeCmd {
    /// Registers this keypair's node in a market.
    Register {
        /// Market id.
        #[arg(long)]
        market: Option<u16>,
        /// provider, verifier or both.
        #[arg(long, default_value = "both")]
        roles: String,
        /// Declared compute, G mul-adds per second (required unless --measure).
        #[arg(long, required_unless_present = "measure")]
        gflops: Option<u32>,
        /// Declared device memory, GB (required unless --measure).
        #[arg(long, required_unless_present = "measure")]
        memory_gb: Option<u32>,
        /// Declared memory bandwidth, GB/s.
        #[arg(long)]
        bandwidth_gbps: Option<u32>,
        /// Region code (continent·100 + zone; 0 = undeclared).
        #[arg(long, default_value_t = 0)]
        region: u16,
        /// Fill compute, memory and bandwidth from measurements on --backend (values given
        /// explicitly win).
        #[arg(long)]
        measure: bool,
        /// Backend measured by --measure.
        #[arg(long, value_enum, default_value_t = Backend::Auto)]
        backend: Backend,
    },
    /// Moves tokens from the wallet (associated token account) into the node's stake.
    Stake {
        /// Amount in tokens (`50`, `0.5`); base units with --base-units.
        #[arg(allow_hyphen_values = true, value_name = "TOKENS")]
        amount: String,
        /// Source token account [default: the associated token account].
        #[arg(long, value_parser = parse_address)]
        from: Option<Pubkey>,
    },
    /// Starts the cooldown for `amount` of free stake.
    Unstake {
        /// Amount in tokens (`50`, `0.5`); base units with --base-units.
        #[arg(allow_hyphen_values = true, value_name = "TOKENS")]
        amount: String,
    },
    /// Pays out pending unstake (after the cooldown) and earnings.
    Withdraw {
        /// Destination token account [default: the associated token account].
        #[arg(long, value_parser = parse_address)]
        to: Option<Pubkey>,
    },
    /// Shows a node [default: this keypair's].
    Status {
        /// The node's authority.
        #[arg(value_parser = parse_address)]
        authority: Option<Pubkey>,
    },
}

impl NodeCmd {
    /// Runs the command and prints its result.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        let kp = ctx.keypair()?;
        let chain = ctx.rpc();
        let v = match self {
            NodeCmd::Register {
                market: m,
                roles,
                gflops,
                memory_gb,
                bandwidth_gbps,
                region,
                measure,
                backend,
            } => {
                let measured = if measure {
                    Some(compute_market_keeper::bench::measure_hardware(
                        select(backend)?.as_ref(),
                    )?)
                } else {
                    None
                };
                let pick = |given: Option<u32>, m: fn(&Hardware) -> u32| {
                    given.or(measured.as_ref().map(m)).unwrap_or(0)
                };
                let hardware = Hardware {
                    gflops: pick(gflops, |h| h.gflops),
                    memory_gb: pick(memory_gb, |h| h.memory_gb),
                    bandwidth_gbps: pick(bandwidth_gbps, |h| h.bandwidth_gbps),
                    region,
                };
                if let Some(h) = &measured {
                    tracing::info!(
                        gflops = h.gflops,
                        memory_gb = h.memory_gb,
                        bandwidth_gbps = h.bandwidth_gbps,
                        "measured"
                    );
                }
                to_value(cli::node_register(
                    chain.as_ref(),
                    &kp,
                    ctx.market(m),
                    parse_roles(&roles)?,
                    hardware,
                )?)?
            }
            NodeCmd::Stake { amount, from } => {
                let amount = ctx.amount(&amount, "the amount to stake")?;
                to_value(cli::node_stake(chain.as_ref(), &kp, amount, from)?)?
            }
            NodeCmd::Unstake { amount } => {
                let amount = ctx.amount(&amount, "the amount to unstake")?;
                to_value(cli::node_unstake(chain.as_ref(), &kp, amount)?)?
            }
            NodeCmd::Withdraw { to } => to_value(cli::node_withdraw(chain.as_ref(), &kp, to)?)?,
            NodeCmd::Status { authority } => to_value(cli::node_status(
                chain.as_ref(),
                &authority.unwrap_or_else(|| kp.pubkey()),
            )?)?,
        };
        ctx.print(&v)
    }
}

fn parse_roles(s: &str) -> Result<u8> {
    Ok(match s {
        "provider" => 1,
        "verifier" => 2,
        "both" => 3,
        other => bail!("--roles must be provider, verifier or both, not {other:?}"),
    })
}
