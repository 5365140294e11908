//! What a job computes on: matrices generated from its seed, or the client's own parts
//! (PROTOCOL §5, Inputs), parsed from safetensors and checked, then held by content hash.
//!
//! Fetching is a higher layer's business (`results::inputs`): it hashes what it fetched,
//! parses it here ([`parse_matrix`]) and hands the checked matrices to [`hold`]. Backends only
//! ever read verified inputs ([`matrices`]): a job on client data whose inputs are not held is
//! an error, never a computation on something else. The held set is process-wide and keyed by
//! the manifest's SHA-256 (the job's `input` field), so every role of a keeper and every job on
//! the same data share one copy; it is bounded by bytes and evicts the least recently used.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use anyhow::{anyhow, bail, ensure, Result};
use compute_market_protocol::{
    hash::{hashv, Digest},
    job::{InputMode, JobKind, JobSpec},
    manifest::{shape_of, Role},
    P,
};
use safetensors::{Dtype, SafeTensors};

use super::{tensors::check_framing, Matrix};

/// A `MatMulModP` job's inputs.
#[derive(Clone, Debug)]
pub struct MatrixInputs {
    /// A, m × k.
    pub a: Arc<Matrix>,
    /// B, k × n.
    pub b: Arc<Matrix>,
}

/// Parses part `role` of `job` from the exact bytes fetched: a safetensors file whose only
/// tensor is named after the role, dtype `U32`, shaped as the job says, every element a field
/// element (the first one that is not is named by its index).
pub fn parse_matrix(job: &JobSpec, role: Role, bytes: &[u8]) -> Result<Matrix> {
    let [rows, cols] = shape_of(job, role)
        .ok_or_else(|| anyhow!("a {:?} job has no input {}", job.kind, role.name()))?;
    let name = role.name();
    check_framing(bytes, &format!("input {name}"))?;
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| anyhow!("input {name}: malformed safetensors: {e}"))?;
    let names = st.names();
    ensure!(
        names.len() == 1 && names[0] == name,
        "input {name}: the file must hold exactly one tensor named {name:?}, it holds {names:?}"
    );
    let t = st
        .tensor(name)
        .map_err(|e| anyhow!("input {name}: malformed safetensors: {e}"))?;
    ensure!(
        t.dtype() == Dtype::U32,
        "input {name}: dtype {:?}, the job takes U32 field elements",
        t.dtype()
    );
    ensure!(
        t.shape() == [rows as usize, cols as usize],
        "input {name}: shape {:?}, the job's is [{rows}, {cols}]",
        t.shape()
    );
    let data: Vec<u32> = t
        .data()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    if let Some(i) = data.iter().position(|&v| v as u64 >= P) {
        bail!(
            "input {name}: element {i} (row {}, column {}) is {}, not below 2^31 − 1",
            i as u64 / cols,
            i as u64 % cols,
            data[i]
        );
    }
    Ok(Matrix {
        rows: rows as usize,
        cols: cols as usize,
        data,
    })
}

/// The safetensors bytes of `m` as the tensor of `role` (what clients upload).
pub fn matrix_file(role: Role, m: &Matrix) -> Result<Vec<u8>> {
    tensor_file(role.name(), m.rows, m.cols, &m.data)
}

/// The safetensors bytes of one `U32` tensor `name` of shape `[rows, cols]`.
pub fn tensor_file(name: &str, rows: usize, cols: usize, data: &[u32]) -> Result<Vec<u8>> {
    tensor_file_with(name, rows, cols, data, HashMap::new())
}

/// [`tensor_file`] with `metadata` in the header (`__metadata__`).
pub fn tensor_file_with(
    name: &str,
    rows: usize,
    cols: usize,
    data: &[u32],
    metadata: HashMap<String, String>,
) -> Result<Vec<u8>> {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(Dtype::U32, vec![rows, cols], &bytes)
        .map_err(|e| anyhow!("{e}"))?;
    let meta = (!metadata.is_empty()).then_some(metadata);
    safetensors::serialize([(name, view)], meta).map_err(|e| anyhow!("{e}"))
}

/// The SHA-256 of `bytes` (content addresses).
pub fn content_hash(bytes: &[u8]) -> Digest {
    hashv(&[bytes])
}

/// Default bytes of verified inputs held at most (least recently used evicted beyond it).
pub const HELD_BYTES: usize = 4 << 30;

static HELD_BUDGET: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(HELD_BYTES);

