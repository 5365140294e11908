//! What a verifier keeps of the results it fetched and checked, to serve them again (PROTOCOL
//! §8.12, Sources of a result): the whole result of a kind checked whole (`MatMulModP`, whose
//! verifiers hash all of C), the sampled tiles with their proofs otherwise. Each is kept until
//! a time (the end of its task's dispute window, and at least [`Reserve::retention`] after it
//! was checked), within a byte bound ([`Reserve::max_bytes`]): what does not fit evicts the
//! oldest kept first, and what is larger than the bound is not kept at all.
//!
//! Nothing is kept unless it proves against the root it is kept under: a whole result must
//! hash to it, every sampled tile must carry a valid proof to it.
//!
//! On disk (a keeper with a results directory) a whole result is a `<root>.res` file of the
//! served results' format ([`super::store`]), the tiles of a sampled one a `<root>.tiles` file
//! (`b"CMRT"`, version 1, three zero bytes, the root, the 64-byte job spec, then the tiles as
//! the `/tiles` answer encodes them), and beside each a `<root>.keep` file (until when, and
//! since when, as u64 LE seconds and nanoseconds since the Unix epoch), so a restarted keeper
//! serves what it kept and evicts it on time. In memory (the embedded cluster, tests) the same
//! rules hold.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{ensure, Context, Result};
use compute_market_protocol::{
    hash::Digest,
    job::{JobSpec, JOB_SPEC_LEN},
    merkle::{leaf_hash, verify_proof},
};

use super::{hex, store, wire};
use crate::verify::{commit, ProvenTile};

/// Default bound on what a keeper keeps of others' results, bytes.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;
/// Default bound in memory (no results directory: the embedded cluster, tests).
pub const MEMORY_MAX_BYTES: u64 = 256 << 20;
/// Default least time a checked result is kept (beyond it only while its dispute window runs).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(3600);

/// Least extension of a kept result's time that is written ([`Reserve::extend`]).
pub const EXTEND_STEP: Duration = Duration::from_secs(30);

const MAGIC: &[u8; 4] = b"CMRT";
const VERSION: u8 = 1;
const TILES_HEADER: usize = 8 + 32 + JOB_SPEC_LEN;

/// The sampled tiles of a result kept with their proofs.
#[derive(Clone, Debug)]
pub struct Sampled {
    /// The root every tile proves against.
    pub root: Digest,
    /// The job.
    pub job: JobSpec,
    /// The tiles, by index.
    pub tiles: BTreeMap<u32, ProvenTile>,
}

impl Sampled {
    /// Bytes it takes (as the `/tiles` answer encodes it).
    pub fn bytes(&self) -> u64 {
        self.tiles
            .values()
            .map(|t| 12 + t.tile.len() as u64 + 32 * t.proof.len() as u64)
            .sum()
    }

    /// Those of `indices` held, in the order asked.
    pub fn held(&self, indices: &[u32]) -> Vec<ProvenTile> {
        indices
            .iter()
            .filter_map(|i| self.tiles.get(i).cloned())
            .collect()
    }
}

/// Whether `t` is a tile of `job`'s result with a valid proof to `root`.
pub fn proves(job: &JobSpec, root: &Digest, t: &ProvenTile) -> bool {
    let count = job.tile_count();
    t.index < count
        && t.tile.len() == job.tile_len()
        && verify_proof(
            root,
            t.index,
            count,
            &leaf_hash(t.index, count, &t.tile),
            &t.proof,
        )
}

enum Held {
    Whole,
    Tiles(Arc<Sampled>),
}

struct Item {
    held: Held,
    bytes: u64,
    until: SystemTime,
    since: SystemTime,
}

/// What is kept, how much and the bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReserveStats {
    /// Results kept (whole or sampled).
    pub results: usize,
    /// Bytes they take.
    pub bytes: u64,
    /// The most they may take.
    pub max_bytes: u64,
}

