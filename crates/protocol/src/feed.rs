//! Recomputing one element of a job on the client's data from proven slices of its inputs
//! (PROTOCOL §8.7): a resumable computation that the program advances one proven input chunk
//! per transaction, and that keepers run over their own slice strings to know, before they
//! bond, what the program will compute.
//!
//! * `MatMulModP`: entry (i, j) of C = Σ_l A[i][l]·B[l][j] mod p, fed chunk c of A's row i,
//!   then chunk c of B's column j, for c = 0, 1, … (256 terms a pair).
//! * `Mlp`: word w of row r of the output (a logit, or the class when w = C): the row's
//!   values from the batch, then the model front to back (for a logit, the last layer's other
//!   records are skipped). Every rule of PROTOCOL §5 (Mlp) is checked as it is read: a model
//!   that breaks one is refused ([`FeedError::BadModel`]).
//!
//! The state is [`STATE_LEN`] bytes kept in the dispute account, with a [`WORK_LEN`]-byte work
//! area (the activations of one row: two halves of `MAX_MLP_WIDTH` bytes, or a chunk of A).

use crate::{
    dispute::matmul_entry,
    job::{JobKind, JobSpec, MAX_MLP_WIDTH},
    merkle::CHUNK_LEN,
    slices::{self, VALUES_PER_CHUNK},
    P,
};

/// Bytes of the work area.
pub const WORK_LEN: usize = 2 * MAX_MLP_WIDTH as usize;
/// Bytes of an encoded [`Feed`].
pub const STATE_LEN: usize = 96;
const HALF: usize = MAX_MLP_WIDTH as usize;

/// Why a chunk is not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedError {
    /// Not the chunk the computation needs next ([`Feed::next`]).
    WrongChunk,
    /// The computation is complete, or the element needs no inputs.
    Complete,
    /// A matrix value is not below p.
    BadValue,
    /// The model's slices break a rule of PROTOCOL §5 (Mlp) or do not fit the job.
    BadModel,
}

/// What one element needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// An element in the padding (past m rows or n columns, or past N rows): zero.
    Padding,
    /// `MatMulModP` entry (i, j).
    Entry(u32, u32),
    /// `Mlp` row r, word w (w < C a logit, w = C the class); `Encoder` text r, word w of
    /// its embedding.
    Word(u32, u32),
}

/// The element (tile, element) of a job on the client's data, for [`Feed`]; `None` for a kind
/// not recomputed by feeding.
pub fn target(job: &JobSpec, tile: u32, element: u32) -> Option<Target> {
    // outside the result: nothing (checked first, so no arithmetic below can overflow)
    if !crate::dispute::in_range(job, tile, element) {
        return None;
    }
    match job.kind {
        JobKind::MatMulModP => Some(
            matmul_entry(job, tile, element).map_or(Target::Padding, |(i, j)| Target::Entry(i, j)),
        ),
        JobKind::Mlp => {
            let words = job.dims[2] + 1;
            let row = tile as u64 * job.rows_per_tile as u64 + (element / words) as u64;
            if row >= job.dims[0] as u64 {
                Some(Target::Padding)
            } else {
                Some(Target::Word(row as u32, element % words))
            }
        }
        JobKind::Generate => {
            let words = job.dims[2] + 1;
            let row = tile as u64 * job.rows_per_tile as u64 + (element / words) as u64;
            if row >= job.dims[0] as u64 {
                Some(Target::Padding)
            } else {
                Some(Target::Word(row as u32, element % words))
            }
        }
        JobKind::Encoder if job.dims[2].is_multiple_of(2) => {
            let words = job.dims[2] / 2;
            let row = tile as u64 * job.rows_per_tile as u64 + (element / words) as u64;
            if row >= job.dims[0] as u64 {
                Some(Target::Padding)
            } else {
                Some(Target::Word(row as u32, element % words))
            }
        }
        _ => None,
    }
}

