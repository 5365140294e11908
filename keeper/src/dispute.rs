//! What a dispute needs from a check (PROTOCOL §8): the element a wrong result gets wrong,
//! found while checking, and what proves its committed value (the tile and its proof), kept by
//! the keeper that will dispute. Pure: the playing of a dispute on chain is
//! [`crate::roles::challenger`].

use compute_market_protocol::{
    dispute::{self as rule},
    hash::Digest,
    job::{InputMode, JobSpec, MATMUL_TILE},
    merkle::{chunk_proof, slot_len},
    P,
};

/// An element of a committed result that recomputes differently, with what proves its
/// committed value: the tile that holds it and the tile's proof to the result root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pointer {
    /// The tile.
    pub tile: u32,
    /// The element within the tile (PROTOCOL §8.2).
    pub element: u32,
    /// The tile's committed bytes.
    pub bytes: Vec<u8>,
    /// The tile's proof to the result root.
    pub proof: Vec<Digest>,
}

impl Pointer {
    /// The chunk that holds the element and its siblings to the root (PROTOCOL §8.4).
    pub fn chunk_proof(&self, job: &JobSpec) -> (Vec<u8>, Vec<Digest>) {
        element_proof(job, self.tile, self.element, &self.bytes, &self.proof)
    }

    /// Bytes kept in a keeper's store: tile, element, proof length, proof, tile.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(12 + 32 * self.proof.len() + self.bytes.len());
        v.extend_from_slice(&self.tile.to_le_bytes());
        v.extend_from_slice(&self.element.to_le_bytes());
        v.extend_from_slice(&(self.proof.len() as u32).to_le_bytes());
        for d in &self.proof {
            v.extend_from_slice(d);
        }
        v.extend_from_slice(&self.bytes);
        v
    }

    /// [`Pointer::encode`] read back; `None` when the bytes are not one.
    pub fn decode(b: &[u8]) -> Option<Pointer> {
        let word = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        let (tile, element, n) = (word(0)?, word(4)?, word(8)? as usize);
        if n > rule::MAX_CHUNK_SIBLINGS {
            return None;
        }
        let end = 12 + 32 * n;
        let proof = b
            .get(12..end)?
            .chunks_exact(32)
            .map(|c| c.try_into().expect("32 bytes"))
            .collect();
        Some(Pointer {
            tile,
            element,
            bytes: b[end..].to_vec(),
            proof,
        })
    }
}

/// The chunk holding (tile, element) of a tile whose bytes and proof are given, and its
/// siblings to the root.
pub fn element_proof(
    job: &JobSpec,
    tile: u32,
    element: u32,
    bytes: &[u8],
    proof: &[Digest],
) -> (Vec<u8>, Vec<Digest>) {
    let slot = slot_len(job.tile_len()) as u64;
    let byte = (rule::element_offset(job, tile, element) % slot) as usize;
    chunk_proof(tile, job.tile_count(), bytes, proof, byte)
}

/// The first element of `tile` at which the committed bytes `served` differ from `mine` (the
/// job's own output), if any. For a `Generate` tile, the element the program referees as
/// wrong (PROTOCOL §8.13): in the first completion that differs, its first token below both
/// counts that differs (a token the decoder does not give after the committed ones before
/// it), else its count word (the committed tokens give another count: an early stop, a run
/// past the end of turn, a word past the count).
pub fn first_difference(job: &JobSpec, served: &[u8], mine: &[u8]) -> Option<u32> {
    if job.kind == compute_market_protocol::job::JobKind::Generate {
        return generate_difference(job, served, mine);
    }
    let w = rule::element_width(job).max(1);
    served
        .chunks(w)
        .zip(mine.chunks(w))
        .position(|(a, b)| a != b)
        .map(|e| e as u32)
}

fn generate_difference(job: &JobSpec, served: &[u8], mine: &[u8]) -> Option<u32> {
    let words = job.dims[2] as usize + 1;
    let word = |b: &[u8], r: usize, w: usize| -> u32 {
        let o = 4 * (r * words + w);
        b.get(o..o + 4)
            .map_or(0, |x| u32::from_le_bytes(x.try_into().expect("4 bytes")))
    };
    for r in 0..job.rows_per_tile as usize {
        let row = |b: &[u8]| {
            b.get(4 * r * words..4 * (r + 1) * words)
                .map(<[u8]>::to_vec)
        };
        if row(served) == row(mine) {
            continue;
        }
        let (ns, nm) = (word(served, r, 0) as usize, word(mine, r, 0) as usize);
        let first = (0..ns.min(nm).min(words - 1))
            .find(|&j| word(served, r, 1 + j) != word(mine, r, 1 + j));
        let w = first.map_or(0, |j| 1 + j);
        return Some((r * words + w) as u32);
    }
    None
}