/// Sets how many bytes of verified inputs are held at most (`keeper run --held-inputs-mib`);
/// what is over it is evicted, least recently used first, at the next hold.
pub fn set_held_budget(bytes: usize) {
    HELD_BUDGET.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

fn held_budget() -> usize {
    HELD_BUDGET.load(std::sync::atomic::Ordering::Relaxed)
}

/// An `Mlp` job's inputs.
#[derive(Clone, Debug)]
pub struct MlpInputs {
    /// The model, checked for the job's widths.
    pub model: Arc<compute_market_protocol::infer::Mlp>,
    /// The batch, N × F.
    pub batch: Arc<super::mlp::Batch>,
}

/// An `Encoder` job's inputs: the checked encoder and the texts as token ids (tokenized once,
/// when fetched, by the model's own tokenizer; every text within the job's token limit).
#[derive(Clone, Debug)]
pub struct EncoderInputs {
    /// The encoder, checked for the job's width and work per token.
    pub encoder: Arc<compute_market_protocol::encoder::Encoder>,
    /// Token ids of each text, `[CLS]` and `[SEP]` included.
    pub ids: Arc<Vec<Vec<u32>>>,
    /// The encoder packed for the fast path with this machine's widest kernel set.
    pub fast: Arc<super::encoder::cpu::Fast>,
}

impl EncoderInputs {
    /// A checked encoder and its texts' ids, the encoder packed for the fast path.
    pub fn new(encoder: compute_market_protocol::encoder::Encoder, ids: Vec<Vec<u32>>) -> Self {
        let encoder = Arc::new(encoder);
        let fast = super::encoder::cpu::Fast::new(
            encoder.clone(),
            super::encoder::gemm::KernelSet::best(),
        );
        EncoderInputs {
            encoder,
            ids: Arc::new(ids),
            fast: Arc::new(fast),
        }
    }
}

/// A job's checked inputs, of whichever kind.
#[derive(Clone, Debug)]
enum Inputs {
    Matrices(MatrixInputs),
    Mlp(MlpInputs),
    Encoder(EncoderInputs),
    Generate(super::decoder::job::GenerateInputs),
}

#[derive(Default)]
struct Held {
    sets: HashMap<Digest, (Inputs, u64)>,
    clock: u64,
    bytes: usize,
}

fn held() -> &'static Mutex<Held> {
    static HELD: OnceLock<Mutex<Held>> = OnceLock::new();
    HELD.get_or_init(Default::default)
}

fn size_of(i: &Inputs) -> usize {
    match i {
        Inputs::Matrices(m) => 4 * (m.a.data.len() + m.b.data.len()),
        Inputs::Mlp(m) => {
            m.batch.x.len()
                + m.model
                    .layers
                    .iter()
                    .map(|l| l.weight.len() + 12 * l.out)
                    .sum::<usize>()
        }
        Inputs::Encoder(e) => {
            encoder_weight_bytes(&e.encoder)
                + e.fast.bytes()
                + 4 * e.ids.iter().map(Vec::len).sum::<usize>()
        }
        Inputs::Generate(g) => {
            super::decoder::weight_bytes(&g.model.decoder)
                + g.prompts.texts.iter().map(String::len).sum::<usize>()
                + 4 * g.prompts.ids.iter().map(Vec::len).sum::<usize>()
        }
    }
}

/// Bytes an encoder's tensors take held: int8 weights and embeddings, int32 vectors, tables.
fn encoder_weight_bytes(e: &compute_market_protocol::encoder::Encoder) -> usize {
    let dense = |d: &compute_market_protocol::encoder::Dense| d.weight.len() + 12 * d.out;
    e.word.len()
        + e.pos.len()
        + 4 * e.exp.len()
        + e.blocks
            .iter()
            .map(|b| {
                [&b.q, &b.k, &b.v, &b.o, &b.f1, &b.f2]
                    .map(dense)
                    .iter()
                    .sum::<usize>()
                    + 2 * b.gelu.len()
                    + 8 * 5 * e.hidden
            })
            .sum::<usize>()
}

