//! Disputes in the test world (PROTOCOL §8): a committed result the tests build element by
//! element, its chunk proofs, and one method per dispute instruction, plus [`World::argue`],
//! which plays a challenger's whole dispute to its end.

use anchor_lang::prelude::Pubkey;
use compute_market::{client, instructions::OpenDisputeArgs, pda, state::Dispute};
use compute_market_protocol::{
    dispute::{self, MAX_STEP_TERMS},
    feed::{self, Feed, STATE_LEN},
    hash::Digest,
    infer::Mlp,
    job::{InputMode, JobSpec},
    manifest::{Manifest, Part, Role},
    merkle::{chunk_proof, leaf_hash, root_of_tiles, MerkleTree, CHUNK_LEN},
    slices::build,
};

use crate::{Actor, TxRecord, World};

/// Bytes of proof one `dispute_write` carries: as many as fit a transaction packet (1 232
/// bytes) beside its signature, accounts and compute-budget instruction.
pub const WRITE_LEN: usize = 960;

/// A result as a provider committed it: its tiles (each element set by a rule the test
/// chooses: right, or wrong) and their tree.
pub struct Committed {
    /// The job.
    pub job: JobSpec,
    /// The tiles, each the job's tile length.
    pub tiles: Vec<Vec<u8>>,
    tree: MerkleTree,
}

impl Committed {
    /// Tiles whose element (t, e) holds the first bytes (the element's width) of `value(t, e)`.
    pub fn new(job: JobSpec, value: impl Fn(u32, u32) -> [u8; 32]) -> Self {
        let (t, per, w) = (
            job.tile_count(),
            dispute::elements_per_tile(&job),
            dispute::element_width(&job),
        );
        let tiles: Vec<Vec<u8>> = (0..t)
            .map(|tile| {
                let mut b = vec![0u8; job.tile_len()];
                for e in 0..per {
                    let o = e as usize * w;
                    b[o..o + w].copy_from_slice(&value(tile, e)[..w]);
                }
                b
            })
            .collect();
        let tree = MerkleTree::new(
            tiles
                .iter()
                .enumerate()
                .map(|(i, x)| leaf_hash(i as u32, t, x))
                .collect(),
        );
        assert_eq!(tree.root(), root_of_tiles(&tiles));
        Committed { job, tiles, tree }
    }

    /// The result root.
    pub fn root(&self) -> Digest {
        self.tree.root()
    }

    /// The committed string: each tile at its slot (PROTOCOL §5).
    pub fn string(&self) -> Vec<u8> {
        let slot = compute_market_protocol::merkle::slot_len(self.job.tile_len());
        let mut out = vec![0u8; slot * self.tiles.len()];
        for (i, t) in self.tiles.iter().enumerate() {
            out[i * slot..i * slot + t.len()].copy_from_slice(t);
        }
        out
    }

    /// The proof of tile `tile` (its siblings in the tile tree).
    pub fn tile_proof(&self, tile: u32) -> Vec<Digest> {
        self.tree.proof(tile).expect("tile")
    }

    /// The chunk holding (tile, element) and its siblings (PROTOCOL §8.4).
    pub fn element_proof(&self, tile: u32, element: u32) -> (Vec<u8>, Vec<Digest>) {
        let slot = compute_market_protocol::merkle::slot_len(self.job.tile_len());
        let byte = (dispute::element_offset(&self.job, tile, element) % slot as u64) as usize;
        chunk_proof(
            tile,
            self.job.tile_count(),
            &self.tiles[tile as usize],
            &self.tree.proof(tile).expect("tile"),
            byte,
        )
    }
}

/// A job's inputs as its client posted them (PROTOCOL §8.7): the version-2 manifest and the
/// slice strings of the two parts the program recomputes from (A and B, or model and batch).
/// The parts' own bytes are the slice strings here: the program sees only the manifest.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// The manifest's bytes (its SHA-256 is the job's input).
    pub manifest: Vec<u8>,
    /// The slice strings, in the program's order.
    pub slices: [Vec<u8>; 2],
    /// The committed string a `Generate` replay reads earlier tokens from (empty for other
    /// kinds): set once the result is known ([`Inputs::with_result`]).
    pub result: Vec<u8>,
}

impl Inputs {
    fn new(roles: [Role; 2], slices: [Vec<u8>; 2]) -> Self {
        let parts = roles
            .iter()
            .zip(&slices)
            .map(|(r, s)| Part::new(*r, s).with_slices(build::slices_of(s)))
            .collect();
        Inputs {
            manifest: Manifest::new(parts).encode(),
            slices,
            result: vec![],
        }
    }

