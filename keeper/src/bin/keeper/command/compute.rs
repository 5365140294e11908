//! `keeper compute`: a job a client could post, run on this machine through the provider's
//! code path, its result written as `task result` writes the market's — the data, the cost
//! and the output checked before anything is paid.

use anyhow::Result;
use clap::Args;
use compute_market_keeper::clientdata;
use solana_signer::Signer;

use super::job::{JobArgs, Jobs};
use crate::context::{progress_bars, select, Backend, Ctx};

/// The job (the flags of `task post`), where to write its result, and on what.
#[derive(Args, Debug)]
pub struct ComputeArgs {
    /// What job.
    #[command(flatten)]
    job: JobArgs,
    /// Output file [default: result.safetensors].
    #[arg(short = 'o', long = "out", default_value = "result.safetensors")]
    out: std::path::PathBuf,
    /// Compute backend.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
}

impl ComputeArgs {
    /// Computes, writes the file and prints what it did (root, work, memory, seconds).
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        // generated inputs are seeded from the client's key, as `task post` seeds them
        let client = (!self.job.on_data() && self.job.seed.is_none())
            .then(|| ctx.keypair().map(|k| k.pubkey()))
            .transpose()?;
        let backend = select(self.backend)?;
        let bars = progress_bars();
        let report = |done: u64, all: u64| bars("computing", done, all);
        let mut warnings = vec![];
        let start = std::time::Instant::now();
        let prepare;
        let mut local = match self.job.jobs(client.as_ref(), 1, &|_| Ok(0))? {
            Jobs::Data(_, prepared) => {
                for w in &prepared.warnings {
                    tracing::warn!("{w}");
                }
                warnings = prepared.warnings.clone();
                prepare = start.elapsed().as_secs_f64();
                clientdata::compute_locally(
                    &prepared.job,
                    Some(&prepared),
                    backend.as_ref(),
                    &report,
                    &self.out,
                )?
            }
            Jobs::Generated(jobs) => {
                prepare = start.elapsed().as_secs_f64();
                clientdata::compute_locally(&jobs[0].1, None, backend.as_ref(), &report, &self.out)?
            }
        };
        local
            .phases
            .insert("prepare", clientdata::round_ms(prepare));
        let mut v = serde_json::to_value(&local)?;
        if let Some(o) = v.as_object_mut().filter(|_| !warnings.is_empty()) {
            o.insert("warnings".into(), warnings.into());
        }
        ctx.print(&v)
    }
}
