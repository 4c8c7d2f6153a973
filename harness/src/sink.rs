//! A growable output sink for host programs: the kernel's [`Sink`] over a `Vec`, so that
//! large systems (the simulator's 1,024 nodes) need no fixed-capacity buffer on the stack.

use hilock_kernel::Sink;

/// Outputs of kernel steps in a `Vec` (room is unbounded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecSink<T>(pub Vec<T>);

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

impl<T> Sink<T> for VecSink<T> {
    fn room(&self) -> usize {
        usize::MAX - self.0.len()
    }
    fn put(&mut self, t: T) -> Result<(), T> {
        self.0.push(t);
        Ok(())
    }
}
