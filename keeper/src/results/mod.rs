//! Results: a content-addressed store of computed tiles (by Merkle root), the verifier's
//! fetches with proofs (in-process `mem://<root>` for the embedded cluster, `http(s)://` from
//! another keeper), the wire format and the HTTP server that serves the store.
//!
//! Everything fetched is bounded by what the job implies before it is read: a result of T
//! tiles of `tile_len` bytes is never read past T·`tile_len` bytes, however it is compressed,
//! and a sampled fetch never past the sampled tiles with their proofs (PROTOCOL §5).
//!
//! A verifier keeps what it fetched and checked in its [`reserve`] and serves it again (PROTOCOL
//! §8.12), and a client gathers a result from every source that serves it ([`sources`]).
//!
//! One-way layers: [`wire`] (encoding) and [`net`] (which addresses may be fetched) ←
//! [`store`] (memory or disk) ← [`reserve`] (what a verifier keeps) ← [`client`] (fetch over
//! HTTP) and [`server`] (serve over HTTP, admitting connections through [`admission`]) ← this
//! module's [`ResultStore`] ← [`sources`] (a result from several keepers); nothing here
//! imports the roles, the chain or the commands.

use std::sync::Arc;

use compute_market_protocol::{hash::Digest, job::JobSpec};

use crate::verify::{commit, ProvenTile};

pub mod admission;
pub mod client;
pub mod content;
pub mod net;
pub mod reserve;
pub mod server;
pub mod sources;
pub mod store;
pub mod wire;

pub use net::FetchPolicy;
pub use server::{serve, HttpServer, ServerLimits};
pub use store::{Entry, StoreStats};

/// Why a result could not be fetched, split by what a verifier should do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// Not now (connection refused, a timeout, a busy server): retry until the check's
    /// deadline, then vote INVALID.
    Unavailable(String),
    /// The URL or what was served breaks the protocol (too large, malformed, the wrong tiles,
    /// a forbidden address, nothing under that root): vote INVALID at once.
    Invalid(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Unavailable(m) | FetchError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for FetchError {}

impl FetchError {
    /// Whether retrying later may help.
    pub fn is_transient(&self) -> bool {
        matches!(self, FetchError::Unavailable(_))
    }
}

/// Lower-case hex of a digest (how roots appear in URLs).
pub fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses 64 hex characters into a digest; `None` for anything else (checked on characters,
/// so no input can make it slice inside a multi-byte character).
pub fn parse_hex_digest(s: &str) -> Option<Digest> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut d = [0u8; 32];
    for (i, pair) in s.as_bytes().chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        d[i] = (hi * 16 + lo) as u8;
    }
    Some(d)
}

fn parse_mem_uri(uri: &str) -> Result<Digest, FetchError> {
    let Some(h) = uri.strip_prefix("mem://") else {
        return Err(FetchError::Invalid(format!(
            "unsupported result URL {uri:?} (expected mem://<root> or http(s)://host/r/<root>)"
        )));
    };
    if h.chars().count() != 64 {
        return Err(FetchError::Invalid(format!(
            "result URL {uri:?} does not name a 32-byte root"
        )));
    }
    parse_hex_digest(h).ok_or_else(|| FetchError::Invalid(format!("result URL {uri:?} is not hex")))
}

/// The content store's budget in memory (the embedded cluster, tests).
pub const DEFAULT_CONTENT_BUDGET: u64 = 1 << 30;

/// Results by Merkle root, in memory or in a directory, with the fetch policy its verifiers
/// use for `http(s)://` results.
pub struct ResultStore {
    store: store::Store,
    /// Objects by SHA-256: clients' input parts and manifests (`/c/<hash>`).
    pub content: content::ContentStore,
    /// When set (`http://host:port`), published URLs point at this keeper's HTTP server.
    pub base_url: Option<String>,
    /// What remote results may be fetched from, and how long a fetch may take.
    pub policy: FetchPolicy,
    /// Where content fetches and hits are counted (set by the daemon).
    pub metrics: std::sync::OnceLock<Arc<crate::metrics::Metrics>>,
    /// The provider's card, served at `/provider` (none: this keeper runs no provider).
    card: std::sync::RwLock<Option<Arc<crate::card::Card>>>,
    /// Results in their voting window, until when ([`ResultStore::set_hot`]).
    hot: std::sync::Mutex<std::collections::HashMap<Digest, std::time::Instant>>,
    client: std::sync::OnceLock<Result<client::Client, String>>,
    /// The node's keypair its fetches are signed with ([`ResultStore::with_signer`]).
    signer: Option<Arc<solana_keypair::Keypair>>,
    /// One fetch per object at a time (the others wait for it, then find it held).
    fetching: std::sync::Mutex<std::collections::HashMap<Digest, Arc<std::sync::Mutex<()>>>>,
    /// Results of other providers this keeper's verifier checked, kept to be served again
    /// (PROTOCOL §8.12; [`ResultStore::with_reserve`]).
    pub reserve: reserve::Reserve,
}

