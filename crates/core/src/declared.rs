//! What the platform found a Cluster to declare beyond its spec: the server
//! image and version the spec resolves to, the force annotation, and what
//! the upgrade annotations ask. It sits beside the snapshot it is part of.

use crate::upgrade::annotations::Asked;

/// What the platform found the Cluster to declare, beyond its spec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Declared {
    /// The server image the spec asks for, once resolved.
    pub image: Option<String>,
    /// The version that image holds, when known.
    pub version: Option<String>,
    /// Why no image could be resolved (a missing catalog, a version it
    /// does not list), naming the field.
    pub error: Option<String>,
    /// `cnmysql.io/force-rolling-update: "true"`.
    pub force_rollout: bool,
    /// What the `cnmysql.io/upgrade-*` annotations ask, as the platform
    /// read them.
    pub asked: Asked,
    /// When the operator's own certificate for this cluster (its client
    /// certificate to the control APIs) expires, Unix seconds.
    pub operator_certificate_expires_at: Option<i64>,
}
