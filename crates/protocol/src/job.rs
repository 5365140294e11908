//! Job specs: the canonical fixed-size encoding stored in every task account.
//!
//! Layout of the 64 bytes (all integers little-endian):
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0      | encoding version, [`JOB_VERSION`] |
//! | 1      | kind: 1 = `MatMulModP`, 2 = `HashBatch`, 3 = `Mlp`, 4 = `Encoder`, 5 = `Generate` |
//! | 2      | input mode: 0 = generated from `input`, 1 = `input` is a content hash (location in the task's input URI) |
//! | 3      | `Mlp`, `Encoder`, `Generate`: rows per tile (1 ..= 64); otherwise reserved, 0 |
//! | 4..16  | three `u32` dimensions: `MatMulModP` (m, k, n); `HashBatch` (tiles, nonces per tile, iterations); `Mlp` (rows, features, classes); `Encoder` (texts, tokens per text at most, hidden width); `Generate` (prompts, prompt tokens at most, new tokens at most) |
//! | 16..48 | input seed or content hash |
//! | 48..56 | `Mlp`: multiply-adds per row; `Encoder`, `Generate`: work units per token (`u64`); otherwise reserved, 0 |
//! | 56..64 | `MatMulModP` and `Mlp` on the client's data: the length of the slice string of A or of the model that the manifest names (`u64`, PROTOCOL §8.7), 0 when it names none; otherwise reserved, 0 |

use crate::hash::{digest_u64, hashv, Digest};

/// Size of an encoded job spec.
pub const JOB_SPEC_LEN: usize = 64;
/// Current encoding version. It names the result commitment too: 2 = BLAKE3 of the output
/// ([`crate::merkle`]); version 1 (a SHA-256 tree) is refused, so no task posted for one
/// scheme is ever judged under the other.
pub const JOB_VERSION: u8 = 2;
/// Side of a square `MatMulModP` output tile.
pub const MATMUL_TILE: u32 = 64;
/// Largest matrix dimension accepted.
pub const MAX_MATRIX_DIM: u32 = 8192;
/// Most `HashBatch` tiles.
pub const MAX_HASH_TILES: u32 = 65_536;
/// Most nonces in one `HashBatch` tile.
pub const MAX_NONCES_PER_TILE: u32 = 4_096;
/// Most SHA-256 iterations per nonce.
pub const MAX_HASH_ITERATIONS: u32 = 1_024;
/// Most rows of an `Mlp` batch.
pub const MAX_MLP_ROWS: u32 = 65_536;
/// Widest `Mlp` layer (features, classes, hidden widths).
pub const MAX_MLP_WIDTH: u32 = 4_096;
/// Most `Mlp` layers.
pub const MAX_MLP_LAYERS: u64 = 8;
/// Most texts of an `Encoder` job.
pub const MAX_ENCODER_ROWS: u32 = 65_536;
/// Most tokens of one `Encoder` text (`[CLS]` and `[SEP]` included).
pub const MAX_ENCODER_TOKENS: u32 = 512;
/// Widest `Encoder` hidden state.
pub const MAX_ENCODER_HIDDEN: u32 = 512;
/// Most `Encoder` blocks.
pub const MAX_ENCODER_BLOCKS: u64 = 24;
/// Widest `Encoder` feed-forward layer.
pub const MAX_ENCODER_FFN: u64 = 4_096;
/// Largest `Encoder` vocabulary.
pub const MAX_ENCODER_VOCAB: u64 = 262_144;
/// Bytes of UTF-8 one `Encoder` text may have per token of the job's limit (16 · L a text).
pub const ENCODER_TEXT_BYTES_PER_TOKEN: u64 = 16;
/// Most bytes of an `Encoder` texts part (and at most 16 · N · L).
pub const MAX_ENCODER_TEXTS_BYTES: u64 = 64 << 20;

