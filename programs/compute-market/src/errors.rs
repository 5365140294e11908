//! Every refusal of the program, by name.
use anchor_lang::prelude::*;

/// Errors of the Compute Market program.
#[error_code]
pub enum MarketError {
    #[msg("a parameter is outside its hard-coded bound")]
    ParamOutOfBounds,
    #[msg("the split of a rejected provider's slash must not exceed 100%")]
    SlashSplitInvalid,
    #[msg("the unstake cooldown must exceed twice the longest task lifetime of every market")]
    CooldownTooShort,
    #[msg("the update delay is outside its bound")]
    UpdateDelayOutOfBounds,
    #[msg("no parameter update is pending")]
    NoPendingUpdate,
    #[msg("the parameter update delay has not passed")]
    UpdateNotYetEffective,
    #[msg("quorum V must be odd and within 1..=15")]
    QuorumInvalid,
    #[msg("samples k must be within 1..=256")]
    SamplesOutOfBounds,
    #[msg("a window is outside its bound")]
    WindowOutOfBounds,
    #[msg("name is longer than 32 bytes")]
    NameTooLong,
    #[msg("roles must be provider, verifier or both")]
    InvalidRoles,
    #[msg("the node's declared hardware is below the market's minimum")]
    HardwareBelowMarketMinimum,
    #[msg("amount must be greater than zero")]
    ZeroAmount,
    #[msg("reward must be greater than zero")]
    ZeroReward,
    #[msg("not enough free stake")]
    InsufficientFreeStake,
    #[msg("nothing is pending unstake")]
    NothingToWithdraw,
    #[msg("the unstake cooldown has not passed")]
    CooldownNotElapsed,
    #[msg("no earnings to claim")]
    NoEarnings,
    #[msg("no fees to sweep")]
    NoFees,
    #[msg("the node still holds stake, earnings or fees")]
    NodeNotEmpty,
    #[msg("token account mint is not the stake mint")]
    WrongMint,
    #[msg("token account is not the expected account")]
    WrongTokenAccount,
    #[msg("signer is not the account's authority")]
    WrongAuthority,
    #[msg("the account belongs to another market")]
    WrongMarket,
    #[msg("the account belongs to another task")]
    WrongTask,
    #[msg("the node is not this task's provider")]
    NotTaskProvider,
    #[msg("the node does not have the provider role")]
    NotAProvider,
    #[msg("the node does not have the verifier role")]
    NotAVerifier,
    #[msg("job spec is invalid: unknown version, kind or input mode, a reserved byte set, or a dimension out of range")]
    InvalidJobSpec,
    #[msg("URI is longer than 128 bytes")]
    UriTooLong,
    #[msg("URI must not be empty")]
    UriEmpty,
    #[msg("a content-hash job needs an input URI")]
    MissingInputUri,
    #[msg("result root must not be all zeros")]
    EmptyResultRoot,
    #[msg("task is not open")]
    TaskNotOpen,
    #[msg("task is not claimed")]
    TaskNotClaimed,
    #[msg("task is not in verification")]
    TaskNotVerifying,
    #[msg("task is not finished")]
    TaskNotFinished,
    #[msg("task has not expired yet")]
    TaskNotExpired,
    #[msg("task has expired")]
    TaskExpired,
    #[msg("the submit deadline has passed")]
    SubmitDeadlinePassed,
    #[msg("the submit deadline has not passed")]
    SubmitDeadlineNotPassed,
    #[msg("the seed is already drawn")]
    SeedAlreadyDrawn,
    #[msg("no slot after the reference slot is in SlotHashes yet")]
    SeedNotReady,
    #[msg("the SlotHashes sysvar could not be read")]
    BadSlotHashes,
    #[msg("the join window is closed")]
    JoinWindowClosed,
    #[msg("all seats are taken")]
    SeatsFull,
    #[msg("the provider cannot verify its own task")]
    ProviderCannotVerify,
    #[msg("the client cannot verify its own task")]
    ClientCannotVerify,
    #[msg("the verifier is not eligible for a seat under this seed")]
    NotEligibleForSeat,
    #[msg("the vote belongs to another round")]
    WrongRound,
    #[msg("the commit window is closed")]
    CommitWindowClosed,
    #[msg("the vote is already committed")]
    VoteAlreadyCommitted,
    #[msg("commitment must not be all zeros")]
    EmptyCommitment,
    #[msg("the reveal phase has not started")]
    RevealNotOpen,
    #[msg("the reveal window is closed")]
    RevealWindowClosed,
    #[msg("the vote was not committed")]
    VoteNotCommitted,
    #[msg("the vote is already revealed")]
    VoteAlreadyRevealed,
    #[msg("vote must be 1 (valid) or 2 (invalid)")]
    InvalidVoteValue,
    #[msg("the reveal does not match the commitment")]
    CommitmentMismatch,
    #[msg("the task cannot be finalized yet")]
    FinalizeTooEarly,
    #[msg("the vote's round is not settled yet")]
    VoteNotSettleable,
    #[msg("losing votes must be settled before majority votes are paid")]
    SlashesPending,
    #[msg("votes are still unsettled")]
    VotesOutstanding,
    #[msg("the provider's accounts are required")]
    MissingProviderAccounts,
    #[msg("arithmetic overflow")]
    MathOverflow,
    #[msg("unstake cooldown above the hard bound (MAX_UNSTAKE_COOLDOWN)")]
    CooldownTooLong,
    #[msg("an unstake is already pending: withdraw it after its cooldown before requesting more")]
    UnstakeAlreadyPending,
    #[msg("only the program's upgrade authority may initialize the config")]
    NotUpgradeAuthority,
    #[msg("the stake mint has a freeze authority (it could freeze vaults and escrows)")]
    MintHasFreezeAuthority,
    #[msg("the node registered at or after the round's stake snapshot")]
    NodeRegisteredAfterSnapshot,
    #[msg("the node had no stake in place before the round's stake snapshot")]
    StakeNotInSnapshot,
    #[msg("the seat is held by a better ticket")]
    TicketNotBetterThanSeated,
    #[msg("the displaced seat's vote, node and authority accounts are required")]
    MissingDisplacedAccounts,
    #[msg("the displaced accounts are not those of the seat's holder")]
    WrongDisplacedSeat,
    #[msg("the escrow holds tokens beyond the refund: the treasury account is required")]
    TreasuryRequired,
    #[msg("not the config's treasury")]
    WrongTreasury,
    #[msg("the node owes no stake debt to its market")]
    NoStakeDebt,
    #[msg("the client's refund account is closed: pass the client's associated token account (create it first)")]
    ClientRefundAccountClosed,
    #[msg("the quorum is below the market's minimum quorum (min_quorum): one seat must not decide a task")]
    QuorumBelowMarketMinimum,
    #[msg("the join window is longer than MAX_JOIN_WINDOW (500 slots, under the SlotHashes horizon): a late draw could re-roll the seed")]
    JoinWindowTooLong,
    #[msg("no such seat in this round (seat index at or above its quorum)")]
    SeatOutOfRange,
    #[msg("this node already holds that seat")]
    SeatAlreadyHeld,
    #[msg("the slot the seed comes from has left SlotHashes")]
    SeedSlotAgedOut,
    #[msg("this verdict cannot be disputed (only an Accepted one by kind 1, a Rejected-by-INVALID one by kind 2, while its money is held)")]
    NotDisputable,
    #[msg("a dispute already overturned this verdict")]
    VerdictOverturned,
    #[msg("the dispute window has closed")]
    DisputeWindowClosed,
    #[msg("the program does not referee this job in this market: an Encoder of odd width, a job whose manifest names no slices of its inputs, one whose dispute or game would not fit the window, or a text whose trace is over 64 MiB")]
    DisputeNotSupported,
    #[msg("no such element: tile at or above the tile count, or element at or above the tile's elements")]
    ElementOutOfRange,
    #[msg("dispute kind must be 1 (the result is wrong) or 2 (the INVALID claims are false)")]
    InvalidDisputeKind,
    #[msg("the dispute is still arguing another vote")]
    TargetPending,
    #[msg("the dispute has no vote to refute: call dispute_target first")]
    NoTarget,
    #[msg("not a revealed INVALID vote of the deciding round")]
    NotAnInvalidVote,
    #[msg("that vote's claim is already refuted")]
    VoteAlreadyRefuted,
    #[msg("the proof does not fit the dispute's buffer (one chunk and at most 32 siblings)")]
    ProofTooLong,
    #[msg("the chunk and its siblings do not lead to the result root")]
    ProofMismatch,
    #[msg("the element's committed value is not proven yet: dispute_prove first")]
    NotProven,
    #[msg("the element's committed value is already proven")]
    AlreadyProven,
    #[msg("the challenger's answer deadline has passed")]
    DisputeExpired,
    #[msg("the challenger's answer deadline has not passed")]
    DisputeNotExpired,
    #[msg("another dispute already overturned the verdict: close this one with close_dispute (its bond comes back)")]
    DisputeMoot,
    #[msg("the dispute cannot be closed yet (a won one waits for every vote to settle; an open one for its end)")]
    DisputeNotClosable,
    #[msg("a dispute of this task is still open")]
    DisputeOpen,
    #[msg("the dispute window is still open")]
    DisputeWindowOpen,
    #[msg("the verdict's money is held for the dispute window: conclude_task first")]
    TaskNotConcluded,
    #[msg("the task's verdict is already concluded")]
    AlreadyConcluded,
    #[msg("the manifest written is not the job's input: its SHA-256 differs")]
    InputsMismatch,
    #[msg("the job's manifest does not name the slices of its parts (a version-1 manifest, or slices of the wrong length): its inputs cannot be proven, so the program cannot referee this job")]
    InputsNotSliced,
    #[msg("the job's inputs are not proven yet: dispute_inputs first")]
    InputsNotProven,
    #[msg("not the input chunk the recomputation needs next")]
    WrongChunk,
    #[msg("the element needs no more input chunks")]
    FeedComplete,
    #[msg("the proven input slices break the job's rules (a matrix value not below p, or a model outside PROTOCOL §5's bounds or not the job's)")]
    InputsBreakRules,
    #[msg(
        "this element is recomputed from the client's inputs: dispute_inputs, then dispute_feed"
    )]
    NeedsInputs,
    #[msg("this element is refereed by a game over a claimed trace (PROTOCOL §8.10): dispute_layout, dispute_claim, then defenders play")]
    NeedsGame,
    #[msg("the model's header is not read yet: dispute_layout first")]
    NotLaidOut,
    #[msg("the element's trace is already claimed")]
    AlreadyClaimed,
    #[msg("the element's trace is not claimed yet: dispute_claim first")]
    NotClaimed,
    #[msg("the claimed trace gives the element the value the dispute's kind contradicts (kind 1 must differ from the committed value, kind 2 equal it)")]
    ClaimContradicts,
    #[msg("too late to claim: the games could not end before the dispute's answer deadline")]
    ClaimTooLate,
    #[msg("defenders may no longer join this dispute's games")]
    DefenceClosed,
    #[msg("a challenger cannot defend against its own claim")]
    OwnClaim,
    #[msg("not this party's turn in the game")]
    NotYourTurn,
    #[msg("the turn's deadline has passed: game_timeout ends the game")]
    TurnExpired,
    #[msg("the turn's deadline has not passed")]
    TurnNotExpired,
    #[msg("a split posts one root for each inner point of its segments")]
    WrongSplit,
    #[msg("no such segment in the last split")]
    WrongSegment,
    #[msg("the game is not at its one step: split and pick first")]
    NotReplaying,
    #[msg("a game of this dispute is still being played")]
    GamesOpen,
    #[msg("the game is still being played: it closes when it ends, or when its dispute ends or is moot")]
    GameNotClosable,
    #[msg("defenders may still join: resolve after the defence deadline")]
    DefenceOpen,
    #[msg("the game's dispute has ended (or the account at its address is another dispute): close_game returns the bond")]
    GameNotInPlay,
    #[msg("the replay's next piece is the step's own leaf, which ends the game: game_settle")]
    SettleTheStep,
    #[msg("a node's endpoint is empty or an http(s) base URL of at most 56 printable ASCII bytes, without user info, query or fragment")]
    EndpointInvalid,
    #[msg(
        "availability challenges are opened against a held Accepted verdict only (PROTOCOL §8.11)"
    )]
    NotChallengeable,
    #[msg("this job cannot be challenged for availability in this market: one tile's slot does not fit the bounds or half the dispute window (PROTOCOL §8.11)")]
    AvailabilityNotSupported,
    #[msg("name 1 to max_tiles tiles, distinct, increasing, each below the tile count (availability::max_tiles)")]
    TilesInvalid,
    #[msg("too many availability challenges are open on this task: wait for one to end")]
    TooManyChallenges,
    #[msg("only a withheld verdict (majority 3) held for its window is contested")]
    NotContestable,
    #[msg("the withheld verdict was already contested")]
    AlreadyContested,
    #[msg("only the task's provider publishes its result")]
    NotThePublisher,
    #[msg("the write falls outside the data area, or names no tile or chunk of it")]
    OutOfRange,
    #[msg("that chunk is already proven: it cannot be written again")]
    ChunkAlreadyProven,
    #[msg("the availability account is no longer open")]
    AvailabilityClosed,
    #[msg("its answer deadline has passed")]
    AvailabilityExpired,
    #[msg("its answer deadline has not passed yet")]
    AvailabilityNotExpired,
    #[msg("it is still open: close it once answered, failed or moot")]
    AvailabilityOpen,
    #[msg("an availability challenge or contest of this task is still open")]
    ChallengeOpen,
    #[msg("the availability account is not grown to its full size yet: its opener sends availability_grow (10 KiB each) in the opening transaction")]
    AvailabilityNotSized,
    #[msg("an availability account grows only in its opening transaction's slot")]
    GrowTooLate,
}
