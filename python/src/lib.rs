//! # compute-market-python
//!
//! The native module of the `compute_market` Python package (`compute_market._native`), built
//! by maturin: PyO3 bindings over the keeper library, so that Python posts, checks and
//! computes jobs through the same code as `keeper task post`, `keeper task result` and
//! `keeper compute` — not a second implementation of the protocol. The Python package around
//! it (`python/compute_market/`) adds numpy in and out, exceptions, `async` forms and the Ray
//! integrations.
//!
//! Every call that waits on the network or computes releases the GIL. Errors are raised as the
//! exception classes of `compute_market.errors`, chosen by what failed: the input
//! (`InputError`), the keypair (`KeypairError`), the cluster (`ChainUnavailable`), the task's
//! outcome (`TaskFailed`), the result's sources (`ResultUnavailable`), anything else
//! (`MarketError`).
#![deny(missing_docs)]

use std::{path::PathBuf, sync::Arc};

use anchor_lang::prelude::Pubkey;
use anyhow::Context;
use compute_market_keeper::{
    chain::{rpc::RpcChain, Chain, ChainExt},
    cli, clientdata,
    clientdata::PreparedInputs,
    compute::device::{self, BackendChoice},
    results::FetchPolicy,
};
use compute_market_protocol::job::JobSpec;
use pyo3::{
    prelude::*,
    types::{PyBytes, PyDict, PyList},
};
use solana_keypair::Keypair;
use solana_signer::Signer;

/// Raises `compute_market.errors.<kind>` with `e`'s message (its causes joined by ": ").
fn raise(kind: &str, e: anyhow::Error) -> PyErr {
    let msg = format!("{e:#}");
    Python::attach(|py| {
        match py
            .import("compute_market.errors")
            .and_then(|m| m.getattr(kind))
            .and_then(|cls| cls.call1((msg.clone(),)))
        {
            Ok(v) => PyErr::from_value(v),
            Err(_) => pyo3::exceptions::PyRuntimeError::new_err(msg),
        }
    })
}

/// What failed, told from the message of an error met talking to the cluster: unreachable, or
/// something else.
fn chain_error(e: anyhow::Error) -> PyErr {
    let m = format!("{e:#}");
    if m.contains("cannot reach the cluster") || m.contains("error sending request") {
        raise("ChainUnavailable", e)
    } else {
        raise("MarketError", e)
    }
}

/// `Err` of an input check as `InputError`.
fn input<T>(r: anyhow::Result<T>) -> PyResult<T> {
    r.map_err(|e| raise("InputError", e))
}

/// A job, read and checked as providers and verifiers will check it, ready to post
/// (`Market.post`) or to compute here (`compute`). Made by `embed_job`, `classify_job`,
/// `matmul_job` or `generate_job`.
#[pyclass(module = "compute_market._native", frozen)]
struct Job {
    spec: JobSpec,
    prepared: Arc<PreparedInputs>,
}

#[pymethods]
impl Job {
    /// The job's kind: "Encoder", "Mlp", "MatMulModP" or "Generate".
    #[getter]
    fn kind(&self) -> String {
        format!("{:?}", self.spec.kind)
    }
    /// Its three dimensions (rows, then as PROTOCOL §5 defines them for its kind).
    #[getter]
    fn dims(&self) -> (u32, u32, u32) {
        (self.spec.dims[0], self.spec.dims[1], self.spec.dims[2])
    }
    /// Output tiles (a verifier re-executes k of them).
    #[getter]
    fn tiles(&self) -> u32 {
        self.spec.tile_count()
    }
    /// Work units: what a reward is priced by (PROTOCOL §5).
    #[getter]
    fn work(&self) -> u64 {
        self.spec.work()
    }
    /// Bytes the job needs at once (what providers check against their memory).
    #[getter]
    fn memory_bytes(&self) -> u64 {
        self.spec.memory_bytes()
    }
    /// The content hash of its inputs' manifest, hex (the job's input on chain).
    #[getter]
    fn input(&self) -> String {
        hex(&self.spec.input)
    }
    /// What the client should know before paying (inputs outside what a model learned).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.prepared.warnings.clone()
    }
    fn __repr__(&self) -> String {
        format!(
            "Job({:?} {:?}, {} tiles, {} work units)",
            self.spec.kind,
            self.spec.dims,
            self.spec.tile_count(),
            self.spec.work()
        )
    }
}

