//! Instruction builders for off-chain callers (keeper, tests, dApp): one function per
//! instruction, PDAs derived here so that callers never spell a seed.
use anchor_lang::{prelude::*, solana_program::instruction::Instruction, InstructionData};
use anchor_spl::token;

use crate::{
    accounts as acc, constants::SLOT_HASHES_ID, instruction as ix, instructions::*, pda, state::*,
    ID,
};

fn build(accounts: impl ToAccountMetas, data: impl InstructionData) -> Instruction {
    Instruction {
        program_id: ID,
        accounts: accounts.to_account_metas(None),
        data: data.data(),
    }
}

/// `initialize_config`, signed by the program's upgrade authority `admin`.
pub fn initialize_config(
    admin: Pubkey,
    stake_mint: Pubkey,
    treasury: Pubkey,
    args: InitializeConfigArgs,
) -> Instruction {
    build(
        acc::InitializeConfig {
            config: pda::config(),
            stake_mint,
            treasury,
            admin,
            program: ID,
            program_data: pda::program_data(),
            system_program: system_program::ID,
        },
        ix::InitializeConfig { args },
    )
}

/// `propose_params`.
pub fn propose_params(admin: Pubkey, params: Params) -> Instruction {
    build(
        acc::ProposeParams {
            config: pda::config(),
            admin,
        },
        ix::ProposeParams { params },
    )
}

/// `apply_params`.
pub fn apply_params() -> Instruction {
    build(
        acc::ApplyParams {
            config: pda::config(),
        },
        ix::ApplyParams {},
    )
}

/// `create_market`.
pub fn create_market(admin: Pubkey, args: MarketArgs) -> Instruction {
    build(
        acc::CreateMarket {
            config: pda::config(),
            market: pda::market(args.id),
            admin,
            system_program: system_program::ID,
        },
        ix::CreateMarket { args },
    )
}

/// `register_node`.
pub fn register_node(
    authority: Pubkey,
    market: Pubkey,
    stake_mint: Pubkey,
    args: RegisterNodeArgs,
) -> Instruction {
    let node = pda::node(&authority);
    build(
        acc::RegisterNode {
            config: pda::config(),
            market,
            node,
            vault: pda::vault(&node),
            stake_mint,
            authority,
            token_program: token::ID,
            system_program: system_program::ID,
        },
        ix::RegisterNode { args },
    )
}

/// `update_node`.
pub fn update_node(authority: Pubkey, market: Pubkey, args: UpdateNodeArgs) -> Instruction {
    build(
        acc::UpdateNode {
            market,
            node: pda::node(&authority),
            authority,
        },
        ix::UpdateNode { args },
    )
}

/// `stake` from `source`.
pub fn stake(authority: Pubkey, market: Pubkey, source: Pubkey, amount: u64) -> Instruction {
    let node = pda::node(&authority);
    build(
        acc::Stake {
            market,
            node,
            vault: pda::vault(&node),
            source,
            authority,
            token_program: token::ID,
        },
        ix::Stake { amount },
    )
}

/// `request_unstake`.
pub fn request_unstake(authority: Pubkey, market: Pubkey, amount: u64) -> Instruction {
    build(
        acc::RequestUnstake {
            config: pda::config(),
            market,
            node: pda::node(&authority),
            authority,
        },
        ix::RequestUnstake { amount },
    )
}

/// `withdraw` to `destination`.
pub fn withdraw(authority: Pubkey, destination: Pubkey) -> Instruction {
    let node = pda::node(&authority);
    build(
        acc::Payout {
            node,
            vault: pda::vault(&node),
            destination,
            authority,
            token_program: token::ID,
        },
        ix::Withdraw {},
    )
}

/// `claim_earnings` to `destination`.
pub fn claim_earnings(authority: Pubkey, destination: Pubkey) -> Instruction {
    let node = pda::node(&authority);
    build(
        acc::Payout {
            node,
            vault: pda::vault(&node),
            destination,
            authority,
            token_program: token::ID,
        },
        ix::ClaimEarnings {},
    )
}