/// Results of others kept to be served again, bounded in time and bytes.
pub struct Reserve {
    dir: Option<PathBuf>,
    /// The most bytes kept; the oldest kept is evicted first to make room.
    pub max_bytes: u64,
    /// The least time a result is kept after it was checked.
    pub retention: Duration,
    whole: store::Store,
    items: Mutex<HashMap<Digest, Item>>,
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn encode_tiles(s: &Sampled) -> Vec<u8> {
    let mut out = Vec::with_capacity(TILES_HEADER + s.bytes() as usize);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[VERSION, 0, 0, 0]);
    out.extend_from_slice(&s.root);
    out.extend_from_slice(&s.job.encode());
    for t in s.tiles.values() {
        wire::encode_one(&mut out, t);
    }
    out
}

/// Reads a `.tiles` file back; every tile must prove against its root.
fn decode_tiles(path: &Path) -> Result<Sampled> {
    let b = std::fs::read(path)?;
    ensure!(
        b.len() >= TILES_HEADER && &b[..4] == MAGIC && b[4] == VERSION,
        "not a version-{VERSION} tiles file"
    );
    let root: Digest = b[8..40].try_into()?;
    let job = JobSpec::decode(b[40..TILES_HEADER].try_into()?)
        .map_err(|e| anyhow::anyhow!("its job spec: {e}"))?;
    let tiles = wire::decode_proven(&job, job.tile_count() as usize, &b[TILES_HEADER..])
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    ensure!(
        tiles.iter().all(|t| proves(&job, &root, t)),
        "a tile does not prove against its root"
    );
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    ensure!(name == hex(&root), "its name is not its root");
    Ok(Sampled {
        root,
        job,
        tiles: tiles.into_iter().map(|t| (t.index, t)).collect(),
    })
}

impl Reserve {
    /// A reserve in memory within `max_bytes`.
    pub fn memory(max_bytes: u64, retention: Duration) -> Self {
        Reserve {
            dir: None,
            max_bytes,
            retention,
            whole: store::Store::memory(),
            items: Default::default(),
        }
    }

