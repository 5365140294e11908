//! Where served results live: in memory (the embedded cluster, tests) or one file per result
//! in a directory, within a byte budget.
//!
//! A result file is `<root-hex>.res`: a 144-byte header (`b"CMRS"`, version 2, three zero
//! bytes, the root, the task, the 64-byte job spec, T and the tile length as u32 LE), the T
//! leaf hashes, then the T tiles. Version 2 is the BLAKE3 commitment; files of version 1 (the
//! SHA-256 tree before it) are skipped like any other unreadable file. It is written to a temporary name, synced and renamed, so a
//! crash leaves either the whole file or none. On start every file is indexed from its header
//! and size alone; its tree is rebuilt from the stored leaves when first asked for a proof,
//! and tiles are read from disk when served (the kernel's page cache keeps the hot ones), so
//! the keeper's own memory holds only a bounded number of trees.

use std::{
    collections::{HashMap, VecDeque},
    fs::File,
    io::{Read, Seek, SeekFrom, Write},
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, RwLock},
};

use anyhow::{bail, ensure, Context, Result};
use compute_market_protocol::{
    hash::Digest,
    job::{JobSpec, JOB_SPEC_LEN},
    merkle::MerkleTree,
};

use super::hex;
use crate::verify::ProvenTile;

const MAGIC: &[u8; 4] = b"CMRS";
const VERSION: u8 = 2;
/// Bytes before the leaves.
pub const HEADER_LEN: u64 = 8 + 32 + 32 + JOB_SPEC_LEN as u64 + 8;
/// Trees of disk results kept in memory at once (each at most 2T·32 bytes: 4 MiB at the
/// largest T).
const CACHED_TREES: usize = 32;

/// Where an entry's tiles are.
enum Tiles {
    Memory(Vec<Vec<u8>>),
    Disk(PathBuf),
}

/// One stored result.
pub struct Entry {
    /// Its Merkle root.
    pub root: Digest,
    /// The task it was first computed for (others with the same job share it).
    pub task: [u8; 32],
    /// The job.
    pub job: JobSpec,
    /// Bytes it takes (the file, or the tiles in memory).
    pub bytes: u64,
    tiles: Tiles,
    tree: Mutex<Option<Arc<MerkleTree>>>,
}

impl Entry {
    /// Tiles T.
    pub fn count(&self) -> u32 {
        self.job.tile_count()
    }

    /// Bytes of every tile.
    pub fn tile_len(&self) -> usize {
        self.job.tile_len()
    }

    /// Offset of the first tile in the file.
    pub fn tiles_offset(&self) -> u64 {
        HEADER_LEN + 32 * u64::from(self.count())
    }

    /// The file holding it (`None` in memory).
    pub fn path(&self) -> Option<&Path> {
        match &self.tiles {
            Tiles::Disk(p) => Some(p),
            Tiles::Memory(_) => None,
        }
    }

    /// Tile `i` (already checked `< T`).
    pub fn tile(&self, i: u32) -> Result<Vec<u8>> {
        ensure!(
            i < self.count(),
            "tile {i} out of range (T = {})",
            self.count()
        );
        match &self.tiles {
            Tiles::Memory(t) => Ok(t[i as usize].clone()),
            Tiles::Disk(p) => {
                let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
                let mut buf = vec![0u8; self.tile_len()];
                f.read_exact_at(
                    &mut buf,
                    self.tiles_offset() + u64::from(i) * self.tile_len() as u64,
                )
                .with_context(|| format!("reading tile {i} of {}", p.display()))?;
                Ok(buf)
            }
        }
    }

    /// Every tile.
    pub fn tiles(&self) -> Result<Vec<Vec<u8>>> {
        match &self.tiles {
            Tiles::Memory(t) => Ok(t.clone()),
            Tiles::Disk(p) => {
                let mut f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
                f.seek(SeekFrom::Start(self.tiles_offset()))?;
                (0..self.count())
                    .map(|_| {
                        let mut buf = vec![0u8; self.tile_len()];
                        f.read_exact(&mut buf)?;
                        Ok(buf)
                    })
                    .collect()
            }
        }
    }

