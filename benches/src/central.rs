//! The central lock server ([`CentralSite`], `hilock_harness::engines::central`: what it
//! models and what not) in the simulator: its message kinds in the statistics and its
//! clients as the active nodes, for the bakery comparison ([`crate::bakery`]).

use crate::token::{Driven, RelayClass, Requester};
use hilock_harness::engines::central::{CentralMsg, CentralSite};
use hilock_kernel::{LockId, NodeId};

impl Requester for CentralMsg {
    fn requester(&self) -> Option<NodeId> {
        None
    }
}

impl RelayClass for CentralSite {
    fn relay_class(&self, _lock: LockId) -> usize {
        3
    }
}

impl Driven for CentralSite {
    /// 0 client requests, 1 answers to clients, 2 replication (appends and acks).
    fn stat_kind(msg: &CentralMsg) -> usize {
        match msg {
            CentralMsg::Lock | CentralMsg::Unlock => 0,
            CentralMsg::Grant | CentralMsg::UnlockAck => 1,
            CentralMsg::Append { .. } | CentralMsg::Ack { .. } => 2,
        }
    }
    fn active(&self) -> bool {
        self.is_client()
    }
    const CHECK_EXCLUSIVE: bool = true;
}
