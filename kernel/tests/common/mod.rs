//! What the Naimi-Trehel tests share: the sites of a protocol in the one harness, and the
//! order in which requests were granted.

use hilock_harness::Cluster;
use hilock_kernel::{Input, NodeId, Output, Protocol};
use std::hash::Hash;

/// The sites in the one harness, and the order in which requests were granted.
pub struct Net<P: Protocol> {
    pub c: Cluster<P>,
    pub grants: Vec<u16>,
}

impl<P: Protocol + Clone> Net<P>
where
    P::Msg: Hash,
{
    pub fn new(sites: Vec<P>) -> Self {
        Net {
            c: Cluster::new(sites),
            grants: vec![],
        }
    }
    pub fn site(&self, at: u16) -> &P {
        self.c.site(NodeId(at))
    }
    fn record(&mut self, at: NodeId, outputs: &[Output<P::Msg>]) {
        for o in outputs {
            if let Output::Granted { .. } = o {
                self.grants.push(at.0);
            }
        }
    }
    pub fn step(&mut self, at: u16, input: Input<'_, P::Msg>) {
        let step = self.c.input(NodeId(at), input).unwrap();
        self.record(step.node, &step.outputs);
    }
    /// Delivers the oldest message in flight (one global FIFO order), if any.
    pub fn deliver_one(&mut self) -> bool {
        let Some((f, t)) = self.c.oldest_channel() else {
            return false;
        };
        let (_, r) = self.c.deliver(f, t).unwrap();
        let step = r.unwrap();
        self.record(step.node, &step.outputs);
        true
    }
    /// Delivers every message in flight.
    #[allow(dead_code)] // every test file compiles this module; not all of them settle
    pub fn settle(&mut self) {
        while self.deliver_one() {}
    }
}
