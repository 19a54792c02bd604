//! The Pod of one instance, `<cluster>-<ordinal>` (no StatefulSet: the
//! operator decides which instance is recreated when, and on which claim).
//!
//! - `bootstrap-controller` (init, operator image) copies the instance
//!   manager to `/controller/manager`, so the database image needs nothing
//!   of ours and every instance runs the operator's build of the manager;
//! - `mysql` (server image) runs `/controller/manager instance run` as PID 1,
//!   which supervises mysqld;
//! - the data claim, the instance's certificate and the cluster's passwords
//!   are mounted; name, namespace and IP come from the downward API;
//! - probes use the manager's plain-HTTP probe port (the kubelet has no
//!   client certificate for the mutual-TLS control port).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, KeyToPath, Lifecycle, LifecycleHandler, ObjectFieldSelector,
    PersistentVolumeClaimVolumeSource, Pod, PodAffinityTerm, PodAntiAffinity, PodSecurityContext,
    PodSpec, Probe, ProjectedVolumeSource, SeccompProfile, SecretProjection, SecretVolumeSource,
    SecurityContext, Volume, VolumeMount, VolumeProjection, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use cnmysql_api::names::{CONTROL_PORT, MYSQL_PORT, PROBE_PORT};
use cnmysql_api::{AntiAffinityType, Cluster};

use super::image::instance_image;

use super::Environment;
use crate::labels::{self, CLUSTER, instance_labels};

pub use cnmysql_api::names::MANAGER_PATH;
/// The operator binary inside the operator image.
pub const OPERATOR_BINARY: &str = "/usr/local/bin/cnmysql";
/// The claim's mount point; the server's data directory is below it.
pub const DATA_MOUNT: &str = "/var/lib/cnmysql";
pub const RUN_MOUNT: &str = "/run/cnmysql";
/// The binary logs' claim's mount point (`spec.storage.binlogs`); the logs
/// are in `binlog/` below it.
pub const BINLOG_MOUNT: &str = "/var/lib/cnmysql-binlog";
pub const TLS_MOUNT: &str = "/etc/cnmysql/tls";
pub const SECRETS_MOUNT: &str = "/etc/cnmysql/secrets";
/// Where the Secret keys the object store names are mounted.
pub const BACKUP_SECRETS_MOUNT: &str = "/etc/cnmysql/backup-secrets";
/// User and group of the server in the MariaDB and Percona images.
pub const MYSQL_UID: i64 = 999;
/// Enough for a clean shutdown (the manager gives mysqld 90 s) and the
/// lease release before the kubelet kills the Pod.
pub const TERMINATION_GRACE_SECONDS: i64 = 120;

/// An environment variable read from the Pod's own fields.
pub(crate) fn field_env(name: &str, path: &str) -> EnvVar {
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

pub(crate) fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(read_only),
        ..Default::default()
    }
}

fn on_probe_port(path: &str) -> HTTPGetAction {
    HTTPGetAction {
        path: Some(path.into()),
        port: IntOrString::String("probes".into()),
        scheme: Some("HTTP".into()),
        ..Default::default()
    }
}