    /// These inputs with the committed string `result` (a `Generate` replay's earlier tokens).
    pub fn with_result(&self, result: &Committed) -> Inputs {
        Inputs {
            result: result.string(),
            ..self.clone()
        }
    }

    /// A `Generate` job of `model` (its end-of-turn token `eos`) on `prompts` (token ids, at
    /// most `limit` each), completions of up to `g` tokens picked by `sampling`, `r` a tile.
    pub fn generate(
        model: &compute_market_protocol::decoder::Decoder,
        eos: u32,
        prompts: &[Vec<u32>],
        (limit, g): (u32, u32),
        sampling: &compute_market_protocol::decoder::Sampling,
        r: u8,
    ) -> (JobSpec, Inputs) {
        use compute_market_protocol::slices::decoder::build as db;
        let i = Inputs::new(
            [Role::Model, Role::Prompts],
            [db::model(model, eos), db::prompts(prompts, limit, sampling)],
        );
        let shape = db::shape(model, eos);
        let job = JobSpec {
            slices_len: i.slices[0].len() as u64,
            ..JobSpec::generate(
                prompts.len() as u32,
                limit,
                g,
                shape.work_per_token((limit + g) as u64),
                r,
                compute_market_protocol::hash::hashv(&[&i.manifest]),
            )
        };
        (job, i)
    }

    /// An `Mlp` job of `model` on the batch `x` (rows of the model's width), `r` rows a tile.
    pub fn mlp(model: &Mlp, x: &[i8], r: u8) -> (JobSpec, Inputs) {
        let (f, c) = (
            model.layers[0].inp,
            model.layers.last().expect("a layer").out,
        );
        let i = Inputs::new(
            [Role::Model, Role::Batch],
            [build::model(model), build::batch(x)],
        );
        let job = JobSpec {
            slices_len: i.slices[0].len() as u64,
            ..JobSpec::mlp(
                (x.len() / f) as u32,
                f as u32,
                c as u32,
                model.work_per_row(),
                r,
                compute_market_protocol::hash::hashv(&[&i.manifest]),
            )
        };
        (job, i)
    }

    /// An `Encoder` job of `model` on texts of token ids `texts` (each at most `limit`),
    /// `r` texts a tile.
    pub fn encoder(
        model: &compute_market_protocol::encoder::Encoder,
        texts: &[Vec<u32>],
        limit: u32,
        r: u8,
    ) -> (JobSpec, Inputs) {
        use compute_market_protocol::slices::encoder::build as eb;
        let i = Inputs::new(
            [Role::Model, Role::Texts],
            [eb::model(model), eb::ids(texts, limit)],
        );
        let job = JobSpec {
            slices_len: i.slices[0].len() as u64,
            ..JobSpec::encoder(
                texts.len() as u32,
                limit,
                model.hidden as u32,
                model.work_per_token(limit as usize),
                r,
                compute_market_protocol::hash::hashv(&[&i.manifest]),
            )
        };
        (job, i)
    }

    /// A `MatMulModP` job on the client's A (m × k) and B (k × n), row-major.
    pub fn matmul(a: &[u32], b: &[u32], [m, k, n]: [u32; 3]) -> (JobSpec, Inputs) {
        let i = Inputs::new(
            [Role::A, Role::B],
            [build::matrix_rows(a, m, k), build::matrix_columns(b, k, n)],
        );
        let job = JobSpec {
            input_mode: InputMode::ContentHash,
            slices_len: i.slices[0].len() as u64,
            ..JobSpec::matmul(
                m,
                k,
                n,
                compute_market_protocol::hash::hashv(&[&i.manifest]),
            )
        };
        (job, i)
    }
}

impl World {
    /// The dispute account of `challenger` on `task`, if open.
    pub fn dispute(&self, task: &Pubkey, challenger: &Actor) -> Option<Dispute> {
        let a = self
            .c
            .svm
            .get_account(&pda::dispute(task, &challenger.key()))
            .filter(|a| a.lamports > 0)?;
        Dispute::from_account_data(&a.data)
    }

    /// `open_dispute` by `who`, bond from and payout to its wallet.
    pub fn open_dispute(
        &mut self,
        who: &Actor,
        task: Pubkey,
        kind: u8,
        tile: u32,
        element: u32,
    ) -> Result<TxRecord, TxRecord> {
        self.names.insert(
            pda::dispute(&task, &who.key()),
            format!("dispute[{}]", who.name),
        );
        let ix = client::open_dispute(
            task,
            who.key(),
            who.wallet,
            who.wallet,
            OpenDisputeArgs {
                kind,
                tile,
                element,
            },
        );
        self.send_as("open_dispute", who, ix)
    }

