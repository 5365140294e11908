//! `keeper model`: models a client hosts once and posts jobs on by reference.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;
use compute_market_keeper::{clientdata, results::FetchPolicy};

use crate::context::Ctx;

/// Model commands.
#[derive(Subcommand, Debug)]
pub enum ModelCmd {
    /// Checks each model as providers will and uploads it to a content store, an encoder's or
    /// decoder's tokenizer beside it; prints each one's SHA-256, length and the figures jobs on
    /// it carry (with `--output json`: a list, each entry what the web page's settings and the
    /// TS client's `ModelInfo` take).
    Publish {
        /// Model files (safetensors: an integer MLP, encoder or decoder, PROTOCOL §5).
        #[arg(required = true)]
        models: Vec<PathBuf>,
        /// The content store (`keeper serve`, or a keeper's --listen address).
        #[arg(long)]
        store: String,
    },
}

impl ModelCmd {
    /// Runs the command.
    pub fn execute(self, ctx: &Ctx) -> Result<()> {
        match self {
            ModelCmd::Publish { models, store } => {
                // the client's own store, chosen by the client: any address it names
                let policy = FetchPolicy {
                    allow_loopback: true,
                    allow_private: true,
                    ..FetchPolicy::default()
                };
                ctx.print(&clientdata::publish_models(&store, &models, &policy)?)
            }
        }
    }
}