/// An `Encoder` job's work units per token (PROTOCOL §5, Encoder) for `blocks` blocks of width
/// `h`, feed-forward `f` and `heads` heads, texts of up to `limit` tokens: per block the GEMMs'
/// multiply-adds `4h² + 2hf`, the attention's at the limit weighted as scalar work `8·limit·h`,
/// its per-score exp lookup and division `64·heads·limit`, and the element-wise steps
/// `16·(6h + f)`.
pub fn encoder_work_per_token(blocks: u64, h: u64, f: u64, heads: u64, limit: u64) -> u64 {
    blocks * (4 * h * h + 2 * h * f + 8 * limit * h + 64 * heads * limit + 16 * (6 * h + f))
}
/// Most prompts of a `Generate` job.
pub const MAX_GENERATE_PROMPTS: u32 = 65_536;
/// Most positions of a `Generate` sequence, prompt and completion together: the decoder
/// format's bound on its RoPE table ([`crate::decoder::MAX_POSITIONS`]); a model with fewer
/// positions refuses longer jobs by name.
pub const MAX_GENERATE_CONTEXT: u32 = 8_192;
/// Most new tokens of one `Generate` completion. Why 1 024: a completion is one tile's row of
/// `4 · (G + 1)` bytes, so a tile of 64 is about 256 KiB (262 400 bytes); the verifier's prefill of
/// one completion, and the provider's `G` sequential decode steps, stay within what a task's
/// windows allow on one CPU (SmolLM2 on 2 cores: about a minute); longer answers are several
/// tasks, each continuing the last.
pub const MAX_GENERATE_NEW: u32 = 1_024;
/// Most work units per token of a `Generate` job's decoder (far above any decoder the format
/// holds at 64 layers of width 4 096: a bound that keeps `work` in range).
pub const MAX_GENERATE_WORK_PER_TOKEN: u64 = 1 << 40;
/// A decode step is charged as at least this many tokens of work: the `G` steps of a
/// completion run one after the other (each needs the last token), and a step over few
/// prompts reads every weight for few multiply-adds, so a small batch is priced and timed by
/// its steps, not its tokens ([`JobSpec::work`]).
pub const DECODE_FLOOR: u64 = 8;

/// A `Generate` job's work units per token (PROTOCOL §5, Generate) for a decoder of `layers`
/// layers of width `h`, feed-forward `f`, `heads` query heads and `kv_heads` key/value heads of
/// width `d`, a vocabulary of `vocab`, at a context of `ctx` positions: per layer the dense
/// multiply-adds `2·h·heads·d + 2·h·kv_heads·d + 3·h·f`, the attention over the context
/// `2·ctx·heads·d` and the element-wise steps `16·(4h + f)`; then the logits `vocab·h`.
#[allow(clippy::too_many_arguments)]
pub fn decoder_work_per_token(
    layers: u64,
    h: u64,
    f: u64,
    heads: u64,
    kv_heads: u64,
    d: u64,
    vocab: u64,
    ctx: u64,
) -> u64 {
    layers
        * (2 * h * heads * d
            + 2 * h * kv_heads * d
            + 3 * h * f
            + 2 * ctx * heads * d
            + 16 * (4 * h + f))
        + vocab * h
}

/// Most rows in one `Mlp`, `Encoder` or `Generate` tile.
pub const MAX_ROWS_PER_TILE: u8 = 64;

/// What a job computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobKind {
    /// C = A·B mod 2^31−1 with A m×k and B k×n; tiles are 64×64 blocks of C.
    MatMulModP = 1,
    /// Tile i holds, for each of its nonces, SHA-256 iterated `iterations` times over
    /// (seed ‖ nonce).
    HashBatch = 2,
    /// Integer inference of a dense ReLU classifier on the client's batch (PROTOCOL §5, Mlp):
    /// dims (rows N, features F, classes C); tiles of R rows (the spec's byte 3).
    Mlp = 3,
    /// Integer sentence embeddings by a BERT-family encoder on the client's texts (PROTOCOL §5,
    /// Encoder): dims (texts N, tokens per text at most L, hidden width H); tiles of R rows.
    Encoder = 4,
    /// Integer text generation by a llama-family decoder on the client's prompts (PROTOCOL §5,
    /// Generate): dims (prompts N, prompt tokens at most L, new tokens at most G); tiles of R
    /// completions.
    Generate = 5,
}

impl JobKind {
    /// Whether the kind runs a model over rows of the client's data (tiles of R rows, work per
    /// row or token in bytes 48..56, inputs by content hash only).
    pub fn is_inference(self) -> bool {
        matches!(self, JobKind::Mlp | JobKind::Encoder | JobKind::Generate)
    }
}

/// Where a job's inputs come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InputMode {
    /// Inputs are generated deterministically from the 32-byte seed.
    Generated = 0,
    /// The 32 bytes are the SHA-256 of the input file, fetched from the task's input URI.
    ContentHash = 1,
}

