//! The workloads the benchmarks and the end-to-end and fault tests share.

pub mod broken_image;
mod fault_plan;
pub mod faults;
pub mod lagging_refusal;
pub mod load;
pub mod writer;