/// A Pod deleted gracefully holds its shutdown while a primary hands its
/// role over (`cnmysql_core::handover`): the kubelet sends SIGTERM only
/// once the hook answers.
fn prestop_hook() -> Lifecycle {
    Lifecycle {
        pre_stop: Some(LifecycleHandler {
            http_get: Some(on_probe_port("/prestop")),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(on_probe_port(path)),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(5),
        ..Default::default()
    }
}

fn port(name: &str, number: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: i32::from(number),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

fn secret_items(secret: String, key: &str, path: &str) -> VolumeProjection {
    VolumeProjection {
        secret: Some(SecretProjection {
            name: secret,
            items: Some(vec![KeyToPath {
                key: key.into(),
                path: path.into(),
                mode: None,
            }]),
            optional: Some(false),
        }),
        ..Default::default()
    }
}

/// Keys of one Secret, each at `<Secret>/<key>` beside the object store's.
fn secret_keys(secret: String, keys: &[&str], optional: bool) -> VolumeProjection {
    VolumeProjection {
        secret: Some(SecretProjection {
            items: Some(
                keys.iter()
                    .map(|k| KeyToPath {
                        key: k.to_string(),
                        path: format!("{secret}/{k}"),
                        mode: None,
                    })
                    .collect(),
            ),
            name: secret,
            optional: Some(optional),
        }),
        ..Default::default()
    }
}

/// A replica cluster's source credentials (`replica.rs`); optional, so
/// that the client certificate may be left out and the Secret made after
/// the Pod (the kubelet fills it in when it appears).
fn replica_source_items(cluster: &str) -> VolumeProjection {
    account_items(cnmysql_api::replica::source_secret(cluster), &[])
}

/// An import's source credentials (`import.rs`): optional in the same way,
/// with the token of the source's `cnmysql donor` (a `backup` import).
fn import_source_items(cluster: &str) -> VolumeProjection {
    use cnmysql_api::replica::DONOR_TOKEN_KEY;
    account_items(
        cnmysql_api::import::import_secret(cluster),
        &[DONOR_TOKEN_KEY],
    )
}

/// The keys of a Secret with an account on a server outside the cluster.
fn account_items(secret: String, more: &[&str]) -> VolumeProjection {
    use cnmysql_api::replica::{CA_KEY, CERT_KEY, KEY_KEY, PASSWORD_KEY, USERNAME_KEY};
    let keys: Vec<&str> = [USERNAME_KEY, PASSWORD_KEY, CA_KEY, CERT_KEY, KEY_KEY]
        .into_iter()
        .chain(more.iter().copied())
        .collect();
    secret_keys(secret, &keys, true)
}

/// The certificate mysqld presents (`spec.secrets.serverTlsSecret`): every
/// key required, so a Pod waits for the Secret rather than start without.
fn server_tls_items(secret: &str) -> VolumeProjection {
    use cnmysql_api::replica::{CA_KEY, CERT_KEY, KEY_KEY};
    secret_keys(secret.to_string(), &[CERT_KEY, KEY_KEY, CA_KEY], false)
}

fn affinity(cluster: &Cluster) -> Option<Affinity> {
    let a = &cluster.spec.affinity;
    if !a.enable_pod_anti_affinity {
        return None;
    }
    let term = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(CLUSTER.to_string(), cluster.name_any())])),
            match_expressions: None,
        }),
        topology_key: a.topology_key.clone(),
        ..Default::default()
    };
    let anti = match a.pod_anti_affinity_type {
        AntiAffinityType::Required => PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![term]),
            ..Default::default()
        },
        AntiAffinityType::Preferred => PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: term,
                },
            ]),
            ..Default::default()
        },
    };
    Some(Affinity {
        pod_anti_affinity: Some(anti),
        ..Default::default()
    })
}

/// The annotations a new Pod of `instance` carries: its definition, and
/// its annotation-driven upgrade (`cnmysql.io/upgrade-to` and its
/// progress) as the status records it, so that a Pod recreated for the
/// upgrade still says what was asked and where it stands.
fn pod_annotations(cluster: &Cluster, instance: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::from([(
        super::definition::ANNOTATION.to_string(),
        super::definition::encode(&super::definition::of(cluster, instance)),
    )]);
    let record = cluster
        .status
        .as_ref()
        .and_then(|s| s.instance_upgrades.get(instance));
    if let Some(r) = record.filter(|r| !r.upgrade_to.is_empty()) {
        out.insert(
            cnmysql_core::upgrade::annotations::UPGRADE_TO.to_string(),
            r.upgrade_to.clone(),
        );
        for (k, v) in cnmysql_core::upgrade::annotated::mirror(Some(r)) {
            if let Some(v) = v {
                out.insert(k, v);
            }
        }
    }
    out
}

