//! Why a reconcile or a topology pass failed: one variant per step of the
//! pipeline (`reconcile.rs`) and the topology task (`topology.rs`), each
//! with the metric label `cnmysql_reconcile_errors_total{error}` counts it
//! under.

/// A failed step, with what went wrong in it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Generating the Secrets (passwords, CA, certificates).
    #[error("generating Secrets: {0:#}")]
    Secrets(anyhow::Error),
    /// Applying the objects the operator owns (RBAC, Services, budgets,
    /// claims).
    #[error("applying objects: {0:#}")]
    Apply(anyhow::Error),
    /// Creating Pods, labelling them by role, removing scaled-down ones.
    #[error("managing Pods: {0:#}")]
    Pods(anyhow::Error),
    /// Writing the operator's part of the Cluster status.
    #[error("reporting the status: {0:#}")]
    Report(anyhow::Error),
    /// The topology pass: polling, deciding, carrying out.
    #[error("topology: {0:#}")]
    Topology(anyhow::Error),
    /// A restart in place that a user asked for on a Pod.
    #[error("restart in place: {0:#}")]
    Restart(anyhow::Error),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Secrets(_) => "secrets",
            Error::Apply(_) => "apply",
            Error::Pods(_) => "pods",
            Error::Report(_) => "report",
            Error::Topology(_) => "topology",
            Error::Restart(_) => "restart",
        }
    }

    /// A write lost to a concurrent writer: retried soon.
    pub fn is_conflict(&self) -> bool {
        let (Error::Secrets(e)
        | Error::Apply(e)
        | Error::Pods(e)
        | Error::Report(e)
        | Error::Topology(e)
        | Error::Restart(e)) = self;
        matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 409)
    }
}

/// `result.at(Error::Apply)?`: the step a failure happened in.
pub trait At<T> {
    fn at(self, step: fn(anyhow::Error) -> Error) -> Result<T, Error>;
}

impl<T, E: Into<anyhow::Error>> At<T> for Result<T, E> {
    fn at(self, step: fn(anyhow::Error) -> Error) -> Result<T, Error> {
        self.map_err(|e| step(e.into()))
    }
}