/// `sweep_fees` of `node` into `treasury`.
pub fn sweep_fees(node: Pubkey, treasury: Pubkey) -> Instruction {
    build(
        acc::SweepFees {
            config: pda::config(),
            node,
            vault: pda::vault(&node),
            treasury,
            token_program: token::ID,
        },
        ix::SweepFees {},
    )
}

/// `close_node`; stray vault tokens go to `destination`.
pub fn close_node(authority: Pubkey, market: Pubkey, destination: Pubkey) -> Instruction {
    let node = pda::node(&authority);
    build(
        acc::CloseNode {
            market,
            node,
            vault: pda::vault(&node),
            destination,
            authority,
            token_program: token::ID,
        },
        ix::CloseNode {},
    )
}

/// `post_task`.
pub fn post_task(
    client: Pubkey,
    client_token: Pubkey,
    stake_mint: Pubkey,
    market: Pubkey,
    args: PostTaskArgs,
) -> Instruction {
    let task = pda::task(&client, args.task_id);
    build(
        acc::PostTask {
            config: pda::config(),
            market,
            task,
            escrow: pda::escrow(&task),
            stake_mint,
            client_token,
            client,
            token_program: token::ID,
            system_program: system_program::ID,
        },
        ix::PostTask { args },
    )
}

/// `cancel_task`.
pub fn cancel_task(client: Pubkey, task: Pubkey) -> Instruction {
    build(acc::CancelTask { task, client }, ix::CancelTask {})
}

/// `expire_task`.
pub fn expire_task(task: Pubkey) -> Instruction {
    build(acc::ExpireTask { task }, ix::ExpireTask {})
}

/// `claim_task`.
pub fn claim_task(authority: Pubkey, task: Pubkey) -> Instruction {
    build(
        acc::ClaimTask {
            task,
            node: pda::node(&authority),
            authority,
        },
        ix::ClaimTask {},
    )
}

/// `submit_result` on `task` of `market`.
pub fn submit_result(
    authority: Pubkey,
    task: Pubkey,
    market: Pubkey,
    args: SubmitResultArgs,
) -> Instruction {
    build(
        acc::SubmitResult {
            task,
            market,
            node: pda::node(&authority),
            authority,
        },
        ix::SubmitResult { args },
    )
}

/// `reclaim_task` (provider `provider_node` missed its deadline).
pub fn reclaim_task(task: Pubkey, provider_node: Pubkey) -> Instruction {
    build(
        acc::ReclaimTask {
            task,
            escrow: pda::escrow(&task),
            provider_node,
            provider_vault: pda::vault(&provider_node),
            token_program: token::ID,
        },
        ix::ReclaimTask {},
    )
}

/// `draw_seed`.
pub fn draw_seed(task: Pubkey) -> Instruction {
    build(
        acc::DrawSeed {
            task,
            slot_hashes: SLOT_HASHES_ID,
        },
        ix::DrawSeed {},
    )
}

/// `join_task` for seat `seat` of `round`; `displaced` is the authority of the seat's holder
/// when the seat is taken.
pub fn join_task(
    authority: Pubkey,
    task: Pubkey,
    round: u8,
    seat: u8,
    displaced: Option<Pubkey>,
) -> Instruction {
    let node = pda::node(&authority);
    let displaced_node = displaced.map(|a| pda::node(&a));
    build(
        acc::JoinTask {
            task,
            node,
            vote: pda::vote(&task, &node, round),
            slot_hashes: SLOT_HASHES_ID,
            authority,
            displaced_vote: displaced_node.map(|n| pda::vote(&task, &n, round)),
            displaced_node,
            displaced_authority: displaced,
            system_program: system_program::ID,
        },
        ix::JoinTask { seat },
    )
}

