//! `keeper`: the Compute Market daemon and CLI. A shell over the `compute_market_keeper`
//! library: parse the command line, start logging, run one command (`command/`, one file
//! each), print the error if any.

mod command;
mod context;

use clap::Parser;

fn main() {
    let cli = command::Cli::parse();
    let daemon = matches!(
        cli.command,
        command::Command::Run(_) | command::Command::Serve(_) | command::Command::Faucet(_)
    );
    context::init_logging(cli.verbose, daemon);
    if let Err(e) = cli.execute() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
