//! Availability in the test world (PROTOCOL §8.11): one method per instruction, and
//! [`World::publish`], which plays a provider's whole answer from a committed result.

use anchor_lang::prelude::Pubkey;
use compute_market::{client, pda, state::Availability};
use compute_market_protocol::{
    availability::chunks_per_tile,
    merkle::{chunk_proof, slot_len, CHUNK_LEN},
};

use crate::{disputes::Committed, Actor, TxRecord, World};

/// Bytes one `publish_write` carries in these tests: half a chunk, so a write with its
/// accounts fits a transaction packet.
pub const PUBLISH_LEN: usize = 512;

impl World {
    /// The address of availability account `nonce` of `task`.
    pub fn availability_key(&self, task: &Pubkey, nonce: u16) -> Pubkey {
        pda::availability(task, self.posted[task], nonce)
    }

    /// Availability account `nonce` of `task` and its whole data, if it exists.
    pub fn availability(&self, task: &Pubkey, nonce: u16) -> Option<(Availability, Vec<u8>)> {
        let a = self
            .c
            .svm
            .get_account(&self.availability_key(task, nonce))
            .filter(|a| a.lamports > 0)?;
        Some((Availability::from_account_data(&a.data)?, a.data))
    }

    /// `challenge_availability` by `who` of `tiles`, bond from and payout to its wallet.
    /// Returns the account's number.
    pub fn challenge(&mut self, who: &Actor, task: Pubkey, tiles: &[u32]) -> Result<u16, TxRecord> {
        let nonce = self.task(&task).availability_nonce;
        let ix = client::challenge_availability(
            task,
            self.posted[&task],
            nonce,
            who.key(),
            who.wallet,
            who.wallet,
            tiles.to_vec(),
        );
        let job =
            compute_market_protocol::job::JobSpec::decode(&self.task(&task).job).expect("job");
        let av = self.availability_key(&task, nonce);
        let ixs = client::opened_and_grown(ix, av, who.key(), &job, tiles.len());
        let kp = who.kp.insecure_clone();
        self.send_all("challenge_availability", &kp, &[], &ixs)?;
        Ok(nonce)
    }

    /// `contest_withheld` by the provider `who`. Returns the account's number.
    pub fn contest(&mut self, who: &Actor, task: Pubkey) -> Result<u16, TxRecord> {
        let t = self.task(&task);
        let nonce = t.availability_nonce;
        let job = compute_market_protocol::job::JobSpec::decode(&t.job).expect("job");
        let tiles = compute_market_protocol::availability::contest_tiles(
            &job,
            t.dispute_window,
            &t.seed,
            &task.to_bytes(),
        );
        let av = self.availability_key(&task, nonce);
        let ixs = client::opened_and_grown(
            client::contest_withheld(task, self.posted[&task], nonce, who.key()),
            av,
            who.key(),
            &job,
            tiles.len(),
        );
        let kp = who.kp.insecure_clone();
        self.send_all("contest_withheld", &kp, &[], &ixs)?;
        Ok(nonce)
    }

    /// `publish_write` of `data` at `offset` by `who`.
    pub fn publish_write(
        &mut self,
        who: &Actor,
        task: Pubkey,
        nonce: u16,
        offset: u32,
        data: Vec<u8>,
    ) -> Result<TxRecord, TxRecord> {
        let av = self.availability_key(&task, nonce);
        self.send_as(
            "publish_write",
            who,
            client::publish_write(task, av, who.key(), offset, data),
        )
    }

    /// `publish_prove` of chunk `chunk` of named tile `i` by `who`, its siblings from `result`.
    pub fn publish_prove(
        &mut self,
        who: &Actor,
        task: Pubkey,
        nonce: u16,
        result: &Committed,
        i: u8,
        chunk: u8,
    ) -> Result<TxRecord, TxRecord> {
        let (a, _) = self
            .availability(&task, nonce)
            .expect("availability account");
        let tile = a.tiles[i as usize];
        let proof = result.tile_proof(tile);
        let (_, siblings) = chunk_proof(
            tile,
            result.job.tile_count(),
            &result.tiles[tile as usize],
            &proof,
            chunk as usize * CHUNK_LEN,
        );
        let av = self.availability_key(&task, nonce);
        self.send_as(
            "publish_prove",
            who,
            client::publish_prove(task, av, who.key(), i, chunk, siblings),
        )
    }

    /// The provider `who` answers account `nonce` from `result`: every named tile's bytes
    /// (padding is already zero), [`PUBLISH_LEN`] a write, then every chunk proven. Returns the
    /// transactions sent.
    pub fn publish(
        &mut self,
        who: &Actor,
        task: Pubkey,
        nonce: u16,
        result: &Committed,
    ) -> Result<usize, TxRecord> {
        let (a, _) = self
            .availability(&task, nonce)
            .expect("availability account");
        let slot = slot_len(result.job.tile_len());
        let per = chunks_per_tile(&result.job) as u8;
        let mut sent = 0;
        for (i, &tile) in a.named().iter().enumerate() {
            let bytes = &result.tiles[tile as usize];
            for (j, part) in bytes.chunks(PUBLISH_LEN).enumerate() {
                let off = (i * slot + j * PUBLISH_LEN) as u32;
                self.publish_write(who, task, nonce, off, part.to_vec())?;
                sent += 1;
            }
            for chunk in 0..per {
                self.publish_prove(who, task, nonce, result, i as u8, chunk)?;
                sent += 1;
            }
        }
        Ok(sent)
    }

    /// `availability_timeout` of account `nonce`, by the cranker, its bond to the opener's
    /// wallet.
    pub fn availability_timeout(
        &mut self,
        task: Pubkey,
        nonce: u16,
        opener: &Actor,
    ) -> Result<TxRecord, TxRecord> {
        let av = self.availability_key(&task, nonce);
        let payout = self
            .availability(&task, nonce)
            .map_or(opener.wallet, |(a, _)| a.payout);
        let provider = self.task(&task).provider;
        self.crank(
            "availability_timeout",
            client::availability_timeout(task, provider, av, payout, opener.key(), None),
        )
    }

    /// `close_availability` of account `nonce` by its opener `who`.
    pub fn close_availability(
        &mut self,
        who: &Actor,
        task: Pubkey,
        nonce: u16,
    ) -> Result<TxRecord, TxRecord> {
        let av = self.availability_key(&task, nonce);
        self.send_as(
            "close_availability",
            who,
            client::close_availability(av, who.key()),
        )
    }
}