impl Default for ResultStore {
    fn default() -> Self {
        ResultStore::with(store::Store::memory(), None)
    }
}

impl ResultStore {
    fn with(store: store::Store, base_url: Option<String>) -> Self {
        Self::with_content(
            store,
            content::ContentStore::memory(DEFAULT_CONTENT_BUDGET),
            base_url,
        )
    }

    fn with_content(
        store: store::Store,
        content: content::ContentStore,
        base_url: Option<String>,
    ) -> Self {
        ResultStore {
            store,
            content,
            base_url,
            policy: FetchPolicy::default(),
            metrics: Default::default(),
            card: Default::default(),
            hot: Default::default(),
            client: Default::default(),
            signer: None,
            fetching: Default::default(),
            reserve: reserve::Reserve::memory(
                reserve::MEMORY_MAX_BYTES,
                reserve::DEFAULT_RETENTION,
            ),
        }
    }

    /// Keeps what its verifier checked in `reserve` (a directory and a bound: `keeper run
    /// --reserve-max-bytes`) instead of the default one in memory.
    pub fn with_reserve(mut self, reserve: reserve::Reserve) -> Self {
        self.reserve = reserve;
        self
    }

    /// The whole result served under `root`: this keeper's own, else one its verifier kept.
    pub fn served(&self, root: &Digest) -> Option<Arc<Entry>> {
        self.store.get(root).or_else(|| self.reserve.whole(root))
    }

    /// Sets the provider's card (served at `/provider`).
    pub fn set_card(&self, card: crate::card::Card) {
        *self.card.write().expect("card lock") = Some(Arc::new(card));
    }

    /// The provider's card, when this keeper runs one.
    pub fn card(&self) -> Option<Arc<crate::card::Card>> {
        self.card.read().expect("card lock").clone()
    }

    /// A store in memory whose published URLs point at `base_url` (`http://host:port`).
    pub fn serving_at(base_url: impl Into<String>) -> Self {
        ResultStore::with(store::Store::memory(), Some(base_url.into()))
    }

    /// A store kept in `dir` within `budget` bytes of disk, publishing under `base_url` (or
    /// as `mem://` when `None`). What the directory holds is served at once: nothing is
    /// recomputed, and a file that cannot be read back is logged and skipped.
    pub fn open(
        dir: &std::path::Path,
        budget: u64,
        base_url: Option<String>,
    ) -> anyhow::Result<Self> {
        Ok(ResultStore::with_content(
            store::Store::open(dir, budget)?,
            content::ContentStore::open(&dir.join("content"), budget)?,
            base_url,
        ))
    }

    /// Replaces the fetch policy (a new HTTP client is built on the next fetch).
    pub fn with_policy(mut self, policy: FetchPolicy) -> Self {
        self.policy = policy;
        self.client = Default::default();
        self
    }

    /// Signs every fetch of this store (results, inputs) with the node's keypair `kp`, so
    /// that other keepers' servers admit its requests ahead of strangers' (a verifier's and a
    /// provider's fetches pass theirs; see [`client::Client::signed_by`]).
    pub fn with_signer(mut self, kp: Arc<solana_keypair::Keypair>) -> Self {
        self.signer = Some(kp);
        self.client = Default::default();
        self
    }

    /// The URL under which `root` is published.
    pub fn uri(&self, root: &Digest) -> String {
        match &self.base_url {
            Some(base) => format!("{base}/r/{}", hex(root)),
            None => format!("mem://{}", hex(root)),
        }
    }

