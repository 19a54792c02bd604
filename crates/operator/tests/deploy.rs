//! The install generator: `deploy/operator.yaml` is its default output, and
//! each option changes what a team would look for in the objects.

use cnmysql_operator::install::{self, LogLevel, Options, Resources};
use serde_json::Value;

fn repo(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn docs(o: &Options) -> Vec<Value> {
    install::objects(o)
        .unwrap()
        .iter()
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    docs.iter().filter(move |d| d["kind"] == kind)
}

fn one<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn container(docs: &[Value]) -> &Value {
    &one(docs, "Deployment", "cnmysql-operator")["spec"]["template"]["spec"]["containers"][0]
}

fn env<'a>(docs: &'a [Value], name: &str) -> Option<&'a str> {
    container(docs)["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
}

#[test]
fn the_committed_operator_manifest_is_the_generators_default() {
    let path = repo("deploy/operator.yaml");
    let want = install::manifest();
    if std::env::var_os("CNMYSQL_UPDATE_DEPLOY").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "deploy/operator.yaml is out of date: run `CNMYSQL_UPDATE_DEPLOY=1 cargo test -p cnmysql-operator --test deploy` (or `cnmysql install generate > deploy/operator.yaml`) and commit it"
    );
    // The CRD inside is the committed one.
    let crd = std::fs::read_to_string(repo("deploy/crd.yaml")).unwrap();
    let body: String = crd
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(have.contains(&body));
}