/// `commit_vote`.
pub fn commit_vote(
    authority: Pubkey,
    task: Pubkey,
    round: u8,
    commitment: [u8; 32],
) -> Instruction {
    let node = pda::node(&authority);
    let vote = pda::vote(&task, &node, round);
    build(
        acc::SeatedVote {
            task,
            vote,
            node,
            authority,
        },
        ix::CommitVote { commitment },
    )
}

/// `reveal_vote`.
pub fn reveal_vote(
    authority: Pubkey,
    task: Pubkey,
    round: u8,
    args: RevealVoteArgs,
) -> Instruction {
    let node = pda::node(&authority);
    let vote = pda::vote(&task, &node, round);
    build(
        acc::SeatedVote {
            task,
            vote,
            node,
            authority,
        },
        ix::RevealVote { args },
    )
}

/// `finalize_task` of `task` in `market`.
pub fn finalize_task(task: Pubkey, provider_node: Pubkey, market: Pubkey) -> Instruction {
    build(
        acc::FinalizeTask {
            task,
            escrow: pda::escrow(&task),
            provider_node,
            provider_vault: pda::vault(&provider_node),
            market,
            token_program: token::ID,
        },
        ix::FinalizeTask {},
    )
}

/// `settle_vote` of verifier `authority` (its node derived) in `round`.
pub fn settle_vote(task: Pubkey, authority: Pubkey, round: u8) -> Instruction {
    let node = pda::node(&authority);
    build(
        acc::SettleVote {
            task,
            escrow: pda::escrow(&task),
            vote: pda::vote(&task, &node, round),
            vote_authority: authority,
            node,
            vault: pda::vault(&node),
            token_program: token::ID,
        },
        ix::SettleVote {},
    )
}

/// `close_task`; `treasury` (the config's) only when the escrow holds more than the refund
/// (tokens sent in from outside), so that closes never write-lock it otherwise; `client_ata`
/// (the client's associated token account of `mint`) only when the client closed its refund
/// account.
pub fn close_task(
    task: Pubkey,
    client: Pubkey,
    client_token: Pubkey,
    treasury: Option<Pubkey>,
) -> Instruction {
    close_task_to(task, client, client_token, treasury, None)
}

/// [`close_task`] naming the client's associated token account for `mint` as the refund's
/// destination when `refund_to_ata` is `Some(mint)` (its refund account was closed).
pub fn close_task_to(
    task: Pubkey,
    client: Pubkey,
    client_token: Pubkey,
    treasury: Option<Pubkey>,
    refund_to_ata: Option<Pubkey>,
) -> Instruction {
    build(
        acc::CloseTask {
            task,
            escrow: pda::escrow(&task),
            client,
            client_token,
            client_ata: refund_to_ata.map(|mint| {
                anchor_spl::associated_token::get_associated_token_address(&client, &mint)
            }),
            config: pda::config(),
            treasury,
            token_program: token::ID,
        },
        ix::CloseTask {},
    )
}

/// `sync_stake` of `node` in `market` (anyone).
pub fn sync_stake(node: Pubkey, market: Pubkey) -> Instruction {
    build(acc::SyncStake { market, node }, ix::SyncStake {})
}

/// The compute-budget program's `SetComputeUnitLimit(units)`: a dispute's recomputation step
/// needs more than the default 200 000 (PROTOCOL §8.4; at most 1 400 000).
pub fn compute_unit_limit(units: u32) -> Instruction {
    let mut data = vec![2u8];
    data.extend_from_slice(&units.to_le_bytes());
    Instruction {
        program_id: pubkey!("ComputeBudget111111111111111111111111111111"),
        accounts: vec![],
        data,
    }
}

/// `conclude_task` of `task` (its provider's node named).
pub fn conclude_task(task: Pubkey, provider_node: Pubkey) -> Instruction {
    build(
        acc::ConcludeTask {
            task,
            escrow: pda::escrow(&task),
            provider_node,
            provider_vault: pda::vault(&provider_node),
            token_program: token::ID,
        },
        ix::ConcludeTask {},
    )
}

