//! The local platform: `cnmysql local up|status|down|destroy|promote|...`.
//! Its life (`lifecycle.rs`), its control plane (`control.rs` with
//! `supervisor.rs`, `platform.rs`, `progress.rs`, `reexec.rs`), endpoints
//! (`proxy.rs`), state directory (`state.rs`), status display
//! (`status_report.rs`), user requests (`operations.rs`) and backups
//! (`backups.rs`, `scheduled_backups.rs`).

pub mod annotations;
mod backups;
pub mod cluster_state;
mod control;
mod definition;
mod lifecycle;
pub mod logs;
mod lookup;
mod metrics;
mod operations;
mod periodic;
mod pki;
mod platform;
mod process;
mod progress;
mod proxy;
mod reexec;
pub mod reinit;
pub mod report;
mod route_grace;
mod routing;
mod scheduled_backups;
mod sql_objects;
pub mod state;
pub mod status_report;
mod supervisor;
mod template;
mod wakes;

pub use backups::{Outcome, apply_retention, backup, backup_destination};
pub use lifecycle::{DETACHED_ENV, UpOptions, destroy, down, up};
pub use lookup::{existing_state_dir, resolve_state_dir};
pub use operations::{apply, fence, promote, restart_inplace, upgrade};
pub use status_report::{
    InstanceReport, ObjectReport, StatusReport, render_status, snapshot, status_report,
};