#[test]
fn the_committed_network_policy_matches_the_code_and_opens_the_control_port_to_the_operator_only() {
    let path = repo("deploy/network-policy.yaml");
    let want = install::network_policy();
    if std::env::var_os("CNMYSQL_UPDATE_DEPLOY").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "deploy/network-policy.yaml is out of date: run `CNMYSQL_UPDATE_DEPLOY=1 cargo test -p cnmysql-operator --test deploy` and commit it"
    );
    let doc: Value = serde_saphyr::from_str(&have).unwrap();
    assert!(doc["metadata"].get("namespace").is_none());
    let rules = doc["spec"]["ingress"].as_array().unwrap();
    let ports = |r: &Value| -> Vec<i64> {
        r["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["port"].as_i64().unwrap())
            .collect()
    };
    // 3306 and the probes from anywhere; the control port from the
    // operator's namespace and the instances, nothing else.
    assert_eq!(ports(&rules[0]), [3306, 8001]);
    assert!(rules[0].get("from").is_none());
    assert_eq!(ports(&rules[1]), [8000]);
    let from = rules[1]["from"].as_array().unwrap();
    assert_eq!(from.len(), 2);
    assert_eq!(
        from[0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "cnmysql-system"
    );
    assert!(rules.iter().all(|r| !ports(r).contains(&4444)));
}

#[test]
fn a_namespaced_install_reads_secrets_only_in_its_namespaces() {
    let docs = docs(&Options {
        watch_namespaces: vec!["shop".into(), "billing".into()],
        ..Default::default()
    });
    let bound: Vec<&str> = of_kind(&docs, "ClusterRoleBinding")
        .map(|b| b["roleRef"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(bound, ["cnmysql-operator-cluster"]);
    let cluster_wide = one(&docs, "ClusterRole", "cnmysql-operator-cluster");
    let resources: Vec<&str> = cluster_wide["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
        })
        .collect();
    assert_eq!(
        resources,
        ["clusterimagecatalogs", "nodes", "storageclasses"]
    );
    let namespaces: Vec<&str> = of_kind(&docs, "RoleBinding")
        .filter(|b| b["roleRef"]["kind"] == "ClusterRole")
        .map(|b| b["metadata"]["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(namespaces, ["shop", "billing"]);
    assert_eq!(env(&docs, "CNMYSQL_WATCH_NAMESPACES"), Some("shop,billing"));
}

#[test]
fn every_namespaced_object_and_every_reference_moves_with_the_operators_namespace() {
    let o = Options {
        namespace: "db-operators".into(),
        watch_namespaces: vec!["shop".into()],
        monitoring: true,
        network_policy_namespaces: vec!["shop".into()],
        ..Default::default()
    };
    let docs = docs(&o);
    let text = install::generate(&o).unwrap();
    assert!(
        !text.contains("cnmysql-system"),
        "the default namespace is left somewhere"
    );
    assert_eq!(one(&docs, "Namespace", "db-operators")["kind"], "Namespace");
    for d in docs.iter().filter(|d| {
        matches!(
            d["kind"].as_str(),
            Some(
                "ServiceAccount"
                    | "Deployment"
                    | "Service"
                    | "Role"
                    | "PodMonitor"
                    | "PrometheusRule"
                    | "ConfigMap"
            )
        )
    }) {
        assert_eq!(d["metadata"]["namespace"], "db-operators", "{}", d["kind"]);
    }
    for b in of_kind(&docs, "RoleBinding").chain(of_kind(&docs, "ClusterRoleBinding")) {
        assert_eq!(b["subjects"][0]["namespace"], "db-operators");
    }
    let policy = one(&docs, "NetworkPolicy", "cnmysql-instances");
    assert_eq!(policy["metadata"]["namespace"], "shop");
    assert_eq!(
        policy["spec"]["ingress"][1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "db-operators"
    );
}

#[test]
fn image_replicas_resources_and_log_level_reach_the_deployment() {
    let docs = docs(&Options {
        image: "registry.example/cnmysql:1.2.3".into(),
        replicas: 2,
        resources: Resources {
            cpu_request: "200m".into(),
            memory_request: "64Mi".into(),
            memory_limit: "512Mi".into(),
            cpu_limit: Some("2".into()),
        },
        log_level: LogLevel::Debug,
        ..Default::default()
    });
    let c = container(&docs);
    assert_eq!(c["image"], "registry.example/cnmysql:1.2.3");
    // The instances' init containers come from the same image.
    assert_eq!(
        env(&docs, "CNMYSQL_OPERATOR_IMAGE"),
        Some("registry.example/cnmysql:1.2.3")
    );
    assert_eq!(env(&docs, "CNMYSQL_LOG"), Some("debug"));
    assert_eq!(
        one(&docs, "Deployment", "cnmysql-operator")["spec"]["replicas"],
        2
    );
    assert_eq!(c["resources"]["requests"]["cpu"], "200m");
    assert_eq!(c["resources"]["requests"]["memory"], "64Mi");
    assert_eq!(c["resources"]["limits"]["memory"], "512Mi");
    assert_eq!(c["resources"]["limits"]["cpu"], "2");
    // The default sets no CPU limit.
    let default = self::docs(&Options::default());
    assert!(
        container(&default)["resources"]["limits"]
            .get("cpu")
            .is_none()
    );
}

#[test]
fn monitoring_scrapes_the_operators_port_carries_the_shipped_rules_and_feeds_grafana() {
    let docs = docs(&Options {
        monitoring: true,
        monitoring_labels: [("release".to_string(), "prometheus".to_string())].into(),
        ..Default::default()
    });
    let monitor = one(&docs, "PodMonitor", "cnmysql-operator");
    let pod_labels =
        &one(&docs, "Deployment", "cnmysql-operator")["spec"]["template"]["metadata"]["labels"];
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            &pod_labels[k], v,
            "the PodMonitor selects the operator's Pods"
        );
    }
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    let port_name = &container(&docs)["ports"][0]["name"];
    assert_eq!(&endpoint["port"], port_name);
    // The series' own namespace and instance labels (the Cluster's, the
    // instance's) are kept: the rules join on them.
    assert_eq!(endpoint["honorLabels"], true);
    let rules: Value = serde_saphyr::from_str(install::RULES).unwrap();
    let rule = one(&docs, "PrometheusRule", "cnmysql");
    assert_eq!(rule["spec"]["groups"], rules["groups"]);
    assert_eq!(rule["spec"]["groups"].as_array().unwrap().len(), 3);
    let dashboard = one(&docs, "ConfigMap", "cnmysql-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value =
        serde_json::from_str(dashboard["data"]["cnmysql.json"].as_str().unwrap()).unwrap();
    assert!(json["panels"].as_array().is_some_and(|p| !p.is_empty()));
    for d in [monitor, rule, dashboard] {
        assert_eq!(d["metadata"]["labels"]["release"], "prometheus");
    }
    // None of it without --monitoring.
    let plain = self::docs(&Options::default());
    assert_eq!(of_kind(&plain, "PodMonitor").count(), 0);
    assert_eq!(of_kind(&plain, "ConfigMap").count(), 0);
}

#[test]
fn a_bad_option_writes_nothing_and_says_which() {
    let err = install::generate(&Options {
        namespace: "Bad".into(),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(err.len(), 1);
    assert!(err[0].starts_with("--namespace \"Bad\""), "{err:?}");
}

#[test]
fn the_scrape_config_for_a_plain_prometheus_does_what_the_pod_monitor_does() {
    let o = Options {
        namespace: "db-operators".into(),
        ..Default::default()
    };
    let job = install::scrape_config(&o, Some("/etc/prometheus/kubeconfig"));
    assert_eq!(job["honor_labels"], true);
    assert_eq!(job["metrics_path"], "/metrics");
    let sd = &job["kubernetes_sd_configs"][0];
    assert_eq!(sd["role"], "pod");
    assert_eq!(
        sd["namespaces"]["names"],
        serde_json::json!(["db-operators"])
    );
    assert_eq!(sd["kubeconfig_file"], "/etc/prometheus/kubeconfig");
    let keeps: Vec<(String, String)> = job["relabel_configs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "keep")
        .map(|r| {
            (
                r["source_labels"][0].as_str().unwrap().to_string(),
                r["regex"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        keeps,
        [
            (
                "__meta_kubernetes_pod_label_app_kubernetes_io_name".to_string(),
                "cnmysql-operator".to_string()
            ),
            (
                "__meta_kubernetes_pod_container_port_name".to_string(),
                "http".to_string()
            ),
        ]
    );
}
