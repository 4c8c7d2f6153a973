//! The smallest fixed-capacity delivery loop the firmware needs: `N` sites in one image and
//! one wire of at most `W` messages in send order.
//!
//! Not the host harness: `hilock_harness::Cluster` keeps its sites and channels in `Vec`,
//! `BTreeMap`, `VecDeque` and `Arc` and needs `std`, which this target does not have. This
//! loop only routes `Send` outputs and delivers; it checks no property. What keeps it honest
//! is `src/script.rs`: the firmware compares every step's rules and every end state with the
//! tables there, and the host test `spec/tests/embedded_script.rs` checks those tables
//! against a run of the same schedule through `Cluster` (with its safety checks).
//!
//! Channels are FIFO per ordered pair, as the thesis assumes and as `Cluster` delivers:
//! the wire keeps every message in flight in send order, so the first message of a pair on
//! the wire is the oldest of that channel, and the first message on the wire is the oldest in
//! flight (the scenario format's `"*"`).

use crate::config::{L, N, O, Q, W};
use hilock_kernel::{Input, KernelError, LockId, NodeId, Output, Outputs, Report, Site, Variant};

/// The firmware's site type.
pub type FwSite = Site<N, L, Q>;
/// The firmware's message type.
pub type FwMsg = hilock_kernel::Msg<Q>;
/// One step's output buffer: room for `Site::MAX_OUTPUTS = N + Q + L + 6`.
pub type FwOutputs = Outputs<FwMsg, O>;

/// Why the loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetError {
    /// The kernel rejected an input at a node.
    Kernel(NodeId, KernelError),
    /// The wire has no room for the most a step can send (nothing was stepped).
    WireFull,
    /// No message on that channel.
    Empty,
}

/// Something that performs one kernel step (the firmware measures it; see `meter.rs`).
pub trait Stepper {
    /// `site.step(input, out)` (the firmware's implementation also measures it).
    fn step(
        &mut self,
        site: &mut FwSite,
        input: Input<'_, FwMsg>,
        out: &mut FwOutputs,
    ) -> Result<Report, KernelError>;
}

/// `N` sites and the wire between them.
#[derive(Debug)]
pub struct Net {
    /// The sites; node `i` is `sites[i]`.
    pub sites: [FwSite; N],
    wire: heapless::Vec<(NodeId, NodeId, FwMsg), W>,
    out: FwOutputs,
    /// Most messages in flight at once since the last reset.
    pub peak: usize,
}

impl Net {
    /// `N` sites in a star around node 0 for every lock.
    pub fn new() -> Result<Self, KernelError> {
        let mut sites = heapless::Vec::<FwSite, N>::new();
        for i in 0..N {
            let site = FwSite::new(NodeId(i as u16), NodeId(0))?;
            let _ = sites.push(site);
        }
        Ok(Net {
            sites: sites
                .into_array()
                .map_err(|_| KernelError::UnknownNode(NodeId(0)))?,
            wire: heapless::Vec::new(),
            out: Outputs::new(),
            peak: 0,
        })
    }

    /// Empties the wire and rebuilds every site: lock `l` of node `i` starts with parent
    /// `parent(l, i)` (`None`: the token holder), all running `variant`.
    pub fn reset(
        &mut self,
        parent: impl Fn(usize, usize) -> Option<NodeId>,
        variant: Variant,
    ) -> Result<(), KernelError> {
        self.wire.clear();
        self.peak = 0;
        for i in 0..N {
            self.sites[i] = FwSite::with_parents(NodeId(i as u16), |l| parent(l.idx(), i))?
                .with_variant(variant);
        }
        Ok(())
    }

    /// Messages in flight.
    pub fn in_flight(&self) -> usize {
        self.wire.len()
    }

    /// Whether a step's outputs surely fit on the wire.
    pub fn has_room(&self) -> bool {
        W - self.wire.len() >= O
    }

    /// A user input at `node`; its messages go on the wire.
    pub fn input(
        &mut self,
        st: &mut impl Stepper,
        node: NodeId,
        input: Input<'_, FwMsg>,
    ) -> Result<Report, NetError> {
        self.step(st, node, input)
    }

    /// Delivers the oldest message on channel `from -> to`.
    pub fn deliver(
        &mut self,
        st: &mut impl Stepper,
        from: NodeId,
        to: NodeId,
    ) -> Result<(NodeId, Report), NetError> {
        let i = self
            .wire
            .iter()
            .position(|(f, t, _)| *f == from && *t == to)
            .ok_or(NetError::Empty)?;
        self.deliver_at(st, i)
    }

    /// Delivers the oldest message of the channel that wire entry `i` is on (`i = 0`: the
    /// oldest message in flight). Returns the receiver and its report.
    pub fn deliver_at(
        &mut self,
        st: &mut impl Stepper,
        i: usize,
    ) -> Result<(NodeId, Report), NetError> {
        let (from, to) = match self.wire.get(i) {
            Some((f, t, _)) => (*f, *t),
            None => return Err(NetError::Empty),
        };
        let first = self
            .wire
            .iter()
            .position(|(f, t, _)| *f == from && *t == to)
            .unwrap_or(i);
        if W - (self.wire.len() - 1) < O {
            return Err(NetError::WireFull);
        }
        let (_, _, msg) = self.wire.remove(first);
        let r = self.step(st, to, Input::Deliver { from, msg: &msg })?;
        Ok((to, r))
    }

    fn step(
        &mut self,
        st: &mut impl Stepper,
        node: NodeId,
        input: Input<'_, FwMsg>,
    ) -> Result<Report, NetError> {
        if W - self.wire.len() < O {
            return Err(NetError::WireFull);
        }
        let site = self
            .sites
            .get_mut(node.idx())
            .ok_or(NetError::Kernel(node, KernelError::UnknownNode(node)))?;
        self.out.clear();
        let r = st
            .step(site, input, &mut self.out)
            .map_err(|e| NetError::Kernel(node, e))?;
        for o in self.out.iter() {
            if let Output::Send { to, msg } = o {
                // Room was checked above: a step sends at most O messages.
                let _ = self.wire.push((node, *to, msg.clone()));
            }
        }
        self.peak = self.peak.max(self.wire.len());
        Ok(r)
    }

    /// Wire entry `i` (0: the oldest message in flight): sender, receiver, message.
    pub fn peek(&self, i: usize) -> Option<(NodeId, NodeId, &FwMsg)> {
        self.wire.get(i).map(|(f, t, m)| (*f, *t, m))
    }

    /// The oldest message on channel `from -> to`.
    pub fn peek_channel(&self, from: NodeId, to: NodeId) -> Option<&FwMsg> {
        self.wire
            .iter()
            .find(|(f, t, _)| *f == from && *t == to)
            .map(|(_, _, m)| m)
    }

    /// The state of `lock` at `node`.
    pub fn lock(&self, node: usize, lock: usize) -> Option<&hilock_kernel::LockNode<N, Q>> {
        self.sites.get(node)?.lock(LockId(lock as u16)).ok()
    }
}
