//! # compute-market-keeper
//!
//! What providers, verifiers and crankers run: compute backends ([`compute`]), the result
//! commitment and the verifier's checks ([`verify`], leaf hashing in [`leaves`]), chain access
//! ([`chain`]), results — their store, wire format, HTTP server and client ([`results`]) —,
//! the crash-safe database ([`db`]), the roles ([`roles`]), the daemon ([`daemon`]), the
//! embedded-cluster demo ([`demo`]), benchmarks ([`bench`]) and the GPU check ([`gpucheck`]).
//!
//! "PROTOCOL §n" in this crate's comments is section n of `docs/PROTOCOL.md` in this
//! repository.
#![deny(missing_docs)]

pub mod bench;
pub mod chain;
pub mod cli;
pub mod compute;
pub mod config;
pub mod daemon;
pub mod db;
pub mod demo;
pub mod deploy;
pub mod gpucheck;
pub mod leaves;
pub mod metrics;
pub mod results;
pub mod roles;
pub mod verify;