fn job(p: PreparedInputs) -> Job {
    Job {
        spec: p.job,
        prepared: Arc::new(p),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An Encoder job embedding `texts` (one string each, no line breaks) with `model` (a MiniLM
/// integer model file; default: the one `scripts/minilm-model` makes).
#[pyfunction]
#[pyo3(signature = (texts, model=None, max_tokens=None, rows_per_tile=clientdata::ENCODER_ROWS_PER_TILE))]
fn embed_job(
    py: Python<'_>,
    texts: Vec<String>,
    model: Option<PathBuf>,
    max_tokens: Option<u32>,
    rows_per_tile: u8,
) -> PyResult<Job> {
    if let Some(i) = texts.iter().position(|t| t.contains(['\n', '\r'])) {
        return Err(raise(
            "InputError",
            anyhow::anyhow!(
                "text {i} holds a line break: a text is one line (replace line breaks with spaces)"
            ),
        ));
    }
    if texts.is_empty() {
        return Err(raise(
            "InputError",
            anyhow::anyhow!("no texts: give at least one"),
        ));
    }
    if let Some(i) = texts.iter().position(|t| t.trim().is_empty()) {
        return Err(raise(
            "InputError",
            anyhow::anyhow!("text {i} is empty: every text needs words (drop it)"),
        ));
    }
    let model = model.unwrap_or_else(compute_market_keeper::compute::encoder::minilm_path);
    py.detach(|| {
        input((|| {
            let m = std::fs::read(&model).with_context(|| {
                format!(
                    "cannot read the model {} (scripts/minilm-model makes the MiniLM one)",
                    model.display()
                )
            })?;
            let mut t = texts.join("\n").into_bytes();
            t.push(b'\n');
            clientdata::prepare_encoder_of(
                (&model.display().to_string(), m),
                ("texts", t),
                rows_per_tile,
                max_tokens,
            )
        })())
    })
    .map(job)
}

/// A safetensors file of one tensor `name` of `dtype`, `shape`, `data` (little-endian).
fn tensor(
    name: &str,
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    data: &[u8],
) -> anyhow::Result<Vec<u8>> {
    let view = safetensors::tensor::TensorView::new(dtype, shape, data)
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    safetensors::serialize([(name, view)], None).map_err(|e| anyhow::anyhow!("{name}: {e}"))
}

/// An Mlp job classifying `rows` (an int8 matrix's bytes, row-major, of `shape` [rows,
/// features]) with `model` (an integer MLP file; default: the digits model the keeper carries).
#[pyfunction]
#[pyo3(signature = (rows, shape, model=None, rows_per_tile=clientdata::MLP_ROWS_PER_TILE))]
fn classify_job(
    py: Python<'_>,
    rows: Vec<u8>,
    shape: (usize, usize),
    model: Option<PathBuf>,
    rows_per_tile: u8,
) -> PyResult<Job> {
    py.detach(|| {
        input((|| {
            let (name, m) = match &model {
                Some(p) => (
                    p.display().to_string(),
                    std::fs::read(p)
                        .with_context(|| format!("cannot read the model {}", p.display()))?,
                ),
                None => (
                    "the digits model".to_string(),
                    compute_market_keeper::compute::mlp::DIGITS_MODEL.to_vec(),
                ),
            };
            let b = tensor("x", safetensors::Dtype::I8, vec![shape.0, shape.1], &rows)?;
            clientdata::prepare_mlp_of((&name, m), ("rows", b), rows_per_tile)
        })())
    })
    .map(job)
}

/// A MatMulModP job computing A·B mod p on the client's matrices (each uint32 bytes,
/// row-major, with its shape; every element below 2^31 − 1).
#[pyfunction]
fn matmul_job(
    py: Python<'_>,
    a: Vec<u8>,
    a_shape: (usize, usize),
    b: Vec<u8>,
    b_shape: (usize, usize),
) -> PyResult<Job> {
    py.detach(|| {
        input((|| {
            let a = tensor("A", safetensors::Dtype::U32, vec![a_shape.0, a_shape.1], &a)?;
            let b = tensor("B", safetensors::Dtype::U32, vec![b_shape.0, b_shape.1], &b)?;
            clientdata::prepare_matmul(("a", a), ("b", b))
        })())
    })
    .map(job)
}

/// A Generate job completing `prompts` with `model` (an integer decoder; default: the SmolLM2
/// one `scripts/smollm2-model` makes), greedily at temperature 0, else sampled.
#[pyfunction]
#[pyo3(signature = (prompts, model=None, max_new_tokens=clientdata::GENERATE_MAX_NEW, max_tokens=None, temperature=0.0, top_k=0, top_p=1.0, seed=0, rows_per_tile=clientdata::GENERATE_ROWS_PER_TILE))]
#[allow(clippy::too_many_arguments)]
fn generate_job(
    py: Python<'_>,
    prompts: Vec<String>,
    model: Option<PathBuf>,
    max_new_tokens: u32,
    max_tokens: Option<u32>,
    temperature: f64,
    top_k: u32,
    top_p: f64,
    seed: u64,
    rows_per_tile: u8,
) -> PyResult<Job> {
    use compute_market_protocol::decoder::{Sampling, MAX_TEMPERATURE, TOP_P_ONE};
    let model = model.unwrap_or_else(compute_market_keeper::compute::decoder::smollm2_path);
    py.detach(|| {
        input((|| {
            anyhow::ensure!(
                temperature.is_finite() && (0.0..=256.0).contains(&temperature),
                "temperature {temperature}: give 0 (greedy) to 256"
            );
            let t = ((temperature * 256.0).round() as u32).min(MAX_TEMPERATURE);
            anyhow::ensure!(
                temperature == 0.0 || t > 0,
                "temperature {temperature} is below 1/256, the finest step: give 0 for greedy decoding"
            );
            anyhow::ensure!(
                top_p.is_finite() && top_p > 0.0 && top_p <= 1.0,
                "top_p {top_p}: give a fraction above 0, at most 1"
            );
            anyhow::ensure!(
                model.exists(),
                "{} does not exist: run scripts/smollm2-model to make the SmolLM2 model, or give model=",
                model.display()
            );
            let sampling = Sampling {
                temperature: t,
                top_k,
                top_p: ((top_p * 65536.0).round() as u32).clamp(1, TOP_P_ONE),
                seed,
            };
            clientdata::prepare_generate(
                &model,
                &prompts,
                clientdata::GenerateShape {
                    max_new: max_new_tokens,
                    max_tokens,
                    rows_per_tile,
                    sampling,
                },
            )
        })())
    })
    .map(job)
}

/// An encoded job spec (64 bytes) from Python, decoded.
fn spec_of(job: &[u8]) -> anyhow::Result<JobSpec> {
    let raw: [u8; 64] = job
        .try_into()
        .map_err(|_| anyhow::anyhow!("a job spec is 64 bytes, not {}", job.len()))?;
    JobSpec::decode(&raw).map_err(|e| anyhow::anyhow!("the job spec: {e:?}"))
}

/// A result file's tensors as `(name, dtype, shape, bytes)`, for numpy's `frombuffer`.
fn tensors<'py>(py: Python<'py>, file: &[u8]) -> anyhow::Result<Bound<'py, PyList>> {
    let st = safetensors::SafeTensors::deserialize(file).map_err(|e| anyhow::anyhow!("{e}"))?;
    let list = PyList::empty(py);
    let mut names = st.names();
    names.sort();
    for n in names {
        let t = st.tensor(n).map_err(|e| anyhow::anyhow!("{e}"))?;
        let dtype = match t.dtype() {
            safetensors::Dtype::U8 => "uint8",
            safetensors::Dtype::I8 => "int8",
            safetensors::Dtype::I16 => "int16",
            safetensors::Dtype::I32 => "int32",
            safetensors::Dtype::U32 => "uint32",
            safetensors::Dtype::I64 => "int64",
            other => anyhow::bail!("tensor {n} is {other:?}, which this package does not read"),
        };
        list.append((
            n.to_string(),
            dtype,
            t.shape().to_vec(),
            PyBytes::new(py, t.data()),
        ))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(list)
}

/// A result as a dict: `task` (or None), `root` (hex), `tensors` (see [`tensors`]), and
/// `completions` (a Generate job's: each a dict of row, prompt, text, tokens, finished).
fn result_dict<'py>(
    py: Python<'py>,
    task: Option<String>,
    root: &str,
    file: &[u8],
    completions: Option<&[clientdata::Completion]>,
    extra: &[(&str, serde_json::Value)],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("task", task)?;
    d.set_item("root", root)?;
    d.set_item(
        "tensors",
        tensors(py, file).map_err(|e| raise("MarketError", e))?,
    )?;
    let cs = PyList::empty(py);
    for c in completions.unwrap_or_default() {
        let x = PyDict::new(py);
        x.set_item("row", c.row)?;
        x.set_item("prompt", &c.prompt)?;
        x.set_item("text", &c.text)?;
        x.set_item("tokens", c.tokens)?;
        x.set_item("finished", c.finished)?;
        cs.append(x)?;
    }
    d.set_item("completions", cs)?;
    for (k, v) in extra {
        d.set_item(*k, v.to_string())?;
    }
    Ok(d)
}

/// Computes `job` here on the provider's code path (`keeper compute`): its inputs checked as a
/// provider checks them, every tile computed (`backend`: "auto", "cpu" or "cuda") and committed
/// into the root a provider would submit. Nothing is posted or paid.
#[pyfunction]
#[pyo3(signature = (job, backend="auto"))]
fn compute<'py>(py: Python<'py>, job: &Job, backend: &str) -> PyResult<Bound<'py, PyDict>> {
    let choice = match backend {
        "auto" => BackendChoice::Auto,
        "cpu" => BackendChoice::Cpu,
        "cuda" => BackendChoice::Cuda,
        other => {
            return Err(raise(
                "InputError",
                anyhow::anyhow!("backend {other:?}: give \"auto\", \"cpu\" or \"cuda\""),
            ))
        }
    };
    let (spec, prepared) = (job.spec, job.prepared.clone());
    let (local, file) = py
        .detach(|| -> anyhow::Result<_> {
            let b = device::select(choice)?;
            let dir = tempfile_dir()?;
            let out = dir.path().join("result.safetensors");
            let local =
                clientdata::compute_locally(&spec, Some(&prepared), b.as_ref(), &|_, _| {}, &out)?;
            let file = std::fs::read(&out)?;
            Ok((local, file))
        })
        .map_err(|e| raise("MarketError", e))?;
    result_dict(
        py,
        None,
        &local.root,
        &file,
        local.completions.as_deref(),
        &[],
    )
    .and_then(|d| {
        d.set_item("seconds", local.seconds)?;
        d.set_item("backend", &local.backend)?;
        Ok(d)
    })
}