    /// Stores `tiles` of `job` computed for `task` (written through to disk, durably, when
    /// the store has a directory); returns the root and the URL to publish.
    pub fn publish(
        &self,
        task: [u8; 32],
        job: JobSpec,
        tiles: Vec<Vec<u8>>,
    ) -> anyhow::Result<(Digest, String)> {
        let tree = commit(&tiles);
        let root = tree.root();
        self.store.put(root, task, job, tiles, tree)?;
        Ok((root, self.uri(&root)))
    }

    /// Marks the result under `root` as in its voting window until `until`: its transfers take
    /// the server's urgent pool, ahead of bulk traffic (its provider calls this while its task
    /// is being verified).
    pub fn set_hot(&self, root: Digest, until: std::time::Instant) {
        let mut h = self.hot.lock().expect("hot lock");
        let now = std::time::Instant::now();
        h.retain(|_, t| *t > now);
        h.insert(root, until);
    }

    /// Whether `root` is in its voting window.
    pub fn is_hot(&self, root: &Digest) -> bool {
        self.hot
            .lock()
            .expect("hot lock")
            .get(root)
            .is_some_and(|t| *t > std::time::Instant::now())
    }

    /// The stored result under `root`.
    pub fn entry(&self, root: &Digest) -> Option<Arc<Entry>> {
        self.store.get(root)
    }

    /// Every stored result.
    pub fn entries(&self) -> Vec<Arc<Entry>> {
        self.store.all()
    }

    /// Deletes the result under `root` (its file too).
    pub fn remove(&self, root: &Digest) -> anyhow::Result<()> {
        self.store.remove(root)
    }

    /// Bytes held and the budget.
    pub fn stats(&self) -> StoreStats {
        self.store.stats()
    }

    fn http(&self) -> Result<&client::Client, FetchError> {
        self.client
            .get_or_init(|| {
                let c = client::Client::new(&self.policy).map_err(|e| format!("{e:#}"))?;
                Ok(match &self.signer {
                    Some(kp) => c.signed_by(kp.clone()),
                    None => c,
                })
            })
            .as_ref()
            .map_err(|e| FetchError::Unavailable(format!("cannot build the HTTP client: {e}")))
    }

    /// When a fetch of `bytes` must be done: the policy's time for that size, or `deadline`
    /// when sooner.
    fn deadline(&self, bytes: u64, deadline: Option<std::time::Instant>) -> std::time::Instant {
        let by_size = std::time::Instant::now() + self.policy.time_for(bytes);
        deadline.map_or(by_size, |d| d.min(by_size))
    }

    fn local(&self, uri: &str) -> Result<Arc<Entry>, FetchError> {
        let root = parse_mem_uri(uri)?;
        self.served(&root).ok_or_else(|| {
            FetchError::Invalid(format!(
                "result URL {uri:?} is unreachable: nothing served under that root"
            ))
        })
    }

    fn is_http(uri: &str) -> bool {
        uri.starts_with("http://") || uri.starts_with("https://")
    }

    /// Every tile of `job`'s result at `uri`: exactly `T` tiles of the job's tile length, or
    /// an error (nothing past that many bytes is read), within the policy's time for that size.
    pub fn fetch_all(&self, uri: &str, job: &JobSpec) -> Result<Vec<Vec<u8>>, FetchError> {
        self.fetch_all_by(uri, job, None)
    }

    /// [`ResultStore::fetch_all`], finished by `deadline` when one is given (the earlier of it
    /// and the policy's time applies).
    pub fn fetch_all_by(
        &self,
        uri: &str,
        job: &JobSpec,
        deadline: Option<std::time::Instant>,
    ) -> Result<Vec<Vec<u8>>, FetchError> {
        if Self::is_http(uri) {
            let d = self.deadline(wire::all_len(job), deadline);
            return self.http()?.fetch_all(uri, job, d);
        }
        let e = self.local(uri)?;
        let tiles = e
            .tiles()
            .map_err(|e| FetchError::Unavailable(format!("{e:#}")))?;
        wire::check_all_shape(job, &tiles)?;
        Ok(tiles)
    }

