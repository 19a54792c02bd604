//! The Cluster manifests shared by the validation tests and the real-API
//! CRD test: a valid base, and every invalid variant with the field its
//! error must name.

#![allow(dead_code)]

use serde_json::Value;

pub const BASE: &str = r#"
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
pub fn manifest(patch: Value) -> String {
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

/// (what is wrong, patch, field the message must name, enforced by CEL)
pub fn cases() -> Vec<(&'static str, Value, &'static str, bool)> {
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
            "certificates living under a minute",
            json!({"spec": {"secrets": {"certificateLifetimeSeconds": 30}}}),
            "spec.secrets.certificateLifetimeSeconds",
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
        (
            "image and catalog",
            json!({"spec": {"mysql": {"image": "mariadb:10.11", "version": "10.11.19", "imageCatalogRef": {"name": "mariadb"}}}}),
            "spec.mysql.imageCatalogRef",
            true,
        ),
        (
            "catalog without version",
            json!({"spec": {"mysql": {"imageCatalogRef": {"kind": "ClusterImageCatalog", "name": "mariadb"}}}}),
            "spec.mysql.version",
            true,
        ),
        // Enforced by the schema (enum / type / pattern / format / unknown
        // field) rather than CEL.
        (
            "a version that is not one",
            json!({"spec": {"mysql": {"version": "latest"}}}),
            "spec.mysql.version",
            false,
        ),
        (
            "upgradeAt not a time",
            json!({"spec": {"mysql": {"upgradeAt": "tomorrow"}}}),
            "spec.mysql.upgradeAt",
            false,
        ),
        (
            "window start not a time",
            json!({"spec": {"maintenanceWindow": {"start": "25:00", "duration": "2h"}}}),
            "spec.maintenanceWindow.start",
            false,
        ),
        (
            "window duration not one",
            json!({"spec": {"maintenanceWindow": {"start": "02:00", "duration": "2 hours"}}}),
            "spec.maintenanceWindow.duration",
            false,
        ),
        (
            "unknown catalog kind",
            json!({"spec": {"mysql": {"version": "10.11.19", "imageCatalogRef": {"kind": "Catalog", "name": "x"}}}}),
            "spec.mysql.imageCatalogRef.kind",
            false,
        ),
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
        (
            "replica source without a host",
            json!({"spec": {"replica": {"enabled": true, "source": {"host": ""}}}}),
            "spec.replica.source.host",
            false,
        ),
    ]
}

/// Manifests over the size bounds of the schema: (what, patch, field).
pub fn oversized() -> Vec<(&'static str, Value, &'static str)> {
    use serde_json::json;
    let many: serde_json::Map<String, Value> = (0..300)
        .map(|i| (format!("p{i}"), Value::from("1")))
        .collect();
    let services: Vec<Value> = (0..40)
        .map(|i| json!({"name": format!("s{i}"), "selectorType": "ro"}))
        .collect();
    vec![
        (
            "too many parameters",
            json!({"spec": {"mysql": {"parameters": many}}}),
            "spec.mysql.parameters",
        ),
        (
            "a huge parameter value",
            json!({"spec": {"mysql": {"parameters": {"init_connect": "x".repeat(5000)}}}}),
            "spec.mysql.parameters.init_connect",
        ),
        (
            "too many additional Services",
            json!({"spec": {"managed": {"services": {"additional": services}}}}),
            "spec.managed.services.additional",
        ),
        (
            "a long image",
            json!({"spec": {"mysql": {"image": "i".repeat(600)}}}),
            "spec.mysql.image",
        ),
    ]
}
