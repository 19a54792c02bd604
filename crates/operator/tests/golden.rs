//! The objects rendered for a few Cluster specs, as golden YAML files in
//! `tests/golden/`. A change to what the operator renders shows up as a
//! diff of these files in review; `CNMYSQL_UPDATE_GOLDEN=1` rewrites them.

use cnmysql_operator::objects::{Environment, desired};

fn cluster(name: &str, spec: &str) -> cnmysql_api::Cluster {
    let text = format!(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: {name}\n  namespace: prod\n  uid: 00000000-0000-4000-8000-000000000001\nspec:\n{}",
        spec.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    cnmysql_api::parse_cluster(&text).expect("a valid golden Cluster")
}

fn render(c: &cnmysql_api::Cluster) -> String {
    let d = desired(
        c,
        &Environment {
            operator_image: "ghcr.io/cloudnative-mysql/cnmysql:0.1.0".into(),
        },
    );
    let mut docs: Vec<serde_json::Value> = vec![
        with_kind("v1", "ServiceAccount", &d.service_account),
        with_kind("rbac.authorization.k8s.io/v1", "Role", &d.role),
        with_kind(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            &d.role_binding,
        ),
    ];
    docs.extend(
        d.claims
            .iter()
            .map(|o| with_kind("v1", "PersistentVolumeClaim", o)),
    );
    docs.extend(d.pods.iter().map(|o| with_kind("v1", "Pod", o)));
    docs.extend(d.services.iter().map(|o| with_kind("v1", "Service", o)));
    docs.extend(
        d.budgets
            .iter()
            .map(|o| with_kind("policy/v1", "PodDisruptionBudget", o)),
    );
    docs.iter()
        .map(|d| serde_saphyr::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

fn with_kind<T: serde::Serialize>(api_version: &str, kind: &str, o: &T) -> serde_json::Value {
    let mut v = serde_json::to_value(o).unwrap();
    v["apiVersion"] = api_version.into();
    v["kind"] = kind.into();
    v
}

fn check(file: &str, c: &cnmysql_api::Cluster) {
    let path = format!("{}/tests/golden/{file}", env!("CARGO_MANIFEST_DIR"));
    let got = render(c);
    if std::env::var_os("CNMYSQL_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == want,
        "{file} differs from what the operator renders; review the change and run CNMYSQL_UPDATE_GOLDEN=1 cargo test -p cnmysql-operator --test golden"
    );
}

#[test]
fn defaults() {
    check("defaults.yaml", &cluster("db", "instances: 1\n"));
}

#[test]
fn semi_sync_three_instances() {
    check(
        "semi-sync.yaml",
        &cluster(
            "db",
            "instances: 3\nminSyncReplicas: 1\nmaxSyncReplicas: 1\nmysql:\n  semiSync:\n    enabled: true\n    dataDurability: required\n",
        ),
    );
}

#[test]
fn services_template_and_additional() {
    check(
        "services.yaml",
        &cluster(
            "db",
            "instances: 2\nmanaged:\n  services:\n    disabledDefaultServices: [r]\n    template:\n      metadata:\n        labels: {app.kubernetes.io/part-of: shop}\n      spec: {type: LoadBalancer}\n    additional:\n      - name: reporting\n        selectorType: ro\n        updateStrategy: replace\n        serviceTemplate:\n          spec: {type: ClusterIP, sessionAffinity: ClientIP}\n",
        ),
    );
}

#[test]
fn affinity_storage_resources_and_own_secrets() {
    check(
        "scheduling-storage.yaml",
        &cluster(
            "db",
            "instances: 2\naffinity:\n  podAntiAffinityType: required\n  topologyKey: topology.kubernetes.io/zone\n  nodeSelector: {disk: ssd}\n  tolerations:\n    - {key: dedicated, operator: Equal, value: db, effect: NoSchedule}\nstorage:\n  size: 50Gi\n  storageClass: fast-ssd\nresources:\n  requests: {cpu: 500m, memory: 1Gi}\n  limits: {memory: 1Gi}\nsecrets:\n  appSecret: shop-db-app\nmysql:\n  image: registry.example/mariadb:10.11.19\n",
        ),
    );
}

/// A replica cluster: the source's Secret projected beside the object
/// store's, its keys optional; server ids from 100.
#[test]
fn replica_cluster() {
    check(
        "replica.yaml",
        &cluster(
            "west",
            "instances: 2\nmysql:\n  serverIdBase: 100\nreplica:\n  enabled: true\n  source:\n    host: east-rw.east.svc\n",
        ),
    );
}

/// The user's server certificate: its three keys projected, required.
#[test]
fn users_server_certificate() {
    check(
        "server-tls.yaml",
        &cluster(
            "db",
            "instances: 1\nsecrets:\n  serverTlsSecret: db-server-tls\n",
        ),
    );
}

#[test]
fn instance_containers_write_nothing_but_their_volumes_and_hold_no_privilege() {
    let c = cluster("db", "instances: 2\n");
    let d = desired(
        &c,
        &Environment {
            operator_image: "img".into(),
        },
    );
    for pod in &d.pods {
        let spec = pod.spec.as_ref().unwrap();
        let all = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter());
        for container in all {
            let sc = container.security_context.as_ref().unwrap();
            assert_eq!(
                sc.read_only_root_filesystem,
                Some(true),
                "{}",
                container.name
            );
            assert_eq!(sc.allow_privilege_escalation, Some(false));
            let caps = sc.capabilities.as_ref().unwrap();
            assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
            assert!(caps.add.is_none());
        }
        let pod_sc = spec.security_context.as_ref().unwrap();
        assert_eq!(pod_sc.run_as_non_root, Some(true));
    }
}
