//! What an instance manager may do on the API server, and nothing more: a
//! ServiceAccount `<cluster>`, a Role and a RoleBinding. An instance reads
//! its own Cluster, patches its status (currentPrimary, divergence), manages
//! the Lease `<cluster>-primary`, records Events, finds its peers' Pods, and
//! reads the Secrets it is given — never the certificate authority's key nor the operator's
//! client certificate.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::ResourceExt;

use cnmysql_api::Cluster;

use crate::labels::{self, cluster_labels};

fn rule(groups: &[&str], resources: &[&str], names: &[String], verbs: &[&str]) -> PolicyRule {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        resource_names: (!names.is_empty()).then(|| names.to_vec()),
        verbs: strings(verbs),
        non_resource_urls: None,
    }
}

pub fn objects(cluster: &Cluster) -> (ServiceAccount, Role, RoleBinding) {
    let name = cluster.name_any();
    let meta = || super::meta(cluster, name.clone(), cluster_labels(&name));
    let me = vec![name.clone()];
    let mut readable: Vec<String> = super::instances(cluster)
        .iter()
        .map(|i| labels::instance_tls_secret(i))
        .collect();
    readable.push(labels::replication_secret(&name));
    readable.push(
        cluster
            .spec
            .secrets
            .app_secret
            .clone()
            .unwrap_or_else(|| labels::app_secret(&name)),
    );
    readable.push(
        cluster
            .spec
            .secrets
            .root_secret
            .clone()
            .unwrap_or_else(|| labels::root_secret(&name)),
    );
    let role = Role {
        metadata: meta(),
        rules: Some(vec![
            rule(
                &["mysql.cnmysql.io"],
                &["clusters"],
                &me,
                &["get", "list", "watch"],
            ),
            rule(
                &["mysql.cnmysql.io"],
                &["clusters/status"],
                &me,
                &["get", "patch", "update"],
            ),
            // Creation cannot be limited to a name; everything else is.
            rule(&["coordination.k8s.io"], &["leases"], &[], &["create"]),
            rule(
                &["coordination.k8s.io"],
                &["leases"],
                &[labels::lease(&name)],
                &["get", "watch", "update", "patch", "delete"],
            ),
            rule(&["events.k8s.io"], &["events"], &[], &["create", "patch"]),
            rule(&[""], &["events"], &[], &["create", "patch"]),
            rule(&[""], &["secrets"], &readable, &["get"]),
            // Peers are found at their Pod IPs (list and watch cannot be
            // limited to names; Pods hold no secrets).
            rule(&[""], &["pods"], &[], &["get", "list", "watch"]),
        ]),
    };
    let binding = RoleBinding {
        metadata: meta(),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: name.clone(),
            namespace: cluster.namespace(),
            api_group: None,
        }]),
    };
    let sa = ServiceAccount {
        metadata: meta(),
        ..Default::default()
    };
    (sa, role, binding)
}
