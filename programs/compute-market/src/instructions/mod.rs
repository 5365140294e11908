//! One module per instruction: its accounts, its `validate()` (run through
//! `#[access_control]`) and its `handler`.
#![allow(ambiguous_glob_reexports)]

pub mod apply_params;
pub mod cancel_task;
pub mod claim_earnings;
pub mod claim_task;
pub mod close_node;
pub mod close_task;
pub mod commit_vote;
pub mod create_market;
pub mod draw_seed;
pub mod expire_task;
pub mod finalize_task;
pub mod initialize_config;
pub mod join_task;
pub mod post_task;
pub mod propose_params;
pub mod reclaim_task;
pub mod register_node;
pub mod request_unstake;
pub mod reveal_vote;
pub mod settle_vote;
pub mod stake;
pub mod submit_result;
pub mod sweep_fees;
pub mod sync_stake;
pub mod withdraw;

pub use apply_params::*;
pub use cancel_task::*;
pub use claim_task::*;
pub use close_node::*;
pub use close_task::*;
pub use commit_vote::*;
pub use create_market::*;
pub use draw_seed::*;
pub use expire_task::*;
pub use finalize_task::*;
pub use initialize_config::*;
pub use join_task::*;
pub use post_task::*;
pub use propose_params::*;
pub use reclaim_task::*;
pub use register_node::*;
pub use request_unstake::*;
pub use reveal_vote::*;
pub use settle_vote::*;
pub use stake::*;
pub use submit_result::*;
pub use sweep_fees::*;
pub use sync_stake::*;
pub use withdraw::*;