/// `open_dispute` by `challenger`, its bond from `challenger_token`, paid back to `payout`.
pub fn open_dispute(
    task: Pubkey,
    challenger: Pubkey,
    challenger_token: Pubkey,
    payout: Pubkey,
    args: OpenDisputeArgs,
) -> Instruction {
    build(
        acc::OpenDispute {
            task,
            escrow: pda::escrow(&task),
            dispute: pda::dispute(&task, &challenger),
            challenger,
            challenger_token,
            payout,
            token_program: token::ID,
            system_program: system_program::ID,
        },
        ix::OpenDispute { args },
    )
}

fn dispute_turn(task: Pubkey, challenger: Pubkey, vote: Option<Pubkey>) -> acc::DisputeTurn {
    acc::DisputeTurn {
        task,
        dispute: pda::dispute(&task, &challenger),
        challenger,
        vote,
    }
}

/// `dispute_target`: `challenger`'s kind-2 dispute takes `vote` (an INVALID vote's account).
pub fn dispute_target(task: Pubkey, challenger: Pubkey, vote: Pubkey) -> Instruction {
    build(
        dispute_turn(task, challenger, Some(vote)),
        ix::DisputeTarget {},
    )
}

/// `dispute_write`: `data` at `offset` of the dispute's proof buffer.
pub fn dispute_write(task: Pubkey, challenger: Pubkey, offset: u16, data: Vec<u8>) -> Instruction {
    build(
        dispute_turn(task, challenger, None),
        ix::DisputeWrite { offset, data },
    )
}

/// `dispute_prove` with `siblings` chaining values after the chunk in the buffer.
pub fn dispute_prove(task: Pubkey, challenger: Pubkey, siblings: u8) -> Instruction {
    build(
        dispute_turn(task, challenger, None),
        ix::DisputeProve { siblings },
    )
}

/// `dispute_step` of at most `count` terms; `vote`: a kind-2 dispute's target.
pub fn dispute_step(
    task: Pubkey,
    challenger: Pubkey,
    vote: Option<Pubkey>,
    count: u32,
) -> Instruction {
    build(
        dispute_turn(task, challenger, vote),
        ix::DisputeStep { count },
    )
}

/// `dispute_inputs`: the first `len` bytes of the buffer are the job's manifest.
pub fn dispute_inputs(task: Pubkey, challenger: Pubkey, len: u16) -> Instruction {
    build(
        acc::DisputeInputs {
            task,
            dispute: pda::dispute(&task, &challenger),
            challenger,
            system_program: system_program::ID,
        },
        ix::DisputeInputs { len },
    )
}

/// `dispute_feed`: chunk `chunk` of input `input` with `siblings` chaining values after it in
/// the buffer; `vote`: a kind-2 dispute's target.
pub fn dispute_feed(
    task: Pubkey,
    challenger: Pubkey,
    vote: Option<Pubkey>,
    input: u8,
    chunk: u64,
    siblings: u8,
) -> Instruction {
    build(
        dispute_turn(task, challenger, vote),
        ix::DisputeFeed {
            input,
            chunk,
            siblings,
        },
    )
}

/// `dispute_timeout` of `challenger`'s dispute (anyone).
pub fn dispute_timeout(task: Pubkey, challenger: Pubkey) -> Instruction {
    build(
        acc::DisputeTimeout {
            task,
            dispute: pda::dispute(&task, &challenger),
            challenger,
        },
        ix::DisputeTimeout {},
    )
}

/// `close_dispute` of `challenger`'s dispute, paying `payout` (or, when `payout_ata_mint` is
/// `Some(mint)`, the challenger's associated token account of it).
pub fn close_dispute(
    task: Pubkey,
    challenger: Pubkey,
    payout: Pubkey,
    payout_ata_mint: Option<Pubkey>,
) -> Instruction {
    build(
        acc::CloseDispute {
            task,
            escrow: pda::escrow(&task),
            dispute: pda::dispute(&task, &challenger),
            challenger,
            payout,
            payout_ata: payout_ata_mint.map(|mint| {
                anchor_spl::associated_token::get_associated_token_address(&challenger, &mint)
            }),
            token_program: token::ID,
        },
        ix::CloseDispute {},
    )
}