fn hold_any(manifest: Digest, inputs: Inputs) {
    let mut h = held().lock().expect("held lock");
    h.clock += 1;
    let (clock, size) = (h.clock, size_of(&inputs));
    if let Some((old, _)) = h.sets.insert(manifest, (inputs, clock)) {
        h.bytes -= size_of(&old);
    }
    h.bytes += size;
    while h.bytes > held_budget() && h.sets.len() > 1 {
        let oldest = *h
            .sets
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(k, _)| k)
            .expect("non-empty");
        if let Some((gone, _)) = h.sets.remove(&oldest) {
            h.bytes -= size_of(&gone);
        }
    }
}

/// Holds the verified matrices of every job whose manifest hashes to `manifest`.
pub fn hold(manifest: Digest, inputs: MatrixInputs) {
    hold_any(manifest, Inputs::Matrices(inputs))
}

/// Holds the verified model and batch of every `Mlp` job whose manifest hashes to `manifest`.
pub fn hold_mlp(manifest: Digest, inputs: MlpInputs) {
    hold_any(manifest, Inputs::Mlp(inputs))
}

/// Holds the verified encoder and tokenized texts of every `Encoder` job whose manifest hashes
/// to `manifest`.
pub fn hold_encoder(manifest: Digest, inputs: EncoderInputs) {
    hold_any(manifest, Inputs::Encoder(inputs))
}

/// Holds the verified decoder and prompts of every `Generate` job whose manifest hashes to
/// `manifest`.
pub fn hold_generate(manifest: Digest, inputs: super::decoder::job::GenerateInputs) {
    hold_any(manifest, Inputs::Generate(inputs))
}

/// Bytes the inputs of `job` take when held, at their bound.
fn need_of(job: &JobSpec) -> usize {
    let [a, b, c] = job.dims.map(|d| d as usize);
    match job.kind {
        // the batch, the weights, and bias, multiplier and shift per output of at most
        // MAX_MLP_LAYERS layers of MAX_MLP_WIDTH (what size_of counts once held)
        JobKind::Mlp => {
            a * b
                + job.work_per_row as usize
                + 12 * compute_market_protocol::job::MAX_MLP_LAYERS as usize
                    * compute_market_protocol::job::MAX_MLP_WIDTH as usize
        }
        // token ids at the limit, the weights, the embeddings at the largest vocabulary, and
        // the vectors of the most blocks (what size_of counts once held)
        JobKind::Encoder => {
            4 * a * b
                + job.work_per_row as usize
                + (compute_market_protocol::job::MAX_ENCODER_VOCAB as usize
                    + compute_market_protocol::job::MAX_ENCODER_TOKENS as usize)
                    * c
                + compute_market_protocol::job::MAX_ENCODER_BLOCKS as usize * (100 * c + 1024)
                + 6 * job.work_per_row as usize / c.max(1)
        }
        // the texts and ids at the limit, and the model at a byte a unit of a token's work
        JobKind::Generate => 20 * a * b + job.work_per_row as usize,
        _ => 4 * (a * b + b * c),
    }
}

/// Whether the inputs of `job` fit among the held inputs without evicting any.
pub fn room_for(job: &JobSpec) -> bool {
    held().lock().expect("held lock").bytes + need_of(job) <= held_budget()
}

/// Drops the inputs held for `manifest`: the next job on them fetches and checks them again
/// (`keeper bench` measures that path).
pub fn release(manifest: &Digest) {
    let mut h = held().lock().expect("held lock");
    if let Some((gone, _)) = h.sets.remove(manifest) {
        h.bytes -= size_of(&gone);
    }
}

/// Whether `i` has the shapes `job` computes on (the same manifest can be named by jobs of
/// other dimensions: held inputs serve only the shape they were checked for).
fn fits(job: &JobSpec, i: &Inputs) -> bool {
    let [rows, inner, cols] = job.dims.map(|d| d as usize);
    match (job.kind, i) {
        (JobKind::MatMulModP, Inputs::Matrices(m)) => {
            (m.a.rows, m.a.cols, m.b.rows, m.b.cols) == (rows, inner, inner, cols)
                && m.a.data.len() == rows * inner
                && m.b.data.len() == inner * cols
        }
        (JobKind::Mlp, Inputs::Mlp(m)) => {
            (m.batch.rows, m.batch.features) == (rows, inner)
                && m.model.layers.last().is_some_and(|l| l.out == cols)
                && m.model.work_per_row() == job.work_per_row
        }
        (JobKind::Encoder, Inputs::Encoder(e)) => {
            e.ids.len() == rows
                && e.ids.iter().all(|t| !t.is_empty() && t.len() <= inner)
                && e.encoder.hidden == cols
                && e.encoder.work_per_token(inner) == job.work_per_row
        }
        (JobKind::Generate, Inputs::Generate(g)) => super::decoder::job::check_fits(g, job).is_ok(),
        _ => false,
    }
}

