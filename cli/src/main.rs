//! `slidegate`: the command-line tool (its parts are in the crate's library, `lib.rs`).
//!
//! `slidegate simulate` (also what a bare `slidegate` runs) replays a trace — a CSV file or a
//! built-in generator — through every algorithm slidegate has, each on its own keyed limiter
//! on a simulated clock, and compares each with the exact sliding log: a table of admitted,
//! wrongly allowed and wrongly denied requests, the worst window, memory per key and
//! decisions per second, and an SVG chart of the admitted rate over time against the limit.
//!
//! ```sh
//! cargo run --release -- simulate
//! cargo run --release -- simulate --scenario boundary --limit 10 --window 1s
//! cargo run --release -- simulate --trace requests.csv --limit 100 --window 60s
//! ```

use std::io;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use slidegate_cli::Failure;
use slidegate_cli::simulate::{Simulate, simulate};

/// slidegate's command-line tool: see what each rate-limiting algorithm admits on your traffic.
///
/// Without a command, runs `slidegate simulate` (its options may be given too).
#[derive(Debug, Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// `simulate`'s options, for a bare `slidegate`.
    #[command(flatten)]
    simulate: Simulate,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay traffic through every algorithm and compare each with the exact sliding log
    /// (the default command).
    Simulate(Simulate),
    /// Serve rate-limit decisions over HTTP/JSON and Envoy's rate limit gRPC API, from a
    /// rules file reloaded when it changes (docs/serve.md).
    Serve(slidegate_serve::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = io::stdout().lock();
    // A bare `slidegate` is `slidegate simulate`.
    let result = match cli.command {
        Some(Command::Simulate(args)) => simulate(&args, &mut out),
        Some(Command::Serve(args)) => slidegate_serve::run(&args).map_err(Failure::other),
        None => simulate(&cli.simulate, &mut out),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if let Some(message) = f.message {
                eprintln!("error: {message}");
            }
            ExitCode::from(f.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
