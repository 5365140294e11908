//! # compute-market-keeper
//!
//! What providers, verifiers and crankers run, as a library; the `keeper` binary
//! (`src/bin/keeper/`) is a thin shell over it: one file per command that calls these modules
//! and alone prints their typed results.
//!
//! # Layout
//!
//! Lower layers never import higher ones (`scripts/module-cycles` checks that there is no
//! cycle at all):
//!
//! * [`compute`] — the [`compute::Backend`] trait, the CPU reference, CUDA, backend selection
//!   ([`compute::device`]), the verifier's streaming Freivalds kernels; [`verify`] — the
//!   commitment (BLAKE3, `compute_market_protocol::merkle`) and the verifier's checks.
//! * [`results`] — the content-addressed result store, its wire format, HTTP server and client;
//!   [`db`] — the crash-safe database (sealed votes, served results); [`metrics`].
//! * [`chain`] — one [`chain::Chain`] trait over RPC or the embedded cluster, plus metered and
//!   fault-injecting wrappers.
//! * [`roles`] — provider, verifier, cranker: each a pass over the chain and a backend.
//! * [`daemon`] — `keeper run` (roles, HTTP, store, shutdown passed in); [`cli`] and
//!   [`deploy`] — the client operations and `keeper init`/`fund`, typed results; [`config`] —
//!   the config file and keypairs; [`faucet`] — `keeper faucet`, stake tokens over HTTP on
//!   local and dev clusters; [`card`] and [`outlook`] — a provider's published card
//!   and what a client reads of the cards (whether a job will be taken, why a task waits); [`demo`], [`bench`](mod@bench), [`gpucheck`] — the embedded-cluster
//!   scenario, the benchmarks and the GPU check, each with its report.
//!
//! "PROTOCOL §n" in this crate's comments is section n of `docs/PROTOCOL.md` in this
//! repository.
#![deny(missing_docs)]

pub mod amount;
pub mod bench;
pub mod card;
pub mod chain;
pub mod cli;
pub mod clientdata;
pub mod compute;
pub mod config;
pub mod daemon;
pub mod db;
pub mod demo;
pub mod deploy;
pub mod dispute;
pub mod faucet;
pub mod gpucheck;
pub mod metrics;
pub mod outlook;
pub mod results;
pub mod roles;
pub mod verify;
