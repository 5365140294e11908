//! Input manifests (PROTOCOL §5, Inputs): what a job with [`InputMode::ContentHash`] computes on.
//!
//! The job's 32 input bytes are the SHA-256 of a small canonical *manifest* that lists the
//! job's input parts, each by role, format, exact length and SHA-256. The manifest and every
//! part are fetched as `<input_uri>/c/<sha256-hex>` and hashed, exactly as fetched, before
//! anything parses them. The encoding is fixed-width binary, so two implementations produce
//! the same bytes for the same parts:
//!
//! ```text
//! [0..4]  b"CMIN"
//! [4]     version: 1, or 2 (every part's slices named too)
//! [5]     number of parts n, 1..=MAX_PARTS
//! [6..8]  0
//! then n entries of 44 bytes (version 1) or 84 (version 2), in strictly increasing role order:
//!   [0]      role (1 = A, 2 = B, 3 = model, 4 = batch, 5 = texts, 6 = prompts)
//!   [1]      format (1 = safetensors, 2 = UTF-8 text; texts are text, every other role safetensors)
//!   [2..4]   0
//!   [4..12]  length in bytes, u64 little-endian, ≥ 1
//!   [12..44] SHA-256 of the part
//!   version 2 only:
//!   [44..52] length of the part's slice string, u64 little-endian, ≥ 1
//!   [52..84] BLAKE3 of the slice string
//! ```
//!
//! The *slice string* of a part (PROTOCOL §8.7, [`crate::slices`]) is its content laid out so
//! that the program can prove any slice it recomputes from (a row of A, a column of B, a row
//! of a batch, a model's neurons) with BLAKE3 chunk proofs, as it proves results. Content
//! stores still hold, and the SHA-256 still names, the part's own bytes.
//!
//! [`InputMode::ContentHash`]: crate::job::InputMode::ContentHash

use crate::{
    hash::{hashv, Digest},
    job::{JobKind, JobSpec},
};

/// The manifest's magic bytes.
pub const MAGIC: &[u8; 4] = b"CMIN";
/// The manifest version without slices (still read and written: such a job cannot be
/// refereed on its inputs, PROTOCOL §8.7).
pub const VERSION: u8 = 1;
/// The manifest version that names every part's slice string too.
pub const VERSION_SLICES: u8 = 2;
/// Most parts a manifest lists.
pub const MAX_PARTS: usize = 8;
/// Bytes of the manifest header.
pub const HEADER_LEN: usize = 8;
/// Bytes of one entry (version 1).
pub const ENTRY_LEN: usize = 44;
/// Bytes of one entry of a version-2 manifest (the slice string's length and BLAKE3 added).
pub const ENTRY_LEN_SLICES: usize = ENTRY_LEN + 40;
/// The longest manifest.
pub const MAX_LEN: usize = HEADER_LEN + MAX_PARTS * ENTRY_LEN_SLICES;
/// Most bytes of a safetensors header (its JSON, after the 8-byte length) a part may carry.
pub const MAX_SAFETENSORS_HEADER: u64 = 64 * 1024;

/// What a part is to its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// `MatMulModP`'s left matrix, m × k.
    A = 1,
    /// `MatMulModP`'s right matrix, k × n.
    B = 2,
    /// `Mlp`'s model (PROTOCOL §5, Mlp).
    Model = 3,
    /// `Mlp`'s batch, N × F int8.
    Batch = 4,
    /// `Encoder`'s texts: UTF-8, one text per line.
    Texts = 5,
    /// `Generate`'s prompts: their texts, their token ids in the model's chat template and the
    /// sampling rule, one safetensors file (PROTOCOL §5, Generate).
    Prompts = 6,
}

impl Role {
    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(Role::A),
            2 => Some(Role::B),
            3 => Some(Role::Model),
            4 => Some(Role::Batch),
            5 => Some(Role::Texts),
            6 => Some(Role::Prompts),
            _ => None,
        }
    }

    /// The part's name: its tensor's in its safetensors file for a matrix ("A", "B"),
    /// "model" and "batch" for an `Mlp`'s.
    pub fn name(self) -> &'static str {
        match self {
            Role::A => "A",
            Role::B => "B",
            Role::Model => "model",
            Role::Batch => "batch",
            Role::Texts => "texts",
            Role::Prompts => "prompts",
        }
    }

    /// The format a part of this role must have: text for texts, safetensors for the rest.
    pub fn format(self) -> Format {
        match self {
            Role::Texts => Format::Text,
            _ => Format::Safetensors,
        }
    }
}

