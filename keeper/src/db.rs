//! The keeper's crash-safe database (redb, one file): what must survive a `kill -9`. It owns
//! its record types and imports nothing else of the keeper.
//!
//! * sealed votes (vote, evidence, salt) by (task, round): written **before** the commit
//!   transaction is sent, so a restarted verifier can always reveal what it committed.
//! * pointers by (task, round): the wrong tile and its proof behind an INVALID vote, written
//!   before its seal, so a verifier whose vote lost can dispute after a restart (PROTOCOL §8).
//! * disputes opened, by task: written once an open lands, so a dispute that lost (its account
//!   closed) is never opened, and bonded, again.
//!
//! Served results live in the result store's directory (`results::store`), written before
//! the submission; everything else is derived from chain state on every step.

use std::path::Path;

use anchor_lang::prelude::Pubkey;
use anyhow::{Context, Result};
use redb::{Database, TableDefinition};

const SEALED: TableDefinition<&[u8], &[u8]> = TableDefinition::new("sealed_votes");
const POINTERS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("pointers");
const DISPUTED: TableDefinition<&[u8], u8> = TableDefinition::new("disputes_opened");
/// Dispute lanes funded and not yet swept back: the lane's key → the task and the lane.
const LANES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("dispute_lanes");

/// A sealed vote kept until it is revealed: what the commitment opens to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// The vote.
    pub vote: u8,
    /// Evidence hash.
    pub evidence: [u8; 32],
    /// Salt.
    pub salt: [u8; 32],
    /// The round's seed the vote was checked under: a task re-posted at the same address (the
    /// client reuses its id) has another, so its vote is never reused for it (zero in records
    /// written before it was kept).
    pub seed: [u8; 32],
}

/// The keeper's database (one redb file).
pub struct Db {
    db: Database,
}

fn sealed_key(task: &Pubkey, round: u8) -> [u8; 33] {
    let mut k = [0u8; 33];
    k[..32].copy_from_slice(task.as_ref());
    k[32] = round;
    k
}

impl Db {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let db = Database::create(path)
            .with_context(|| format!("opening the keeper store {}", path.display()))?;
        let w = db.begin_write()?;
        w.open_table(SEALED)?;
        w.open_table(POINTERS)?;
        w.open_table(DISPUTED)?;
        w.commit()?;
        Ok(Db { db })
    }

    /// Persists a sealed vote (durably, before returning).
    pub fn put_sealed(&self, task: &Pubkey, round: u8, s: &Sealed) -> Result<()> {
        let mut v = Vec::with_capacity(97);
        v.push(s.vote);
        v.extend_from_slice(&s.evidence);
        v.extend_from_slice(&s.salt);
        v.extend_from_slice(&s.seed);
        let w = self.db.begin_write()?;
        w.open_table(SEALED)?
            .insert(&sealed_key(task, round)[..], &v[..])?;
        w.commit()?;
        Ok(())
    }

    /// The sealed vote for (task, round), if any.
    pub fn sealed(&self, task: &Pubkey, round: u8) -> Result<Option<Sealed>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(SEALED)?;
        let Some(v) = t.get(&sealed_key(task, round)[..])? else {
            return Ok(None);
        };
        let v = v.value();
        anyhow::ensure!(
            v.len() == 65 || v.len() == 97,
            "corrupt sealed vote for task {task} round {round}"
        );
        Ok(Some(Sealed {
            vote: v[0],
            evidence: v[1..33].try_into()?,
            salt: v[33..65].try_into()?,
            seed: v.get(65..97).map_or(Ok([0; 32]), |s| s.try_into())?,
        }))
    }

    /// Persists the pointer behind an INVALID vote of (task, round) (durably, before
    /// returning): [`crate::dispute::Pointer::encode`]'s bytes.
    pub fn put_pointer(&self, task: &Pubkey, round: u8, bytes: &[u8]) -> Result<()> {
        let w = self.db.begin_write()?;
        w.open_table(POINTERS)?
            .insert(&sealed_key(task, round)[..], bytes)?;
        w.commit()?;
        Ok(())
    }

    /// The pointer kept for (task, round), if any.
    pub fn pointer(&self, task: &Pubkey, round: u8) -> Result<Option<Vec<u8>>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(POINTERS)?;
        Ok(t.get(&sealed_key(task, round)[..])?
            .map(|v| v.value().to_vec()))
    }

    /// Records that this keeper's dispute of `task` (of `kind`) was opened.
    pub fn put_disputed(&self, task: &Pubkey, kind: u8) -> Result<()> {
        let w = self.db.begin_write()?;
        w.open_table(DISPUTED)?.insert(task.as_ref(), kind)?;
        w.commit()?;
        Ok(())
    }

    /// The kind of this keeper's dispute of `task`, if it opened one.
    pub fn disputed(&self, task: &Pubkey) -> Result<Option<u8>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(DISPUTED)?;
        Ok(t.get(task.as_ref())?.map(|v| v.value()))
    }

    /// Records that dispute lane `lane` (number `index` of `task`) was funded (durably, before
    /// the funding is sent), so that it is swept back even after a restart.
    pub fn put_lane(&self, lane: &Pubkey, task: &Pubkey, index: u32) -> Result<()> {
        let mut v = task.to_bytes().to_vec();
        v.extend_from_slice(&index.to_le_bytes());
        let w = self.db.begin_write()?;
        w.open_table(LANES)?.insert(lane.as_ref(), &v[..])?;
        w.commit()?;
        Ok(())
    }

    /// Every lane funded and not yet swept: (its task, its number).
    pub fn lanes(&self) -> Result<Vec<(Pubkey, u32)>> {
        use redb::ReadableTable;
        let r = self.db.begin_read()?;
        let t = match r.open_table(LANES) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(vec![]),
            Err(e) => return Err(e.into()),
        };
        let mut out = vec![];
        for e in t.iter()? {
            let (_, v) = e?;
            let v = v.value();
            if v.len() == 36 {
                let task = Pubkey::new_from_array(v[..32].try_into().expect("32 bytes"));
                out.push((
                    task,
                    u32::from_le_bytes(v[32..].try_into().expect("4 bytes")),
                ));
            }
        }
        Ok(out)
    }

    /// Forgets a lane swept back.
    pub fn remove_lane(&self, lane: &Pubkey) -> Result<()> {
        let w = self.db.begin_write()?;
        w.open_table(LANES)?.remove(lane.as_ref())?;
        w.commit()?;
        Ok(())
    }

    /// Forgets sealed votes, pointers and disputes of `task` (after it is closed).
    pub fn forget_task(&self, task: &Pubkey) -> Result<()> {
        let w = self.db.begin_write()?;
        {
            let mut t = w.open_table(SEALED)?;
            let mut p = w.open_table(POINTERS)?;
            for round in 0..2u8 {
                t.remove(&sealed_key(task, round)[..])?;
                p.remove(&sealed_key(task, round)[..])?;
            }
            // a watcher's (`roles::watcher::WATCH_SLOT`)
            p.remove(&sealed_key(task, 0xFF)[..])?;
            w.open_table(DISPUTED)?.remove(task.as_ref())?;
        }
        w.commit()?;
        Ok(())
    }
}
