//! # compute-market-protocol
//!
//! The rules that the on-chain program and every off-chain role (provider, verifier, cranker)
//! must compute identically, written once:
//!
//! * [`job`]: the canonical 64-byte job-spec encoding, its validation and tile geometry;
//! * [`merkle`]: the result commitment, BLAKE3 of the output with tiles as subtrees, tile
//!   proofs and (on-chain too) the chunk proofs of disputes;
//! * [`availability`]: what an availability challenge or contest names and publishes;
//! * [`dispute`]: what a dispute proves and recomputes: elements of a tile, their place in the
//!   committed string, the one-step recomputation, INVALID votes' pointers;
//! * [`infer`] (host only): integer-only inference — the accumulator bound, the
//!   requantization rule, the class tie rule, the output layout and a reference forward pass;
//! * [`lazy`] (host only): the lazy voter's expected loss under disputes, by simulation;
//! * [`manifest`]: the canonical input manifest of a job on the client's own data;
//! * [`slices`]: inputs by slices, the layout of each input part the program proves slices of;
//! * [`feed`]: one element of a job on the client's data recomputed from proven slices, one
//!   chunk at a time (on-chain too);
//! * [`trace`]: bisection over a claimed trace of one `Mlp` row: its memory layout and
//!   commitment, split points, and the replay of one step (on-chain too);
//! * [`commit`]: vote commitments and the verification seed;
//! * [`seats`]: stake-weighted seat sortition (tickets, scores, eligibility, displacement);
//! * [`region`]: region codes and the distance providers rank tasks by;
//! * [`sampling`]: per-verifier sample indices, Freivalds vectors and vote evidence;
//! * [`hash`]: SHA-256 (the `sol_sha256` syscall on-chain, `sha2` on the host).
//!
//! Public keys are plain `[u8; 32]` so that this crate depends on nothing Solana-specific
//! except the hasher; it compiles for SBF and for the host (the model formats and references only
//! for the host).
//!
//! "PROTOCOL §n" in this crate's comments is section n of `docs/PROTOCOL.md` in this
//! repository.
#![deny(missing_docs)]

pub mod availability;
pub mod commit;
#[cfg(not(target_os = "solana"))]
pub mod decoder;
pub mod dispute;
#[cfg(not(target_os = "solana"))]
pub mod encoder;
pub mod feed;
pub mod hash;
#[cfg(not(target_os = "solana"))]
pub mod infer;
pub mod job;
#[cfg(not(target_os = "solana"))]
pub mod lazy;
pub mod manifest;
pub mod merkle;
pub mod region;
pub mod sampling;
pub mod seats;
pub mod slices;
pub mod trace;

/// The prime of `MatMulModP`: 2^31 − 1 (a Mersenne prime).
pub const P: u64 = (1 << 31) - 1;
