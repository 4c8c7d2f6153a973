//! `hilock bakery …`: the bakery lock and work queue over redis-server replicas.

use clap::Subcommand;
use std::process::ExitCode;

use crate::runtime;

#[allow(clippy::too_many_arguments)]
#[derive(Subcommand, Debug)]
pub enum BakeryCommand {
    /// Hold the bakery lock NAME while a command runs, renewing its lease; the fencing
    /// token (the ticket) is in the command's environment as HILOCK_FENCE. Exits with the
    /// command's status; 2 (and one line on stderr) if the lock is not granted in time or
    /// its lease runs out while the command runs (the command is killed then).
    Lock {
        /// The lock's name.
        name: String,
        /// The redis-server replicas, host:port,... (1 to 7; quorums are majorities).
        #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:6379")]
        replicas: Vec<String>,
        /// This client's id, 1..=31; no two running clients may share one.
        #[arg(long, env = "HILOCK_CLIENT_ID")]
        client_id: u16,
        /// The lease: others pass an entry that stops changing 1.3 leases after they saw it.
        #[arg(long, default_value_t = 2000)]
        lease_ms: u64,
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 10000)]
        timeout_ms: u64,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// The bakery design's work queue over the same redis-server replicas.
    Queue {
        #[command(subcommand)]
        command: QueueCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum QueueCommand {
    /// Enqueue ITEM (any text, up to 1 MiB) in the queue NAME; prints the item's key.
    Push {
        /// The queue's name.
        name: String,
        /// What the item asks for (a worker's command gets it as HILOCK_ITEM).
        item: String,
        /// The redis-server replicas, host:port,... (1 to 7; waits for a majority).
        #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:6379")]
        replicas: Vec<String>,
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 10000)]
        timeout_ms: u64,
    },
    /// Take items of the queue NAME one after the other and run the command for each
    /// (HILOCK_ITEM = the item, HILOCK_ITEM_KEY, HILOCK_FENCE = the fencing token), renewing
    /// the lease; an item is removed when the command exits 0. A failing command stops the
    /// worker with its status (the item is taken over by another worker after the lease).
    Work {
        /// The queue's name.
        name: String,
        /// The redis-server replicas, host:port,... (1 to 7; quorums are majorities).
        #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:6379")]
        replicas: Vec<String>,
        /// This worker's id, 1..=31; no two running workers (or lock clients of the
        /// same replicas' queue) may share one.
        #[arg(long, env = "HILOCK_CLIENT_ID")]
        client_id: u16,
        /// The lease of the item being worked on.
        #[arg(long, default_value_t = 2000)]
        lease_ms: u64,
        /// Stop after this many items.
        #[arg(long)]
        max_items: Option<u64>,
        /// Stop (exit 0) when no item is pending: none waiting and none being worked on.
        #[arg(long)]
        exit_when_empty: bool,
        /// Give up (exit 2) when no item could be taken for this many milliseconds.
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

fn bakery_queue(command: QueueCommand) -> Result<ExitCode, String> {
    let ms = std::time::Duration::from_millis;
    match command {
        QueueCommand::Push {
            name,
            item,
            replicas,
            timeout_ms,
        } => {
            let key = runtime()?.block_on(hilock_runtime::bakery::queue::push_command(
                &name,
                &replicas,
                &item,
                ms(timeout_ms),
            ))?;
            println!("{key}");
            Ok(ExitCode::SUCCESS)
        }
        QueueCommand::Work {
            name,
            replicas,
            client_id,
            lease_ms,
            max_items,
            exit_when_empty,
            timeout_ms,
            command,
        } => {
            let opts = hilock_runtime::bakery::Options {
                lease: ms(lease_ms),
                ..hilock_runtime::bakery::Options::new(client_id)
            };
            let limits = hilock_runtime::bakery::queue::WorkLimits {
                max_items,
                exit_when_empty,
                wait: timeout_ms.map(ms),
            };
            let code = runtime()?.block_on(hilock_runtime::bakery::queue::work_command(
                &name, &replicas, opts, limits, &command,
            ))?;
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
    }
}

pub fn bakery(command: BakeryCommand) -> Result<ExitCode, String> {
    let (name, replicas, client_id, lease_ms, timeout_ms, command) = match command {
        BakeryCommand::Lock {
            name,
            replicas,
            client_id,
            lease_ms,
            timeout_ms,
            command,
        } => (name, replicas, client_id, lease_ms, timeout_ms, command),
        BakeryCommand::Queue { command } => return bakery_queue(command),
    };
    let opts = hilock_runtime::bakery::Options {
        lease: std::time::Duration::from_millis(lease_ms),
        ..hilock_runtime::bakery::Options::new(client_id)
    };
    let timeout = std::time::Duration::from_millis(timeout_ms);
    // One thread: the command's parent-death signal is tied to the thread that starts it
    // (`hilock_runtime::proc::own_group_with_parent_death`), which must live as long as
    // the wrapper.
    let code = crate::lock::current_thread()?.block_on(
        hilock_runtime::bakery::lock::run_command(&name, &replicas, opts, timeout, &command),
    )?;
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}