/// How a part is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// A safetensors file (Hugging Face) holding one tensor named after the role.
    Safetensors = 1,
    /// UTF-8 text.
    Text = 2,
}

/// One input part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Part {
    /// Its role.
    pub role: Role,
    /// Its encoding.
    pub format: Format,
    /// Its exact length in bytes.
    pub len: u64,
    /// SHA-256 of its bytes.
    pub hash: Digest,
    /// Its slice string's length and BLAKE3 (version 2), `None` in a version-1 manifest.
    pub slices: Option<Slices>,
}

/// A part's slice string (PROTOCOL §8.7): its length and BLAKE3 root, against which the program
/// proves the slices a dispute recomputes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slices {
    /// Bytes of the slice string (≥ 1).
    pub len: u64,
    /// BLAKE3 of the slice string.
    pub root: Digest,
}

impl Part {
    /// The entry of a safetensors file `bytes` in `role`: its length and SHA-256.
    pub fn safetensors(role: Role, bytes: &[u8]) -> Self {
        Part {
            format: Format::Safetensors,
            ..Part::text(role, bytes)
        }
    }

    /// The entry of `bytes` in `role`, in the format the role takes ([`Role::format`]).
    pub fn new(role: Role, bytes: &[u8]) -> Self {
        Part {
            format: role.format(),
            ..Part::text(role, bytes)
        }
    }

    /// The entry of a UTF-8 text part `bytes` in `role`: its length and SHA-256.
    pub fn text(role: Role, bytes: &[u8]) -> Self {
        Part {
            role,
            format: Format::Text,
            len: bytes.len() as u64,
            hash: crate::hash::hashv(&[bytes]),
            slices: None,
        }
    }

    /// The same entry naming its slice string too.
    pub fn with_slices(self, slices: Slices) -> Self {
        Part {
            slices: Some(slices),
            ..self
        }
    }
}

/// A decoded manifest: its parts in role order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Manifest {
    /// The parts, strictly increasing by role.
    pub parts: Vec<Part>,
}

/// Why a manifest is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManifestError {
    /// Not a manifest: wrong length, magic, version or reserved bytes.
    Malformed(String),
    /// It does not fit the job: a role missing or extra, a part longer than the job implies.
    WrongForJob(String),
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ManifestError::Malformed(m) => write!(f, "malformed input manifest: {m}"),
            ManifestError::WrongForJob(m) => write!(f, "input manifest does not fit the job: {m}"),
        }
    }
}

impl std::error::Error for ManifestError {}

impl Manifest {
    /// A manifest of `parts` (sorted by role here).
    pub fn new(mut parts: Vec<Part>) -> Self {
        parts.sort_by_key(|p| p.role);
        Manifest { parts }
    }

    /// The manifest's version: 2 when every part names its slices, else 1.
    pub fn version(&self) -> u8 {
        if !self.parts.is_empty() && self.parts.iter().all(|p| p.slices.is_some()) {
            VERSION_SLICES
        } else {
            VERSION
        }
    }

