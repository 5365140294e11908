//! The content store: objects named by their SHA-256 (clients' input parts and manifests), in
//! memory or one file per object in a directory, within a byte budget, least recently used
//! evicted first. One per keeper, shared by every role, served as `GET /c/<hash>` and filled by
//! `PUT /c/<hash>` and by the keeper's own fetches (PROTOCOL §5, Inputs).
//!
//! Every object is checked against its name once, when it comes in (an upload is hashed as
//! it is written to a temporary file, never held in memory), and trusted from disk after
//! that: serving a range or a HEAD reads only what is sent. Objects found on disk at start
//! are indexed from names and sizes alone and hashed once, streaming, the first time they are
//! served ([`ContentStore::open_checked`]); a file whose length is not its index's, or whose
//! bytes do not hash to its name, is deleted — a transient read error (out of descriptors,
//! an interrupted call) never deletes anything. Files are written to a temporary name, synced
//! and renamed, so a crash leaves the whole object or none (oldest modification first in the
//! eviction order after a restart).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};
use compute_market_protocol::hash::{hashv, Digest};

use super::{hex, parse_hex_digest};

/// Why an object was not stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutError {
    /// Its bytes do not hash to its name.
    HashMismatch,
    /// It is larger than one object may be.
    TooLarge(u64),
    /// Making room would evict objects still in use: the store is over its budget.
    OverBudget,
    /// The disk failed.
    Io(String),
}

impl std::fmt::Display for PutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PutError::HashMismatch => f.write_str("the body does not hash to its name (SHA-256)"),
            PutError::TooLarge(max) => write!(f, "an object is at most {max} bytes here"),
            PutError::OverBudget => f.write_str("the content store is over its budget"),
            PutError::Io(e) => write!(f, "the content store cannot write: {e}"),
        }
    }
}

impl std::error::Error for PutError {}

struct Meta {
    len: u64,
    used: u64,
    at: Instant,
    /// Hashed against its name by this process (an upload, a fetch, a first serve): its
    /// file is trusted from then on.
    checked: bool,
}

#[derive(Default)]
struct Index {
    objects: HashMap<Digest, Meta>,
    memory: HashMap<Digest, Arc<Vec<u8>>>,
    bytes: u64,
    clock: u64,
}

/// The store.
pub struct ContentStore {
    dir: Option<PathBuf>,
    /// Bytes held at most.
    pub budget: u64,
    /// Largest object.
    pub max_object: u64,
    /// An upload from the network may evict only objects unused for this long (the keeper's
    /// own fetches may evict any): strangers cannot flush what tasks in flight need.
    pub protect: Duration,
    index: Mutex<Index>,
    /// One put at a time (the check, the room made, the write and the insert are one step).
    writing: Mutex<()>,
    /// Objects being hashed for their first serve now.
    checking: Mutex<std::collections::HashSet<Digest>>,
    /// Objects never evicted, whatever their age ([`ContentStore::pin`]).
    pinned: Mutex<std::collections::HashSet<Digest>>,
}

/// The default largest object: a 8192 × 8192 matrix of `u32` in safetensors, header included.
pub const MAX_OBJECT: u64 =
    8 + compute_market_protocol::manifest::MAX_SAFETENSORS_HEADER + 8192 * 8192 * 4;

impl ContentStore {
    /// A store in memory.
    pub fn memory(budget: u64) -> Self {
        ContentStore {
            dir: None,
            budget,
            max_object: MAX_OBJECT.min(budget),
            protect: Duration::from_secs(600),
            index: Default::default(),
            writing: Mutex::new(()),
            checking: Default::default(),
            pinned: Default::default(),
        }
    }

