//! Shared pieces of the benchmarks and end-to-end tests.

pub mod writer;
pub mod faults;
