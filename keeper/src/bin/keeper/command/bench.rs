//! `keeper bench`: compute and verification side by side, per job kind and size.

use std::sync::Arc;

use anyhow::{ensure, Context, Result};
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
    /// Only the encoder, on these texts (one a line, as `task post --texts` takes them): the
    /// model parsed and packed and the texts tokenized once, the encoder alone timed (median
    /// of three). What `scripts/peer-bench` sets beside sentence-transformers.
    #[arg(long, value_name = "FILE")]
    encoder_texts: Option<std::path::PathBuf>,
    /// The encoder for `--encoder-texts` [default: the MiniLM integer model in the cache].
    #[arg(long, value_name = "FILE")]
    model: Option<std::path::PathBuf>,
    /// Only text generation, on this prompt: the prefill, one stream's decode, --batch streams
    /// at once, and a verifier's check of the completion. What `scripts/llm-bench` sets beside
    /// llama.cpp.
    #[arg(long, value_name = "PROMPT", conflicts_with = "encoder_texts")]
    generate: Option<String>,
    /// New tokens of each completion (with --generate).
    #[arg(long, default_value_t = 64, requires = "generate")]
    new_tokens: usize,
    /// Streams generated at once (with --generate).
    #[arg(long, default_value_t = 32, requires = "generate")]
    batch: usize,
}

impl BenchArgs {
    /// Measures and prints the report.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        if let Some(texts) = &self.encoder_texts {
            let model = self
                .model
                .clone()
                .unwrap_or_else(compute_market_keeper::compute::encoder::minilm_path);
            let read = |p: &std::path::Path| {
                std::fs::read(p).with_context(|| format!("reading {}", p.display()))
            };
            let alone = bench::encoder_alone(&read(&model)?, &read(texts)?)?;
            return ctx.print(&alone);
        }
        if let Some(prompt) = &self.generate {
            let model = self
                .model
                .clone()
                .unwrap_or_else(compute_market_keeper::compute::decoder::smollm2_path);
            let bytes = std::fs::read(&model).with_context(|| {
                format!(
                    "reading {} (scripts/smollm2-model makes it)",
                    model.display()
                )
            })?;
            return ctx.print(&bench::generation(
                &bytes,
                prompt,
                self.new_tokens,
                self.batch,
            )?);
        }
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
