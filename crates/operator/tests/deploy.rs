//! deploy/operator.yaml is what the code generates.

#[test]
fn the_committed_operator_manifest_matches_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/operator.yaml");
    let want = cnmysql_operator::deploy::manifest(cnmysql_operator::deploy::DEFAULT_IMAGE);
    if std::env::var_os("CNMYSQL_UPDATE_DEPLOY").is_some() {
        std::fs::write(path, &want).unwrap();
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "deploy/operator.yaml is out of date: run `CNMYSQL_UPDATE_DEPLOY=1 cargo test -p cnmysql-operator --test deploy` (or `cnmysql deploy-manifest > deploy/operator.yaml`) and commit it"
    );
    // The CRD inside is the committed one.
    let crd = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crd.yaml"
    ))
    .unwrap();
    let body: String = crd
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(have.contains(&body));
}

#[test]
fn the_committed_network_policy_matches_the_code_and_opens_the_control_port_to_the_operator_only() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/network-policy.yaml"
    );
    let want = cnmysql_operator::deploy::network_policy();
    if std::env::var_os("CNMYSQL_UPDATE_DEPLOY").is_some() {
        std::fs::write(path, &want).unwrap();
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "deploy/network-policy.yaml is out of date: run `CNMYSQL_UPDATE_DEPLOY=1 cargo test -p cnmysql-operator --test deploy` and commit it"
    );
    let doc: serde_json::Value = serde_saphyr::from_str(&have).unwrap();
    let rules = doc["spec"]["ingress"].as_array().unwrap();
    let ports = |r: &serde_json::Value| -> Vec<i64> {
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
    let text = cnmysql_operator::deploy::manifest_for("img", &["shop".into(), "billing".into()]);
    let docs: Vec<serde_json::Value> = text
        .split("\n---\n")
        .filter_map(|d| serde_saphyr::from_str(d).ok())
        .collect();
    let kind = |k: &'static str| docs.iter().filter(move |d| d["kind"] == k);
    let bound: Vec<&str> = kind("ClusterRoleBinding")
        .map(|b| b["roleRef"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(bound, ["cnmysql-operator-cluster"]);
    let cluster_wide = kind("ClusterRole")
        .find(|r| r["metadata"]["name"] == "cnmysql-operator-cluster")
        .unwrap();
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
    let namespaces: Vec<&str> = kind("RoleBinding")
        .filter(|b| b["roleRef"]["kind"] == "ClusterRole")
        .map(|b| b["metadata"]["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(namespaces, ["shop", "billing"]);
    assert!(text.contains("CNMYSQL_WATCH_NAMESPACES"));
    assert!(text.contains("value: shop,billing"));
}