    /// The tree, rebuilt from the stored leaves when not cached.
    pub fn tree(&self) -> Result<Arc<MerkleTree>> {
        if let Some(t) = self.tree.lock().expect("tree lock").clone() {
            return Ok(t);
        }
        let Tiles::Disk(p) = &self.tiles else {
            bail!("a memory entry always holds its tree")
        };
        let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
        let mut raw = vec![0u8; 32 * self.count() as usize];
        f.read_exact_at(&mut raw, HEADER_LEN)
            .with_context(|| format!("reading the leaves of {}", p.display()))?;
        let leaves: Vec<Digest> = raw
            .chunks_exact(32)
            .map(|c| c.try_into().expect("32 bytes"))
            .collect();
        let tree = Arc::new(MerkleTree::new(leaves));
        ensure!(
            tree.root() == self.root,
            "{}: its leaves do not hash to its root",
            p.display()
        );
        *self.tree.lock().expect("tree lock") = Some(tree.clone());
        Ok(tree)
    }

    fn forget_tree(&self) {
        if matches!(self.tiles, Tiles::Disk(_)) {
            *self.tree.lock().expect("tree lock") = None;
        }
    }

    /// Tiles `indices` with their proofs; an index `≥ T` is an error.
    pub fn proven(&self, indices: &[u32]) -> Result<Vec<ProvenTile>> {
        let tree = self.tree()?;
        indices
            .iter()
            .map(|&i| {
                Ok(ProvenTile {
                    index: i,
                    tile: self.tile(i)?,
                    proof: tree
                        .proof(i)
                        .with_context(|| format!("tile {i} out of range"))?,
                })
            })
            .collect()
    }
}

/// Bytes held against the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreStats {
    /// Results held.
    pub results: usize,
    /// Bytes they take.
    pub bytes: u64,
    /// The most they may take.
    pub budget: u64,
}

impl StoreStats {
    /// Whether `more` bytes still fit.
    pub fn fits(&self, more: u64) -> bool {
        self.bytes.saturating_add(more) <= self.budget
    }
}

/// The entries, by root.
pub(super) struct Store {
    dir: Option<PathBuf>,
    budget: u64,
    entries: RwLock<HashMap<Digest, Arc<Entry>>>,
    cached: Mutex<VecDeque<Digest>>,
}

/// Bytes a result of `job` takes on disk.
pub fn file_len(job: &JobSpec) -> u64 {
    HEADER_LEN + u64::from(job.tile_count()) * (32 + job.tile_len() as u64)
}

fn header(root: &Digest, task: &[u8; 32], job: &JobSpec) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN as usize);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&[VERSION, 0, 0, 0]);
    h.extend_from_slice(root);
    h.extend_from_slice(task);
    h.extend_from_slice(&job.encode());
    h.extend_from_slice(&job.tile_count().to_le_bytes());
    h.extend_from_slice(&(job.tile_len() as u32).to_le_bytes());
    h
}

/// Reads a result file's header and checks its size; the entry it describes.
fn index(path: &Path) -> Result<Entry> {
    let mut f = File::open(path)?;
    let mut h = [0u8; HEADER_LEN as usize];
    f.read_exact(&mut h).context("shorter than a header")?;
    ensure!(
        &h[..4] == MAGIC && h[4] == VERSION,
        "not a version-{VERSION} result file"
    );
    let root: Digest = h[8..40].try_into()?;
    let task: [u8; 32] = h[40..72].try_into()?;
    let job = JobSpec::decode(h[72..136].try_into()?)
        .map_err(|e| anyhow::anyhow!("its job spec: {e}"))?;
    let count = u32::from_le_bytes(h[136..140].try_into()?);
    let tile_len = u32::from_le_bytes(h[140..144].try_into()?);
    ensure!(
        count == job.tile_count() && tile_len as usize == job.tile_len(),
        "its shape does not match its job"
    );
    let len = f.metadata()?.len();
    ensure!(
        len == file_len(&job),
        "{len} bytes, its job implies {}",
        file_len(&job)
    );
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    ensure!(name == hex(&root), "its name is not its root");
    Ok(Entry {
        root,
        task,
        job,
        bytes: len,
        tiles: Tiles::Disk(path.to_path_buf()),
        tree: Mutex::new(None),
    })
}

impl Store {
    pub(super) fn memory() -> Self {
        Store {
            dir: None,
            budget: u64::MAX,
            entries: Default::default(),
            cached: Default::default(),
        }
    }