/// A fresh private directory (mode 0700, a name nobody can guess) for a result file, removed
/// when dropped.
fn tempfile_dir() -> anyhow::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("compute-market-")
        .tempdir()
        .context("creating a temporary directory")
}

/// A connection to one market of a cluster, signing as one keypair: what `compute_market.Market`
/// wraps.
#[pyclass(module = "compute_market._native", frozen)]
struct NativeMarket {
    chain: Arc<RpcChain>,
    kp: Keypair,
    market: u16,
    store: Option<String>,
    policy: FetchPolicy,
    url: String,
}

/// A task id no other post of this client is likely to use: the time, the process and a counter
/// hashed (many Ray actors post under one key at once).
fn fresh_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let h = blake3::hash(
        &[
            now.to_le_bytes().as_slice(),
            &std::process::id().to_le_bytes(),
            &N.fetch_add(1, Ordering::Relaxed).to_le_bytes(),
        ]
        .concat(),
    );
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes")) >> 1
}

fn parse_task(task: &str) -> PyResult<Pubkey> {
    task.parse().map_err(|_| {
        raise(
            "InputError",
            anyhow::anyhow!("{task:?} is not a task address (base58, 32 bytes)"),
        )
    })
}

#[pymethods]
impl NativeMarket {
    /// Connects to `rpc` (a URL) as `keypair` (a keypair file's path, or its 64 bytes) on market
    /// `market`, checking that the cluster answers, the program is initialized and the market
    /// exists. `store` is the content store a job's inputs are uploaded to (`keeper serve`).
    #[new]
    #[pyo3(signature = (rpc, keypair, market=1, store=None, allow_private_urls=false))]
    fn new(
        py: Python<'_>,
        rpc: &str,
        keypair: &Bound<'_, PyAny>,
        market: u16,
        store: Option<String>,
        allow_private_urls: bool,
    ) -> PyResult<Self> {
        let kp = if let Ok(bytes) = keypair.extract::<Vec<u8>>() {
            Keypair::try_from(&bytes[..]).map_err(|e| {
                raise(
                    "KeypairError",
                    anyhow::anyhow!("the keypair's bytes are not a keypair ({e}): give the 64 bytes of a solana-keygen file, or its path"),
                )
            })?
        } else {
            let path: String = keypair.extract().map_err(|_| {
                raise(
                    "KeypairError",
                    anyhow::anyhow!("keypair: give a keypair file's path (str) or its 64 bytes"),
                )
            })?;
            compute_market_keeper::config::read_keypair(&path)
                .map_err(|e| raise("KeypairError", e))?
        };
        if let Some(s) = &store {
            if !(s.starts_with("http://") || s.starts_with("https://")) {
                return Err(raise(
                    "InputError",
                    anyhow::anyhow!(
                        "store {s:?}: give a content store's http(s) URL (a `keeper serve`)"
                    ),
                ));
            }
        }
        let url = rpc.to_string();
        let chain = py.detach(|| -> anyhow::Result<RpcChain> {
            let mut c = RpcChain::new(&url);
            // a client fails fast on a dead cluster (a keeper rides out a restart)
            c.attempts = 3;
            c.slot()?;
            cli::config(&c)?;
            anyhow::ensure!(
                c.account(&compute_market::pda::market(market))?.is_some(),
                "no market {market} on the cluster at {url}: `keeper market list` names the markets there"
            );
            Ok(c)
        });
        let chain = chain.map_err(chain_error)?;
        Ok(NativeMarket {
            chain: Arc::new(chain),
            kp,
            market,
            store: store.map(|s| s.trim_end_matches('/').to_string()),
            policy: FetchPolicy::private(allow_private_urls),
            url: rpc.to_string(),
        })
    }