/// A decoded, validated job spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JobSpec {
    /// The job kind.
    pub kind: JobKind,
    /// Where inputs come from.
    pub input_mode: InputMode,
    /// Three dimensions whose meaning depends on `kind` (see the module docs).
    pub dims: [u32; 3],
    /// Input seed or content hash.
    pub input: [u8; 32],
    /// `Mlp`, `Encoder`, `Generate`: rows per tile R (1 ..= [`MAX_ROWS_PER_TILE`]); 0 for the
    /// other kinds.
    pub rows_per_tile: u8,
    /// `Mlp`: multiply-adds per row (Σ in·out over the model's layers); `Encoder`: the GEMMs'
    /// multiply-adds per token (blocks · (4H² + 2HF)); `Generate`: work units per token at the
    /// context L + G ([`decoder_work_per_token`]). Providers check it against the model
    /// they fetch, so work and price are known before any fetch; 0 for the other kinds.
    pub work_per_row: u64,
    /// `MatMulModP`, `Mlp` and `Encoder` on the client's data: the length of the slice string
    /// of A (m · ⌈4k / 1 024⌉ · 1 024) or of the model that the job's version-2 manifest names
    /// (PROTOCOL §8.7); 0 when the manifest names no slices (the program then cannot referee
    /// the job). It lets the program know, before any dispute, how many transactions one
    /// takes. 0 for `HashBatch` and generated inputs.
    pub slices_len: u64,
}

/// Why an encoded job spec is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobError {
    /// The version byte is not [`JOB_VERSION`].
    UnsupportedVersion,
    /// The kind byte names no known kind.
    UnknownKind,
    /// The input-mode byte names no known mode.
    UnknownInputMode,
    /// A reserved byte is not zero.
    ReservedNotZero,
    /// A dimension is zero or above its bound.
    DimensionOutOfRange,
    /// The kind does not take inputs from this input mode (`Mlp` runs on the client's data).
    InputModeNotAllowed,
}

impl core::fmt::Display for JobError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            JobError::UnsupportedVersion => "unsupported job-spec version",
            JobError::UnknownKind => "unknown job kind",
            JobError::UnknownInputMode => "unknown input mode",
            JobError::ReservedNotZero => "reserved job-spec bytes must be zero",
            JobError::DimensionOutOfRange => "job dimension is zero or above its bound",
            JobError::InputModeNotAllowed => "this job kind does not take that input mode",
        })
    }
}

