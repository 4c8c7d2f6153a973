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
    /// Run scenario files through the kernel and print their traces; exit 1 if an expected
    /// state does not match, 2 if a file is malformed or inconsistent.
    Scenario {
        /// The scenarios (JSON), e.g. spec/scenarios/*.json.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print the trace as JSON (format hilock-trace/1).
        #[arg(long)]
        json: bool,
    },
    /// Print a trace file (hilock-trace/1) step by step.
    Replay {
        /// The trace (JSON).
        file: PathBuf,
    },
    /// Check a model configuration exhaustively (progress on stderr); exit 1 and write the
    /// counterexample traces if a property fails.
    Check {
        /// The model configuration (JSON), e.g. models/configs/star3-r-w.json.
        file: PathBuf,
        /// Where to write counterexample traces.
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// Serve the Stateright Explorer for a model configuration on 127.0.0.1.
    Explore {
        /// The model configuration (JSON).
        file: PathBuf,
        /// The port.
        #[arg(long, default_value_t = 3000)]
        port: u16,
    },
}

fn scenarios(files: &[PathBuf], json: bool) -> Result<(String, bool), String> {
    if json && files.len() > 1 {
        return Err("--json prints one trace: give exactly one scenario file".into());
    }
    let mut text = String::new();
    let mut all = true;
    let mut summary = Vec::new();
    for f in files {
        let (t, ok) = hilock::cli::scenario(f, json)?;
        text.push_str(&t);
        all &= ok;
        summary.push(format!(
            "{} {}",
            if ok { "PASS" } else { "FAIL" },
            f.display()
        ));
    }
    if files.len() > 1 {
        text.push_str(&format!(
            "\n{} scenarios:\n  {}\n",
            files.len(),
            summary.join("\n  ")
        ));
    }
    Ok((text, all))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Spec { json } => hilock::cli::spec(json).map(|s| (s, true)),
        Command::Scenario { files, json } => scenarios(&files, json),
        Command::Replay { file } => hilock::cli::replay(&file).map(|s| (s, true)),
        Command::Check { file, out } => hilock::cli::check(&file, &out),
        Command::Explore { file, port } => hilock::cli::explore(&file, port).map(|s| (s, true)),
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