    /// The signer's address.
    #[getter]
    fn address(&self) -> String {
        self.kp.pubkey().to_string()
    }

    /// The market id.
    #[getter]
    fn market(&self) -> u16 {
        self.market
    }

    /// The RPC URL.
    #[getter]
    fn rpc(&self) -> String {
        self.url.clone()
    }

    /// The stake token's decimals and the signer's balance of it, in base units.
    fn token(&self, py: Python<'_>) -> PyResult<(u8, u64)> {
        py.detach(|| -> anyhow::Result<(u8, u64)> {
            let cfg = cli::config(self.chain.as_ref())?;
            let mint = self
                .chain
                .account(&cfg.stake_mint)?
                .context("the stake mint is not on chain")?;
            // an SPL mint: supply at 36, decimals at 44
            let decimals = *mint
                .get(44)
                .context("the stake mint's account is too short")?;
            let wallet = cli::wallet(self.chain.as_ref(), &self.kp.pubkey())?;
            Ok((decimals, self.chain.token_balance(&wallet)?))
        })
        .map_err(chain_error)
    }

    /// Posts `job` with `reward` (base units) into its escrow: its inputs uploaded to the
    /// store first (what the store already holds is not sent again), after asking the market's
    /// providers whether any would take it (unless `anyway`). Returns the task's address and id.
    #[pyo3(signature = (job, reward, quorum=0, samples=0, region=0, anyway=false))]
    #[allow(clippy::too_many_arguments)]
    fn post(
        &self,
        py: Python<'_>,
        job: &Job,
        reward: u64,
        quorum: u8,
        samples: u16,
        region: u16,
        anyway: bool,
    ) -> PyResult<(String, u64)> {
        let Some(store) = self.store.clone() else {
            return Err(raise(
                "InputError",
                anyhow::anyhow!("a job on the client's data needs a content store: give Market(..., store=\"http://host:port\") (a `keeper serve`)"),
            ));
        };
        let (spec, prepared) = (job.spec, job.prepared.clone());
        py.detach(|| -> PyResult<(String, u64)> {
            // (the funds are checked before this call by `Market.post`, in tokens, and again by
            // `task_post` before it signs)
            let chain = self.chain.as_ref();
            if !anyway {
                let o = cli::task_outlook(
                    chain,
                    self.market,
                    reward,
                    quorum,
                    samples,
                    &spec,
                    &self.policy,
                );
                cli::refuse_untaken(o, &spec).map_err(|e| {
                    let m =
                        format!("{e:#}").replace("post it --anyway", "post it with anyway=True");
                    raise("NoProvider", anyhow::anyhow!(m))
                })?;
            }
            clientdata::upload(&store, &prepared, &FetchPolicy::private(true)).map_err(|e| {
                raise(
                    "MarketError",
                    e.context(format!("uploading the inputs to {store}")),
                )
            })?;
            let id = fresh_id();
            let terms = cli::TaskTerms {
                input_uri: store.clone(),
                market: self.market,
                reward,
                quorum,
                samples,
                region,
            };
            let address = compute_market::pda::task(&self.kp.pubkey(), id);
            let mut posted =
                cli::task_post(chain, &self.kp, terms, vec![(id, spec)]).map_err(|e| {
                    chain_error(e.context(format!(
                        "posting task {address} (id {id}): if its transaction landed after all, \
                         market.status(\"{address}\") says so; check it before posting again"
                    )))
                })?;
            Ok((posted.remove(0).task, id))
        })
    }