    /// `dispute_target` of `vote`.
    pub fn dispute_target(
        &mut self,
        who: &Actor,
        task: Pubkey,
        vote: Pubkey,
    ) -> Result<TxRecord, TxRecord> {
        self.send_as(
            "dispute_target",
            who,
            client::dispute_target(task, who.key(), vote),
        )
    }

    /// Writes the proof of (tile, element) of `result` (two transactions of chunk, one or
    /// two of siblings) and proves it; returns the `dispute_prove` record.
    pub fn prove_element(
        &mut self,
        who: &Actor,
        task: Pubkey,
        result: &Committed,
        tile: u32,
        element: u32,
    ) -> Result<TxRecord, TxRecord> {
        let (chunk, path) = result.element_proof(tile, element);
        let mut bytes = chunk;
        for s in &path {
            bytes.extend_from_slice(s);
        }
        self.write_proof(who, task, &bytes)?;
        self.send_as(
            "dispute_prove",
            who,
            client::dispute_prove(task, who.key(), path.len() as u8),
        )
    }

    /// Writes `bytes` into the dispute's buffer, [`WRITE_LEN`] at a time.
    pub fn write_proof(&mut self, who: &Actor, task: Pubkey, bytes: &[u8]) -> Result<(), TxRecord> {
        for (i, part) in bytes.chunks(WRITE_LEN).enumerate() {
            let off = (i * WRITE_LEN) as u16;
            self.send_as(
                "dispute_write",
                who,
                client::dispute_write(task, who.key(), off, part.to_vec()),
            )?;
        }
        Ok(())
    }

    /// `dispute_step` of at most `count` terms.
    pub fn dispute_step(
        &mut self,
        who: &Actor,
        task: Pubkey,
        vote: Option<Pubkey>,
        count: u32,
    ) -> Result<TxRecord, TxRecord> {
        let kp = who.kp.insecure_clone();
        self.send_all(
            "dispute_step",
            &kp,
            &[],
            &[
                client::compute_unit_limit(1_400_000),
                client::dispute_step(task, who.key(), vote, count),
            ],
        )
    }

    /// Steps until the element is recomputed and decided; returns the records of the steps.
    pub fn step_to_end(
        &mut self,
        who: &Actor,
        task: Pubkey,
        vote: Option<Pubkey>,
    ) -> Result<Vec<TxRecord>, TxRecord> {
        self.step_to_end_by(who, task, vote, MAX_STEP_TERMS)
    }

    /// [`World::step_to_end`], `count` terms a step.
    pub fn step_to_end_by(
        &mut self,
        who: &Actor,
        task: Pubkey,
        vote: Option<Pubkey>,
        count: u32,
    ) -> Result<Vec<TxRecord>, TxRecord> {
        let mut out = vec![];
        loop {
            let before = self
                .dispute(&task, who)
                .map(|d| (d.done, d.target, d.state));
            out.push(self.dispute_step(who, task, vote, count)?);
            let after = self
                .dispute(&task, who)
                .map(|d| (d.done, d.target, d.state));
            // decided: closed (lost), won, or the vote refuted (target cleared)
            match (before, after) {
                (_, None) => return Ok(out),
                (Some((_, t0, s0)), Some((_, t1, s1))) if t0 != t1 || s0 != s1 => return Ok(out),
                _ => {}
            }
        }
    }

    /// A kind-1 dispute by `who` of (tile, element) of `result`, played to its end: open,
    /// prove, recompute. Returns every record of it.
    pub fn argue(
        &mut self,
        who: &Actor,
        task: Pubkey,
        result: &Committed,
        tile: u32,
        element: u32,
    ) -> Result<Vec<TxRecord>, TxRecord> {
        self.argue_by(who, task, result, (tile, element), MAX_STEP_TERMS)
    }

    /// [`World::argue`], recomputing `count` terms a step.
    pub fn argue_by(
        &mut self,
        who: &Actor,
        task: Pubkey,
        result: &Committed,
        (tile, element): (u32, u32),
        count: u32,
    ) -> Result<Vec<TxRecord>, TxRecord> {
        let mut out = vec![self.open_dispute(who, task, 1, tile, element)?];
        out.push(self.prove_element(who, task, result, tile, element)?);
        out.extend(self.step_to_end_by(who, task, None, count)?);
        Ok(out)
    }