/// The Pod's volumes: the manager's copy, the claim, run, TLS, the
/// passwords, and the Secrets an object store names (with their mount).
fn volumes(cluster: &Cluster, instance: &str) -> (Vec<Volume>, Option<VolumeMount>) {
    let name = cluster.name_any();
    let secrets = &cluster.spec.secrets;
    let app = secrets
        .app_secret
        .clone()
        .unwrap_or_else(|| labels::app_secret(&name));
    let root = secrets
        .root_secret
        .clone()
        .unwrap_or_else(|| labels::root_secret(&name));
    let mut volumes = vec![
        Volume {
            name: "controller".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: instance.into(),
                read_only: Some(false),
            }),
            ..Default::default()
        },
        Volume {
            name: "run".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        // The root filesystem is read-only: a writable /tmp for the
        // programs that expect one (mariadb-backup's own temporary files).
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        Volume {
            name: "tls".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(labels::instance_tls_secret(instance)),
                default_mode: Some(0o440),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: "secrets".into(),
            projected: Some(ProjectedVolumeSource {
                default_mode: Some(0o440),
                sources: Some(vec![
                    secret_items(root, "password", "admin-password"),
                    secret_items(
                        labels::replication_secret(&name),
                        "password",
                        "replication-password",
                    ),
                    secret_items(app, "password", "app-password"),
                ]),
            }),
            ..Default::default()
        },
    ];
    let binlogs = cluster.spec.storage.binlogs.is_some();
    if binlogs {
        volumes.push(Volume {
            name: "binlog".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: format!("{instance}{}", super::storage::BINLOG_SUFFIX),
                read_only: Some(false),
            }),
            ..Default::default()
        });
    }
    // The Secrets the object stores name (archiving, recovery, a binlog
    // archive followed): each key at `<mount>/<Secret>/<key>`.
    let mut refs: Vec<cnmysql_api::backup::SecretKeyRef> = Vec::new();
    if let Some(b) = &cluster.spec.backup {
        refs.extend(b.object_store.secret_refs().into_iter().cloned());
    }
    if let Some(r) = cluster.spec.recovery()
        && let Ok(src) = r.resolved(cluster.status.as_ref())
    {
        refs.extend(src.object_store.secret_refs().into_iter().cloned());
    }
    if let Some(o) = cluster
        .spec
        .replica
        .as_ref()
        .and_then(|r| r.source.object_store.as_ref())
    {
        refs.extend(o.secret_refs().into_iter().cloned());
    }
    refs.sort();
    refs.dedup();
    let mut sources: Vec<VolumeProjection> = refs
        .iter()
        .map(|r| secret_items(r.name.clone(), &r.key, &format!("{}/{}", r.name, r.key)))
        .collect();
    if cluster.spec.replica.is_some() {
        sources.push(replica_source_items(&cluster.name_any()));
    }
    if cluster.spec.import().is_some() {
        sources.push(import_source_items(&cluster.name_any()));
    }
    if let Some(secret) = &cluster.spec.secrets.server_tls_secret {
        sources.push(server_tls_items(secret));
    }
    let mut backup_mount = None;
    if !sources.is_empty() {
        volumes.push(Volume {
            name: "backup-secrets".into(),
            projected: Some(ProjectedVolumeSource {
                default_mode: Some(0o440),
                sources: Some(sources),
            }),
            ..Default::default()
        });
        backup_mount = Some(mount("backup-secrets", BACKUP_SECRETS_MOUNT, true));
    }
    (volumes, backup_mount)
}