    /// A store in `dir` (created with the first object), indexing what it holds.
    pub fn open(dir: &Path, budget: u64) -> Result<Self> {
        let mut found = vec![];
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e.collect::<Vec<_>>(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        };
        for e in entries {
            let e = e?;
            let name = e.file_name().to_string_lossy().to_string();
            let Some(d) = parse_hex_digest(&name) else {
                // interrupted writes and uploads
                if name.ends_with(".tmp") {
                    let _ = std::fs::remove_file(e.path());
                }
                continue;
            };
            let m = e.metadata()?;
            found.push((m.modified().ok(), d, m.len()));
        }
        sweep_partials(&dir.join(PARTIAL_DIR));
        found.sort_by_key(|(t, _, _)| *t);
        let mut index = Index::default();
        for (_, d, len) in found {
            index.clock += 1;
            index.bytes += len;
            index.objects.insert(
                d,
                // protected as if just used: a restart never hands strangers' uploads what
                // tasks in flight may still need
                Meta {
                    len,
                    used: index.clock,
                    at: Instant::now(),
                    checked: false,
                },
            );
        }
        Ok(ContentStore {
            dir: Some(dir.to_path_buf()),
            budget,
            max_object: MAX_OBJECT.min(budget),
            protect: Duration::from_secs(600),
            index: Mutex::new(index),
            writing: Mutex::new(()),
            checking: Default::default(),
            pinned: Default::default(),
        })
    }

    fn path(&self, d: &Digest) -> Option<PathBuf> {
        self.dir.as_ref().map(|p| p.join(hex(d)))
    }

    /// Where a download of `d` from `source` keeps its bytes until it is whole, so that it
    /// resumes after a dropped connection or a restart (a store on disk only). One file per
    /// object and source: a source resumes only its own bytes, never another's.
    pub fn partial_path(&self, d: &Digest, source: &str) -> Option<PathBuf> {
        let tag = hex(&hashv(&[source.as_bytes()]));
        self.dir.as_ref().map(|p| {
            p.join(PARTIAL_DIR)
                .join(format!("{}.{}", hex(d), &tag[..16]))
        })
    }

    /// [`ContentStore::partial_path`], after making room for it: stale and unknown files
    /// are deleted, and beyond [`PARTIAL_FILES`] the least recently written go (partial
    /// downloads are bounded by count, each by its object's bound, whoever starts them).
    pub fn partial_for(&self, d: &Digest, source: &str) -> Option<PathBuf> {
        let p = self.partial_path(d, source)?;
        let dir = p.parent()?;
        let mut kept = sweep_partials(dir);
        kept.retain(|(q, _)| *q != p);
        kept.sort_by_key(|(_, t)| *t);
        while kept.len() >= PARTIAL_FILES {
            let (old, _) = kept.remove(0);
            let _ = std::fs::remove_file(old);
        }
        Some(p)
    }

    /// Whether `d` is held.
    pub fn contains(&self, d: &Digest) -> bool {
        self.index
            .lock()
            .expect("content lock")
            .objects
            .contains_key(d)
    }

    /// The length of `d`, when held.
    pub fn len_of(&self, d: &Digest) -> Option<u64> {
        self.index
            .lock()
            .expect("content lock")
            .objects
            .get(d)
            .map(|m| m.len)
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.index.lock().expect("content lock").bytes
    }