    /// The task's state: `(status, open)` — the status name ("Open", "Claimed", "Verifying",
    /// "Accepted", "Rejected", "Undecided", "Cancelled", "Expired") and whether its account is
    /// still open (a closed task's outcome is read from its history).
    fn status(&self, py: Python<'_>, task: &str) -> PyResult<(String, bool)> {
        let key = parse_task(task)?;
        py.detach(|| -> anyhow::Result<(String, bool)> {
            if let Some(t) = self.chain.task(&key)? {
                return Ok((format!("{:?}", t.status), true));
            }
            // the close is indexed a few seconds after it lands
            let mut tries = 0;
            loop {
                let logs = self.chain.logs_of(&key)?;
                match compute_market_keeper::outlook::closed(&key, &logs) {
                    Ok(c) => return Ok((c.status, false)),
                    Err(e) if tries < 10 && format!("{e}").contains("not in its history") => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_secs(2));
                    }
                    Err(e) => return Err(e),
                }
            }
        })
        .map_err(chain_error)
    }

    /// What a task's status means for its client, in words.
    #[staticmethod]
    fn meaning(status: &str) -> String {
        use compute_market::state::TaskStatus::*;
        let s = match status {
            "Accepted" => Accepted,
            "Rejected" => Rejected,
            "Cancelled" => Cancelled,
            "Expired" => Expired,
            "Undecided" => Undecided,
            _ => return String::new(),
        };
        compute_market_keeper::outlook::meaning(s).to_string()
    }

    /// Fetches an Accepted task's result from the provider, then the verifiers that keep it,
    /// every tile checked against the root on chain; nothing is returned unless all of it
    /// matched.
    fn result<'py>(&self, py: Python<'py>, task: &str) -> PyResult<Bound<'py, PyDict>> {
        let key = parse_task(task)?;
        let got = py.detach(|| -> PyResult<_> {
            let c = clientdata::committed_over_rpc(&self.chain, &key).map_err(|e| {
                match format!("{e:#}") {
                    m if m.contains("is closed and was") => raise("TaskFailed", e),
                    m if m.contains("only an Accepted task") => raise("NotReady", e),
                    _ => chain_error(e),
                }
            })?;
            let sources = clientdata::result_sources(self.chain.as_ref(), &c, &[]);
            let dir = tempfile_dir().map_err(|e| raise("MarketError", e))?;
            let out = dir.path().join("result.safetensors");
            let r = clientdata::task_result(
                &key,
                &c,
                clientdata::Wanted::All,
                &sources,
                &out,
                self.policy.clone(),
            )
            .map_err(|e| raise("ResultUnavailable", e))?;
            let file = std::fs::read(&out).map_err(|e| raise("MarketError", e.into()))?;
            Ok((r, file))
        })?;
        let (r, file) = got;
        result_dict(
            py,
            Some(task.to_string()),
            &r.root,
            &file,
            r.completions.as_deref(),
            &[],
        )
        .and_then(|d| {
            d.set_item("source", &r.from)?;
            Ok(d)
        })
    }

    /// Cancels an Open task of this keypair (by its id); its reward is refunded.
    fn cancel(&self, py: Python<'_>, id: u64) -> PyResult<()> {
        py.detach(|| cli::task_cancel(self.chain.as_ref(), &self.kp, id).map(|_| ()))
            .map_err(chain_error)
    }
}

