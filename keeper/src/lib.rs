//! # compute-market-keeper
//!
//! What providers, verifiers and crankers run: compute backends ([`compute`]), the result
//! commitment and the verifier's checks ([`verify`], leaf hashing in [`leaves`]), chain access ([`chain`]), result serving
//! ([`tiles`]), the roles ([`roles`]), the embedded-cluster demo ([`demo`]), benchmarks
//! ([`bench`]) and the GPU check ([`gpucheck`]).
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
pub mod demo;
pub mod deploy;
pub mod gpucheck;
pub mod http;
pub mod leaves;
pub mod metrics;
pub mod roles;
pub mod store;
pub mod tiles;
pub mod verify;
