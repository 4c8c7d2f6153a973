//! hilock
