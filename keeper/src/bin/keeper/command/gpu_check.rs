//! `keeper gpu-check`: on a GPU machine, every kernel against the CPU bit for bit, cold and warm
//! start, and the benchmark on CPU and GPU side by side.

use anyhow::{ensure, Context, Result};
use clap::Args;
use compute_market_keeper::gpucheck;

use crate::context::Ctx;

/// Sizes and where the report goes.
#[derive(Args, Debug)]
pub struct GpuCheckArgs {
    /// MatMulModP sizes benchmarked.
    #[arg(long, value_delimiter = ',', default_value = "1024,4096")]
    sizes: Vec<u32>,
    /// Directory for report.json and report.md.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

impl GpuCheckArgs {
    /// Runs the check, writes the report files, prints the report; fails when a bit differs.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        let report = gpucheck::run(&self.sizes)?;
        let text = gpucheck::render(&report);
        if let Some(dir) = &self.out {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::write(
                dir.join("report.json"),
                serde_json::to_string_pretty(&report)?,
            )?;
            std::fs::write(dir.join("report.md"), &text)?;
        }
        ctx.print_report(&text, &report)?;
        ensure!(
            report.bit_identical,
            "the GPU's results differ from the CPU's"
        );
        Ok(())
    }
}
