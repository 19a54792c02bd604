//! Verbs the kubectl plugin and `cnmysql local` share: their arguments are
//! declared once here, and both run the plugin's code (`crate::plugin`),
//! `cnmysql local` as `kubectl cnmsql --local` would
//! (`PluginTarget::local`).

use std::path::PathBuf;

/// `on|off CLUSTER`.
#[derive(clap::Args, Clone)]
pub struct Toggle {
    #[arg(value_parser = ["on", "off"])]
    pub mode: String,
    /// The cluster, e.g. cluster-example.
    pub cluster: String,
}

impl Toggle {
    pub fn on(&self) -> bool {
        self.mode == "on"
    }
}

/// A SQL session's target and the client's arguments.
#[derive(clap::Args, Clone)]
pub struct Session {
    /// The cluster, e.g. cluster-example.
    pub cluster: String,
    /// One instance [default: the primary].
    pub instance: Option<String>,
    /// A ready replica instead of the primary.
    #[arg(long, conflicts_with = "instance")]
    pub replica: bool,
    /// The client's own arguments.
    #[arg(last = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// A diagnostic bundle's cluster and contents.
#[derive(clap::Args, Clone)]
pub struct Bundle {
    /// The cluster, e.g. cluster-example.
    pub cluster: String,
    /// Where to write it [default: report-<cluster>-<YYYYMMDDhhmmss>.tar.gz].
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Add the last lines of each instance's log.
    #[arg(long)]
    pub logs: bool,
    /// How many lines of each log.
    #[arg(long, value_name = "LINES", default_value = "1000")]
    pub tail: usize,
}

/// The two on/off verbs: each sets or removes one Cluster annotation.
#[derive(Clone, Copy)]
pub enum Switch {
    /// `maintenance`: reconciliation paused.
    Maintenance,
    /// `hibernate`: every instance stopped, data kept.
    Hibernation,
}

impl Switch {
    /// The annotation and the value that means "on".
    pub fn annotation(self) -> (&'static str, &'static str) {
        match self {
            Switch::Maintenance => (cnmysql_core::pause::ANNOTATION, cnmysql_core::pause::PAUSED),
            Switch::Hibernation => (
                cnmysql_core::hibernation::ANNOTATION,
                cnmysql_core::hibernation::ON,
            ),
        }
    }

    /// What the person is told once it is set or removed.
    pub fn said(self, cluster: &str, on: bool) -> String {
        match (self, on) {
            (Switch::Maintenance, true) => format!(
                "Cluster {cluster}: reconciliation paused for maintenance; the instances keep running, nothing is changed until `maintenance off`"
            ),
            (Switch::Maintenance, false) => format!("Cluster {cluster}: reconciliation resumed"),
            (Switch::Hibernation, true) => format!(
                "Cluster {cluster}: hibernation asked; every instance stops, its data kept (`status` follows it)"
            ),
            (Switch::Hibernation, false) => format!(
                "Cluster {cluster}: waking; the same instances come back (`status` follows it)"
            ),
        }
    }
}