/// A backend whose tiles a Python callable computes: `tiles(job: bytes, bases: list[str],
/// indices: list[int]) -> list[bytes]` (the job's encoded spec, where its inputs are served —
/// the provider's own keeper — and the tiles wanted). `compute_market.ray.RayTiles` fans them
/// out over a Ray cluster. Every tile's length is checked; the root the provider commits covers
/// whatever came back, so a wrong tile costs its bond as any other provider's would.
struct PyBackend {
    tiles: Py<PyAny>,
    bases: Vec<String>,
}

impl compute_market_keeper::compute::Backend for PyBackend {
    fn name(&self) -> String {
        "python".into()
    }

    fn tiles(&self, job: &JobSpec, indices: &[u32]) -> anyhow::Result<Vec<Vec<u8>>> {
        let got: Vec<Vec<u8>> = Python::attach(|py| {
            self.tiles
                .call1(
                    py,
                    (
                        PyBytes::new(py, &job.encode()),
                        self.bases.clone(),
                        indices.to_vec(),
                    ),
                )
                .and_then(|r| r.extract(py))
        })
        .map_err(|e| anyhow::anyhow!("the tile function raised: {e}"))?;
        anyhow::ensure!(
            got.len() == indices.len(),
            "the tile function returned {} tiles for {} asked",
            got.len(),
            indices.len()
        );
        if let Some(i) = got.iter().position(|t| t.len() != job.tile_len()) {
            anyhow::bail!(
                "the tile function's tile {} is {} bytes, not {}",
                indices[i],
                got[i].len(),
                job.tile_len()
            );
        }
        Ok(got)
    }

