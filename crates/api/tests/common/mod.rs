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

/// (what is wrong, patch, field the message must name, enforced by CEL):
/// one invalid variant of the base per entry of `invalid_manifests.json`.
pub fn cases() -> Vec<(String, Value, String, bool)> {
    let all: Vec<Value> =
        serde_json::from_str(include_str!("invalid_manifests.json")).expect("valid JSON");
    all.into_iter()
        .map(|c| {
            let text = |k: &str| c[k].as_str().expect(k).to_string();
            (
                text("wrong"),
                c["patch"].clone(),
                text("field"),
                c["cel"].as_bool().expect("cel"),
            )
        })
        .collect()
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
