//! `keeper bench`: compute and verification side by side, per job kind and size.

use std::sync::Arc;

use anyhow::{ensure, Result};
use clap::Args;
use compute_market_keeper::{bench, compute::cpu::CpuBackend};

use crate::context::{select, Backend, Ctx};

/// What to measure.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// MatMulModP sizes n (n×n·n×n), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "256,512,1024")]
    sizes: Vec<u32>,
    /// cpu, cuda, or auto: the CPU and, when a GPU passes its self-test, CUDA side by side.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
}

impl BenchArgs {
    /// Measures and prints the report.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        let max = compute_market_protocol::job::MAX_MATRIX_DIM;
        ensure!(
            self.sizes.iter().all(|&n| (1..=max).contains(&n)),
            "--sizes: each n must be within 1..={max}"
        );
        let mut backends: Vec<Arc<dyn compute_market_keeper::compute::Backend>> = vec![];
        if self.backend != Backend::Cuda {
            backends.push(Arc::new(CpuBackend));
        }
        if self.backend != Backend::Cpu {
            match select(Backend::Cuda) {
                Ok(b) => backends.push(b),
                Err(e) if self.backend == Backend::Auto => eprintln!("bench: CPU only ({e:#})"),
                Err(e) => return Err(e),
            }
        }
        let report = bench::run(&backends, &self.sizes)?;
        ctx.print_report(&bench::render(&report), &report)
    }
}