/// The resumable computation of one element.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Feed {
    /// 0 the first input (A's row, the batch's row), 1 the second (B's column, the model),
    /// 2 complete.
    pub stage: u8,
    /// `Mlp`: layers L, once the header is read.
    pub layers: u8,
    /// `Mlp`: the layer being computed.
    pub layer: u8,
    /// `Mlp`: which half of the work area holds the layer's input.
    pub flip: u8,
    /// `MatMulModP`: terms added; `Mlp`: the output being computed in the layer.
    pub done: u32,
    /// `Mlp`: bytes read of the current record.
    pub pos: u32,
    /// `Mlp`, class: the index of the largest logit so far.
    pub best_at: u32,
    /// `Mlp`: the next byte of the current slice string to read.
    pub at: u64,
    /// The partial sum (`MatMulModP` mod p; `Mlp` the current output's accumulator).
    pub acc: i64,
    /// `Mlp`, class: the largest logit so far.
    pub best: i64,
    /// `Mlp`: the current record's head.
    pub head: [u8; 12],
    /// `Mlp`: widths `w_0 … w_L` (zero past L).
    pub widths: [u16; 9],
}

/// The requantization rule of PROTOCOL §5 (Mlp): `clamp(⌊(acc · m + 2^(s−1)) / 2^s⌋, −128,
/// 127)` in int64, the division an arithmetic right shift (rounding half up, towards +∞). `m`
/// in 1 ..= 2^31 − 1 and `s` in 1 ..= 62 keep every step inside int64.
pub fn requantize(acc: i32, m: i32, s: i32) -> i8 {
    let v = (i64::from(acc) * i64::from(m) + (1i64 << (s - 1))) >> s;
    v.clamp(-128, 127) as i8
}