fn u32_at(b: &[u8; JOB_SPEC_LEN], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

impl JobSpec {
    /// A `MatMulModP` job C = A·B with A m×k, B k×n generated from `seed`.
    pub fn matmul(m: u32, k: u32, n: u32, seed: [u8; 32]) -> Self {
        JobSpec {
            kind: JobKind::MatMulModP,
            input_mode: InputMode::Generated,
            dims: [m, k, n],
            input: seed,
            rows_per_tile: 0,
            work_per_row: 0,
            slices_len: 0,
        }
    }

    /// A `HashBatch` job of `tiles` tiles, `nonces` nonces per tile, `iterations` rounds each.
    pub fn hash_batch(tiles: u32, nonces: u32, iterations: u32, seed: [u8; 32]) -> Self {
        JobSpec {
            kind: JobKind::HashBatch,
            input_mode: InputMode::Generated,
            dims: [tiles, nonces, iterations],
            input: seed,
            rows_per_tile: 0,
            work_per_row: 0,
            slices_len: 0,
        }
    }

    /// An `Mlp` job: `rows` rows of `features` int8 values through a model of `classes`
    /// outputs and `work_per_row` multiply-adds per row, on the inputs named by `manifest`,
    /// `rows_per_tile` rows per tile.
    pub fn mlp(
        rows: u32,
        features: u32,
        classes: u32,
        work_per_row: u64,
        rows_per_tile: u8,
        manifest: [u8; 32],
    ) -> Self {
        JobSpec {
            kind: JobKind::Mlp,
            input_mode: InputMode::ContentHash,
            dims: [rows, features, classes],
            input: manifest,
            rows_per_tile,
            work_per_row,
            slices_len: 0,
        }
    }

    /// An `Encoder` job: `texts` texts of at most `max_tokens` tokens each through an encoder
    /// of width `hidden` and `work_per_token` GEMM multiply-adds per token, on the inputs named
    /// by `manifest`, `rows_per_tile` texts per tile.
    pub fn encoder(
        texts: u32,
        max_tokens: u32,
        hidden: u32,
        work_per_token: u64,
        rows_per_tile: u8,
        manifest: [u8; 32],
    ) -> Self {
        JobSpec {
            kind: JobKind::Encoder,
            input_mode: InputMode::ContentHash,
            dims: [texts, max_tokens, hidden],
            input: manifest,
            rows_per_tile,
            work_per_row: work_per_token,
            slices_len: 0,
        }
    }

    /// A `Generate` job: `prompts` prompts of at most `max_prompt` tokens each (the chat
    /// template included), each completed by up to `max_new` tokens, by a decoder of
    /// `work_per_token` work units per token at that context, on the inputs named by
    /// `manifest`, `rows_per_tile` completions per tile.
    pub fn generate(
        prompts: u32,
        max_prompt: u32,
        max_new: u32,
        work_per_token: u64,
        rows_per_tile: u8,
        manifest: [u8; 32],
    ) -> Self {
        JobSpec {
            kind: JobKind::Generate,
            input_mode: InputMode::ContentHash,
            dims: [prompts, max_prompt, max_new],
            input: manifest,
            rows_per_tile,
            work_per_row: work_per_token,
            slices_len: 0,
        }
    }

    /// Canonical encoding.
    pub fn encode(&self) -> [u8; JOB_SPEC_LEN] {
        let mut b = [0u8; JOB_SPEC_LEN];
        b[0] = JOB_VERSION;
        b[1] = self.kind as u8;
        b[2] = self.input_mode as u8;
        for (i, d) in self.dims.iter().enumerate() {
            b[4 + 4 * i..8 + 4 * i].copy_from_slice(&d.to_le_bytes());
        }
        b[16..48].copy_from_slice(&self.input);
        b[3] = self.rows_per_tile;
        b[48..56].copy_from_slice(&self.work_per_row.to_le_bytes());
        b[56..64].copy_from_slice(&self.slices_len.to_le_bytes());
        b
    }

    /// Decodes and validates an encoded spec: every byte is checked, so a spec that decodes
    /// re-encodes to the same bytes.
    pub fn decode(b: &[u8; JOB_SPEC_LEN]) -> Result<Self, JobError> {
        if b[0] != JOB_VERSION {
            return Err(JobError::UnsupportedVersion);
        }
        let kind = match b[1] {
            1 => JobKind::MatMulModP,
            2 => JobKind::HashBatch,
            3 => JobKind::Mlp,
            4 => JobKind::Encoder,
            5 => JobKind::Generate,
            _ => return Err(JobError::UnknownKind),
        };
        let input_mode = match b[2] {
            0 => InputMode::Generated,
            1 => InputMode::ContentHash,
            _ => return Err(JobError::UnknownInputMode),
        };
        let mut work = [0u8; 8];
        work.copy_from_slice(&b[48..56]);
        let work_per_row = u64::from_le_bytes(work);
        let rows_per_tile = b[3];
        let rows = kind.is_inference();
        let mut sl = [0u8; 8];
        sl.copy_from_slice(&b[56..64]);
        let slices_len = u64::from_le_bytes(sl);
        let sliced = input_mode == InputMode::ContentHash
            && matches!(
                kind,
                JobKind::MatMulModP | JobKind::Mlp | JobKind::Encoder | JobKind::Generate
            );
        if (slices_len != 0 && !sliced) || (!rows && (rows_per_tile != 0 || work_per_row != 0)) {
            return Err(JobError::ReservedNotZero);
        }
        let dims = [u32_at(b, 4), u32_at(b, 8), u32_at(b, 12)];
        let max = match kind {
            JobKind::MatMulModP => [MAX_MATRIX_DIM; 3],
            JobKind::HashBatch => [MAX_HASH_TILES, MAX_NONCES_PER_TILE, MAX_HASH_ITERATIONS],
            JobKind::Mlp => [MAX_MLP_ROWS, MAX_MLP_WIDTH, MAX_MLP_WIDTH],
            JobKind::Encoder => [MAX_ENCODER_ROWS, MAX_ENCODER_TOKENS, MAX_ENCODER_HIDDEN],
            JobKind::Generate => [
                MAX_GENERATE_PROMPTS,
                MAX_GENERATE_CONTEXT - 1,
                MAX_GENERATE_NEW,
            ],
        };
        if dims.iter().zip(max.iter()).any(|(&d, &m)| d == 0 || d > m) {
            return Err(JobError::DimensionOutOfRange);
        }
        if kind == JobKind::Generate && dims[1] + dims[2] > MAX_GENERATE_CONTEXT {
            return Err(JobError::DimensionOutOfRange);
        }
        if rows {
            let (least, most) = if kind == JobKind::Generate {
                // the decoder is checked against it exactly when fetched
                (1, MAX_GENERATE_WORK_PER_TOKEN)
            } else if kind == JobKind::Mlp {
                // at least one layer F → C, at most MAX_MLP_LAYERS of the widest
                let (f, c) = (u64::from(dims[1]), u64::from(dims[2]));
                (
                    f.min(c),
                    MAX_MLP_LAYERS * u64::from(MAX_MLP_WIDTH) * u64::from(MAX_MLP_WIDTH),
                )
            } else {
                // at least one block of width H, F 1 and one head; at most the most blocks of
                // the widest feed-forward and one head per channel
                let (l, h) = (u64::from(dims[1]), u64::from(dims[2]));
                (
                    encoder_work_per_token(1, h, 1, 1, l),
                    encoder_work_per_token(MAX_ENCODER_BLOCKS, h, MAX_ENCODER_FFN, h, l),
                )
            };
            if !(1..=MAX_ROWS_PER_TILE).contains(&rows_per_tile)
                || work_per_row < least
                || work_per_row > most
            {
                return Err(JobError::DimensionOutOfRange);
            }
            if input_mode != InputMode::ContentHash {
                return Err(JobError::InputModeNotAllowed);
            }
        }
        if slices_len != 0 {
            // A's slice string has the one length its shape gives; a model's at most what its
            // work and widths allow
            let fits = match kind {
                JobKind::MatMulModP => {
                    slices_len == dims[0] as u64 * crate::slices::matrix_stride(dims[1])
                }
                JobKind::Encoder => {
                    slices_len <= crate::slices::encoder::max_len(dims[2], work_per_row)
                }
                JobKind::Generate => slices_len <= crate::slices::decoder::max_len(work_per_row),
                _ => {
                    slices_len
                        <= crate::slices::MAX_MODEL_HEADER
                            + crate::slices::RECORD_HEAD * MAX_MLP_LAYERS * u64::from(MAX_MLP_WIDTH)
                            + work_per_row
                }
            };
            if !fits {
                return Err(JobError::DimensionOutOfRange);
            }
        }
        let mut input = [0u8; 32];
        input.copy_from_slice(&b[16..48]);
        Ok(JobSpec {
            kind,
            input_mode,
            dims,
            input,
            rows_per_tile,
            work_per_row,
            slices_len,
        })
    }

    /// Number of output tiles T (leaves of the result's Merkle tree). Always ≥ 1.
    pub fn tile_count(&self) -> u32 {
        match self.kind {
            JobKind::MatMulModP
            | JobKind::HashBatch
            | JobKind::Mlp
            | JobKind::Encoder
            | JobKind::Generate => {
                let (rows, cols) = self.tile_grid();
                rows * cols
            }
        }
    }

    /// `MatMulModP`: tiles along rows and columns of C. `HashBatch`: (tiles, 1).
    pub fn tile_grid(&self) -> (u32, u32) {
        match self.kind {
            JobKind::MatMulModP => (
                self.dims[0].div_ceil(MATMUL_TILE),
                self.dims[2].div_ceil(MATMUL_TILE),
            ),
            JobKind::HashBatch => (self.dims[0], 1),
            JobKind::Mlp | JobKind::Encoder | JobKind::Generate => (
                self.dims[0].div_ceil(u32::from(self.rows_per_tile.max(1))),
                1,
            ),
        }
    }

    /// Bytes in every tile: a zero-padded 64×64 block of little-endian `u32`, or 32 bytes per
    /// nonce of a `HashBatch` tile.
    pub fn tile_len(&self) -> usize {
        match self.kind {
            JobKind::MatMulModP => (MATMUL_TILE * MATMUL_TILE * 4) as usize,
            JobKind::HashBatch => 32 * self.dims[1] as usize,
            JobKind::Mlp => usize::from(self.rows_per_tile) * (4 * self.dims[2] as usize + 4),
            JobKind::Encoder => usize::from(self.rows_per_tile) * 2 * self.dims[2] as usize,
            // per completion its token count, then G token ids (u32, zero past the count)
            JobKind::Generate => usize::from(self.rows_per_tile) * 4 * (self.dims[2] as usize + 1),
        }
    }

    /// Abstract work units of the job (multiply-adds, or SHA-256 compressions), used to price
    /// and benchmark jobs.
    pub fn work(&self) -> u64 {
        let [a, b, c] = self.dims.map(u64::from);
        match self.kind {
            JobKind::Mlp => a * self.work_per_row,
            // every text at the token limit: an upper bound known before the texts are
            JobKind::Encoder => a * b * self.work_per_row,
            // the prompts at their bound, and the G sequential decode steps, each charged as
            // max(N, DECODE_FLOOR) tokens
            JobKind::Generate => (a * b)
                .saturating_add(c.saturating_mul(a.max(DECODE_FLOOR)))
                .saturating_mul(self.work_per_row),
            _ => a * b * c,
        }
    }

    /// Bytes a provider must hold to run the job at once: A, B and C for `MatMulModP` (4 bytes
    /// per element), the outputs for `HashBatch`. Providers skip tasks larger than their memory.
    pub fn memory_bytes(&self) -> u64 {
        let [a, b, c] = self.dims.map(u64::from);
        match self.kind {
            JobKind::MatMulModP => 4 * (a * b + b * c + a * c),
            JobKind::HashBatch => 32 * a * b,
            // the batch, the model at its bound per row of work, and the outputs
            JobKind::Mlp => a * b + self.work_per_row + a * (4 * c + 4),
            // the texts at their bound, the model's weights and embeddings, the outputs
            JobKind::Encoder => {
                crate::job::ENCODER_TEXT_BYTES_PER_TOKEN * a * b
                    + self.work_per_row
                    + (MAX_ENCODER_VOCAB + u64::from(MAX_ENCODER_TOKENS)) * c
                    + a * 2 * c
            }
            // the prompts' part at its bound, the model (at most a byte a unit of work), one
            // sequence's key/value cache (taken as 1/1 024 of the work a position: SmolLM2's
            // is 1/5 900), a prefill pass's activations (512 rows of about 1/1 024 of the work
            // each: SmolLM2's are 1/1 200) and the outputs
            JobKind::Generate => {
                crate::job::ENCODER_TEXT_BYTES_PER_TOKEN * a * b
                    + 4 * a * b
                    + self.work_per_row
                    + (b + c) * (self.work_per_row / 1024)
                    + self.work_per_row / 2
                    + a * 4 * (c + 1)
            }
        }
    }

    /// Element `idx` of generated input matrix `which` (b'A' or b'B'), in `[0, P)`.
    pub fn matrix_element(&self, which: u8, idx: u64) -> u32 {
        matrix_element(&self.matrix_key(which), idx)
    }

    /// The 64-bit key from which matrix `which` is generated.
    pub fn matrix_key(&self, which: u8) -> u64 {
        digest_u64(&hashv(&[b"cm:input:v1", &self.input, &[which]]))
    }

    /// The output of nonce `nonce` of a `HashBatch` job.
    pub fn hash_nonce(&self, nonce: u64) -> Digest {
        let mut h = hashv(&[&self.input, &nonce.to_le_bytes()]);
        for _ in 1..self.dims[2] {
            h = hashv(&[&h]);
        }
        h
    }
}

/// SplitMix64 finaliser: a bijective mixer used to generate inputs (cheap on CPU and GPU).
#[inline]
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `x mod P` by Mersenne folding (exactly `x % P`, without a division).
#[inline]
pub const fn mod_p(x: u64) -> u64 {
    let x = (x & crate::P) + (x >> 31);
    let x = (x & crate::P) + (x >> 31);
    if x >= crate::P {
        x - crate::P
    } else {
        x
    }
}

/// Generated matrix element `idx` under `key`, in `[0, P)`.
#[inline]
pub fn matrix_element(key: &u64, idx: u64) -> u32 {
    mod_p(splitmix64(key ^ idx.wrapping_mul(0xD1B5_4A32_D192_ED03))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_geometry() {
        let s = JobSpec::matmul(130, 64, 65, [7; 32]);
        let b = s.encode();
        assert_eq!(JobSpec::decode(&b).unwrap(), s);
        assert_eq!(s.tile_grid(), (3, 2));
        assert_eq!(s.tile_count(), 6);
        assert_eq!(s.tile_len(), 16384);
        let h = JobSpec::hash_batch(10, 4, 3, [1; 32]);
        assert_eq!(h.tile_count(), 10);
        assert_eq!(h.tile_len(), 128);
    }

    #[test]
    fn refuses_bad_bytes() {
        let good = JobSpec::matmul(64, 64, 64, [0; 32]).encode();
        // version 1 (the SHA-256 commitment) and any other
        for v in [0, 1, 3] {
            let mut b = good;
            b[0] = v;
            assert_eq!(JobSpec::decode(&b), Err(JobError::UnsupportedVersion));
        }
        let mut b = good;
        b[1] = 9;
        assert_eq!(JobSpec::decode(&b), Err(JobError::UnknownKind));
        let mut b = good;
        b[2] = 5;
        assert_eq!(JobSpec::decode(&b), Err(JobError::UnknownInputMode));
        let mut b = good;
        b[60] = 1;
        assert_eq!(JobSpec::decode(&b), Err(JobError::ReservedNotZero));
        let z = JobSpec::matmul(0, 64, 64, [0; 32]).encode();
        assert_eq!(JobSpec::decode(&z), Err(JobError::DimensionOutOfRange));
        let big = JobSpec::matmul(MAX_MATRIX_DIM + 1, 64, 64, [0; 32]).encode();
        assert_eq!(JobSpec::decode(&big), Err(JobError::DimensionOutOfRange));
    }

    #[test]
    fn mod_p_is_remainder() {
        for x in [
            0,
            1,
            crate::P - 1,
            crate::P,
            crate::P + 1,
            2 * crate::P,
            u64::MAX,
            u64::MAX - 1,
            1 << 62,
        ] {
            assert_eq!(mod_p(x), x % crate::P, "{x}");
        }
        let mut z = 1u64;
        for _ in 0..100_000 {
            z = splitmix64(z);
            assert_eq!(mod_p(z), z % crate::P);
        }
    }

    #[test]
    fn elements_in_field() {
        let s = JobSpec::matmul(64, 64, 64, [3; 32]);
        assert!((0..10_000).all(|i| (s.matrix_element(b'A', i) as u64) < crate::P));
        assert_ne!(s.matrix_key(b'A'), s.matrix_key(b'B'));
    }

    #[test]
    fn an_mlp_spec_carries_its_tile_rows_and_work_and_needs_client_data() {
        let j = JobSpec::mlp(450, 64, 10, 64 * 128 + 128 * 10, 8, [7; 32]);
        let b = j.encode();
        assert_eq!((b[1], b[3]), (3, 8));
        assert_eq!(JobSpec::decode(&b), Ok(j));
        assert_eq!(j.tile_count(), 57, "⌈450 / 8⌉");
        assert_eq!(j.tile_len(), 8 * 44);
        assert_eq!(j.work(), 450 * 9_472);
        let refused = |f: &dyn Fn(&mut [u8; JOB_SPEC_LEN]), e: JobError| {
            let mut b = j.encode();
            f(&mut b);
            assert_eq!(JobSpec::decode(&b), Err(e));
        };
        refused(&|b| b[3] = 0, JobError::DimensionOutOfRange);
        refused(&|b| b[3] = 65, JobError::DimensionOutOfRange);
        refused(
            &|b| b[48..56].copy_from_slice(&0u64.to_le_bytes()),
            JobError::DimensionOutOfRange,
        );
        refused(
            &|b| b[48..56].copy_from_slice(&(8u64 * 4096 * 4096 + 1).to_le_bytes()),
            JobError::DimensionOutOfRange,
        );
        // bytes 56..64: the model's slice-string length, at most what the work allows
        refused(&|b| b[63] = 1, JobError::DimensionOutOfRange);
        let mut sliced = j.encode();
        sliced[56] = 100;
        assert_eq!(JobSpec::decode(&sliced).map(|s| s.slices_len), Ok(100));
        refused(&|b| b[2] = 0, JobError::InputModeNotAllowed);
        refused(
            &|b| b[8..12].copy_from_slice(&4097u32.to_le_bytes()),
            JobError::DimensionOutOfRange,
        );
        // the other kinds keep byte 3 and the work bytes zero
        let mut m = JobSpec::matmul(64, 64, 64, [1; 32]).encode();
        m[3] = 8;
        assert_eq!(JobSpec::decode(&m), Err(JobError::ReservedNotZero));
        let mut m = JobSpec::matmul(64, 64, 64, [1; 32]).encode();
        m[50] = 1;
        assert_eq!(JobSpec::decode(&m), Err(JobError::ReservedNotZero));
    }

    #[test]
    fn an_encoder_spec_carries_its_token_limit_width_and_work_per_token() {
        // MiniLM (6 blocks, H 384, F 1536, 12 heads) at a limit of 32 tokens
        let wpt = encoder_work_per_token(6, 384, 1536, 12, 32);
        let gemm = 4 * 384 * 384 + 2 * 384 * 1536;
        assert_eq!(
            wpt,
            6 * (gemm + 8 * 32 * 384 + 64 * 12 * 32 + 16 * (6 * 384 + 1536))
        );
        let j = JobSpec::encoder(60, 32, 384, wpt, 8, [7; 32]);
        let b = j.encode();
        assert_eq!((b[1], b[3]), (4, 8));
        assert_eq!(JobSpec::decode(&b), Ok(j));
        assert_eq!(j.tile_count(), 8, "⌈60 / 8⌉");
        assert_eq!(j.tile_len(), 8 * 2 * 384);
        assert_eq!(j.work(), 60 * 32 * wpt, "priced at the token limit");
        let refused = |f: &dyn Fn(&mut [u8; JOB_SPEC_LEN]), e: JobError| {
            let mut b = j.encode();
            f(&mut b);
            assert_eq!(JobSpec::decode(&b), Err(e));
        };
        refused(&|b| b[3] = 0, JobError::DimensionOutOfRange);
        refused(&|b| b[2] = 0, JobError::InputModeNotAllowed);
        refused(
            &|b| b[8..12].copy_from_slice(&513u32.to_le_bytes()),
            JobError::DimensionOutOfRange,
        );
        refused(
            &|b| b[12..16].copy_from_slice(&513u32.to_le_bytes()),
            JobError::DimensionOutOfRange,
        );
        // less work a token than one block of this width can do, or more than the most blocks
        refused(
            &|b| {
                let least = encoder_work_per_token(1, 384, 1, 1, 32);
                b[48..56].copy_from_slice(&(least - 1).to_le_bytes())
            },
            JobError::DimensionOutOfRange,
        );
        let most = encoder_work_per_token(MAX_ENCODER_BLOCKS, 384, MAX_ENCODER_FFN, 384, 32);
        refused(
            &|b| b[48..56].copy_from_slice(&(most + 1).to_le_bytes()),
            JobError::DimensionOutOfRange,
        );
        refused(&|b| b[1] = 6, JobError::UnknownKind);
    }

    #[test]
    fn a_generate_spec_bounds_prompt_and_completion_and_charges_the_sequential_steps() {
        // SmolLM2-135M at a context of 96 + 32
        let wpt = decoder_work_per_token(30, 576, 1536, 9, 3, 64, 49_152, 128);
        let j = JobSpec::generate(3, 96, 32, wpt, 2, [5; 32]);
        let b = j.encode();
        assert_eq!((b[1], b[3]), (5, 2));
        assert_eq!(JobSpec::decode(&b), Ok(j));
        assert_eq!(j.tile_count(), 2, "⌈3 / 2⌉");
        assert_eq!(j.tile_len(), 2 * 4 * 33, "a count and 32 ids a completion");
        // three prompts decode as DECODE_FLOOR: 32 steps of 8 tokens, not of 3
        assert_eq!(j.work(), (3 * 96 + 32 * DECODE_FLOOR) * wpt);
        let big = JobSpec::generate(100, 96, 32, wpt, 2, [5; 32]);
        assert_eq!(big.work(), (100 * 96 + 32 * 100) * wpt);
        let refused = |f: &dyn Fn(&mut [u8; JOB_SPEC_LEN]), e: JobError| {
            let mut b = j.encode();
            f(&mut b);
            assert_eq!(JobSpec::decode(&b), Err(e));
        };
        let dims = |l: u32, g: u32| {
            move |b: &mut [u8; JOB_SPEC_LEN]| {
                b[8..12].copy_from_slice(&l.to_le_bytes());
                b[12..16].copy_from_slice(&g.to_le_bytes());
            }
        };
        // max new tokens 0 or over the bound; prompt and completion over the context
        refused(&dims(96, 0), JobError::DimensionOutOfRange);
        refused(
            &dims(96, MAX_GENERATE_NEW + 1),
            JobError::DimensionOutOfRange,
        );
        refused(
            &dims(MAX_GENERATE_CONTEXT - 1023, 1024),
            JobError::DimensionOutOfRange,
        );
        let edge = dims(MAX_GENERATE_CONTEXT - 1024, 1024);
        let mut e = j.encode();
        edge(&mut e);
        assert!(JobSpec::decode(&e).is_ok(), "L + G = the context");
        refused(&|b| b[3] = 0, JobError::DimensionOutOfRange);
        refused(&|b| b[2] = 0, JobError::InputModeNotAllowed);
        // a model's slice string (PROTOCOL §8.13) of at most what the work allows
        let mut sliced = j.encode();
        sliced[56] = 1;
        assert!(
            JobSpec::decode(&sliced).is_ok(),
            "a Generate declares slices"
        );
        let most = crate::slices::decoder::max_len(wpt);
        refused(
            &|b| b[56..64].copy_from_slice(&(most + 1).to_le_bytes()),
            JobError::DimensionOutOfRange,
        );
        refused(
            &|b| b[48..56].copy_from_slice(&(MAX_GENERATE_WORK_PER_TOKEN + 1).to_le_bytes()),
            JobError::DimensionOutOfRange,
        );
    }
}
