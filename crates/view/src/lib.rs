//! How a cluster is shown to people and to monitoring, kept out of the pure
//! core: the decisions never depend on how they are displayed.
//!
//! - [`status_table`]: the status table `local status` and
//!   `kubectl cnmsql status` print;
//! - [`metrics`]: the Prometheus page of one cluster or of many;
//! - [`server_metrics`]: the servers' own figures, which status variables
//!   the manager reads and the series each becomes;
//! - `volume_metrics`: how full each instance's volumes are.

pub mod metrics;
mod replica_metrics;
pub mod server_metrics;
pub mod status_table;
mod volume_metrics;
