//! What every reconcile shares: the client, the platform facts the builders
//! need, the operator's executable hash and the metrics.

use crate::metrics::Metrics;
use crate::objects::Environment;

pub struct Context {
    pub client: kube::Client,
    pub env: Environment,
    /// SHA-256 of the running operator executable (`status.operatorExecutableHash`).
    pub operator_hash: String,
    pub metrics: Metrics,
}