    /// Refutes `vote` (an INVALID vote) in `who`'s open kind-2 dispute: target, and unless
    /// its pointer claims nothing, prove and recompute.
    pub fn refute(
        &mut self,
        who: &Actor,
        task: Pubkey,
        result: &Committed,
        vote: Pubkey,
    ) -> Result<Vec<TxRecord>, TxRecord> {
        let mut out = vec![self.dispute_target(who, task, vote)?];
        let Some(d) = self.dispute(&task, who) else {
            return Ok(out);
        };
        if d.target == Pubkey::default() {
            return Ok(out); // refuted at once (a pointer outside the result)
        }
        out.push(self.prove_element(who, task, result, d.tile, d.element)?);
        out.extend(self.step_to_end(who, task, Some(vote))?);
        Ok(out)
    }

    /// Writes the job's manifest and proves it (`dispute_inputs`).
    pub fn prove_inputs(
        &mut self,
        who: &Actor,
        task: Pubkey,
        inputs: &Inputs,
    ) -> Result<TxRecord, TxRecord> {
        self.write_proof(who, task, &inputs.manifest)?;
        self.send_as(
            "dispute_inputs",
            who,
            client::dispute_inputs(task, who.key(), inputs.manifest.len() as u16),
        )
    }

    /// The recomputation's state of `who`'s dispute.
    pub fn feed_state(&self, task: &Pubkey, who: &Actor) -> Option<Feed> {
        let d = self.dispute(task, who)?;
        let state: [u8; STATE_LEN] = d.feed;
        Some(Feed::decode(&state))
    }

    /// Feeds the chunks the recomputation asks for, each written with its siblings and proven
    /// (`dispute_feed`), until the element is decided; returns the records.
    pub fn feed_to_end(
        &mut self,
        who: &Actor,
        task: Pubkey,
        vote: Option<Pubkey>,
        inputs: &Inputs,
    ) -> Result<Vec<TxRecord>, TxRecord> {
        let job = JobSpec::decode(&self.task(&task).job).expect("job");
        let mut out = vec![];
        loop {
            let Some(d) = self.dispute(&task, who) else {
                return Ok(out);
            };
            if d.state != 0 || d.proven == 0 {
                return Ok(out); // won, or the vote refuted (the element cleared)
            }
            let target = feed::target(&job, d.tile, d.element).expect("a fed element");
            let f = self.feed_state(&task, who).expect("open");
            let (input, c) = f.next(&job, target).expect("more to feed");
            let (mut chunk, path) = build::chunk_proof(&inputs.slices[input as usize], c);
            chunk.resize(CHUNK_LEN, 0);
            for p in &path {
                chunk.extend_from_slice(p);
            }
            self.write_proof(who, task, &chunk)?;
            let kp = who.kp.insecure_clone();
            out.push(self.send_all(
                "dispute_feed",
                &kp,
                &[],
                &[
                    client::compute_unit_limit(1_400_000),
                    client::dispute_feed(task, who.key(), vote, input, c, path.len() as u8),
                ],
            )?);
        }
    }

    /// A kind-1 dispute of (tile, element) of `result`, a job on the client's `inputs`, played
    /// to its end: open, prove the element, prove the manifest, feed. Returns every record.
    pub fn argue_on_data(
        &mut self,
        who: &Actor,
        task: Pubkey,
        result: &Committed,
        inputs: &Inputs,
        (tile, element): (u32, u32),
    ) -> Result<Vec<TxRecord>, TxRecord> {
        let mut out = vec![self.open_dispute(who, task, 1, tile, element)?];
        out.push(self.prove_element(who, task, result, tile, element)?);
        out.push(self.prove_inputs(who, task, inputs)?);
        out.extend(self.feed_to_end(who, task, None, inputs)?);
        Ok(out)
    }

    /// [`World::refute`] on the client's data: target, prove, the manifest if not yet proven,
    /// feed.
    pub fn refute_on_data(
        &mut self,
        who: &Actor,
        task: Pubkey,
        result: &Committed,
        inputs: &Inputs,
        vote: Pubkey,
    ) -> Result<Vec<TxRecord>, TxRecord> {
        let mut out = vec![self.dispute_target(who, task, vote)?];
        let Some(d) = self.dispute(&task, who) else {
            return Ok(out);
        };
        if d.target == Pubkey::default() {
            return Ok(out);
        }
        out.push(self.prove_element(who, task, result, d.tile, d.element)?);
        if d.inputs == 0 {
            out.push(self.prove_inputs(who, task, inputs)?);
        }
        out.extend(self.feed_to_end(who, task, Some(vote), inputs)?);
        Ok(out)
    }

