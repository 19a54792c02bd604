//! The operator's rights: least privilege, cluster-wide or in the watched
//! namespaces alone, and the Role of its leader election.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};

use super::Options;
use super::objects::{Doc, NAME, meta, yaml};

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(v(groups)),
        resources: Some(v(resources)),
        verbs: v(verbs),
        ..Default::default()
    }
}

const ALL_VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// What the operator may do in every watched namespace. It also holds
/// everything it grants the instances' Roles (the API server refuses to let
/// it grant more than it has).
fn namespaced_rules() -> Vec<PolicyRule> {
    let watch = ["get", "list", "watch"];
    vec![
        // patch: the cnmysql.io/upgrade-* annotations it keeps on a
        // Cluster (annotation-driven upgrades).
        rule(
            &["mysql.cnmysql.io"],
            &["clusters"],
            &["get", "list", "watch", "patch"],
        ),
        rule(&["mysql.cnmysql.io"], &["imagecatalogs"], &watch),
        rule(
            &["mysql.cnmysql.io"],
            &["clusters/status"],
            &["get", "patch", "update"],
        ),
        // Backups: taken once each; ScheduledBackups make them.
        rule(
            &["mysql.cnmysql.io"],
            &["backups", "scheduledbackups"],
            &["get", "list", "watch", "create", "patch"],
        ),
        rule(
            &["mysql.cnmysql.io"],
            &["backups/status", "scheduledbackups/status"],
            &["get", "patch", "update"],
        ),
        // Databases, users and grants: carried out, finalized, reported.
        rule(
            &["mysql.cnmysql.io"],
            &["databases", "users", "grants"],
            &["get", "list", "watch", "patch"],
        ),
        rule(
            &["mysql.cnmysql.io"],
            &["databases/status", "users/status", "grants/status"],
            &["get", "patch", "update"],
        ),
        rule(
            &[""],
            &["pods", "persistentvolumeclaims", "services"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(
            &[""],
            &["secrets", "serviceaccounts"],
            &["get", "list", "watch", "create", "patch"],
        ),
        rule(
            &["rbac.authorization.k8s.io"],
            &["roles", "rolebindings"],
            &["get", "list", "watch", "create", "patch"],
        ),
        // The Services select nothing: the operator writes their
        // endpoints, and removes those the EndpointSlice controller made.
        rule(
            &["discovery.k8s.io"],
            &["endpointslices"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(
            &["policy"],
            &["poddisruptionbudgets"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(&["coordination.k8s.io"], &["leases"], &ALL_VERBS),
        rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
        rule(&[""], &["events"], &["create", "patch"]),
    ]
}

/// What the operator reads of the cluster as a whole: it grants nothing
/// and reads no Secret.
fn cluster_scoped_rules() -> Vec<PolicyRule> {
    let watch = ["get", "list", "watch"];
    vec![
        rule(&["mysql.cnmysql.io"], &["clusterimagecatalogs"], &watch),
        // A primary on a cordoned node hands over before the drain.
        rule(&[""], &["nodes"], &watch),
        // Whether a claim's class can grow (allowVolumeExpansion).
        rule(&["storage.k8s.io"], &["storageclasses"], &watch),
    ]
}

fn subject(o: &Options) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: NAME.into(),
        namespace: Some(o.namespace.clone()),
        api_group: None,
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: name.into(),
    }
}

const RBAC: &str = "rbac.authorization.k8s.io/v1";

fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> Doc {
    yaml(
        RBAC,
        "ClusterRole",
        &ClusterRole {
            metadata: meta(name, None),
            rules: Some(rules),
            ..Default::default()
        },
    )
}

fn cluster_binding(o: &Options, name: &str) -> Doc {
    yaml(
        RBAC,
        "ClusterRoleBinding",
        &ClusterRoleBinding {
            metadata: meta(name, None),
            role_ref: role_ref("ClusterRole", name),
            subjects: Some(vec![subject(o)]),
        },
    )
}

/// The RBAC of an install: for every namespace (one ClusterRole, bound
/// cluster-wide), or for the watched namespaces only (the namespaced rules
/// bound in each of them, and only what is cluster-scoped by nature, which
/// holds no Secret, bound cluster-wide).
pub(super) fn rbac(o: &Options) -> Vec<Doc> {
    if o.watch_namespaces.is_empty() {
        let mut rules = cluster_scoped_rules();
        rules.extend(namespaced_rules());
        return vec![cluster_role(NAME, rules), cluster_binding(o, NAME)];
    }
    let cluster_wide = format!("{NAME}-cluster");
    let mut docs = vec![
        cluster_role(&cluster_wide, cluster_scoped_rules()),
        cluster_binding(o, &cluster_wide),
        cluster_role(NAME, namespaced_rules()),
    ];
    for ns in &o.watch_namespaces {
        docs.push(yaml(
            RBAC,
            "RoleBinding",
            &RoleBinding {
                metadata: meta(NAME, Some(ns)),
                role_ref: role_ref("ClusterRole", NAME),
                subjects: Some(vec![subject(o)]),
            },
        ));
    }
    docs
}

/// Leader election: the Lease in the operator's own namespace.
pub(super) fn leader_election(o: &Options) -> Vec<Doc> {
    let name = "cnmysql-operator-leader-election";
    vec![
        yaml(
            RBAC,
            "Role",
            &Role {
                metadata: meta(name, Some(&o.namespace)),
                rules: Some(vec![rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &ALL_VERBS,
                )]),
            },
        ),
        yaml(
            RBAC,
            "RoleBinding",
            &RoleBinding {
                metadata: meta(name, Some(&o.namespace)),
                role_ref: role_ref("Role", name),
                subjects: Some(vec![subject(o)]),
            },
        ),
    ]
}
