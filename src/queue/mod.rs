//! (work in progress)
pub mod spill;