    /// `dispute_timeout` of `challenger`'s dispute, by the cranker.
    pub fn dispute_timeout(
        &mut self,
        task: Pubkey,
        challenger: &Actor,
    ) -> Result<TxRecord, TxRecord> {
        self.crank(
            "dispute_timeout",
            client::dispute_timeout(task, challenger.key()),
        )
    }

    /// `conclude_task`, by the cranker.
    pub fn conclude(&mut self, task: Pubkey) -> Result<TxRecord, TxRecord> {
        let provider = self
            .try_task(&task)
            .map_or(Pubkey::default(), |t| t.provider);
        self.crank("conclude_task", client::conclude_task(task, provider))
    }

    /// `close_dispute` of `challenger`'s dispute, paying its wallet, by the cranker.
    pub fn close_dispute(
        &mut self,
        task: Pubkey,
        challenger: &Actor,
    ) -> Result<TxRecord, TxRecord> {
        self.crank(
            "close_dispute",
            client::close_dispute(task, challenger.key(), challenger.wallet, None),
        )
    }
}

/// A node's stake (free + bonded): what a slash takes from.
pub fn stake(w: &World, a: &Actor) -> u64 {
    w.node(&a.node).stake()
}

/// Every token the world's accounts hold.
pub fn supply(w: &World) -> u64 {
    w.balances().values().sum()
}

/// Settles every vote of the deciding round, then closes the given disputes and the task.
pub fn wind_up(w: &mut World, task: Pubkey, voters: &[&Actor], challengers: &[&Actor]) {
    // losers first: a winner is paid only once the round's slashes are in
    let mut left: Vec<&Actor> = voters.to_vec();
    while !left.is_empty() {
        let n = left.len();
        let round = w.round_of(&task);
        left.retain(|v| match w.settle(task, v, round) {
            Ok(_) => false,
            Err(r) if r.has_error("SlashesPending") => true,
            Err(r) => panic!("settle {}: {:?}", v.name, r.logs),
        });
        assert!(left.len() < n, "no vote could settle");
    }
    for c in challengers {
        w.close_dispute(task, c)
            .unwrap_or_else(|r| panic!("close_dispute {}: {:?}", c.name, r.logs));
    }
    w.close(task)
        .unwrap_or_else(|r| panic!("close: {:?}", r.logs));
}

/// Concludes and winds up `task` after `client`'s kind-1 dispute proved its Accepted result
/// wrong (a recomputation or a claim that stood), and checks the money of a proven-wrong
/// verdict (PROTOCOL §8.5): the provider's bond slashed; each seat in `vs` that sampled `tile`
/// and vouched slashed a bond, half of it to the client; the client refunded its reward (R) and
/// paid `bonds` bonds (its own, and the games' it won) and its part of the provider's bond;
/// every token accounted for (`before`: the supply before).
#[allow(clippy::too_many_arguments)]
pub fn proven_wrong_paid(
    w: &mut World,
    task: Pubkey,
    tile: u32,
    provider: &Actor,
    client: &Actor,
    vs: &[&Actor],
    bonds: u64,
    before: u64,
) {
    let t = w.task(&task);
    let job = JobSpec::decode(&t.job).expect("job");
    let (vb, bond) = (t.verifier_bond, t.provider_bond);
    let (wallet, provider_stake) = (w.balance(&client.wallet), stake(w, provider));
    let stakes: Vec<u64> = vs.iter().map(|v| stake(w, v)).collect();
    let sampled: Vec<bool> = vs
        .iter()
        .map(|v| {
            compute_market_protocol::sampling::sample_indices(
                &t.seed,
                &v.node.to_bytes(),
                t.samples as u32,
                job.tile_count(),
            )
            .contains(&tile)
        })
        .collect();
    w.conclude(task).unwrap();
    wind_up(w, task, vs, &[client]);
    assert_eq!(stake(w, provider), provider_stake - bond);
    let mut award = 0;
    for ((v, st), vouched) in vs.iter().zip(stakes).zip(&sampled) {
        let lost = if *vouched { vb } else { 0 };
        award += lost / 2;
        assert_eq!(stake(w, v), st - lost, "{}", v.name);
    }
    let client_part = bond * crate::test_params().reject_client_bps as u64 / 10_000;
    assert_eq!(
        w.balance(&client.wallet),
        wallet + crate::R + bonds * vb + client_part + award,
        "refund, the bonds, the client's part, the award"
    );
    assert_eq!(supply(w), before, "conserved");
}