/// Whether the inputs of `job` are at hand: generated ones always are; a client's when held
/// with this job's shapes.
pub fn is_held(job: &JobSpec) -> bool {
    match job.input_mode {
        InputMode::Generated => true,
        InputMode::ContentHash => held()
            .lock()
            .expect("held lock")
            .sets
            .get(&job.input)
            .is_some_and(|(m, _)| fits(job, m)),
    }
}

/// The held inputs of a job on the client's data, checked for its shapes.
fn held_for(job: &JobSpec) -> Result<Inputs> {
    let mut h = held().lock().expect("held lock");
    h.clock += 1;
    let clock = h.clock;
    let (m, used) = h.sets.get_mut(&job.input).ok_or_else(|| {
        anyhow!(
            "the inputs of this job (manifest {}) are not held: fetch and verify them first",
            job.input
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    })?;
    let [a, b, c] = job.dims;
    let shape = match job.kind {
        JobKind::Mlp => format!(
            "a {a}-row batch of width {b} and a model of {c} classes doing {} multiply-adds a row",
            job.work_per_row
        ),
        JobKind::Encoder => format!(
            "{a} texts of at most {b} tokens and an encoder of width {c} doing {} multiply-adds a token",
            job.work_per_row
        ),
        JobKind::Generate => format!(
            "{a} prompts of at most {b} tokens, {c} new tokens each, on a decoder doing {} work units a token",
            job.work_per_row
        ),
        _ => format!("{a}×{b}·{b}×{c}"),
    };
    ensure!(
        fits(job, m),
        "the inputs held for this manifest are not {shape}: fetch and verify them for this job"
    );
    *used = clock;
    Ok(m.clone())
}

/// The inputs of a `MatMulModP` job: generated from its seed, or the client's, held by
/// [`hold`] after they were fetched and checked.
pub fn matrices(job: &JobSpec) -> Result<MatrixInputs> {
    ensure!(job.kind == JobKind::MatMulModP, "not a MatMulModP job");
    match job.input_mode {
        InputMode::Generated => Ok(MatrixInputs {
            a: Arc::new(Matrix::input_a(job)),
            b: Arc::new(Matrix::input_b(job)),
        }),
        InputMode::ContentHash => match held_for(job)? {
            Inputs::Matrices(m) => Ok(m),
            Inputs::Mlp(_) | Inputs::Encoder(_) | Inputs::Generate(_) => {
                bail!("the inputs held for this manifest are a model, not matrices")
            }
        },
    }
}

/// The model and batch of an `Mlp` job, held by [`hold_mlp`] after they were fetched and
/// checked.
pub fn mlp(job: &JobSpec) -> Result<MlpInputs> {
    ensure!(job.kind == JobKind::Mlp, "not an Mlp job");
    match held_for(job)? {
        Inputs::Mlp(m) => Ok(m),
        _ => bail!("the inputs held for this manifest are not an Mlp's model and batch"),
    }
}

/// The encoder and tokenized texts of an `Encoder` job, held by [`hold_encoder`] after they
/// were fetched and checked.
pub fn encoder(job: &JobSpec) -> Result<EncoderInputs> {
    ensure!(job.kind == JobKind::Encoder, "not an Encoder job");
    match held_for(job)? {
        Inputs::Encoder(e) => Ok(e),
        _ => bail!("the inputs held for this manifest are not an encoder and texts"),
    }
}

/// The decoder and prompts of a `Generate` job, held by [`hold_generate`] after they were
/// fetched and checked.
pub fn generate(job: &JobSpec) -> Result<super::decoder::job::GenerateInputs> {
    ensure!(job.kind == JobKind::Generate, "not a Generate job");
    match held_for(job)? {
        Inputs::Generate(g) => Ok(g),
        _ => bail!("the inputs held for this manifest are not a decoder and prompts"),
    }
}

/// Holds the synthetic model and a `rows`-row batch under `manifest` and returns the `Mlp`
/// job on them (8 rows a tile). Only for one-shot commands (gpu-check): a daemon must never
/// hold inputs it did not fetch, under a manifest a stranger could name.
pub fn hold_synthetic(
    rows: usize,
    manifest: compute_market_protocol::hash::Digest,
) -> compute_market_protocol::job::JobSpec {
    let model = super::mlp::synthetic();
    let job = compute_market_protocol::job::JobSpec::mlp(
        rows as u32,
        64,
        10,
        model.work_per_row(),
        8,
        manifest,
    );
    let batch = super::mlp::Batch {
        rows,
        features: 64,
        x: (0..rows * 64)
            .map(|i| (compute_market_protocol::job::splitmix64(i as u64) % 255) as i8)
            .collect(),
    };
    hold_mlp(
        manifest,
        MlpInputs {
            model: std::sync::Arc::new(model),
            batch: std::sync::Arc::new(batch),
        },
    );
    job
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(m: u32, k: u32, n: u32) -> JobSpec {
        let mut j = JobSpec::matmul(m, k, n, [9; 32]);
        j.input_mode = InputMode::ContentHash;
        j
    }

    fn mat(rows: usize, cols: usize, f: impl Fn(usize) -> u32) -> Matrix {
        Matrix {
            rows,
            cols,
            data: (0..rows * cols).map(f).collect(),
        }
    }

    #[test]
    fn the_held_budget_is_a_setting_and_evicts_the_least_recently_used() {
        let one = |tag: u8| {
            let mut j = JobSpec::matmul(16, 16, 16, [tag; 32]);
            j.input_mode = InputMode::ContentHash;
            let m = Arc::new(mat(16, 16, |i| i as u32));
            hold(j.input, MatrixInputs { a: m.clone(), b: m });
            j
        };
        // each set is 2 KiB: room for two
        set_held_budget(4096);
        let (a, b) = (one(0xa1), one(0xa2));
        assert!(is_held(&a) && is_held(&b));
        assert!(!room_for(&a), "no room for a third without evicting");
        matrices(&a).unwrap(); // a is used again: b is now the least recently used
        let c = one(0xa3);
        assert!(is_held(&a) && is_held(&c) && !is_held(&b));
        set_held_budget(HELD_BYTES);
        for j in [a, c] {
            release(&j.input);
        }
    }

    #[test]
    fn a_written_file_parses_back() {
        let j = job(3, 5, 2);
        let a = mat(3, 5, |i| i as u32 * 1000);
        let f = matrix_file(Role::A, &a).unwrap();
        assert_eq!(parse_matrix(&j, Role::A, &f).unwrap(), a);
    }

    #[test]
    fn bad_parts_are_refused_by_name() {
        let j = job(3, 5, 2);
        let refuse = |bytes: &[u8], role: Role, want: &str| {
            let e = parse_matrix(&j, role, bytes).unwrap_err().to_string();
            assert!(e.contains(want), "{e} (wanted {want})");
        };
        let mut big = mat(3, 5, |_| 1);
        big.data[7] = P as u32;
        refuse(
            &matrix_file(Role::A, &big).unwrap(),
            Role::A,
            "element 7 (row 1, column 2) is 2147483647",
        );
        refuse(
            &matrix_file(Role::A, &mat(5, 3, |_| 0)).unwrap(),
            Role::A,
            "shape [5, 3]",
        );
        refuse(
            &matrix_file(Role::B, &mat(3, 5, |_| 0)).unwrap(),
            Role::A,
            "named \"A\"",
        );
        refuse(b"garbage!garbage", Role::A, "safetensors");
        refuse(b"abc", Role::A, "not a safetensors file");
        let mut huge = vec![0u8; 16];
        huge[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        refuse(&huge, Role::A, "header is");
        // a float tensor of the right shape
        let floats = vec![0u8; 15 * 4];
        let v = safetensors::tensor::TensorView::new(Dtype::F32, vec![3, 5], &floats).unwrap();
        let f = safetensors::serialize([("A", v)], None).unwrap();
        refuse(&f, Role::A, "dtype F32");
    }

    #[test]
    fn client_inputs_are_used_only_once_held() {
        let j = job(2, 2, 2);
        let mut other = j;
        other.input = [8; 32];
        let e = matrices(&other).unwrap_err().to_string();
        assert!(e.contains("not held"), "{e}");
        let a = Arc::new(mat(2, 2, |i| i as u32));
        hold(
            j.input,
            MatrixInputs {
                a: a.clone(),
                b: a.clone(),
            },
        );
        assert!(is_held(&j) && !is_held(&other));
        assert_eq!(*matrices(&j).unwrap().a, *a);
    }
}