    /// The canonical bytes (version 1 drops any slices: they are named for every part or none).
    pub fn encode(&self) -> Vec<u8> {
        let version = self.version();
        let mut b = Vec::with_capacity(HEADER_LEN + ENTRY_LEN_SLICES * self.parts.len());
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&[version, self.parts.len() as u8, 0, 0]);
        for p in &self.parts {
            b.extend_from_slice(&[p.role as u8, p.format as u8, 0, 0]);
            b.extend_from_slice(&p.len.to_le_bytes());
            b.extend_from_slice(&p.hash);
            if let (VERSION_SLICES, Some(s)) = (version, p.slices) {
                b.extend_from_slice(&s.len.to_le_bytes());
                b.extend_from_slice(&s.root);
            }
        }
        b
    }

    /// SHA-256 of the canonical bytes: the job's `input` field.
    pub fn hash(&self) -> Digest {
        hashv(&[&self.encode()])
    }

    /// Decodes canonical bytes, checking every byte.
    pub fn decode(b: &[u8]) -> Result<Self, ManifestError> {
        let bad = |m: &str| Err(ManifestError::Malformed(m.into()));
        if b.len() < HEADER_LEN || b.len() > MAX_LEN {
            return bad(&format!("{} bytes (at most {MAX_LEN})", b.len()));
        }
        if &b[..4] != MAGIC {
            return bad("no CMIN magic");
        }
        let entry = match b[4] {
            VERSION => ENTRY_LEN,
            VERSION_SLICES => ENTRY_LEN_SLICES,
            v => {
                return bad(&format!(
                    "version {v} (this keeper reads {VERSION} and {VERSION_SLICES})"
                ))
            }
        };
        let n = b[5] as usize;
        if n == 0 || n > MAX_PARTS || b[6..8] != [0, 0] {
            return bad(&format!("{n} parts or non-zero reserved bytes"));
        }
        if b.len() != HEADER_LEN + n * entry {
            return bad(&format!("{} bytes for {n} parts", b.len()));
        }
        let mut parts: Vec<Part> = Vec::with_capacity(n);
        for (i, e) in b[HEADER_LEN..].chunks_exact(entry).enumerate() {
            let Some(role) = Role::from_byte(e[0]) else {
                return bad(&format!("part {i} has unknown role {}", e[0]));
            };
            let format = match e[1] {
                1 => Format::Safetensors,
                2 => Format::Text,
                f => return bad(&format!("part {i} has unknown format {f}")),
            };
            if format != role.format() {
                return bad(&format!(
                    "part {i} ({}) is {format:?}, it must be {:?}",
                    role.name(),
                    role.format()
                ));
            }
            if e[2..4] != [0, 0] {
                return bad(&format!("part {i} has non-zero reserved bytes"));
            }
            let len = u64::from_le_bytes(e[4..12].try_into().expect("8 bytes"));
            if len == 0 {
                return bad(&format!("part {i} is empty"));
            }
            if parts.last().is_some_and(|p| p.role >= role) {
                return bad("parts are not in strictly increasing role order");
            }
            let slices = match entry {
                ENTRY_LEN_SLICES => {
                    let len = u64::from_le_bytes(e[44..52].try_into().expect("8 bytes"));
                    if len == 0 {
                        return bad(&format!("part {i} has an empty slice string"));
                    }
                    Some(Slices {
                        len,
                        root: e[52..84].try_into().expect("32 bytes"),
                    })
                }
                _ => None,
            };
            parts.push(Part {
                role,
                format,
                len,
                hash: e[12..44].try_into().expect("32 bytes"),
                slices,
            });
        }
        Ok(Manifest { parts })
    }

    /// The part of `role`.
    pub fn part(&self, role: Role) -> Option<&Part> {
        self.parts.iter().find(|p| p.role == role)
    }

    /// Checks that the manifest is what `job` computes on: exactly its roles, each no longer
    /// than [`part_bound`] (so nothing longer is ever fetched).
    pub fn check_for(&self, job: &JobSpec) -> Result<(), ManifestError> {
        let want = roles_of(job).ok_or_else(|| {
            ManifestError::WrongForJob(format!("{:?} takes no input parts", job.kind))
        })?;
        let have: Vec<Role> = self.parts.iter().map(|p| p.role).collect();
        if have != want {
            return Err(ManifestError::WrongForJob(format!(
                "parts {have:?}, the job takes {want:?}"
            )));
        }
        for p in &self.parts {
            let bound = part_bound(job, p.role).expect("a role of the job");
            if p.len > bound {
                return Err(ManifestError::WrongForJob(format!(
                    "part {} is {} bytes, more than the {bound} its shape allows",
                    p.role.name(),
                    p.len
                )));
            }
        }
        Ok(())
    }
}

