//! The flags that say what job a client runs, shared by `keeper task post` (which posts it)
//! and `keeper compute` (which runs it here first): generated inputs (`--kind --dims`), the
//! client's matrices (`--input`), or a model over a batch or texts (`--model --batch|--texts`).

use anchor_lang::prelude::Pubkey;
use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use compute_market_keeper::clientdata::{self, PreparedInputs};
use compute_market_protocol::job::JobSpec;

/// What job: the same flags for `task post` and `compute`.
#[derive(Args, Debug)]
pub struct JobArgs {
    /// Task id (unique per client) [default: the current time in ms].
    #[arg(long)]
    pub id: Option<u64>,
    /// matmul (m,k,n) or hash (tiles,nonces,iterations) on generated inputs (not with
    /// --input).
    #[arg(long, required_unless_present_any = ["input", "model"])]
    pub kind: Option<String>,
    /// Three dimensions, comma-separated (not with --input: they come from the files).
    #[arg(long, value_delimiter = ',', required_unless_present_any = ["input", "model"])]
    pub dims: Vec<u32>,
    /// The client's own matrices: A.safetensors,B.safetensors (one U32 tensor each,
    /// named "A" and "B", every element below 2^31 − 1); a MatMulModP of A·B is posted on
    /// them after they are checked and uploaded to --store.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["kind", "dims", "seed", "model"])]
    pub input: Vec<std::path::PathBuf>,
    /// An integer model (PROTOCOL §5: an Mlp's layers, or an Encoder such as the MiniLM
    /// one scripts/minilm-model makes): run over --batch (Mlp) or --texts (Encoder),
    /// uploaded to --store with it.
    #[arg(long, conflicts_with_all = ["kind", "dims", "seed"])]
    pub model: Option<std::path::PathBuf>,
    /// The batch for an Mlp --model: safetensors, one tensor "x", I8 [rows, features].
    #[arg(long, requires = "model", conflicts_with = "texts")]
    pub batch: Option<std::path::PathBuf>,
    /// The texts for an Encoder --model: UTF-8, one text per line; each is embedded.
    #[arg(long, requires = "model")]
    pub texts: Option<std::path::PathBuf>,
    /// Most tokens of one text, [CLS] and [SEP] included (Encoder; a longer text is
    /// refused) [default: the longest text's, the tightest price].
    #[arg(long, requires = "texts")]
    pub max_tokens: Option<u32>,
    /// Rows (Mlp) or texts (Encoder) per output tile (1 to 64): a verifier recomputes k
    /// tiles [default: 8 rows, 2 texts].
    #[arg(long, requires = "model")]
    pub rows_per_tile: Option<u8>,
    /// Input seed, 64 hex digits [default: derived from the client's key and the id].
    #[arg(long)]
    pub seed: Option<String>,
}

/// The jobs the flags name.
pub enum Jobs {
    /// On generated inputs: one per id.
    Generated(Vec<(u64, JobSpec)>),
    /// On the client's data, read and checked: one task.
    Data(u64, Box<PreparedInputs>),
}

impl JobArgs {
    /// Whether the job runs on the client's own data.
    pub fn on_data(&self) -> bool {
        !self.input.is_empty() || self.model.is_some()
    }

    /// The jobs: `count` ids from `--id` on generated inputs (seeded from `client`'s key and
    /// each id unless `--seed`), or one job on the client's data, read and checked.
    pub fn jobs(&self, client: Option<&Pubkey>, count: u64) -> Result<Jobs> {
        ensure!(count >= 1, "--count must be at least 1");
        let id = self.id.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0)
        });
        if self.on_data() {
            ensure!(count == 1, "--input and --model post one task (--count 1)");
            let prepared = match (&self.model, &self.batch, &self.texts) {
                (Some(m), Some(b), _) => clientdata::prepare_mlp(
                    m,
                    b,
                    self.rows_per_tile.unwrap_or(clientdata::MLP_ROWS_PER_TILE),
                )?,
                (Some(m), None, Some(t)) => clientdata::prepare_encoder(
                    m,
                    t,
                    self.rows_per_tile
                        .unwrap_or(clientdata::ENCODER_ROWS_PER_TILE),
                    self.max_tokens,
                )?,
                (Some(_), None, None) => bail!(
                    "--model needs --batch (an Mlp over rows) or --texts (an Encoder over texts)"
                ),
                _ => clientdata::prepare_inputs(&self.input)?,
            };
            return Ok(Jobs::Data(id, Box::new(prepared)));
        }
        let kind = self
            .kind
            .as_deref()
            .context("--kind is needed without --input")?;
        let given = self.seed.as_deref().map(parse_seed).transpose()?;
        let jobs = (id..id.checked_add(count).context("--id + --count overflows")?)
            .map(|id| {
                let seed = match (given, client) {
                    (Some(s), _) => s,
                    (None, Some(c)) => compute_market_protocol::hash::hashv(&[
                        b"cli seed",
                        c.as_ref(),
                        &id.to_le_bytes(),
                    ]),
                    (None, None) => bail!(
                        "generated inputs are seeded from the client's key and --id: give \
                         -k KEYPAIR or --seed"
                    ),
                };
                Ok((id, parse_job(kind, &self.dims, seed)?))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Jobs::Generated(jobs))
    }
}

fn parse_job(kind: &str, dims: &[u32], seed: [u8; 32]) -> Result<JobSpec> {
    ensure!(dims.len() == 3, "--dims takes three numbers");
    let job = match kind {
        "matmul" => JobSpec::matmul(dims[0], dims[1], dims[2], seed),
        "hash" => JobSpec::hash_batch(dims[0], dims[1], dims[2], seed),
        other => bail!("--kind must be matmul or hash, not {other:?}"),
    };
    JobSpec::decode(&job.encode()).map_err(|e| anyhow::anyhow!("invalid job: {e}"))
}

fn parse_seed(s: &str) -> Result<[u8; 32]> {
    ensure!(s.len() == 64, "--seed takes 64 hex digits");
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).context("--seed is not hex")?;
    }
    Ok(out)
}