    /// Every tile at once, so that the callable spreads them over its workers.
    fn run_with_progress(
        &self,
        job: &JobSpec,
        progress: &compute_market_keeper::compute::Progress<'_>,
    ) -> anyhow::Result<Vec<Vec<u8>>> {
        let count = job.tile_count();
        progress(0, u64::from(count));
        let all: Vec<u32> = (0..count).collect();
        let out = self.tiles(job, &all)?;
        progress(u64::from(count), u64::from(count));
        Ok(out)
    }

    fn freivalds(&self, job: &JobSpec, rs: &[Vec<u32>]) -> anyhow::Result<Vec<Vec<u32>>> {
        compute_market_keeper::compute::cpu::CpuBackend.freivalds(job, rs)
    }
}

/// Tiles `indices` of the encoded job `job`, computed here by this machine's backend (CUDA when
/// a GPU passes its self-test, else the CPU): its inputs fetched from `bases` (the provider's
/// keeper serves them) and checked as a provider checks them, then held for the next call. What
/// a Ray worker of a Ray-backed provider runs.
#[pyfunction]
#[pyo3(signature = (job, bases, indices, allow_private_urls=false, version=None))]
fn provider_tiles<'py>(
    py: Python<'py>,
    job: Vec<u8>,
    bases: Vec<String>,
    indices: Vec<u32>,
    allow_private_urls: bool,
    version: Option<String>,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    // a worker on another build of the kernels could compute other tiles: refused by name
    if let Some(v) = version.filter(|v| v != env!("CARGO_PKG_VERSION")) {
        return Err(raise(
            "MarketError",
            anyhow::anyhow!("this Ray worker has compute_market {} and the provider {v}: install the provider's wheel on every node", env!("CARGO_PKG_VERSION")),
        ));
    }
    use std::sync::OnceLock;
    static STORE: OnceLock<compute_market_keeper::results::ResultStore> = OnceLock::new();
    static BACKEND: OnceLock<Arc<dyn compute_market_keeper::compute::Backend>> = OnceLock::new();
    let tiles = py
        .detach(|| -> anyhow::Result<Vec<Vec<u8>>> {
            let job = spec_of(&job)?;
            let store = STORE.get_or_init(|| {
                compute_market_keeper::results::ResultStore::default()
                    .with_policy(FetchPolicy::private(allow_private_urls))
            });
            store
                .ensure_inputs(&job, &bases, None)
                .map_err(|e| anyhow::anyhow!("the job's inputs from {bases:?}: {e}"))?;
            let backend = match BACKEND.get() {
                Some(b) => b.clone(),
                None => {
                    let b = device::select(BackendChoice::Auto)?;
                    BACKEND.get_or_init(|| b).clone()
                }
            };
            backend.tiles(&job, &indices)
        })
        .map_err(|e| raise("MarketError", e))?;
    Ok(tiles.iter().map(|t| PyBytes::new(py, t)).collect())
}

/// What an encoded job spec is: `(kind, dims, tiles)` ("Encoder", (rows, tokens, width), 30).
#[pyfunction]
fn job_info(job: Vec<u8>) -> PyResult<(String, (u32, u32, u32), u32)> {
    let j = spec_of(&job).map_err(|e| raise("InputError", e))?;
    Ok((
        format!("{:?}", j.kind),
        (j.dims[0], j.dims[1], j.dims[2]),
        j.tile_count(),
    ))
}

