//! Shared pieces of the benchmarks and end-to-end tests.

pub mod faults;
pub mod writer;
