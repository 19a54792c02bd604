//! Every invalid spec named by the issue is refused by the CLI-side checks
//! with a message naming the field, and by the CRD's own rules (CEL evaluated
//! client-side, or the schema's enums) the same way.

use cnmysql_api::{Cluster, parse_cluster, validation::crd_schema};
use serde_json::Value;

const BASE: &str = r#"
apiVersion: mysql.cnmysql.io/v1
kind: Cluster
metadata:
  name: db
spec:
  instances: 3
  minSyncReplicas: 1
  maxSyncReplicas: 1
  mysql:
    semiSync:
      enabled: true
"#;

/// Apply a JSON merge patch to the base manifest and return it as YAML text.
fn manifest(patch: Value) -> String {
    let mut v: Value = serde_saphyr::from_str(BASE).unwrap();
    merge(&mut v, patch);
    serde_json::to_string(&v).unwrap()
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(&k);
                } else {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (a, b) => *a = b,
    }
}

/// Evaluate the CRD's CEL rules (x-kubernetes-validations) on a manifest.
fn cel_errors(text: &str) -> Vec<String> {
    let object: Value = serde_saphyr::from_str(text).unwrap();
    match kube_cel::Validator::new().validate(&crd_schema(), &object, None) {
        Ok(()) => vec![],
        Err(e) => vec![format!("{e:?}")],
    }
}

#[test]
fn the_base_and_the_example_are_valid() {
    let c = parse_cluster(BASE).expect("base is valid");
    assert_eq!(c.spec.instances, 3);
    assert!(cel_errors(BASE).is_empty(), "{:?}", cel_errors(BASE));
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/cluster.yaml"
    ))
    .unwrap();
    parse_cluster(&example).expect("examples/cluster.yaml is valid");
    assert!(cel_errors(&example).is_empty());
}

#[test]
fn defaults_follow_the_spec() {
    let c = parse_cluster(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata: {name: x}\nspec: {}\n",
    )
    .unwrap();
    let s = c.spec;
    assert_eq!(s.instances, 1);
    assert_eq!((s.min_sync_replicas, s.max_sync_replicas), (0, 0));
    assert_eq!(s.failover_delay, 0);
    assert_eq!(s.max_switchover_delay, 3600);
    assert!(s.enable_primary_lease);
    assert!(!s.in_place_instance_manager_updates);
    assert_eq!(
        s.primary_update_method,
        cnmysql_api::PrimaryUpdateMethod::Switchover
    );
    assert_eq!(
        s.primary_update_strategy,
        cnmysql_api::PrimaryUpdateStrategy::Unsupervised
    );
    assert_eq!(s.mysql.flavor, cnmysql_api::Flavor::Mariadb);
    assert_eq!(
        s.mysql.semi_sync.data_durability,
        cnmysql_api::DataDurability::Preferred
    );
    assert!(!s.mysql.semi_sync.enabled);
}

