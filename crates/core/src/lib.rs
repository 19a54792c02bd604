//! The pure core of cloudnative-mysql: decisions as plain functions of an
//! observed snapshot. No clock, network or Kubernetes in here; time comes in
//! as a value. Each concern lives in a module named after it.

pub mod action;
pub mod archive_replica;
pub mod archiving;
pub mod backup_source;
pub mod binlog_retention;
pub mod cadence;
pub mod copy_unblock;
pub mod crash_backoff;
pub mod declared;
pub mod definition;
pub mod disk_guard;
pub mod event;
pub mod failover;
pub mod fencing;
pub mod flavor;
pub mod handover;
pub mod hibernation;
pub mod hold_down;
pub mod isolation;
mod lagging;
pub mod lease;
pub mod memory;
pub mod outcome;
pub mod pause;
pub mod phase;
pub mod readiness;
pub mod ready;
pub mod reconcile;
pub mod reinit;
pub mod replica_cluster;
pub mod replica_durability;
pub mod role;
pub mod role_gate;
pub mod running;
pub mod self_fence;
pub mod semisync;
pub mod services;
pub mod sql_objects;
pub mod status;
pub mod status_change;
pub mod storage_growth;
pub mod switchover;
#[cfg(any(test, feature = "testutil"))]
pub mod testutil;
pub mod time;
pub mod upgrade;
