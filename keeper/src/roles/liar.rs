//! A challenger that lies (PROTOCOL §8.10), for tests and demonstrations of the defence, as a
//! verifier may be `careless` or `lying`: the keepers that vouched for a result defend against
//! its claim and win.

use anchor_lang::prelude::Pubkey;
use anyhow::{Context, Result};
use compute_market::{
    client::{self, GameRef},
    pda,
    state::{STAGE_BISECT, TURN_CHALLENGER},
};
use compute_market_protocol::{
    feed::{self, Target},
    job::JobSpec,
    merkle::CHUNK_LEN,
    trace::{build::with_siblings, Slots, LEAF_LEN},
};
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_signer::Signer;

use super::send_all;
use crate::{
    chain::{Chain, ChainExt},
    dispute::RowTrace as Trace,
};

/// A challenger that lies, for tests and demonstrations of the defence (as a verifier may be
/// `careless` or `lying`): once task `task`'s result is held Accepted, it disputes word
/// (tile, element) of it, claims the row's trace with that word's value flipped, and answers
/// every split of its games with the roots of that lying trace. The keepers that vouched for
/// the result defend, narrow the lie to the one step it got wrong, replay it, and win.
pub struct Liar {
    /// Its wallet (bonds from its associated token account of the stake mint).
    pub kp: Keypair,
    /// Where it fetches the result and the inputs through (as any keeper does).
    pub store: std::sync::Arc<crate::results::ResultStore>,
    /// The task it lies about.
    pub task: Pubkey,
    /// The word it disputes: a tile and an element of it.
    pub at: (u32, u32),
    /// Its lying trace, once claimed.
    pub lie: Option<Trace>,
}

impl Liar {
    fn send(&self, chain: &dyn Chain, what: &str, ixs: Vec<Instruction>) -> Result<()> {
        let mut all = vec![client::compute_unit_limit(1_400_000)];
        all.extend(ixs);
        let r = send_all(chain, "liar", what, &self.task, &all, &self.kp)?;
        crate::chain::must(what, r).map(|_| ())
    }

    fn write(&self, chain: &dyn Chain, bytes: &[u8]) -> Result<()> {
        super::challenger::write_buffer(chain, &self.kp, "liar", &self.task, bytes).map(|_| ())
    }

    /// One pass: the claim once the result is held Accepted, then its splits.
    pub fn step(&mut self, chain: &dyn Chain) -> Result<()> {
        let Some(t) = chain.task(&self.task)? else {
            return Ok(());
        };
        let me = self.kp.pubkey();
        let (key, (tile, element)) = (self.task, self.at);
        let Some(lie) = &self.lie else {
            if !(t.held && t.status == compute_market::state::TaskStatus::Accepted) {
                return Ok(());
            }
            let job = JobSpec::decode(&t.job).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            let Some(Target::Word(row, w)) = feed::target(&job, tile, element) else {
                anyhow::bail!("the liar disputes a word of a row");
            };
            let served = self
                .store
                .fetch_by(super::result_uri(&t), &job, &[tile], None)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let s = served.first().context("the tile")?;
            let mint = chain
                .decoded::<compute_market::state::Config>(&pda::config())?
                .context("no config")?
                .stake_mint;
            let wallet = anchor_spl::associated_token::get_associated_token_address(&me, &mint);
            let args = compute_market::instructions::OpenDisputeArgs {
                kind: compute_market_protocol::dispute::DISPUTE_RESULT_WRONG,
                tile,
                element,
            };
            let open = client::open_dispute(key, me, wallet, wallet, args);
            self.send(chain, "open_dispute", vec![open])?;
            let (chunk, path) =
                crate::dispute::element_proof(&job, tile, element, &s.tile, &s.proof);
            self.write(chain, &with_siblings(chunk, CHUNK_LEN, &path))?;
            let prove = client::dispute_prove(key, me, path.len() as u8);
            self.send(chain, "dispute_prove", vec![prove])?;
            let data = super::challenger::sliced_inputs(&self.store, &t, &job)?;
            self.write(chain, &data.manifest)?;
            let inputs = client::dispute_inputs(key, me, data.manifest.len() as u16);
            self.send(chain, "dispute_inputs", vec![inputs])?;
            for (input, c) in crate::dispute::SlicedInputs::layout_pieces(&job, row) {
                let (chunk, path) = data.chunk(input, c);
                self.write(chain, &with_siblings(chunk, CHUNK_LEN, &path))?;
                let layout = client::dispute_layout(key, me, path.len() as u8);
                self.send(chain, "dispute_layout", vec![layout])?;
            }
            let mut lie: Trace = (*data.trace(&job, row).context("the row's trace")?).clone();
            let off = lie.lay.word_at(w);
            lie.mem[off as usize] ^= 1;
            let steps = lie.lay.step_count();
            let (leaf, path) = lie.leaf_at(steps, off / LEAF_LEN as u64);
            self.write(chain, &with_siblings(leaf.to_vec(), LEAF_LEN, &path))?;
            let claim = client::dispute_claim(key, me, lie.root_at(steps), path.len() as u8);
            self.send(chain, "dispute_claim", vec![claim])?;
            tracing::info!(task = %key, tile, element, "the liar claimed a wrong trace");
            self.lie = Some(lie);
            return Ok(());
        };
        let now = chain.slot()?;
        let dispute = pda::dispute(&key, &me);
        for (_, g) in chain.games(&dispute)? {
            if g.stage == STAGE_BISECT && g.turn == TURN_CHALLENGER && now <= g.deadline {
                let roots = lie.split_roots(g.lo, g.hi);
                let r = GameRef {
                    task: key,
                    challenger: me,
                    nonce: g.nonce,
                    defender: g.defender,
                };
                self.send(chain, "game_split", vec![client::game_split(r, roots)])?;
            }
        }
        Ok(())
    }
}
