//! The `human-plus` command. See `human-plus --help`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = human_plus_cli::args::Cli::parse();
    ExitCode::from(human_plus_cli::run(cli))
}
