//! # hilock
//!
//! The `hilock` command's library part: the subcommands that work on the specification
//! ([`cli`]). The tokio runtime that runs real nodes over TCP is the subject of a later
//! issue and is not here yet.

pub mod cli;