/// (what is wrong, patch, field the message must name, enforced by CEL)
fn cases() -> Vec<(&'static str, Value, &'static str, bool)> {
    use serde_json::json;
    vec![
        (
            "no instances",
            json!({"spec": {"instances": 0, "minSyncReplicas": 0, "maxSyncReplicas": 0, "mysql": {"semiSync": {"enabled": false}}}}),
            "spec.instances",
            true,
        ),
        (
            "negative instances",
            json!({"spec": {"instances": -2}}),
            "spec.instances",
            true,
        ),
        (
            "min above max",
            json!({"spec": {"minSyncReplicas": 2, "maxSyncReplicas": 1}}),
            "spec.minSyncReplicas",
            true,
        ),
        (
            "max reaches instances",
            json!({"spec": {"maxSyncReplicas": 3, "minSyncReplicas": 1}}),
            "spec.maxSyncReplicas",
            true,
        ),
        (
            "negative min",
            json!({"spec": {"minSyncReplicas": -1}}),
            "spec.minSyncReplicas",
            true,
        ),
        (
            "semi-sync without replicas",
            json!({"spec": {"minSyncReplicas": 0, "maxSyncReplicas": 0}}),
            "spec.mysql.semiSync.enabled",
            true,
        ),
        (
            "required without floor",
            json!({"spec": {"minSyncReplicas": 0, "mysql": {"semiSync": {"dataDurability": "required"}}}}),
            "spec.minSyncReplicas",
            true,
        ),
        (
            "negative failover delay",
            json!({"spec": {"failoverDelay": -5}}),
            "spec.failoverDelay",
            true,
        ),
        (
            "negative switchover delay",
            json!({"spec": {"maxSwitchoverDelay": -1}}),
            "spec.maxSwitchoverDelay",
            true,
        ),
        (
            "zero semi-sync timeout",
            json!({"spec": {"mysql": {"semiSync": {"timeoutMillis": 0}}}}),
            "spec.mysql.semiSync.timeoutMillis",
            true,
        ),
        (
            "rw disabled",
            json!({"spec": {"managed": {"services": {"disabledDefaultServices": ["rw"]}}}}),
            "spec.managed.services.disabledDefaultServices[0]",
            true,
        ),
        (
            "ro disabled twice",
            json!({"spec": {"managed": {"services": {"disabledDefaultServices": ["ro", "ro"]}}}}),
            "spec.managed.services.disabledDefaultServices[1]",
            true,
        ),
        (
            "additional named rw",
            json!({"spec": {"managed": {"services": {"additional": [{"name": "rw", "selectorType": "rw"}]}}}}),
            "spec.managed.services.additional[0].name",
            true,
        ),
        (
            "additional named r",
            json!({"spec": {"managed": {"services": {"additional": [{"name": "r", "selectorType": "ro"}]}}}}),
            "spec.managed.services.additional[0].name",
            true,
        ),
        (
            "additional twice",
            json!({"spec": {"managed": {"services": {"additional": [{"name": "lb", "selectorType": "rw"}, {"name": "lb", "selectorType": "ro"}]}}}}),
            "spec.managed.services.additional[1].name",
            true,
        ),
        (
            "additional bad name",
            json!({"spec": {"managed": {"services": {"additional": [{"name": "Bad_Name", "selectorType": "rw"}]}}}}),
            "spec.managed.services.additional[0].name",
            true,
        ),
        (
            "owned parameter",
            json!({"spec": {"mysql": {"parameters": {"server-id": "7"}}}}),
            "spec.mysql.parameters.server-id",
            true,
        ),
        (
            "owned read_only",
            json!({"spec": {"mysql": {"parameters": {"READ_ONLY": "0"}}}}),
            "spec.mysql.parameters.READ_ONLY",
            true,
        ),
        (
            "injected line",
            json!({"spec": {"mysql": {"parameters": {"max_connections": "10\nserver_id=9"}}}}),
            "spec.mysql.parameters.max_connections",
            true,
        ),
        // Enforced by the schema (enum / type / unknown field) rather than CEL.
        (
            "unknown flavour",
            json!({"spec": {"mysql": {"flavor": "postgres"}}}),
            "spec.mysql.flavor",
            false,
        ),
        (
            "unknown durability",
            json!({"spec": {"mysql": {"semiSync": {"dataDurability": "maybe"}}}}),
            "spec.mysql.semiSync.dataDurability",
            false,
        ),
        (
            "unknown selector type",
            json!({"spec": {"managed": {"services": {"additional": [{"name": "x", "selectorType": "primary"}]}}}}),
            "spec.managed.services.additional[0].selectorType",
            false,
        ),
        (
            "unknown update method",
            json!({"spec": {"primaryUpdateMethod": "delete"}}),
            "spec.primaryUpdateMethod",
            false,
        ),
        (
            "misspelt field",
            json!({"spec": {"instance": 3}}),
            "spec.instance",
            false,
        ),
        (
            "string instances",
            json!({"spec": {"instances": "three"}}),
            "spec.instances",
            false,
        ),
        (
            "selector in template",
            json!({"spec": {"managed": {"services": {"template": {"spec": {"selector": {"a": "b"}}}}}}}),
            "spec.managed.services.template.spec.selector",
            false,
        ),
        (
            "bad name",
            json!({"metadata": {"name": "Bad_Cluster"}}),
            "metadata.name",
            false,
        ),
        ("wrong kind", json!({"kind": "Database"}), "kind", false),
    ]
}

#[test]
fn every_invalid_spec_is_refused_naming_the_field() {
    for (what, patch, field, _) in cases() {
        let text = manifest(patch);
        let e = parse_cluster(&text).expect_err(what);
        let msg = e.to_string();
        assert!(
            e.0.iter().any(|fe| fe.field == field),
            "{what}: no error names {field}; got:\n{msg}"
        );
        // Every message says what to do, not just what is wrong.
        assert!(msg.len() > field.len() + 10, "{what}: terse message {msg}");
    }
}

#[test]
fn the_crd_rules_refuse_the_same_specs() {
    for (what, patch, field, by_cel) in cases() {
        let text = manifest(patch);
        if by_cel {
            let errs = cel_errors(&text);
            assert!(!errs.is_empty(), "{what}: CEL accepted it");
            let short = field
                .trim_start_matches("spec.")
                .split(['.', '['])
                .next()
                .unwrap();
            assert!(
                errs.join(" ").contains(short),
                "{what}: CEL message does not name {short}: {errs:?}"
            );
        }
    }
}

#[test]
fn schema_enums_cover_the_enumerated_fields() {
    let s = crd_schema();
    let spec = &s["properties"]["spec"]["properties"];
    let en = |v: &Value| v["enum"].as_array().cloned().unwrap_or_default();
    assert!(en(&spec["mysql"]["properties"]["flavor"]).contains(&Value::from("mariadb")));
    assert_eq!(en(&spec["primaryUpdateMethod"]).len(), 2);
    assert!(
        en(&spec["mysql"]["properties"]["semiSync"]["properties"]["dataDurability"])
            .contains(&Value::from("required"))
    );
}

#[test]
fn the_committed_crd_matches_the_types() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/crd.yaml");
    let want = cnmysql_api::crd_yaml();
    if std::env::var_os("CNMYSQL_UPDATE_CRD").is_some() {
        std::fs::write(path, &want).unwrap();
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "deploy/crd.yaml is out of date: run `CNMYSQL_UPDATE_CRD=1 cargo test -p cnmysql-api` (or `cnmysql crd > deploy/crd.yaml`) and commit it"
    );
}

#[test]
fn a_valid_cluster_round_trips_through_json() {
    let c = parse_cluster(BASE).unwrap();
    let text = serde_json::to_string(&c).unwrap();
    let again: Cluster = serde_json::from_str(&text).unwrap();
    assert_eq!(c.spec, again.spec);
}
