//! `slidegate-serve`: the decision service on its own, with the options of `slidegate serve`
//! (`slidegate-serve --rules rules.toml`); the crate's documentation says what it serves.

use std::process::ExitCode;

use clap::Parser;

/// Serve rate-limit decisions over HTTP/JSON and Envoy's rate limit gRPC API, from a rules
/// file reloaded when it changes (docs/serve.md).
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(flatten)]
    serve: slidegate_serve::Args,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match slidegate_serve::run(&cli.serve) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