    /// Tiles `indices` (distinct) of `job`'s result at `uri`, with Merkle proofs, exactly in
    /// that order, or an error: an answer with other tiles, more or fewer, is refused.
    pub fn fetch(
        &self,
        uri: &str,
        job: &JobSpec,
        indices: &[u32],
    ) -> Result<Vec<ProvenTile>, FetchError> {
        self.fetch_by(uri, job, indices, None)
    }

    /// [`ResultStore::fetch`], finished by `deadline` when one is given.
    pub fn fetch_by(
        &self,
        uri: &str,
        job: &JobSpec,
        indices: &[u32],
        deadline: Option<std::time::Instant>,
    ) -> Result<Vec<ProvenTile>, FetchError> {
        let served = if Self::is_http(uri) {
            let d = self.deadline(wire::proven_len(job, indices.len()), deadline);
            self.http()?.fetch(uri, job, indices, d)?
        } else {
            let e = self.local(uri)?;
            e.proven(indices)
                .map_err(|e| FetchError::Invalid(format!("{e:#}")))?
        };
        wire::check_proven_shape(job, indices, &served)?;
        Ok(served)
    }

    /// The object `hash` (at most `limit` bytes): from the content store, else from the first
    /// of `bases` (`<base>/c/<hex>`) that serves it, checked against its hash and kept. A hit
    /// counts in `hits`.
    pub fn fetch_content(
        &self,
        bases: &[String],
        hash: &Digest,
        limit: u64,
        deadline: Option<std::time::Instant>,
    ) -> Result<(Arc<Vec<u8>>, bool), FetchError> {
        let hit = || {
            let b = self.content.get(hash)?;
            if let Some(m) = self.metrics.get() {
                m.content_hits.inc();
            }
            Some((b, true))
        };
        if let Some(h) = hit() {
            return Ok(h);
        }
        // one fetch of an object at a time: a second asker (the prefetcher and a verifier of
        // the same keeper) waits for the first, within its own deadline, then finds it held
        let gate = self
            .fetching
            .lock()
            .expect("fetching lock")
            .entry(*hash)
            .or_default()
            .clone();
        let end = self.deadline(limit, deadline);
        let _one = loop {
            match gate.try_lock() {
                Ok(g) => break g,
                Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    if std::time::Instant::now() >= end {
                        return Err(FetchError::Unavailable(format!(
                            "{} is being fetched by another task and was not done in time",
                            hex(hash)
                        )));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        };
        let out = match hit() {
            Some(h) => Ok(h),
            None => self.fetch_content_once(bases, hash, limit, deadline),
        };
        drop(_one);
        let mut f = self.fetching.lock().expect("fetching lock");
        if Arc::strong_count(&gate) <= 2 {
            f.remove(hash);
        }
        out
    }

    /// [`ResultStore::fetch_content`] past its hit and its one-at-a-time gate.
    fn fetch_content_once(
        &self,
        bases: &[String],
        hash: &Digest,
        limit: u64,
        deadline: Option<std::time::Instant>,
    ) -> Result<(Arc<Vec<u8>>, bool), FetchError> {
        // each source gets its share of the time left, so one that trickles (a client's host
        // turned hostile) cannot use it all before the next (the provider) is asked; no source
        // serving it is "not now", retried by the caller until its deadline
        let mut errors = vec![];
        for (i, base) in bases.iter().enumerate() {
            if !Self::is_http(base) {
                errors.push(format!("input location {base:?} is not http(s)"));
                continue;
            }
            let end = self.deadline(limit, deadline);
            let share =
                end.saturating_duration_since(std::time::Instant::now()) / (bases.len() - i) as u32;
            let d = std::time::Instant::now() + share;
            let partial = (limit >= RESUMABLE)
                .then(|| self.content.partial_for(hash, base))
                .flatten();
            match self
                .http()?
                .fetch_content(base, hash, limit, d, partial.as_deref())
            {
                Ok(b) => {
                    if let Some(m) = self.metrics.get() {
                        m.content_fetches.inc();
                    }
                    if let Err(e) = self.content.put_checked(hash, &b, false) {
                        tracing::warn!(object = %hex(hash), error = %e, "fetched content not kept");
                    }
                    // kept (or not keepable): nothing left to resume
                    if let Some(p) = partial {
                        let _ = std::fs::remove_file(p);
                    }
                    return Ok((Arc::new(b), false));
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        Err(FetchError::Unavailable(if errors.is_empty() {
            "no input location to fetch from".into()
        } else {
            format!("no source served {}: {}", hex(hash), errors.join("; "))
        }))
    }

    /// Makes the inputs of `job` held ([`crate::compute::inputs`]): for a job on the client's
    /// data, its manifest and every part from the content store or the first of `bases` that
    /// serves them, each bounded by what the job implies before it is read, hashed, then
    /// parsed and checked. What it fetched and found: `(objects fetched, objects found)`.
    /// Generated inputs need nothing.
    pub fn ensure_inputs(
        &self,
        job: &JobSpec,
        bases: &[String],
        deadline: Option<std::time::Instant>,
    ) -> Result<(u32, u32), FetchError> {
        use crate::compute::inputs;
        use compute_market_protocol::manifest::{Manifest, Role, MAX_LEN};
        let held = inputs::is_held(job);
        if held && job.input_mode != compute_market_protocol::job::InputMode::ContentHash {
            return Ok((0, 0));
        }
        // the manifest is checked against this job even when its inputs are held: another job
        // may name the same manifest and declare something else (its slices)
        let (raw, hit) = self.fetch_content(bases, &job.input, MAX_LEN as u64, deadline)?;
        let manifest = Manifest::decode(&raw).map_err(|e| FetchError::Invalid(e.to_string()))?;
        manifest
            .check_for(job)
            .and_then(|()| manifest.check_slices_declared(job))
            .map_err(|e| FetchError::Invalid(e.to_string()))?;
        if held {
            // held already, its parts checked: a hit (the manifest's own, if it was fetched)
            if !hit {
                if let Some(m) = self.metrics.get() {
                    m.content_hits.inc();
                }
            }
            return Ok((0, 1));
        }
        let mut counts = (0u32, 0u32);
        let mut count = |hit: bool| if hit { counts.1 += 1 } else { counts.0 += 1 };
        count(hit);
        let mut fetched = vec![];
        for part in &manifest.parts {
            let (bytes, hit) = self.fetch_content(bases, &part.hash, part.len, deadline)?;
            count(hit);
            if bytes.len() as u64 != part.len {
                return Err(FetchError::Invalid(format!(
                    "input {} is {} bytes, its manifest says {}",
                    part.role.name(),
                    bytes.len(),
                    part.len
                )));
            }
            fetched.push(bytes);
        }
        let invalid = |e: anyhow::Error| FetchError::Invalid(format!("{e:#}"));
        if job.kind == compute_market_protocol::job::JobKind::Mlp {
            let [rows, features, classes] = job.dims.map(|d| d as usize);
            let model = crate::compute::mlp::parse_model(&fetched[0], features, classes)
                .map_err(invalid)?;
            if model.work_per_row() != job.work_per_row {
                return Err(FetchError::Invalid(format!(
                    "the model does {} multiply-adds per row, the job says {}",
                    model.work_per_row(),
                    job.work_per_row
                )));
            }
            let batch =
                crate::compute::mlp::parse_batch(&fetched[1], rows, features).map_err(invalid)?;
            use crate::compute::slices;
            slices::check(&manifest, Role::Model, slices::of_model(&model)).map_err(invalid)?;
            slices::check(&manifest, Role::Batch, slices::of_batch(&batch)).map_err(invalid)?;
            inputs::hold_mlp(
                job.input,
                inputs::MlpInputs {
                    model: Arc::new(model),
                    batch: Arc::new(batch),
                },
            );
            return Ok(counts);
        }
        if job.kind == compute_market_protocol::job::JobKind::Generate {
            let [rows, max_tokens, _] = job.dims.map(|d| d as usize);
            let model = crate::compute::decoder::parse_model(&fetched[0]).map_err(invalid)?;
            let prompts =
                crate::compute::decoder::job::parse_prompts(&fetched[1], &model, rows, max_tokens)
                    .map_err(invalid)?;
            // the model's and the prompts' slices, when the manifest names them (so that the
            // program can referee the job by a game over a token's trace, PROTOCOL §8.13): a
            // manifest naming others is refused, so no task is claimed on slices nobody holds
            use crate::compute::slices;
            slices::check_with(&manifest, Role::Model, || {
                slices::of_decoder(&model.decoder, model.eos)
            })
            .map_err(invalid)?;
            slices::check_with(&manifest, Role::Prompts, || {
                slices::of_prompts(&prompts.ids, max_tokens as u32, &prompts.sampling)
            })
            .map_err(invalid)?;
            let g = crate::compute::decoder::job::GenerateInputs {
                model: Arc::new(model),
                prompts: Arc::new(prompts),
            };
            crate::compute::decoder::job::check_fits(&g, job).map_err(invalid)?;
            inputs::hold_generate(job.input, g);
            return Ok(counts);
        }
        if job.kind == compute_market_protocol::job::JobKind::Encoder {
            let [rows, max_tokens, hidden] = job.dims.map(|d| d as usize);
            let model = crate::compute::encoder::parse_model(&fetched[0]).map_err(invalid)?;
            let e = &model.encoder;
            if max_tokens > e.positions() {
                return Err(FetchError::Invalid(format!(
                    "the job's limit is {max_tokens} tokens a text, the model has {} positions",
                    e.positions()
                )));
            }
            if e.hidden != hidden || e.work_per_token(max_tokens) != job.work_per_row {
                return Err(FetchError::Invalid(format!(
                    "the model is {} wide doing {} multiply-adds a token, the job says {hidden} and {}",
                    e.hidden,
                    e.work_per_token(max_tokens),
                    job.work_per_row
                )));
            }
            let texts = crate::compute::encoder::parse_texts(&fetched[1], rows, max_tokens)
                .map_err(invalid)?;
            // the texts tokenized while the model's slices are checked (each on a core)
            use crate::compute::slices;
            let (ids, model_slices) = rayon::join(
                || crate::compute::encoder::tokenize(&model, &texts, max_tokens),
                || {
                    slices::check_with(&manifest, Role::Model, || {
                        slices::of_encoder(&model.encoder)
                    })
                },
            );
            model_slices.map_err(invalid)?;
            let ids = ids.map_err(invalid)?;
            // the texts are refereed by their ids: a manifest naming ids other than this
            // keeper's tokenization is refused, so no task is claimed on ids nobody computed
            slices::check_with(&manifest, Role::Texts, || {
                slices::of_ids(&ids, max_tokens as u32)
            })
            .map_err(invalid)?;
            inputs::hold_encoder(job.input, inputs::EncoderInputs::new(model.encoder, ids));
            return Ok(counts);
        }
        let mut parsed = vec![];
        for (part, bytes) in manifest.parts.iter().zip(&fetched) {
            let m = inputs::parse_matrix(job, part.role, bytes).map_err(invalid)?;
            parsed.push(Arc::new(m));
        }
        let [a, b]: [Arc<crate::compute::Matrix>; 2] = parsed
            .try_into()
            .map_err(|_| FetchError::Invalid("a MatMulModP job takes two matrices".into()))?;
        use crate::compute::slices;
        slices::check(&manifest, Role::A, slices::of_matrix(&a, false)).map_err(invalid)?;
        slices::check(&manifest, Role::B, slices::of_matrix(&b, true)).map_err(invalid)?;
        inputs::hold(job.input, inputs::MatrixInputs { a, b });
        Ok(counts)
    }
}

/// Objects at least this large are downloaded through a partial file in the content store,
/// resumed after a dropped connection or a restart; smaller ones are fetched again.
pub const RESUMABLE: u64 = 1 << 20;

/// Where the inputs of a task may be fetched from: its input URI, then the keepers that
/// serve its result (a provider holds the inputs it computed on), given as result URLs
/// (`<base>/r/<root>`) or bases.
pub fn input_bases(input_uri: &str, result_uris: &[&str]) -> Vec<String> {
    let mut out = vec![];
    if !input_uri.is_empty() {
        out.push(input_uri.trim_end_matches('/').to_string());
    }
    for u in result_uris {
        let base = match u.rfind("/r/") {
            Some(i) => &u[..i],
            None => u,
        };
        if !base.is_empty() && !out.iter().any(|o| o == base) {
            out.push(base.to_string());
        }
    }
    out
}
