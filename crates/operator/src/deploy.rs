//! `deploy/operator.yaml`, generated from code (`cnmysql deploy-manifest`)
//! and held in sync by a test: the CRD, the namespace `cnmysql-system`, the
//! operator's ServiceAccount with least-privilege RBAC, its Deployment (leader
//! election, probes) and a metrics Service.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, Namespace,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::objects::pod::OPERATOR_BINARY;

pub const NAMESPACE: &str = "cnmysql-system";
pub const NAME: &str = "cnmysql-operator";
/// The operator image the manifest names.
pub const DEFAULT_IMAGE: &str = "ghcr.io/cloudnative-mysql/cnmysql:0.1.0";
pub const HTTP_PORT: i32 = 8080;

fn meta(name: &str, namespaced: bool) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespaced.then(|| NAMESPACE.to_string()),
        labels: Some(labels()),
        ..Default::default()
    }
}

fn labels() -> std::collections::BTreeMap<String, String> {
    [
        ("app.kubernetes.io/name".to_string(), NAME.to_string()),
        (
            "app.kubernetes.io/part-of".to_string(),
            "cnmysql".to_string(),
        ),
    ]
    .into()
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(v(groups)),
        resources: Some(v(resources)),
        verbs: v(verbs),
        ..Default::default()
    }
}

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
        rule(
            &["policy"],
            &["poddisruptionbudgets"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(
            &["coordination.k8s.io"],
            &["leases"],
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
        ),
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

/// The operator's role in every namespace (an install for all of them).
pub fn cluster_role() -> ClusterRole {
    let mut rules = cluster_scoped_rules();
    rules.extend(namespaced_rules());
    ClusterRole {
        metadata: meta(NAME, false),
        rules: Some(rules),
        ..Default::default()
    }
}

fn env_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..Default::default()
        }),
        value: None,
    }
}

fn probe(path: &str) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            ..Default::default()
        }),
        period_seconds: Some(5),
        failure_threshold: Some(3),
        ..Default::default()
    }
}

pub fn deployment(image: &str) -> Deployment {
    deployment_watching(image, &[])
}

/// The Deployment, watching `namespaces` (none: all of them).
fn deployment_watching(image: &str, namespaces: &[String]) -> Deployment {
    let watched = (!namespaces.is_empty()).then(|| EnvVar {
        name: "CNMYSQL_WATCH_NAMESPACES".into(),
        value: Some(namespaces.join(",")),
        value_from: None,
    });
    let container = Container {
        name: "operator".into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![OPERATOR_BINARY.into(), "operator".into()]),
        env: Some(
            vec![
                env_field("POD_NAME", "metadata.name"),
                env_field("POD_NAMESPACE", "metadata.namespace"),
                EnvVar {
                    name: "CNMYSQL_OPERATOR_IMAGE".into(),
                    value: Some(image.into()),
                    value_from: None,
                },
            ]
            .into_iter()
            .chain(watched)
            .collect(),
        ),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: HTTP_PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        liveness_probe: Some(probe("/healthz")),
        readiness_probe: Some(probe("/readyz")),
        resources: Some(ResourceRequirements {
            requests: Some(
                [
                    ("cpu".to_string(), Quantity("50m".into())),
                    ("memory".to_string(), Quantity("32Mi".into())),
                ]
                .into(),
            ),
            limits: Some([("memory".to_string(), Quantity("256Mi".into()))].into()),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Deployment {
        metadata: meta(NAME, true),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels()),
                match_expressions: None,
            },
            // The new replica waits for the old one's lease: never two
            // leaders, and no gap longer than the lease.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                ..Default::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels()),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(NAME.into()),
                    containers: vec![container],
                    termination_grace_period_seconds: Some(30),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65532),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            localhost_profile: None,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

fn subject() -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: NAME.into(),
        namespace: Some(NAMESPACE.into()),
        api_group: None,
    }
}

fn yaml<T: Serialize>(api_version: &str, kind: &str, obj: &T) -> String {
    let mut v = serde_json::to_value(obj).expect("serialises");
    let m = v.as_object_mut().expect("an object");
    let mut out = serde_json::Map::new();
    out.insert("apiVersion".into(), api_version.into());
    out.insert("kind".into(), kind.into());
    for (k, val) in std::mem::take(m) {
        out.insert(k, val);
    }
    serde_saphyr::to_string(&serde_json::Value::Object(out)).expect("YAML")
}

/// The whole manifest, for every namespace.
pub fn manifest(image: &str) -> String {
    manifest_for(image, &[])
}

fn binding_to(role: &str) -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "ClusterRole".into(),
        name: role.into(),
    }
}

