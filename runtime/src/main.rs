//! The `hilock` command.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "hilock",
    version,
    about = "Peer-to-peer multi-mode hierarchical locking (Desai & Mueller), machine-checked"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the specification: modes, Tables 2.1–2.4 (literal and derived) and the rules.
    Spec {
        /// Print it as JSON (format hilock-spec/1).
        #[arg(long)]
        json: bool,
    },
    /// Run a scenario file through the kernel and print its trace; exit 1 if an expected
    /// state does not match, 2 if the file is malformed or inconsistent.
    Scenario {
        /// The scenario (JSON), e.g. spec/scenarios/fig-2.2-request-granting.json.
        file: PathBuf,
        /// Print the trace as JSON (format hilock-trace/1).
        #[arg(long)]
        json: bool,
    },
    /// Print a trace file (hilock-trace/1) step by step.
    Replay {
        /// The trace (JSON).
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Spec { json } => hilock::cli::spec(json).map(|s| (s, true)),
        Command::Scenario { file, json } => hilock::cli::scenario(&file, json),
        Command::Replay { file } => hilock::cli::replay(&file).map(|s| (s, true)),
    };
    match result {
        Ok((text, ok)) => {
            print!("{text}");
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("hilock: error: {e}");
            ExitCode::from(2)
        }
    }
}
