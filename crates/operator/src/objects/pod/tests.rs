use super::*;
use crate::objects::testutil::cluster;

fn env() -> Environment {
    Environment {
        operator_image: "ghcr.io/cnmysql/cnmysql:test".into(),
    }
}

/// The Secrets projected into the Pod's store and account volume, and
/// whether each is optional.
fn projected_secrets(c: &Cluster) -> Vec<(String, bool)> {
    let spec = pod(c, "db-1", &env()).spec.unwrap();
    let projected = spec
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "backup-secrets")
        .and_then(|v| v.projected)
        .unwrap();
    let secrets: Vec<(String, bool)> = projected
        .sources
        .unwrap()
        .into_iter()
        .filter_map(|s| s.secret)
        .map(|s| (s.name, s.optional.unwrap_or(false)))
        .collect();
    secrets
}

#[test]
fn an_imported_cluster_mounts_the_import_account() {
    let c = cluster("instances: 2\nbootstrap:\n  import:\n    source:\n      host: old-db\n");
    // Optional: the Pod starts, and the manager says what is missing.
    assert_eq!(
        projected_secrets(&c),
        [("db-import-source".to_string(), true)]
    );
    // With the donor's token (a `backup` import).
    let spec = pod(&c, "db-1", &env()).spec.unwrap();
    let keys: Vec<String> = spec
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "backup-secrets")
        .and_then(|v| v.projected)
        .and_then(|p| p.sources)
        .into_iter()
        .flatten()
        .filter_map(|s| s.secret?.items)
        .flatten()
        .map(|i| i.key)
        .collect();
    assert!(keys.contains(&"donor-token".to_string()), "{keys:?}");
}

#[test]
fn a_cluster_following_an_archive_mounts_its_store_credentials() {
    let c = cluster(
        "instances: 2\nreplica:\n  enabled: true\n  source:\n    objectStore:\n      destinationPath: s3://dr/east\n      serverName: east\n      s3Credentials:\n        accessKeyId: {name: east-store, key: id}\n        secretAccessKey: {name: east-store, key: secret}\n",
    );
    let secrets = projected_secrets(&c);
    assert!(
        secrets.contains(&("east-store".to_string(), false)),
        "{secrets:?}"
    );
}

#[test]
fn the_pod_runs_the_copied_manager_on_its_own_claim() {
    let c = cluster("instances: 3\n");
    let p = pod(&c, "db-2", &env());
    let spec = p.spec.unwrap();
    let init = &spec.init_containers.as_ref().unwrap()[0];
    assert_eq!(init.image.as_deref(), Some("ghcr.io/cnmysql/cnmysql:test"));
    assert_eq!(
        spec.containers[0].command.as_ref().unwrap()[0],
        MANAGER_PATH
    );
    let claim = spec
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find_map(|v| v.persistent_volume_claim.as_ref())
        .unwrap();
    assert_eq!(claim.claim_name, "db-2");
    assert_eq!(spec.service_account_name.as_deref(), Some("db"));
    let aff = spec.affinity.unwrap().pod_anti_affinity.unwrap();
    assert!(
        aff.preferred_during_scheduling_ignored_during_execution
            .is_some()
    );
    assert_eq!(
        spec.containers[0].image.as_deref(),
        Some("docker.io/library/mariadb:10.11")
    );
}

#[test]
fn role_labels_follow_the_serving_primary_and_fencing() {
    let mut st = cnmysql_api::ClusterStatus {
        current_primary: Some("db-1".into()),
        target_primary: Some("db-1".into()),
        ..Default::default()
    };
    assert_eq!(role_labels(&st, "db-1")[labels::ROLE], "primary");
    assert_eq!(role_labels(&st, "db-2")[labels::ROLE], "replica");
    // During a switchover the old primary keeps the label (it serves
    // while its target catches up, and its readiness drops once it is
    // read-only); the target gets it once it has taken over.
    st.target_primary = Some("db-2".into());
    assert_eq!(role_labels(&st, "db-1")[labels::ROLE], "primary");
    assert_eq!(role_labels(&st, "db-2")[labels::ROLE], "replica");
    // During a failover nobody is.
    st.phase = Some(cnmysql_api::Phase::FailingOver);
    assert_eq!(role_labels(&st, "db-1")[labels::ROLE], "replica");
    assert_eq!(role_labels(&st, "db-2")[labels::ROLE], "replica");
    st.fenced_instances = vec!["db-2".into()];
    assert_eq!(role_labels(&st, "db-2")[labels::ROUTABLE], "false");
    assert_eq!(role_labels(&st, "db-1")[labels::ROUTABLE], "true");
    // A replica too far behind is out of the Services too.
    st.lagging_instances = vec!["db-3".into()];
    assert_eq!(role_labels(&st, "db-3")[labels::ROUTABLE], "false");
}