impl Manifest {
    /// Checks that the slices `job` declares (its `slices_len`, PROTOCOL §8.7) are what the
    /// manifest names for the job's first refereed part, and that its second refereed part
    /// names slices too: a job that declares none is not refereed, whatever the manifest
    /// names; one that declares some needs a version-2 manifest naming that length (a job
    /// held for disputes whose inputs could not be proven would be refereed by nobody).
    pub fn check_slices_declared(&self, job: &JobSpec) -> Result<(), ManifestError> {
        if job.slices_len == 0 {
            return Ok(());
        }
        let [role, second] = crate::slices::refereed_roles(job).ok_or_else(|| {
            ManifestError::WrongForJob(format!("{:?} declares no slices", job.kind))
        })?;
        let named = self.part(role).and_then(|p| p.slices);
        if named.is_none_or(|s| s.len != job.slices_len) {
            let named = named.map_or("none".to_string(), |s| format!("{} bytes", s.len));
            return Err(ManifestError::WrongForJob(format!(
                "the job declares a slice string of {} bytes for part {}, the manifest names {named}",
                job.slices_len,
                role.name(),
            )));
        }
        if self.part(second).and_then(|p| p.slices).is_none() {
            return Err(ManifestError::WrongForJob(format!(
                "the job declares slices, and the manifest names none for part {}",
                second.name()
            )));
        }
        Ok(())
    }
}

/// The roles a job kind takes, in order; `None` for kinds whose inputs are generated only.
pub fn roles_of(job: &JobSpec) -> Option<Vec<Role>> {
    match job.kind {
        JobKind::MatMulModP => Some(vec![Role::A, Role::B]),
        JobKind::HashBatch => None,
        JobKind::Mlp => Some(vec![Role::Model, Role::Batch]),
        JobKind::Encoder => Some(vec![Role::Model, Role::Texts]),
        JobKind::Generate => Some(vec![Role::Model, Role::Prompts]),
    }
}

/// `[rows, cols]` of the matrix of `role` in `job`.
pub fn shape_of(job: &JobSpec, role: Role) -> Option<[u64; 2]> {
    let [m, k, n] = job.dims.map(u64::from);
    match (job.kind, role) {
        (JobKind::MatMulModP, Role::A) => Some([m, k]),
        (JobKind::MatMulModP, Role::B) => Some([k, n]),
        (JobKind::Mlp, Role::Batch) => Some([m, k]),
        _ => None,
    }
}

