//! `keeper demo`: the whole market on an embedded cluster, a progress bar while it runs, then
//! the report.

use std::io::IsTerminal;

use anyhow::{ensure, Result};
use clap::Args;
use compute_market_keeper::demo;

use crate::context::{select, Backend, Ctx};

/// The demo's size and its dishonest provider.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Tasks posted.
    #[arg(long, default_value_t = 20)]
    tasks: usize,
    /// Fraction of tiles the dishonest provider corrupts.
    #[arg(long, default_value_t = 0.25)]
    corrupt_fraction: f64,
    /// Compute backend of every node.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// Leave out the digits task (the digits model over the 450 held-out digits).
    #[arg(long)]
    no_digits: bool,
    /// Leave out the sentences task (the MiniLM encoder over the 300 held-out texts; it needs
    /// the model scripts/minilm-model makes).
    #[arg(long)]
    no_sentences: bool,
    /// Leave out the generation task (SmolLM2 completing two prompts; it needs the model
    /// scripts/smollm2-model makes).
    #[arg(long)]
    no_generate: bool,
}

impl DemoArgs {
    /// Runs the market to the end and prints the report.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        ensure!(self.tasks >= 1, "--tasks must be at least 1");
        ensure!(
            (0.0..=1.0).contains(&self.corrupt_fraction),
            "--corrupt-fraction must be within 0..=1"
        );
        let cfg = demo::DemoConfig {
            tasks: self.tasks,
            corrupt_fraction: self.corrupt_fraction,
            digits: !self.no_digits,
            sentences: !self.no_sentences,
            generate: !self.no_generate,
            ..Default::default()
        };
        let backend = select(self.backend)?;
        let bar = indicatif::ProgressBar::new(self.tasks as u64).with_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {pos}/{len} tasks closed ({elapsed})",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        bar.set_message("market running");
        if !std::io::stderr().is_terminal() {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let report = demo::run_with(&cfg, backend, &mut |closed, _| {
            bar.set_position(closed as u64)
        })?;
        bar.finish_and_clear();
        ctx.print_report(&demo::render(&report), &report)
    }
}
