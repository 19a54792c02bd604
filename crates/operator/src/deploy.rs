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
pub fn cluster_role() -> ClusterRole {
    let watch = ["get", "list", "watch"];
    ClusterRole {
        metadata: meta(NAME, false),
        rules: Some(vec![
            // patch: the cnmysql.io/upgrade-* annotations it keeps on a
            // Cluster (annotation-driven upgrades).
            rule(
                &["mysql.cnmysql.io"],
                &["clusters"],
                &["get", "list", "watch", "patch"],
            ),
            rule(
                &["mysql.cnmysql.io"],
                &["imagecatalogs", "clusterimagecatalogs"],
                &watch,
            ),
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
            // A primary on a cordoned node hands over before the drain.
            rule(&[""], &["nodes"], &watch),
            // Whether a claim's class can grow (allowVolumeExpansion).
            rule(&["storage.k8s.io"], &["storageclasses"], &watch),
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
        ]),
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
    let container = Container {
        name: "operator".into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![OPERATOR_BINARY.into(), "operator".into()]),
        env: Some(vec![
            env_field("POD_NAME", "metadata.name"),
            env_field("POD_NAMESPACE", "metadata.namespace"),
            EnvVar {
                name: "CNMYSQL_OPERATOR_IMAGE".into(),
                value: Some(image.into()),
                value_from: None,
            },
        ]),
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

/// The whole manifest.
pub fn manifest(image: &str) -> String {
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
    docs.push(yaml(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        &cluster_role(),
    ));
    docs.push(yaml(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        &ClusterRoleBinding {
            metadata: meta(NAME, false),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: NAME.into(),
            },
            subjects: Some(vec![subject()]),
        },
    ));
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
    docs.push(yaml("apps/v1", "Deployment", &deployment(image)));
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