/// A wrong entry of a `MatMulModP` product `tiles` (root already checked): a padding entry
/// that is not zero or an entry not below p (found by a scan), else a wrong entry in one of
/// `rows` (the rows where a Freivalds product disagreed), recomputed from generated inputs.
/// `(tile, element)`; `None` when none is found (a product on the client's data, whose rows
/// the verifier cannot recompute here, or rows that are right).
pub fn matmul_wrong_entry(
    job: &JobSpec,
    tiles: &[Vec<u8>],
    rows: impl IntoIterator<Item = usize>,
) -> Option<(u32, u32)> {
    let (_, cols) = job.tile_grid();
    let value = |t: &[u8], e: u32| {
        let o = e as usize * 4;
        t.get(o..o + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    for (t, tile) in tiles.iter().enumerate() {
        for e in 0..MATMUL_TILE * MATMUL_TILE {
            let v = value(tile, e) as u64;
            let entry = rule::matmul_entry(job, t as u32, e);
            if (entry.is_none() && v != 0) || v >= P {
                return Some((t as u32, e));
            }
        }
    }
    let (k, n) = (job.dims[1], job.dims[2]);
    let held = (job.input_mode != InputMode::Generated)
        .then(|| crate::compute::inputs::matrices(job).ok())
        .flatten();
    if job.input_mode != InputMode::Generated && held.is_none() {
        return None;
    }
    for i in rows {
        let i = i as u32;
        if i >= job.dims[0] {
            continue;
        }
        for j in 0..n {
            let t = (i / MATMUL_TILE) * cols + j / MATMUL_TILE;
            let e = (i % MATMUL_TILE) * MATMUL_TILE + j % MATMUL_TILE;
            let want = match &held {
                Some(m) => held_entry(m, i, j),
                None => rule::matmul_terms(job, i, j, 0, k, 0) as u32,
            };
            if value(tiles.get(t as usize)?, e) != want {
                return Some((t, e));
            }
        }
    }
    None
}

/// Entry (i, j) of A·B mod p from matrices held here.
fn held_entry(m: &crate::compute::inputs::MatrixInputs, i: u32, j: u32) -> u32 {
    let (k, n) = (m.a.cols, m.b.cols);
    (0..k).fold(0u64, |acc, l| {
        compute_market_protocol::job::mod_p(
            acc + m.a.data[i as usize * k + l] as u64 * m.b.data[l * n + j as usize] as u64,
        )
    }) as u32
}

/// Element (tile, element) of a job on the client's data recomputed from its inputs held here
/// (`compute::inputs`), by the protocol's reference rules, which the program's proven feed
/// follows to the bit (`compute_market_protocol::feed` tests): `None` when they are not held.
fn held_element(job: &JobSpec, tile: u32, element: u32) -> Option<[u8; 32]> {
    use compute_market_protocol::feed::{target, Target};
    let mut out = [0u8; 32];
    match target(job, tile, element)? {
        Target::Padding => {}
        Target::Entry(i, j) => {
            let m = crate::compute::inputs::matrices(job).ok()?;
            out[..4].copy_from_slice(&held_entry(&m, i, j).to_le_bytes());
        }
        Target::Word(r, w) => {
            let i = crate::compute::inputs::mlp(job).ok()?;
            let f = job.dims[1] as usize;
            let x = i.batch.x.get(r as usize * f..(r as usize + 1) * f)?;
            let row = i.model.row(x);
            out[..4].copy_from_slice(row.get(4 * w as usize..4 * w as usize + 4)?);
        }
    }
    Some(out)
}

/// Whether the committed element of `bytes` (tile `tile`, element `element`) is what the job
/// gives, recomputed as the program will: from the job alone, or for a job on the client's
/// data from its inputs held here (`None` when they are not, or for a kind the program cannot
/// referee).
pub fn element_is_right(job: &JobSpec, tile: u32, element: u32, bytes: &[u8]) -> Option<bool> {
    let want = match rule::expected_element(job, tile, element) {
        Some(w) => w,
        None if rule::supported(job) => held_element(job, tile, element)?,
        None => return None,
    };
    let w = rule::element_width(job).min(32);
    let o = element as usize * rule::element_width(job);
    Some(bytes.get(o..o + w) == Some(&want[..w]))
}

/// A job's inputs on the client's data as the program proves them (PROTOCOL §8.7): the
/// manifest's bytes and the slice strings of the two inputs an element is recomputed from (A
/// and B, or model and batch), with their chunk trees built once, when first asked.
pub struct SlicedInputs {
    /// The manifest's bytes (its SHA-256 is the job's input).
    pub manifest: Vec<u8>,
    slices: [std::sync::Arc<Vec<u8>>; 2],
    trees: [std::sync::OnceLock<compute_market_protocol::merkle::MerkleTree>; 2],
    /// Rows' traces (PROTOCOL §8.10), computed once each: a game reads one every turn.
    traces: std::sync::Mutex<std::collections::HashMap<u32, std::sync::Arc<RowTrace>>>,
    /// An `Encoder` job's encoder, read from its slice string once.
    encoder: std::sync::OnceLock<Option<compute_market_protocol::encoder::Encoder>>,
    /// Committed tiles with their proofs, by index: a `Generate` trace reads the completion's
    /// earlier tokens from them, and its replay proves them.
    tiles: std::sync::Mutex<std::collections::HashMap<u32, (Vec<u8>, Vec<Digest>)>>,
    /// `Generate` traces, by (tile, element) and the tile's hash, computed once each.
    tokens:
        std::sync::Mutex<std::collections::HashMap<(u32, u32, Digest), std::sync::Arc<TokenTrace>>>,
}

/// One party's trace of a disputed row: an `Mlp` row's or an `Encoder` text's.
pub type RowTrace =
    compute_market_protocol::trace::build::Trace<compute_market_protocol::trace::Traced>;

/// One party's trace of a disputed `Generate` word, held a block at a time (PROTOCOL §8.13).
pub type TokenTrace = compute_market_protocol::trace::decoder::build::Blocks;

/// A trace as a game plays it: whole (an `Mlp` row, an `Encoder` text) or a block at a time
/// (a `Generate` token).
pub trait PlayTrace: Send + Sync {
    /// Its layout.
    fn layout(&self) -> compute_market_protocol::trace::Traced;
    /// The root of its memory after step `s`.
    fn root(&self, s: u64) -> Digest;
    /// Leaf `index` of its memory after step `s`, and its siblings.
    fn leaf(&self, s: u64, index: u64) -> ([u8; 1024], Vec<Digest>);
    /// Its split of `lo .. hi`.
    fn split(&self, lo: u64, hi: u64) -> Vec<Digest>;
    /// Its pick in a split of `lo .. hi`.
    fn choose(&self, lo: u64, hi: u64, roots: &[Digest], hi_root: &Digest) -> u8;
}

impl PlayTrace for RowTrace {
    fn layout(&self) -> compute_market_protocol::trace::Traced {
        self.lay
    }
    fn root(&self, s: u64) -> Digest {
        self.root_at(s)
    }
    fn leaf(&self, s: u64, index: u64) -> ([u8; 1024], Vec<Digest>) {
        self.leaf_at(s, index)
    }
    fn split(&self, lo: u64, hi: u64) -> Vec<Digest> {
        self.split_roots(lo, hi)
    }
    fn choose(&self, lo: u64, hi: u64, roots: &[Digest], hi_root: &Digest) -> u8 {
        self.pick(lo, hi, roots, hi_root)
    }
}

// A token's trace recomputes what its one full pass computed: the same steps over the same
// bytes, which cannot fail the second time.
const RECOMPUTED: &str = "a block recomputed as the pass computed it";

impl PlayTrace for TokenTrace {
    fn layout(&self) -> compute_market_protocol::trace::Traced {
        self.lay.into()
    }
    fn root(&self, s: u64) -> Digest {
        self.root_at(s).expect(RECOMPUTED)
    }
    fn leaf(&self, s: u64, index: u64) -> ([u8; 1024], Vec<Digest>) {
        self.leaf_at(s, index).expect(RECOMPUTED)
    }
    fn split(&self, lo: u64, hi: u64) -> Vec<Digest> {
        self.split_roots(lo, hi).expect(RECOMPUTED)
    }
    fn choose(&self, lo: u64, hi: u64, roots: &[Digest], hi_root: &Digest) -> u8 {
        self.pick(lo, hi, roots, hi_root).expect(RECOMPUTED)
    }
}

impl SlicedInputs {
    /// The inputs of a job whose manifest is `manifest` and whose slice strings are `slices`,
    /// refused unless the manifest names exactly these slices (a version-1 manifest names
    /// none: its job cannot be refereed).
    pub fn new(job: &JobSpec, manifest: Vec<u8>, slices: [Vec<u8>; 2]) -> anyhow::Result<Self> {
        use compute_market_protocol::{manifest::Manifest, slices as layout};
        let m = Manifest::decode(&manifest)?;
        m.check_slices_declared(job)?;
        let roles = layout::refereed_roles(job)
            .ok_or_else(|| anyhow::anyhow!("{:?} jobs are not refereed from slices", job.kind))?;
        for (role, s) in roles.iter().zip(&slices) {
            let named = m.part(*role).and_then(|p| p.slices).ok_or_else(|| {
                anyhow::anyhow!(
                    "the job's manifest (version {}) names no slices of part {}: the program cannot referee it (PROTOCOL §8.7)",
                    m.version(),
                    role.name()
                )
            })?;
            anyhow::ensure!(
                named == layout::build::slices_of(s),
                "the slices of part {} are not what the manifest names",
                role.name()
            );
        }
        Ok(SlicedInputs {
            manifest,
            slices: slices.map(std::sync::Arc::new),
            trees: Default::default(),
            traces: Default::default(),
            encoder: Default::default(),
            tiles: Default::default(),
            tokens: Default::default(),
        })
    }

    /// The pieces `dispute_layout` proves for row `row`, (input, chunk) in order: the
    /// model's header; for an `Encoder` the chunk of the ids holding the text's count; for a
    /// `Generate` the chunks of the prompts' string holding the prompt's count and the
    /// sampling rule.
    pub fn layout_pieces(job: &JobSpec, row: u32) -> Vec<(u8, u64)> {
        use compute_market_protocol::{
            job::JobKind, merkle::CHUNK_LEN, slices::decoder::prompt_stride, trace::encoder,
        };
        let mut p = vec![(0, 0)];
        if job.kind == JobKind::Encoder {
            p.push((1, encoder::count_at(job, row) / CHUNK_LEN as u64));
        }
        if job.kind == JobKind::Generate {
            let stride = prompt_stride(job.dims[1]);
            p.push((1, row as u64 * stride / CHUNK_LEN as u64));
            p.push((1, job.dims[0] as u64 * stride / CHUNK_LEN as u64));
        }
        p
    }

    /// Keeps committed tile `tile` (its bytes and proof to the result root) for `Generate`
    /// traces and their replays.
    pub fn hold_tile(&self, tile: u32, bytes: Vec<u8>, proof: Vec<Digest>) {
        self.tiles
            .lock()
            .expect("tiles lock")
            .insert(tile, (bytes, proof));
    }

    /// Committed tile `tile` and its proof, if held.
    pub fn held_tile(&self, tile: u32) -> Option<(Vec<u8>, Vec<Digest>)> {
        self.tiles.lock().expect("tiles lock").get(&tile).cloned()
    }

    /// The trace of `Generate` element (tile, element) over the committed tile `bytes` (the
    /// completion's earlier tokens and count are its inputs), computed once (one pass over
    /// every block); `None` when the slices or the tile break the job's rules.
    pub fn token_trace(
        &self,
        job: &JobSpec,
        tile: u32,
        element: u32,
        bytes: &[u8],
    ) -> Option<std::sync::Arc<TokenTrace>> {
        use compute_market_protocol::{
            feed::{self, Target},
            slices::decoder::{prompt_stride, read_header},
            trace::decoder::{result_row_at, Layout},
        };
        let key = (
            tile,
            element,
            compute_market_protocol::hash::hashv(&[bytes]),
        );
        if let Some(t) = self.tokens.lock().expect("tokens lock").get(&key) {
            return Some(t.clone());
        }
        let Target::Word(row, w) = feed::target(job, tile, element)? else {
            return None;
        };
        let model = &self.slices[0];
        let shape = read_header(job, model.len() as u64, model.get(..64)?).ok()?;
        let at = (row as u64 * prompt_stride(job.dims[1])) as usize;
        let n = u32::from_le_bytes(self.slices[1].get(at..at + 4)?.try_into().ok()?);
        if n == 0
            || n > job.dims[1]
            || n as u64 + w.saturating_sub(1) as u64 > shape.positions as u64
        {
            return None;
        }
        // a sampled token's trace searches for the drawn candidate; a trace that does not fit
        // is refused by the program at dispute_layout, so nothing is bonded on it
        let rule_at = (job.dims[0] as u64 * prompt_stride(job.dims[1])) as usize;
        let temperature =
            u32::from_le_bytes(self.slices[1].get(rule_at..rule_at + 4)?.try_into().ok()?);
        let lay = if w == 0 {
            Layout::count_of(shape, job, row, n)
        } else {
            Layout::new(shape, job, row, n, w - 1).with_sampling(temperature != 0)
        };
        if !compute_market_protocol::trace::decoder::fits(&lay) {
            return None;
        }
        // the committed string as far as the completion's row: only its words are read
        let words = 4 * (job.dims[2] as usize + 1);
        let start = result_row_at(job, row) as usize;
        let in_tile = (row % job.rows_per_tile.max(1) as u32) as usize * words;
        let mut result = vec![0u8; start + words];
        result[start..].copy_from_slice(bytes.get(in_tile..in_tile + words)?);
        let t = TokenTrace::new(
            lay,
            self.slices[0].clone(),
            self.slices[1].clone(),
            result,
            job.input,
        )
        .ok()?;
        let t = std::sync::Arc::new(t);
        self.tokens
            .lock()
            .expect("tokens lock")
            .insert(key, t.clone());
        Some(t)
    }

    /// The trace a game over dispute `d`'s element is played with: its row's (an `Mlp`, an
    /// `Encoder`), or its word's over the committed tile held ([`hold_tile`](Self::hold_tile)),
    /// for a `Generate`.
    pub fn play_trace(
        &self,
        job: &JobSpec,
        tile: u32,
        element: u32,
    ) -> anyhow::Result<std::sync::Arc<dyn PlayTrace>> {
        use anyhow::Context;
        use compute_market_protocol::feed::{self, Target};
        if job.kind == compute_market_protocol::job::JobKind::Generate {
            let (bytes, _) = self
                .held_tile(tile)
                .with_context(|| format!("the committed tile {tile} is not held here"))?;
            let t = self
                .token_trace(job, tile, element, &bytes)
                .context("the token's trace cannot be computed from the inputs held")?;
            return Ok(t);
        }
        let Some(Target::Word(row, _)) = feed::target(job, tile, element) else {
            anyhow::bail!("the element is not a row's word");
        };
        let t = self
            .trace(job, row)
            .context("the row's trace cannot be computed from the inputs held")?;
        Ok(t)
    }

    /// Chunk `c` of input `input` and its siblings to the input's root, bottom-up.
    pub fn chunk(&self, input: u8, c: u64) -> (Vec<u8>, Vec<Digest>) {
        use compute_market_protocol::slices::{build, chunk, chunk_count};
        let s = &self.slices[input as usize];
        let tree = self.trees[input as usize].get_or_init(|| build::chunk_tree(s));
        let path = build::chunk_path(tree, chunk_count(s.len() as u64), c);
        (chunk(s, c).to_vec(), path)
    }

    /// The trace of `job`'s row `row` through its model (PROTOCOL §8.10), read from the slice
    /// strings as the program reads them (once a row); `None` past the batch or for slices not
    /// a model's (and an `Encoder`'s ids out of its vocabulary or positions).
    pub fn trace(&self, job: &JobSpec, row: u32) -> Option<std::sync::Arc<RowTrace>> {
        use compute_market_protocol::{job::JobKind, slices::encoder as se, trace::build::Trace};
        if let Some(t) = self.traces.lock().expect("traces lock").get(&row) {
            return Some(t.clone());
        }
        let t = if job.kind == JobKind::Encoder {
            let enc = self
                .encoder
                .get_or_init(|| se::build::parse(&self.slices[0]))
                .as_ref()?;
            let stride = se::ids_stride(job.dims[1]) as usize;
            let at = row as usize * stride;
            let word = |o: usize| -> Option<u32> {
                Some(u32::from_le_bytes(
                    self.slices[1].get(o..o + 4)?.try_into().ok()?,
                ))
            };
            let count = word(at)? as usize;
            if count == 0 || count > job.dims[1] as usize || count > enc.positions() {
                return None;
            }
            let ids: Vec<u32> = (0..count)
                .map(|p| word(at + 4 + 4 * p))
                .collect::<Option<_>>()?;
            if ids.iter().any(|&id| id as usize >= enc.vocab()) {
                return None;
            }
            let t = Trace::of_text(enc, &ids);
            Trace {
                lay: t.lay.into(),
                mem: t.mem,
            }
        } else {
            let f = job.dims[1] as usize;
            let x: Vec<i8> = self.slices[1]
                .get(row as usize * f..(row as usize + 1) * f)?
                .iter()
                .map(|&b| b as i8)
                .collect();
            let t = Trace::of_slices(&self.slices[0], &x)?;
            Trace {
                lay: t.lay.into(),
                mem: t.mem,
            }
        };
        let t = std::sync::Arc::new(t);
        self.traces
            .lock()
            .expect("traces lock")
            .insert(row, t.clone());
        Some(t)
    }

    /// Element (tile, element) of the job recomputed as the program will, one chunk at a time
    /// (`compute_market_protocol::feed`): its 4 bytes; `None` when the slices break the job's
    /// rules (the program would refuse them too).
    pub fn element(&self, job: &JobSpec, tile: u32, element: u32) -> Option<[u8; 4]> {
        use compute_market_protocol::{
            feed::{self, Feed, Target},
            slices::chunk,
        };
        let target = feed::target(job, tile, element)?;
        if target == Target::Padding {
            return Some([0; 4]);
        }
        if job.kind == compute_market_protocol::job::JobKind::Generate {
            // a completion's word: its trace over the committed tile held
            let (bytes, _) = self.held_tile(tile)?;
            return self.token_trace(job, tile, element, &bytes)?.word().ok();
        }
        if let (compute_market_protocol::job::JobKind::Encoder, Target::Word(row, w)) =
            (job.kind, target)
        {
            // an embedding's word: the text's trace (its last steps are the embedding)
            return Some(self.trace(job, row)?.word(w));
        }
        let mut f = Feed::start(job, target);
        let mut work = vec![0u8; feed::WORK_LEN];
        while let Some((i, c)) = f.next(job, target) {
            let s = &self.slices[i as usize];
            if let Some(v) = f
                .take(job, target, i, c, s.len() as u64, chunk(s, c), &mut work)
                .ok()?
            {
                return Some(v);
            }
        }
        None
    }
}

/// [`element_is_right`] for any job the program referees: a job on the client's data is judged
/// from `inputs` (`None` without them, or when they break the job's rules).
pub fn element_is_right_with(
    job: &JobSpec,
    tile: u32,
    element: u32,
    bytes: &[u8],
    inputs: Option<&SlicedInputs>,
) -> Option<bool> {
    if rule::one_step(job) || inputs.is_none() {
        return element_is_right(job, tile, element, bytes);
    }
    let want = if job.kind == compute_market_protocol::job::JobKind::Generate {
        // a tile the decoder gives word for word (one teacher-forced prefill of each completion,
        // the fast path: the reference's bits) is right at every word, the count's included: no
        // trace is built for it (a provider judging many pointers at its own completion)
        if let Ok(held) = crate::compute::inputs::generate(job) {
            use crate::compute::decoder::{job::checked_tiles, Path};
            if let Ok(mine) = checked_tiles(&held, job, &[(tile, bytes)], Path::Fast) {
                if mine.first().map(Vec::as_slice) == Some(bytes) {
                    return Some(true);
                }
            }
        }
        // else the word's trace over this tile (its earlier tokens and count)
        inputs?
            .token_trace(job, tile, element, bytes)?
            .word()
            .ok()?
    } else {
        inputs?.element(job, tile, element)?
    };
    let o = element as usize * rule::element_width(job);
    Some(bytes.get(o..o + 4) == Some(&want[..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_round_trips_and_garbage_is_refused() {
        let p = Pointer {
            tile: 7,
            element: 300,
            bytes: vec![1, 2, 3, 4, 5],
            proof: vec![[9; 32], [8; 32]],
        };
        assert_eq!(Pointer::decode(&p.encode()), Some(p));
        assert_eq!(Pointer::decode(&[1, 2, 3]), None);
        let mut huge = vec![0u8; 12];
        huge[8..12].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(
            Pointer::decode(&huge),
            None,
            "a proof longer than any is refused"
        );
    }

    #[test]
    fn the_wrong_matmul_entry_is_found_by_scan_and_by_row() {
        // 70 × 5 × 130: padding in the last row and column of tiles
        let job = JobSpec::matmul(70, 5, 130, [3; 32]);
        let right: Vec<Vec<u8>> = (0..job.tile_count())
            .map(|t| {
                (0..MATMUL_TILE * MATMUL_TILE)
                    .flat_map(|e| rule::expected_element(&job, t, e).unwrap()[..4].to_vec())
                    .collect()
            })
            .collect();
        assert_eq!(matmul_wrong_entry(&job, &right, 0..70), None);
        // a wrong entry at row 66, column 129: tile 5, element (2·64 + 1)
        let mut wrong = right.clone();
        wrong[5][(2 * 64 + 1) * 4] ^= 1;
        assert_eq!(
            matmul_wrong_entry(&job, &wrong, [66]),
            Some((5, 2 * 64 + 1))
        );
        assert_eq!(
            matmul_wrong_entry(&job, &wrong, [65]),
            None,
            "only the rows asked"
        );
        // a nonzero padding entry is found whatever the rows
        let mut pad = right.clone();
        pad[5][(10 * 64 + 3) * 4] = 1;
        assert_eq!(matmul_wrong_entry(&job, &pad, []), Some((5, 10 * 64 + 3)));
        // and an entry not below p
        let mut big = right;
        big[0][..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(matmul_wrong_entry(&job, &big, []), Some((0, 0)));
    }

    #[test]
    fn a_generate_word_is_judged_as_the_program_judges_it_with_or_without_a_trace() {
        use crate::compute::decoder::{
            job::{complete, GenerateInputs, Prompts},
            random::{random_model, ODD_SHAPES},
        };
        use compute_market_protocol::{
            decoder::Sampling,
            manifest::{Manifest, Part, Role},
            slices::{build, decoder::build as db},
        };
        use std::sync::Arc;
        let model = random_model(ODD_SHAPES[1], 4);
        let ids: Vec<Vec<u32>> = vec![vec![5, 9, 11], vec![7, 3]];
        let (limit, g) = (3u32, 3u32);
        let slices = [
            db::model(&model.decoder, model.eos),
            db::prompts(&ids, limit, &Sampling::GREEDY),
        ];
        let manifest = Manifest::new(vec![
            Part::new(Role::Model, b"model").with_slices(build::slices_of(&slices[0])),
            Part::new(Role::Prompts, b"prompts").with_slices(build::slices_of(&slices[1])),
        ]);
        let wpt = db::shape(&model.decoder, model.eos).work_per_token((limit + g) as u64);
        let job = JobSpec {
            slices_len: slices[0].len() as u64,
            ..JobSpec::generate(2, limit, g, wpt, 1, manifest.hash())
        };
        let inputs = GenerateInputs {
            model: Arc::new(model),
            prompts: Arc::new(Prompts {
                texts: vec![String::new(); 2],
                ids,
                sampling: Sampling::GREEDY,
            }),
        };
        // completion 1, its tile: its count, then its tokens
        let tokens = complete(&inputs, &job, 1);
        let mut tile = vec![0u8; job.tile_len()];
        tile[..4].copy_from_slice(&(tokens.len() as u32).to_le_bytes());
        for (k, t) in tokens.iter().enumerate() {
            tile[4 + 4 * k..8 + 4 * k].copy_from_slice(&t.to_le_bytes());
        }
        let sliced = SlicedInputs::new(&job, manifest.encode(), slices).unwrap();
        // without the decoder held: every word by its trace
        for e in 0..=g {
            assert_eq!(
                element_is_right_with(&job, 1, e, &tile, Some(&sliced)),
                Some(true),
                "word {e} by its trace"
            );
        }
        let mut wrong = tile.clone();
        wrong[8] ^= 1;
        assert_eq!(
            element_is_right_with(&job, 1, 2, &wrong, Some(&sliced)),
            Some(false)
        );
        // with it held: a right tile without a trace, a wrong word still by its trace
        crate::compute::inputs::hold_generate(job.input, inputs);
        let traces = sliced.tokens.lock().unwrap().len();
        assert_eq!(
            element_is_right_with(&job, 1, 3, &tile, Some(&sliced)),
            Some(true)
        );
        let mut once_more = wrong.clone();
        once_more[12] ^= 1;
        assert_eq!(
            sliced.tokens.lock().unwrap().len(),
            traces,
            "no trace for a right tile"
        );
        assert_eq!(
            element_is_right_with(&job, 1, 2, &once_more, Some(&sliced)),
            Some(false)
        );
    }

    #[test]
    fn a_generate_tile_is_pointed_at_the_word_the_program_finds_wrong() {
        // two completions a tile, G = 4: words (count, t0 … t3)
        let job = JobSpec::generate(4, 8, 4, 1000, 2, [1; 32]);
        let tile = |rows: [[u32; 5]; 2]| -> Vec<u8> {
            rows.iter()
                .flatten()
                .flat_map(|w| w.to_le_bytes())
                .collect()
        };
        let right = tile([[4, 10, 11, 12, 13], [2, 20, 1, 0, 0]]);
        assert_eq!(first_difference(&job, &right, &right), None);
        // a changed token of the second completion: that token (row 1, word 2)
        let changed = tile([[4, 10, 11, 12, 13], [2, 20, 7, 0, 0]]);
        assert_eq!(first_difference(&job, &changed, &right), Some(5 + 2));
        // a token changed and the rest generated on from it (another count): the token
        let mine = tile([[4, 10, 11, 12, 13], [3, 20, 9, 9, 1]]);
        let served = tile([[4, 10, 11, 12, 13], [2, 20, 1, 0, 0]]);
        assert_eq!(first_difference(&job, &served, &mine), Some(5 + 2));
        // a run past the end of turn (token 1 is the end): the count, not token 2
        let ran_on = tile([[4, 10, 11, 12, 13], [4, 20, 1, 5, 6]]);
        assert_eq!(first_difference(&job, &ran_on, &right), Some(5));
        // an early stop: the count
        let early = tile([[2, 10, 11, 0, 0], [2, 20, 1, 0, 0]]);
        assert_eq!(first_difference(&job, &early, &right), Some(0));
    }

    #[test]
    fn elements_are_judged_as_the_program_judges_them() {
        let job = JobSpec::hash_batch(2, 8, 3, [5; 32]);
        let tile: Vec<u8> = (0..8)
            .flat_map(|e| rule::expected_element(&job, 1, e).unwrap())
            .collect();
        assert_eq!(element_is_right(&job, 1, 3, &tile), Some(true));
        let mut bad = tile.clone();
        bad[3 * 32 + 5] ^= 1;
        assert_eq!(element_is_right(&job, 1, 3, &bad), Some(false));
        assert_eq!(first_difference(&job, &bad, &tile), Some(3));
        assert_eq!(first_difference(&job, &tile, &tile), None);
        let mlp = JobSpec::mlp(16, 64, 10, 1000, 8, [1; 32]);
        assert_eq!(
            element_is_right(&mlp, 0, 0, &[0; 80]),
            None,
            "its inputs not held here"
        );
    }

    #[test]
    fn an_mlp_word_is_judged_from_its_sliced_inputs() {
        use compute_market_protocol::{
            infer::{Layer, Mlp},
            manifest::{Manifest, Part, Role},
            slices::build,
        };
        let model = Mlp {
            layers: vec![
                Layer {
                    inp: 3,
                    out: 2,
                    weight: vec![1, -2, 3, 4, 5, -6],
                    bias: vec![10, -10],
                    requant: Some((vec![3, 5], vec![1, 2])),
                },
                Layer {
                    inp: 2,
                    out: 2,
                    weight: vec![7, -1, 2, 2],
                    bias: vec![0, 1],
                    requant: None,
                },
            ],
        };
        let x: Vec<i8> = vec![1, 2, 3, -4, 5, -6];
        let slices = [build::model(&model), build::batch(&x)];
        let manifest = |named: bool| {
            Manifest::new(
                [Role::Model, Role::Batch]
                    .iter()
                    .zip(&slices)
                    .map(|(r, s)| {
                        let p = Part::safetensors(*r, s);
                        if named {
                            p.with_slices(build::slices_of(s))
                        } else {
                            p
                        }
                    })
                    .collect(),
            )
        };
        let m = manifest(true);
        let job = JobSpec::mlp(2, 3, 2, model.work_per_row(), 2, m.hash());
        let inputs = SlicedInputs::new(&job, m.encode(), slices.clone()).unwrap();
        let tile: Vec<u8> = x.chunks(3).flat_map(|r| model.row(r)).collect();
        for e in 0..6 {
            assert_eq!(
                element_is_right_with(&job, 0, e, &tile, Some(&inputs)),
                Some(true)
            );
            let mut bad = tile.clone();
            bad[4 * e as usize] ^= 1;
            assert_eq!(
                element_is_right_with(&job, 0, e, &bad, Some(&inputs)),
                Some(false)
            );
        }
        assert_eq!(
            element_is_right_with(&job, 0, 0, &tile, None),
            None,
            "its inputs not held here"
        );
        // a chunk and its proof lead to the manifest's root
        let (chunk, path) = inputs.chunk(0, 0);
        assert_eq!(chunk, slices[0]);
        assert!(path.is_empty(), "one chunk: its leaf is the root");
        // a version-1 manifest names no slices
        let e = SlicedInputs::new(&job, manifest(false).encode(), slices)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("names no slices of part model"), "{e}");
    }

    #[test]
    fn on_the_clients_data_the_wrong_entry_and_the_right_words_come_from_the_held_inputs() {
        use crate::compute::{inputs, matrix::Matrix};
        use std::sync::Arc;
        // a 70 × 5 · 5 × 130 product on the client's A and B, held here
        let job = JobSpec {
            input_mode: InputMode::ContentHash,
            ..JobSpec::matmul(70, 5, 130, [77; 32])
        };
        let a = Matrix {
            rows: 70,
            cols: 5,
            data: (0..350).map(|i| i * 7 + 1).collect(),
        };
        let b = Matrix {
            rows: 5,
            cols: 130,
            data: (0..650).map(|i| i * 3 + 2).collect(),
        };
        let entry = |i: usize, j: usize| {
            (0..5).fold(0u64, |acc, l| {
                (acc + a.data[i * 5 + l] as u64 * b.data[l * 130 + j] as u64) % P
            }) as u32
        };
        let mut tiles: Vec<Vec<u8>> = (0..job.tile_count())
            .map(|t| {
                (0..MATMUL_TILE * MATMUL_TILE)
                    .flat_map(|e| {
                        rule::matmul_entry(&job, t, e)
                            .map_or(0, |(i, j)| entry(i as usize, j as usize))
                            .to_le_bytes()
                    })
                    .collect()
            })
            .collect();
        // not held: nothing found, nothing judged
        assert_eq!(matmul_wrong_entry(&job, &tiles, [66]), None);
        assert_eq!(element_is_right(&job, 5, 2 * 64 + 1, &tiles[5]), None);
        inputs::hold(
            job.input,
            inputs::MatrixInputs {
                a: Arc::new(a.clone()),
                b: Arc::new(b.clone()),
            },
        );
        assert_eq!(matmul_wrong_entry(&job, &tiles, 0..70), None);
        assert_eq!(element_is_right(&job, 5, 2 * 64 + 1, &tiles[5]), Some(true));
        tiles[5][(2 * 64 + 1) * 4] ^= 1;
        assert_eq!(
            matmul_wrong_entry(&job, &tiles, [66]),
            Some((5, 2 * 64 + 1)),
            "row 66, column 129"
        );
        assert_eq!(
            element_is_right(&job, 5, 2 * 64 + 1, &tiles[5]),
            Some(false)
        );
        inputs::release(&job.input);
    }
}