fn word(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

impl Feed {
    /// The state's bytes in the dispute account.
    pub fn encode(&self) -> [u8; STATE_LEN] {
        let mut b = [0u8; STATE_LEN];
        b[0] = self.stage;
        b[1] = self.layers;
        b[2] = self.layer;
        b[3] = self.flip;
        b[4..8].copy_from_slice(&self.done.to_le_bytes());
        b[8..12].copy_from_slice(&self.pos.to_le_bytes());
        b[12..16].copy_from_slice(&self.best_at.to_le_bytes());
        b[16..24].copy_from_slice(&self.at.to_le_bytes());
        b[24..32].copy_from_slice(&self.acc.to_le_bytes());
        b[32..40].copy_from_slice(&self.best.to_le_bytes());
        b[40..52].copy_from_slice(&self.head);
        for (i, w) in self.widths.iter().enumerate() {
            b[52 + 2 * i..54 + 2 * i].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// [`Feed::encode`] read back.
    pub fn decode(b: &[u8; STATE_LEN]) -> Feed {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let mut widths = [0u16; 9];
        for (i, w) in widths.iter_mut().enumerate() {
            *w = u16::from_le_bytes([b[52 + 2 * i], b[53 + 2 * i]]);
        }
        Feed {
            stage: b[0],
            layers: b[1],
            layer: b[2],
            flip: b[3],
            done: word(b, 4),
            pos: word(b, 8),
            best_at: word(b, 12),
            at: u64_at(16),
            acc: u64_at(24) as i64,
            best: u64_at(32) as i64,
            head: b[40..52].try_into().expect("12 bytes"),
            widths,
        }
    }

    /// A computation of `target` not yet fed (`Mlp`: reading starts at the row's first byte).
    pub fn start(job: &JobSpec, target: Target) -> Feed {
        let at = match target {
            Target::Word(r, _) => r as u64 * job.dims[1] as u64,
            _ => 0,
        };
        Feed {
            at,
            ..Feed::default()
        }
    }

    fn widths(&self) -> ([u32; 9], usize) {
        let mut w = [0u32; 9];
        for (a, b) in w.iter_mut().zip(self.widths) {
            *a = b as u32;
        }
        (w, self.layers as usize + 1)
    }

    /// The chunk the computation needs next: (input 0 or 1, chunk index), or `None` once
    /// complete. Input 0 is A or the model, 1 is B or the batch ([`slices::refereed_roles`]).
    pub fn next(&self, job: &JobSpec, target: Target) -> Option<(u8, u64)> {
        let cpr = (job.dims[1] as u64).div_ceil(VALUES_PER_CHUNK as u64);
        let c = CHUNK_LEN as u64;
        match (target, self.stage) {
            (_, 2) | (Target::Padding, _) => None,
            (Target::Entry(i, _), 0) => Some((0, i as u64 * cpr + self.done as u64 / 256)),
            (Target::Entry(_, j), _) => Some((1, j as u64 * cpr + self.done as u64 / 256)),
            (Target::Word(..), 0) => Some((1, self.at / c)),
            (Target::Word(..), _) => Some((0, self.at / c)),
        }
    }

    /// Takes chunk `chunk` of input `input` (`bytes`, already proven against that input's
    /// slices of `len` bytes): `Ok(Some(value))` once the element is complete (its bytes in
    /// the result: LE `u32` or `i32`), `Ok(None)` while more is needed.
    #[allow(clippy::too_many_arguments)]
    pub fn take(
        &mut self,
        job: &JobSpec,
        target: Target,
        input: u8,
        chunk: u64,
        len: u64,
        bytes: &[u8],
        work: &mut [u8],
    ) -> Result<Option<[u8; 4]>, FeedError> {
        let want = self.next(job, target).ok_or(FeedError::Complete)?;
        if want != (input, chunk) {
            return Err(FeedError::WrongChunk);
        }
        match target {
            Target::Entry(..) => self.take_matmul(job, bytes, work),
            Target::Word(r, w) => self.take_mlp(job, r, w, chunk, len, bytes, work),
            Target::Padding => Err(FeedError::Complete),
        }
    }

    fn take_matmul(
        &mut self,
        job: &JobSpec,
        bytes: &[u8],
        work: &mut [u8],
    ) -> Result<Option<[u8; 4]>, FeedError> {
        if bytes.len() < CHUNK_LEN {
            return Err(FeedError::BadValue);
        }
        if self.stage == 0 {
            work[..CHUNK_LEN].copy_from_slice(&bytes[..CHUNK_LEN]);
            self.stage = 1;
            return Ok(None);
        }
        let k = job.dims[1];
        let terms = (k - self.done).min(VALUES_PER_CHUNK) as usize;
        let mut acc = self.acc as u64;
        for t in 0..terms {
            let (a, b) = (word(work, 4 * t) as u64, word(bytes, 4 * t) as u64);
            if a >= P || b >= P {
                return Err(FeedError::BadValue);
            }
            acc = crate::job::mod_p(acc + a * b);
        }
        self.acc = acc as i64;
        self.done += terms as u32;
        if self.done == k {
            self.stage = 2;
            return Ok(Some((acc as u32).to_le_bytes()));
        }
        self.stage = 0;
        Ok(None)
    }

    #[allow(clippy::too_many_arguments)]
    fn take_mlp(
        &mut self,
        job: &JobSpec,
        row: u32,
        w: u32,
        chunk: u64,
        len: u64,
        bytes: &[u8],
        work: &mut [u8],
    ) -> Result<Option<[u8; 4]>, FeedError> {
        let start = chunk * CHUNK_LEN as u64;
        let end = start + bytes.len() as u64;
        if self.stage == 0 {
            // the row's values, into the first half
            let (f, first) = (job.dims[1] as u64, row as u64 * job.dims[1] as u64);
            let to = end.min(first + f);
            for p in self.at..to {
                work[(p - first) as usize] = bytes[(p - start) as usize];
            }
            self.at = to;
            if to == first + f {
                self.stage = 1;
                self.at = 0;
            }
            return Ok(None);
        }
        if self.at == 0 {
            self.read_header(job, w, len, bytes)?;
        }
        let (all, n) = self.widths();
        let widths = &all[..n];
        let last = self.layers as usize - 1;
        while self.at < end {
            let b = bytes[(self.at - start) as usize];
            self.at += 1;
            let l = self.layer as usize;
            let (inp, out) = (widths[l] as usize, widths[l + 1]);
            if self.pos < 12 {
                self.head[self.pos as usize] = b;
                self.pos += 1;
                if self.pos == 12 {
                    let bias = word(&self.head, 0) as i32 as i64;
                    // no int32 accumulator may overflow (PROTOCOL §5, Mlp)
                    if bias.abs() + inp as i64 * 128 * 128 > i32::MAX as i64 {
                        return Err(FeedError::BadModel);
                    }
                    self.acc = bias;
                }
            } else {
                let j = (self.pos - 12) as usize;
                let a = work[self.flip as usize * HALF + j] as i8;
                self.acc += (b as i8 as i64) * a as i64;
                self.pos += 1;
            }
            if self.pos as usize != 12 + inp {
                continue;
            }
            // an output complete
            let o = self.done;
            self.pos = 0;
            self.done += 1;
            if l < last {
                let (m, s) = (word(&self.head, 4) as i32, word(&self.head, 8) as i32);
                if m < 1 || !(1..=62).contains(&s) {
                    return Err(FeedError::BadModel);
                }
                let v = requantize(self.acc as i32, m, s).max(0);
                work[(1 - self.flip as usize) * HALF + o as usize] = v as u8;
                if self.done == out {
                    self.layer += 1;
                    self.done = 0;
                    self.flip ^= 1;
                    if self.layer as usize == last && w < job.dims[2] {
                        // a logit: only its record of the last layer
                        self.at = slices::record_offset(widths, last, w);
                        self.done = w;
                        if self.at >= end {
                            return Ok(None);
                        }
                    }
                }
                continue;
            }
            let logit = self.acc as i32;
            if w < job.dims[2] {
                self.stage = 2;
                return Ok(Some(logit.to_le_bytes()));
            }
            if o == 0 || self.acc > self.best {
                self.best = self.acc;
                self.best_at = o;
            }
            if self.done == out {
                self.stage = 2;
                return Ok(Some(self.best_at.to_le_bytes()));
            }
        }
        Ok(None)
    }

    /// Reads and checks an `Mlp` model's header from its first chunk.
    fn read_header(
        &mut self,
        job: &JobSpec,
        w: u32,
        len: u64,
        bytes: &[u8],
    ) -> Result<(), FeedError> {
        let lay = crate::trace::read_header(job, len, bytes)?;
        let layers = lay.layers as usize;
        let ws = &lay.widths[..layers + 1];
        self.layers = lay.layers;
        for (a, b) in self.widths.iter_mut().zip(lay.widths) {
            *a = b as u16;
        }
        self.at = slices::model_header_len(layers);
        if layers == 1 && w < job.dims[2] {
            self.at = slices::record_offset(ws, 0, w);
            self.done = w;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{infer::Mlp, slices::build};

    /// Feeds `target` from the two slice strings as the program would, chunk by chunk.
    pub(crate) fn run(
        job: &JobSpec,
        target: Target,
        inputs: [&[u8]; 2],
    ) -> Result<[u8; 4], FeedError> {
        let mut f = Feed::start(job, target);
        let mut work = vec![0u8; WORK_LEN];
        let mut fed = 0;
        while let Some((i, c)) = f.next(job, target) {
            let s = inputs[i as usize];
            let (chunk, _) = build::chunk_proof(s, c);
            // the state survives the account between transactions
            f = Feed::decode(&f.encode());
            fed += 1;
            if let Some(v) = f.take(job, target, i, c, s.len() as u64, &chunk, &mut work)? {
                assert!(f.next(job, target).is_none());
                return Ok(v);
            }
            assert!(fed < 10_000);
        }
        Err(FeedError::Complete)
    }

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    fn model(widths: &[usize], seed: &mut u64) -> Mlp {
        crate::infer::random_mlp(widths, lcg(seed))
    }

    #[test]
    fn every_word_of_an_mlp_row_is_the_reference_fed_by_chunks() {
        let mut seed = 5;
        // odd widths, a hidden layer wider than a chunk, records across chunk boundaries
        for widths in [
            vec![64, 128, 10],
            vec![3, 1500, 7, 5],
            vec![700, 4],
            vec![9, 2, 2, 3],
        ] {
            let m = model(&widths, &mut seed);
            let (f, c) = (widths[0] as u32, *widths.last().unwrap() as u32);
            m.check(f as usize, c as usize).unwrap();
            let rows = 5u32;
            let x: Vec<i8> = (0..rows * f).map(|_| lcg(&mut seed) as i8).collect();
            let job = JobSpec::mlp(rows, f, c, m.work_per_row(), 2, [0; 32]);
            let (ms, bs) = (build::model(&m), build::batch(&x));
            for r in 0..rows {
                let want = m.row(&x[(r * f) as usize..((r + 1) * f) as usize]);
                for wd in [0, c / 2, c - 1, c] {
                    let (t, e) = (r / 2, (r % 2) * (c + 1) + wd);
                    let tg = target(&job, t, e).unwrap();
                    assert_eq!(tg, Target::Word(r, wd));
                    let got = run(&job, tg, [&ms, &bs]).unwrap();
                    assert_eq!(
                        &got[..],
                        &want[4 * wd as usize..4 * wd as usize + 4],
                        "{widths:?} row {r} word {wd}"
                    );
                }
            }
            // the last tile's padding row, and past the tile
            assert_eq!(target(&job, 2, c + 1), Some(Target::Padding));
            assert_eq!(target(&job, 0, 2 * (c + 1)), None);
        }
    }

    #[test]
    fn a_model_that_breaks_a_rule_or_the_job_is_refused() {
        let mut seed = 9;
        let m = model(&[8, 4, 3], &mut seed);
        let x = vec![1i8; 8];
        let job = JobSpec::mlp(1, 8, 3, m.work_per_row(), 1, [0; 32]);
        let ms = build::model(&m);
        let bs = build::batch(&x);
        run(&job, Target::Word(0, 3), [&ms, &bs]).unwrap();
        // a shift of 0 in the hidden layer
        let mut bad = ms.clone();
        let shift = slices::record_offset(&[8, 4, 3], 0, 1) as usize + 8;
        bad[shift..shift + 4].copy_from_slice(&0i32.to_le_bytes());
        assert_eq!(
            run(&job, Target::Word(0, 3), [&bad, &bs]),
            Err(FeedError::BadModel)
        );
        // another job's work, or a width not the batch's
        let other = JobSpec::mlp(1, 8, 3, m.work_per_row() + 1, 1, [0; 32]);
        assert_eq!(
            run(&other, Target::Word(0, 0), [&ms, &bs]),
            Err(FeedError::BadModel)
        );
        // a truncated model string
        assert_eq!(
            run(&job, Target::Word(0, 0), [&ms[..ms.len() - 1], &bs]),
            Err(FeedError::BadModel)
        );
        // the wrong chunk is refused
        let tg = Target::Word(0, 0);
        let mut f = Feed::start(&job, tg);
        let mut work = vec![0u8; WORK_LEN];
        assert_eq!(
            f.take(&job, tg, 0, 0, ms.len() as u64, &ms, &mut work),
            Err(FeedError::WrongChunk)
        );
    }

    #[test]
    fn an_entry_of_a_product_on_the_clients_data_is_fed_a_row_and_a_column() {
        let mut seed = 3;
        for (m, k, n) in [
            (70u32, 5u32, 130u32),
            (3, 300, 2),
            (1, 512, 1),
            (65, 257, 64),
        ] {
            let a: Vec<u32> = (0..m * k).map(|_| (lcg(&mut seed) % P) as u32).collect();
            let b: Vec<u32> = (0..k * n).map(|_| (lcg(&mut seed) % P) as u32).collect();
            let job = JobSpec {
                input_mode: crate::job::InputMode::ContentHash,
                ..JobSpec::matmul(m, k, n, [0; 32])
            };
            let (sa, sb) = (
                build::matrix_rows(&a, m, k),
                build::matrix_columns(&b, k, n),
            );
            for (t, e) in [(0u32, 0u32), (0, 4095), (job.tile_count() - 1, 0), (0, 65)] {
                match target(&job, t, e).unwrap() {
                    Target::Padding => assert!(matmul_entry(&job, t, e).is_none()),
                    tg @ Target::Entry(i, j) => {
                        let want = (0..k as u64).fold(0u64, |acc, l| {
                            (acc + a[(i as u64 * k as u64 + l) as usize] as u64
                                * b[(l * n as u64 + j as u64) as usize] as u64)
                                % P
                        });
                        let got = run(&job, tg, [&sa, &sb]).unwrap();
                        assert_eq!(
                            u32::from_le_bytes(got),
                            want as u32,
                            "{m}×{k}×{n} ({i}, {j})"
                        );
                    }
                    Target::Word(..) => unreachable!(),
                }
            }
        }
        // a value not below p is refused
        let job = JobSpec {
            input_mode: crate::job::InputMode::ContentHash,
            ..JobSpec::matmul(1, 2, 1, [0; 32])
        };
        let sa = build::matrix_rows(&[P as u32, 1], 1, 2);
        let sb = build::matrix_columns(&[1, 1], 2, 1);
        assert_eq!(
            run(&job, Target::Entry(0, 0), [&sa, &sb]),
            Err(FeedError::BadValue)
        );
    }
}