/// The RBAC of an install: for every namespace (one ClusterRole, bound
/// cluster-wide), or for `namespaces` only (the namespaced rules bound in
/// each of them, and only what is cluster-scoped by nature, which holds no
/// Secret, bound cluster-wide).
fn rbac(namespaces: &[String]) -> Vec<String> {
    let rbac = "rbac.authorization.k8s.io/v1";
    if namespaces.is_empty() {
        return vec![
            yaml(rbac, "ClusterRole", &cluster_role()),
            yaml(
                rbac,
                "ClusterRoleBinding",
                &ClusterRoleBinding {
                    metadata: meta(NAME, false),
                    role_ref: binding_to(NAME),
                    subjects: Some(vec![subject()]),
                },
            ),
        ];
    }
    let cluster_wide = format!("{NAME}-cluster");
    let mut docs = vec![
        yaml(
            rbac,
            "ClusterRole",
            &ClusterRole {
                metadata: meta(&cluster_wide, false),
                rules: Some(cluster_scoped_rules()),
                ..Default::default()
            },
        ),
        yaml(
            rbac,
            "ClusterRoleBinding",
            &ClusterRoleBinding {
                metadata: meta(&cluster_wide, false),
                role_ref: binding_to(&cluster_wide),
                subjects: Some(vec![subject()]),
            },
        ),
        yaml(
            rbac,
            "ClusterRole",
            &ClusterRole {
                metadata: meta(NAME, false),
                rules: Some(namespaced_rules()),
                ..Default::default()
            },
        ),
    ];
    for ns in namespaces {
        let mut m = meta(NAME, false);
        m.namespace = Some(ns.clone());
        docs.push(yaml(
            rbac,
            "RoleBinding",
            &RoleBinding {
                metadata: m,
                role_ref: binding_to(NAME),
                subjects: Some(vec![subject()]),
            },
        ));
    }
    docs
}

/// The whole manifest, watching `namespaces` (none: all of them).
pub fn manifest_for(image: &str, namespaces: &[String]) -> String {
    let mut docs = vec![
        cnmysql_api::crd_yaml()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n",
    ];
    docs.push(yaml(
        "v1",
        "Namespace",
        &Namespace {
            metadata: meta(NAMESPACE, false),
            ..Default::default()
        },
    ));
    docs.push(yaml(
        "v1",
        "ServiceAccount",
        &ServiceAccount {
            metadata: meta(NAME, true),
            ..Default::default()
        },
    ));
    docs.extend(rbac(namespaces));
    // Leader election: the Lease in the operator's own namespace.
    docs.push(yaml(
        "rbac.authorization.k8s.io/v1",
        "Role",
        &Role {
            metadata: meta("cnmysql-operator-leader-election", true),
            rules: Some(vec![rule(
                &["coordination.k8s.io"],
                &["leases"],
                &[
                    "get", "list", "watch", "create", "update", "patch", "delete",
                ],
            )]),
        },
    ));
    docs.push(yaml(
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        &RoleBinding {
            metadata: meta("cnmysql-operator-leader-election", true),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: "cnmysql-operator-leader-election".into(),
            },
            subjects: Some(vec![subject()]),
        },
    ));
    docs.push(yaml(
        "apps/v1",
        "Deployment",
        &deployment_watching(image, namespaces),
    ));
    docs.push(yaml(
        "v1",
        "Service",
        &Service {
            metadata: meta("cnmysql-operator-metrics", true),
            spec: Some(ServiceSpec {
                selector: Some(labels()),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: HTTP_PORT,
                    target_port: Some(IntOrString::String("http".into())),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        },
    ));
    let mut out = String::from(
        "# Generated by `cnmysql deploy-manifest` from crates/operator/src/deploy.rs; do not edit.\n# Install: kubectl apply --server-side -f deploy/operator.yaml\n",
    );
    out.push_str(&docs.join("---\n"));
    out
}

/// `deploy/network-policy.yaml`: apply it in each namespace that holds
/// Clusters (`kubectl apply -n NS -f`). Clients (and replication) reach
/// the servers' port, the kubelet the probe port; the control port takes
/// only the operator (in `cnmysql-system`) and the instances themselves
/// (a replica copies its data from a peer's control API).
pub fn network_policy() -> String {
    use k8s_openapi::api::networking::v1::{
        NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
        NetworkPolicySpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    let port = |p: u16| NetworkPolicyPort {
        port: Some(IntOrString::Int(p.into())),
        protocol: Some("TCP".into()),
        end_port: None,
    };
    let instances = LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: crate::labels::INSTANCE.into(),
            operator: "Exists".into(),
            values: None,
        }]),
        match_labels: None,
    };
    let operator = NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(
                [(
                    "kubernetes.io/metadata.name".to_string(),
                    NAMESPACE.to_string(),
                )]
                .into(),
            ),
            match_expressions: None,
        }),
        pod_selector: Some(LabelSelector {
            match_labels: Some(labels()),
            match_expressions: None,
        }),
        ip_block: None,
    };
    let peers = NetworkPolicyPeer {
        pod_selector: Some(instances.clone()),
        ..Default::default()
    };
    use cnmysql_api::names::{CONTROL_PORT, MYSQL_PORT, PROBE_PORT};
    let policy = NetworkPolicy {
        metadata: ObjectMeta {
            name: Some("cnmysql-instances".into()),
            labels: Some(labels()),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(instances),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![
                NetworkPolicyIngressRule {
                    from: None,
                    ports: Some(vec![port(MYSQL_PORT), port(PROBE_PORT)]),
                },
                NetworkPolicyIngressRule {
                    from: Some(vec![operator, peers]),
                    ports: Some(vec![port(CONTROL_PORT)]),
                },
            ]),
            egress: None,
        }),
    };
    format!(
        "# Generated by `cnmysql deploy-manifest --network-policy` from crates/operator/src/deploy.rs; do not edit.\n# Optional: kubectl apply -n <namespace of your Clusters> -f deploy/network-policy.yaml (docs/security.md)\n{}",
        yaml("networking.k8s.io/v1", "NetworkPolicy", &policy)
    )
}
