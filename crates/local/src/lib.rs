//! The local platform: `cnmysql local up|status|down|destroy|promote|...`.
//! Its life (`lifecycle.rs`), its control plane (`control.rs` with
//! `supervisor.rs`, `platform.rs`, `progress.rs`, `reexec.rs`), endpoints
//! (`proxy.rs`), state directory (`state.rs`), status display
//! (`status_report.rs`), user requests (`operations.rs`) and backups
//! (`backups.rs`, `scheduled_backups.rs`).

pub mod annotations;
pub mod backups;
pub mod cluster_state;
pub mod control;
pub mod definition;
pub mod lifecycle;
pub mod logs;
pub mod lookup;
pub mod metrics;
pub mod operations;
pub mod periodic;
pub mod pki;
pub mod platform;
pub mod process;
pub mod progress;
pub mod proxy;
pub mod reexec;
pub mod reinit;
pub mod report;
pub mod route_grace;
mod routing;
pub mod scheduled_backups;
pub mod sql_objects;
pub mod state;
pub mod status_report;
pub mod supervisor;
pub mod template;
mod wakes;

pub use backups::*;
pub use lifecycle::*;
pub use lookup::*;
pub use operations::*;
pub use status_report::*;
