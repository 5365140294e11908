//! The challenger's turns of a dispute on the client's data (PROTOCOL §8.7): `dispute_inputs`
//! proves the job's manifest (its SHA-256 is the job's input) and keeps the roots of the slice
//! strings the element is recomputed from; `dispute_feed` proves one chunk of one of them
//! against its root and advances the recomputation (`compute_market_protocol::feed`), which
//! decides the dispute when the element is complete.
use anchor_lang::{
    prelude::*,
    system_program::{transfer, Transfer},
};
use compute_market_protocol::{
    dispute,
    feed::{self, Feed, FeedError, STATE_LEN},
    hash::{hashv, Digest},
    manifest::Manifest,
    merkle::CHUNK_LEN,
    slices,
};

use crate::{
    constants::*,
    errors::MarketError,
    events::{DisputeFed, DisputeInputsProven},
    instructions::DisputeTurn,
    state::*,
};

#[derive(Accounts)]
pub struct DisputeInputs<'info> {
    #[account(seeds = [SEED_TASK, task.client.as_ref(), &task.task_id.to_le_bytes()], bump = task.bump)]
    pub task: Box<Account<'info, Task>>,
    #[account(
        mut, seeds = [SEED_DISPUTE, task.key().as_ref(), challenger.key().as_ref()], bump,
    )]
    pub dispute: AccountLoader<'info, Dispute>,
    /// The challenger: pays the rent of the recomputation's work area (returned at close).
    #[account(mut)]
    pub challenger: Signer<'info>,
    pub system_program: Program<'info, System>,
}

impl DisputeInputs<'_> {
    /// An open dispute of a job on the client's data, its element proven, before its deadline.
    pub fn validate(&self) -> Result<()> {
        let d = self.dispute.load()?;
        super::dispute_turn::still_arguable(&d, &self.task)?;
        require!(d.proven == 1, MarketError::NotProven);
        Ok(())
    }
}

/// `dispute_inputs`: the first `len` bytes of the buffer are the job's manifest.
pub fn inputs(ctx: Context<DisputeInputs>, len: u16) -> Result<()> {
    let a = ctx.accounts;
    let job = compute_market_protocol::job::JobSpec::decode(&a.task.job)
        .map_err(|_| error!(MarketError::InvalidJobSpec))?;
    require!(
        !dispute::one_step(&job) && job.slices_len > 0,
        MarketError::DisputeNotSupported
    );
    let roles = slices::refereed_roles(&job).ok_or(MarketError::DisputeNotSupported)?;
    let (lens, roots) = {
        let d = a.dispute.load()?;
        let bytes = d
            .buffer
            .get(..len as usize)
            .ok_or(MarketError::ProofTooLong)?;
        require!(
            hashv(&[bytes]) == a.task.job[16..48],
            MarketError::InputsMismatch
        );
        let m = Manifest::decode(bytes).map_err(|_| error!(MarketError::InputsNotSliced))?;
        let mut lens = [0u64; 2];
        let mut roots: [Digest; 2] = [[0; 32]; 2];
        for (i, role) in roles.iter().enumerate() {
            let s = m
                .part(*role)
                .and_then(|p| p.slices)
                .ok_or(MarketError::InputsNotSliced)?;
            if let Some(want) = slices::expected_len(&job, *role) {
                require!(s.len == want, MarketError::InputsNotSliced);
            }
            // the first input's length is the one the job declared (and priced the dispute by)
            require!(
                i > 0 || s.len == job.slices_len,
                MarketError::InputsNotSliced
            );
            lens[i] = s.len;
            roots[i] = s.root;
        }
        (lens, roots)
    };
    // the work area after the fields, paid by the challenger
    let info = a.dispute.to_account_info();
    if info.data_len() < Dispute::SPACE_WITH_WORK {
        let need = Rent::get()?
            .minimum_balance(Dispute::SPACE_WITH_WORK)
            .saturating_sub(info.lamports());
        if need > 0 {
            transfer(
                CpiContext::new(
                    a.system_program.key(),
                    Transfer {
                        from: a.challenger.to_account_info(),
                        to: info.clone(),
                    },
                ),
                need,
            )?;
        }
        info.resize(Dispute::SPACE_WITH_WORK)?;
    }
    {
        let mut d = a.dispute.load_mut()?;
        d.inputs = 1;
        d.slice_lens = lens;
        d.slice_roots = roots;
    }
    emit!(DisputeInputsProven {
        task: a.task.key(),
        challenger: a.challenger.key(),
        slice_roots: roots,
        slice_lens: lens,
    });
    Ok(())
}

/// `dispute_feed`: chunk `chunk` of input `input` is in the buffer with `siblings` chaining
/// values after it; proven against that input's root, the recomputation takes it, and decides
/// the dispute once the element is complete.
pub fn feed(ctx: Context<DisputeTurn>, input: u8, chunk: u64, siblings: u8) -> Result<()> {
    let a = ctx.accounts;
    let job = a.job()?;
    require!(
        dispute::method(&job, a.task.dispute_window) == Some(dispute::Method::Feed),
        MarketError::NeedsGame
    );
    let n = siblings as usize;
    require!(n <= dispute::MAX_CHUNK_SIBLINGS, MarketError::ProofTooLong);
    require!(input < 2, MarketError::WrongChunk);
    let info = a.dispute.to_account_info();
    let (kind, committed, value) = {
        let mut data = info.try_borrow_mut_data()?;
        require!(
            data.len() >= Dispute::SPACE_WITH_WORK,
            MarketError::InputsNotProven
        );
        let (head, work) = data.split_at_mut(Dispute::SPACE);
        let d: &mut Dispute = bytemuck::from_bytes_mut(&mut head[8..]);
        require!(d.proven == 1, MarketError::NotProven);
        require!(d.inputs == 1, MarketError::InputsNotProven);
        let target =
            feed::target(&job, d.tile, d.element).ok_or(MarketError::DisputeNotSupported)?;
        let mut f = Feed::decode(&d.feed);
        // the chunk the recomputation needs next, before any hashing
        let want = f.next(&job, target).ok_or(MarketError::FeedComplete)?;
        require!(want == (input, chunk), MarketError::WrongChunk);
        let len = d.slice_lens[input as usize];
        let bytes = &d.buffer[..slices::chunk_len(len, chunk)];
        let path = super::dispute_game::siblings(&d.buffer, CHUNK_LEN, n)?;
        super::dispute_game::check_slice_chunk(
            &d.slice_roots[input as usize],
            len,
            chunk,
            bytes,
            &path,
        )?;
        let taken = f.take(
            &job,
            target,
            input,
            chunk,
            len,
            bytes,
            &mut work[..feed::WORK_LEN],
        );
        let value = match taken {
            Ok(v) => v,
            Err(FeedError::WrongChunk) => return err!(MarketError::WrongChunk),
            Err(FeedError::Complete) => return err!(MarketError::FeedComplete),
            Err(FeedError::BadValue | FeedError::BadModel) => {
                return err!(MarketError::InputsBreakRules)
            }
        };
        let state: [u8; STATE_LEN] = f.encode();
        d.feed = state;
        (d.kind, d.committed, value)
    };
    emit!(DisputeFed {
        task: a.task.key(),
        challenger: a.challenger.key(),
        input,
        chunk,
    });
    match value {
        None => Ok(()),
        Some(v) => {
            let mut recomputed = [0u8; 32];
            recomputed[..4].copy_from_slice(&v);
            a.decide(kind, committed, recomputed)
        }
    }
}