/// The encoded spec of a MatMulModP job on generated inputs (seeded), for benchmarks of the
/// tile path (`python/tests/ray_bench.py`).
#[pyfunction]
#[pyo3(signature = (m, k, n, seed=7))]
fn generated_matmul<'py>(
    py: Python<'py>,
    m: u32,
    k: u32,
    n: u32,
    seed: u8,
) -> PyResult<Bound<'py, PyBytes>> {
    let job = JobSpec::matmul(m, k, n, [seed; 32]);
    JobSpec::decode(&job.encode())
        .map_err(|e| raise("InputError", anyhow::anyhow!("{m}×{k}·{k}×{n}: {e:?}")))?;
    Ok(PyBytes::new(py, &job.encode()))
}

/// Runs a keeper provider as `keypair` on `market` whose tiles the callable `tiles` computes
/// (see `compute_market.ray.serve_provider`): it claims, fetches inputs, commits, serves and
/// answers disputes as `keeper run --provider` does, with its store at `store` (a redb file)
/// and its HTTP server on `listen`. Returns when the process gets SIGTERM or Ctrl-C.
#[pyfunction]
#[pyo3(signature = (rpc, keypair, tiles, store, listen, market=1, public_url=None, max_active=4, poll_ms=400, allow_private_urls=false, drain_timeout_s=600))]
#[allow(clippy::too_many_arguments)]
fn run_provider(
    py: Python<'_>,
    rpc: &str,
    keypair: &str,
    tiles: Py<PyAny>,
    store: PathBuf,
    listen: String,
    market: u16,
    public_url: Option<String>,
    max_active: usize,
    poll_ms: u64,
    allow_private_urls: bool,
    drain_timeout_s: u64,
) -> PyResult<()> {
    use compute_market_keeper::daemon;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let kp = compute_market_keeper::config::read_keypair(keypair)
        .map_err(|e| raise("KeypairError", e))?;
    let unreachable =
        listen.starts_with("0.0.0.0") || listen.starts_with("[::]") || listen.ends_with(":0");
    if public_url.is_none() && unreachable {
        return Err(raise(
            "InputError",
            anyhow::anyhow!("listen {listen:?}: the Ray workers fetch the inputs from this keeper, so give public_url= (its address as the workers reach it) or listen on a concrete address and port"),
        ));
    }
    let public = public_url
        .clone()
        .unwrap_or_else(|| format!("http://{listen}"));
    let backend = Arc::new(PyBackend {
        tiles,
        bases: vec![public.trim_end_matches('/').to_string()],
    });
    let mut opts = daemon::DaemonOptions::new(market, store);
    opts.provider = true;
    opts.listen = listen;
    opts.public_url = public_url;
    opts.poll = std::time::Duration::from_millis(poll_ms);
    opts.max_active = max_active.max(1);
    opts.ws_url = Some(daemon::ws_url(
        &compute_market_keeper::chain::rpc::resolve_url(rpc),
    ));
    opts.fetch = FetchPolicy::private(allow_private_urls);
    // docs/PROTOCOL.md §3.8: on SIGTERM it finishes what it owes, as `keeper run` does
    opts.drain_timeout = std::time::Duration::from_secs(drain_timeout_s);
    let chain: Arc<dyn Chain> = Arc::new(RpcChain::new(rpc));
    py.detach(|| daemon::run(chain, kp, backend, opts, daemon::signals()))
        .map_err(|e| raise("MarketError", e))
}

/// The native module: jobs, local computation and the market connection.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Job>()?;
    m.add_class::<NativeMarket>()?;
    m.add_function(wrap_pyfunction!(embed_job, m)?)?;
    m.add_function(wrap_pyfunction!(classify_job, m)?)?;
    m.add_function(wrap_pyfunction!(matmul_job, m)?)?;
    m.add_function(wrap_pyfunction!(generate_job, m)?)?;
    m.add_function(wrap_pyfunction!(compute, m)?)?;
    m.add_function(wrap_pyfunction!(provider_tiles, m)?)?;
    m.add_function(wrap_pyfunction!(job_info, m)?)?;
    m.add_function(wrap_pyfunction!(generated_matmul, m)?)?;
    m.add_function(wrap_pyfunction!(run_provider, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
