//! The pure core of cloudnative-mysql: decisions as plain functions of an
//! observed snapshot. No clock, network or Kubernetes in here; time comes in
//! as a value. Each concern lives in a module named after it.

pub mod flavor;
pub mod phase;
pub mod role;
pub mod services;
pub mod status;
