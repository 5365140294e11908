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
    /// Task id (unique per client) [default: derived from the client, the job and the terms
    /// (and --nonce), so the same post run twice names the same task and pays once].
    #[arg(long)]
    pub id: Option<u64>,
    /// matmul (m,k,n) or hash (tiles,nonces,iterations) on generated inputs (not with
    /// --input).
    #[arg(long, required_unless_present_any = ["input", "model", "generate"])]
    pub kind: Option<String>,
    /// Three dimensions, comma-separated (not with --input: they come from the files).
    #[arg(long, value_delimiter = ',', required_unless_present_any = ["input", "model", "generate"])]
    pub dims: Vec<u32>,
    /// The client's own matrices: A.safetensors,B.safetensors (one U32 tensor each,
    /// named "A" and "B", every element below 2^31 − 1); a MatMulModP of A·B is posted on
    /// them after they are checked and uploaded to --store.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["kind", "dims", "seed", "model"])]
    pub input: Vec<std::path::PathBuf>,
    /// An integer model (PROTOCOL §5: an Mlp's layers, an Encoder such as the MiniLM one
    /// scripts/minilm-model makes, or a decoder such as the SmolLM2 one scripts/smollm2-model
    /// makes): run over --batch (Mlp), --texts (Encoder) or --prompt/--prompts (--generate),
    /// uploaded to --store with it.
    #[arg(long, conflicts_with_all = ["kind", "dims", "seed"])]
    pub model: Option<std::path::PathBuf>,
    /// Text generation (a Generate job) on --prompt or --prompts, by --model [default: the
    /// SmolLM2-135M-Instruct model scripts/smollm2-model makes]: every completion verified.
    #[arg(long, conflicts_with_all = ["kind", "dims", "seed", "input", "batch", "texts"])]
    pub generate: bool,
    /// A prompt to complete (repeat for several; with --generate).
    #[arg(long, requires = "generate")]
    pub prompt: Vec<String>,
    /// A file of prompts: UTF-8, one a line; a line starting with '"' is a JSON string, so a
    /// prompt may hold line breaks (with --generate).
    #[arg(long, requires = "generate", conflicts_with = "prompt")]
    pub prompts: Option<std::path::PathBuf>,
    /// Most new tokens of a completion (with --generate; 1 to 1 024, and prompt and
    /// completion within the model's positions).
    #[arg(long, requires = "generate", default_value_t = clientdata::GENERATE_MAX_NEW)]
    pub max_new_tokens: u32,
    /// Sample at this temperature (0 to 256; 0 decodes greedily; with --generate).
    #[arg(
        long,
        requires = "generate",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub temperature: f64,
    /// Sample among the k likeliest tokens only (with --temperature; 0 or left out: all).
    #[arg(long, requires = "temperature")]
    pub top_k: Option<u32>,
    /// Sample among the likeliest tokens making up this fraction (0 < p ≤ 1; with
    /// --temperature) [default: 1].
    #[arg(long, requires = "temperature")]
    pub top_p: Option<f64>,
    /// The sampling seed: another draws other completions of the same prompts (with
    /// --temperature) [default: 0].
    #[arg(long, requires = "temperature")]
    pub sample_seed: Option<u64>,
    /// The batch for an Mlp --model: safetensors, one tensor "x", I8 [rows, features].
    #[arg(long, requires = "model", conflicts_with = "texts")]
    pub batch: Option<std::path::PathBuf>,
    /// The texts for an Encoder --model: UTF-8, one text per line; each is embedded.
    #[arg(long, requires = "model")]
    pub texts: Option<std::path::PathBuf>,
    /// Most tokens of one text, [CLS] and [SEP] included (Encoder), or of one prompt in the
    /// chat template (Generate); a longer one is refused [default: the longest's, the tightest
    /// price].
    #[arg(long)]
    pub max_tokens: Option<u32>,
    /// Rows (Mlp), texts (Encoder) or completions (Generate) per output tile (1 to 64): a
    /// verifier checks k tiles [default: 8 rows, 2 texts, 1 completion].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=i64::from(compute_market_protocol::job::MAX_ROWS_PER_TILE)))]
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
        !self.input.is_empty() || self.model.is_some() || self.generate
    }

    /// The sampling rule the flags name.
    fn sampling(&self) -> Result<compute_market_protocol::decoder::Sampling> {
        use compute_market_protocol::decoder::{Sampling, MAX_TEMPERATURE, TOP_P_ONE};
        let t = self.temperature;
        ensure!(
            t.is_finite() && (0.0..=256.0).contains(&t),
            "--temperature {t}: give 0 (greedy) to 256"
        );
        let temperature = ((t * 256.0).round() as u32).min(MAX_TEMPERATURE);
        ensure!(
            t == 0.0 || temperature > 0,
            "--temperature {t} is below 1/256, the finest step: give 0 for greedy decoding"
        );
        ensure!(
            t > 0.0
                || (self.top_k.is_none() && self.top_p.is_none() && self.sample_seed.is_none()),
            "--top-k, --top-p and --sample-seed shape sampling: give --temperature above 0 too (0 decodes greedily)"
        );
        let p = self.top_p.unwrap_or(1.0);
        ensure!(
            p.is_finite() && p > 0.0 && p <= 1.0,
            "--top-p {p}: give a fraction above 0, at most 1"
        );
        Ok(Sampling {
            temperature,
            top_k: self.top_k.unwrap_or(0),
            top_p: ((p * 65536.0).round() as u32).clamp(1, TOP_P_ONE),
            seed: self.sample_seed.unwrap_or(0),
        })
    }

    /// The jobs: `count` ids from `--id` on generated inputs (seeded from `client`'s key and
    /// each id unless `--seed`), or one job on the client's data, read and checked.
    ///
    /// Without `--id`, the first id is `default_id` of what the job is (the encoded job on the
    /// client's data; the kind, dimensions, seed and count on generated inputs).
    pub fn jobs(
        &self,
        client: Option<&Pubkey>,
        count: u64,
        default_id: &dyn Fn(&[u8]) -> Result<u64>,
    ) -> Result<Jobs> {
        ensure!(count >= 1, "--count must be at least 1");
        let id_of = |what: &[u8]| self.id.map_or_else(|| default_id(what), Ok);
        if self.on_data() {
            ensure!(count == 1, "--input and --model post one task (--count 1)");
            if self.generate {
                let prompts = match &self.prompts {
                    Some(f) => clientdata::read_prompts(f)?,
                    None => self.prompt.clone(),
                };
                ensure!(
                    !prompts.is_empty(),
                    "--generate needs --prompt TEXT (repeatable) or --prompts FILE"
                );
                let model = self
                    .model
                    .clone()
                    .unwrap_or_else(compute_market_keeper::compute::decoder::smollm2_path);
                ensure!(
                    model.exists(),
                    "{} does not exist: run scripts/smollm2-model (scripts/setup does) to make the SmolLM2 model, or give --model",
                    model.display()
                );
                let shape = clientdata::GenerateShape {
                    max_new: self.max_new_tokens,
                    max_tokens: self.max_tokens,
                    rows_per_tile: self
                        .rows_per_tile
                        .unwrap_or(clientdata::GENERATE_ROWS_PER_TILE),
                    sampling: self.sampling()?,
                };
                let prepared = clientdata::prepare_generate(&model, &prompts, shape)?;
                let id = id_of(&prepared.job.encode())?;
                return Ok(Jobs::Data(id, Box::new(prepared)));
            }
            if self.max_tokens.is_some() && self.texts.is_none() {
                bail!("--max-tokens is for --texts (an Encoder) or --generate");
            }
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
            let id = id_of(&prepared.job.encode())?;
            return Ok(Jobs::Data(id, Box::new(prepared)));
        }
        let kind = self
            .kind
            .as_deref()
            .context("--kind is needed without --input")?;
        let given = self.seed.as_deref().map(parse_seed).transpose()?;
        // the dimensions checked before the id is derived (that asks the cluster the mint's
        // decimals): a typo is named without a network call
        parse_job(kind, &self.dims, [0; 32])?;
        let id =
            id_of(format!("generated {kind} {:?} {:?} {count}", self.dims, self.seed).as_bytes())?;
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
    use compute_market_protocol::job::{
        MAX_HASH_ITERATIONS, MAX_HASH_TILES, MAX_MATRIX_DIM, MAX_NONCES_PER_TILE,
    };
    ensure!(dims.len() == 3, "--dims takes three numbers");
    // each bound named with its value, before the job's own check
    let bounds: [(&str, u32); 3] = match kind {
        "matmul" => [
            ("m", MAX_MATRIX_DIM),
            ("k", MAX_MATRIX_DIM),
            ("n", MAX_MATRIX_DIM),
        ],
        "hash" => [
            ("tiles", MAX_HASH_TILES),
            ("nonces a tile", MAX_NONCES_PER_TILE),
            ("iterations", MAX_HASH_ITERATIONS),
        ],
        other => bail!("--kind must be matmul or hash, not {other:?}"),
    };
    for (&d, (name, most)) in dims.iter().zip(bounds) {
        ensure!(
            (1..=most).contains(&d),
            "--dims: {name} = {d} is out of range for --kind {kind}: 1 to {most}"
        );
    }
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
