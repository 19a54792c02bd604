//! The pure core of cloudnative-mysql: decisions as plain functions of an
//! observed snapshot. No clock, network or Kubernetes in here; time comes in
//! as a value. Each concern lives in a module named after it.

pub mod flavor;
pub mod phase;
pub mod role;
pub mod services;
pub mod status;
pub mod failover;
pub mod lease;
pub mod fencing;
pub mod semisync;
pub mod switchover;