/// The most bytes a part of `role` may have for `job`: a safetensors file of its one `u32`
/// tensor with a header of at most [`MAX_SAFETENSORS_HEADER`] bytes.
pub fn part_bound(job: &JobSpec, role: Role) -> Option<u64> {
    let file = 8 + MAX_SAFETENSORS_HEADER;
    match (job.kind, role) {
        // int8 values
        (JobKind::Mlp, Role::Batch) => shape_of(job, role).map(|[r, c]| file + r * c),
        // a weight byte per multiply-add of a row, and three int32 values (bias, multiplier,
        // shift) per output of at most MAX_MLP_LAYERS layers of MAX_MLP_WIDTH
        (JobKind::Mlp, Role::Model) => Some(
            file + job.work_per_row
                + 12 * crate::job::MAX_MLP_LAYERS * u64::from(crate::job::MAX_MLP_WIDTH),
        ),
        // UTF-8, at most 16 bytes per token of the limit a text, 64 MiB in all, no header
        (JobKind::Encoder, Role::Texts) => Some(
            (crate::job::ENCODER_TEXT_BYTES_PER_TOKEN
                * u64::from(job.dims[0])
                * u64::from(job.dims[1]))
            .min(crate::job::MAX_ENCODER_TEXTS_BYTES),
        ),
        // a weight byte per multiply-add of a token; the embeddings (int8) and the vocabulary
        // (at most 48 bytes a token); per block at most 100 · H bytes of int32 vectors and a
        // 1 KiB table, and 12 · F bytes for the feed-forward's (F ≤ work / (2H) in all blocks)
        (JobKind::Encoder, Role::Model) => {
            let h = u64::from(job.dims[2]);
            let vocab = crate::job::MAX_ENCODER_VOCAB;
            Some(
                file + job.work_per_row
                    + (vocab + u64::from(crate::job::MAX_ENCODER_TOKENS)) * h
                    + vocab * 48
                    + crate::job::MAX_ENCODER_BLOCKS * (100 * h + 1024)
                    + 6 * job.work_per_row / h
                    + 4 * 1024,
            )
        }
        // per prompt two lengths, at most 16 bytes of text and one id a token of the limit,
        // and the sampling rule
        (JobKind::Generate, Role::Prompts) => {
            let (n, l) = (u64::from(job.dims[0]), u64::from(job.dims[1]));
            Some(file + 8 * n + (crate::job::ENCODER_TEXT_BYTES_PER_TOKEN + 4) * n * l + 64)
        }
        // at most a byte a unit of a token's work (4-bit weights, their scales, the int8
        // embedding), the tables and the tokenizer (at most 64 bytes a vocabulary entry of the
        // largest vocabulary)
        // (the embedding's block scales add an eighth of its bytes: 2 · work bounds it all)
        (JobKind::Generate, Role::Model) => Some(
            file + 2 * job.work_per_row
                + 4 * u64::from(crate::job::MAX_GENERATE_CONTEXT) * 256
                + 64 * (1 << 18)
                + (4 << 20),
        ),
        _ => shape_of(job, role).map(|[r, c]| file + r * c * 4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_declaring_slices_needs_both_refereed_parts_named() {
        use crate::slices::encoder::build::ids;
        let job = JobSpec {
            slices_len: 100,
            ..JobSpec::encoder(2, 4, 8, 1 << 20, 2, [0; 32])
        };
        let model = Slices {
            len: 100,
            root: [1; 32],
        };
        let texts = crate::slices::build::slices_of(&ids(&[vec![1], vec![2, 3]], 4));
        let both = Manifest::new(vec![
            Part::new(Role::Model, b"m").with_slices(model),
            Part::new(Role::Texts, b"a\nb\n").with_slices(texts),
        ]);
        both.check_slices_declared(&job).unwrap();
        // the model's slices named, the texts' not: refused, naming the part
        let one = Manifest::new(vec![
            Part::new(Role::Model, b"m").with_slices(model),
            Part::new(Role::Texts, b"a\nb\n"),
        ]);
        let e = one.check_slices_declared(&job).unwrap_err().to_string();
        assert!(e.contains("names none for part texts"), "{e}");
        let other = JobSpec {
            slices_len: 99,
            ..job
        };
        assert!(both.check_slices_declared(&other).is_err());
    }

    fn part(role: Role, len: u64, h: u8) -> Part {
        Part {
            role,
            format: Format::Safetensors,
            len,
            hash: [h; 32],
            slices: None,
        }
    }

    #[test]
    fn version_2_names_every_parts_slices() {
        let s = |l: u64, h: u8| Slices {
            len: l,
            root: [h; 32],
        };
        let m = Manifest::new(vec![
            part(Role::B, 9, 2).with_slices(s(1024, 4)),
            part(Role::A, 1000, 1).with_slices(s(2048, 3)),
        ]);
        let b = m.encode();
        assert_eq!(b.len(), HEADER_LEN + 2 * ENTRY_LEN_SLICES);
        assert_eq!(&b[..8], b"CMIN\x02\x02\x00\x00");
        assert_eq!(&b[8 + 44..8 + 52], &2048u64.to_le_bytes());
        assert_eq!(Manifest::decode(&b).unwrap(), m);
        // a zero-length slice string, or version 2 with version-1 entries, is refused
        let mut z = b.clone();
        z[8 + 44..8 + 52].copy_from_slice(&0u64.to_le_bytes());
        assert!(Manifest::decode(&z)
            .unwrap_err()
            .to_string()
            .contains("empty slice"));
        let v1 = Manifest::new(vec![part(Role::A, 5, 1), part(Role::B, 6, 2)]).encode();
        let mut mixed = v1.clone();
        mixed[4] = VERSION_SLICES;
        assert!(Manifest::decode(&mixed).is_err());
        // slices named for only some parts: written as version 1
        let some = Manifest::new(vec![
            part(Role::A, 5, 1).with_slices(s(1, 1)),
            part(Role::B, 6, 2),
        ]);
        assert_eq!(some.version(), VERSION);
        assert_eq!(some.encode(), v1);
    }

    #[test]
    fn round_trips_byte_exact_and_sorted() {
        let m = Manifest::new(vec![part(Role::B, 9, 2), part(Role::A, 1000, 1)]);
        let b = m.encode();
        assert_eq!(b.len(), HEADER_LEN + 2 * ENTRY_LEN);
        assert_eq!(&b[..8], b"CMIN\x01\x02\x00\x00");
        assert_eq!(&b[8..20], &[1, 1, 0, 0, 0xe8, 3, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Manifest::decode(&b).unwrap(), m);
        assert_eq!(m.hash(), hashv(&[&b]));
    }

    #[test]
    fn refuses_every_malformed_byte() {
        let good = Manifest::new(vec![part(Role::A, 5, 1), part(Role::B, 6, 2)]).encode();
        for (at, v) in [
            (0, b'X'),
            (4, 2),
            (5, 0),
            (5, 3),
            (6, 1),
            (8, 9),
            (9, 2),
            (10, 1),
        ] {
            let mut b = good.clone();
            b[at] = v;
            assert!(Manifest::decode(&b).is_err(), "byte {at} = {v}");
        }
        // zero length, roles out of order or repeated, truncated, too long
        let mut b = good.clone();
        b[12..20].copy_from_slice(&0u64.to_le_bytes());
        assert!(Manifest::decode(&b).is_err());
        let mut b = good.clone();
        b[8 + ENTRY_LEN] = 1;
        assert!(Manifest::decode(&b).is_err());
        assert!(Manifest::decode(&good[..good.len() - 1]).is_err());
        assert!(Manifest::decode(&[good.clone(), vec![0]].concat()).is_err());
        assert!(Manifest::decode(&vec![0; MAX_LEN + 1]).is_err());
    }

    #[test]
    fn parts_must_fit_the_job() {
        let job = JobSpec::matmul(100, 70, 3, [0; 32]);
        let bound_a = part_bound(&job, Role::A).unwrap();
        assert_eq!(bound_a, 8 + MAX_SAFETENSORS_HEADER + 100 * 70 * 4);
        let ok = Manifest::new(vec![part(Role::A, bound_a, 1), part(Role::B, 900, 2)]);
        ok.check_for(&job).unwrap();
        let long = Manifest::new(vec![part(Role::A, bound_a + 1, 1), part(Role::B, 900, 2)]);
        let e = long.check_for(&job).unwrap_err().to_string();
        assert!(e.contains("part A is") && e.contains("more than"), "{e}");
        let missing = Manifest::new(vec![part(Role::A, 10, 1)]);
        assert!(missing
            .check_for(&job)
            .unwrap_err()
            .to_string()
            .contains("parts [A]"));
        let hb = JobSpec::hash_batch(1, 1, 1, [0; 32]);
        assert!(ok.check_for(&hb).is_err());
    }

    #[test]
    fn an_encoder_takes_a_model_and_texts_and_texts_are_text() {
        let job = JobSpec::encoder(60, 32, 384, 10_616_832, 8, [0; 32]);
        let texts = part_bound(&job, Role::Texts).unwrap();
        assert_eq!(texts, 16 * 60 * 32, "16 bytes a token of the limit");
        let model = part_bound(&job, Role::Model).unwrap();
        assert!(model > 23_143_588, "the MiniLM model fits: {model}");
        let m = Manifest::new(vec![
            Part::new(Role::Texts, b"a\nb\n"),
            Part::new(Role::Model, b"model"),
        ]);
        assert_eq!(m.parts[1].format, Format::Text);
        m.check_for(&job).unwrap();
        assert_eq!(Manifest::decode(&m.encode()).unwrap(), m);
        // texts marked safetensors, or a model marked text, are refused
        let mut b = m.encode();
        b[HEADER_LEN + ENTRY_LEN + 1] = Format::Safetensors as u8;
        let e = Manifest::decode(&b).unwrap_err().to_string();
        assert!(
            e.contains("part 1 (texts) is Safetensors, it must be Text"),
            "{e}"
        );
        let mut b = m.encode();
        b[HEADER_LEN + 1] = Format::Text as u8;
        assert!(Manifest::decode(&b).is_err());
        // an Mlp's roles are not an encoder's
        let mlp = JobSpec::mlp(60, 64, 10, 9_472, 8, [0; 32]);
        assert!(m
            .check_for(&mlp)
            .unwrap_err()
            .to_string()
            .contains("parts [Model, Texts]"));
    }
}
