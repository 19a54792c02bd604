//! Shared pieces of the benchmarks and end-to-end tests.

pub mod broken_image;
pub mod fault_plan;
pub mod faults;
pub mod lagging_refusal;
pub mod load;
pub mod writer;
