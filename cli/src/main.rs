//! The `hilock` command: the dispatch. The clap definitions are in `args.rs`, the commands'
//! bodies in the modules, one per subject; the library is `hilock_runtime` (runtime/).

mod args;
mod bakery;
mod demo;
mod dump;
mod lock;
mod node;
mod ring;
mod run_under_lock;
mod spec;

use clap::Parser;
use std::process::ExitCode;

use args::{Cli, Command};
use lock::LockRequest;

pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))
}

pub fn init_logs(default: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a terminal: plain text in files and journals.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn main() -> ExitCode {
    // An empty variable is an unset one (`HILOCK_CLIENT_ID=` in a script means "none"),
    // not a value that fails to parse. Before any thread starts.
    for var in ["HILOCK_CLIENT_ID"] {
        if std::env::var_os(var).is_some_and(|v| v.is_empty()) {
            std::env::remove_var(var);
        }
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo {
            nodes,
            requests,
            seconds,
            cs_ms,
            ncs_ms,
            entries,
            seed,
            quiet,
            record,
        } => demo::command(
            nodes, requests, seconds, cs_ms, ncs_ms, entries, seed, quiet, record,
        ),
        Command::Node { config, id } => match node::node(&config, id) {
            Ok(node::Ended::Stopped(s)) => Ok((s, true)),
            Ok(node::Ended::LeaseLost(line)) => {
                eprintln!("hilock: error: {line}");
                return ExitCode::from(node::EXIT_STOPPED);
            }
            Err(e) => Err(e),
        },
        Command::RingNode {
            id,
            peers,
            membership,
        } => match hilock_runtime::ring::serve(id, &peers, membership) {
            Ok(hilock_runtime::ring::NodeEnd::Stopped(s)) => Ok((s, true)),
            // On its own (lease, service gone): as `hilock node` says it.
            Ok(hilock_runtime::ring::NodeEnd::Lost(line)) => {
                eprintln!("hilock: error: {line}");
                return ExitCode::from(node::EXIT_STOPPED);
            }
            Err(e) => Err(e),
        },
        Command::Ring { command } => ring::ring(command),
        Command::Lock {
            ref locks,
            txn,
            ref command,
            ..
        } if command.is_empty() || (!txn && locks.len() != 2) => {
            eprintln!(
                "hilock: error: {}; the command goes after `--`: hilock lock PATH MODE -- CMD \
                 ARGS… (or --txn PATH:MODE… -- CMD ARGS…)",
                if command.is_empty() {
                    "no command to run"
                } else {
                    "lock takes PATH MODE"
                }
            );
            return ExitCode::from(2);
        }
        Command::Lock {
            mut locks,
            txn,
            abort_on_deadlock,
            try_lock,
            signal_waiters,
            command,
            at,
            timeout_ms,
            priority,
            kill_grace_ms,
            client_id,
            take_over,
        } => match lock::lock(
            if txn {
                LockRequest::Txn {
                    locks,
                    abort_on_deadlock,
                }
            } else {
                let mode = locks.pop().unwrap_or_default();
                LockRequest::Lock {
                    path: locks.pop().unwrap_or_default(),
                    mode,
                    try_lock,
                    signal_waiters,
                }
            },
            &command,
            &at,
            timeout_ms,
            priority,
            kill_grace_ms,
            lock::RingId {
                client_id,
                take_over,
            },
        ) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::ExecGated { fd, command } => return run_under_lock::exec_gated(fd, &command),
        Command::LockWatchdog {
            pgid,
            deadline_ms,
            scratch,
        } => return run_under_lock::watchdog(pgid, deadline_ms, scratch.as_deref()),
        Command::Status {
            at,
            json,
            timeout_ms,
        } => node::status(&at, json, timeout_ms),
        Command::Dump(args) => return dump::run(args),
        Command::Bakery { command } => match bakery::bakery(command) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Spec { json } => spec::spec(json).map(|s| (s, true)),
        Command::Scenario { files, json } => spec::scenarios(&files, json),
        Command::Replay { file, svg, html } => {
            spec::replay(&file, svg.as_deref(), html.as_deref()).map(|s| (s, true))
        }
        Command::Check { file, out } => spec::check(&file, &out),
        Command::TraceCheck { files } => match hilock_runtime::token::trace::check(&files) {
            Ok(Ok(summary)) if summary.stopped.is_empty() => Ok((format!("{summary}\n"), true)),
            Ok(Ok(summary)) => {
                println!("{summary}");
                return ExitCode::from(3);
            }
            Ok(Err(rejection)) => Ok((format!("{rejection}\n"), false)),
            Err(e) => Err(e),
        },
        Command::Explore { file, port, trace } => {
            spec::explore(&file, port, trace.as_deref()).map(|s| (s, true))
        }
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
