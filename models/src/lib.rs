//! Stateright models of hilock that drive `hilock-kernel` sites.
//!
//! - [`inversion`]: the priority-inversion model of thesis section 3.6 (property P7).

pub mod inversion;
