//! Every invalid spec named by the issue is refused by the CLI-side checks
//! with a message naming the field, and by the CRD's own rules (CEL evaluated
//! client-side, or the schema's enums) the same way.

use cnmysql_api::{Cluster, parse_cluster, validation::crd_schema};
use serde_json::Value;

mod common;
use common::{BASE, cases, manifest, oversized};

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
    for name in ["cluster.yaml", "cluster-mysql.yaml"] {
        let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
        let example = std::fs::read_to_string(&path).unwrap();
        parse_cluster(&example).unwrap_or_else(|e| panic!("examples/{name}: {e}"));
        assert!(cel_errors(&example).is_empty(), "examples/{name}");
    }
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

#[test]
fn every_invalid_spec_is_refused_naming_the_field() {
    for (what, patch, field, _) in cases() {
        let text = manifest(patch);
        let e = parse_cluster(&text).expect_err(&what);
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
fn oversized_specs_are_refused_naming_the_field() {
    for (what, patch, field) in oversized() {
        let e = parse_cluster(&manifest(patch)).expect_err(what);
        assert!(
            e.0.iter()
                .any(|fe| fe.field == field && fe.message.contains("at most")),
            "{what}: no bound error on {field}: {e}"
        );
    }
}

/// Every list, map and string a CEL rule walks declares a bound, so the API
/// server can estimate the rule's cost (it refuses the CRD otherwise).
#[test]
fn every_collection_a_rule_walks_is_bounded() {
    fn walk(v: &Value, path: &str, out: &mut Vec<String>) {
        let Some(o) = v.as_object() else { return };
        if o.contains_key("x-kubernetes-validations") {
            let bounded = match o.get("type").and_then(Value::as_str) {
                Some("array") => o.contains_key("maxItems"),
                Some("string") => o.contains_key("maxLength"),
                Some("object") if o.contains_key("additionalProperties") => {
                    o.contains_key("maxProperties")
                        && o["additionalProperties"].get("maxLength").is_some()
                }
                _ => true,
            };
            if !bounded {
                out.push(path.to_string());
            }
        }
        for (k, child) in o {
            match k.as_str() {
                "properties" => {
                    for (name, s) in child.as_object().into_iter().flatten() {
                        walk(s, &format!("{path}.{name}"), out);
                    }
                }
                "items" => walk(child, &format!("{path}[]"), out),
                _ => {}
            }
        }
    }
    let mut unbounded = Vec::new();
    walk(&crd_schema(), "", &mut unbounded);
    assert!(
        unbounded.is_empty(),
        "rules walk unbounded values: {unbounded:?}"
    );
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

#[test]
fn a_manifest_holds_one_cluster_and_its_image_catalogs_each_version_once() {
    let catalog = |versions: &[&str]| {
        let images: String = versions
            .iter()
            .map(|v| format!("  - version: \"{v}\"\n    image: mariadb:{v}\n"))
            .collect();
        format!(
            "apiVersion: mysql.cnmysql.io/v1\nkind: ClusterImageCatalog\nmetadata:\n  name: m\nspec:\n  flavor: mariadb\n  images:\n{images}---\n"
        )
    };
    let m = cnmysql_api::parse_manifest(&format!("{}{BASE}", catalog(&["10.11.18", "10.11.19"])))
        .unwrap();
    assert_eq!(m.catalogs.len(), 1);
    assert_eq!(m.cluster.spec.instances, 3);
    let e = cnmysql_api::parse_manifest(&format!("{}{BASE}", catalog(&["10.11.18", "10.11.18"])))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("(document 1) spec.images[1].version"),
        "{e}"
    );
    assert!(e.to_string().contains("listed twice"), "{e}");
    let e = cnmysql_api::parse_manifest(&format!("{}{BASE}", catalog(&["latest"]))).unwrap_err();
    assert!(e.to_string().contains("is not a server version"), "{e}");
    let e = cnmysql_api::parse_manifest(&format!("{BASE}---\n{BASE}")).unwrap_err();
    assert!(e.to_string().contains("a second Cluster"), "{e}");
}

#[test]
fn backup_and_recovery_fields_are_checked_naming_the_field() {
    let cluster = |spec: &str| {
        format!(
            "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata: {{name: x}}\nspec:\n  mysql: {{flavor: mariadb}}\n{spec}"
        )
    };
    let ok = cluster(
        "  backup:\n    objectStore: {destinationPath: 's3://b/p'}\n    retentionPolicy: 30d\n",
    );
    parse_cluster(&ok).expect("a valid backup spec");
    for (spec, field) in [
        (
            "  backup:\n    objectStore: {destinationPath: 'ftp://x'}\n",
            "spec.backup.objectStore.destinationPath",
        ),
        (
            "  backup:\n    objectStore: {destinationPath: 'file:///b'}\n    retentionPolicy: 30 days\n",
            "spec.backup.retentionPolicy",
        ),
        (
            "  bootstrap:\n    recovery:\n      source:\n        objectStore: {destinationPath: 'file:///b'}\n",
            "spec.bootstrap.recovery.source.objectStore.serverName",
        ),
        (
            "  bootstrap:\n    recovery:\n      source:\n        objectStore: {destinationPath: 'file:///b', serverName: db}\n      recoveryTarget: {targetTime: yesterday}\n",
            "spec.bootstrap.recovery.recoveryTarget.targetTime",
        ),
        (
            "  bootstrap:\n    recovery:\n      source:\n        objectStore: {destinationPath: 'file:///b', serverName: db}\n      recoveryTarget: {targetGTID: 0-1-5, targetImmediate: true}\n",
            "spec.bootstrap.recovery.recoveryTarget",
        ),
        (
            "  bootstrap:\n    recovery:\n      source: {}\n",
            "spec.bootstrap.recovery.source: names no backups",
        ),
        (
            "  bootstrap:\n    recovery:\n      source:\n        backup: {name: nightly}\n        objectStore: {destinationPath: 'file:///b', serverName: db}\n",
            "spec.bootstrap.recovery.source: names both",
        ),
        (
            "  bootstrap:\n    recovery:\n      source:\n        backup: {name: nightly}\n        backupId: '20261124T030000Z'\n",
            "spec.bootstrap.recovery.source.backupId",
        ),
    ] {
        let e = parse_cluster(&cluster(spec)).unwrap_err().to_string();
        assert!(e.contains(field), "{spec}: {e}");
    }
    // A Backup object as the source: valid, and read through the status
    // the operator resolves it into.
    let by_name = parse_cluster(&cluster(
        "  bootstrap:\n    recovery:\n      source:\n        backup: {name: nightly}\n",
    ))
    .expect("a Backup object as the source");
    let rec = by_name.spec.bootstrap.unwrap().recovery.unwrap();
    let e = rec.resolved(None).unwrap_err();
    assert!(e.contains("Backup nightly is not resolved yet"), "{e}");
    let mut st = cnmysql_api::ClusterStatus::default();
    st.backup
        .get_or_insert_with(Default::default)
        .recovery_source = Some(cnmysql_api::backup::RecoverySource {
        object_store: Some(cnmysql_api::backup::ObjectStore {
            destination_path: "s3://b/p".into(),
            server_name: Some("db".into()),
            ..Default::default()
        }),
        backup_id: Some("20261124T030000Z".into()),
        backup: None,
    });
    let r = rec.resolved(Some(&st)).unwrap();
    assert_eq!(r.object_store.server_name.as_deref(), Some("db"));
    assert_eq!(r.backup_id.as_deref(), Some("20261124T030000Z"));
    assert_eq!(
        cnmysql_api::validation::retention_seconds("2w"),
        Some(14 * 86_400)
    );
    assert_eq!(cnmysql_api::validation::retention_seconds("0d"), None);
}

/// Every setting the operator owns is refused by the CRD's rule too, not
/// only by the checks the CLI and the operator run: `kubectl apply` of a
/// Cluster that sets one (`secure_file_priv` would let mysqld read files)
/// never reaches the API server's storage.
#[test]
fn the_crd_refuses_every_owned_parameter() {
    for name in cnmysql_api::OPERATOR_OWNED_PARAMETERS {
        let text = manifest(serde_json::json!({"spec": {"mysql": {"parameters": {*name: "0"}}}}));
        assert!(
            parse_cluster(&text).is_err(),
            "{name}: the CLI checks took it"
        );
        let errs = cel_errors(&text);
        assert!(
            errs.join(" ").contains("owned by the operator")
                || errs.join(" ").contains("operator owns"),
            "{name}: the CRD took it: {errs:?}"
        );
    }
}
