//! The topology engine: what every platform does with the core's decisions.
//!
//! The core (`cnmysql-core`) decides, without I/O, from a snapshot and what
//! the controller remembers. This crate runs that decision as one
//! [`pass`](pass::pass) for a platform that implements [`Platform`]: read the
//! primary Lease when a failover needs it, take the core's step, carry its
//! actions out in order ([`executor`]), and report the status. It also polls
//! the instances' `/status` ([`poller`]). The local control plane, the
//! Kubernetes operator and the simulation (`tests/simulation/`) are its
//! platforms; each only observes and carries out single actions.
//!
//! Backups go the same way: [`backup::take`] is the one workflow (open the
//! store, pick the source, take, record, retain, report) behind
//! [`backup::BackupPlatform`].

pub mod backup;
mod executor;
pub mod pass;
mod platform;
pub mod poller;
pub mod sql_objects;

pub use executor::carry_out;
pub use pass::pass;
pub use platform::{ControlRequest, Platform};
