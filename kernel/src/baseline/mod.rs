//! The baselines the token engine is measured against, behind the same
//! [`Protocol`](crate::Protocol) interface.
//!
//! - [`naimi`]: Naimi-Trehel's path-reversal token protocol (one exclusive token);
//! - [`pnaimi`]: Mueller's prioritized Naimi protocol, the baseline of the thesis's chapter 3.

pub mod naimi;
pub mod pnaimi;