/// The Pod of `instance`, without the role labels (see [`role_labels`]).
pub fn pod(cluster: &Cluster, instance: &str, env_: &Environment) -> Pod {
    let name = cluster.name_any();
    let image = instance_image(cluster, instance);
    let (volumes, backup_mount) = volumes(cluster, instance);
    let binlogs = cluster.spec.storage.binlogs.is_some();
    let bootstrap = Container {
        name: "bootstrap-controller".into(),
        image: Some(env_.operator_image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![
            OPERATOR_BINARY.into(),
            "instance".into(),
            "bootstrap-controller".into(),
            MANAGER_PATH.into(),
        ]),
        volume_mounts: Some(vec![mount("controller", "/controller", false)]),
        security_context: Some(container_security()),
        ..Default::default()
    };
    let mysql = Container {
        name: "mysql".into(),
        image: Some(image),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![
            MANAGER_PATH.into(),
            "instance".into(),
            "run".into(),
            "--kubernetes".into(),
        ]),
        env: Some(
            vec![
                env("CNMYSQL_CLUSTER", &name),
                field_env("CNMYSQL_INSTANCE", "metadata.name"),
                field_env("CNMYSQL_NAMESPACE", "metadata.namespace"),
                field_env("CNMYSQL_POD_IP", "status.podIP"),
                env("CNMYSQL_DATA", DATA_MOUNT),
                env("CNMYSQL_RUN", RUN_MOUNT),
                env("CNMYSQL_TLS", TLS_MOUNT),
                env("CNMYSQL_SECRETS", SECRETS_MOUNT),
            ]
            .into_iter()
            .chain(
                backup_mount
                    .is_some()
                    .then(|| env("CNMYSQL_BACKUP_SECRETS", BACKUP_SECRETS_MOUNT)),
            )
            .chain(binlogs.then(|| env("CNMYSQL_BINLOGS", BINLOG_MOUNT)))
            .collect(),
        ),
        ports: Some(vec![
            port("mysql", MYSQL_PORT),
            port("control", CONTROL_PORT),
            port("probes", PROBE_PORT),
        ]),
        // A clone of a large database may take long: the startup probe
        // allows an hour before liveness applies. It and readiness check
        // every second so that a restarted instance is routed again as soon
        // as it is up (readiness every 2 s cost a restarted primary up to
        // 2 s more out of rw on the real node). Until the manager has been
        // ready once, readiness holds a "not ready" answer up to 0.9 s for
        // the instance to become ready (the kubelet asks again only a second
        // later), well inside the probe's 5 s timeout.
        startup_probe: Some(probe("/healthz", 1, 3600)),
        liveness_probe: Some(probe("/healthz", 10, 3)),
        readiness_probe: Some(probe("/readyz?waitMillis=900", 1, 3)),
        lifecycle: Some(prestop_hook()),
        resources: cluster.spec.resources.clone(),
        volume_mounts: Some(
            vec![
                // Writable: an in-place upgrade puts the new manager here.
                mount("controller", "/controller", false),
                mount("data", DATA_MOUNT, false),
                mount("run", RUN_MOUNT, false),
                mount("tmp", "/tmp", false),
                mount("tls", TLS_MOUNT, true),
                mount("secrets", SECRETS_MOUNT, true),
            ]
            .into_iter()
            .chain(backup_mount)
            .chain(binlogs.then(|| mount("binlog", BINLOG_MOUNT, false)))
            .collect(),
        ),
        security_context: Some(container_security()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let a = &cluster.spec.affinity;
    Pod {
        metadata: kube::api::ObjectMeta {
            annotations: Some(pod_annotations(cluster, instance)),
            ..super::meta(
                cluster,
                instance.to_string(),
                instance_labels(&name, instance),
            )
        },
        spec: Some(PodSpec {
            init_containers: Some(vec![bootstrap]),
            containers: vec![mysql],
            volumes: Some(volumes),
            service_account_name: Some(name.clone()),
            automount_service_account_token: Some(true),
            enable_service_links: Some(false),
            restart_policy: Some("Always".into()),
            termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
            affinity: affinity(cluster),
            node_selector: (!a.node_selector.is_empty()).then(|| a.node_selector.clone()),
            tolerations: (!a.tolerations.is_empty()).then(|| a.tolerations.clone()),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(MYSQL_UID),
                run_as_group: Some(MYSQL_UID),
                fs_group: Some(MYSQL_UID),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// Both containers: no privilege, no capability, and a root filesystem
/// nothing can write (what is written goes to the volumes).
pub(crate) fn container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        ..Default::default()
    }
}

/// The role and routing labels of an instance's Pod, from the Cluster
/// status: `primary` only for the settled current primary (so rw never
/// routes to an instance before its promotion is recorded), and routable
/// unless fenced, diverged or lagging (a replica too far behind).
pub fn role_labels(
    status: &cnmysql_api::ClusterStatus,
    instance: &str,
) -> BTreeMap<String, String> {
    let primary = cnmysql_core::services::primary_may_serve(status, instance);
    let out_of_service = cnmysql_core::services::out_of_service(status, instance);
    BTreeMap::from([
        (
            labels::ROLE.to_string(),
            if primary {
                labels::ROLE_PRIMARY
            } else {
                labels::ROLE_REPLICA
            }
            .to_string(),
        ),
        (labels::ROUTABLE.to_string(), (!out_of_service).to_string()),
    ])
}

#[cfg(test)]
mod tests;