/// `dispute_layout`: chunk 0 of the model's slices with `siblings` after it in the buffer.
pub fn dispute_layout(task: Pubkey, challenger: Pubkey, siblings: u8) -> Instruction {
    build(
        dispute_turn(task, challenger, None),
        ix::DisputeLayout { siblings },
    )
}

/// `dispute_claim`: the trace's `root`, its leaf holding the element with `siblings` after it
/// in the buffer.
pub fn dispute_claim(
    task: Pubkey,
    challenger: Pubkey,
    root: [u8; 32],
    siblings: u8,
) -> Instruction {
    build(
        dispute_turn(task, challenger, None),
        ix::DisputeClaim { root, siblings },
    )
}

/// `dispute_resolve`; `vote`: a kind-2 dispute's target.
pub fn dispute_resolve(task: Pubkey, challenger: Pubkey, vote: Option<Pubkey>) -> Instruction {
    build(dispute_turn(task, challenger, vote), ix::DisputeResolve {})
}

/// `defend`: `defender` opens a game against `challenger`'s claim (its dispute number
/// `nonce`), its bond from `defender_token`, paid to `payout`.
pub fn defend(
    task: Pubkey,
    challenger: Pubkey,
    nonce: u32,
    defender: Pubkey,
    defender_token: Pubkey,
    payout: Pubkey,
) -> Instruction {
    let dispute = pda::dispute(&task, &challenger);
    build(
        acc::Defend {
            task,
            escrow: pda::escrow(&task),
            dispute,
            game: pda::game(&dispute, &defender, nonce),
            defender,
            defender_token,
            payout,
            token_program: token::ID,
            system_program: system_program::ID,
        },
        ix::Defend { nonce },
    )
}

/// The game of `defender` against `challenger`'s dispute number `nonce`.
#[derive(Clone, Copy, Debug)]
pub struct GameRef {
    /// The task.
    pub task: Pubkey,
    /// The dispute's challenger.
    pub challenger: Pubkey,
    /// The dispute's number (`Dispute.nonce`).
    pub nonce: u32,
    /// The defender.
    pub defender: Pubkey,
}

impl GameRef {
    /// The dispute's address.
    pub fn dispute(&self) -> Pubkey {
        pda::dispute(&self.task, &self.challenger)
    }

    /// The game's address.
    pub fn game(&self) -> Pubkey {
        pda::game(&self.dispute(), &self.defender, self.nonce)
    }
}

fn game_move(r: GameRef, mover: Pubkey) -> acc::GameMove {
    acc::GameMove {
        task: r.task,
        dispute: r.dispute(),
        game: r.game(),
        defender: r.defender,
        mover,
    }
}

/// `game_split` by the challenger: the roots inside the disputed range.
pub fn game_split(r: GameRef, roots: Vec<[u8; 32]>) -> Instruction {
    build(
        game_move(r, r.challenger),
        ix::GameSplit {
            nonce: r.nonce,
            roots,
        },
    )
}

/// `game_pick` by the defender: the segment it disputes.
pub fn game_pick(r: GameRef, segment: u8) -> Instruction {
    build(
        game_move(r, r.defender),
        ix::GamePick {
            nonce: r.nonce,
            segment,
        },
    )
}

/// `game_write` by the defender: `data` at `offset` of the game's buffer.
pub fn game_write(r: GameRef, offset: u16, data: Vec<u8>) -> Instruction {
    build(
        game_move(r, r.defender),
        ix::GameWrite {
            nonce: r.nonce,
            offset,
            data,
        },
    )
}