    /// A reserve kept in `dir` within `max_bytes` of disk. What the directory holds is served
    /// again at once until its time (a file without its time is kept for the retention from
    /// now); what is past its time, or past the bound (oldest first), is deleted; a file that
    /// cannot be read back is logged and skipped.
    pub fn open(dir: &Path, max_bytes: u64, retention: Duration) -> Result<Self> {
        let whole = store::Store::open(dir, u64::MAX)?;
        let now = SystemTime::now();
        let keep_of = |root: &Digest, file: &Path| -> (SystemTime, SystemTime) {
            let kept = std::fs::read(dir.join(format!("{}.keep", hex(root))))
                .ok()
                .filter(|b| b.len() == 16)
                .map(|b| {
                    let until = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
                    let since = u64::from_le_bytes(b[8..].try_into().expect("8 bytes"));
                    (
                        UNIX_EPOCH + Duration::from_secs(until),
                        UNIX_EPOCH + Duration::from_nanos(since),
                    )
                });
            kept.unwrap_or_else(|| {
                let since = std::fs::metadata(file)
                    .and_then(|m| m.modified())
                    .unwrap_or(now);
                (now + retention, since)
            })
        };
        let mut items = HashMap::new();
        for e in whole.all() {
            let path = e.path().map(Path::to_path_buf).unwrap_or_default();
            let (until, since) = keep_of(&e.root, &path);
            items.insert(
                e.root,
                Item {
                    held: Held::Whole,
                    bytes: e.bytes,
                    until,
                    since,
                },
            );
        }
        for f in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = f?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("tiles") {
                continue;
            }
            match decode_tiles(&path) {
                Ok(s) if !items.contains_key(&s.root) => {
                    let (until, since) = keep_of(&s.root, &path);
                    items.insert(
                        s.root,
                        Item {
                            bytes: s.bytes(),
                            held: Held::Tiles(Arc::new(s)),
                            until,
                            since,
                        },
                    );
                }
                Ok(_) => {
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %format!("{e:#}"), "cannot restore kept tiles; skipped")
                }
            }
        }
        let r = Reserve {
            dir: Some(dir.to_path_buf()),
            max_bytes,
            retention,
            whole,
            items: Mutex::new(items),
        };
        r.sweep(now);
        let mut items = r.items.lock().expect("reserve lock");
        r.make_room(&mut items, 0, None);
        drop(items);
        Ok(r)
    }

    /// When a result checked now is kept until: `window_ends` (the end of its task's dispute
    /// window), and at least [`Reserve::retention`] from now.
    pub fn until(&self, window_ends: SystemTime) -> SystemTime {
        window_ends.max(SystemTime::now() + self.retention)
    }

    fn keep_path(&self, root: &Digest) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{}.keep", hex(root))))
    }

    fn tiles_path(&self, root: &Digest) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{}.tiles", hex(root))))
    }

    fn write_keep(&self, root: &Digest, item: &Item) {
        if let Some(p) = self.keep_path(root) {
            let mut b = secs(item.until).to_le_bytes().to_vec();
            b.extend_from_slice(&nanos(item.since).to_le_bytes());
            if let Err(e) = write_atomic(&p, &b) {
                tracing::warn!(file = %p.display(), error = %format!("{e:#}"), "cannot write when a kept result expires: a restart keeps it for the retention");
            }
        }
    }

    /// Deletes what is kept under `root` (its files too).
    fn drop_item(&self, root: &Digest, item: &Item) {
        let r = match &item.held {
            Held::Whole => self.whole.remove(root),
            Held::Tiles(_) => match self.tiles_path(root) {
                Some(p) => std::fs::remove_file(&p)
                    .or_else(|e| {
                        if e.kind() == std::io::ErrorKind::NotFound {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })
                    .with_context(|| format!("removing {}", p.display())),
                None => Ok(()),
            },
        };
        if let Err(e) = r {
            tracing::warn!(root = %hex(root), error = %format!("{e:#}"), "cannot delete a kept result's file");
        }
        if let Some(p) = self.keep_path(root) {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Evicts the oldest kept (other than `except`) until `need` more bytes fit; whether they do.
    fn make_room(
        &self,
        items: &mut HashMap<Digest, Item>,
        need: u64,
        except: Option<&Digest>,
    ) -> bool {
        loop {
            let held: u64 = items
                .iter()
                .filter(|(r, _)| Some(*r) != except)
                .map(|(_, i)| i.bytes)
                .sum();
            if held.saturating_add(need) <= self.max_bytes {
                return true;
            }
            let oldest = items
                .iter()
                .filter(|(r, _)| Some(*r) != except)
                .min_by_key(|(r, i)| (i.since, **r))
                .map(|(r, _)| *r);
            let Some(root) = oldest else {
                return false;
            };
            let item = items.remove(&root).expect("present");
            tracing::info!(root = %hex(&root), bytes = item.bytes, "evicted a kept result: the reserve is full (--reserve-max-bytes)");
            self.drop_item(&root, &item);
        }
    }

    /// Deletes what is past its time at `now`; how many.
    pub fn sweep(&self, now: SystemTime) -> usize {
        let mut items = self.items.lock().expect("reserve lock");
        let due: Vec<Digest> = items
            .iter()
            .filter(|(_, i)| i.until <= now)
            .map(|(r, _)| *r)
            .collect();
        for r in &due {
            let item = items.remove(r).expect("present");
            tracing::info!(root = %hex(r), "a kept result's time is over: deleted");
            self.drop_item(r, &item);
        }
        due.len()
    }

    /// Keeps the whole result `tiles` of `job` (computed for `task`) under `root` until
    /// `until`, when it hashes to `root` and fits within the bound (evicting the oldest kept to
    /// make room). `Ok(false)`: larger than the bound, not kept. A result kept already is kept
    /// until the later of the two times.
    pub fn keep_whole(
        &self,
        task: [u8; 32],
        job: JobSpec,
        root: Digest,
        tiles: Vec<Vec<u8>>,
        until: SystemTime,
    ) -> Result<bool> {
        wire::check_all_shape(&job, &tiles).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut items = self.items.lock().expect("reserve lock");
        if let Some(i) = items.get_mut(&root) {
            if matches!(i.held, Held::Whole) {
                i.until = i.until.max(until);
                let i = &items[&root];
                self.write_keep(&root, i);
                return Ok(true);
            }
        }
        let bytes = match &self.dir {
            Some(_) => store::file_len(&job),
            None => wire::all_len(&job),
        };
        if bytes > self.max_bytes {
            return Ok(false);
        }
        let tree = commit(&tiles);
        ensure!(
            tree.root() == root,
            "the result does not hash to the root {}: not kept",
            hex(&root)
        );
        if !self.make_room(&mut items, bytes, Some(&root)) {
            return Ok(false);
        }
        // sampled tiles of the same root give way to the whole
        if let Some(old) = items.remove(&root) {
            self.drop_item(&root, &old);
        }
        self.whole.put(root, task, job, tiles, tree)?;
        let item = Item {
            held: Held::Whole,
            bytes,
            until,
            since: SystemTime::now(),
        };
        self.write_keep(&root, &item);
        items.insert(root, item);
        Ok(true)
    }

    /// Keeps `tiles` of `job`'s result under `root` with their proofs until `until`, added to
    /// those of it kept already; each must prove against `root` (else nothing is kept and the
    /// error names the tile). `Ok(false)`: they do not fit within the bound. A whole result
    /// kept already only has its time extended.
    pub fn keep_tiles(
        &self,
        job: JobSpec,
        root: Digest,
        tiles: &[ProvenTile],
        until: SystemTime,
    ) -> Result<bool> {
        if let Some(bad) = tiles.iter().find(|t| !proves(&job, &root, t)) {
            anyhow::bail!(
                "tile {} does not prove against the root {}: nothing kept",
                bad.index,
                hex(&root)
            );
        }
        let mut items = self.items.lock().expect("reserve lock");
        let mut s = match items.get_mut(&root) {
            Some(i) => match &i.held {
                Held::Whole => {
                    i.until = i.until.max(until);
                    let i = &items[&root];
                    self.write_keep(&root, i);
                    return Ok(true);
                }
                Held::Tiles(s) => (**s).clone(),
            },
            None => Sampled {
                root,
                job,
                tiles: BTreeMap::new(),
            },
        };
        let (since, until) = match items.get(&root) {
            Some(i) => (i.since, i.until.max(until)),
            None => (SystemTime::now(), until),
        };
        for t in tiles {
            s.tiles.insert(t.index, t.clone());
        }
        let bytes = s.bytes();
        if bytes > self.max_bytes || !self.make_room(&mut items, bytes, Some(&root)) {
            return Ok(false);
        }
        if let Some(p) = self.tiles_path(&root) {
            write_atomic(&p, &encode_tiles(&s))?;
        }
        let item = Item {
            held: Held::Tiles(Arc::new(s)),
            bytes,
            until,
            since,
        };
        self.write_keep(&root, &item);
        items.insert(root, item);
        Ok(true)
    }

    /// Keeps what is under `root` at least until `until` (its dispute window, learnt later);
    /// whether anything is kept under it. A time less than [`EXTEND_STEP`] past the one held
    /// changes nothing (a deadline in slots, seen again each pass, moves by the clock's drift).
    pub fn extend(&self, root: &Digest, until: SystemTime) -> bool {
        let mut items = self.items.lock().expect("reserve lock");
        let Some(i) = items.get_mut(root) else {
            return false;
        };
        if i.until + EXTEND_STEP <= until {
            i.until = until;
            let i = &items[root];
            self.write_keep(root, i);
        }
        true
    }

    fn live(&self, root: &Digest) -> Option<(bool, Option<Arc<Sampled>>)> {
        let items = self.items.lock().expect("reserve lock");
        let i = items.get(root).filter(|i| i.until > SystemTime::now())?;
        Some(match &i.held {
            Held::Whole => (true, None),
            Held::Tiles(s) => (false, Some(s.clone())),
        })
    }

    /// The whole result kept under `root`, while its time runs.
    pub fn whole(&self, root: &Digest) -> Option<Arc<store::Entry>> {
        match self.live(root)? {
            (true, _) => self.whole.get(root),
            _ => None,
        }
    }

    /// The sampled tiles kept under `root`, while their time runs.
    pub fn sampled(&self, root: &Digest) -> Option<Arc<Sampled>> {
        self.live(root)?.1
    }

    /// Until when `root` is kept (`None`: it is not).
    pub fn kept_until(&self, root: &Digest) -> Option<SystemTime> {
        self.items
            .lock()
            .expect("reserve lock")
            .get(root)
            .map(|i| i.until)
    }

    /// What is kept and the bound.
    pub fn stats(&self) -> ReserveStats {
        let items = self.items.lock().expect("reserve lock");
        ReserveStats {
            results: items.len(),
            bytes: items.values().map(|i| i.bytes).sum(),
            max_bytes: self.max_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use compute_market_protocol::job::JobSpec;

    fn job(id: u64) -> JobSpec {
        // a small MatMulModP: 2 × 2 tiles of 64 × 64 u32
        JobSpec::matmul(128, 64, 128, [id as u8; 32])
    }

    fn tiles_of(job: &JobSpec, salt: u8) -> Vec<Vec<u8>> {
        (0..job.tile_count())
            .map(|i| vec![salt.wrapping_add(i as u8); job.tile_len()])
            .collect()
    }

    fn root_of(tiles: &[Vec<u8>]) -> Digest {
        commit(tiles).root()
    }

    fn far() -> SystemTime {
        SystemTime::now() + Duration::from_secs(3600)
    }

    #[test]
    fn the_oldest_kept_is_evicted_first_and_the_bound_is_never_passed() {
        let dir = tempfile::tempdir().unwrap();
        let j = job(1);
        let one = store::file_len(&j);
        // room for two whole results, not three
        let r = Reserve::open(dir.path(), 2 * one + one / 2, DEFAULT_RETENTION).unwrap();
        let mut roots = vec![];
        for salt in 0..3u8 {
            let t = tiles_of(&j, salt * 10);
            let root = root_of(&t);
            assert!(r.keep_whole([salt; 32], j, root, t, far()).unwrap());
            roots.push(root);
            assert!(r.stats().bytes <= r.max_bytes, "{:?}", r.stats());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(r.whole(&roots[0]).is_none(), "the oldest was evicted");
        assert!(r.whole(&roots[1]).is_some() && r.whole(&roots[2]).is_some());
        assert_eq!(r.stats().results, 2);
        // its files are gone, the others' are there
        let files: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !files.iter().any(|f| f.starts_with(&hex(&roots[0]))),
            "{files:?}"
        );
        assert_eq!(files.iter().filter(|f| f.ends_with(".res")).count(), 2);
        let disk: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|f| f.ok())
            .filter(|f| f.path().extension().is_some_and(|e| e == "res"))
            .map(|f| f.metadata().unwrap().len())
            .sum();
        assert!(disk <= r.max_bytes, "{disk} bytes on disk");
        // larger than the whole bound: not kept, nothing evicted for it
        let small = Reserve::open(&dir.path().join("small"), one - 1, DEFAULT_RETENTION).unwrap();
        let t = tiles_of(&j, 99);
        assert!(!small.keep_whole([0; 32], j, root_of(&t), t, far()).unwrap());
        assert_eq!(small.stats().results, 0);
        // a restart with a lower bound evicts the oldest down to it, and serves the rest
        drop(r);
        let again = Reserve::open(dir.path(), one, DEFAULT_RETENTION).unwrap();
        assert!(again.whole(&roots[1]).is_none(), "the older of the two");
        let e = again.whole(&roots[2]).expect("the newest is served again");
        assert_eq!(e.tiles().unwrap(), tiles_of(&j, 20));
    }

    #[test]
    fn a_result_is_kept_until_its_time_also_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let j = job(2);
        let r = Reserve::open(dir.path(), u64::MAX, DEFAULT_RETENTION).unwrap();
        let (a, b) = (tiles_of(&j, 1), tiles_of(&j, 2));
        let (ra, rb) = (root_of(&a), root_of(&b));
        let soon = SystemTime::now() + Duration::from_secs(2);
        assert!(r.keep_whole([1; 32], j, ra, a, soon).unwrap());
        assert!(r.keep_whole([2; 32], j, rb, b, far()).unwrap());
        // the time is what it was kept for, and only ever extended
        assert!(r.extend(&ra, soon - Duration::from_secs(1)));
        assert_eq!(secs(r.kept_until(&ra).unwrap()), secs(soon));
        assert!(r.extend(&rb, far() + EXTEND_STEP));
        assert!(
            !r.extend(&[7; 32], soon + EXTEND_STEP),
            "nothing kept under that root"
        );
        drop(r);
        let r = Reserve::open(dir.path(), u64::MAX, DEFAULT_RETENTION).unwrap();
        assert!(r.whole(&ra).is_some(), "not yet past its time");
        assert_eq!(secs(r.kept_until(&ra).unwrap()), secs(soon));
        assert_eq!(r.sweep(soon + Duration::from_secs(1)), 1);
        assert!(r.whole(&ra).is_none() && r.whole(&rb).is_some());
        assert!(!dir.path().join(format!("{}.res", hex(&ra))).exists());
        assert!(!dir.path().join(format!("{}.keep", hex(&ra))).exists());
    }

    #[test]
    fn sampled_tiles_are_kept_with_their_proofs_and_a_wrong_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let j = job(3);
        let t = tiles_of(&j, 7);
        let tree = commit(&t);
        let root = tree.root();
        let proven = |i: u32| ProvenTile {
            index: i,
            tile: t[i as usize].clone(),
            proof: tree.proof(i).unwrap(),
        };
        let r = Reserve::open(dir.path(), u64::MAX, DEFAULT_RETENTION).unwrap();
        assert!(r.keep_tiles(j, root, &[proven(1)], far()).unwrap());
        assert!(r.keep_tiles(j, root, &[proven(3)], far()).unwrap());
        let mut wrong = proven(2);
        wrong.tile[0] ^= 1;
        let e = r
            .keep_tiles(j, root, &[proven(0), wrong], far())
            .unwrap_err();
        assert!(e.to_string().contains("tile 2 does not prove"), "{e}");
        let s = r.sampled(&root).unwrap();
        assert_eq!(s.tiles.keys().copied().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(
            s.held(&[3, 0, 1])
                .iter()
                .map(|t| t.index)
                .collect::<Vec<_>>(),
            vec![3, 1]
        );
        assert!(r.whole(&root).is_none(), "only some tiles");
        drop(r);
        let r = Reserve::open(dir.path(), u64::MAX, DEFAULT_RETENTION).unwrap();
        let s = r.sampled(&root).expect("restored");
        assert_eq!(s.tiles.len(), 2);
        assert!(s.tiles.values().all(|x| proves(&j, &root, x)));
        // the bound counts them: a reserve too small for two tiles keeps one
        let small = Reserve::memory(s.bytes() / 2 + 1, DEFAULT_RETENTION);
        assert!(small.keep_tiles(j, root, &[proven(1)], far()).unwrap());
        assert!(!small.keep_tiles(j, root, &[proven(3)], far()).unwrap());
        assert_eq!(small.sampled(&root).unwrap().tiles.len(), 1);
    }
}