    /// The object `d`, read whole and checked against its name (the keeper's own use: inputs
    /// it computes on). A file that is confirmed bad — shorter or longer than indexed, or not
    /// hashing to its name — is deleted; any other read error (out of descriptors, an
    /// interrupted call) is logged and leaves the object in place ([`ContentStore::read`]
    /// says which).
    pub fn get(&self, d: &Digest) -> Option<Arc<Vec<u8>>> {
        match self.read(d) {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(object = %hex(d), error = %e, "content file not readable now (kept)");
                None
            }
        }
    }

    /// Makes `keys` the objects that are never evicted (replacing the set before): the inputs
    /// of the tasks a provider holds or has in verification, which verifiers fetch from it
    /// (issue 29: a prefetch for the next task evicted by LRU the inputs of a task still being
    /// verified). A store whose pinned objects fill its budget refuses new objects
    /// ([`PutError::OverBudget`]) rather than evict them.
    pub fn pin(&self, keys: std::collections::HashSet<Digest>) {
        *self.pinned.lock().expect("pinned lock") = keys;
    }

    /// [`ContentStore::get`], telling a transient failure (`Err`: nothing deleted) from an
    /// object not held or confirmed bad and deleted (`Ok(None)`).
    pub fn read(&self, d: &Digest) -> std::io::Result<Option<Arc<Vec<u8>>>> {
        let len = {
            let mut ix = self.index.lock().expect("content lock");
            ix.clock += 1;
            let clock = ix.clock;
            let Some(meta) = ix.objects.get_mut(d) else {
                return Ok(None);
            };
            meta.used = clock;
            meta.at = Instant::now();
            let len = meta.len;
            if let Some(b) = ix.memory.get(d) {
                return Ok(Some(b.clone()));
            }
            len
        };
        let Some(p) = self.path(d) else {
            return Ok(None);
        };
        let b = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(object = %hex(d), "content file gone: forgotten");
                self.forget(d);
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if b.len() as u64 != len || hashv(&[&b]) != *d {
            tracing::warn!(object = %hex(d), len = b.len(), indexed = len, "content file truncated or corrupt: deleted");
            self.forget(d);
            return Ok(None);
        }
        self.mark_checked(d);
        Ok(Some(Arc::new(b)))
    }

    fn mark_checked(&self, d: &Digest) {
        if let Some(m) = self.index.lock().expect("content lock").objects.get_mut(d) {
            m.checked = true;
        }
    }

    /// The object `d` opened for serving, without reading it: its bytes in memory, or its
    /// file with its length checked against the index (a file of another length is
    /// truncated or replaced: deleted). An object found on disk at start and not yet checked
    /// is hashed once first, streaming ([`Opened::Checking`] while another request does
    /// that); after that its file is trusted.
    pub fn open_checked(&self, d: &Digest) -> std::io::Result<Opened> {
        let checked = {
            let mut ix = self.index.lock().expect("content lock");
            ix.clock += 1;
            let clock = ix.clock;
            let Some(meta) = ix.objects.get_mut(d) else {
                return Ok(Opened::Missing);
            };
            meta.used = clock;
            meta.at = Instant::now();
            let checked = meta.checked;
            if let Some(b) = ix.memory.get(d) {
                return Ok(Opened::Memory(b.clone()));
            }
            checked
        };
        let Some(p) = self.path(d) else {
            return Ok(Opened::Missing);
        };
        if !checked {
            if !self.checking.lock().expect("checking lock").insert(*d) {
                return Ok(Opened::Checking);
            }
            let verdict = self.check_file(d, &p);
            self.checking.lock().expect("checking lock").remove(d);
            match verdict? {
                true => self.mark_checked(d),
                false => return Ok(Opened::Missing),
            }
        }
        let file = match std::fs::File::open(&p) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.forget(d);
                return Ok(Opened::Missing);
            }
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        match self.len_of(d) {
            Some(l) if l == len => Ok(Opened::File(file, len)),
            Some(l) => {
                tracing::warn!(object = %hex(d), len, indexed = l, "content file truncated or replaced: deleted");
                self.forget(d);
                Ok(Opened::Missing)
            }
            None => Ok(Opened::Missing),
        }
    }

    /// Hashes the file of `d` streaming (1 MiB at a time): `Ok(false)` when it is confirmed
    /// bad (deleted), an error when it could not be read now (kept).
    fn check_file(&self, d: &Digest, p: &Path) -> std::io::Result<bool> {
        use std::io::Read;
        let mut f = match std::fs::File::open(p) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.forget(d);
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let mut h = solana_sha256_hasher::Hasher::default();
        let mut buf = vec![0u8; 1 << 20];
        let mut len = 0u64;
        loop {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    h.hash(&buf[..n]);
                    len += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let ok = h.result().to_bytes() == *d && Some(len) == self.len_of(d);
        if !ok {
            tracing::warn!(object = %hex(d), len, "content file truncated or corrupt: deleted");
            self.forget(d);
        }
        Ok(ok)
    }

    /// Starts an upload of the object named `d`: its bytes go to a temporary file as they
    /// come (a store on disk; a store in memory holds them), hashed on the way, and become
    /// the object only if they hash to `d` ([`Upload::finish`]).
    pub fn upload(&self, d: &Digest) -> std::io::Result<Upload> {
        let sink = match &self.dir {
            None => UploadSink::Memory(vec![]),
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                static UPLOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = UPLOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let tmp = dir.join(format!("{}.{}.{n}.tmp", hex(d), std::process::id()));
                let file = std::fs::File::create(&tmp)?;
                UploadSink::File(file, Some(tmp))
            }
        };
        Ok(Upload {
            name: *d,
            hasher: solana_sha256_hasher::Hasher::default(),
            len: 0,
            max: self.max_object,
            sink,
        })
    }

    fn forget(&self, d: &Digest) {
        let mut ix = self.index.lock().expect("content lock");
        if let Some(m) = ix.objects.remove(d) {
            ix.bytes -= m.len;
        }
        ix.memory.remove(d);
        if let Some(p) = self.path(d) {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Stores `bytes` under `d` after checking the hash; evicts the least recently used to make
    /// room (only objects idle for [`ContentStore::protect`] when `from_network`).
    pub fn put(&self, d: &Digest, bytes: &[u8], from_network: bool) -> Result<(), PutError> {
        if bytes.len() as u64 > self.max_object {
            return Err(PutError::TooLarge(self.max_object));
        }
        if hashv(&[bytes]) != *d {
            return Err(PutError::HashMismatch);
        }
        self.put_checked(d, bytes, from_network)
    }

    /// [`ContentStore::put`] of bytes the caller has just checked against `d` (a fetch hashes
    /// what it downloads once).
    pub(crate) fn put_checked(
        &self,
        d: &Digest,
        bytes: &[u8],
        from_network: bool,
    ) -> Result<(), PutError> {
        let len = bytes.len() as u64;
        self.insert(d, len, from_network, |p| match p {
            Some(p) => {
                write_durably(p, bytes).map_err(|e| PutError::Io(format!("{e:#}")))?;
                Ok(None)
            }
            None => Ok(Some(bytes.to_vec())),
        })
    }

    /// Makes room for `len` bytes (evicting the least recently used; only objects idle for
    /// [`ContentStore::protect`] when `from_network`), has `write` put the object at its path
    /// (`None` in memory: it returns the bytes to hold), then indexes it as checked.
    fn insert(
        &self,
        d: &Digest,
        len: u64,
        from_network: bool,
        write: impl FnOnce(Option<&Path>) -> Result<Option<Vec<u8>>, PutError>,
    ) -> Result<(), PutError> {
        if len > self.max_object {
            return Err(PutError::TooLarge(self.max_object));
        }
        let _one = self.writing.lock().expect("writing lock");
        if self.contains(d) {
            return Ok(());
        }
        // make room first (under the lock), then write
        let evicted = {
            let mut ix = self.index.lock().expect("content lock");
            let pinned = self.pinned.lock().expect("pinned lock");
            let mut victims: Vec<(u64, Digest, u64, Instant)> = ix
                .objects
                .iter()
                .filter(|(k, _)| !pinned.contains(*k))
                .map(|(k, m)| (m.used, *k, m.len, m.at))
                .collect();
            drop(pinned);
            victims.sort_unstable_by_key(|v| v.0);
            let mut freed = 0u64;
            let mut out = vec![];
            let mut it = victims.into_iter();
            while ix.bytes - freed + len > self.budget {
                match it.next() {
                    Some((_, k, l, at)) if !from_network || at.elapsed() >= self.protect => {
                        freed += l;
                        out.push(k);
                    }
                    Some(_) => continue,
                    None => return Err(PutError::OverBudget),
                }
            }
            for k in &out {
                if let Some(m) = ix.objects.remove(k) {
                    ix.bytes -= m.len;
                }
                ix.memory.remove(k);
            }
            out
        };
        for k in &evicted {
            if let Some(p) = self.path(k) {
                let _ = std::fs::remove_file(p);
            }
        }
        let path = self.path(d);
        let held = write(path.as_deref())?;
        let mut ix = self.index.lock().expect("content lock");
        ix.clock += 1;
        let used = ix.clock;
        ix.bytes += len;
        ix.objects.insert(
            *d,
            Meta {
                len,
                used,
                at: Instant::now(),
                checked: true,
            },
        );
        if self.dir.is_none() {
            if let Some(b) = held {
                ix.memory.insert(*d, Arc::new(b));
            }
        }
        Ok(())
    }
}

/// An object being served: its bytes in memory, or its open file and length (read only as
/// far as the range sent).
pub enum Opened {
    /// Not held (or found bad and deleted).
    Missing,
    /// Being hashed for its first serve by another request: ask again shortly.
    Checking,
    /// Held in memory.
    Memory(Arc<Vec<u8>>),
    /// On disk, checked: the file and its length.
    File(std::fs::File, u64),
}

enum UploadSink {
    Memory(Vec<u8>),
    /// The temporary file and its path (taken once renamed or deleted).
    File(std::fs::File, Option<PathBuf>),
}

/// An upload in progress ([`ContentStore::upload`]): bytes are hashed and written as they
/// come; dropped unfinished, its temporary file is deleted.
pub struct Upload {
    name: Digest,
    hasher: solana_sha256_hasher::Hasher,
    len: u64,
    max: u64,
    sink: UploadSink,
}

impl Upload {
    /// Bytes received so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was received yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `bytes`: refused past the store's object size cap (nothing more is written).
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), PutError> {
        use std::io::Write;
        if self.len + bytes.len() as u64 > self.max {
            return Err(PutError::TooLarge(self.max));
        }
        self.hasher.hash(bytes);
        self.len += bytes.len() as u64;
        match &mut self.sink {
            UploadSink::Memory(v) => v.extend_from_slice(bytes),
            UploadSink::File(f, _) => f
                .write_all(bytes)
                .map_err(|e| PutError::Io(format!("writing an upload: {e}")))?,
        }
        Ok(())
    }

    /// Stores what was received under its name if it hashes to it (synced and renamed into
    /// place, within the budget as [`ContentStore::put`]); else the temporary file is deleted
    /// and the answer is [`PutError::HashMismatch`].
    pub fn finish(mut self, store: &ContentStore, from_network: bool) -> Result<(), PutError> {
        let hasher = std::mem::take(&mut self.hasher);
        if hasher.result().to_bytes() != self.name {
            return Err(PutError::HashMismatch);
        }
        let (name, len) = (self.name, self.len);
        match &mut self.sink {
            UploadSink::Memory(v) => {
                let bytes = std::mem::take(v);
                store.insert(&name, len, from_network, |_| Ok(Some(bytes)))
            }
            UploadSink::File(f, tmp) => {
                f.sync_all()
                    .map_err(|e| PutError::Io(format!("syncing an upload: {e}")))?;
                let from = tmp.clone().expect("an upload is finished once");
                store.insert(&name, len, from_network, |to| {
                    let to = to.expect("a store with a file sink is on disk");
                    std::fs::rename(&from, to)
                        .map_err(|e| PutError::Io(format!("renaming an upload: {e}")))?;
                    *tmp = None;
                    if let Some(dir) = to.parent() {
                        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
                    }
                    Ok(None)
                })
            }
        }
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if let UploadSink::File(_, Some(tmp)) = &self.sink {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// The folder (inside the store's) of downloads not yet whole.
const PARTIAL_DIR: &str = "partial";

/// A partial download untouched this long is given up.
const PARTIAL_TTL: Duration = Duration::from_secs(24 * 3600);

/// Partial downloads kept at most (each at most its object's bound).
pub const PARTIAL_FILES: usize = 8;

/// Deletes partial downloads that cannot be resumed — names other than `<hash>.<source tag>`,
/// files untouched for [`PARTIAL_TTL`] — and lists the others with their modification times.
fn sweep_partials(dir: &Path) -> Vec<(PathBuf, std::time::SystemTime)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut kept = vec![];
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let modified = e.metadata().and_then(|m| m.modified()).ok();
        let stale = modified.is_none_or(|t| t.elapsed().unwrap_or_default() >= PARTIAL_TTL);
        let named = name.split_once('.').is_some_and(|(h, tag)| {
            parse_hex_digest(h).is_some()
                && tag.len() == 16
                && tag.bytes().all(|b| b.is_ascii_hexdigit())
        });
        match modified {
            Some(t) if named && !stale => kept.push((e.path(), t)),
            _ => {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    kept
}

fn write_durably(p: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = p.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, p)?;
    Ok(())
}

/// Reads `path` as an object to upload: its bytes and SHA-256 (refused past `max` bytes).
pub fn read_object(path: &Path, max: u64) -> Result<(Digest, Vec<u8>)> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    ensure!(
        len <= max,
        "{} is {len} bytes, more than {max}",
        path.display()
    );
    let b = std::fs::read(path)?;
    if b.is_empty() {
        bail!("{} is empty", path.display());
    }
    Ok((hashv(&[&b]), b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(n: usize, v: u8) -> (Digest, Vec<u8>) {
        let b = vec![v; n];
        (hashv(&[&b]), b)
    }

    #[test]
    fn pinned_objects_are_never_evicted_for_a_newer_one() {
        for dir in [None, Some(tempfile::tempdir().unwrap())] {
            let s = match &dir {
                None => ContentStore::memory(200),
                Some(d) => ContentStore::open(d.path(), 200).unwrap(),
            };
            let (a, ab) = obj(100, 11);
            let (b, bb) = obj(100, 12);
            s.put(&a, &ab, false).unwrap();
            s.put(&b, &bb, false).unwrap();
            // a (the inputs of a task in verification) is the least recently used, but pinned
            s.pin([a].into());
            let (c, cb) = obj(100, 13);
            s.put(&c, &cb, false).unwrap();
            assert!(s.contains(&a) && !s.contains(&b) && s.contains(&c));
            // with every object pinned, a new one is refused rather than evict them
            s.pin([a, c].into());
            let (d, db) = obj(100, 14);
            assert_eq!(s.put(&d, &db, false), Err(PutError::OverBudget));
            // unpinned, the least recently used goes as before
            s.pin(Default::default());
            s.put(&d, &db, false).unwrap();
            assert!(!s.contains(&a) && s.contains(&c) && s.contains(&d));
        }
    }

    #[test]
    fn checks_names_evicts_lru_and_protects_from_strangers() {
        for dir in [None, Some(tempfile::tempdir().unwrap())] {
            let s = match &dir {
                None => ContentStore::memory(300),
                Some(d) => ContentStore::open(d.path(), 300).unwrap(),
            };
            let (a, ab) = obj(100, 1);
            let (b, bb) = obj(100, 2);
            let (c, cb) = obj(100, 3);
            assert_eq!(s.put(&a, &bb, false), Err(PutError::HashMismatch));
            s.put(&a, &ab, false).unwrap();
            s.put(&b, &bb, false).unwrap();
            s.put(&c, &cb, false).unwrap();
            assert_eq!(s.get(&a).unwrap().as_slice(), &ab[..]); // a is now the most recent
                                                                // from the network: b, c and a are all in use, nothing may go
            let (d, db) = obj(100, 4);
            assert_eq!(s.put(&d, &db, true), Err(PutError::OverBudget));
            // the keeper's own fetch evicts the least recently used (b)
            s.put(&d, &db, false).unwrap();
            assert!(!s.contains(&b) && s.contains(&a) && s.contains(&c) && s.contains(&d));
            assert_eq!(s.bytes(), 300);
            let (e, eb) = obj(301, 5);
            assert_eq!(s.put(&e, &eb, false), Err(PutError::TooLarge(300)));
            if let Some(dir) = &dir {
                // a restart indexes what is there; a corrupted file is never served
                drop(s);
                let s = ContentStore::open(dir.path(), 300).unwrap();
                assert!(s.contains(&a) && s.contains(&d));
                std::fs::write(dir.path().join(hex(&a)), b"tampered").unwrap();
                assert!(s.get(&a).is_none() && !s.contains(&a));
                assert_eq!(s.get(&d).unwrap().as_slice(), &db[..]);
            }
        }
    }
}