    pub(super) fn open(dir: &Path, budget: u64) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut entries = HashMap::new();
        for f in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = f?.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some("res") => match index(&path) {
                    Ok(e) => {
                        entries.insert(e.root, Arc::new(e));
                    }
                    Err(e) => {
                        tracing::warn!(file = %path.display(), error = %format!("{e:#}"), "cannot restore a stored result; skipped")
                    }
                },
                // an interrupted write
                Some("tmp") => {
                    let _ = std::fs::remove_file(&path);
                }
                _ => {}
            }
        }
        Ok(Store {
            dir: Some(dir.to_path_buf()),
            budget,
            entries: RwLock::new(entries),
            cached: Default::default(),
        })
    }

    pub(super) fn put(
        &self,
        root: Digest,
        task: [u8; 32],
        job: JobSpec,
        tiles: Vec<Vec<u8>>,
        tree: MerkleTree,
    ) -> Result<()> {
        ensure!(
            tiles.len() == job.tile_count() as usize
                && tiles.iter().all(|t| t.len() == job.tile_len()),
            "the tiles do not have the job's shape"
        );
        // the same job gives the same root: a result already held is held once
        if self.entries.read().expect("store lock").contains_key(&root) {
            self.touch(root);
            return Ok(());
        }
        let tree = Arc::new(tree);
        let entry = match &self.dir {
            None => Entry {
                root,
                task,
                job,
                bytes: tiles.iter().map(|t| t.len() as u64).sum(),
                tiles: Tiles::Memory(tiles),
                tree: Mutex::new(Some(tree)),
            },
            Some(dir) => {
                let path = dir.join(format!("{}.res", hex(&root)));
                // a name no other write uses, even of the same root at the same time
                static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let tmp = dir.join(format!("{}.{}.{n}.tmp", hex(&root), std::process::id()));
                {
                    let mut f = std::io::BufWriter::with_capacity(
                        1 << 20,
                        File::create(&tmp)
                            .with_context(|| format!("creating {}", tmp.display()))?,
                    );
                    f.write_all(&header(&root, &task, &job))?;
                    for i in 0..job.tile_count() {
                        f.write_all(&tree.leaf(i).expect("in range"))?;
                    }
                    for t in &tiles {
                        f.write_all(t)?;
                    }
                    let f = f.into_inner().map_err(|e| e.into_error())?;
                    f.sync_all()?;
                }
                std::fs::rename(&tmp, &path)?;
                File::open(dir)?.sync_all()?;
                Entry {
                    root,
                    task,
                    job,
                    bytes: file_len(&job),
                    tiles: Tiles::Disk(path),
                    tree: Mutex::new(Some(tree)),
                }
            }
        };
        let mut entries = self.entries.write().expect("store lock");
        entries.entry(root).or_insert_with(|| Arc::new(entry));
        drop(entries);
        self.touch(root);
        Ok(())
    }

    /// Marks `root`'s tree as recently used; forgets the trees of the least recently used
    /// beyond [`CACHED_TREES`].
    fn touch(&self, root: Digest) {
        if self.dir.is_none() {
            return;
        }
        let mut c = self.cached.lock().expect("cache lock");
        c.retain(|r| *r != root);
        c.push_back(root);
        while c.len() > CACHED_TREES {
            let old = c.pop_front().expect("non-empty");
            if let Some(e) = self.entries.read().expect("store lock").get(&old) {
                e.forget_tree();
            }
        }
    }

    pub(super) fn get(&self, root: &Digest) -> Option<Arc<Entry>> {
        let e = self.entries.read().expect("store lock").get(root).cloned();
        if e.is_some() {
            self.touch(*root);
        }
        e
    }

    pub(super) fn all(&self) -> Vec<Arc<Entry>> {
        self.entries
            .read()
            .expect("store lock")
            .values()
            .cloned()
            .collect()
    }

    pub(super) fn remove(&self, root: &Digest) -> Result<()> {
        let e = self.entries.write().expect("store lock").remove(root);
        if let Some(p) = e.as_ref().and_then(|e| e.path()) {
            std::fs::remove_file(p).with_context(|| format!("removing {}", p.display()))?;
        }
        Ok(())
    }

    pub(super) fn stats(&self) -> StoreStats {
        let e = self.entries.read().expect("store lock");
        StoreStats {
            results: e.len(),
            bytes: e.values().map(|e| e.bytes).sum(),
            budget: self.budget,
        }
    }
}
