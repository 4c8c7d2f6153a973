//! A growable output sink for host programs: the kernel's [`Sink`] over a `Vec`, so that
//! large systems (the simulator's 1,024 nodes) need no fixed-capacity buffer on the stack.

use hilock_kernel::{Output, Sink};

/// Outputs of kernel steps in a `Vec` (room is unbounded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecSink<M>(pub Vec<Output<M>>);

impl<M> VecSink<M> {
    /// An empty sink.
    pub fn new() -> Self {
        VecSink(Vec::new())
    }
}

impl<M> Default for VecSink<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M> Sink<M> for VecSink<M> {
    fn room(&self) -> usize {
        usize::MAX - self.0.len()
    }
    fn put(&mut self, o: Output<M>) -> Result<(), Output<M>> {
        self.0.push(o);
        Ok(())
    }
}