/// The accounts that end a game: the defender is paid to `payout` (or, when `payout_ata_mint`
/// is `Some(mint)`, its associated token account of it).
fn game_end(r: GameRef, payout: Pubkey, payout_ata_mint: Option<Pubkey>) -> acc::GameEnd {
    acc::GameEnd {
        task: r.task,
        escrow: pda::escrow(&r.task),
        dispute: r.dispute(),
        game: r.game(),
        challenger: r.challenger,
        defender: r.defender,
        payout,
        payout_ata: payout_ata_mint.map(|mint| {
            anchor_spl::associated_token::get_associated_token_address(&r.defender, &mint)
        }),
        token_program: token::ID,
    }
}

/// `game_feed` by the defender: piece `index` of `source` with `siblings` after it.
pub fn game_feed(r: GameRef, source: u8, index: u64, siblings: u8) -> Instruction {
    build(
        game_move(r, r.defender),
        ix::GameFeed {
            nonce: r.nonce,
            source,
            index,
            siblings,
        },
    )
}

/// `game_settle` by the defender (it signs), paid at `payout` if it wins (or, when
/// `payout_ata_mint` is `Some(mint)`, its associated token account of it): the step's leaf
/// `index` with `siblings` after it.
pub fn game_settle(
    r: GameRef,
    payout: Pubkey,
    payout_ata_mint: Option<Pubkey>,
    index: u64,
    siblings: u8,
) -> Instruction {
    let mut ix = build(
        game_end(r, payout, payout_ata_mint),
        ix::GameSettle {
            nonce: r.nonce,
            index,
            siblings,
        },
    );
    for m in ix.accounts.iter_mut() {
        if m.pubkey == r.defender {
            m.is_signer = true;
        }
    }
    ix
}

/// `game_timeout` (anyone), paying the defender at `payout` if it wins (or its associated
/// token account of `payout_ata_mint`).
pub fn game_timeout(r: GameRef, payout: Pubkey, payout_ata_mint: Option<Pubkey>) -> Instruction {
    build(
        game_end(r, payout, payout_ata_mint),
        ix::GameTimeout { nonce: r.nonce },
    )
}

/// `close_game` (anyone): `defender`'s game against dispute `dispute` (number `nonce`; its
/// challenger may be unknown, the dispute account closed), ended or moot; the bond back to
/// `payout` (or the defender's associated token account of `payout_ata_mint`).
pub fn close_game(
    task: Pubkey,
    dispute: Pubkey,
    nonce: u32,
    defender: Pubkey,
    payout: Pubkey,
    payout_ata_mint: Option<Pubkey>,
) -> Instruction {
    build(
        acc::CloseGame {
            task,
            escrow: pda::escrow(&task),
            dispute,
            game: pda::game(&dispute, &defender, nonce),
            defender,
            payout,
            payout_ata: payout_ata_mint.map(|mint| {
                anchor_spl::associated_token::get_associated_token_address(&defender, &mint)
            }),
            token_program: token::ID,
        },
        ix::CloseGame { nonce },
    )
}

/// `challenge_availability`: `challenger` bonds from `challenger_token` and names `tiles` of
/// `task`'s held Accepted result (the task posted at `posted_slot`, `Task.posted_slot`); the
/// account is number `nonce` (`Task.availability_nonce`).
pub fn challenge_availability(
    task: Pubkey,
    posted_slot: u64,
    nonce: u16,
    challenger: Pubkey,
    challenger_token: Pubkey,
    payout: Pubkey,
    tiles: Vec<u32>,
) -> Instruction {
    build(
        acc::ChallengeAvailability {
            task,
            escrow: pda::escrow(&task),
            availability: pda::availability(&task, posted_slot, nonce),
            challenger,
            challenger_token,
            payout,
            token_program: token::ID,
            system_program: system_program::ID,
        },
        ix::ChallengeAvailability {
            args: ChallengeArgs { tiles },
        },
    )
}

