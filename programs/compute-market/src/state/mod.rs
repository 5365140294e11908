//! Account types. Each is one PDA (PROTOCOL §2); none holds an unbounded vector.
pub mod availability;
pub mod config;
pub mod dispute;
pub mod game;
pub mod market;
pub mod node;
pub mod task;
pub mod vote;

pub use availability::*;
pub use config::*;
pub use dispute::*;
pub use game::*;
pub use market::*;
pub use node::*;
pub use task::*;
pub use vote::*;
