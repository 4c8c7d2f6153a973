//! `hilock ring …`: the ring engine's membership service, joins, graceful leaves and
//! status.

use clap::Subcommand;
use std::path::PathBuf;

use crate::init_logs;

/// `hilock ring …`.
#[derive(Subcommand, Debug)]
pub enum RingCommand {
    /// Run the ring's membership service (the `[ring]` table of the file: its address, the
    /// first view, the lease) until Ctrl-C or SIGTERM.
    Membership {
        /// The configuration file (TOML, `engine = "ring"`).
        #[arg(long)]
        config: PathBuf,
    },
    /// Ask the membership service to let slot ID join (its node must be running: `hilock
    /// node --config F --id ID`) and wait until the new view is settled: every node of the
    /// change installed it and holds every entry it must. Exit 2 (one line) on timeout, and
    /// at once for a slot the `--config` file has no node for.
    Join {
        /// The slot.
        #[arg(long)]
        id: u16,
        #[command(flatten)]
        at: RingAt,
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
    },
    /// Ask the membership service for the graceful leave of slot ID (its entries are
    /// handed over while clients hold locks; its process exits once the change is done)
    /// and wait until the new view is settled. Exit 2 (one line) on timeout, and at once for
    /// a slot the `--config` file has no node for.
    Leave {
        /// The slot.
        #[arg(long)]
        id: u16,
        #[command(flatten)]
        at: RingAt,
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
    },
    /// Print the ring: the view (epoch, members), each slot's identifier, the key range it
    /// serves as primary, that range's replica set, and what each node reports (its view,
    /// its entries).
    Status {
        /// The configuration file (TOML, `engine = "ring"`).
        #[arg(long)]
        config: PathBuf,
        /// Print JSON (format hilock-ring-status/1).
        #[arg(long)]
        json: bool,
        /// Wait at most this many milliseconds for each answer.
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
    },
}

/// Where the ring's membership service is.
#[derive(clap::Args, Debug)]
pub struct RingAt {
    /// The configuration file (its `[ring]` table's `membership`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// …or the membership service's address.
    #[arg(long, conflicts_with = "config")]
    membership: Option<std::net::SocketAddr>,
}

/// The `[ring]` table of `cfg`, read from `file`.
fn ring_of(
    cfg: hilock_runtime::Config,
    file: &std::path::Path,
) -> Result<hilock_runtime::config::RingConfig, String> {
    cfg.ring.ok_or_else(|| {
        format!(
            "{}: not a ring configuration (engine = \"ring\" and a [ring] table)",
            file.display()
        )
    })
}

impl RingAt {
    /// The membership service to ask for a change of slot `id`. With `--config`, a slot
    /// the file has no node for is refused at once: no node of the file can run in it, so
    /// the change would only wait out the timeout.
    fn membership_for(&self, id: u16) -> Result<std::net::SocketAddr, String> {
        match (&self.config, self.membership) {
            (_, Some(m)) => Ok(m),
            (Some(c), None) => {
                let cfg = hilock_runtime::Config::from_file(c, Some(0))?;
                let n = cfg.nodes.len();
                let ring = ring_of(cfg, c)?;
                if usize::from(id) >= n {
                    return Err(format!(
                        "--id {id}: {} has no slot {id} (its nodes are slots 0 to {})",
                        c.display(),
                        n - 1
                    ));
                }
                Ok(ring.membership)
            }
            (None, None) => Err("give --config or --membership".into()),
        }
    }
}

pub fn ring(command: RingCommand) -> Result<(String, bool), String> {
    init_logs("hilock=info");
    let ms = std::time::Duration::from_millis;
    match command {
        RingCommand::Membership { config } => {
            // Any node's id will do: the `[ring]` table and the slots are the cluster's.
            let cfg = hilock_runtime::Config::from_file(&config, Some(0))?;
            ring_of(cfg.clone(), &config)?;
            hilock_runtime::ring::membership_service(&cfg).map(|s| (s, true))
        }
        RingCommand::Status {
            config,
            json,
            timeout_ms,
        } => hilock_runtime::ring::status(
            &hilock_runtime::Config::from_file(&config, Some(0))?,
            json,
            ms(timeout_ms),
        ),
        RingCommand::Join { id, at, timeout_ms } => hilock_runtime::ring::change(
            at.membership_for(id)?,
            hilock_runtime::ring::Request::Join(id),
            ms(timeout_ms),
        )
        .map(|s| (s, true)),
        RingCommand::Leave { id, at, timeout_ms } => hilock_runtime::ring::change(
            at.membership_for(id)?,
            hilock_runtime::ring::Request::Leave(id),
            ms(timeout_ms),
        )
        .map(|s| (s, true)),
    }
}