/// `contest_withheld`: the provider's `authority` contests `task`'s withheld verdict (the task
/// posted at `posted_slot`); the account is number `nonce` (`Task.availability_nonce`).
pub fn contest_withheld(
    task: Pubkey,
    posted_slot: u64,
    nonce: u16,
    authority: Pubkey,
) -> Instruction {
    build(
        acc::ContestWithheld {
            task,
            availability: pda::availability(&task, posted_slot, nonce),
            provider_node: pda::node(&authority),
            authority,
            system_program: system_program::ID,
        },
        ix::ContestWithheld {},
    )
}

/// `publish_write`: the provider's `authority` writes `data` at `offset` of the data area of
/// availability account `availability`.
pub fn publish_write(
    task: Pubkey,
    availability: Pubkey,
    authority: Pubkey,
    offset: u32,
    data: Vec<u8>,
) -> Instruction {
    build(
        acc::PublishWrite {
            task,
            availability,
            provider_node: pda::node(&authority),
            publisher: authority,
        },
        ix::PublishWrite { offset, data },
    )
}

/// `publish_prove`: chunk `chunk` of named tile `tile` (its index in the account) with its
/// `siblings`.
pub fn publish_prove(
    task: Pubkey,
    availability: Pubkey,
    authority: Pubkey,
    tile: u8,
    chunk: u8,
    siblings: Vec<[u8; 32]>,
) -> Instruction {
    let provider_node = pda::node(&authority);
    build(
        acc::PublishProve {
            task,
            escrow: pda::escrow(&task),
            availability,
            provider_node,
            provider_vault: pda::vault(&provider_node),
            publisher: authority,
            token_program: token::ID,
        },
        ix::PublishProve {
            tile,
            chunk,
            siblings,
        },
    )
}

/// `availability_timeout` (anyone) of `availability` of `task` (whose provider's node is
/// `provider_node`), returning its bond to `payout` (or, when `payout_ata_mint` is
/// `Some(mint)`, to `opener`'s associated token account of it).
pub fn availability_timeout(
    task: Pubkey,
    provider_node: Pubkey,
    availability: Pubkey,
    payout: Pubkey,
    opener: Pubkey,
    payout_ata_mint: Option<Pubkey>,
) -> Instruction {
    build(
        acc::AvailabilityTimeout {
            task,
            escrow: pda::escrow(&task),
            availability,
            payout,
            payout_ata: payout_ata_mint.map(|mint| {
                anchor_spl::associated_token::get_associated_token_address(&opener, &mint)
            }),
            provider_node,
            provider_vault: pda::vault(&provider_node),
            token_program: token::ID,
        },
        ix::AvailabilityTimeout {},
    )
}

/// `close_availability` by its `opener`.
pub fn close_availability(availability: Pubkey, opener: Pubkey) -> Instruction {
    build(
        acc::CloseAvailability {
            availability,
            opener,
        },
        ix::CloseAvailability {},
    )
}

/// `availability_grow`: its `opener` adds up to 10 KiB to `availability`.
pub fn availability_grow(availability: Pubkey, opener: Pubkey) -> Instruction {
    build(
        acc::AvailabilityGrow {
            availability,
            opener,
            system_program: system_program::ID,
        },
        ix::AvailabilityGrow {},
    )
}

/// The instructions that open an availability account of `tiles` tiles of `job` and grow it to
/// its full size, in one transaction (PROTOCOL §8.11): `open` (`challenge_availability` or
/// `contest_withheld`) for account `availability` of `opener`, then its grows.
pub fn opened_and_grown(
    open: Instruction,
    availability: Pubkey,
    opener: Pubkey,
    job: &compute_market_protocol::job::JobSpec,
    tiles: usize,
) -> Vec<Instruction> {
    let slot = compute_market_protocol::merkle::slot_len(job.tile_len());
    let mut ixs = vec![open];
    ixs.extend(
        (0..Availability::grows(tiles, slot)).map(|_| availability_grow(availability, opener)),
    );
    ixs
}
